/* xdc_intra.h — the intra-region communicator: one API over two backends, NCCL (GPU buffers) and CPU
 * (processes on one host, shared memory). Point-to-point send/recv, all_reduce, reduce_scatter,
 * all_gather, broadcast, barrier and MPI-style split into sub-groups.
 *
 * Operations are asynchronous: a start call queues the operation and returns a request; test/wait
 * complete it. Every wait takes a deadline and reports which rank it is waiting for.
 *
 * Threading rule: any thread may start operations on a communicator and any thread may test or wait on
 * a request (one thread per request). Ranks must start the collectives of one communicator in the same
 * order (as with NCCL and MPI); send/recv between two ranks are matched in start order per direction,
 * independently of collectives. Buffers belong to the communicator from the start call until the
 * request completes.
 *
 * Groups (xdc_intra_group_start/end) issue the operations started between them together, as NCCL's
 * ncclGroupStart/End: this is how a pipeline step posts its sends and receives so that neither side
 * blocks the other. With NCCL semantics (the NCCL backend always; the CPU backend with
 * cfg.nccl_semantics) the operations of one communicator run in start order on one in-order stream: an
 * ungrouped recv holds back every later operation of the communicator until its send arrives, and a
 * group is one unit of that stream. */
#ifndef XDC_INTRA_H
#define XDC_INTRA_H

#include "common/xdc_err.h"
#include "kernels/xdc_device.h"

#include <stddef.h>
#include <stdint.h>

typedef struct xdc_intra_comm xdc_intra_comm;
typedef struct xdc_intra_req xdc_intra_req;

typedef enum { XDC_INTRA_CPU = 0, XDC_INTRA_NCCL = 1 } xdc_intra_backend;
typedef enum { XDC_INTRA_F32 = 0, XDC_INTRA_BF16 = 1 } xdc_intra_dtype;
typedef enum { XDC_INTRA_SUM = 0, XDC_INTRA_AVG = 1 } xdc_intra_redop;

/* Colour for xdc_intra_split: this rank joins no sub-group. */
#define XDC_INTRA_UNDEFINED     (-1)
/* Longest bootstrap id string, NUL included (NCCL: "nccl:" + 256 hex digits). */
#define XDC_INTRA_BOOTSTRAP_MAX 320

typedef struct xdc_intra_config {
    xdc_intra_backend backend;
    int rank;                  /* 0 .. size-1 */
    int size;                  /* ranks in the group, 1 .. 64 */
    const char *bootstrap;     /* from xdc_intra_bootstrap_create on one rank, passed to all out of band */
    int64_t create_timeout_ms; /* how long create waits for every rank to arrive (< 0: forever) */
    int64_t op_timeout_ms;     /* an operation that makes no progress this long fails the communicator */
    int device;                /* NCCL: CUDA device ordinal; CPU: ignored */
    /* CPU: run with NCCL's ordering, to catch on CPU what would hang on GPUs: every operation of the
     * communicator (and of its splits) runs in start order, one unit at a time (a group is one unit), so
     * an ungrouped recv blocks all later operations until its send arrives, and a pattern that would
     * deadlock on NCCL fails with the op_timeout_ms error naming the rank. Also turned on by the
     * environment variable XDC_INTRA_NCCL_SEMANTICS=1. NCCL: always so; ignored. */
    int nccl_semantics;
    /* The device whose memory the buffers may be (NULL: none, every buffer is memory the backend reads
     * as it is). Each operation translates its buffers at start through dev_ops->comm_view: a device
     * pointer becomes the address a communication library running "on the device" uses (cpu-strict: the
     * read-write alias of the PROT_NONE view; cpu, CUDA: the pointer itself, NCCL takes device pointers
     * as they are); a pointer comm_view refuses (host memory: a loss, a hash state) is used as it is.
     * The caller orders the device work that produced a send buffer before the start (stream_sync,
     * event_sync) and reads a receive buffer on the device only after the request completed. Splits
     * inherit it. */
    const xdc_device_ops *dev_ops;
} xdc_intra_config;

#define XDC_INTRA_CONFIG_INIT                                                                          \
    {                                                                                                  \
        .backend = XDC_INTRA_CPU, .rank = 0, .size = 1, .bootstrap = NULL, .create_timeout_ms = 30000, \
        .op_timeout_ms = 60000, .device = 0, .nccl_semantics = 0, .dev_ops = NULL                      \
    }

/* Size of one element in bytes (4 for F32, 2 for BF16). */
size_t xdc_intra_dtype_size(xdc_intra_dtype dtype);

/* bf16 bit patterns <-> fp32 (round to nearest even, NaN stays NaN), as the CPU backend reduces them. */
uint16_t xdc_intra_f32_to_bf16(float f);
float xdc_intra_bf16_to_f32(uint16_t h);

/* Make a fresh bootstrap id on one rank (rank 0) as a NUL-terminated string of at most
 * XDC_INTRA_BOOTSTRAP_MAX bytes, to hand to every rank through the rendezvous, a file or a socket.
 * CPU: "cpu:/xdc-<pid>-<random>" (a shared-memory name); NCCL: "nccl:<ncclUniqueId in hex>". */
