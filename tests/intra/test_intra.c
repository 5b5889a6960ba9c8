/* test_intra.c — the intra communicator, CPU backend (and NCCL where a GPU is visible): every collective
 * against a serial reference for 1..8 forked ranks, odd sizes and sizes not divisible by the rank count,
 * fp32 and bf16, in place; send/recv larger than the rings in both directions at once; sub-groups; many
 * operations in flight with one thread starting and another waiting; and failures: a rank that dies, a
 * rank that never arrives, mismatched operations — the others fail within their deadline naming it. */
#include "tests/intra/test_intra_ranks.h"

#include "common/xdc_alloc.h"
#include "kernels/xdc_kernels.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- collectives against a serial reference ----------------------------------------------------- */

/* Element i of rank r's input: k/64 with |k| <= 127, exact in fp32 and bf16, so fp32 sums are exact in
 * any order and the bf16 reference rounds once like the backend. */
static float input_value(int seed, int r, size_t i)
{
    uint64_t h = (uint64_t)seed * 1000003u + (uint64_t)r * 7919u + (uint64_t)i * 104729u;
    h ^= h >> 13;
    h *= 0x9e3779b97f4a7c15ull;
    return (float)((int)((h >> 40) % 255) - 127) / 64.0f;
}

static void fill(void *buf, xdc_intra_dtype dt, int seed, int r, size_t base, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = input_value(seed, r, base + i);
        if (dt == XDC_INTRA_F32) ((float *)buf)[i] = v;
        else ((uint16_t *)buf)[i] = xdc_intra_f32_to_bf16(v);
    }
}

static float reduced_value(int seed, int n, size_t i, xdc_intra_dtype dt, xdc_intra_redop op)
{
    float acc = 0;
    for (int r = 0; r < n; r++) acc += input_value(seed, r, i);
    if (op == XDC_INTRA_AVG) acc *= 1.0f / (float)n;
    return dt == XDC_INTRA_F32 ? acc : xdc_intra_bf16_to_f32(xdc_intra_f32_to_bf16(acc));
}

