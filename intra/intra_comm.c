/* intra_comm.c — the backend-independent half of the communicator: argument checks, the request pool,
 * completion, test/wait with deadlines, failure state, and dispatch to the backend table. */
#include "intra/intra_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INTRA_MAX_RANKS 64

size_t xdc_intra_dtype_size(xdc_intra_dtype dtype) { return dtype == XDC_INTRA_BF16 ? 2 : 4; }

const char *intra_op_name(intra_op_kind kind)
{
    static const char *const names[] = {"send",       "recv",      "all_reduce", "reduce_scatter",
                                        "all_gather", "broadcast", "barrier"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "op";
}

xdc_err_t xdc_intra_bootstrap_create(xdc_intra_backend backend, char *out, size_t cap, xdc_diag *diag)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, diag);
    if (!ops) return XDC_ERR_UNSUPPORTED;
    if (!out || cap == 0) {
        xdc_diag_set(diag, "intra bootstrap: no output buffer");
        return XDC_ERR_INVALID;
    }
    return ops->bootstrap_create(out, cap, diag);
}

int xdc_intra_backend_available(xdc_intra_backend backend, xdc_diag *diag)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, diag);
    return ops && ops->available(diag);
}

xdc_err_t intra_comm_alloc(const intra_backend_ops *ops, int rank, int size, int64_t op_timeout_ms,
                           xdc_intra_comm **out)
{
    xdc_intra_comm *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->done_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->lock, NULL);
    xdc_pool_init(&c->reqs, sizeof(xdc_intra_req));
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->op_timeout_ms = op_timeout_ms;
    *out = c;
    return XDC_OK;
}

static void req_release_one(void *obj, void *ops) { ((const intra_backend_ops *)ops)->req_release(obj); }

void intra_comm_free(xdc_intra_comm *c)
{
    if (!c) return;
    if (c->ops->req_release) xdc_pool_each(&c->reqs, req_release_one, (void *)c->ops);
    xdc_pool_destroy(&c->reqs);
    pthread_cond_destroy(&c->done_cond);
    pthread_mutex_destroy(&c->lock);
    xdc_free(c);
}

xdc_err_t xdc_intra_create(const xdc_intra_config *cfg, xdc_intra_comm **out, xdc_diag *diag)
{
    if (!cfg || !out) return XDC_ERR_INVALID;
    *out = NULL;
    if (cfg->size < 1 || cfg->size > INTRA_MAX_RANKS || cfg->rank < 0 || cfg->rank >= cfg->size) {
        xdc_diag_set(diag, "intra create: rank %d of size %d out of range (size 1..%d)", cfg->rank, cfg->size,
                     INTRA_MAX_RANKS);
        return XDC_ERR_CONFIG;
    }
    if (!cfg->bootstrap || !cfg->bootstrap[0]) {
        xdc_diag_set(diag, "intra create: no bootstrap id (make one with xdc_intra_bootstrap_create)");
        return XDC_ERR_CONFIG;
    }
    const intra_backend_ops *ops = intra_backend_lookup(cfg->backend, diag);
    if (!ops) return XDC_ERR_UNSUPPORTED;
    xdc_intra_comm *c = NULL;
    xdc_err_t rc;
    XDC_CHECK(intra_comm_alloc(ops, cfg->rank, cfg->size, cfg->op_timeout_ms, &c));
    const char *env = getenv("XDC_INTRA_NCCL_SEMANTICS");
    c->nccl_semantics = cfg->nccl_semantics || (env && env[0] == '1');
    c->dev_ops = cfg->dev_ops;
    XDC_CHECK_GOTO(ops->create(c, cfg, diag), rc, fail);
    XDC_DEBUG(XDC_SUB_INTRA, "intra: rank %d/%d joined on %s%s", cfg->rank, cfg->size, ops->name,
              c->nccl_semantics ? " (NCCL semantics)" : "");
    *out = c;
    return XDC_OK;
fail:
    intra_comm_free(c);
    return rc;
}

void xdc_intra_destroy(xdc_intra_comm *comm)
{
    if (!comm) return;
    comm->ops->destroy(comm);
    intra_comm_free(comm);
}

int xdc_intra_rank(const xdc_intra_comm *comm) { return comm->rank; }
int xdc_intra_size(const xdc_intra_comm *comm) { return comm->size; }

const char *xdc_intra_error(const xdc_intra_comm *comm) { return comm->failed == XDC_OK ? "" : comm->error; }

xdc_err_t intra_comm_fail(xdc_intra_comm *comm, xdc_err_t rc, const char *msg)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->failed == XDC_OK) {
        comm->failed = rc;
        snprintf(comm->error, sizeof comm->error, "%s", msg);
        XDC_ERROR(XDC_SUB_INTRA, "intra rank %d/%d failed: %s", comm->rank, comm->size, msg);
    }
    rc = comm->failed;
    pthread_mutex_unlock(&comm->lock);
    return rc;
}

