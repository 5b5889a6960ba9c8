/* cmd_trace.c — `xdc trace merge OUT.json IN.json...`: merge per-rank Chrome trace files (trace-<rank>.json)
 * into one file Perfetto opens with every rank as a process and its lanes as named rows. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_err.h"
#include "orchestrator/obs/orch_trace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int trace_usage(FILE *f)
{
    fprintf(f, "usage: xdc trace merge OUT.json IN.json [IN.json...]\n"
               "  Merge per-rank Chrome trace files into OUT.json (open it in https://ui.perfetto.dev).\n"
               "  Exit 66 when an input cannot be read, 65 when one is not a trace, 74 when OUT cannot be written.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

int xdc_cmd_trace(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return trace_usage(stdout);
    if (argc < 4 || strcmp(argv[1], "merge") != 0) return trace_usage(stderr);
    for (int i = 3; i < argc; i++) {
        if (access(argv[i], R_OK) != 0) {
            fprintf(stderr, "xdc: trace merge: cannot read %s: %s\n", argv[i], strerror(errno));
            return XDC_EX_NOINPUT;
        }
    }
    xdc_diag diag = {{0}};
    xdc_err_t rc = orch_trace_merge(argv[2], (const char *const *)argv + 3, argc - 3, &diag);
    if (rc != XDC_OK) {
        fprintf(stderr, "xdc: %s\n", diag.msg[0] ? diag.msg : xdc_strerror(rc));
        return xdc_cli_exit_code(rc);
    }
    printf("merged %d trace files into %s\n", argc - 3, argv[2]);
    return XDC_EX_OK;
}
