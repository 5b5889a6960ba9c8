/* orch_proc.h — child processes for the launcher and the agent: start `xdc <command>` (this same
 * binary) with an environment and output files, each in its own process group so a whole subtree can
 * be stopped, and describe how a child ended. */
#ifndef ORCH_PROC_H
#define ORCH_PROC_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <sys/types.h>

/* Start this binary with argv (argv[0] is the subcommand, NULL-terminated) and `env` (NULL-terminated
 * "KEY=VALUE" strings added to our own environment). stdout_path / stderr_path: NULL inherits ours;
 * the same path for both shares one file (appended). */
xdc_err_t orch_proc_spawn(char *const argv[], char *const env[], const char *stdout_path, const char *stderr_path,
                          pid_t *pid, xdc_diag *diag);
/* Signal a child's process group. */
void orch_proc_signal(pid_t pid, int sig);
/* "exited with status 3" / "killed by signal 9 (Killed)". */
void orch_proc_describe(int status, char *buf, size_t cap);
/* Split "host:port" (port 1..65535); -1 when the text is not that. */
int orch_split_hostport(const char *text, char *host, size_t cap, int *port);
/* Path of this executable (for re-executing subcommands). */
const char *orch_proc_self(void);

#endif /* ORCH_PROC_H */
