/* wan_peer.c — the message layer of a peer pair: messages cut into DATA frames with one sequence
 * number space per direction, striped over whichever stream can write next (latency class first),
 * kept until the cumulative ACK covers them, put back in the queue when their stream breaks; on the
 * receiving side frames land straight in the posted receive buffer at their offset, duplicates are
 * dropped by a sliding bitmap, and a receive completes when all its bytes arrived. Also the public
 * request calls (isend, irecv, test, wait). Everything here runs under the engine mutex. */
#include "wan/wan_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#define PUMP_BUDGET_BYTES (8u << 20) /* per stream per loop turn, so one stream cannot starve others */

xdc_err_t wan_peer_alloc(xdc_wan_engine *eng, int nstreams, xdc_wan_peer **out)
{
    xdc_wan_peer *p = xdc_calloc(1, sizeof *p);
    if (!p) return XDC_ERR_NOMEM;
    p->eng = eng;
    p->nstreams = nstreams;
    p->rel.window = eng->cfg.window_frames;
    p->streams = xdc_calloc((size_t)nstreams, sizeof *p->streams);
    int ok = p->streams != NULL;
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) {
        p->rel.txf[c] = xdc_calloc((size_t)p->rel.window, sizeof *p->rel.txf[c]);
        p->rel.rx_seen[c] = xdc_calloc((size_t)p->rel.window / 64 + 1, sizeof *p->rel.rx_seen[c]);
        ok &= p->rel.txf[c] && p->rel.rx_seen[c];
    }
    if (!ok) {
        wan_peer_free(p);
        return XDC_ERR_NOMEM;
    }
    p->st.streams = nstreams;
    p->last_rx_ns = xdc_now_ns();
    snprintf(p->last_heard, sizeof p->last_heard, "nothing yet");
    *out = p;
    return XDC_OK;
}

void wan_peer_free(xdc_wan_peer *p)
{
    if (!p) return;
    xdc_free(p->streams);
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) {
        xdc_free(p->rel.txf[c]);
        xdc_free(p->rel.rx_seen[c]);
    }
    xdc_free(p);
}

void wan_stream_queue_ctrl(wan_stream *s, const wan_frame *f)
{
    if (s->ctrl_n < WAN_CTRL_QUEUE) s->ctrl[s->ctrl_n++] = *f;
    /* A full queue drops the frame: PINGs are samples and ACKs are cumulative, so a later one covers it. */
}

/* ---- requests ------------------------------------------------------------------------------------ */

static void queue_push(xdc_wan_request **head, xdc_wan_request **tail, xdc_wan_request *r)
{
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

static void queue_remove(xdc_wan_request **head, xdc_wan_request **tail, xdc_wan_request *r)
{
    xdc_wan_request *prev = NULL;
    for (xdc_wan_request *q = *head; q; prev = q, q = q->next) {
        if (q != r) continue;
        if (prev) prev->next = q->next;
        else *head = q->next;
        if (*tail == q) *tail = prev;
        q->next = NULL;
        return;
    }
}

/* Hand a request back to the engine's pool (with the copy a cancelled send kept). */
static void req_release(xdc_wan_request *r)
{
    xdc_free(r->owned);
    r->owned = NULL;
    r->buf = NULL;
    r->state = WAN_REQ_FREE;
    r->peer->nreqs--;
    xdc_pool_put(&r->eng->reqs, r);
}

static int tx_queued(const xdc_wan_peer *p)
{
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++)
        if (p->rel.txq_head[c]) return 1;
    return 0;
}

void wan_req_finish(xdc_wan_request *r, xdc_err_t err, const char *why)
{
    if (r->state != WAN_REQ_PENDING) return;
    xdc_wan_peer *p = r->peer;
    if (r->is_send) {
        queue_remove(&p->rel.txq_head[r->cls], &p->rel.txq_tail[r->cls], r);
        if (p->tx_since_ns && !tx_queued(p)) {
            p->tx_busy_ns += xdc_now_ns() - p->tx_since_ns;
            p->tx_since_ns = 0;
        }
    } else queue_remove(&p->rel.rxq_head[r->cls], &p->rel.rxq_tail[r->cls], r);
    if (r->rx_arriving && --p->rx_arriving == 0) p->rx_busy_ns += xdc_now_ns() - p->rx_busy_since_ns;
    if (r->cancelled) { /* nobody holds the handle any more */
        req_release(r);
        return;
    }
    r->state = err == XDC_OK ? WAN_REQ_DONE : WAN_REQ_FAILED;
    r->err = err;
    snprintf(r->why, sizeof r->why, "%s", why ? why : "");
    pthread_cond_broadcast(&p->eng->cv);
}