static float get(const void *buf, xdc_intra_dtype dt, size_t i)
{
    return dt == XDC_INTRA_F32 ? ((const float *)buf)[i] : xdc_intra_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static int close_enough(float got, float want, xdc_intra_dtype dt)
{
    float tol = dt == XDC_INTRA_F32 ? 1e-6f * (1 + fabsf(want)) : 0.01f * fabsf(want) + 1e-6f;
    return fabsf(got - want) <= tol;
}

typedef struct coll_case {
    size_t counts[6];
    int n_counts;
} coll_case;

/* One rank: every collective x dtype x op x count, checked against the reference. */
static int rank_collectives(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    const coll_case *cc = arg;
    int me = xdc_intra_rank(comm), n = xdc_intra_size(comm);
    xdc_intra_backend be = tr->backend;
    size_t maxc = 0;
    for (int k = 0; k < cc->n_counts; k++) maxc = cc->counts[k] > maxc ? cc->counts[k] : maxc;
    size_t cap = maxc * (size_t)n * 4 + 64;
    uint8_t *host = xdc_malloc(cap), *host2 = xdc_malloc(cap);
    void *dsend = NULL, *drecv = NULL;
    RCHECK(host && host2, tr, "no memory");
    RCHECK_OK(xdc_intra_mem_alloc(be, cap, &dsend, NULL), tr);
    RCHECK_OK(xdc_intra_mem_alloc(be, cap, &drecv, NULL), tr);
    int seed = 1;
    for (int dti = 0; dti < 2; dti++) {
        xdc_intra_dtype dt = (xdc_intra_dtype)dti;
        size_t es = xdc_intra_dtype_size(dt);
        for (int k = 0; k < cc->n_counts; k++, seed++) {
            size_t c = cc->counts[k];
            for (int opi = 0; opi < 2; opi++) {
                xdc_intra_redop op = (xdc_intra_redop)opi;
                /* all_reduce, out of place then in place */
                for (int inplace = 0; inplace < 2; inplace++) {
                    fill(host, dt, seed, me, 0, c);
                    RCHECK_OK(xdc_intra_mem_upload(be, dsend, host, c * es), tr);
                    void *out = inplace ? dsend : drecv;
                    RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(comm, dsend, out, c, dt, op, &tr->req)), tr);
                    RCHECK_OK(xdc_intra_mem_download(be, host2, out, c * es), tr);
                    for (size_t i = 0; i < c; i++)
                        RCHECK(close_enough(get(host2, dt, i), reduced_value(seed, n, i, dt, op), dt), tr,
                               "all_reduce n=%d count=%zu %s %s inplace=%d: [%zu] = %g, want %g", n, c,
                               dti ? "bf16" : "f32", opi ? "avg" : "sum", inplace, i, get(host2, dt, i),
                               reduced_value(seed, n, i, dt, op));
                }
                /* reduce_scatter: input (n, c), block b holds elements b*c .. of the reference */
                fill(host, dt, seed, me, 0, c * (size_t)n);
                RCHECK_OK(xdc_intra_mem_upload(be, dsend, host, c * (size_t)n * es), tr);
                RCHECK_OK(intra_test_run_op(tr, xdc_intra_reduce_scatter(comm, dsend, drecv, c, dt, op, &tr->req)), tr);
                RCHECK_OK(xdc_intra_mem_download(be, host2, drecv, c * es), tr);
                for (size_t i = 0; i < c; i++) {
                    float want = reduced_value(seed, n, (size_t)me * c + i, dt, op);
                    RCHECK(close_enough(get(host2, dt, i), want, dt), tr,
                           "reduce_scatter n=%d count=%zu %s %s: [%zu] = %g, want %g", n, c, dti ? "bf16" : "f32",
                           opi ? "avg" : "sum", i, get(host2, dt, i), want);
                }
            }
            /* all_gather: block r is rank r's input */
            fill(host, dt, seed, me, 0, c);
            RCHECK_OK(xdc_intra_mem_upload(be, dsend, host, c * es), tr);
            RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_gather(comm, dsend, drecv, c, dt, &tr->req)), tr);
            RCHECK_OK(xdc_intra_mem_download(be, host2, drecv, c * (size_t)n * es), tr);
            for (int r = 0; r < n; r++) {
                fill(host, dt, seed, r, 0, c);
                RCHECK(memcmp(host, host2 + (size_t)r * c * es, c * es) == 0, tr,
                       "all_gather n=%d count=%zu: block %d differs from rank %d's input", n, c, r, r);
            }
            /* broadcast from the last rank */
            int root = n - 1;
            fill(host, dt, seed, me == root ? root : me + 100, 0, c);
            RCHECK_OK(xdc_intra_mem_upload(be, dsend, host, c * es), tr);
            RCHECK_OK(intra_test_run_op(tr, xdc_intra_broadcast(comm, dsend, c, dt, root, &tr->req)), tr);
            RCHECK_OK(xdc_intra_mem_download(be, host2, dsend, c * es), tr);
            fill(host, dt, seed, root, 0, c);
            RCHECK(memcmp(host, host2, c * es) == 0, tr, "broadcast n=%d count=%zu differs from root's data", n, c);
        }
    }
    RCHECK_OK(intra_test_run_op(tr, xdc_intra_barrier(comm, &tr->req)), tr);
    xdc_intra_mem_free(be, dsend);
    xdc_intra_mem_free(be, drecv);
    xdc_free(host);
    xdc_free(host2);
    return 0;
}

/* 300001 elements span two staging pieces (1 MiB) in fp32 and reduce_scatter blocks; the rest are odd
 * and not divisible by most rank counts. */
static const coll_case small_case = {{0, 1, 7, 1001}, 4};
static const coll_case large_case = {{300001}, 1};

