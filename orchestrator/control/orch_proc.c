/* orch_proc.c — spawning and supervising child processes (see orch_proc.h). */
#include "orchestrator/control/orch_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

xdc_err_t orch_proc_spawn(char *const argv[], char *const env[], const char *stdout_path, const char *stderr_path,
                          pid_t *pid, xdc_diag *diag)
{
    const char *self = orch_proc_self();
    /* Build the child's argv before fork: the parent has threads, so the child must not allocate. argv[0]
     * of the child is the binary; the caller's argv starts at the subcommand. */
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
        /* A child outlives nothing: when its launcher or agent dies (killed, or SIGPIPE on a closed
         * terminal), it gets SIGTERM and stops its own children in turn. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(75);
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        if (stdout_path) redirect(stdout_path, 1);
        if (stderr_path) redirect(stderr_path, 2);
        execv(self, full);
        static const char msg[] = "xdc: cannot execute this binary again (execv failed)\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
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
