/* intra_priv.h — private layouts of the intra communicator: the generic communicator and request, and
 * the table of functions each backend (intra_cpu.c, intra_nccl.cu) implements. The generic layer
 * (intra_comm.c) owns requests, completion and waiting; a backend owns transport and progress. */
#ifndef XDC_INTRA_PRIV_H
#define XDC_INTRA_PRIV_H

#include "common/xdc_pool.h"
#include "intra/xdc_intra.h"

#include <pthread.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    INTRA_OP_SEND,
    INTRA_OP_RECV,
    INTRA_OP_ALL_REDUCE,
    INTRA_OP_REDUCE_SCATTER,
    INTRA_OP_ALL_GATHER,
    INTRA_OP_BROADCAST,
    INTRA_OP_BARRIER,
} intra_op_kind;

struct xdc_intra_req {
    xdc_intra_comm *comm;
    intra_op_kind kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements: per rank block for reduce_scatter/all_gather */
    xdc_intra_dtype dtype;
    xdc_intra_redop redop;
    int peer;      /* send/recv peer, broadcast root */
    uint64_t seq;  /* start order on this communicator, for messages */
    uint64_t hold; /* send/recv on device memory: dev_ops->comm_hold's token, released when the host saw it done */
    uint64_t start_ns;
    int done; /* set last, with __atomic release; read with acquire */
    xdc_err_t rc;
    char msg[384];
    /* backend progress state */
    size_t moved;     /* bytes (p2p: header included) */
    uint64_t p2p_hdr; /* p2p: message length header being sent or assembled */
    uint64_t last_progress_ns;
    void *bk;                   /* backend per-request object (NCCL: cudaEvent_t), kept across reuse */
    struct xdc_intra_req *next; /* backend queue */
    /* groups: the outermost group it was started in (0: none) and the open group's list */
    uint64_t group;
    struct xdc_intra_req *group_next;
    int group_n;         /* requests in its group (1 when ungrouped) */
    uint64_t group_seq0; /* seq of its group's first request */
    int issued;          /* NCCL: its event is recorded (under the backend lock) */
    /* CPU with NCCL semantics: the in-order stream */
    uint64_t unit;                     /* stream unit (one op, or one group) */
    struct xdc_intra_req *stream_next; /* stream queue */
};

typedef struct intra_backend_ops {
    const char *name;
    xdc_err_t (*create)(xdc_intra_comm *comm, const xdc_intra_config *cfg, xdc_diag *diag);
    void (*destroy)(xdc_intra_comm *comm);
    /* Take a request whose fields are filled; the backend completes it later via intra_req_complete. */
    xdc_err_t (*start)(xdc_intra_comm *comm, xdc_intra_req *req);
    /* Take the n requests of a group (linked by group_next, in start order) and issue them as one unit.
     * On an error none of them has been handed on (the caller completes them). */
    xdc_err_t (*start_group)(xdc_intra_comm *comm, xdc_intra_req *first, int n);
    /* NULL for backends whose own threads complete requests; else called by waiters to drive progress. */
    void (*poll)(xdc_intra_comm *comm, xdc_intra_req *req);
    /* Write who `req` is waiting for into out (for timeout messages). */
    void (*describe_wait)(xdc_intra_comm *comm, xdc_intra_req *req, char *out, size_t cap);
    xdc_err_t (*split)(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag);
    void (*req_release)(xdc_intra_req *req); /* free req->bk; NULL when unused */
    xdc_err_t (*bootstrap_create)(char *out, size_t cap, xdc_diag *diag);
    int (*available)(xdc_diag *diag);
    xdc_err_t (*mem_alloc)(size_t bytes, void **out, xdc_diag *diag);
    void (*mem_free)(void *p);
    xdc_err_t (*mem_copy)(void *dst, const void *src, size_t bytes, int to_backend);
} intra_backend_ops;

struct xdc_intra_comm {
    const intra_backend_ops *ops;
    void *impl;
    int rank, size;
    int64_t op_timeout_ms;
    pthread_mutex_t lock;     /* requests, free list, failure state, backend queues */
    pthread_cond_t done_cond; /* CLOCK_MONOTONIC; broadcast when a request completes */
    uint64_t next_seq;
    xdc_pool reqs;    /* xdc_intra_req objects, allocated once and reused (under `lock`) */
    xdc_err_t failed; /* XDC_OK while healthy */
    char error[384];
    int nccl_semantics;            /* CPU: one in-order stream per communicator (xdc_intra_config.nccl_semantics) */
    const xdc_device_ops *dev_ops; /* xdc_intra_config.dev_ops: buffers are translated through comm_view */
    /* the open group (under `lock`): depth, the thread that opened it, its id and requests */
    int group_depth;
    pthread_t group_owner;
    uint64_t group_id, groups;
    xdc_intra_req *group_head, *group_tail;
    int group_n;
};

const intra_backend_ops *intra_backend_lookup(xdc_intra_backend backend, xdc_diag *diag);

/* Generic communicator around a backend: used by create and by the backends' split. */
xdc_err_t intra_comm_alloc(const intra_backend_ops *ops, int rank, int size, int64_t op_timeout_ms,
                           xdc_intra_comm **out);
void intra_comm_free(xdc_intra_comm *comm);

/* Complete a request (any thread). */
void intra_req_complete(xdc_intra_req *req, xdc_err_t rc, const char *msg);
/* Mark the communicator failed with this error (the first failure wins); returns the stored error. */
xdc_err_t intra_comm_fail(xdc_intra_comm *comm, xdc_err_t rc, const char *msg);
const char *intra_op_name(intra_op_kind kind);

/* Reductions over host memory (intra_reduce.c). out[i] = op(in[0][i], ..., in[n-1][i]), summed in
 * rank order in fp32 and, for BF16, rounded to nearest even once. out may alias in[0]. */
void intra_reduce_host(void *out, const void *const *in, int n, size_t count, xdc_intra_dtype dtype,
                       xdc_intra_redop op);

#ifdef __cplusplus
}
#endif

#endif /* XDC_INTRA_PRIV_H */