XDC_TEST(intra_cpu_collectives_match_reference_1_to_8_ranks)
{
    const int sizes[] = {1, 2, 3, 4, 5, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        intra_test_ranks(XDC_INTRA_CPU, sizes[k], rank_collectives, &small_case, NULL);
}

/* 300001 elements are also above the single-copy threshold (64 KiB): every rank count of interest */
XDC_TEST(intra_cpu_collectives_larger_than_staging_buffers)
{
    for (int n = 2; n <= 4; n++) intra_test_ranks(XDC_INTRA_CPU, n, rank_collectives, &large_case, NULL);
}

/* ---- point to point ----------------------------------------------------------------------------- */

/* Every rank sends to its right neighbour and receives from its left, sends started first, then both
 * directions with the left neighbour: messages larger than a ring must not deadlock. */
static int rank_p2p(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int me = xdc_intra_rank(comm), n = xdc_intra_size(comm);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    const size_t sizes[] = {0, 1, 4099, (3u << 20) / 4 + 5};
    size_t maxc = sizes[3];
    float *out = xdc_malloc(maxc * 4), *in = xdc_malloc(maxc * 4), *in2 = xdc_malloc(maxc * 4);
    RCHECK(out && in && in2, tr, "no memory");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t c = sizes[k];
        fill(out, XDC_INTRA_F32, (int)k, me, 0, c);
        xdc_intra_req *rs = NULL, *rr = NULL, *rs2 = NULL, *rr2 = NULL;
        RCHECK_OK(xdc_intra_send(comm, out, c, XDC_INTRA_F32, right, &rs), tr);
        RCHECK_OK(xdc_intra_send(comm, out, c, XDC_INTRA_F32, left, &rs2), tr);
        RCHECK_OK(xdc_intra_recv(comm, in, c, XDC_INTRA_F32, left, &rr), tr);
        RCHECK_OK(xdc_intra_recv(comm, in2, c, XDC_INTRA_F32, right, &rr2), tr);
        xdc_intra_req *all[4] = {rs, rs2, rr, rr2};
        for (int i = 0; i < 4; i++) {
            tr->req = all[i];
            RCHECK_OK(intra_test_run_op(tr, XDC_OK), tr);
        }
        fill(out, XDC_INTRA_F32, (int)k, left, 0, c);
        RCHECK(memcmp(out, in, c * 4) == 0, tr, "recv of %zu floats from rank %d differs", c, left);
        fill(out, XDC_INTRA_F32, (int)k, right, 0, c);
        RCHECK(memcmp(out, in2, c * 4) == 0, tr, "recv of %zu floats from rank %d differs", c, right);
    }
    xdc_free(out);
    xdc_free(in);
    xdc_free(in2);
    return 0;
}

XDC_TEST(intra_cpu_send_recv_any_size_both_directions)
{
    intra_test_ranks(XDC_INTRA_CPU, 2, rank_p2p, NULL, NULL);
    intra_test_ranks(XDC_INTRA_CPU, 3, rank_p2p, NULL, NULL);
}

/* Pipeline-style exchange on backend memory: activations go right, gradients come back left, with the
 * even ranks sending first so the pattern is also safe on NCCL, whose send/recv block until matched. */