void wan_peer_fail_requests(xdc_wan_peer *p, xdc_err_t err, const char *why)
{
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) {
        while (p->rel.txq_head[c]) wan_req_finish(p->rel.txq_head[c], err, why);
        while (p->rel.rxq_head[c]) wan_req_finish(p->rel.rxq_head[c], err, why);
    }
}

static void send_maybe_done(xdc_wan_request *r)
{
    if (r->state == WAN_REQ_PENDING && r->framing_done && r->frames_unacked == 0 && r->writers == 0) {
        xdc_wan_peer *p = r->peer;
        p->st.tx_payload_bytes += r->cap;
        p->st.tx_raw_bytes += r->raw_len;
        wan_req_finish(r, XDC_OK, NULL);
    }
}

static xdc_err_t req_new(xdc_wan_peer *p, int is_send, xdc_wan_class cls, void *buf, size_t cap, xdc_wan_request **out)
{
    if (!p || !out || (unsigned)cls >= XDC_WAN_NUM_CLASSES || (!buf && cap)) return XDC_ERR_INVALID;
    xdc_wan_request *r = xdc_pool_get(&p->eng->reqs);
    if (!r) return XDC_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    r->eng = p->eng;
    r->peer = p;
    p->nreqs++;
    r->state = WAN_REQ_PENDING;
    r->is_send = is_send;
    r->cls = cls;
    r->buf = buf;
    r->cap = cap;
    r->msg_len = UINT64_MAX;
    *out = r;
    if (p->fail_err != XDC_OK || p->closed) {
        wan_req_finish(r, p->fail_err != XDC_OK ? p->fail_err : XDC_ERR_CLOSED,
                       p->fail_err != XDC_OK ? p->fail_why : "peer was closed");
        return XDC_OK;
    }
    if (is_send) {
        if (!tx_queued(p)) p->tx_since_ns = xdc_now_ns();
        r->msg_seq = p->rel.tx_msgs[cls]++;
        r->bulk_mark = p->bulk_tx_bytes;
        queue_push(&p->rel.txq_head[cls], &p->rel.txq_tail[cls], r);
    } else {
        r->msg_seq = p->rel.rx_posted[cls]++;
        queue_push(&p->rel.rxq_head[cls], &p->rel.rxq_tail[cls], r);
    }
    return XDC_OK;
}

xdc_err_t xdc_wan_isend(xdc_wan_peer *p, xdc_wan_class cls, const void *buf, size_t len, uint8_t codec, size_t raw_len,
                        xdc_wan_request **req)
{
    if (!p || len > XDC_WAN_MAX_MESSAGE) return XDC_ERR_INVALID;
    pthread_mutex_lock(&p->eng->mu);
    xdc_err_t rc = req_new(p, 1, cls, (void *)buf, len, req);
    if (rc == XDC_OK) {
        (*req)->codec = codec;
        (*req)->raw_len = raw_len;
    }
    pthread_mutex_unlock(&p->eng->mu);
    if (rc == XDC_OK) wan_engine_wake(p->eng);
    return rc;
}

xdc_err_t xdc_wan_irecv(xdc_wan_peer *p, xdc_wan_class cls, void *buf, size_t cap, xdc_wan_request **req)
{
    if (!p) return XDC_ERR_INVALID;
    pthread_mutex_lock(&p->eng->mu);
    xdc_err_t rc = req_new(p, 0, cls, buf, cap, req);
    /* A stream may be waiting for exactly this receive. */
    for (int i = 0; rc == XDC_OK && i < p->nstreams; i++)
        if (p->streams[i] && p->streams[i]->stalled) p->streams[i]->kick = 1;
    pthread_mutex_unlock(&p->eng->mu);
    if (rc == XDC_OK) wan_engine_wake(p->eng);
    return rc;
}

/* Under the mutex: report and release a finished request. */
static xdc_err_t req_collect(xdc_wan_request *r, size_t *size, uint8_t *codec, xdc_diag *diag)
{
    xdc_err_t rc = r->err;
    if (rc == XDC_OK) {
        if (size) *size = r->is_send ? r->cap : (size_t)r->msg_len;
        if (codec) *codec = r->codec;
    } else {
        xdc_diag_set(diag, "%s", r->why);
    }
    req_release(r);
    return rc;
}

