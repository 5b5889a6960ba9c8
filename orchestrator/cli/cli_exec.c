/* cli_exec.c — `--exec -- PROG ARGS` of launch and agent: the program every worker slot runs instead of
 * `xdc worker` (a program on libxdc, docs/api.md). */
#include "orchestrator/cli/xdc_cli.h"

#include <stdio.h>
#include <string.h>

int xdc_cli_exec_tail(const char *cmd, int exec, int argc, char **argv, int optind_now, char *const **out)
{
    *out = NULL;
    if (!exec) return optind_now == argc ? 0 : XDC_EX_USAGE;
    if (optind_now >= argc || optind_now < 2 || strcmp(argv[optind_now - 1], "--") != 0) {
        fprintf(stderr, "xdc %s: --exec wants the program after '--': --exec -- PROG [ARGS...]\n", cmd);
        return XDC_EX_USAGE;
    }
    *out = argv + optind_now; /* NULL-terminated: argv[argc] is NULL */
    return 0;
}