xdc_err_t xdc_intra_split(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag)
{
    if (!comm || !out || color < XDC_INTRA_UNDEFINED) {
        xdc_diag_set(diag, "intra split: invalid arguments (colour must be >= 0 or XDC_INTRA_UNDEFINED)");
        return XDC_ERR_INVALID;
    }
    *out = NULL;
    xdc_err_t rc = comm->ops->split(comm, color, key, out, diag);
    if (rc == XDC_OK && *out) (*out)->dev_ops = comm->dev_ops;
    return rc;
}

/* ---- requests ------------------------------------------------------------------------------------ */

/* The address the backend reads or writes for `p`: its comm_view when p is memory of the communicator's
 * device, else p itself (host memory, or no device). */
static void *comm_addr(const xdc_intra_comm *comm, const void *p)
{
    void *v = NULL;
    if (p && comm->dev_ops && comm->dev_ops->comm_view(p, &v) == XDC_OK) return v;
    return (void *)(uintptr_t)p;
}

/* The host saw the request end (or it never started): the device may reuse its buffer. */
static void release_hold(xdc_intra_req *r)
{
    if (r->hold) r->comm->dev_ops->comm_release(r->hold);
    r->hold = 0;
}

static xdc_err_t req_start(xdc_intra_comm *comm, intra_op_kind kind, const void *sendbuf, void *recvbuf, size_t count,
                           xdc_intra_dtype dtype, xdc_intra_redop redop, int peer, xdc_intra_req **out)
{
    if (!comm || !out) return XDC_ERR_INVALID;
    *out = NULL;
    if ((dtype != XDC_INTRA_F32 && dtype != XDC_INTRA_BF16) || (redop != XDC_INTRA_SUM && redop != XDC_INTRA_AVG))
        return XDC_ERR_INVALID;
    if (count > 0 &&
        ((kind != INTRA_OP_RECV && kind != INTRA_OP_BROADCAST && !sendbuf) || (kind != INTRA_OP_SEND && !recvbuf)))
        return XDC_ERR_INVALID;
    if ((kind == INTRA_OP_SEND || kind == INTRA_OP_RECV) && (peer < 0 || peer >= comm->size || peer == comm->rank))
        return XDC_ERR_INVALID;
    if (kind == INTRA_OP_BROADCAST && (peer < 0 || peer >= comm->size)) return XDC_ERR_INVALID;

    pthread_mutex_lock(&comm->lock);
    if (comm->failed != XDC_OK) {
        xdc_err_t rc = comm->failed;
        pthread_mutex_unlock(&comm->lock);
        return rc;
    }
    xdc_intra_req *r = xdc_pool_get(&comm->reqs); /* a reused request keeps its backend object (bk) */
    if (!r) {
        pthread_mutex_unlock(&comm->lock);
        return XDC_ERR_NOMEM;
    }
    r->seq = comm->next_seq++;
    int grouped = comm->group_depth > 0 && pthread_equal(comm->group_owner, pthread_self());
    r->group = grouped ? comm->group_id : 0;
    pthread_mutex_unlock(&comm->lock);

    r->comm = comm;
    r->kind = kind;
    r->hold = 0;
    if ((kind == INTRA_OP_SEND || kind == INTRA_OP_RECV) && comm->dev_ops && comm->dev_ops->comm_hold)
        comm->dev_ops->comm_hold(kind == INTRA_OP_SEND ? sendbuf : recvbuf, count * xdc_intra_dtype_size(dtype),
                                 kind == INTRA_OP_RECV, kind == INTRA_OP_SEND ? "intra send" : "intra recv", &r->hold);
    r->sendbuf = comm_addr(comm, sendbuf);
    r->recvbuf = comm_addr(comm, recvbuf);
    r->count = count;
    r->dtype = dtype;
    r->redop = redop;
    r->peer = peer;
    r->start_ns = r->last_progress_ns = xdc_now_ns();
    r->moved = 0;
    r->rc = XDC_OK;
    r->msg[0] = 0;
    r->next = NULL;
    r->group_next = r->stream_next = NULL;
    r->group_n = 1;
    r->group_seq0 = r->seq;
    r->issued = 0;
    r->unit = 0;
    __atomic_store_n(&r->done, 0, __ATOMIC_RELAXED);
    if (r->group) { /* issued by the outermost group_end */
        pthread_mutex_lock(&comm->lock);
        if (comm->group_tail) comm->group_tail->group_next = r;
        else comm->group_head = r;
        comm->group_tail = r;
        comm->group_n++;
        pthread_mutex_unlock(&comm->lock);
        *out = r;
        return XDC_OK;
    }
    xdc_err_t rc = comm->ops->start(comm, r);
    if (rc != XDC_OK) {
        release_hold(r);
        pthread_mutex_lock(&comm->lock);
        xdc_pool_put(&comm->reqs, r);
        pthread_mutex_unlock(&comm->lock);
        return rc;
    }
    *out = r;
    return XDC_OK;
}

