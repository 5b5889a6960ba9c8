/* intra_cpu.c — the CPU backend: ranks are processes on one host sharing one segment (intra_shm.c).
 *
 * Two progress threads per communicator, each started on first use:
 *   - the collective thread runs collectives one after another in start order. Messages of DIRECT_MIN
 *     bytes and more go single-copy between the ranks' own buffers (run_direct, below) when every rank
 *     can reach the others' memory. Smaller ones move in pieces of up to INTRA_SHM_CHUNK bytes per
 *     rank through double-buffered staging areas: every rank copies its piece in, all meet at a step
 *     barrier, then rank r reduces (or gathers) the r-th 1/n of the piece straight from everyone's
 *     staging buffer (the shared-memory form of reduce-scatter + all-gather, so each rank reduces only
 *     1/n of the data). A staging half is rewritten two steps later, after a barrier every reader has
 *     passed.
 *   - the p2p thread streams messages through one single-producer/single-consumer byte ring per
 *     directed pair ([u64 length][payload]), progressing every peer without blocking on any of them, so
 *     send/recv pairs in either order never deadlock; it sleeps on its doorbell futex when idle.
 * A failure (deadline, dead peer, mismatched operation) fails the whole communicator, is published in
 * the segment for the other ranks, and fails every queued request with the same message.
 *
 * With NCCL semantics (comm->nccl_semantics) requests first go through one in-order stream per
 * communicator: a unit (one operation, or one group) is handed to the two threads above only once every
 * request of the unit before it has completed, as a CUDA stream would run NCCL kernels. Inside a unit
 * the threads progress every request at once, so a group's sends and receives are matched as a batch. */
#include "intra/intra_priv.h"
#include "intra/intra_shm.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define P2P_SLICE_MS  10
#define HDR_BYTES     sizeof(uint64_t)
/* Single-copy collectives: messages of at least DIRECT_MIN bytes (per rank block for reduce_scatter and
 * all_gather) go straight between the ranks' buffers; a peer's input is read DIRECT_PIECE bytes at a time
 * into this rank's scratch, so a piece of every rank's input stays in L2 while it is reduced. Smaller
 * messages take the staging path, whose single step costs less than the two steps of a direct one. */
#define DIRECT_MIN    ((size_t)64 << 10)
#define DIRECT_PIECE  ((size_t)64 << 10)
/* Peers' shared allocations mapped into this process (buffers from xdc_shared_alloc: the CPU device's and
 * xdc_intra_mem_alloc's). A mapped buffer is read and written in place: no system call, no page pinning,
 * no copy through scratch. Least recently used first out. A mapping keeps the peer's pages alive after the
 * peer freed them, so one not used in PEER_MAP_IDLE lookups is dropped at the next lookup. */
#define PEER_MAPS     16
#define PEER_MAP_IDLE 256

typedef struct peer_map {
    pid_t pid;
    int fd;
    unsigned long long ino;
    uint8_t *base; /* NULL: free entry */
    size_t bytes;
    uint64_t used; /* operation count at the last use */
} peer_map;

typedef struct req_queue {
    xdc_intra_req *head, *tail;
} req_queue;

typedef struct cpu_comm {
    intra_shm shm;
    int stop;                 /* under comm->lock */
    pthread_cond_t work_cond; /* collective thread waits here for work, with comm->lock */
    pthread_t coll_thread, p2p_thread;
    int coll_started, p2p_started;
    req_queue coll;
    req_queue *sendq, *recvq;      /* (size,) per peer, in start order */
    uint64_t step;                 /* collective thread only */
    _Atomic uint64_t waiting_step; /* step the collective thread waits at, for describe_wait */
    uint64_t splits;               /* splits made from this communicator, names the child segments */
    int direct;                    /* single-copy collectives: -1 not decided yet, 0 no, 1 yes (coll thread) */
    uint8_t *scratch;              /* (size, DIRECT_PIECE) bytes: pieces read from each peer */
    peer_map maps[PEER_MAPS];      /* collective thread only */
    uint64_t map_clock;
    /* NCCL semantics (under comm->lock): units waiting for the stream, and the unit running */
    xdc_intra_req *stream_head, *stream_tail; /* linked by stream_next */
    int inflight;                             /* requests of the running unit not complete yet */
    uint64_t units;
    intra_op_kind run_kind; /* the running unit's first request, for describe_wait */
    int run_peer, run_n;
    uint64_t run_seq;
} cpu_comm;

static void queue_push(req_queue *q, xdc_intra_req *r)
{
    r->next = NULL;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
}

/* The head of a queue, read under the communicator lock (other threads append to it). */
static xdc_intra_req *queue_head(xdc_intra_comm *comm, const req_queue *q)
{
    pthread_mutex_lock(&comm->lock);
    xdc_intra_req *h = q->head;
    pthread_mutex_unlock(&comm->lock);
    return h;
}

static void queue_pop(req_queue *q)
{
    q->head = q->head->next;
    if (!q->head) q->tail = NULL;
}

/* Fail the communicator, tell the other ranks, and return the error requests should carry. */
static xdc_err_t cpu_fail(xdc_intra_comm *comm, xdc_err_t rc, const char *msg)
{
    cpu_comm *cc = comm->impl;
    rc = intra_comm_fail(comm, rc, msg);
    intra_shm_abort(&cc->shm, msg);
    return rc;
}

/* ---- the in-order stream (NCCL semantics) ------------------------------------------------------- */

static void hand_on(cpu_comm *cc, xdc_intra_req *r)
{
    if (r->kind != INTRA_OP_SEND && r->kind != INTRA_OP_RECV) queue_push(&cc->coll, r);
    else if (r->kind == INTRA_OP_SEND) queue_push(&cc->sendq[r->peer], r);
    else queue_push(&cc->recvq[r->peer], r);
}

