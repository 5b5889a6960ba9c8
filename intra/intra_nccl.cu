/* intra_nccl.cu — the NCCL backend: one non-blocking NCCL communicator per group (so init, split and
 * every call can be bounded by a deadline), one CUDA stream for collectives and one for send/recv, and
 * a CUDA event per request. NCCL never times out by itself, so the watchdog is ours: a request past
 * op_timeout_ms, or an asynchronous NCCL error, aborts the communicator (ncclCommAbort) and fails every
 * later request. Compiled only where nvcc exists (the Makefile builds the .cu files of intra/ then); registered in
 * intra_registry.c. */
/* the project headers are C: give them C linkage */
extern "C" {
#include "intra/intra_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"
}

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct nccl_comm {
    ncclComm_t nc;
    cudaStream_t coll_stream, p2p_stream;
    int device;
    float *scratch;       /* (1,) fp32 on the device: the barrier's all-reduce */
    pthread_mutex_t lock; /* NCCL calls on one communicator are not thread-safe */
} nccl_comm;

static ncclDataType_t nccl_dtype(xdc_intra_dtype d) { return d == XDC_INTRA_BF16 ? ncclBfloat16 : ncclFloat32; }

/* Poll a non-blocking communicator until its pending call finished or the deadline passed. */
static ncclResult_t nccl_settle(ncclComm_t nc, uint64_t deadline)
{
    ncclResult_t st = ncclInProgress;
    while (ncclCommGetAsyncError(nc, &st) == ncclSuccess && st == ncclInProgress) {
        if (xdc_deadline_passed(deadline)) return ncclInProgress;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return st;
}

static xdc_err_t nccl_err(ncclResult_t st)
{
    return st == ncclRemoteError || st == ncclSystemError ? XDC_ERR_PEER_LOST : XDC_ERR_NCCL;
}

static xdc_err_t nccl_wrap(xdc_intra_comm *comm, ncclComm_t nc, int device, xdc_diag *diag)
{
    nccl_comm *n = (nccl_comm *)xdc_calloc(1, sizeof *n);
    if (!n) return XDC_ERR_NOMEM;
    n->nc = nc;
    n->device = device;
    pthread_mutex_init(&n->lock, NULL);
    if (cudaStreamCreateWithFlags(&n->coll_stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&n->p2p_stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&n->scratch, sizeof(float)) != cudaSuccess) {
        xdc_diag_set(diag, "intra nccl: streams or scratch on device %d: %s", device,
                     cudaGetErrorString(cudaGetLastError()));
        if (n->coll_stream) cudaStreamDestroy(n->coll_stream);
        if (n->p2p_stream) cudaStreamDestroy(n->p2p_stream);
        pthread_mutex_destroy(&n->lock);
        xdc_free(n);
        return XDC_ERR_CUDA;
    }
    cudaMemset(n->scratch, 0, sizeof(float));
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
    if (cudaSetDevice(cfg->device) != cudaSuccess) {
        xdc_diag_set(diag, "intra nccl: cudaSetDevice(%d): %s", cfg->device, cudaGetErrorString(cudaGetLastError()));
        return XDC_ERR_CUDA;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nc = NULL;
    ncclResult_t st = ncclCommInitRankConfig(&nc, cfg->size, id, cfg->rank, &config);
    if (st == ncclSuccess || st == ncclInProgress) st = nccl_settle(nc, xdc_deadline_ms(cfg->create_timeout_ms));
    if (st != ncclSuccess) {
        if (st == ncclInProgress)
            xdc_diag_set(diag, "intra nccl: rank %d/%d: not every rank joined within %lld ms (NCCL does not say which)",
                         cfg->rank, cfg->size, (long long)cfg->create_timeout_ms);
        else
            xdc_diag_set(diag, "intra nccl: rank %d/%d: init failed: %s %s", cfg->rank, cfg->size,
                         ncclGetErrorString(st), nc ? ncclGetLastError(nc) : "");
        if (nc) ncclCommAbort(nc);
        return st == ncclInProgress ? XDC_ERR_TIMEOUT : nccl_err(st);
    }
    xdc_err_t rc = nccl_wrap(comm, nc, cfg->device, diag);
    if (rc != XDC_OK) ncclCommAbort(nc);
    return rc;
}

static void nccl_destroy(xdc_intra_comm *comm)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    if (!n) return;
    cudaSetDevice(n->device);
    int clean = comm->failed == XDC_OK && n->nc;
    if (clean && ncclCommFinalize(n->nc) != ncclSystemError)
        clean = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms)) == ncclSuccess;
    if (clean) ncclCommDestroy(n->nc);
    else if (n->nc) /* NULL once a watchdog already aborted it */ ncclCommAbort(n->nc);
    cudaStreamDestroy(n->coll_stream);
    cudaStreamDestroy(n->p2p_stream);
    cudaFree(n->scratch);
    pthread_mutex_destroy(&n->lock);
    xdc_free(n);
    comm->impl = NULL;
}