static int rank_p2p_ordered(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int me = xdc_intra_rank(comm), n = xdc_intra_size(comm);
    xdc_intra_backend be = tr->backend;
    const size_t c = 100003; /* fp32 elements, ~400 KB: a small activation tensor */
    float *host = xdc_malloc(c * 4), *want = xdc_malloc(c * 4);
    void *dout = NULL, *din = NULL;
    RCHECK(host && want, tr, "no memory");
    RCHECK_OK(xdc_intra_mem_alloc(be, c * 4, &dout, &tr->diag), tr);
    RCHECK_OK(xdc_intra_mem_alloc(be, c * 4, &din, &tr->diag), tr);
    fill(host, XDC_INTRA_F32, 7, me, 0, c);
    RCHECK_OK(xdc_intra_mem_upload(be, dout, host, c * 4), tr);
    for (int dir = 0; dir < 2; dir++) { /* 0: to the right, 1: to the left */
        int to = dir == 0 ? me + 1 : me - 1, from = dir == 0 ? me - 1 : me + 1;
        int can_send = to >= 0 && to < n, can_recv = from >= 0 && from < n;
        for (int phase = 0; phase < 2; phase++) {
            int send_now = (phase == 0) == (me % 2 == 0);
            if (send_now && can_send)
                RCHECK_OK(intra_test_run_op(tr, xdc_intra_send(comm, dout, c, XDC_INTRA_F32, to, &tr->req)), tr);
            if (!send_now && can_recv) {
                RCHECK_OK(intra_test_run_op(tr, xdc_intra_recv(comm, din, c, XDC_INTRA_F32, from, &tr->req)), tr);
                RCHECK_OK(xdc_intra_mem_download(be, host, din, c * 4), tr);
                fill(want, XDC_INTRA_F32, 7, from, 0, c);
                RCHECK(memcmp(host, want, c * 4) == 0, tr, "p2p from rank %d to rank %d differs", from, me);
            }
        }
    }
    xdc_intra_mem_free(be, dout);
    xdc_intra_mem_free(be, din);
    xdc_free(host);
    xdc_free(want);
    return 0;
}

XDC_TEST(intra_cpu_pipeline_exchange_on_backend_memory)
{
    intra_test_ranks(XDC_INTRA_CPU, 4, rank_p2p_ordered, NULL, NULL);
}

/* ---- device buffers through comm_view ------------------------------------------------------------ */

/* 4 ranks = 2 stages x 2 replicas on cpu-strict device memory (the host cannot touch it: a touch would
 * kill the rank with SIGSEGV): a pipeline send/recv and a data-parallel all-reduce in place on device
 * buffers, and the all-reduce of a host array on the same communicator (used as it is). */
static int rank_strict(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    const xdc_device_ops *D = arg;
    int me = xdc_intra_rank(comm), stage = me / 2, replica = me % 2;
    xdc_intra_comm *dp = NULL, *pp = NULL;
    RCHECK_OK(xdc_intra_split(comm, stage, replica, &dp, &tr->diag), tr);
    RCHECK_OK(xdc_intra_split(comm, replica, stage, &pp, &tr->diag), tr);
    const size_t c = 70001; /* more than a 64 KiB block, odd */
    float *h = xdc_malloc(c * 4), *want = xdc_malloc(c * 4), *dv = NULL, *dr = NULL;
    RCHECK(h && want, tr, "no memory");
    RCHECK_OK(D->mem_alloc((void **)&dv, c * 4), tr);
    RCHECK_OK(D->mem_alloc((void **)&dr, c * 4), tr);
    for (size_t i = 0; i < c; i++) h[i] = (float)(me * 1000 + (int)(i % 977));
    RCHECK_OK(D->copy_h2d(dv, h, c * 4, NULL), tr);
    RCHECK_OK(D->stream_sync(NULL), tr); /* the collective reads what the device wrote */
    if (stage == 0) RCHECK_OK(intra_test_run_op(tr, xdc_intra_send(pp, dv, c, XDC_INTRA_F32, 1, &tr->req)), tr);
    else RCHECK_OK(intra_test_run_op(tr, xdc_intra_recv(pp, dr, c, XDC_INTRA_F32, 0, &tr->req)), tr);
    RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(dp, dv, dv, c, XDC_INTRA_F32, XDC_INTRA_SUM, &tr->req)), tr);
    float v[2] = {(float)me, 1};
    RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(comm, v, v, 2, XDC_INTRA_F32, XDC_INTRA_SUM, &tr->req)), tr);
    RCHECK(v[0] == 6 && v[1] == 4, tr, "host all_reduce: %g %g", v[0], v[1]);
    RCHECK_OK(D->copy_d2h(h, dv, c * 4, NULL), tr);
    RCHECK_OK(D->stream_sync(NULL), tr);
    for (size_t i = 0; i < c; i++) want[i] = (float)((stage * 2) * 1000 + (stage * 2 + 1) * 1000 + 2 * (int)(i % 977));
    RCHECK(memcmp(h, want, c * 4) == 0, tr, "device all_reduce of stage %d wrong", stage);
    if (stage == 1) {
        RCHECK_OK(D->copy_d2h(h, dr, c * 4, NULL), tr);
        RCHECK_OK(D->stream_sync(NULL), tr);
        for (size_t i = 0; i < c; i++) want[i] = (float)(replica * 1000 + (int)(i % 977));
        RCHECK(memcmp(h, want, c * 4) == 0, tr, "device recv of replica %d wrong", replica);
    }
    D->mem_free(dv);
    D->mem_free(dr);
    xdc_free(h);
    xdc_free(want);
    xdc_intra_destroy(pp);
    xdc_intra_destroy(dp);
    return 0;
}