xdc_err_t xdc_wan_test(xdc_wan_request *req, int *done, size_t *size, uint8_t *codec, xdc_diag *diag)
{
    if (!req || !done) return XDC_ERR_INVALID; /* its state is read under the engine lock below */
    xdc_wan_engine *eng = req->eng;
    pthread_mutex_lock(&eng->mu);
    if (req->state == WAN_REQ_FREE || req->cancelled) {
        pthread_mutex_unlock(&eng->mu);
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc = XDC_OK;
    *done = req->state != WAN_REQ_PENDING;
    if (*done) rc = req_collect(req, size, codec, diag);
    pthread_mutex_unlock(&eng->mu);
    return rc;
}

xdc_err_t xdc_wan_wait(xdc_wan_request *req, int64_t timeout_ms, size_t *size, uint8_t *codec, xdc_diag *diag)
{
    if (!req) return XDC_ERR_INVALID; /* its state is read under the engine lock below */
    xdc_wan_engine *eng = req->eng;
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    pthread_mutex_lock(&eng->mu);
    if (req->state == WAN_REQ_FREE || req->cancelled) {
        pthread_mutex_unlock(&eng->mu);
        return XDC_ERR_INVALID;
    }
    while (req->state == WAN_REQ_PENDING && !xdc_deadline_passed(deadline)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int ms = xdc_deadline_poll_ms(deadline);
        if (ms > 100) ms = 100; /* wake regularly: a bound on how long a lost broadcast could cost */
        ts.tv_nsec += (long)ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&eng->cv, &eng->mu, &ts);
    }
    xdc_err_t rc;
    if (req->state == WAN_REQ_PENDING) {
        xdc_diag_set(diag, "request to %s still pending after %lld ms (last heard: %s)", req->peer->name,
                     (long long)timeout_ms, req->peer->last_heard);
        rc = XDC_ERR_AGAIN; /* not TIMEOUT: that is a request failed by the peer's deadline, and released */
    } else {
        rc = req_collect(req, size, codec, diag);
    }
    pthread_mutex_unlock(&eng->mu);
    return rc;
}

/* ---- cancel -------------------------------------------------------------------------------------- */

static wan_txf *txf_at(xdc_wan_peer *p, int cls, uint64_t seq)
{
    return &p->rel.txf[cls][seq & (uint64_t)(p->rel.window - 1)];
}

/* Where the bytes of a send at message offset `off` are: the caller's buffer, or after a cancel the
 * engine's copy of the part not yet acknowledged. */
static const uint8_t *send_src(const xdc_wan_request *r, uint64_t off)
{
    if (r->owned) return r->owned + (off - r->owned_off);
    return r->buf ? r->buf + off : NULL;
}

/* A pending receive: drop the buffer; frames still arriving for its message are read and discarded
 * (and acknowledged, so the sender completes), and the request is released when the message is
 * complete or the peer fails. */
static void cancel_recv(xdc_wan_request *r)
{
    xdc_wan_peer *p = r->peer;
    r->cancelled = 1;
    r->buf = NULL;
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = p->streams[i];
        if (s && s->rx_req == r) s->rx_dst = NULL; /* the rest of the frame it is reading goes to the sink */
    }
}

/* A pending send. Nothing framed yet: withdraw it (the peer never sees it; the later messages of its
 * class, none framed yet either, move down one index). Otherwise copy what may still be written —
 * from the first unacknowledged frame, or the frame a stream is in the middle of, to the end — into an
 * engine-owned buffer, point the streams at the copy, and let the message finish from there. */
static xdc_err_t cancel_send(xdc_wan_request *r)
{
    xdc_wan_peer *p = r->peer;
    int unframed = r->framed == 0 && !r->framing_done;
    /* Messages of a class are framed in order, so every later one is unframed as well (checked). */
    for (const xdc_wan_request *q = r->next; unframed && q; q = q->next) unframed = q->framed == 0 && !q->framing_done;
    if (unframed) {
        int renumber = 0;
        for (xdc_wan_request *q = p->rel.txq_head[r->cls]; q; q = q->next) {
            if (renumber) q->msg_seq--;
            renumber |= q == r;
        }
        p->rel.tx_msgs[r->cls]--;
        queue_remove(&p->rel.txq_head[r->cls], &p->rel.txq_tail[r->cls], r);
        req_release(r);
        return XDC_OK;
    }
    r->cancelled = 1;
    size_t lo = r->framed;
    for (uint64_t q = p->rel.tx_acked[r->cls]; q < p->rel.tx_next_seq[r->cls]; q++) {
        const wan_txf *t = txf_at(p, r->cls, q);
        if (t->req == r && t->off < lo) lo = (size_t)t->off;
    }
    for (int i = 0; i < p->nstreams; i++) {
        const wan_stream *s = p->streams[i];
        if (s && s->tx_req == r && s->tx_payload && (size_t)(s->tx_payload - r->buf) < lo)
            lo = (size_t)(s->tx_payload - r->buf);
    }
    uint8_t *buf = r->buf;
    r->buf = NULL;
    if (lo == r->cap) return XDC_OK; /* every byte is acknowledged or written: nothing to keep */
    uint8_t *copy = xdc_malloc(r->cap - lo);
    if (!copy) {
        /* The rest cannot be kept: give the message up with the peer, whose failure closes the streams
         * (so none points into `buf`) and releases the request, being cancelled. */
        wan_peer_fail(p, XDC_ERR_NOMEM, "%s: no memory to keep %zu bytes of a cancelled send", p->name, r->cap - lo);
        return XDC_ERR_NOMEM;
    }
    memcpy(copy, buf + lo, r->cap - lo);
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = p->streams[i];
        if (s && s->tx_req == r && s->tx_payload) s->tx_payload = copy + (s->tx_payload - buf - lo);
    }
    r->owned = copy;
    r->owned_off = lo;
    return XDC_OK;
}

