/* bench_intra.c — all_reduce bandwidth of the CPU backend of intra/ in the nccl-tests layout: forks
 * `ranks` processes on this host, times fp32 sum all_reduce for message sizes min..max bytes (doubling),
 * and prints one row per size: bytes, time (us), algbw and busbw (GB/s, busbw = algbw * 2(n-1)/n) next to
 * single-process memcpy bandwidth of the same size measured in the same run. Each size is timed in
 * TRIALS runs and the fastest is reported (the VM is shared; allreduce_mpi.c does the same).
 *
 *   bench_intra RANKS [MIN_BYTES [MAX_BYTES]]   all_reduce rows: "row RANKS BYTES US ALGBW BUSBW"
 *   bench_intra p2p [MIN [MAX]]                 rank 0 streams messages to rank 1: "p2p BYTES US GBPS"
 *   bench_intra memcpy [MIN [MAX]]              "memcpy BYTES GBPS"
 * run.sh joins the rows with the Open MPI run. */
#include "common/xdc_alloc.h"
#include "common/xdc_time.h"
#include "intra/xdc_intra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TRIALS 3

static size_t iters_for(size_t bytes)
{
    size_t it = ((size_t)128 << 20) / bytes; /* about 128 MiB reduced per trial */
    return it < 5 ? 5 : it > 200 ? 200 : it;
}

/* One timed operation: all_reduce, or (p2p) rank 0 sends the buffer to rank 1. */
static int run(xdc_intra_comm *c, int p2p, float *buf, size_t count)
{
    xdc_intra_req *r = NULL;
    xdc_diag d = {{0}};
    int me = xdc_intra_rank(c);
    xdc_err_t rc = !p2p      ? xdc_intra_all_reduce(c, buf, buf, count, XDC_INTRA_F32, XDC_INTRA_SUM, &r)
                   : me == 0 ? xdc_intra_send(c, buf, count, XDC_INTRA_F32, 1, &r)
                             : xdc_intra_recv(c, buf, count, XDC_INTRA_F32, 0, &r);
    if (rc != XDC_OK || xdc_intra_wait(r, 60000, &d) != XDC_OK) {
        fprintf(stderr, "bench_intra: %s failed: %s %s\n", p2p ? "send/recv" : "all_reduce", d.msg, xdc_intra_error(c));
        return -1;
    }
    return 0;
}

static int barrier(xdc_intra_comm *c)
{
    xdc_intra_req *r = NULL;
    return xdc_intra_barrier(c, &r) == XDC_OK && xdc_intra_wait(r, 60000, NULL) == XDC_OK ? 0 : -1;
}

static double memcpy_gbps(size_t bytes)
{
    uint8_t *a = xdc_aligned_alloc(4096, bytes), *b = xdc_aligned_alloc(4096, bytes);
    if (!a || !b) return 0;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    size_t it = iters_for(bytes);
    double best = 1e30;
    for (int trial = 0; trial < TRIALS; trial++) {
        uint64_t t0 = xdc_now_ns();
        for (size_t i = 0; i < it; i++) {
            memcpy(b, a, bytes);
            a[i % bytes] = (uint8_t)i; /* keep the copies from being merged */
        }
        double s = (double)(xdc_now_ns() - t0) / 1e9;
        best = s < best ? s : best;
    }
    xdc_free(a);
    xdc_free(b);
    return (double)bytes * (double)it / best / 1e9;
}

static int rank_main(const char *id, int rank, int n, int p2p, size_t min_b, size_t max_b)
{
    xdc_intra_config cfg = XDC_INTRA_CONFIG_INIT;
    cfg.rank = rank;
    cfg.size = n;
    cfg.bootstrap = id;
    xdc_intra_comm *c = NULL;
    xdc_diag d = {{0}};
    if (xdc_intra_create(&cfg, &c, &d) != XDC_OK) {
        fprintf(stderr, "bench_intra: rank %d: %s\n", rank, d.msg);
        return 1;
    }
    /* (max_b / 4,) fp32, in memory the backend works on, as the worker's buffers are (the CPU device's
     * large allocations are shared too); XDC_BENCH_PLAIN_BUFFERS=1 times a plain host allocation. */
    int plain = getenv("XDC_BENCH_PLAIN_BUFFERS") && atoi(getenv("XDC_BENCH_PLAIN_BUFFERS"));
    float *buf = NULL;
    if (plain) buf = xdc_aligned_alloc(4096, max_b);
    else if (xdc_intra_mem_alloc(XDC_INTRA_CPU, max_b, (void **)&buf, &d) != XDC_OK) buf = NULL;
    if (!buf) return 1;
    for (size_t i = 0; i < max_b / 4; i++) buf[i] = 0; /* first touch outside the timed loop */
    int rc = 0;
    for (size_t bytes = min_b; bytes <= max_b && rc == 0; bytes *= 2) {
        size_t count = bytes / 4, it = iters_for(bytes);
        rc |= run(c, p2p, buf, count) | run(c, p2p, buf, count) | barrier(c); /* warm-up */
        double us = 1e30;
        for (int trial = 0; trial < TRIALS && rc == 0; trial++) {
            uint64_t t0 = xdc_now_ns();
            for (size_t i = 0; i < it && rc == 0; i++) rc |= run(c, p2p, buf, count);
            double t = (double)(xdc_now_ns() - t0) / 1e3 / (double)it;
            us = t < us ? t : us;
            rc |= barrier(c);
        }
        if (p2p && rank == 1 && rc == 0) { /* the receiver sees when each message has fully arrived */
            printf("p2p %zu %.1f %.3f\n", bytes, us, (double)bytes / us / 1e3);
            fflush(stdout);
        } else if (!p2p && rank == 0 && rc == 0) {
            double algbw = (double)bytes / us / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
            printf("row %d %zu %.1f %.3f %.3f\n", n, bytes, us, algbw, busbw);
            fflush(stdout);
        }
    }
    if (plain) xdc_free(buf);
    else xdc_intra_mem_free(XDC_INTRA_CPU, buf);
    xdc_intra_destroy(c);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_intra RANKS|p2p|memcpy [MIN_BYTES [MAX_BYTES]]\n");
        return 64;
    }
    size_t min_b = argc > 2 ? strtoull(argv[2], NULL, 0) : 65536,
           max_b = argc > 3 ? strtoull(argv[3], NULL, 0) : 32u << 20;
    if (strcmp(argv[1], "memcpy") == 0) {
        for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) printf("memcpy %zu %.3f\n", bytes, memcpy_gbps(bytes));
        return 0;
    }
    int p2p = strcmp(argv[1], "p2p") == 0, n = p2p ? 2 : atoi(argv[1]);
    if (n < 1 || n > 64 || min_b < 4 || max_b < min_b) {
        fprintf(stderr, "bench_intra: bad arguments (ranks 1..64, 4 <= MIN <= MAX)\n");
        return 64;
    }
    char id[XDC_INTRA_BOOTSTRAP_MAX];
    xdc_diag d = {{0}};
    if (xdc_intra_bootstrap_create(XDC_INTRA_CPU, id, sizeof id, &d) != XDC_OK) {
        fprintf(stderr, "bench_intra: %s\n", d.msg);
        return 69;
    }
    fflush(stdout);
    pid_t pids[64];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_main(id, r, n, p2p, min_b, max_b));
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int ws = 0;
        waitpid(pids[r], &ws, 0);
        bad |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    return bad ? 75 : 0;
}