/* Under comm->lock: hand the next unit to the progress threads once the running one is complete (every
 * waiting unit at once when the communicator failed, so the threads fail them). Returns 1 when it did. */
static int stream_dispatch(xdc_intra_comm *comm)
{
    cpu_comm *cc = comm->impl;
    int any = 0;
    while (cc->stream_head && (cc->inflight == 0 || comm->failed != XDC_OK)) {
        uint64_t unit = cc->stream_head->unit;
        xdc_intra_req *first = cc->stream_head;
        cc->run_kind = first->kind;
        cc->run_peer = first->peer;
        cc->run_seq = first->seq;
        cc->run_n = 0;
        uint64_t now = xdc_now_ns();
        while (cc->stream_head && cc->stream_head->unit == unit) {
            xdc_intra_req *r = cc->stream_head;
            cc->stream_head = r->stream_next;
            if (!cc->stream_head) cc->stream_tail = NULL;
            r->issued = 1;
            r->last_progress_ns = now; /* its deadline runs from when the stream reaches it */
            cc->inflight++;
            cc->run_n++;
            hand_on(cc, r);
        }
        any = 1;
    }
    if (any) pthread_cond_signal(&cc->work_cond);
    return any;
}

/* Complete a request; with NCCL semantics the stream moves on to the next unit when this one is done. */
static void cpu_complete(xdc_intra_comm *comm, xdc_intra_req *q, xdc_err_t rc, const char *msg)
{
    cpu_comm *cc = comm->impl;
    if (comm->nccl_semantics) {
        pthread_mutex_lock(&comm->lock);
        cc->inflight--;
        int moved = stream_dispatch(comm);
        pthread_mutex_unlock(&comm->lock);
        if (moved) intra_shm_ring_bell(&cc->shm, comm->rank);
    }
    intra_req_complete(q, rc, msg);
}

/* ---- collectives -------------------------------------------------------------------------------- */

typedef struct coll_ctx {
    xdc_intra_comm *comm;
    cpu_comm *cc;
    xdc_intra_req *req;
    uint64_t sig;
    char what[96];
    char *msg;
    size_t cap;
} coll_ctx;

/* Next step: returns its parity (staging half) after everyone arrived. */
static xdc_err_t coll_step(coll_ctx *x, int *half)
{
    uint64_t step = ++x->cc->step;
    atomic_store(&x->cc->waiting_step, step);
    xdc_err_t rc = intra_shm_step(&x->cc->shm, step, x->sig, x->comm->op_timeout_ms, x->what, x->msg, x->cap);
    *half = (int)(step & 1);
    return rc;
}

static int next_half(const coll_ctx *x) { return (int)((x->cc->step + 1) & 1); }

/* Slice [lo, hi) of `count` owned by rank r when a piece is split n ways (sizes differ by at most 1). */
static void slice_of(size_t count, int r, int n, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)r / (size_t)n;
    *hi = count * (size_t)(r + 1) / (size_t)n;
}

/* Pipelined over pieces with one barrier per piece: step s copies piece k in, and after the barrier
 * reduces this rank's slice of piece k and copies piece k-1 out of the result area (every slice of it
 * was written before its writers arrived at this barrier). One more barrier releases the last piece. */
static xdc_err_t run_all_reduce(coll_ctx *x)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    int n = s->size, me = s->rank, h = 0;
    size_t es = xdc_intra_dtype_size(q->dtype), piece = INTRA_SHM_CHUNK / es;
    size_t prev_off = 0, prev_len = 0;
    int prev_h = -1;
    const void *in[64];
    for (size_t off = 0; off < q->count; off += piece) {
        size_t len = q->count - off < piece ? q->count - off : piece, lo, hi;
        memcpy(intra_shm_stage(s, me, next_half(x)), (const uint8_t *)q->sendbuf + off * es, len * es);
        XDC_CHECK(coll_step(x, &h));
        slice_of(len, me, n, &lo, &hi);
        for (int k = 0; k < n; k++) in[k] = intra_shm_stage(s, k, h) + lo * es;
        intra_reduce_host(intra_shm_result(s, h) + lo * es, in, n, hi - lo, q->dtype, q->redop);
        if (prev_h >= 0) memcpy((uint8_t *)q->recvbuf + prev_off * es, intra_shm_result(s, prev_h), prev_len * es);
        prev_h = h;
        prev_off = off;
        prev_len = len;
    }
    if (prev_h < 0) return XDC_OK;
    XDC_CHECK(coll_step(x, &h)); /* every slice of the last piece is written */
    memcpy((uint8_t *)q->recvbuf + prev_off * es, intra_shm_result(s, prev_h), prev_len * es);
    return XDC_OK;
}

static xdc_err_t run_reduce_scatter(coll_ctx *x)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    int n = s->size, me = s->rank, h;
    size_t es = xdc_intra_dtype_size(q->dtype), piece = INTRA_SHM_CHUNK / es / (size_t)n;
    const void *in[64];
    for (size_t off = 0; off < q->count; off += piece) {
        size_t len = q->count - off < piece ? q->count - off : piece;
        uint8_t *stage = intra_shm_stage(s, me, next_half(x));
        for (int b = 0; b < n; b++) /* stage: (n, len) — block b's piece */
            memcpy(stage + (size_t)b * len * es, (const uint8_t *)q->sendbuf + ((size_t)b * q->count + off) * es,
                   len * es);
        XDC_CHECK(coll_step(x, &h));
        for (int k = 0; k < n; k++) in[k] = intra_shm_stage(s, k, h) + (size_t)me * len * es;
        intra_reduce_host((uint8_t *)q->recvbuf + off * es, in, n, len, q->dtype, q->redop);
    }
    return XDC_OK;
}

