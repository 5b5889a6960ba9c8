/* intra_nccl.cu — the NCCL backend: one non-blocking NCCL communicator per group (config.blocking = 0,
 * so init, split and every call are polled with ncclCommGetAsyncError against a deadline instead of
 * hanging), one CUDA stream per communicator (every operation of a communicator runs in start order, as
 * the CPU backend's NCCL-semantics mode models), and a CUDA event per request. A group
 * (xdc_intra_group_start/end) is issued between ncclGroupStart and ncclGroupEnd. NCCL never times out by
 * itself, so the watchdog is ours: a request past op_timeout_ms, or an asynchronous NCCL error, aborts
 * the communicator (ncclCommAbort) and fails every later request, with a message in the CPU backend's
 * wording that names the operation and the rank(s) it waits for. Every CUDA and NCCL status is checked.
 * Compiled only where nvcc exists (the Makefile builds the .cu files of intra/ then); registered in
 * intra_registry.c. Not run on a GPU yet. */
/* the project headers are C: give them C linkage */
extern "C" {
#include "intra/intra_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
}

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct nccl_comm {
    ncclComm_t nc; /* NULL once aborted */
    cudaStream_t stream;
    int device;
    float *scratch;       /* (1,) fp32 on the device: the barrier's all-reduce */
    pthread_mutex_t lock; /* NCCL calls on one communicator are not thread-safe */
} nccl_comm;

static ncclDataType_t nccl_dtype(xdc_intra_dtype d) { return d == XDC_INTRA_BF16 ? ncclBfloat16 : ncclFloat32; }

/* Poll a non-blocking communicator until its pending call finished or the deadline passed: the call's
 * final state, ncclInProgress past the deadline, or the error of ncclCommGetAsyncError itself. */