xdc_err_t xdc_wan_request_cancel(xdc_wan_request *req)
{
    if (!req) return XDC_OK;
    xdc_wan_engine *eng = req->eng;
    pthread_mutex_lock(&eng->mu);
    xdc_err_t rc = XDC_OK;
    if (req->state == WAN_REQ_FREE || req->cancelled) rc = XDC_ERR_INVALID;
    else if (req->state != WAN_REQ_PENDING) req_release(req); /* completed or failed: just hand it back */
    else if (req->is_send) rc = cancel_send(req);
    else cancel_recv(req);
    pthread_mutex_unlock(&eng->mu);
    return rc;
}

/* ---- transmit ------------------------------------------------------------------------------------ */

/* The next frame of class `cls` to resend (lowest sequence number first), or UINT64_MAX. */
static uint64_t find_resend(xdc_wan_peer *p, int cls)
{
    if (!p->rel.resend_pending[cls]) return UINT64_MAX;
    for (uint64_t q = p->rel.tx_acked[cls]; q < p->rel.tx_next_seq[cls]; q++) {
        wan_txf *f = txf_at(p, cls, q);
        if (f->req && f->stream < 0) return q;
    }
    p->rel.resend_pending[cls] = 0;
    return UINT64_MAX;
}

/* Cut the next frame of class `cls` from its first message with bytes left, or UINT64_MAX. */
static uint64_t new_frame(xdc_wan_peer *p, int cls)
{
    if (p->rel.tx_next_seq[cls] - p->rel.tx_acked[cls] >= (uint64_t)p->rel.window) return UINT64_MAX;
    for (xdc_wan_request *r = p->rel.txq_head[cls]; r; r = r->next) {
        if (r->framing_done) continue;
        uint64_t seq = p->rel.tx_next_seq[cls]++;
        wan_txf *f = txf_at(p, cls, seq);
        size_t left = r->cap - r->framed;
        f->req = r;
        f->off = r->framed;
        f->len = (uint32_t)(left < p->eng->cfg.frame_bytes ? left : p->eng->cfg.frame_bytes);
        f->stream = -1;
        r->framed += f->len;
        r->framing_done = r->framed == r->cap;
        r->frames_unacked++;
        return seq;
    }
    return UINT64_MAX;
}

/* Has class `cls` a DATA frame to resend or cut now (the window allowing)? */
static int class_has_data(const xdc_wan_peer *p, int cls)
{
    if (p->rel.resend_pending[cls]) return 1;
    if (p->rel.tx_next_seq[cls] - p->rel.tx_acked[cls] >= (uint64_t)p->rel.window) return 0;
    for (const xdc_wan_request *r = p->rel.txq_head[cls]; r; r = r->next)
        if (!r->framing_done) return 1;
    return 0;
}

/* Which classes a stream carries. With two or more streams, stream 0 belongs to the latency class and the
 * others to bulk, DATA and ACKs alike: a latency frame never waits behind bulk bytes in a frame, a socket
 * buffer or a receiver that stopped reading a bulk stream for want of a posted receive. A single stream
 * (a peer that dialled with one) carries both, latency first. */
static int stream_carries(const wan_stream *s, int cls)
{
    if (s->peer->nstreams < 2) return 1;
    return (cls == XDC_WAN_LATENCY) == (s->idx == 0);
}

/* A bulk stream holds back its DATA while the latency stream could write some: the engine then spends
 * the socket writes of a loop turn on latency bytes first (streams are served in index order, stream 0
 * first). It writes again as soon as the latency stream has nothing left or its socket is full, so a
 * latency stream that cannot move (its receiver stopped reading) never holds bulk up. */
static int stream_yields(const wan_stream *s)
{
    const xdc_wan_peer *p = s->peer;
    if (p->nstreams < 2 || s->idx == 0) return 0;
    const wan_stream *l = p->streams[0];
    if (!l || l->state != WAN_ST_READY || ((l->io.want | l->io.hold) & POLLOUT)) return 0;
    return (l->tx_active && l->tx_req) || class_has_data(p, XDC_WAN_LATENCY);
}