static xdc_err_t run_all_gather(coll_ctx *x)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    int n = s->size, me = s->rank, h;
    size_t es = xdc_intra_dtype_size(q->dtype), piece = INTRA_SHM_CHUNK / es;
    for (size_t off = 0; off < q->count; off += piece) {
        size_t len = q->count - off < piece ? q->count - off : piece;
        memcpy(intra_shm_stage(s, me, next_half(x)), (const uint8_t *)q->sendbuf + off * es, len * es);
        XDC_CHECK(coll_step(x, &h));
        for (int k = 0; k < n; k++)
            memcpy((uint8_t *)q->recvbuf + ((size_t)k * q->count + off) * es, intra_shm_stage(s, k, h), len * es);
    }
    return XDC_OK;
}

static xdc_err_t run_broadcast(coll_ctx *x)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    int root = q->peer, h;
    size_t es = xdc_intra_dtype_size(q->dtype), piece = INTRA_SHM_CHUNK / es;
    for (size_t off = 0; off < q->count; off += piece) {
        size_t len = q->count - off < piece ? q->count - off : piece;
        if (s->rank == root) memcpy(intra_shm_stage(s, root, next_half(x)), (uint8_t *)q->recvbuf + off * es, len * es);
        XDC_CHECK(coll_step(x, &h));
        if (s->rank != root) memcpy((uint8_t *)q->recvbuf + off * es, intra_shm_stage(s, root, h), len * es);
    }
    return XDC_OK;
}

/* ---- single-copy collectives ---------------------------------------------------------------------
 * Every rank publishes its buffer addresses and arrives at a step; then each moves data straight between
 * its own buffers and its peers' (process_vm_readv/writev, one copy) and arrives at a second step, after
 * which every buffer is complete and no peer touches it any more. all_reduce and reduce_scatter: rank r
 * reduces its slice (rank order, as the staging path, so the bits are the same) reading every peer's
 * input; all_reduce then writes the reduced slice into every peer's output. A rank reads and writes only
 * its own slice of a peer's buffer, so in-place operations are safe without further steps. */

/* The n inputs of elements [off, off + len) of buffer slot 0 at element offset `base`: this rank's own,
 * the peers' read into scratch. */
static xdc_err_t direct_gather_piece(coll_ctx *x, const uint64_t *bufs, uint8_t *const *mapped, size_t base, size_t len,
                                     const void **in)
{
    intra_shm *s = &x->cc->shm;
    size_t es = xdc_intra_dtype_size(x->req->dtype);
    for (int k = 0; k < s->size; k++) {
        if (k == s->rank || mapped[2 * k]) {
            in[k] = (k == s->rank ? (const uint8_t *)x->req->sendbuf : mapped[2 * k]) + base * es;
            continue;
        }
        uint8_t *tmp = x->cc->scratch + (size_t)k * DIRECT_PIECE;
        XDC_CHECK(intra_shm_peer_copy(s, k, tmp, bufs[2 * k] + base * es, len * es, 0, x->msg, x->cap));
        in[k] = tmp;
    }
    return XDC_OK;
}

static xdc_err_t direct_reduce(coll_ctx *x, const uint64_t *bufs, uint8_t *const *mapped)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    int n = s->size, me = s->rank, rs = q->kind == INTRA_OP_REDUCE_SCATTER;
    size_t es = xdc_intra_dtype_size(q->dtype), piece = DIRECT_PIECE / es, lo = 0, hi = q->count;
    if (!rs) slice_of(q->count, me, n, &lo, &hi);
    size_t in_base = rs ? (size_t)me * q->count : 0; /* element offset of this rank's block in the inputs */
    const void *in[64];
    for (size_t off = lo; off < hi; off += piece) {
        size_t len = hi - off < piece ? hi - off : piece;
        XDC_CHECK(direct_gather_piece(x, bufs, mapped, in_base + off, len, in));
        uint8_t *out = (uint8_t *)q->recvbuf + off * es;
        intra_reduce_host(out, in, n, len, q->dtype, q->redop);
        for (int k = 0; k < n && !rs; k++) {
            if (k == me) continue;
            if (mapped[2 * k + 1]) memcpy(mapped[2 * k + 1] + off * es, out, len * es);
            else XDC_CHECK(intra_shm_peer_copy(s, k, out, bufs[2 * k + 1] + off * es, len * es, 1, x->msg, x->cap));
        }
    }
    return XDC_OK;
}

/* Read `bytes` of peer k's buffer `which` (0 send, 1 recv) into dst: in place when it is mapped. */
static xdc_err_t direct_read(coll_ctx *x, const uint64_t *bufs, uint8_t *const *mapped, int k, int which, void *dst,
                             size_t bytes)
{
    if (!mapped[2 * k + which])
        return intra_shm_peer_copy(&x->cc->shm, k, dst, bufs[2 * k + which], bytes, 0, x->msg, x->cap);
    memcpy(dst, mapped[2 * k + which], bytes);
    return XDC_OK;
}

static xdc_err_t direct_gather(coll_ctx *x, const uint64_t *bufs, uint8_t *const *mapped)
{
    xdc_intra_req *q = x->req;
    intra_shm *s = &x->cc->shm;
    size_t bytes = q->count * xdc_intra_dtype_size(q->dtype);
    if (q->kind == INTRA_OP_BROADCAST)
        return s->rank == q->peer ? XDC_OK : direct_read(x, bufs, mapped, q->peer, 1, q->recvbuf, bytes);
    for (int k = 0; k < s->size; k++) {
        uint8_t *dst = (uint8_t *)q->recvbuf + (size_t)k * bytes;
        if (k != s->rank) XDC_CHECK(direct_read(x, bufs, mapped, k, 0, dst, bytes));
        else if (dst != q->sendbuf) memcpy(dst, q->sendbuf, bytes);
    }
    return XDC_OK;
}