static ncclResult_t nccl_settle(ncclComm_t nc, uint64_t deadline)
{
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(nc, &st);
        if (q != ncclSuccess) return q;
        if (st != ncclInProgress) return st;
        if (xdc_deadline_passed(deadline)) return ncclInProgress;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static xdc_err_t nccl_err(ncclResult_t st)
{
    return st == ncclInProgress                             ? XDC_ERR_TIMEOUT
           : st == ncclRemoteError || st == ncclSystemError ? XDC_ERR_PEER_LOST
                                                            : XDC_ERR_NCCL;
}

/* Abort and forget the NCCL communicator (n->lock held or the comm not shared yet). */
static void nccl_abort(nccl_comm *n)
{
    if (!n->nc) return;
    ncclResult_t st = ncclCommAbort(n->nc);
    if (st != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommAbort: %s", ncclGetErrorString(st));
    n->nc = NULL;
}

/* The other ranks of a group of `size` as "rank a, rank b, ..." (or a range when there are many). */
static void other_ranks(int me, int size, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    if (size > 9) {
        snprintf(out, cap, "ranks 0..%d other than %d", size - 1, me);
        return;
    }
    for (int r = 0; r < size && len < cap; r++) {
        if (r == me) continue;
        int k = snprintf(out + len, cap - len, "%srank %d", len ? ", " : "", r);
        if (k < 0) break;
        len += (size_t)k;
    }
}

/* "recv from rank 1 (rank 0/2, op #3)" / "all_reduce of 100 elements (rank 0/3, op #0)", as the CPU
 * backend names an operation, with its group. */
static void nccl_what(const xdc_intra_comm *comm, const xdc_intra_req *q, char *out, size_t cap)
{
    char grp[96] = "";
    if (q->group_n > 1)
        snprintf(grp, sizeof grp, ", in a group of %d ops from #%llu", q->group_n, (unsigned long long)q->group_seq0);
    if (q->kind == INTRA_OP_SEND || q->kind == INTRA_OP_RECV)
        snprintf(out, cap, "%s rank %d (rank %d/%d, op #%llu%s)", q->kind == INTRA_OP_SEND ? "send to" : "recv from",
                 q->peer, comm->rank, comm->size, (unsigned long long)q->seq, grp);
    else
        snprintf(out, cap, "%s of %zu elements (rank %d/%d, op #%llu%s)", intra_op_name(q->kind), q->count, comm->rank,
                 comm->size, (unsigned long long)q->seq, grp);
}

/* Who an operation that did not complete waits for: its peer, or (collectives) the other ranks. */
static void nccl_awaited(const xdc_intra_comm *comm, const xdc_intra_req *q, char *out, size_t cap)
{
    if (q->kind == INTRA_OP_SEND || q->kind == INTRA_OP_RECV) {
        snprintf(out, cap, "rank %d", q->peer);
        return;
    }
    char who[96];
    other_ranks(comm->rank, comm->size, who, sizeof who);
    snprintf(out, cap, "one of %s (NCCL does not report which)", who);
}

static xdc_err_t nccl_wrap(xdc_intra_comm *comm, ncclComm_t nc, int device, xdc_diag *diag)
{
    nccl_comm *n = (nccl_comm *)xdc_calloc(1, sizeof *n);
    if (!n) return XDC_ERR_NOMEM;
    n->nc = nc;
    n->device = device;
    cudaError_t ce = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    const char *what = "cudaStreamCreateWithFlags";
    if (ce == cudaSuccess) {
        what = "cudaMalloc";
        ce = cudaMalloc((void **)&n->scratch, sizeof(float));
    }
    if (ce == cudaSuccess) {
        /* On the communicator's own stream, which every collective of this communicator is queued on after
         * it: a blocking cudaMemset goes to the legacy stream, which a non-blocking stream does not wait for. */
        what = "cudaMemsetAsync";
        ce = cudaMemsetAsync(n->scratch, 0, sizeof(float), n->stream);
    }
    if (ce != cudaSuccess) {
        xdc_diag_set(diag, "intra nccl: rank %d/%d on device %d: %s: %s", comm->rank, comm->size, device, what,
                     cudaGetErrorString(ce));
        if (n->scratch) cudaFree(n->scratch);
        if (n->stream) cudaStreamDestroy(n->stream);
        xdc_free(n);
        return XDC_ERR_CUDA;
    }
    pthread_mutex_init(&n->lock, NULL);
    comm->impl = n;
    return XDC_OK;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static xdc_err_t nccl_create(xdc_intra_comm *comm, const xdc_intra_config *cfg, xdc_diag *diag)
{
    ncclUniqueId id;
    const char *hex = cfg->bootstrap + 5;
    if (strncmp(cfg->bootstrap, "nccl:", 5) != 0 || strlen(hex) != 2 * sizeof id.internal) {
        xdc_diag_set(diag, "intra nccl: bootstrap id \"%.32s...\" is not nccl:<%zu hex digits>", cfg->bootstrap,
                     2 * sizeof id.internal);
        return XDC_ERR_CONFIG;
    }
    for (size_t i = 0; i < sizeof id.internal; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            xdc_diag_set(diag, "intra nccl: bootstrap id has a non-hex digit at offset %zu", 5 + 2 * i);
            return XDC_ERR_CONFIG;
        }
        id.internal[i] = (char)(hi * 16 + lo);
    }
    cudaError_t ce = cudaSetDevice(cfg->device);
    if (ce != cudaSuccess) {
        xdc_diag_set(diag, "intra nccl: cudaSetDevice(%d): %s", cfg->device, cudaGetErrorString(ce));
        return XDC_ERR_CUDA;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nc = NULL;
    ncclResult_t st = ncclCommInitRankConfig(&nc, cfg->size, id, cfg->rank, &config);
    if ((st == ncclSuccess || st == ncclInProgress) && nc)
        st = nccl_settle(nc, xdc_deadline_ms(cfg->create_timeout_ms));
    if (st != ncclSuccess) {
        char who[200];
        other_ranks(cfg->rank, cfg->size, who, sizeof who);
        if (st == ncclInProgress)
            xdc_diag_set(diag,
                         "intra nccl: rank %d/%d: create: one of %s did not arrive within %lld ms (NCCL does not "
                         "report which); communicator aborted",
                         cfg->rank, cfg->size, who, (long long)cfg->create_timeout_ms);
        else
            xdc_diag_set(diag, "intra nccl: rank %d/%d: create: ncclCommInitRankConfig: %s %s", cfg->rank, cfg->size,
                         ncclGetErrorString(st), nc ? ncclGetLastError(nc) : "");
        if (nc) {
            ncclResult_t ab = ncclCommAbort(nc);
            if (ab != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommAbort: %s", ncclGetErrorString(ab));
        }
        return nccl_err(st);
    }
    xdc_err_t rc = nccl_wrap(comm, nc, cfg->device, diag);
    if (rc != XDC_OK) {
        ncclResult_t ab = ncclCommAbort(nc);
        if (ab != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommAbort: %s", ncclGetErrorString(ab));
    }
    return rc;
}

static void warn_cuda(cudaError_t ce, const char *what)
{
    if (ce != cudaSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: %s: %s", what, cudaGetErrorString(ce));
}

static void nccl_destroy(xdc_intra_comm *comm)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    if (!n) return;
    warn_cuda(cudaSetDevice(n->device), "cudaSetDevice");
    int clean = comm->failed == XDC_OK && n->nc;
    if (clean) {
        ncclResult_t st = ncclCommFinalize(n->nc);
        if (st == ncclSuccess || st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
        if (st != ncclSuccess)
            XDC_WARN(XDC_SUB_INTRA, "intra nccl: rank %d/%d: ncclCommFinalize: %s; aborting", comm->rank, comm->size,
                     st == ncclInProgress ? "not done within op_timeout_ms" : ncclGetErrorString(st));
        clean = st == ncclSuccess;
    }
    if (clean) {
        ncclResult_t st = ncclCommDestroy(n->nc);
        if (st != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommDestroy: %s", ncclGetErrorString(st));
        n->nc = NULL;
    }
    nccl_abort(n); /* no-op once destroyed, or when a watchdog already aborted it */
    warn_cuda(cudaStreamDestroy(n->stream), "cudaStreamDestroy");
    warn_cuda(cudaFree(n->scratch), "cudaFree");
    pthread_mutex_destroy(&n->lock);
    xdc_free(n);
    comm->impl = NULL;
}

static ncclResult_t nccl_issue(nccl_comm *n, xdc_intra_req *q)
{
    ncclDataType_t dt = nccl_dtype(q->dtype);
    ncclRedOp_t op = q->redop == XDC_INTRA_AVG ? ncclAvg : ncclSum;
    cudaStream_t s = n->stream;
    switch (q->kind) {
    case INTRA_OP_SEND: return ncclSend(q->sendbuf, q->count, dt, q->peer, n->nc, s);
    case INTRA_OP_RECV: return ncclRecv(q->recvbuf, q->count, dt, q->peer, n->nc, s);
    case INTRA_OP_ALL_REDUCE: return ncclAllReduce(q->sendbuf, q->recvbuf, q->count, dt, op, n->nc, s);
    case INTRA_OP_REDUCE_SCATTER: return ncclReduceScatter(q->sendbuf, q->recvbuf, q->count, dt, op, n->nc, s);
    case INTRA_OP_ALL_GATHER: return ncclAllGather(q->sendbuf, q->recvbuf, q->count, dt, n->nc, s);
    case INTRA_OP_BROADCAST: return ncclBroadcast(q->recvbuf, q->recvbuf, q->count, dt, q->peer, n->nc, s);
    case INTRA_OP_BARRIER: return ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum, n->nc, s);
    }
    return ncclInvalidArgument;
}

/* Issue the n requests linked by group_next (one: alone; more: between ncclGroupStart and ncclGroupEnd),
 * wait for the enqueue of the non-blocking communicator, record each request's event. On an error the
 * communicator is aborted and failed; none of the requests was completed. n->lock held. */
static xdc_err_t nccl_issue_unit(xdc_intra_comm *comm, nccl_comm *n, xdc_intra_req *first, int n_reqs)
{
    char msg[384], what[160];
    const char *step = "cudaSetDevice";
    cudaError_t ce = cudaSetDevice(n->device);
    ncclResult_t st = ncclSuccess;
    xdc_intra_req *bad = first;
    for (xdc_intra_req *q = first; q && ce == cudaSuccess; q = q->group_next) {
        if (q->bk) continue;
        cudaEvent_t ev;
        step = "cudaEventCreateWithFlags";
        ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (ce == cudaSuccess) q->bk = (void *)ev;
    }
    if (ce != cudaSuccess) goto cuda_fail;
    if (!n->nc) {
        snprintf(msg, sizeof msg, "%s", comm->error[0] ? comm->error : "intra nccl: communicator aborted");
        return intra_comm_fail(comm, XDC_ERR_NCCL, msg);
    }
    if (n_reqs > 1) {
        const char *call = "ncclGroupStart";
        st = ncclGroupStart();
        if (st == ncclSuccess) {
            call = "enqueue";
            for (xdc_intra_req *q = first; q && st == ncclSuccess; q = q->group_next) {
                bad = q;
                st = nccl_issue(n, q);
            }
            ncclResult_t end = ncclGroupEnd(); /* closes the group even after a failed enqueue */
            if (st == ncclSuccess) {
                call = "ncclGroupEnd";
                st = end;
                bad = first;
            }
        }
        if (st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
        if (st != ncclSuccess) {
            nccl_what(comm, bad, what, sizeof what);
            snprintf(msg, sizeof msg, "%s: %s of the group %s: %s %s; NCCL communicator aborted", what, call,
                     st == ncclInProgress ? "did not finish within op_timeout_ms" : "failed",
                     st == ncclInProgress ? "" : ncclGetErrorString(st), ncclGetLastError(n->nc));
        }
    } else {
        st = nccl_issue(n, first);
        if (st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
        if (st != ncclSuccess) {
            nccl_what(comm, first, what, sizeof what);
            snprintf(msg, sizeof msg, "%s: enqueue %s: %s %s; NCCL communicator aborted", what,
                     st == ncclInProgress ? "did not finish within op_timeout_ms" : "failed",
                     st == ncclInProgress ? "" : ncclGetErrorString(st), ncclGetLastError(n->nc));
        }
    }
    if (st != ncclSuccess) {
        nccl_abort(n);
        return intra_comm_fail(comm, nccl_err(st), msg);
    }
    step = "cudaEventRecord";
    for (xdc_intra_req *q = first; q; q = q->group_next) {
        bad = q;
        ce = cudaEventRecord((cudaEvent_t)q->bk, n->stream);
        if (ce != cudaSuccess) goto cuda_fail;
    }
    for (xdc_intra_req *q = first; q; q = q->group_next) q->issued = 1;
    return XDC_OK;
cuda_fail:
    nccl_what(comm, bad, what, sizeof what);
    snprintf(msg, sizeof msg, "%s: %s on device %d: %s", what, step, n->device, cudaGetErrorString(ce));
    nccl_abort(n); /* the group may be enqueued already: nothing could tell when it completes */
    return intra_comm_fail(comm, XDC_ERR_CUDA, msg);
}

static xdc_err_t nccl_start(xdc_intra_comm *comm, xdc_intra_req *q)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    q->group_next = NULL;
    pthread_mutex_lock(&n->lock);
    xdc_err_t rc = nccl_issue_unit(comm, n, q, 1);
    pthread_mutex_unlock(&n->lock);
    return rc;
}

static xdc_err_t nccl_start_group(xdc_intra_comm *comm, xdc_intra_req *first, int n_reqs)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    pthread_mutex_lock(&n->lock);
    xdc_err_t rc = nccl_issue_unit(comm, n, first, n_reqs);
    pthread_mutex_unlock(&n->lock);
    return rc;
}

static void nccl_poll(xdc_intra_comm *comm, xdc_intra_req *q)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    char msg[384], what[160], who[160];
    pthread_mutex_lock(&n->lock);
    if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) || !q->issued) {
        /* done, or its group is not issued yet (group_end issues it, or completes it with the error) */
        pthread_mutex_unlock(&n->lock);
        return;
    }
    if (comm->failed != XDC_OK || !n->nc) {
        snprintf(msg, sizeof msg, "%s", comm->error);
        pthread_mutex_unlock(&n->lock);
        intra_req_complete(q, comm->failed != XDC_OK ? comm->failed : XDC_ERR_NCCL, msg);
        return;
    }
    xdc_err_t rc = XDC_OK;
    nccl_what(comm, q, what, sizeof what);
    cudaError_t ce = cudaSetDevice(n->device);
    if (ce == cudaSuccess) ce = cudaEventQuery((cudaEvent_t)q->bk);
    if (ce == cudaSuccess) {
        pthread_mutex_unlock(&n->lock);
        intra_req_complete(q, XDC_OK, NULL);
        return;
    }
    ncclResult_t st = ncclSuccess;
    ncclResult_t gq = ncclCommGetAsyncError(n->nc, &st);
    if (gq != ncclSuccess) st = gq;
    if (ce != cudaErrorNotReady) {
        snprintf(msg, sizeof msg, "%s: CUDA error %s; NCCL communicator aborted", what, cudaGetErrorString(ce));
        rc = XDC_ERR_CUDA;
    } else if (st != ncclSuccess && st != ncclInProgress) {
        snprintf(msg, sizeof msg, "%s: NCCL %s %s; communicator aborted", what, ncclGetErrorString(st),
                 ncclGetLastError(n->nc));
        rc = nccl_err(st);
    } else if (comm->op_timeout_ms >= 0 && xdc_now_ns() - q->start_ns > (uint64_t)comm->op_timeout_ms * XDC_NS_PER_MS) {
        nccl_awaited(comm, q, who, sizeof who);
        snprintf(msg, sizeof msg, "%s: %s did not complete it within %lld ms; NCCL communicator aborted", what, who,
                 (long long)comm->op_timeout_ms);
        rc = XDC_ERR_TIMEOUT;
    }
    if (rc != XDC_OK) {
        nccl_abort(n);
        rc = intra_comm_fail(comm, rc, msg);
    }
    pthread_mutex_unlock(&n->lock);
    if (rc != XDC_OK) intra_req_complete(q, rc, msg);
}

static void nccl_describe_wait(xdc_intra_comm *comm, xdc_intra_req *q, char *out, size_t cap)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    char who[160];
    nccl_awaited(comm, q, who, sizeof who);
    snprintf(out, cap, "waiting for %s (NCCL %s in flight on device %d%s)", who, intra_op_name(q->kind), n->device,
             q->group_n > 1 ? ", in a group" : "");
}

static xdc_err_t nccl_split(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = NULL;
    pthread_mutex_lock(&n->lock);
    cudaError_t ce = cudaSetDevice(n->device);
    if (ce != cudaSuccess) {
        pthread_mutex_unlock(&n->lock);
        xdc_diag_set(diag, "intra nccl: split on rank %d/%d: cudaSetDevice(%d): %s", comm->rank, comm->size, n->device,
                     cudaGetErrorString(ce));
        return XDC_ERR_CUDA;
    }
    ncclResult_t st = n->nc ? ncclCommSplit(n->nc, color == XDC_INTRA_UNDEFINED ? NCCL_SPLIT_NOCOLOR : color, key,
                                            &child, &config)
                            : ncclInvalidUsage;
    if (st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
    if (st == ncclSuccess && child) st = nccl_settle(child, xdc_deadline_ms(comm->op_timeout_ms));
    pthread_mutex_unlock(&n->lock);
    if (st != ncclSuccess) {
        char who[200];
        other_ranks(comm->rank, comm->size, who, sizeof who);
        if (st == ncclInProgress)
            xdc_diag_set(diag,
                         "intra nccl: split on rank %d/%d: one of %s did not arrive within %lld ms (NCCL does not "
                         "report which)",
                         comm->rank, comm->size, who, (long long)comm->op_timeout_ms);
        else xdc_diag_set(diag, "intra nccl: split on rank %d/%d: %s", comm->rank, comm->size, ncclGetErrorString(st));
        if (child) {
            ncclResult_t ab = ncclCommAbort(child);
            if (ab != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommAbort: %s", ncclGetErrorString(ab));
        }
        return nccl_err(st);
    }
    if (!child) return XDC_OK; /* NCCL_SPLIT_NOCOLOR */
    int rank = 0, size = 0;
    st = ncclCommUserRank(child, &rank);
    if (st == ncclSuccess) st = ncclCommCount(child, &size);
    xdc_intra_comm *c = NULL;
    xdc_err_t rc = XDC_OK;
    if (st != ncclSuccess) {
        xdc_diag_set(diag, "intra nccl: split on rank %d/%d: rank and size of the new group: %s", comm->rank,
                     comm->size, ncclGetErrorString(st));
        rc = nccl_err(st);
    }
    if (rc == XDC_OK) rc = intra_comm_alloc(comm->ops, rank, size, comm->op_timeout_ms, &c);
    if (rc == XDC_OK) rc = nccl_wrap(c, child, n->device, diag);
    if (rc != XDC_OK) {
        ncclResult_t ab = ncclCommAbort(child);
        if (ab != ncclSuccess) XDC_WARN(XDC_SUB_INTRA, "intra nccl: ncclCommAbort: %s", ncclGetErrorString(ab));
        intra_comm_free(c);
        return rc;
    }
    *out = c;
    return XDC_OK;
}

static void nccl_req_release(xdc_intra_req *q)
{
    if (q->bk) warn_cuda(cudaEventDestroy((cudaEvent_t)q->bk), "cudaEventDestroy");
    q->bk = NULL;
}

static xdc_err_t nccl_bootstrap_create(char *out, size_t cap, xdc_diag *diag)
{
    ncclUniqueId id;
    if (cap < 5 + 2 * sizeof id.internal + 1) {
        xdc_diag_set(diag, "intra bootstrap: buffer of %zu bytes too small", cap);
        return XDC_ERR_RANGE;
    }
    ncclResult_t st = ncclGetUniqueId(&id);
    if (st != ncclSuccess) {
        xdc_diag_set(diag, "intra nccl: ncclGetUniqueId: %s", ncclGetErrorString(st));
        return nccl_err(st);
    }
    memcpy(out, "nccl:", 5);
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(out + 5 + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return XDC_OK;
}

static int nccl_available(xdc_diag *diag)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n <= 0) {
        cudaGetLastError(); /* clear the sticky error so later calls start clean */
        xdc_diag_set(diag, "no CUDA device visible (cudaGetDeviceCount: %s, %d devices)", cudaGetErrorString(ce), n);
        return 0;
    }
    return 1;
}

static xdc_err_t nccl_mem_alloc(size_t bytes, void **out, xdc_diag *diag)
{
    cudaError_t ce = cudaMalloc(out, bytes ? bytes : 64);
    if (ce != cudaSuccess) {
        xdc_diag_set(diag, "intra nccl: cudaMalloc(%zu): %s", bytes, cudaGetErrorString(ce));
        return XDC_ERR_CUDA;
    }
    return XDC_OK;
}

static void nccl_mem_free(void *p) { warn_cuda(cudaFree(p), "cudaFree"); }

/* A test's upload or download. cudaMemcpy would run on the legacy stream, and a host-to-device copy from
 * pageable memory may return before its DMA is done, while the collectives run on the communicator's
 * non-blocking stream, which does not wait for the legacy one: the collective could read stale bytes.
 * So the copy goes to this thread's per-thread stream and the host waits for it: once this returns the
 * bytes are in place for whatever is queued afterwards on any stream (downloads: the caller waited for
 * the request that wrote them first). */
static xdc_err_t nccl_mem_copy(void *dst, const void *src, size_t bytes, int to_backend)
{
    const char *what = "cudaMemcpyAsync";
    cudaError_t ce = cudaMemcpyAsync(dst, src, bytes, to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                     cudaStreamPerThread);
    if (ce == cudaSuccess) {
        what = "cudaStreamSynchronize";
        ce = cudaStreamSynchronize(cudaStreamPerThread);
    }
    if (ce == cudaSuccess) return XDC_OK;
    XDC_WARN(XDC_SUB_INTRA, "intra nccl: %s of %zu bytes: %s", what, bytes, cudaGetErrorString(ce));
    return XDC_ERR_CUDA;
}

extern "C" const intra_backend_ops intra_nccl_ops = {
    "nccl",         nccl_create,        nccl_destroy,  nccl_start,       nccl_start_group,
    nccl_poll,      nccl_describe_wait, nccl_split,    nccl_req_release, nccl_bootstrap_create,
    nccl_available, nccl_mem_alloc,     nccl_mem_free, nccl_mem_copy,
};
