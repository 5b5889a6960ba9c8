/* test_intra_ranks.c — the forked-ranks driver of the intra tests (see test_intra_ranks.h). */
#include "tests/intra/test_intra_ranks.h"

#include "kernels/xdc_kernels.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
    size_t put = 0;
    while (put < len) {
        ssize_t n = write(fd, (const char *)buf + put, len - put);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        put += (size_t)n;
    }
    return 0;
}

static int rank_main(intra_test_rank *tr, int boot_rd, int boot_wr, int release_wr, intra_test_rank_fn fn,
                     const void *arg, const intra_test_opts *opts)
{
    char id[XDC_INTRA_BOOTSTRAP_MAX] = {0};
    close(tr->rank == 0 ? boot_rd : boot_wr); /* so a rank 0 that dies early gives the others EOF */
    if (tr->rank == 0) {
        if (xdc_intra_bootstrap_create(tr->backend, id, sizeof id, &tr->diag) != XDC_OK) {
            snprintf(tr->msg, sizeof tr->msg, "bootstrap: %s", tr->diag.msg);
            return 1;
        }
        for (int r = 1; r < tr->size; r++) write_full(boot_wr, id, sizeof id);
    } else if (read_full(boot_rd, id, sizeof id) != 0) {
        snprintf(tr->msg, sizeof tr->msg, "rank %d: no bootstrap id from rank 0", tr->rank);
        return 1;
    }
    xdc_intra_config cfg = XDC_INTRA_CONFIG_INIT;
    cfg.backend = tr->backend;
    cfg.rank = tr->rank;
    cfg.size = tr->size;
    cfg.bootstrap = id;
    cfg.create_timeout_ms = 15000;
    cfg.op_timeout_ms = opts && opts->op_timeout_ms ? opts->op_timeout_ms : 20000;
    cfg.nccl_semantics = opts ? opts->nccl_semantics : 0;
    cfg.dev_ops = opts ? opts->dev_ops : NULL;
    cfg.device = tr->rank;
    xdc_intra_comm *comm = NULL;
    char one = 1;
    xdc_err_t rc = xdc_intra_create(&cfg, &comm, &tr->diag);
    if (rc != XDC_OK) {
        snprintf(tr->msg, sizeof tr->msg, "rank %d: create: %s: %s", tr->rank, xdc_errname(rc), tr->diag.msg);
        write_full(release_wr, &one, 1); /* an absent rank waiting for us must not hang */
        return 1;
    }
    int st = fn(comm, tr, arg) == 0 ? 0 : 1;
    write_full(release_wr, &one, 1);
    xdc_intra_destroy(comm);
    return st;
}

void intra_test_ranks(xdc_intra_backend backend, int n, intra_test_rank_fn fn, const void *arg, intra_test_result *res)
{
    intra_test_ranks_opts(backend, n, fn, arg, res, NULL);
}

void intra_test_ranks_opts(xdc_intra_backend backend, int n, intra_test_rank_fn fn, const void *arg,
                           intra_test_result *res, const intra_test_opts *opts)
{
    XDC_ASSERT(n >= 1 && n <= INTRA_TEST_MAX_RANKS);
    intra_test_rank *trs = mmap(NULL, sizeof *trs * (size_t)n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                                0);
    XDC_ASSERT(trs != MAP_FAILED);
    int boot[2], release[2];
    XDC_ASSERT(pipe(boot) == 0 && pipe(release) == 0);
    pid_t pids[INTRA_TEST_MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        intra_test_rank *tr = &trs[r];
        memset(tr, 0, sizeof *tr);
        tr->backend = backend;
        tr->rank = r;
        tr->size = n;
        tr->status = -1;
        tr->release_fd = release[0];
        pids[r] = fork();
        XDC_ASSERT(pids[r] >= 0);
        if (pids[r] == 0) {
            tr->status = rank_main(tr, boot[0], boot[1], release[1], fn, arg, opts);
            _exit(tr->status);
        }
    }
    close(boot[0]);
    close(boot[1]);
    close(release[0]);
    close(release[1]);
    int ws_all[INTRA_TEST_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        while (waitpid(pids[r], &ws_all[r], 0) < 0 && errno == EINTR) {
        }
        if (trs[r].msg[0]) fprintf(stderr, "rank %d/%d: %s\n", r, n, trs[r].msg);
    }
    for (int r = 0; r < n; r++) {
        int ws = ws_all[r];
        int killed = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL && trs[r].status == -1;
        XDC_ASSERT_MSG(killed || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && trs[r].status == 0),
                       "%s backend, %d ranks: rank %d failed (wait status 0x%x): %s", backend ? "nccl" : "cpu", n, r,
                       ws, trs[r].msg[0] ? trs[r].msg : "(no message)");
        if (res) snprintf(res->note[r], sizeof res->note[r], "%s", trs[r].note);
    }
    munmap(trs, sizeof *trs * (size_t)n);
}

xdc_err_t intra_test_run_op(intra_test_rank *tr, xdc_err_t started)
{
    xdc_diag_clear(&tr->diag);
    if (started != XDC_OK) return started;
    return xdc_intra_wait(tr->req, 20000, &tr->diag);
}

int intra_test_block_until_released(intra_test_rank *tr)
{
    char buf[INTRA_TEST_MAX_RANKS];
    read_full(tr->release_fd, buf, (size_t)(tr->size - 1));
    return 0;
}

int intra_test_gpu_count(char *why, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        xdc_diag d = {{0}};
        int n = xdc_intra_backend_available(XDC_INTRA_NCCL, &d) ? xdc_kern_cuda_device_count() : 0;
        write_full(fds[1], &n, sizeof n);
        write_full(fds[1], d.msg, sizeof d.msg);
        _exit(0);
    }
    close(fds[1]);
    int n = 0;
    xdc_diag d = {{0}};
    if (pid < 0 || read_full(fds[0], &n, sizeof n) != 0 || read_full(fds[0], d.msg, sizeof d.msg) != 0) n = 0;
    close(fds[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    snprintf(why, cap, "%s", d.msg[0] ? d.msg : "the device probe failed");
    return n;
}