/* Peer k's buffer `which` mapped into this process when it lies in one of the peer's shared allocations
 * and at least `need` bytes of it do; NULL otherwise (the caller copies with process_vm_readv/writev). */
static uint8_t *peer_mapped(coll_ctx *x, int k, int which, size_t need)
{
    cpu_comm *cc = x->cc;
    const intra_shm_slot *sl = &cc->shm.slots[k];
    int fd = atomic_load_explicit(&sl->shared_fd[which], memory_order_relaxed);
    if (fd < 0) return NULL;
    pid_t pid = (pid_t)atomic_load(&sl->pid);
    unsigned long long ino = atomic_load_explicit(&sl->shared_ino[which], memory_order_relaxed),
                       off = atomic_load_explicit(&sl->shared_off[which], memory_order_relaxed);
    peer_map *m = NULL, *victim = &cc->maps[0];
    for (int i = 0; i < PEER_MAPS && !m; i++) {
        peer_map *e = &cc->maps[i];
        if (e->base && cc->map_clock - e->used > PEER_MAP_IDLE) { /* idle: maybe memory its peer freed */
            munmap(e->base, e->bytes);
            e->base = NULL;
        }
        if (e->base && e->pid == pid && e->fd == fd && e->ino == ino) m = e;
        else if (!e->base || (victim->base && e->used < victim->used)) victim = e;
    }
    if (!m) { /* open the peer's memfd through /proc, check it is the same file, map all of it */
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
        int f = open(path, O_RDWR | O_CLOEXEC);
        struct stat st;
        void *p = MAP_FAILED;
        if (f >= 0 && fstat(f, &st) == 0 && (unsigned long long)st.st_ino == ino && st.st_size > 0)
            p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (f >= 0) close(f);
        if (p == MAP_FAILED) return NULL;
        if (victim->base) munmap(victim->base, victim->bytes);
        *victim = (peer_map){pid, fd, ino, p, (size_t)st.st_size, 0};
        m = victim;
    }
    m->used = ++cc->map_clock;
    return off + need <= m->bytes ? m->base + off : NULL;
}

/* Publish where buffer `which` of this rank lies in a shared allocation, for peer_mapped. */
static void publish_shared(intra_shm_slot *me, int which, const void *buf)
{
    int fd = -1;
    unsigned long long ino = 0, off = 0;
    if (!xdc_shared_find(buf, &fd, &ino, &off)) fd = -1;
    atomic_store_explicit(&me->shared_fd[which], fd, memory_order_relaxed);
    atomic_store_explicit(&me->shared_ino[which], ino, memory_order_relaxed);
    atomic_store_explicit(&me->shared_off[which], off, memory_order_relaxed);
}

/* Runs the operation single-copy when every rank can reach the others' memory (*done = 1); the first
 * large operation of a communicator finds that out, and all ranks decide alike from the same flags. */
static xdc_err_t run_direct(coll_ctx *x, int *done)
{
    xdc_intra_req *q = x->req;
    cpu_comm *cc = x->cc;
    size_t block = q->count * xdc_intra_dtype_size(q->dtype);
    *done = 0;
    if (cc->direct == 0 || block < DIRECT_MIN || cc->shm.size > 64) return XDC_OK;
    intra_shm_slot *me = &cc->shm.slots[cc->shm.rank];
    atomic_store_explicit(&me->buf[0], (uint64_t)(uintptr_t)q->sendbuf, memory_order_relaxed);
    atomic_store_explicit(&me->buf[1], (uint64_t)(uintptr_t)q->recvbuf, memory_order_relaxed);
    publish_shared(me, 0, q->sendbuf);
    publish_shared(me, 1, q->recvbuf);
    int h;
    XDC_CHECK(coll_step(x, &h)); /* its release/acquire publishes the addresses */
    if (cc->direct < 0) cc->direct = intra_shm_direct(&cc->shm);
    if (!cc->direct) return XDC_OK;
    uint64_t bufs[2 * 64];   /* (size, 2): every rank's send and recv address */
    uint8_t *mapped[2 * 64]; /* (size, 2): the same buffers mapped here, or NULL */
    int n = cc->shm.size, me_r = cc->shm.rank, can_map = 2 * (n - 1) <= PEER_MAPS; /* no eviction mid-operation */
    /* The peers' buffers this operation touches: every input but a broadcast's, every output of an
     * all_reduce (it writes its reduced slice there), the root's output of a broadcast. */
    int bcast = q->kind == INTRA_OP_BROADCAST, use_send = !bcast, use_recv = bcast || q->kind == INTRA_OP_ALL_REDUCE;
    /* Bytes of a peer's buffers this rank may touch: reduce_scatter's input and all_gather's output hold
     * one block per rank, the others one block. */
    size_t send_bytes = q->kind == INTRA_OP_REDUCE_SCATTER ? block * (size_t)n : block,
           recv_bytes = q->kind == INTRA_OP_ALL_GATHER ? block * (size_t)n : block;
    for (int k = 0; k < n; k++) {
        bufs[2 * k] = atomic_load_explicit(&cc->shm.slots[k].buf[0], memory_order_relaxed);
        bufs[2 * k + 1] = atomic_load_explicit(&cc->shm.slots[k].buf[1], memory_order_relaxed);
        int peer = k != me_r && can_map && (!bcast || k == q->peer);
        mapped[2 * k] = peer && use_send ? peer_mapped(x, k, 0, send_bytes) : NULL;
        mapped[2 * k + 1] = peer && use_recv ? peer_mapped(x, k, 1, recv_bytes) : NULL;
    }
    *done = 1;
    int reduce = q->kind == INTRA_OP_ALL_REDUCE || q->kind == INTRA_OP_REDUCE_SCATTER;
    XDC_CHECK(reduce ? direct_reduce(x, bufs, mapped) : direct_gather(x, bufs, mapped));
    return coll_step(x, &h); /* every rank is done with every buffer */
}

