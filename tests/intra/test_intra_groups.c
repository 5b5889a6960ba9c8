/* test_intra_groups.c — groups (xdc_intra_group_start/end) and the CPU backend's NCCL-semantics mode:
 * one in-order stream per communicator, so an ungrouped recv holds back every later operation. The
 * posting pattern the 1F1B loop used before groups (every receive of a step first, ungrouped) must fail
 * there with the op deadline naming the rank, as it would hang on NCCL; the same exchange in groups, and
 * the 1F1B schedule of orch_train.c with each schedule step's sends and receives in one group, must pass. */
#include "tests/intra/test_intra_ranks.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Exact in fp32 (k/64, |k| <= 127), so sums of a few of them and small integers are exact. */
static float value(int seed, size_t i)
{
    uint64_t h = (uint64_t)seed * 1000003u + (uint64_t)i * 104729u;
    h ^= h >> 13;
    h *= 0x9e3779b97f4a7c15ull;
    return (float)((int)((h >> 40) % 255) - 127) / 64.0f;
}

static void fill(float *buf, int seed, float add, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = value(seed, i) + add;
}

static int equal(const float *buf, int seed, float add, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != value(seed, i) + add) return 0;
    return 1;
}

/* ---- the exchange of two ranks: recv first, then send -------------------------------------------- */

typedef struct exch_case {
    int grouped;  /* recv and send in one group */
    int expect;   /* 0: must pass; 1: must fail with the deadline naming the peer */
    size_t count; /* fp32 elements each way */
} exch_case;

static int rank_exchange(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    const exch_case *c = arg;
    xdc_intra_backend be = tr->backend;
    int me = xdc_intra_rank(comm), peer = 1 - me;
    size_t bytes = c->count * 4;
    float *host = xdc_malloc(bytes + 4);
    void *out = NULL, *in = NULL; /* backend memory: host for CPU, device for NCCL */
    RCHECK(host, tr, "no memory");
    RCHECK_OK(xdc_intra_mem_alloc(be, bytes, &out, &tr->diag), tr);
    RCHECK_OK(xdc_intra_mem_alloc(be, bytes, &in, &tr->diag), tr);
    fill(host, me, 0, c->count);
    RCHECK_OK(xdc_intra_mem_upload(be, out, host, bytes), tr);
    xdc_intra_req *rr = NULL, *sr = NULL;
    if (c->grouped) RCHECK_OK(xdc_intra_group_start(comm), tr);
    RCHECK_OK(xdc_intra_recv(comm, in, c->count, XDC_INTRA_F32, peer, &rr), tr);
    RCHECK_OK(xdc_intra_send(comm, out, c->count, XDC_INTRA_F32, peer, &sr), tr);
    if (c->grouped) {
        /* waiting inside the group it was started in cannot work: it is refused at once */
        xdc_err_t rc = xdc_intra_wait(rr, 1000, &tr->diag);
        RCHECK(rc == XDC_ERR_INVALID && strstr(tr->diag.msg, "group_end"), tr,
               "wait inside an open group: %s (%s), want XDC_ERR_INVALID", xdc_errname(rc), tr->diag.msg);
        RCHECK_OK(xdc_intra_group_end(comm), tr);
    }
    xdc_err_t rs = xdc_intra_wait(sr, 10000, &tr->diag);
    char smsg[sizeof tr->diag.msg];
    snprintf(smsg, sizeof smsg, "%s", tr->diag.msg);
    xdc_err_t rv = xdc_intra_wait(rr, 10000, &tr->diag);
    if (!c->expect) {
        RCHECK(rs == XDC_OK && rv == XDC_OK, tr, "exchange: send %s (%s), recv %s (%s)", xdc_errname(rs), smsg,
               xdc_errname(rv), tr->diag.msg);
        RCHECK_OK(xdc_intra_mem_download(be, host, in, bytes), tr);
        RCHECK(equal(host, peer, 0, c->count), tr, "rank %d: data from rank %d differs", me, peer);
    } else {
        /* CPU: the rank that hits its deadline first names its peer, the other learns it from the segment.
         * NCCL: each rank's watchdog aborts its communicator and names the peer of the op it waited for. */
        char want[32];
        snprintf(want, sizeof want, "rank %d", peer);
        RCHECK(rv == XDC_ERR_TIMEOUT || rv == XDC_ERR_PEER_LOST, tr, "recv: %s (%s), want a deadline error",
               xdc_errname(rv), tr->diag.msg);
        RCHECK(rs == rv, tr, "send failed with %s, recv with %s", xdc_errname(rs), xdc_errname(rv));
        if (be == XDC_INTRA_CPU)
            RCHECK(strstr(tr->diag.msg, "made no progress for 300 ms") && strstr(tr->diag.msg, "recv from rank"), tr,
                   "the error does not name the deadline of the blocked recv: %s", tr->diag.msg);
        else
            RCHECK(strstr(tr->diag.msg, "did not complete it within 300 ms") && strstr(tr->diag.msg, "aborted"), tr,
                   "the error does not name the deadline: %s", tr->diag.msg);
        RCHECK(rv == XDC_ERR_PEER_LOST || strstr(tr->diag.msg, want), tr, "the error does not name %s: %s", want,
               tr->diag.msg);
        snprintf(tr->note, sizeof tr->note, "%s", tr->diag.msg);
    }
    xdc_intra_mem_free(be, out);
    xdc_intra_mem_free(be, in);
    xdc_free(host);
    return 0;
}

