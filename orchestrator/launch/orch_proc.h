/* orch_proc.h — child processes for the launcher and the agent: start `xdc <command>` (this same
 * binary) with an environment and output files, each in its own process group so a whole subtree can
 * be stopped, describe how a child ended, and the one supervise loop both use (orch_procs): wait on
 * the children's pidfds and a self-pipe for SIGINT/SIGTERM with poll(), stop with SIGTERM and, one grace
 * period later, SIGKILL, and reap. */
#ifndef ORCH_PROC_H
#define ORCH_PROC_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Start `program` with argv (NULL-terminated, argv[0] the program's name; a program without '/' is looked
 * up in PATH), or with program NULL this binary with argv[0] the subcommand, and `env` (NULL-terminated
 * "KEY=VALUE" strings added to our own environment). stdout_path / stderr_path: NULL inherits ours;
 * the same path for both shares one file (appended). A program path that is not executable is
 * XDC_ERR_UNAVAILABLE naming it; an exec that fails in the child ends it with status 69 and a line on its
 * stderr. */
xdc_err_t orch_proc_spawn(const char *program, char *const argv[], char *const env[], const char *stdout_path,
                          const char *stderr_path, pid_t *pid, xdc_diag *diag);
/* Signal a child's process group. */
void orch_proc_signal(pid_t pid, int sig);
/* "exited with status 3" / "killed by signal 9 (Killed)". */
void orch_proc_describe(int status, char *buf, size_t cap);
/* Split "host:port" (port 1..65535); -1 when the text is not that. */
int orch_split_hostport(const char *text, char *host, size_t cap, int *port);
/* Path of this executable (for re-executing subcommands). */
const char *orch_proc_self(void);

/* The grace period between SIGTERM and SIGKILL when a supervisor stops its children. A supervisor whose
 * children supervise children of their own (the launcher's agents) waits one grace per level below it,
 * so the level underneath runs out of its own grace, and kills, first. */
#define ORCH_PROC_GRACE_MS 5000
#define ORCH_PROCS_MAX     256
#define ORCH_PROC_NAME_MAX 160

/* A set of supervised children. */
typedef struct orch_procs {
    int n, alive;
    pid_t pid[ORCH_PROCS_MAX]; /* 0 once reaped */
    int pidfd[ORCH_PROCS_MAX]; /* -1 where the kernel has no pidfd_open (then the wait polls every 50 ms) */
    char name[ORCH_PROCS_MAX][ORCH_PROC_NAME_MAX];
    int grace_ms;
    int stopping;     /* SIGTERM sent */
    uint64_t kill_at; /* SIGKILL deadline while stopping; 0 once sent */
} orch_procs;

/* `levels`: how many levels of supervised processes sit below these children (1 for workers, 2 for
 * agents): the grace is levels x ORCH_PROC_GRACE_MS. */
void orch_procs_init(orch_procs *g, int levels);
/* orch_proc_spawn() plus bookkeeping; `name` names the child in messages. */
xdc_err_t orch_procs_spawn(orch_procs *g, const char *name, const char *program, char *const argv[], char *const env[],
                           const char *stdout_path, const char *stderr_path, xdc_diag *diag);
/* SIGTERM to every live child's process group; SIGKILL follows after the grace (in the supervise loop). */
void orch_procs_stop(orch_procs *g);
/* SIGKILL to every live child's process group now. */
void orch_procs_kill(orch_procs *g);
/* Close the pidfds; children still alive are not waited for. */
void orch_procs_close(orch_procs *g);

/* Catch SIGINT and SIGTERM from now on: recorded (orch_proc_stop_signal) and waking the supervise loop.
 * Idempotent. */
void orch_proc_catch_stop_signals(void);
/* The last stop signal caught, 0 if none. */
int orch_proc_stop_signal(void);

/* What the supervise loop calls back; every member may be NULL / 0. */
typedef struct orch_supervisor {
    void *ctx;
    int tick_ms; /* period of `tick`; <= 0: no periodic work (the loop sleeps until a child ends or a signal) */
    int linger;  /* keep going with no child alive until `tick` ends the run (the coordinator) */
    /* Periodic work while the run is healthy: return an error to fail the run (the children are stopped),
     * or set *done to end it. */
    xdc_err_t (*tick)(void *ctx, int *done);
    /* Child i (process `pid`) ended with `status` (waitpid) other than exit 0 while the run was healthy: say
     * so, and return 1 when the run goes on without it (an elastic run that lost a region), 0 to fail it. */
    int (*failed)(void *ctx, const orch_procs *g, int i, pid_t pid, int status);
    /* A stop signal arrived while the run was healthy. */
    void (*interrupted)(void *ctx, int sig);
} orch_supervisor;

/* Supervise until every child has ended (and, with linger, until tick ends the run). The first failure
 * that `failed` does not let pass stops the others (SIGTERM, SIGKILL after the grace) and later ones are not reported. Returns XDC_OK
 * when every child exited 0; XDC_ERR_INTERRUPTED after SIGINT/SIGTERM; XDC_ERR_PEER_LOST when a child
 * failed, with *child_exit its exit status (0 when a signal ended it); or tick's error. When called
 * with the children already stopping (a failed start), it only waits for them and returns XDC_OK. */
xdc_err_t orch_procs_supervise(orch_procs *g, const orch_supervisor *s, int *child_exit);

#endif /* ORCH_PROC_H */