static xdc_err_t run_collective(xdc_intra_comm *comm, xdc_intra_req *q, char *msg, size_t cap)
{
    coll_ctx x = {comm, comm->impl, q, 0, "", msg, cap};
    uint64_t sigv[4] = {(uint64_t)q->kind, (uint64_t)q->count, (uint64_t)q->dtype * 16 + (uint64_t)q->redop,
                        (uint64_t)(q->kind == INTRA_OP_BROADCAST ? q->peer : 0)};
    x.sig = xdc_xxh64(sigv, sizeof sigv, 0x696e747261);
    snprintf(x.what, sizeof x.what, "%s of %zu elements (rank %d/%d, op #%llu)", intra_op_name(q->kind), q->count,
             comm->rank, comm->size, (unsigned long long)q->seq);
    if (q->kind != INTRA_OP_BARRIER) {
        int done;
        XDC_CHECK(run_direct(&x, &done));
        if (done) return XDC_OK;
    }
    switch (q->kind) {
    case INTRA_OP_ALL_REDUCE: return run_all_reduce(&x);
    case INTRA_OP_REDUCE_SCATTER: return run_reduce_scatter(&x);
    case INTRA_OP_ALL_GATHER: return run_all_gather(&x);
    case INTRA_OP_BROADCAST: return run_broadcast(&x);
    case INTRA_OP_BARRIER: {
        int h;
        return coll_step(&x, &h);
    }
    default: return XDC_ERR_INTERNAL;
    }
}

static void *coll_main(void *arg)
{
    xdc_intra_comm *comm = arg;
    cpu_comm *cc = comm->impl;
    char msg[384];
    for (;;) {
        pthread_mutex_lock(&comm->lock);
        while (!cc->stop && !cc->coll.head) pthread_cond_wait(&cc->work_cond, &comm->lock);
        xdc_intra_req *q = cc->stop ? NULL : cc->coll.head;
        xdc_err_t rc = comm->failed;
        if (rc != XDC_OK) snprintf(msg, sizeof msg, "%s", comm->error);
        pthread_mutex_unlock(&comm->lock);
        if (!q) break;
        if (rc == XDC_OK) {
            msg[0] = 0;
            rc = run_collective(comm, q, msg, sizeof msg);
            /* Destroying this communicator mid-operation is not the group's failure: the others
             * still name this rank if they wait for it. */
            if (rc == XDC_ERR_CLOSED) rc = intra_comm_fail(comm, rc, msg);
            else if (rc != XDC_OK) rc = cpu_fail(comm, rc, msg);
        }
        atomic_store(&cc->waiting_step, 0);
        pthread_mutex_lock(&comm->lock);
        queue_pop(&cc->coll);
        pthread_mutex_unlock(&comm->lock);
        cpu_complete(comm, q, rc, msg);
    }
    return NULL;
}

/* ---- point to point ----------------------------------------------------------------------------- */

/* Copy up to `len` bytes of the stream [hdr | payload] at position req->moved into or out of a ring. */
static size_t ring_xfer(intra_shm_ring *ring, xdc_intra_req *q, size_t total, int produce)
{
    uint8_t *data = intra_shm_ring_data(ring);
    uint64_t head = atomic_load_explicit(&ring->head, produce ? memory_order_acquire : memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ring->tail, produce ? memory_order_relaxed : memory_order_acquire);
    size_t room = produce ? INTRA_SHM_RING - (size_t)(tail - head) : (size_t)(tail - head);
    size_t want = total - q->moved < room ? total - q->moved : room;
    uint64_t pos = produce ? tail : head;
    size_t done = 0;
    while (done < want) {
        size_t at = (size_t)(pos % INTRA_SHM_RING), n = INTRA_SHM_RING - at;
        if (n > want - done) n = want - done;
        size_t sp = q->moved + done; /* stream position */
        /* split at the header/payload boundary */
        if (sp < HDR_BYTES && n > HDR_BYTES - sp) n = HDR_BYTES - sp;
        uint8_t *local = sp < HDR_BYTES
                             ? (uint8_t *)&q->p2p_hdr + sp
                             : (produce ? (uint8_t *)(uintptr_t)q->sendbuf : (uint8_t *)q->recvbuf) + (sp - HDR_BYTES);
        if (produce) memcpy(data + at, local, n);
        else memcpy(local, data + at, n);
        pos += n;
        done += n;
    }
    if (done) atomic_store_explicit(produce ? &ring->tail : &ring->head, pos, memory_order_release);
    q->moved += done;
    return done;
}

/* Advance the head op of one direction with one peer; returns 1 on progress. On a protocol error sets
 * *rc and msg. */