XDC_TEST_T(intra_cpu_nccl_semantics_ungrouped_recv_first_fails_naming_the_rank, 60)
{
    const intra_test_opts sem = {1, 300, NULL}, plain = {0, 300, NULL};
    const exch_case old = {0, 1, 1000}, old_ok = {0, 0, 1000};
    intra_test_result res;
    /* without the mode the CPU backend progresses every peer at once: the pattern passes */
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &old_ok, NULL, &plain);
    /* with it, each rank's recv blocks its own send: both wait until the 300 ms deadline */
    uint64_t t0 = xdc_now_ns();
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &old, &res, &sem);
    double s = (double)(xdc_now_ns() - t0) / 1e9;
    XDC_ASSERT_MSG(s < 5, "the deadlock took %.1f s to be reported (op timeout 300 ms)", s);
    XDC_ASSERT(strstr(res.note[0], "rank 1") && strstr(res.note[1], "rank 0"));
    /* the environment variable turns the mode on as well */
    setenv("XDC_INTRA_NCCL_SEMANTICS", "1", 1);
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &old, NULL, &plain);
    unsetenv("XDC_INTRA_NCCL_SEMANTICS");
}

XDC_TEST_T(intra_cpu_nccl_semantics_group_is_matched_as_a_unit, 60)
{
    const intra_test_opts sem = {1, 2000, NULL};
    const exch_case small = {1, 0, 1000}, big = {1, 0, 3u << 20 >> 2}, empty = {1, 0, 0};
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &small, NULL, &sem);
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &big, NULL, &sem); /* 3 MiB: larger than a ring */
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &empty, NULL, &sem);
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_exchange, &big, NULL, NULL); /* groups without the mode */
}

/* ---- the in-order stream -------------------------------------------------------------------------- */

/* Rank 0: recv from 1 (arrives after 300 ms), then a send to 2 and an all_reduce: neither may complete
 * before the recv, and a wait on the send names the recv and rank 1 it is queued behind. */