XDC_TEST(intra_cpu_strict_device_buffers_through_comm_view)
{
    const xdc_kern_backend *be = NULL;
    xdc_diag why = {{0}};
    if (xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &be, &why) != XDC_OK) xdc_test_skip("no cpu-strict: %s", why.msg);
    intra_test_opts o = {.dev_ops = be->device};
    intra_test_ranks_opts(XDC_INTRA_CPU, 4, rank_strict, be->device, NULL, &o);
}

/* ---- sub-groups --------------------------------------------------------------------------------- */

/* 4 ranks = 2 pipeline stages x 2 replicas: the data-parallel group of a stage all-reduces, the
 * pipeline group of a replica passes an activation from stage 0 to stage 1; a rank with
 * XDC_INTRA_UNDEFINED gets no group. */
static int rank_split(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int me = xdc_intra_rank(comm);
    int stage = me / 2, replica = me % 2;
    xdc_intra_comm *dp = NULL, *pp = NULL, *none = (xdc_intra_comm *)1;
    xdc_diag d = {{0}};
    RCHECK_OK(xdc_intra_split(comm, stage, replica, &dp, &d), tr);
    RCHECK_OK(xdc_intra_split(comm, replica, -stage, &pp, &d), tr); /* key reverses stage order */
    RCHECK_OK(xdc_intra_split(comm, me == 0 ? 0 : XDC_INTRA_UNDEFINED, 0, &none, &d), tr);
    RCHECK(me == 0 ? none && xdc_intra_size(none) == 1 : none == NULL, tr, "UNDEFINED colour handling");
    RCHECK(xdc_intra_size(dp) == 2 && xdc_intra_rank(dp) == replica, tr, "dp group rank %d size %d", xdc_intra_rank(dp),
           xdc_intra_size(dp));
    RCHECK(xdc_intra_size(pp) == 2 && xdc_intra_rank(pp) == 1 - stage, tr, "pp group rank %d", xdc_intra_rank(pp));
    float v[5], want[5];
    for (int i = 0; i < 5; i++) {
        v[i] = (float)(me * 10 + i);
        want[i] = (float)((stage * 2) * 10 + i + (stage * 2 + 1) * 10 + i);
    }
    RCHECK_OK(intra_test_run_op(tr, xdc_intra_all_reduce(dp, v, v, 5, XDC_INTRA_F32, XDC_INTRA_SUM, &tr->req)), tr);
    RCHECK(memcmp(v, want, sizeof v) == 0, tr, "dp all_reduce of stage %d wrong: %g", stage, v[0]);
    float act[3] = {1.5f + (float)replica, 2, 3}, got[3] = {0};
    if (stage == 0) RCHECK_OK(intra_test_run_op(tr, xdc_intra_send(pp, act, 3, XDC_INTRA_F32, 0, &tr->req)), tr);
    else RCHECK_OK(intra_test_run_op(tr, xdc_intra_recv(pp, got, 3, XDC_INTRA_F32, 1, &tr->req)), tr);
    RCHECK(stage == 0 || memcmp(act, got, sizeof act) == 0, tr, "pp activation of replica %d wrong", replica);
    xdc_intra_destroy(none == (xdc_intra_comm *)1 ? NULL : none);
    xdc_intra_destroy(pp);
    xdc_intra_destroy(dp);
    return 0;
}