xdc_err_t xdc_intra_group_start(xdc_intra_comm *comm)
{
    if (!comm) return XDC_ERR_INVALID;
    pthread_mutex_lock(&comm->lock);
    xdc_err_t rc = XDC_OK;
    if (comm->group_depth > 0 && !pthread_equal(comm->group_owner, pthread_self())) {
        rc = XDC_ERR_INVALID; /* one thread's group at a time on a communicator */
    } else if (comm->group_depth++ == 0) {
        comm->group_owner = pthread_self();
        comm->group_id = ++comm->groups;
        comm->group_head = comm->group_tail = NULL;
        comm->group_n = 0;
    }
    pthread_mutex_unlock(&comm->lock);
    return rc;
}

xdc_err_t xdc_intra_group_end(xdc_intra_comm *comm)
{
    if (!comm) return XDC_ERR_INVALID;
    pthread_mutex_lock(&comm->lock);
    if (comm->group_depth <= 0 || !pthread_equal(comm->group_owner, pthread_self())) {
        pthread_mutex_unlock(&comm->lock);
        return XDC_ERR_INVALID;
    }
    if (--comm->group_depth > 0) {
        pthread_mutex_unlock(&comm->lock);
        return XDC_OK;
    }
    xdc_intra_req *first = comm->group_head;
    int n = comm->group_n;
    comm->group_head = comm->group_tail = NULL;
    comm->group_n = 0;
    xdc_err_t rc = comm->failed;
    pthread_mutex_unlock(&comm->lock);
    if (!first) return XDC_OK;
    for (xdc_intra_req *r = first; r; r = r->group_next) {
        r->group_n = n;
        r->group_seq0 = first->seq;
        r->start_ns = r->last_progress_ns = xdc_now_ns();
    }
    if (rc == XDC_OK) rc = comm->ops->start_group(comm, first, n);
    if (rc == XDC_OK) return XDC_OK;
    /* nothing of the group was handed on: complete every request with the error */
    char msg[384];
    pthread_mutex_lock(&comm->lock);
    snprintf(msg, sizeof msg, "%s",
             comm->failed != XDC_OK ? comm->error : "intra group: the backend could not issue the group");
    pthread_mutex_unlock(&comm->lock);
    for (xdc_intra_req *r = first, *nx; r; r = nx) {
        nx = r->group_next;
        intra_req_complete(r, rc, msg);
    }
    return rc;
}

/* A request this thread started inside a group it has not ended yet: waiting for it would wait forever. */
static int in_own_open_group(xdc_intra_req *req, xdc_diag *diag)
{
    xdc_intra_comm *comm = req->comm;
    if (!req->group) return 0;
    pthread_mutex_lock(&comm->lock);
    int open = comm->group_depth > 0 && comm->group_id == req->group &&
               pthread_equal(comm->group_owner, pthread_self()) && !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&comm->lock);
    if (open)
        xdc_diag_set(diag,
                     "intra %s (rank %d/%d, op #%llu): started in a group this thread has not ended yet "
                     "(call xdc_intra_group_end before waiting)",
                     intra_op_name(req->kind), comm->rank, comm->size, (unsigned long long)req->seq);
    return open;
}

void intra_req_complete(xdc_intra_req *req, xdc_err_t rc, const char *msg)
{
    xdc_intra_comm *comm = req->comm;
    pthread_mutex_lock(&comm->lock);
    req->rc = rc;
    snprintf(req->msg, sizeof req->msg, "%s", msg ? msg : "");
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&comm->done_cond);
    pthread_mutex_unlock(&comm->lock);
}

/* Hand a completed request back to the pool and return its result. */
static xdc_err_t req_finish(xdc_intra_req *req, xdc_diag *diag)
{
    xdc_intra_comm *comm = req->comm;
    release_hold(req);
    pthread_mutex_lock(&comm->lock);
    xdc_err_t rc = req->rc;
    if (rc != XDC_OK) xdc_diag_set(diag, "%s", req->msg);
    xdc_pool_put(&comm->reqs, req);
    pthread_mutex_unlock(&comm->lock);
    return rc;
}