static int rank_in_order(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int me = xdc_intra_rank(comm);
    float a[16], b[16], v = 1;
    fill(a, 5, 0, 16);
    xdc_intra_req *x = NULL, *y = NULL, *z = NULL;
    if (me == 0) {
        RCHECK_OK(xdc_intra_recv(comm, b, 16, XDC_INTRA_F32, 1, &x), tr);
        RCHECK_OK(xdc_intra_send(comm, a, 16, XDC_INTRA_F32, 2, &y), tr);
        RCHECK_OK(xdc_intra_all_reduce(comm, &v, &v, 1, XDC_INTRA_F32, XDC_INTRA_SUM, &z), tr);
        xdc_err_t rc = xdc_intra_wait(y, 100, &tr->diag);
        RCHECK(rc == XDC_ERR_TIMEOUT, tr, "the send behind a pending recv completed: %s", xdc_errname(rc));
        RCHECK(strstr(tr->diag.msg, "queued on the in-order stream") && strstr(tr->diag.msg, "op #0 (recv") &&
                   strstr(tr->diag.msg, "waiting for rank 1"),
               tr, "the wait does not name what the send is queued behind: %s", tr->diag.msg);
        int done = 1;
        RCHECK_OK(xdc_intra_test(z, &done, &tr->diag), tr);
        RCHECK(!done, tr, "the all_reduce behind a pending recv completed");
        RCHECK_OK(xdc_intra_wait(x, 5000, &tr->diag), tr);
        RCHECK(equal(b, 6, 0, 16), tr, "recv from rank 1 differs");
        RCHECK_OK(xdc_intra_wait(y, 5000, &tr->diag), tr);
        RCHECK_OK(xdc_intra_wait(z, 5000, &tr->diag), tr);
    } else if (me == 1) {
        sleep_ms(300);
        fill(b, 6, 0, 16);
        RCHECK_OK(intra_test_run_op(tr, xdc_intra_send(comm, b, 16, XDC_INTRA_F32, 0, &tr->req)), tr);
        RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(comm, &v, &v, 1, XDC_INTRA_F32, XDC_INTRA_SUM, &tr->req)),
                  tr);
    } else {
        RCHECK_OK(intra_test_run_op(tr, xdc_intra_recv(comm, b, 16, XDC_INTRA_F32, 0, &tr->req)), tr);
        RCHECK(equal(b, 5, 0, 16), tr, "recv from rank 0 differs");
        RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(comm, &v, &v, 1, XDC_INTRA_F32, XDC_INTRA_SUM, &tr->req)),
                  tr);
    }
    RCHECK(v == 3, tr, "all_reduce gave %g", (double)v);
    return 0;
}

XDC_TEST_T(intra_cpu_nccl_semantics_runs_operations_in_start_order, 60)
{
    const intra_test_opts sem = {1, 5000, NULL};
    intra_test_ranks_opts(XDC_INTRA_CPU, 3, rank_in_order, NULL, NULL, &sem);
}

/* Group calls that do not pair up are refused. */
static int rank_group_misuse(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    RCHECK(xdc_intra_group_end(comm) == XDC_ERR_INVALID, tr, "group_end without group_start was accepted");
    RCHECK_OK(xdc_intra_group_start(comm), tr);
    RCHECK_OK(xdc_intra_group_start(comm), tr); /* nested */
    RCHECK_OK(xdc_intra_group_end(comm), tr);
    RCHECK_OK(xdc_intra_group_end(comm), tr); /* empty: nothing to issue */
    RCHECK(xdc_intra_group_start(NULL) == XDC_ERR_INVALID, tr, "NULL communicator accepted");
    return 0;
}

XDC_TEST(intra_cpu_group_calls_must_pair) { intra_test_ranks(XDC_INTRA_CPU, 1, rank_group_misuse, NULL, NULL); }

/* ---- the 1F1B schedule of orch_train.c ------------------------------------------------------------ */

typedef struct onef1b_case {
    int M;        /* microbatches */
    int steps;    /* pipeline steps */
    int grouped;  /* 1: the schedule with groups (orch_train.c); 0: every receive first, ungrouped */
    size_t count; /* fp32 elements of one activation */
} onef1b_case;