static int p2p_advance(xdc_intra_comm *comm, xdc_intra_req *q, xdc_err_t *rc, char *msg, size_t cap)
{
    cpu_comm *cc = comm->impl;
    int send = q->kind == INTRA_OP_SEND;
    size_t bytes = q->count * xdc_intra_dtype_size(q->dtype);
    intra_shm_ring *ring = send ? intra_shm_ring_of(&cc->shm, comm->rank, q->peer)
                                : intra_shm_ring_of(&cc->shm, q->peer, comm->rank);
    if (send && q->moved == 0) q->p2p_hdr = bytes;
    size_t total = q->moved < HDR_BYTES ? HDR_BYTES : HDR_BYTES + bytes;
    size_t got = ring_xfer(ring, q, total, send);
    if (!send && q->moved == HDR_BYTES && total == HDR_BYTES) {
        if (q->p2p_hdr != bytes) {
            snprintf(msg, cap, "recv from rank %d (rank %d/%d, op #%llu): rank %d sent %llu bytes, recv posted for %zu",
                     q->peer, comm->rank, comm->size, (unsigned long long)q->seq, q->peer,
                     (unsigned long long)q->p2p_hdr, bytes);
            *rc = XDC_ERR_PROTO;
            return 1;
        }
        got += ring_xfer(ring, q, HDR_BYTES + bytes, 0);
    } else if (send && q->moved == HDR_BYTES && bytes) {
        got += ring_xfer(ring, q, HDR_BYTES + bytes, 1);
    }
    if (got) {
        q->last_progress_ns = xdc_now_ns();
        intra_shm_ring_bell(&cc->shm, q->peer);
    }
    return got > 0;
}

static int p2p_complete(const xdc_intra_req *q)
{
    return q->moved >= HDR_BYTES && q->moved == HDR_BYTES + q->count * xdc_intra_dtype_size(q->dtype);
}

/* Deadline and liveness of a pending p2p request that made no progress this pass. */
static xdc_err_t p2p_check(xdc_intra_comm *comm, xdc_intra_req *q, char *msg, size_t cap)
{
    cpu_comm *cc = comm->impl;
    const char *dir = q->kind == INTRA_OP_SEND ? "send to" : "recv from";
    if (intra_shm_aborted(&cc->shm, msg, cap)) return XDC_ERR_PEER_LOST;
    /* a dead sender may have left the rest of the message in the ring: that is progress, not loss */
    intra_shm_ring *in = intra_shm_ring_of(&cc->shm, q->peer, comm->rank);
    if (!intra_shm_rank_alive(&cc->shm, q->peer) &&
        (q->kind == INTRA_OP_SEND || atomic_load(&in->tail) == atomic_load(&in->head))) {
        snprintf(msg, cap, "%s rank %d (rank %d/%d, op #%llu): rank %d (pid %d) died", dir, q->peer, comm->rank,
                 comm->size, (unsigned long long)q->seq, q->peer, (int)atomic_load(&cc->shm.slots[q->peer].pid));
        return XDC_ERR_PEER_LOST;
    }
    if (comm->op_timeout_ms >= 0 &&
        xdc_now_ns() - q->last_progress_ns > (uint64_t)comm->op_timeout_ms * XDC_NS_PER_MS) {
        snprintf(msg, cap, "%s rank %d (rank %d/%d, op #%llu): rank %d made no progress for %lld ms", dir, q->peer,
                 comm->rank, comm->size, (unsigned long long)q->seq, q->peer, (long long)comm->op_timeout_ms);
        return XDC_ERR_TIMEOUT;
    }
    return XDC_OK;
}

/* Complete every queued p2p request with the communicator's error. */
static void p2p_fail_all(xdc_intra_comm *comm)
{
    cpu_comm *cc = comm->impl;
    for (;;) {
        xdc_intra_req *q = NULL;
        pthread_mutex_lock(&comm->lock);
        for (int p = 0; p < comm->size && !q; p++) {
            req_queue *qs[2] = {&cc->sendq[p], &cc->recvq[p]};
            for (int d = 0; d < 2 && !q; d++)
                if (qs[d]->head) {
                    q = qs[d]->head;
                    queue_pop(qs[d]);
                }
        }
        xdc_err_t rc = comm->failed;
        char msg[384];
        snprintf(msg, sizeof msg, "%s", comm->error);
        pthread_mutex_unlock(&comm->lock);
        if (!q) return;
        cpu_complete(comm, q, rc, msg);
    }
}

static void *p2p_main(void *arg)
{
    xdc_intra_comm *comm = arg;
    cpu_comm *cc = comm->impl;
    intra_shm_slot *me = &cc->shm.slots[comm->rank];
    char msg[384];
    for (;;) {
        uint32_t seen = atomic_load(&me->bell);
        pthread_mutex_lock(&comm->lock);
        int stop = cc->stop, failed = comm->failed != XDC_OK;
        pthread_mutex_unlock(&comm->lock);
        if (stop) break;
        if (failed) p2p_fail_all(comm);
        int progress = 0, pending = 0;
        for (int p = 0; p < comm->size; p++) {
            req_queue *qs[2] = {&cc->sendq[p], &cc->recvq[p]};
            for (int d = 0; d < 2; d++) {
                xdc_intra_req *q = queue_head(comm, qs[d]);
                xdc_err_t rc = XDC_OK;
                while (q) {
                    msg[0] = 0;
                    int moved = p2p_advance(comm, q, &rc, msg, sizeof msg);
                    progress |= moved;
                    if (rc == XDC_OK && !p2p_complete(q)) break;
                    if (rc != XDC_OK) rc = cpu_fail(comm, rc, msg);
                    pthread_mutex_lock(&comm->lock);
                    queue_pop(qs[d]);
                    xdc_intra_req *nx = qs[d]->head;
                    pthread_mutex_unlock(&comm->lock);
                    cpu_complete(comm, q, rc, msg);
                    if (rc != XDC_OK) break;
                    q = nx;
                }
                pending += q != NULL && rc == XDC_OK;
            }
        }
        if (progress || !pending) {
            if (progress) continue;
        } else {
            /* Nothing moved: check deadlines and peers of every waiting head. */
            for (int p = 0; p < comm->size; p++) {
                req_queue *qs[2] = {&cc->sendq[p], &cc->recvq[p]};
                for (int d = 0; d < 2; d++) {
                    xdc_intra_req *q = queue_head(comm, qs[d]);
                    xdc_err_t rc = q ? p2p_check(comm, q, msg, sizeof msg) : XDC_OK;
                    if (rc != XDC_OK) cpu_fail(comm, rc, msg);
                }
            }
        }
        atomic_store(&me->sleeping, 1);
        if (atomic_load(&me->bell) == seen) intra_futex_wait(&me->bell, seen, P2P_SLICE_MS);
        atomic_store(&me->sleeping, 0);
    }
    return NULL;
}