XDC_TEST(intra_cpu_split_data_parallel_and_pipeline_groups)
{
    intra_test_ranks(XDC_INTRA_CPU, 4, rank_split, NULL, NULL);
}

/* ---- many operations in flight, one thread starts, another waits -------------------------------- */

#define INFLIGHT 24
typedef struct inflight {
    xdc_intra_req *reqs[INFLIGHT + 2];
    int nreq;
    xdc_err_t rc;
    char msg[512];
} inflight;

static void *waiter_main(void *arg)
{
    inflight *f = arg;
    for (int i = 0; i < f->nreq && f->rc == XDC_OK; i++) {
        xdc_diag d = {{0}};
        f->rc = xdc_intra_wait(f->reqs[i], 20000, &d);
        snprintf(f->msg, sizeof f->msg, "%s", d.msg);
    }
    return NULL;
}

static int rank_inflight(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int me = xdc_intra_rank(comm), n = xdc_intra_size(comm);
    enum { C = 3001 };
    float *bufs = xdc_malloc(sizeof(float) * C * INFLIGHT), sendv[C], recvv[C];
    RCHECK(bufs, tr, "no memory");
    inflight f = {.nreq = 0, .rc = XDC_OK};
    for (int i = 0; i < INFLIGHT; i++) {
        for (int j = 0; j < C; j++) bufs[i * C + j] = (float)(me + i + j % 7);
        RCHECK_OK(
            xdc_intra_all_reduce(comm, bufs + i * C, bufs + i * C, C, XDC_INTRA_F32, XDC_INTRA_SUM, &f.reqs[f.nreq++]),
            tr);
    }
    for (int j = 0; j < C; j++) sendv[j] = (float)(me * 1000 + j);
    RCHECK_OK(xdc_intra_send(comm, sendv, C, XDC_INTRA_F32, (me + 1) % n, &f.reqs[f.nreq++]), tr);
    RCHECK_OK(xdc_intra_recv(comm, recvv, C, XDC_INTRA_F32, (me + n - 1) % n, &f.reqs[f.nreq++]), tr);
    pthread_t th;
    RCHECK(pthread_create(&th, NULL, waiter_main, &f) == 0, tr, "pthread_create");
    pthread_join(th, NULL);
    RCHECK(f.rc == XDC_OK, tr, "waiting thread: %s: %s", xdc_errname(f.rc), f.msg);
    for (int i = 0; i < INFLIGHT; i++)
        for (int j = 0; j < C; j++) {
            float want = (float)(n * (n - 1) / 2 + n * (i + j % 7));
            RCHECK(bufs[i * C + j] == want, tr, "op %d [%d] = %g, want %g", i, j, bufs[i * C + j], want);
        }
    int left = (me + n - 1) % n;
    for (int j = 0; j < C; j++) RCHECK(recvv[j] == (float)(left * 1000 + j), tr, "p2p [%d]", j);
    xdc_free(bufs);
    return 0;
}

XDC_TEST(intra_cpu_many_operations_in_flight_waited_from_another_thread)
{
    intra_test_ranks(XDC_INTRA_CPU, 3, rank_inflight, NULL, NULL);
}

/* ---- failures ----------------------------------------------------------------------------------- */

typedef struct fault_case {
    int victim; /* rank that misbehaves */
    int mode;   /* 0: SIGKILL itself before a collective, 1: same before a p2p, 2: stay alive, absent */
} fault_case;