int wan_stream_wants_write(const wan_stream *s)
{
    if (s->ctrl_n) return 1;
    if (s->tx_active) return !(s->tx_req && stream_yields(s));
    const xdc_wan_peer *p = s->peer;
    if (s->state != WAN_ST_READY || p->fail_err != XDC_OK || p->closed) return 0;
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) {
        if (!stream_carries(s, c)) continue;
        if (p->rel.ack_sent[c] != p->rel.rx_cum[c]) return 1;
        if (class_has_data(p, c) && !stream_yields(s)) return 1;
    }
    return 0;
}

static void stage_frame(wan_stream *s, const wan_frame *f, const uint8_t *payload)
{
    wan_frame_encode(f, s->tx_stage);
    s->tx_stage_len = WAN_FRAME_HDR_BYTES;
    s->tx_stage_off = 0;
    s->tx_payload = NULL;
    s->tx_payload_len = s->tx_payload_off = 0;
    if (f->payload_len && f->payload_len <= WAN_STAGE_BYTES - WAN_FRAME_HDR_BYTES) {
        memcpy(s->tx_stage + WAN_FRAME_HDR_BYTES, payload, f->payload_len);
        s->tx_stage_len += f->payload_len;
    } else if (f->payload_len) {
        s->tx_payload = payload;
        s->tx_payload_len = f->payload_len;
    }
    s->tx_active = 1;
}

/* Choose what this stream writes next: control frames, then an ACK, then a resend, then new DATA, each of
 * the classes the stream carries, latency first. */
static int pick_frame(wan_stream *s)
{
    xdc_wan_peer *p = s->peer;
    if (s->ctrl_n) {
        stage_frame(s, &s->ctrl[0], NULL);
        memmove(s->ctrl, s->ctrl + 1, (size_t)(--s->ctrl_n) * sizeof s->ctrl[0]);
        return 1;
    }
    if (s->state != WAN_ST_READY || p->fail_err != XDC_OK || p->closed) return 0;
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) {
        if (!stream_carries(s, c) || p->rel.ack_sent[c] == p->rel.rx_cum[c]) continue;
        wan_frame a = {.type = WAN_FT_ACK, .cls = (uint8_t)c, .seq = p->rel.rx_cum[c]};
        p->rel.ack_sent[c] = p->rel.rx_cum[c];
        stage_frame(s, &a, NULL);
        return 1;
    }
    if (stream_yields(s)) return 0;
    int cls = 0, resend = 0;
    uint64_t seq = UINT64_MAX;
    for (int c = 0; c < XDC_WAN_NUM_CLASSES && seq == UINT64_MAX; c++) {
        if (!stream_carries(s, c)) continue;
        cls = c;
        seq = find_resend(p, c);
        resend = seq != UINT64_MAX;
        if (!resend) seq = new_frame(p, c);
    }
    if (seq == UINT64_MAX) return 0;
    wan_txf *t = txf_at(p, cls, seq);
    xdc_wan_request *r = t->req;
    wan_frame d = {.type = WAN_FT_DATA,
                   .cls = (uint8_t)r->cls,
                   .codec = r->codec,
                   .payload_len = t->len,
                   .seq = seq,
                   .msg_seq = r->msg_seq,
                   .msg_off = t->off,
                   .msg_len = r->cap};
    t->stream = s->idx;
    if (resend) p->st.retransmit_frames++;
    stage_frame(s, &d, send_src(r, t->off));
    s->tx_req = r;
    s->tx_last = t->off + t->len == r->cap;
    r->writers++;
    return 1;
}

static void tx_frame_done(wan_stream *s)
{
    s->tx_active = 0;
    if (s->tx_req) {
        xdc_wan_request *r = s->tx_req;
        xdc_wan_peer *p = s->peer;
        s->tx_req = NULL;
        if (s->tx_last && r->cls == XDC_WAN_LATENCY && !r->departed) {
            /* The message's last byte is in a socket: how much bulk went out while it waited? */
            uint64_t ahead = p->bulk_tx_bytes - r->bulk_mark;
            r->departed = 1;
            if (ahead > p->st.latency_bulk_ahead_bytes) p->st.latency_bulk_ahead_bytes = ahead;
        }
        r->writers--;
        send_maybe_done(r);
    }
}

/* Returns bytes written, 0 when the socket is full (s->io.want set), -1 after breaking the stream. */
static long tls_write(wan_stream *s, const uint8_t *buf, size_t len)
{
    size_t n = 0;
    int io = wan_stream_io(s, WAN_IO_WRITE, (void *)buf, len, &n);
    return io == WAN_IO_DONE ? (long)n : io;
}