typedef struct onef1b {
    xdc_intra_comm *comm;
    intra_test_rank *tr;
    int s, P, M, step;
    size_t c;
    int64_t wait_ms;      /* timeout of the waits for x and dy (-1: op_timeout_ms) */
    xdc_intra_backend be; /* x, dy, y, dx are its memory (device memory for NCCL) */
    /* Microbatch mb uses x, dy and dx buffer mb % nb and y buffer mb % ny. Grouped, as orch_train.c: one
     * each of x, dy, dx (the boundary buffers) and min(M, P − s) of y (the activation slots); a buffer's
     * previous send is waited for before it is rewritten. The ungrouped schedule (the old one): M each. */
    int nb, ny;
    float *x, *dy, *dx; /* (nb, c) each */
    float *y;           /* (ny, c) */
    float *h;           /* (c) host copy the "compute" runs on */
    xdc_intra_req **xr, **dyr, **yr, **dxr;
} onef1b;

/* Stage s forward: y = x + 1 (stage 0's x is microbatch data); backward: dx = dy + 1 (the last stage's
 * dy is its x). So stage s receives x = data + s and dy = data + P + (P - 2 - s). */
static int seed_of(const onef1b *p, int mb) { return p->step * 100 + mb; }

static int post_x(onef1b *p, int f)
{
    if (p->s > 0)
        RCHECK_OK(xdc_intra_recv(p->comm, p->x + f % p->nb * p->c, p->c, XDC_INTRA_F32, p->s - 1, &p->xr[f]), p->tr);
    return 0;
}

static int post_dy(onef1b *p, int b)
{
    if (p->s < p->P - 1)
        RCHECK_OK(xdc_intra_recv(p->comm, p->dy + b % p->nb * p->c, p->c, XDC_INTRA_F32, p->s + 1, &p->dyr[b]), p->tr);
    return 0;
}

static int fwd(onef1b *p, int f)
{
    float *x = p->x + f % p->nb * p->c, *y = p->y + f % p->ny * p->c;
    size_t bytes = p->c * 4;
    if (p->s == 0) {
        fill(p->h, seed_of(p, f), 0, p->c);
        RCHECK_OK(xdc_intra_mem_upload(p->be, x, p->h, bytes), p->tr); /* the last stage reads it back */
    } else {
        RCHECK_OK(xdc_intra_wait(p->xr[f], p->wait_ms, &p->tr->diag), p->tr);
        RCHECK_OK(xdc_intra_mem_download(p->be, p->h, x, bytes), p->tr);
    }
    RCHECK(equal(p->h, seed_of(p, f), (float)p->s, p->c), p->tr, "stage %d: x of microbatch %d differs", p->s, f);
    for (size_t i = 0; i < p->c; i++) p->h[i] += 1;
    if (p->s < p->P - 1 && f >= p->ny) RCHECK_OK(xdc_intra_wait(p->yr[f - p->ny], -1, &p->tr->diag), p->tr);
    RCHECK_OK(xdc_intra_mem_upload(p->be, y, p->h, bytes), p->tr);
    if (p->s < p->P - 1) RCHECK_OK(xdc_intra_send(p->comm, y, p->c, XDC_INTRA_F32, p->s + 1, &p->yr[f]), p->tr);
    return 0;
}

static int bwd(onef1b *p, int b)
{
    float *dy = p->dy + b % p->nb * p->c, *dx = p->dx + b % p->nb * p->c;
    size_t bytes = p->c * 4;
    if (p->s < p->P - 1) {
        RCHECK_OK(xdc_intra_wait(p->dyr[b], p->wait_ms, &p->tr->diag), p->tr);
        RCHECK_OK(xdc_intra_mem_download(p->be, p->h, dy, bytes), p->tr);
        RCHECK(equal(p->h, seed_of(p, b), (float)(2 * p->P - 2 - p->s), p->c), p->tr,
               "stage %d: dy of microbatch %d differs", p->s, b);
    } else {
        RCHECK_OK(xdc_intra_mem_download(p->be, p->h, p->x + b % p->nb * p->c, bytes), p->tr);
    }
    for (size_t i = 0; i < p->c; i++) p->h[i] += 1;
    if (p->s > 0 && b >= p->nb) RCHECK_OK(xdc_intra_wait(p->dxr[b - p->nb], -1, &p->tr->diag), p->tr);
    RCHECK_OK(xdc_intra_mem_upload(p->be, dx, p->h, bytes), p->tr);
    if (p->s > 0) RCHECK_OK(xdc_intra_send(p->comm, dx, p->c, XDC_INTRA_F32, p->s - 1, &p->dxr[b]), p->tr);
    return 0;
}