static int rank_fault(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    const fault_case *fc = arg;
    int me = xdc_intra_rank(comm);
    if (me == fc->victim) {
        if (fc->mode == 2) return intra_test_block_until_released(tr);
        kill(getpid(), SIGKILL);
    }
    float v[100] = {0};
    xdc_diag d = {{0}};
    xdc_intra_req *req = NULL;
    if (fc->mode == 1 && me == 0) RCHECK_OK(xdc_intra_recv(comm, v, 100, XDC_INTRA_F32, fc->victim, &req), tr);
    else if (fc->mode == 1) return 0;
    else RCHECK_OK(xdc_intra_all_reduce(comm, v, v, 100, XDC_INTRA_F32, XDC_INTRA_SUM, &req), tr);
    xdc_err_t rc = xdc_intra_wait(req, 3000, &d);
    xdc_err_t want = fc->mode == 2 ? XDC_ERR_TIMEOUT : XDC_ERR_PEER_LOST;
    RCHECK(rc == want, tr, "rank %d got %s (%s), want %s", me, xdc_errname(rc), d.msg, xdc_errname(want));
    char name[32];
    snprintf(name, sizeof name, "rank %d", fc->victim);
    RCHECK(strstr(d.msg, name) != NULL, tr, "message does not name %s: %s", name, d.msg);
    RCHECK(fc->mode == 2 ? strstr(d.msg, "alive") != NULL : 1, tr, "absent rank not reported alive: %s", d.msg);
    snprintf(tr->note, sizeof tr->note, "%s", d.msg);
    return 0;
}

XDC_TEST(intra_cpu_dead_rank_is_named_by_the_others)
{
    fault_case coll = {2, 0}, p2p = {1, 1};
    intra_test_result res;
    intra_test_ranks(XDC_INTRA_CPU, 3, rank_fault, &coll, &res);
    XDC_ASSERT_STR_CONTAINS(res.note[0], "died");
    intra_test_ranks(XDC_INTRA_CPU, 2, rank_fault, &p2p, &res);
    XDC_ASSERT_STR_CONTAINS(res.note[0], "died");
}

XDC_TEST(intra_cpu_absent_rank_times_out_with_its_name)
{
    fault_case absent = {1, 2};
    intra_test_result res;
    intra_test_ranks(XDC_INTRA_CPU, 3, rank_fault, &absent, &res);
    XDC_ASSERT_STR_CONTAINS(res.note[0], "not complete after");
}