/* Write until the socket is full, nothing is left, or the budget is spent. -1: stream broke. */
int wan_stream_write(wan_stream *s)
{
    size_t budget = PUMP_BUDGET_BYTES;
    while (budget) {
        if (!s->tx_active && !pick_frame(s)) return 0;
        if (s->tx_req && stream_yields(s)) return 0; /* the rest of this bulk frame waits for the latency one */
        long n;
        if (s->tx_stage_off < s->tx_stage_len) {
            n = tls_write(s, s->tx_stage + s->tx_stage_off, s->tx_stage_len - s->tx_stage_off);
            if (n > 0) s->tx_stage_off += (size_t)n;
        } else {
            n = tls_write(s, s->tx_payload + s->tx_payload_off, s->tx_payload_len - s->tx_payload_off);
            if (n > 0) s->tx_payload_off += (size_t)n;
        }
        if (n < 0) return -1;
        if (n == 0) return 0;
        s->peer->st.tx_wire_bytes += (uint64_t)n;
        if (s->tx_req && s->tx_req->cls == XDC_WAN_BULK) s->peer->bulk_tx_bytes += (uint64_t)n;
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
        if (s->tx_stage_off == s->tx_stage_len && s->tx_payload_off == s->tx_payload_len) tx_frame_done(s);
    }
    s->kick = 1;
    return 0;
}

/* ---- receive ------------------------------------------------------------------------------------- */

static int seen_test(const xdc_wan_peer *p, int cls, uint64_t seq)
{
    if (seq < p->rel.rx_cum[cls]) return 1;
    uint64_t i = seq & (uint64_t)(p->rel.window - 1);
    return (p->rel.rx_seen[cls][i / 64] >> (i % 64)) & 1;
}

static void seen_mark(xdc_wan_peer *p, int cls, uint64_t seq)
{
    uint64_t *seen = p->rel.rx_seen[cls];
    uint64_t i = seq & (uint64_t)(p->rel.window - 1);
    seen[i / 64] |= UINT64_C(1) << (i % 64);
    while (1) {
        uint64_t j = p->rel.rx_cum[cls] & (uint64_t)(p->rel.window - 1);
        if (!((seen[j / 64] >> (j % 64)) & 1)) break;
        seen[j / 64] &= ~(UINT64_C(1) << (j % 64));
        p->rel.rx_cum[cls]++;
    }
}

static void process_ack(xdc_wan_peer *p, int cls, uint64_t cum)
{
    while (p->rel.tx_acked[cls] < cum) {
        wan_txf *t = txf_at(p, cls, p->rel.tx_acked[cls]++);
        xdc_wan_request *r = t->req;
        t->req = NULL;
        if (r) {
            r->frames_unacked--;
            send_maybe_done(r);
        }
    }
}

void wan_peer_force_ack(xdc_wan_peer *p)
{
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) p->rel.ack_sent[c] = UINT64_MAX;
}

xdc_err_t wan_peer_ack(xdc_wan_peer *p, int cls, uint64_t cum)
{
    /* ACKs of a class may travel on several streams, so an older one may arrive after a newer one: it
     * changes nothing. */
    if (cum > p->rel.tx_next_seq[cls]) {
        wan_peer_fail(p, XDC_ERR_PROTO,
                      "protocol error from %s: ACK %llu of class %d for frames never sent (next %llu)", p->name,
                      (unsigned long long)cum, cls, (unsigned long long)p->rel.tx_next_seq[cls]);
        return XDC_ERR_PROTO;
    }
    process_ack(p, cls, cum);
    return XDC_OK;
}

/* Find the posted receive for a DATA frame; NULL when it is not posted yet. */
static xdc_wan_request *match_recv(xdc_wan_peer *p, const wan_frame *f)
{
    for (xdc_wan_request *r = p->rel.rxq_head[f->cls]; r; r = r->next)
        if (r->msg_seq == f->msg_seq) return r;
    return NULL;
}

static void recv_maybe_done(xdc_wan_request *r)
{
    if (r->msg_len == UINT64_MAX || r->rx_bytes < r->msg_len) return;
    if (!r->cancelled) r->peer->st.rx_payload_bytes += r->msg_len; /* a cancelled one was discarded */
    wan_req_finish(r, XDC_OK, NULL);
}

/* A DATA frame finished arriving on stream s. */
static void data_done(wan_stream *s)
{
    xdc_wan_peer *p = s->peer;
    const wan_frame *f = &s->rx_cur;
    if (s->rx_req && !seen_test(p, f->cls, f->seq)) {
        seen_mark(p, f->cls, f->seq);
        s->rx_req->rx_bytes += f->payload_len;
        /* A copy of this frame half-read on another (broken) stream must not touch the buffer later. */
        for (int i = 0; i < p->nstreams; i++) {
            wan_stream *o = p->streams[i];
            if (o && o != s && o->rx_in_payload && o->rx_cur.type == WAN_FT_DATA && o->rx_cur.cls == f->cls &&
                o->rx_cur.seq == f->seq) {
                o->rx_dst = NULL;
                o->rx_req = NULL;
            }
        }
        recv_maybe_done(s->rx_req);
    } else if (seen_test(p, f->cls, f->seq)) {
        /* The sender resends what it thinks we lack: our ACK for it was lost with a broken stream. */
        p->st.duplicate_frames++;
        wan_peer_force_ack(p);
    }
    s->rx_req = NULL;
}

