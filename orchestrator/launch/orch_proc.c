/* orch_proc.c — spawning and supervising child processes (see orch_proc.h). */
#include "orchestrator/launch/orch_proc.h"

#include "common/xdc_time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

const char *orch_proc_self(void)
{
    static char path[PATH_MAX];
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) snprintf(path, sizeof path, "xdc");
        else path[n] = '\0';
    }
    return path;
}

static void redirect(const char *path, int fd)
{
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (f < 0) return;
    dup2(f, fd);
    close(f);
}

xdc_err_t orch_proc_spawn(const char *program, char *const argv[], char *const env[], const char *stdout_path,
                          const char *stderr_path, pid_t *pid, xdc_diag *diag)
{
    if (program && strchr(program, '/') && access(program, X_OK) != 0) {
        xdc_diag_set(diag, "cannot execute %s: %s", program, strerror(errno));
        return XDC_ERR_UNAVAILABLE;
    }
    const char *self = orch_proc_self();
    /* Build the child's argv before fork: the parent has threads, so the child must not allocate. argv[0]
     * of this binary's child is the binary; the caller's argv starts at the subcommand. */
    int n = 0;
    while (argv[n]) n++;
    char **full = calloc((size_t)n + 2, sizeof *full);
    if (!full) return XDC_ERR_NOMEM;
    full[0] = (char *)self;
    memcpy(full + 1, argv, (size_t)n * sizeof *full);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0) {
        free(full);
        xdc_diag_set(diag, "fork: %s", strerror(errno));
        return XDC_ERR_UNAVAILABLE;
    }
    if (p == 0) {
        setpgid(0, 0);
        /* A child outlives nothing: when its launcher or agent dies (killed, or its terminal hung up),
         * it gets SIGTERM and stops its own children in turn. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(75);
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        if (stdout_path) redirect(stdout_path, 1);
        if (stderr_path) redirect(stderr_path, 2);
        if (program) execvp(program, argv);
        else execv(self, full);
        static const char msg[] = "xdc: cannot execute the program (exec failed): ";
        const char *why = strerror(errno);
        ssize_t w = write(2, msg, sizeof msg - 1);
        w = write(2, program ? program : self, strlen(program ? program : self));
        w = write(2, ": ", 2);
        w = write(2, why, strlen(why));
        w = write(2, "\n", 1);
        (void)w;
        _exit(69);
    }
    free(full);
    setpgid(p, p);
    *pid = p;
    return XDC_OK;
}

int orch_split_hostport(const char *text, char *host, size_t cap, int *port)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (!colon || colon == text) return -1;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || v < 1 || v > 65535) return -1;
    snprintf(host, cap, "%.*s", (int)(colon - text), text);
    *port = (int)v;
    return 0;
}

void orch_proc_signal(pid_t pid, int sig)
{
    if (pid > 0) kill(-pid, sig);
}

void orch_proc_describe(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status)) snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, cap, "ended with status 0x%x", status);
}

/* ---- stop signals: a flag and a self-pipe, so a signal taken by any thread wakes the poll ---------- */

static volatile sig_atomic_t g_stop_signal;
static int g_wake[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int saved = errno;
    g_stop_signal = sig;
    if (g_wake[1] >= 0) {
        ssize_t w = write(g_wake[1], "s", 1);
        (void)w;
    }
    errno = saved;
}

void orch_proc_catch_stop_signals(void)
{
    if (g_wake[0] < 0 && pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) g_wake[0] = g_wake[1] = -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: a blocking call in the main thread sees EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int orch_proc_stop_signal(void) { return g_stop_signal; }

/* ---- a set of children ------------------------------------------------------------------------- */

void orch_procs_init(orch_procs *g, int levels)
{
    memset(g, 0, sizeof *g);
    for (int i = 0; i < ORCH_PROCS_MAX; i++) g->pidfd[i] = -1;
    g->grace_ms = (levels > 0 ? levels : 1) * ORCH_PROC_GRACE_MS;
}

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec by default */
#else
    (void)pid;
    return -1;
#endif
}

xdc_err_t orch_procs_spawn(orch_procs *g, const char *name, const char *program, char *const argv[], char *const env[],
                           const char *stdout_path, const char *stderr_path, xdc_diag *diag)
{
    if (g->n == ORCH_PROCS_MAX) {
        xdc_diag_set(diag, "more than %d children", ORCH_PROCS_MAX);
        return XDC_ERR_RANGE;
    }
    pid_t pid;
    XDC_CHECK(orch_proc_spawn(program, argv, env, stdout_path, stderr_path, &pid, diag));
    int i = g->n++;
    g->pid[i] = pid;
    g->pidfd[i] = pidfd_of(pid);
    snprintf(g->name[i], sizeof g->name[i], "%s", name);
    g->alive++;
    return XDC_OK;
}

static void signal_all(orch_procs *g, int sig)
{
    for (int i = 0; i < g->n; i++) orch_proc_signal(g->pid[i], sig);
}

void orch_procs_stop(orch_procs *g)
{
    if (g->stopping) return;
    g->stopping = 1;
    signal_all(g, SIGTERM);
    g->kill_at = xdc_deadline_ms(g->grace_ms);
}

void orch_procs_kill(orch_procs *g) { signal_all(g, SIGKILL); }

void orch_procs_close(orch_procs *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->pidfd[i] >= 0) {
            close(g->pidfd[i]);
            g->pidfd[i] = -1;
        }
}