xdc_err_t xdc_intra_test(xdc_intra_req *req, int *done, xdc_diag *diag)
{
    if (!req || !done) return XDC_ERR_INVALID;
    *done = 0;
    if (in_own_open_group(req, diag)) return XDC_ERR_INVALID;
    if (req->comm->ops->poll && !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) req->comm->ops->poll(req->comm, req);
    *done = __atomic_load_n(&req->done, __ATOMIC_ACQUIRE);
    return *done ? req_finish(req, diag) : XDC_OK;
}

xdc_err_t xdc_intra_wait(xdc_intra_req *req, int64_t timeout_ms, xdc_diag *diag)
{
    if (!req) return XDC_ERR_INVALID;
    if (in_own_open_group(req, diag)) return XDC_ERR_INVALID;
    xdc_intra_comm *comm = req->comm;
    uint64_t deadline = xdc_deadline_ms(timeout_ms < 0 ? comm->op_timeout_ms : timeout_ms);
    if (comm->ops->poll) {
        /* The backend has no thread of its own: drive it, yielding between polls. */
        while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE) && !xdc_deadline_passed(deadline)) {
            comm->ops->poll(comm, req);
            if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
    } else {
        pthread_mutex_lock(&comm->lock);
        while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
            if (deadline == XDC_DEADLINE_NEVER) {
                pthread_cond_wait(&comm->done_cond, &comm->lock);
                continue;
            }
            struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
            if (pthread_cond_timedwait(&comm->done_cond, &comm->lock, &ts) == ETIMEDOUT) break;
        }
        pthread_mutex_unlock(&comm->lock);
    }
    if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) return req_finish(req, diag);
    char who[256];
    comm->ops->describe_wait(comm, req, who, sizeof who);
    xdc_diag_set(diag, "intra %s (rank %d/%d, op #%llu) not complete after %lld ms: %s", intra_op_name(req->kind),
                 comm->rank, comm->size, (unsigned long long)req->seq,
                 (long long)((xdc_now_ns() - req->start_ns) / XDC_NS_PER_MS), who);
    return XDC_ERR_TIMEOUT;
}

/* ---- operation entry points --------------------------------------------------------------------- */

xdc_err_t xdc_intra_send(xdc_intra_comm *comm, const void *buf, size_t count, xdc_intra_dtype dtype, int peer,
                         xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_SEND, buf, NULL, count, dtype, XDC_INTRA_SUM, peer, req);
}

xdc_err_t xdc_intra_recv(xdc_intra_comm *comm, void *buf, size_t count, xdc_intra_dtype dtype, int peer,
                         xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_RECV, NULL, buf, count, dtype, XDC_INTRA_SUM, peer, req);
}

xdc_err_t xdc_intra_all_reduce(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                               xdc_intra_dtype dtype, xdc_intra_redop op, xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_ALL_REDUCE, sendbuf, recvbuf, count, dtype, op, 0, req);
}

xdc_err_t xdc_intra_reduce_scatter(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                   xdc_intra_dtype dtype, xdc_intra_redop op, xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, req);
}

xdc_err_t xdc_intra_all_gather(xdc_intra_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                               xdc_intra_dtype dtype, xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_ALL_GATHER, sendbuf, recvbuf, sendcount, dtype, XDC_INTRA_SUM, 0, req);
}

xdc_err_t xdc_intra_broadcast(xdc_intra_comm *comm, void *buf, size_t count, xdc_intra_dtype dtype, int root,
                              xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_BROADCAST, buf, buf, count, dtype, XDC_INTRA_SUM, root, req);
}

xdc_err_t xdc_intra_barrier(xdc_intra_comm *comm, xdc_intra_req **req)
{
    return req_start(comm, INTRA_OP_BARRIER, NULL, NULL, 0, XDC_INTRA_F32, XDC_INTRA_SUM, 0, req);
}

/* ---- backend memory ----------------------------------------------------------------------------- */

xdc_err_t xdc_intra_mem_alloc(xdc_intra_backend backend, size_t bytes, void **out, xdc_diag *diag)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, diag);
    if (!ops) return XDC_ERR_UNSUPPORTED;
    return ops->mem_alloc(bytes, out, diag);
}

void xdc_intra_mem_free(xdc_intra_backend backend, void *p)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, NULL);
    if (ops && p) ops->mem_free(p);
}

xdc_err_t xdc_intra_mem_upload(xdc_intra_backend backend, void *dst, const void *host_src, size_t bytes)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, NULL);
    return ops ? ops->mem_copy(dst, host_src, bytes, 1) : XDC_ERR_UNSUPPORTED;
}

xdc_err_t xdc_intra_mem_download(xdc_intra_backend backend, void *host_dst, const void *src, size_t bytes)
{
    const intra_backend_ops *ops = intra_backend_lookup(backend, NULL);
    return ops ? ops->mem_copy(host_dst, src, bytes, 0) : XDC_ERR_UNSUPPORTED;
}