/* ---- backend table ------------------------------------------------------------------------------ */

static xdc_err_t cpu_create_named(xdc_intra_comm *comm, const char *name, int64_t timeout_ms, xdc_diag *diag)
{
    cpu_comm *cc = xdc_calloc(1, sizeof *cc);
    if (!cc) return XDC_ERR_NOMEM;
    cc->sendq = xdc_calloc((size_t)comm->size, sizeof *cc->sendq);
    cc->recvq = xdc_calloc((size_t)comm->size, sizeof *cc->recvq);
    xdc_err_t rc = XDC_ERR_NOMEM;
    if (!cc->sendq || !cc->recvq) goto fail;
    cc->direct = -1;
    cc->scratch = xdc_aligned_alloc(64, (size_t)comm->size * DIRECT_PIECE);
    if (!cc->scratch) goto fail;
    XDC_CHECK_GOTO(intra_shm_join(&cc->shm, name, comm->rank, comm->size, timeout_ms, diag), rc, fail);
    pthread_cond_init(&cc->work_cond, NULL);
    comm->impl = cc;
    return XDC_OK;
fail:
    xdc_free(cc->scratch);
    xdc_free(cc->sendq);
    xdc_free(cc->recvq);
    xdc_free(cc);
    return rc;
}

static xdc_err_t cpu_create(xdc_intra_comm *comm, const xdc_intra_config *cfg, xdc_diag *diag)
{
    if (strncmp(cfg->bootstrap, "cpu:", 4) != 0) {
        xdc_diag_set(diag, "intra cpu: bootstrap id \"%.64s\" is not a CPU id (want cpu:/name)", cfg->bootstrap);
        return XDC_ERR_CONFIG;
    }
    return cpu_create_named(comm, cfg->bootstrap + 4, cfg->create_timeout_ms, diag);
}

static void cpu_destroy(xdc_intra_comm *comm)
{
    cpu_comm *cc = comm->impl;
    if (!cc) return;
    pthread_mutex_lock(&comm->lock);
    cc->stop = 1;
    atomic_store(&cc->shm.cancel, 1);
    pthread_cond_broadcast(&cc->work_cond);
    pthread_mutex_unlock(&comm->lock);
    intra_shm_ring_bell(&cc->shm, comm->rank);
    if (cc->coll_started) pthread_join(cc->coll_thread, NULL);
    if (cc->p2p_started) pthread_join(cc->p2p_thread, NULL);
    intra_shm_leave(&cc->shm);
    pthread_cond_destroy(&cc->work_cond);
    for (int i = 0; i < PEER_MAPS; i++)
        if (cc->maps[i].base) munmap(cc->maps[i].base, cc->maps[i].bytes);
    xdc_free(cc->scratch);
    xdc_free(cc->sendq);
    xdc_free(cc->recvq);
    xdc_free(cc);
    comm->impl = NULL;
}

/* Queue a unit of n requests (linked by group_next): straight to the progress threads, or with NCCL
 * semantics to the back of the stream. */
static xdc_err_t cpu_start_unit(xdc_intra_comm *comm, xdc_intra_req *first, int n)
{
    cpu_comm *cc = comm->impl;
    int any_p2p = 0, any_coll = 0;
    for (xdc_intra_req *r = first; r; r = r->group_next) {
        int p2p = r->kind == INTRA_OP_SEND || r->kind == INTRA_OP_RECV;
        any_p2p |= p2p;
        any_coll |= !p2p;
    }
    pthread_mutex_lock(&comm->lock);
    for (int k = 0; k < 2; k++) {
        int p2p = k == 1, *started = p2p ? &cc->p2p_started : &cc->coll_started;
        if (!(p2p ? any_p2p : any_coll) || *started) continue;
        if (pthread_create(p2p ? &cc->p2p_thread : &cc->coll_thread, NULL, p2p ? p2p_main : coll_main, comm) != 0) {
            pthread_mutex_unlock(&comm->lock);
            return XDC_ERR_NOMEM;
        }
        *started = 1;
    }
    int moved = 0;
    if (!comm->nccl_semantics) {
        for (xdc_intra_req *r = first; r; r = r->group_next) hand_on(cc, r);
        pthread_cond_signal(&cc->work_cond);
    } else {
        uint64_t unit = ++cc->units;
        int k = 0;
        for (xdc_intra_req *r = first; r && k < n; r = r->group_next, k++) {
            r->unit = unit;
            r->stream_next = NULL;
            if (cc->stream_tail) cc->stream_tail->stream_next = r;
            else cc->stream_head = r;
            cc->stream_tail = r;
        }
        moved = stream_dispatch(comm);
    }
    pthread_mutex_unlock(&comm->lock);
    if (any_p2p || moved) intra_shm_ring_bell(&cc->shm, comm->rank);
    return XDC_OK;
}

static xdc_err_t cpu_start(xdc_intra_comm *comm, xdc_intra_req *req)
{
    req->group_next = NULL;
    return cpu_start_unit(comm, req, 1);
}

static xdc_err_t cpu_start_group(xdc_intra_comm *comm, xdc_intra_req *first, int n)
{
    return cpu_start_unit(comm, first, n);
}