/* The first header of message r announces more than its buffer holds: fail r now (not once the whole,
 * possibly endless, message went by) and put an engine-owned stand-in in its place in the queue, which
 * reads and discards the message's bytes and is released when they are all in. NULL (peer failed) when
 * no stand-in could be allocated. */
static xdc_wan_request *recv_refuse_oversize(xdc_wan_peer *p, xdc_wan_request *r)
{
    xdc_wan_request *t = xdc_pool_get(&p->eng->reqs);
    if (!t) {
        wan_peer_fail(p, XDC_ERR_NOMEM, "%s: no memory to discard an oversize message", p->name);
        return NULL;
    }
    memset(t, 0, sizeof *t);
    t->eng = p->eng;
    t->peer = p;
    p->nreqs++;
    t->state = WAN_REQ_PENDING;
    t->cls = r->cls;
    t->msg_seq = r->msg_seq;
    t->msg_len = r->msg_len;
    t->codec = r->codec;
    t->cancelled = 1;
    xdc_wan_request **head = &p->rel.rxq_head[r->cls];
    while (*head != r) head = &(*head)->next;
    *head = t;
    t->next = r->next;
    if (p->rel.rxq_tail[r->cls] == r) p->rel.rxq_tail[r->cls] = t;
    r->next = NULL;
    char why[256];
    snprintf(why, sizeof why, "message %llu of class %d from %s is %llu bytes, the receive buffer holds %zu",
             (unsigned long long)r->msg_seq, r->cls, p->name, (unsigned long long)r->msg_len, r->cap);
    wan_req_finish(r, XDC_ERR_RANGE, why); /* not in the queue any more: only its state changes */
    return t;
}

/* Header complete: decide where the payload goes. Returns 0 to continue, 1 when stalled, -1 on error. */
static int rx_header(wan_stream *s)
{
    xdc_wan_peer *p = s->peer;
    xdc_diag d;
    if (wan_frame_decode(s->rx_hdr, p->eng->cfg.frame_bytes, &s->rx_cur, &d) != XDC_OK) {
        wan_peer_fail(p, XDC_ERR_PROTO, "protocol error from %s on stream %d: %s", p->name, s->idx, d.msg);
        return -1;
    }
    wan_frame *f = &s->rx_cur;
    uint64_t now = xdc_now_ns();
    p->last_rx_ns = now;
    switch (f->type) {
    case WAN_FT_DATA: {
        if (f->seq >= p->rel.rx_cum[f->cls] + (uint64_t)p->rel.window) {
            wan_peer_fail(p, XDC_ERR_PROTO,
                          "protocol error from %s: DATA seq %llu of class %u beyond the window [%llu, +%d)", p->name,
                          (unsigned long long)f->seq, f->cls, (unsigned long long)p->rel.rx_cum[f->cls], p->rel.window);
            return -1;
        }
        xdc_wan_request *r = NULL;
        if (!seen_test(p, f->cls, f->seq)) {
            r = match_recv(p, f);
            if (!r) {
                if (f->msg_seq < p->rel.rx_posted[f->cls]) {
                    wan_peer_fail(p, XDC_ERR_PROTO, "protocol error from %s: DATA for finished message %llu", p->name,
                                  (unsigned long long)f->msg_seq);
                    return -1;
                }
                s->stalled = 1;
                return 1;
            }
            int oversize = 0;
            if (wan_frame_check_announce(f, r->msg_len, r->cap, &oversize, &d) != XDC_OK) {
                wan_peer_fail(p, XDC_ERR_PROTO, "protocol error from %s: %s", p->name, d.msg);
                return -1;
            }
            if (r->msg_len == UINT64_MAX) { /* the message's first frame: it is arriving from now */
                r->msg_len = f->msg_len;
                r->codec = f->codec;
                if (oversize && !(r = recv_refuse_oversize(p, r))) return -1;
                r->rx_arriving = 1;
                if (p->rx_arriving++ == 0) p->rx_busy_since_ns = now;
            }
        }
        s->stalled = 0;
        s->rx_req = r;
        s->rx_dst = r && !r->cancelled ? r->buf + f->msg_off : NULL;
        s->rx_left = f->payload_len;
        s->rx_in_payload = 1;
        snprintf(p->last_heard, sizeof p->last_heard, "DATA seq %llu on stream %d", (unsigned long long)f->seq, s->idx);
        if (s->rx_left == 0) {
            s->rx_in_payload = 0;
            data_done(s);
        }
        return 0;
    }
    case WAN_FT_ACK:
        if (wan_peer_ack(p, f->cls, f->seq) != XDC_OK) return -1;
        snprintf(p->last_heard, sizeof p->last_heard, "ACK %llu of class %u", (unsigned long long)f->seq, f->cls);
        return 0;
    case WAN_FT_PING: {
        wan_frame pong = {.type = WAN_FT_PONG, .msg_off = f->msg_off};
        wan_stream_queue_ctrl(s, &pong);
        return 0;
    }
    case WAN_FT_PONG: {
        double ms = (double)(now - f->msg_off) / 1e6;
        if (f->msg_off <= now) p->st.rtt_ms = p->st.rtt_ms > 0 ? 0.875 * p->st.rtt_ms + 0.125 * ms : ms;
        snprintf(p->last_heard, sizeof p->last_heard, "PONG (rtt %.2f ms)", ms);
        return 0;
    }
    case WAN_FT_BYE:
        /* Its acks first: a send the peer received whole completes, even when the ACK saying so travels on
         * another stream and is still unread. Then nothing more comes: close our streams too (first, so
         * none points into a buffer), then fail what is left. */
        if (wan_peer_ack(p, XDC_WAN_LATENCY, f->seq) != XDC_OK || wan_peer_ack(p, XDC_WAN_BULK, f->msg_off) != XDC_OK)
            return -1;
        p->closed = 1;
        wan_peer_close_streams(p);
        wan_peer_fail_requests(p, XDC_ERR_CLOSED, "the peer closed the connection (BYE)");
        pthread_cond_broadcast(&p->eng->cv);
        return 0;
    default:
        wan_peer_fail(p, XDC_ERR_PROTO, "protocol error from %s: unexpected %s frame on a ready stream", p->name,
                      wan_frame_type_name(f->type));
        return -1;
    }
}