/* Sleep until a child may have ended, a stop signal came, `timeout_ms` passed (< 0: no limit) or the
 * SIGKILL deadline is due. */
static void wait_event(orch_procs *g, int timeout_ms)
{
    struct pollfd fds[ORCH_PROCS_MAX + 1];
    int n = 0, blind = 0;
    if (g_wake[0] >= 0) fds[n++] = (struct pollfd){.fd = g_wake[0], .events = POLLIN};
    for (int i = 0; i < g->n; i++) {
        if (!g->pid[i]) continue;
        if (g->pidfd[i] < 0) blind = 1;
        else fds[n++] = (struct pollfd){.fd = g->pidfd[i], .events = POLLIN};
    }
    if (blind || g_wake[0] < 0) timeout_ms = timeout_ms < 0 || timeout_ms > 50 ? 50 : timeout_ms;
    if (g->kill_at) {
        uint64_t now = xdc_now_ns();
        int left = g->kill_at > now ? (int)((g->kill_at - now) / XDC_NS_PER_MS) + 1 : 0;
        if (timeout_ms < 0 || left < timeout_ms) timeout_ms = left;
    }
    poll(fds, (nfds_t)n, timeout_ms);
    char buf[64];
    if (g_wake[0] >= 0)
        while (read(g_wake[0], buf, sizeof buf) > 0) {
        }
}

/* The next child that has ended (reaped; its waitpid status in *status), or -1. */
static int reap_one(orch_procs *g, pid_t *pid, int *status)
{
    for (int i = 0; i < g->n; i++) {
        if (!g->pid[i] || waitpid(g->pid[i], status, WNOHANG) != g->pid[i]) continue;
        *pid = g->pid[i];
        g->pid[i] = 0;
        g->alive--;
        if (g->pidfd[i] >= 0) close(g->pidfd[i]);
        g->pidfd[i] = -1;
        return i;
    }
    return -1;
}

/* While healthy: a stop signal or the tick may end the run. */
static xdc_err_t check_run(const orch_supervisor *s, int *done)
{
    int sig = orch_proc_stop_signal();
    if (sig) {
        if (s->interrupted) s->interrupted(s->ctx, sig);
        return XDC_ERR_INTERRUPTED;
    }
    return s->tick ? s->tick(s->ctx, done) : XDC_OK;
}

xdc_err_t orch_procs_supervise(orch_procs *g, const orch_supervisor *s, int *child_exit)
{
    xdc_err_t rc = XDC_OK;
    int done = 0, status;
    pid_t pid;
    *child_exit = 0;
    while (g->alive > 0 || (s->linger && !g->stopping && !done)) {
        if (!g->stopping && !done) rc = check_run(s, &done);
        if (rc != XDC_OK) orch_procs_stop(g);
        if (g->kill_at && xdc_deadline_passed(g->kill_at)) {
            orch_procs_kill(g);
            g->kill_at = 0;
        }
        if (g->alive == 0 && (!s->linger || g->stopping || done)) break;
        wait_event(g, g->stopping ? -1 : s->tick_ms > 0 ? s->tick_ms : -1);
        for (int i; (i = reap_one(g, &pid, &status)) >= 0;) {
            if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || g->stopping) continue;
            if (s->failed && s->failed(s->ctx, g, i, pid, status)) continue;
            rc = XDC_ERR_PEER_LOST;
            *child_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
            orch_procs_stop(g);
        }
    }
    return rc;
}