static void cpu_describe_wait(xdc_intra_comm *comm, xdc_intra_req *req, char *out, size_t cap)
{
    cpu_comm *cc = comm->impl;
    if (comm->nccl_semantics) {
        pthread_mutex_lock(&comm->lock);
        int queued = !req->issued;
        intra_op_kind kind = cc->run_kind;
        int peer = cc->run_peer, n = cc->run_n;
        uint64_t seq = cc->run_seq;
        pthread_mutex_unlock(&comm->lock);
        if (queued) {
            char who[160] = "";
            if (kind == INTRA_OP_SEND || kind == INTRA_OP_RECV)
                snprintf(who, sizeof who, " %s rank %d: waiting for rank %d (pid %d, %s)",
                         kind == INTRA_OP_SEND ? "to" : "from", peer, peer, (int)atomic_load(&cc->shm.slots[peer].pid),
                         intra_shm_rank_alive(&cc->shm, peer) ? "alive" : "dead");
            snprintf(out, cap, "queued on the in-order stream (NCCL semantics) behind op #%llu (%s%s%s)",
                     (unsigned long long)seq, intra_op_name(kind), who, n > 1 ? ", in a group" : "");
            return;
        }
    }
    if (req->kind == INTRA_OP_SEND || req->kind == INTRA_OP_RECV) {
        snprintf(out, cap, "waiting for rank %d (pid %d, %s): %zu of %zu bytes %s", req->peer,
                 (int)atomic_load(&cc->shm.slots[req->peer].pid),
                 intra_shm_rank_alive(&cc->shm, req->peer) ? "alive" : "dead",
                 req->moved > HDR_BYTES ? req->moved - HDR_BYTES : 0, req->count * xdc_intra_dtype_size(req->dtype),
                 req->kind == INTRA_OP_SEND ? "sent" : "received");
        return;
    }
    pthread_mutex_lock(&comm->lock);
    int at_head = cc->coll.head == req;
    pthread_mutex_unlock(&comm->lock);
    uint64_t step = atomic_load(&cc->waiting_step);
    if (!at_head || !step) {
        snprintf(out, cap, "queued behind earlier collectives on this communicator");
        return;
    }
    char who[256];
    intra_shm_describe_missing(&cc->shm, step, who, sizeof who);
    snprintf(out, cap, "waiting for %s", who);
}

static xdc_err_t cpu_split(xdc_intra_comm *comm, int color, int key, xdc_intra_comm **out, xdc_diag *diag)
{
    cpu_comm *cc = comm->impl;
    int n = comm->size;
    int32_t mine[2] = {color, key}, *all = xdc_malloc((size_t)n * sizeof mine);
    if (!all) return XDC_ERR_NOMEM;
    xdc_intra_req *req = NULL;
    xdc_err_t rc;
    /* (color, key) of every rank: an all_gather of two 4-byte elements each */
    XDC_CHECK_GOTO(xdc_intra_all_gather(comm, mine, all, 2, XDC_INTRA_F32, &req), rc, done);
    XDC_CHECK_GOTO(xdc_intra_wait(req, -1, diag), rc, done);
    uint64_t split_id = ++cc->splits;
    if (color == XDC_INTRA_UNDEFINED) goto done;
    int newrank = 0, newsize = 0;
    for (int r = 0; r < n; r++) {
        if (all[2 * r] != color) continue;
        newsize++;
        if (all[2 * r + 1] < key || (all[2 * r + 1] == key && r < comm->rank)) newrank++;
    }
    char name[256];
    if ((size_t)snprintf(name, sizeof name, "%s.%llu.%d", cc->shm.name, (unsigned long long)split_id, color) >=
        sizeof name) {
        xdc_diag_set(diag, "intra split: segment name of %s too long (too many nested splits)", cc->shm.name);
        rc = XDC_ERR_RANGE;
        goto done;
    }
    xdc_intra_comm *child = NULL;
    XDC_CHECK_GOTO(intra_comm_alloc(comm->ops, newrank, newsize, comm->op_timeout_ms, &child), rc, done);
    child->nccl_semantics = comm->nccl_semantics;
    rc = cpu_create_named(child, name, comm->op_timeout_ms, diag);
    if (rc != XDC_OK) {
        intra_comm_free(child);
        goto done;
    }
    *out = child;
done:
    xdc_free(all);
    return rc;
}

static xdc_err_t cpu_bootstrap_create(char *out, size_t cap, xdc_diag *diag)
{
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = xdc_now_ns() ^ ((uint64_t)getpid() << 32);
    if ((size_t)snprintf(out, cap, "cpu:/xdc-intra-%d-%016llx", (int)getpid(), (unsigned long long)rnd) >= cap) {
        xdc_diag_set(diag, "intra bootstrap: buffer of %zu bytes too small", cap);
        return XDC_ERR_RANGE;
    }
    return XDC_OK;
}

static int cpu_available(xdc_diag *diag)
{
    (void)diag;
    return 1;
}

static xdc_err_t cpu_mem_alloc(size_t bytes, void **out, xdc_diag *diag)
{
    *out = xdc_shared_alloc(bytes); /* peers' collectives reduce straight in it */
    if (!*out) {
        xdc_diag_set(diag, "intra cpu: allocating %zu bytes failed", bytes);
        return XDC_ERR_NOMEM;
    }
    return XDC_OK;
}

static xdc_err_t cpu_mem_copy(void *dst, const void *src, size_t bytes, int to_backend)
{
    (void)to_backend;
    memcpy(dst, src, bytes);
    return XDC_OK;
}

const intra_backend_ops intra_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .start = cpu_start,
    .start_group = cpu_start_group,
    .poll = NULL,
    .describe_wait = cpu_describe_wait,
    .split = cpu_split,
    .req_release = NULL,
    .bootstrap_create = cpu_bootstrap_create,
    .available = cpu_available,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = xdc_shared_free,
    .mem_copy = cpu_mem_copy,
};