XDC_TEST(intra_cpu_create_fails_naming_a_rank_that_never_joins)
{
    char id[XDC_INTRA_BOOTSTRAP_MAX];
    XDC_ASSERT_OK(xdc_intra_bootstrap_create(XDC_INTRA_CPU, id, sizeof id, NULL));
    xdc_intra_config cfg = XDC_INTRA_CONFIG_INIT;
    cfg.size = 2;
    cfg.bootstrap = id;
    cfg.create_timeout_ms = 300;
    xdc_intra_comm *c = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_intra_create(&cfg, &c, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT(c == NULL);
    XDC_ASSERT_STR_CONTAINS(d.msg, "rank 1 (never joined)");
}

static int rank_mismatch(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    int me = xdc_intra_rank(comm), p2p = *(const int *)arg;
    float v[8] = {0}, out[16];
    xdc_diag d = {{0}};
    xdc_intra_req *req = NULL;
    if (p2p)
        RCHECK_OK(me == 0 ? xdc_intra_send(comm, v, 8, XDC_INTRA_F32, 1, &req)
                          : xdc_intra_recv(comm, out, 4, XDC_INTRA_F32, 0, &req),
                  tr);
    else
        RCHECK_OK(me == 0 ? xdc_intra_all_reduce(comm, v, v, 8, XDC_INTRA_F32, XDC_INTRA_SUM, &req)
                          : xdc_intra_all_gather(comm, v, out, 8, XDC_INTRA_F32, &req),
                  tr);
    xdc_err_t rc = xdc_intra_wait(req, 3000, &d);
    if (p2p && me == 0) return 0; /* the send fits the ring and completes; the receiver detects */
    RCHECK(rc == XDC_ERR_PROTO || (rc == XDC_ERR_PEER_LOST && strstr(d.msg, "failed the group")), tr,
           "rank %d: %s (%s)", me, xdc_errname(rc), d.msg);
    RCHECK_OK(xdc_intra_barrier(comm, &req) == XDC_OK ? XDC_ERR_INTERNAL : XDC_OK, tr);
    RCHECK(xdc_intra_error(comm)[0] != 0, tr, "failed communicator has no error text");
    snprintf(tr->note, sizeof tr->note, "%s", d.msg);
    return 0;
}

XDC_TEST(intra_cpu_mismatched_operations_fail_with_proto)
{
    int p2p = 0;
    intra_test_result res;
    intra_test_ranks(XDC_INTRA_CPU, 2, rank_mismatch, &p2p, &res);
    XDC_ASSERT(strstr(res.note[0], "different collective") || strstr(res.note[1], "different collective"));
    p2p = 1;
    intra_test_ranks(XDC_INTRA_CPU, 2, rank_mismatch, &p2p, &res);
    XDC_ASSERT_STR_CONTAINS(res.note[1], "rank 0 sent 32 bytes, recv posted for 16");
}

XDC_TEST(intra_config_and_argument_errors_are_named)
{
    xdc_intra_config cfg = XDC_INTRA_CONFIG_INIT;
    xdc_intra_comm *c = NULL;
    xdc_diag d = {{0}};
    cfg.bootstrap = NULL;
    XDC_ASSERT_ERR(xdc_intra_create(&cfg, &c, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "no bootstrap id");
    cfg.bootstrap = "cpu:/x";
    cfg.rank = 3;
    cfg.size = 2;
    XDC_ASSERT_ERR(xdc_intra_create(&cfg, &c, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "rank 3 of size 2");
    cfg.rank = 0;
    cfg.bootstrap = "tcp:whatever";
    XDC_ASSERT_ERR(xdc_intra_create(&cfg, &c, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "not a CPU id");
    cfg.bootstrap = "cpu:/a/b";
    XDC_ASSERT_ERR(xdc_intra_create(&cfg, &c, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "bad shared-memory name");
    XDC_ASSERT_EQ(xdc_intra_dtype_size(XDC_INTRA_BF16), 2);
    char id[XDC_INTRA_BOOTSTRAP_MAX];
    XDC_ASSERT_OK(xdc_intra_bootstrap_create(XDC_INTRA_CPU, id, sizeof id, &d));
    XDC_ASSERT(strncmp(id, "cpu:/xdc-intra-", 15) == 0);
    XDC_ASSERT_ERR(xdc_intra_bootstrap_create(XDC_INTRA_CPU, id, 8, &d), XDC_ERR_RANGE);
    /* a one-rank group: p2p to itself and a bad root are argument errors */
    cfg.bootstrap = id;
    cfg.size = 1;
    XDC_ASSERT_OK(xdc_intra_bootstrap_create(XDC_INTRA_CPU, id, sizeof id, &d));
    XDC_ASSERT_OK(xdc_intra_create(&cfg, &c, &d));
    xdc_intra_req *r = NULL;
    float v = 1;
    XDC_ASSERT_ERR(xdc_intra_send(c, &v, 1, XDC_INTRA_F32, 0, &r), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_intra_broadcast(c, &v, 1, XDC_INTRA_F32, 1, &r), XDC_ERR_INVALID);
    XDC_ASSERT_OK(xdc_intra_all_reduce(c, &v, &v, 1, XDC_INTRA_F32, XDC_INTRA_AVG, &r));
    XDC_ASSERT_OK(xdc_intra_wait(r, 5000, &d));
    XDC_ASSERT(v == 1.0f);
    xdc_intra_destroy(c);
    xdc_intra_destroy(NULL);
}

/* ---- NCCL: the same collectives on GPUs ------------------------------------------------------- */

XDC_TEST_T(intra_nccl_collectives_match_reference, 120)
{
    char why[512];
    int ndev = intra_test_gpu_count(why, sizeof why);
    if (ndev <= 0) xdc_test_skip("no GPU: %s", why);
    /* NCCL allows one rank per device in a communicator */
    int n = ndev < 4 ? ndev : 4;
    intra_test_ranks(XDC_INTRA_NCCL, n, rank_collectives, &small_case, NULL);
    intra_test_ranks(XDC_INTRA_NCCL, n, rank_collectives, &large_case, NULL);
    if (n >= 2) intra_test_ranks(XDC_INTRA_NCCL, n, rank_p2p_ordered, NULL, NULL);
}