#define GROUP(p, body)                                                   \
    do {                                                                 \
        RCHECK_OK(xdc_intra_group_start((p)->comm), (p)->tr);            \
        int g_ = (body);                                                 \
        xdc_err_t e_ = xdc_intra_group_end((p)->comm);                   \
        if (g_) return g_;                                               \
        RCHECK(e_ == XDC_OK, (p)->tr, "group_end: %s", xdc_errname(e_)); \
    } while (0)

static int step_grouped(onef1b *p)
{
    int warm = p->P - p->s - 1 < p->M ? p->P - p->s - 1 : p->M, rem = p->M - warm;
    for (int f = 0; f < warm; f++) {
        GROUP(p, post_x(p, f));
        GROUP(p, fwd(p, f));
    }
    if (rem > 0) GROUP(p, post_x(p, warm));
    for (int i = 0; i < rem; i++) {
        GROUP(p, fwd(p, warm + i) || post_dy(p, i));
        GROUP(p, bwd(p, i) || (i < rem - 1 ? post_x(p, warm + i + 1) : 0));
    }
    for (int b = rem; b < p->M; b++) {
        GROUP(p, post_dy(p, b));
        GROUP(p, bwd(p, b));
    }
    return 0;
}

static int step_ungrouped(onef1b *p)
{
    int warm = p->P - p->s - 1 < p->M ? p->P - p->s - 1 : p->M, f = 0, b = 0;
    for (int mb = 0; mb < p->M; mb++)
        if (post_x(p, mb) || post_dy(p, mb)) return -1;
    for (; f < warm; f++)
        if (fwd(p, f)) return -1;
    for (; f < p->M; f++, b++)
        if (fwd(p, f) || bwd(p, b)) return -1;
    for (; b < p->M; b++)
        if (bwd(p, b)) return -1;
    return 0;
}

static int rank_1f1b(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    const onef1b_case *k = arg;
    onef1b p = {.comm = comm, .tr = tr, .s = xdc_intra_rank(comm), .P = xdc_intra_size(comm), .M = k->M, .c = k->count};
    /* the ungrouped run waits past its op deadline, so the watchdog's error is the one reported */
    p.wait_ms = k->grouped ? -1 : 5000;
    p.nb = k->grouped ? 1 : k->M;
    p.ny = k->grouped && p.P - p.s < k->M ? p.P - p.s : k->M;
    p.be = tr->backend;
    void *bufs[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++)
        RCHECK_OK(xdc_intra_mem_alloc(p.be, (size_t)(i == 2 ? p.ny : p.nb) * k->count * 4 + 4, &bufs[i], &tr->diag),
                  tr);
    p.x = bufs[0];
    p.dy = bufs[1];
    p.y = bufs[2];
    p.dx = bufs[3];
    p.h = xdc_malloc(k->count * 4 + 4);
    p.xr = xdc_calloc((size_t)k->M * 4, sizeof *p.xr);
    RCHECK(p.h && p.xr, tr, "no memory");
    p.dyr = p.xr + k->M;
    p.yr = p.dyr + k->M;
    p.dxr = p.yr + k->M;
    for (p.step = 0; p.step < k->steps; p.step++) {
        int r = k->grouped ? step_grouped(&p) : step_ungrouped(&p);
        if (r && !k->grouped) { /* expected: keep the error as a note, not as this rank's failure */
            snprintf(tr->note, sizeof tr->note, "%s", tr->diag.msg);
            tr->msg[0] = 0;
            break;
        }
        if (r) return r;
        /* sends land before their buffers are reused next step */
        for (int mb = 0; mb < k->M; mb++) {
            if (p.s < p.P - 1) RCHECK_OK(xdc_intra_wait(p.yr[mb], -1, &tr->diag), tr);
            if (p.s > 0) RCHECK_OK(xdc_intra_wait(p.dxr[mb], -1, &tr->diag), tr);
        }
    }
    RCHECK(k->grouped || tr->note[0], tr, "stage %d: the ungrouped schedule passed under NCCL semantics", p.s);
    for (int i = 0; i < 4; i++) xdc_intra_mem_free(p.be, bufs[i]);
    xdc_free(p.h);
    xdc_free(p.xr);
    return 0;
}