xdc_err_t xdc_intra_bootstrap_create(xdc_intra_backend backend, char *out, size_t cap, xdc_diag *diag);

/* Join the group. Blocks until every rank has joined or create_timeout_ms passes (XDC_ERR_TIMEOUT, diag
 * names the ranks missing). */
xdc_err_t xdc_intra_create(const xdc_intra_config *cfg, xdc_intra_comm **out, xdc_diag *diag);
/* Stop progress threads and release the group's resources. Requests not yet completed are
 * invalidated. NULL is a no-op. */
void xdc_intra_destroy(xdc_intra_comm *comm);

int xdc_intra_rank(const xdc_intra_comm *comm);
int xdc_intra_size(const xdc_intra_comm *comm);
/* Why the communicator failed ("" while healthy). Once failed, every operation fails with its error. */
const char *xdc_intra_error(const xdc_intra_comm *comm);

/* Collective over `comm`: ranks with the same colour form a sub-group, ordered by (key, parent rank).
 * A rank passing XDC_INTRA_UNDEFINED gets *out = NULL. Blocking, bounded by op_timeout_ms. */
xdc_err_t xdc_intra_split(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag);

/* Point to point: `count` elements (any count, 0 allowed). A recv must match the size of the send. */
xdc_err_t xdc_intra_send(xdc_intra_comm *comm, const void *buf, size_t count, xdc_intra_dtype dtype, int peer,
                         xdc_intra_req **req);
xdc_err_t xdc_intra_recv(xdc_intra_comm *comm, void *buf, size_t count, xdc_intra_dtype dtype, int peer,
                         xdc_intra_req **req);

/* sendbuf, recvbuf: (count,) each; in place when equal. BF16 is reduced in fp32 and rounded once. */
xdc_err_t xdc_intra_all_reduce(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                               xdc_intra_dtype dtype, xdc_intra_redop op, xdc_intra_req **req);
/* sendbuf: (size, recvcount); recvbuf: (recvcount,) = this rank's block of the reduction.
 * In place when recvbuf == sendbuf + rank * recvcount elements. */
xdc_err_t xdc_intra_reduce_scatter(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                   xdc_intra_dtype dtype, xdc_intra_redop op, xdc_intra_req **req);
/* sendbuf: (sendcount,); recvbuf: (size, sendcount), block r from rank r.
 * In place when sendbuf == recvbuf + rank * sendcount elements. */
xdc_err_t xdc_intra_all_gather(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                               xdc_intra_dtype dtype, xdc_intra_req **req);
/* buf: (count,), sent from `root` to every rank. */
xdc_err_t xdc_intra_broadcast(xdc_intra_comm *comm, void *buf, size_t count, xdc_intra_dtype dtype, int root,
                              xdc_intra_req **req);
xdc_err_t xdc_intra_barrier(xdc_intra_comm *comm, xdc_intra_req **req);

/* Group the operations this thread starts on `comm` until the matching group_end (groups nest; the
 * outermost end issues them): they are issued together, as one unit (NCCL: ncclGroupStart/End around
 * them; CPU: one batch, matched as a unit). Requests are returned at once but nothing moves before the
 * end; waiting for one inside its own open group fails with XDC_ERR_INVALID. Other threads' operations
 * on the communicator are not part of the group. */
xdc_err_t xdc_intra_group_start(xdc_intra_comm *comm);
/* Issue the group. On an error (the communicator failed, NCCL refused the group) every request of the
 * group is completed with that error (wait on them to release them) and the error is returned. */
xdc_err_t xdc_intra_group_end(xdc_intra_comm *comm);

/* Non-blocking check. On completion (*done = 1) the request is released and its result returned
 * (XDC_OK, or the operation's error with detail in diag). *done = 0 returns XDC_OK. */
xdc_err_t xdc_intra_test(xdc_intra_req *req, int *done, xdc_diag *diag);
/* Block until the request completes (then it is released, result as for test) or timeout_ms passes:
 * XDC_ERR_TIMEOUT, the request stays valid, and diag names the rank(s) being waited for.
 * timeout_ms < 0 waits for the operation's own op_timeout_ms. */
xdc_err_t xdc_intra_wait(xdc_intra_req *req, int64_t timeout_ms, xdc_diag *diag);

/* Memory the backend's operations take: host memory for CPU, device memory for NCCL (on the device of
 * the calling thread, set by create). Tests and callers stage data with upload/download. */
xdc_err_t xdc_intra_mem_alloc(xdc_intra_backend backend, size_t bytes, void **out, xdc_diag *diag);
void xdc_intra_mem_free(xdc_intra_backend backend, void *p);
xdc_err_t xdc_intra_mem_upload(xdc_intra_backend backend, void *dst, const void *host_src, size_t bytes);
xdc_err_t xdc_intra_mem_download(xdc_intra_backend backend, void *host_dst, const void *src, size_t bytes);

/* True when the backend can run in this process (NCCL: built with NCCL and a CUDA device is visible);
 * otherwise diag says why. */
int xdc_intra_backend_available(xdc_intra_backend backend, xdc_diag *diag);

#endif /* XDC_INTRA_H */