static ncclResult_t nccl_issue(nccl_comm *n, xdc_intra_req *q)
{
    ncclDataType_t dt = nccl_dtype(q->dtype);
    ncclRedOp_t op = q->redop == XDC_INTRA_AVG ? ncclAvg : ncclSum;
    cudaStream_t s = n->coll_stream;
    switch (q->kind) {
    case INTRA_OP_SEND: return ncclSend(q->sendbuf, q->count, dt, q->peer, n->nc, n->p2p_stream);
    case INTRA_OP_RECV: return ncclRecv(q->recvbuf, q->count, dt, q->peer, n->nc, n->p2p_stream);
    case INTRA_OP_ALL_REDUCE: return ncclAllReduce(q->sendbuf, q->recvbuf, q->count, dt, op, n->nc, s);
    case INTRA_OP_REDUCE_SCATTER: return ncclReduceScatter(q->sendbuf, q->recvbuf, q->count, dt, op, n->nc, s);
    case INTRA_OP_ALL_GATHER: return ncclAllGather(q->sendbuf, q->recvbuf, q->count, dt, n->nc, s);
    case INTRA_OP_BROADCAST: return ncclBroadcast(q->recvbuf, q->recvbuf, q->count, dt, q->peer, n->nc, s);
    case INTRA_OP_BARRIER: return ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum, n->nc, s);
    }
    return ncclInvalidArgument;
}

static xdc_err_t nccl_start(xdc_intra_comm *comm, xdc_intra_req *q)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    char msg[384];
    xdc_err_t rc = XDC_OK;
    pthread_mutex_lock(&n->lock);
    cudaSetDevice(n->device);
    if (!q->bk) {
        cudaEvent_t ev;
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
            pthread_mutex_unlock(&n->lock);
            return XDC_ERR_CUDA;
        }
        q->bk = (void *)ev;
    }
    ncclResult_t st = nccl_issue(n, q);
    if (st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
    if (st != ncclSuccess) {
        snprintf(msg, sizeof msg, "intra nccl: starting %s on rank %d/%d: %s %s", intra_op_name(q->kind), comm->rank,
                 comm->size, st == ncclInProgress ? "timed out" : ncclGetErrorString(st), ncclGetLastError(n->nc));
        ncclCommAbort(n->nc);
        n->nc = NULL;
        rc = intra_comm_fail(comm, st == ncclInProgress ? XDC_ERR_TIMEOUT : nccl_err(st), msg);
    } else {
        cudaEventRecord((cudaEvent_t)q->bk,
                        q->kind == INTRA_OP_SEND || q->kind == INTRA_OP_RECV ? n->p2p_stream : n->coll_stream);
    }
    pthread_mutex_unlock(&n->lock);
    return rc;
}