XDC_TEST_T(intra_cpu_nccl_semantics_1f1b_schedule_in_groups_passes, 120)
{
    const intra_test_opts sem = {1, 10000, NULL};
    /* 200003 floats = 800 KB: larger than a ring, so a message only moves while its receive is running */
    const onef1b_case c4 = {6, 2, 1, 200003}, c2 = {2, 3, 1, 1000}, c3 = {1, 2, 1, 7}, c4m = {3, 2, 1, 5000};
    intra_test_ranks_opts(XDC_INTRA_CPU, 4, rank_1f1b, &c4, NULL, &sem);
    intra_test_ranks_opts(XDC_INTRA_CPU, 2, rank_1f1b, &c2, NULL, &sem);
    intra_test_ranks_opts(XDC_INTRA_CPU, 3, rank_1f1b, &c3, NULL, &sem); /* fewer microbatches than stages */
    intra_test_ranks_opts(XDC_INTRA_CPU, 4, rank_1f1b, &c4m, NULL, &sem);
    intra_test_ranks_opts(XDC_INTRA_CPU, 4, rank_1f1b, &c4, NULL, NULL); /* and without the mode */
}

XDC_TEST_T(intra_cpu_nccl_semantics_1f1b_receives_first_fails_naming_a_rank, 60)
{
    /* the pattern the worker used before groups: fine on the CPU backend's own semantics... */
    const onef1b_case old = {4, 1, 0, 1000};
    const intra_test_opts sem = {1, 300, NULL};
    intra_test_result res;
    /* ...but with NCCL's, every stage's first receive blocks the sends behind it */
    intra_test_ranks_opts(XDC_INTRA_CPU, 4, rank_1f1b, &old, &res, &sem);
    for (int r = 0; r < 4; r++)
        XDC_ASSERT_MSG(strstr(res.note[r], "made no progress for 300 ms") && strstr(res.note[r], "recv from rank"),
                       "stage %d: %s", r, res.note[r]);
}

/* ---- NCCL: the same on GPUs (one rank per device) -------------------------------------------------- */

XDC_TEST_T(intra_nccl_groups_1f1b_and_deadline_abort, 180)
{
    char why[512];
    int ndev = intra_test_gpu_count(why, sizeof why);
    if (ndev < 2) xdc_test_skip("no GPU: needs 2 CUDA devices, %d visible (%s)", ndev > 0 ? ndev : 0, why);
    int P = ndev < 4 ? ndev : 4;
    const intra_test_opts opts = {0, 10000, NULL}, short_deadline = {0, 300, NULL};
    const exch_case small = {1, 0, 1000}, big = {1, 0, 3u << 20 >> 2}, old = {0, 1, 1000};
    const onef1b_case c = {6, 2, 1, 200003}, c1 = {1, 2, 1, 7};
    /* a group's send and recv to the same peer are issued together between ncclGroupStart/End */
    intra_test_ranks_opts(XDC_INTRA_NCCL, 2, rank_exchange, &small, NULL, &opts);
    intra_test_ranks_opts(XDC_INTRA_NCCL, 2, rank_exchange, &big, NULL, &opts);
    /* the grouped 1F1B schedule of orch_train.c */
    intra_test_ranks_opts(XDC_INTRA_NCCL, P, rank_1f1b, &c, NULL, &opts);
    intra_test_ranks_opts(XDC_INTRA_NCCL, P, rank_1f1b, &c1, NULL, &opts);
    /* ungrouped recv first on both ranks hangs on NCCL: the watchdog aborts the communicator within the
     * op deadline and names the peer */
    intra_test_ranks_opts(XDC_INTRA_NCCL, 2, rank_exchange, &old, NULL, &short_deadline);
}