/* Read frames until the socket is drained, the budget is spent, or the stream stalls. */
static int pump_rx(wan_stream *s)
{
    static uint8_t sink[65536]; /* discarded payload bytes: never read back, so sharing is harmless */
    size_t budget = PUMP_BUDGET_BYTES;
    while (budget && s->state != WAN_ST_DOWN) {
        uint8_t *dst;
        size_t want;
        if (!s->rx_in_payload) {
            if (s->rx_hdr_got == WAN_FRAME_HDR_BYTES) {
                int h = rx_header(s); /* a stalled header stays buffered and is looked at again */
                if (h != 0) return h < 0 ? -1 : 0;
                s->rx_hdr_got = 0;
                continue;
            }
            dst = s->rx_hdr + s->rx_hdr_got;
            want = WAN_FRAME_HDR_BYTES - s->rx_hdr_got;
        } else {
            dst = s->rx_dst ? s->rx_dst : sink;
            want = s->rx_left < sizeof sink || s->rx_dst ? s->rx_left : sizeof sink;
            if (want > (1u << 30)) want = 1u << 30;
        }
        size_t n = 0;
        int io = wan_stream_io(s, WAN_IO_READ, dst, want, &n);
        if (io != WAN_IO_DONE) return io;
        budget = n >= budget ? 0 : budget - n;
        if (!s->rx_in_payload) {
            s->rx_hdr_got += n;
        } else {
            if (s->rx_dst) s->rx_dst += n;
            s->rx_left -= n;
            if (s->rx_left == 0) {
                s->rx_in_payload = 0;
                data_done(s);
            }
        }
    }
    s->kick = 1;
    return 0;
}

void wan_stream_pump(wan_stream *s)
{
    if (wan_stream_write(s) < 0) return;
    if (s->peer->fail_err != XDC_OK) return;
    pump_rx(s);
    if (s->state != WAN_ST_DOWN && s->peer->fail_err == XDC_OK && (s->ctrl_n || s->tx_active)) wan_stream_write(s);
}

void wan_stream_reset_io(wan_stream *s)
{
    xdc_wan_peer *p = s->peer;
    if (s->tx_req) {
        s->tx_req->writers--;
        xdc_wan_request *r = s->tx_req;
        s->tx_req = NULL;
        send_maybe_done(r);
    }
    s->tx_active = 0;
    s->ctrl_n = 0;
    s->rx_hdr_got = 0;
    s->rx_in_payload = 0;
    s->rx_req = NULL;
    s->rx_dst = NULL;
    s->stalled = 0;
    if (!p) return;
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++)
        for (uint64_t q = p->rel.tx_acked[c]; q < p->rel.tx_next_seq[c]; q++) {
            wan_txf *t = txf_at(p, c, q);
            if (t->req && t->stream == s->idx) {
                t->stream = -1;
                p->rel.resend_pending[c] = 1;
            }
        }
}