static void nccl_poll(xdc_intra_comm *comm, xdc_intra_req *q)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    char msg[384];
    pthread_mutex_lock(&n->lock);
    if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&n->lock);
        return;
    }
    if (comm->failed != XDC_OK || !n->nc) {
        snprintf(msg, sizeof msg, "%s", comm->error);
        pthread_mutex_unlock(&n->lock);
        intra_req_complete(q, comm->failed != XDC_OK ? comm->failed : XDC_ERR_NCCL, msg);
        return;
    }
    cudaSetDevice(n->device);
    cudaError_t ce = cudaEventQuery((cudaEvent_t)q->bk);
    if (ce == cudaSuccess) {
        pthread_mutex_unlock(&n->lock);
        intra_req_complete(q, XDC_OK, NULL);
        return;
    }
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(n->nc, &st);
    xdc_err_t rc = XDC_OK;
    if (ce != cudaErrorNotReady) {
        snprintf(msg, sizeof msg, "intra nccl: %s on rank %d/%d: CUDA error %s", intra_op_name(q->kind), comm->rank,
                 comm->size, cudaGetErrorString(ce));
        rc = XDC_ERR_CUDA;
    } else if (st != ncclSuccess && st != ncclInProgress) {
        snprintf(msg, sizeof msg, "intra nccl: %s on rank %d/%d: %s %s", intra_op_name(q->kind), comm->rank, comm->size,
                 ncclGetErrorString(st), ncclGetLastError(n->nc));
        rc = nccl_err(st);
    } else if (comm->op_timeout_ms >= 0 && xdc_now_ns() - q->start_ns > (uint64_t)comm->op_timeout_ms * XDC_NS_PER_MS) {
        snprintf(msg, sizeof msg,
                 "intra nccl: %s (op #%llu) on rank %d/%d did not complete within %lld ms; communicator aborted (NCCL "
                 "cannot tell which of its %d ranks is missing)",
                 intra_op_name(q->kind), (unsigned long long)q->seq, comm->rank, comm->size,
                 (long long)comm->op_timeout_ms, comm->size);
        rc = XDC_ERR_TIMEOUT;
    }
    if (rc != XDC_OK) {
        ncclCommAbort(n->nc);
        n->nc = NULL;
        rc = intra_comm_fail(comm, rc, msg);
    }
    pthread_mutex_unlock(&n->lock);
    if (rc != XDC_OK) intra_req_complete(q, rc, msg);
}

static void nccl_describe_wait(xdc_intra_comm *comm, xdc_intra_req *q, char *out, size_t cap)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    snprintf(out, cap, "NCCL %s in flight on device %d%s%d (NCCL does not report which rank is missing)",
             intra_op_name(q->kind), n->device,
             q->kind == INTRA_OP_SEND || q->kind == INTRA_OP_RECV ? ", peer rank " : ", group of ",
             q->kind == INTRA_OP_SEND || q->kind == INTRA_OP_RECV ? q->peer : comm->size);
}

static xdc_err_t nccl_split(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag)
{
    nccl_comm *n = (nccl_comm *)comm->impl;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = NULL;
    pthread_mutex_lock(&n->lock);
    cudaSetDevice(n->device);
    ncclResult_t st = n->nc ? ncclCommSplit(n->nc, color == XDC_INTRA_UNDEFINED ? NCCL_SPLIT_NOCOLOR : color, key,
                                            &child, &config)
                            : ncclInvalidUsage;
    if (st == ncclInProgress) st = nccl_settle(n->nc, xdc_deadline_ms(comm->op_timeout_ms));
    if (st == ncclSuccess && child) st = nccl_settle(child, xdc_deadline_ms(comm->op_timeout_ms));
    pthread_mutex_unlock(&n->lock);
    if (st != ncclSuccess) {
        xdc_diag_set(diag, "intra nccl: split on rank %d/%d: %s", comm->rank, comm->size,
                     st == ncclInProgress ? "timed out" : ncclGetErrorString(st));
        if (child) ncclCommAbort(child);
        return st == ncclInProgress ? XDC_ERR_TIMEOUT : nccl_err(st);
    }
    if (!child) return XDC_OK; /* NCCL_SPLIT_NOCOLOR */
    int rank = 0, size = 0;
    ncclCommUserRank(child, &rank);
    ncclCommCount(child, &size);
    xdc_intra_comm *c = NULL;
    xdc_err_t rc = intra_comm_alloc(comm->ops, rank, size, comm->op_timeout_ms, &c);
    if (rc == XDC_OK) rc = nccl_wrap(c, child, n->device, diag);
    if (rc != XDC_OK) {
        ncclCommAbort(child);
        intra_comm_free(c);
        return rc;
    }
    *out = c;
    return XDC_OK;
}

static void nccl_req_release(xdc_intra_req *q)
{
    if (q->bk) cudaEventDestroy((cudaEvent_t)q->bk);
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

static void nccl_mem_free(void *p) { cudaFree(p); }

static xdc_err_t nccl_mem_copy(void *dst, const void *src, size_t bytes, int to_backend)
{
    return cudaMemcpy(dst, src, bytes, to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) == cudaSuccess
               ? XDC_OK
               : XDC_ERR_CUDA;
}

extern "C" const intra_backend_ops intra_nccl_ops = {
    "nccl",        nccl_create,      nccl_destroy,          nccl_start,     nccl_poll,      nccl_describe_wait,
    nccl_split,    nccl_req_release, nccl_bootstrap_create, nccl_available, nccl_mem_alloc, nccl_mem_free,
    nccl_mem_copy,
};
