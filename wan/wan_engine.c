/* wan_engine.c — the progress engine of the WAN transport: one thread polls every socket, drives each
 * stream's I/O stack (wan_io.h: TCP connect, TLS handshake, reads and writes) without ever calling
 * OpenSSL itself, the HELLO exchange that binds a stream to its peer
 * session (so a redialled stream resumes the same peer), keepalive/RTT pings, redials with backoff
 * and the liveness deadline. Also the public engine, listener and peer lifecycle calls. */
#include "wan/wan_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "wan/wan_io.h"
#include "wan/wan_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define LOOP_TICK_MS 20 /* timer resolution: pings, redials, deadlines */

void wan_engine_wake(xdc_wan_engine *eng)
{
    uint64_t one = 1;
    ssize_t n = write(eng->wake_fd, &one, sizeof one);
    (void)n; /* a full eventfd counter already means "wake up" */
}

static void addr_text(const struct sockaddr_storage *a, char *buf, size_t cap)
{
    char host[64] = "?";
    int port = 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    }
    snprintf(buf, cap, "%s:%d", host, port);
}

/* Close a stream's connection: drain unread input (so the close does not reset what we wrote last), free
 * the layers. */
static void stream_close_io(wan_stream *s) { wan_io_stack_close(&s->io, 0); }

static void peer_update_up(xdc_wan_peer *p)
{
    int up = 0;
    for (int i = 0; i < p->nstreams; i++) up += p->streams[i] && p->streams[i]->state == WAN_ST_READY;
    p->st.streams_up = up;
    if (up == p->nstreams) {
        p->down_since_ns = 0;
        p->established = 1;
    } else if (!p->down_since_ns) {
        p->down_since_ns = xdc_now_ns();
    }
}

void wan_stream_break(wan_stream *s, const char *why)
{
    if (s->state == WAN_ST_DOWN) return;
    xdc_wan_peer *p = s->peer;
    stream_close_io(s);
    wan_stream_reset_io(s);
    s->state = WAN_ST_DOWN;
    if (!p) { /* a server connection that never said HELLO: a refusal */
        xdc_wan_listener *l = s->listener;
        if (l) {
            l->refused++;
            snprintf(l->last_refusal, sizeof l->last_refusal, "refused %s: %s", s->peer_addr, why);
        }
        XDC_WARN(XDC_SUB_WAN, "refused connection from %s: %s", s->peer_addr, why);
        if (l) pthread_cond_broadcast(&l->eng->cv);
        return;
    }
    snprintf(p->last_err, sizeof p->last_err, "stream %d: %s", s->idx, why);
    if (p->fail_err == XDC_OK && !p->closed) XDC_WARN(XDC_SUB_WAN, "%s: stream %d down: %s", p->name, s->idx, why);
    if (s->is_client) {
        s->since_ns = xdc_now_ns() + (uint64_t)s->backoff_ms * XDC_NS_PER_MS;
        s->backoff_ms = s->backoff_ms * 2 > p->eng->cfg.backoff_max_ms ? p->eng->cfg.backoff_max_ms : s->backoff_ms * 2;
    }
    peer_update_up(p);
}

void wan_peer_close_streams(xdc_wan_peer *p)
{
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = p->streams[i];
        if (!s) continue;
        stream_close_io(s);
        wan_stream_reset_io(s);
        s->state = WAN_ST_DOWN;
    }
    p->st.streams_up = 0;
}

void wan_peer_fail(xdc_wan_peer *p, xdc_err_t err, const char *fmt, ...)
{
    if (p->fail_err != XDC_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->fail_why, sizeof p->fail_why, fmt, ap);
    va_end(ap);
    p->fail_err = err;
    XDC_ERROR(XDC_SUB_WAN, "%s", p->fail_why);
    wan_peer_close_streams(p);
    wan_peer_fail_requests(p, err, p->fail_why);
    pthread_cond_broadcast(&p->eng->cv);
}

static wan_stream *stream_new(int is_client)
{
    wan_stream *s = xdc_calloc(1, sizeof *s);
    if (!s) return NULL;
    wan_io_stack_init(&s->io);
    s->is_client = is_client;
    return s;
}

/* Complete the I/O stack over a fresh TCP connection: TLS, and in tests the fault layer on top (armed
 * from the first byte for the dials wan_fault_next_dials() named). Then the handshake starts. */
static int stream_stack(xdc_wan_engine *eng, wan_stream *s)
{
    if (wan_io_tls_push(&s->io, s->is_client ? eng->cli_ctx : eng->srv_ctx, s->is_client) != XDC_OK) return -1;
    if (eng->faults.on) {
        const wan_fault *f = NULL;
        if (s->is_client && eng->faults.next_dials > 0) {
            eng->faults.next_dials--;
            f = &eng->faults.next;
        }
        if (wan_io_fault_push(&s->io, f) != XDC_OK) return -1;
    }
    s->state = WAN_ST_HANDSHAKE;
    s->since_ns = xdc_now_ns();
    s->kick = 1;
    return 0;
}

/* Client: open a fresh connection for stream s. */
static void stream_dial(wan_stream *s)
{
    xdc_wan_peer *p = s->peer;
    char where[96], why[sizeof s->io.why];
    snprintf(where, sizeof where, "%s:%d", p->host, p->port);
    int ok = wan_io_tcp_dial(&s->io, &p->addr, p->addr_len, p->eng->cfg.sockbuf_bytes, where) == WAN_IO_DONE;
    snprintf(why, sizeof why, "%s", ok ? "out of memory for a TLS session" : s->io.why);
    s->state = WAN_ST_HANDSHAKE; /* so break() runs its bookkeeping */
    if (!ok || stream_stack(p->eng, s) != 0) wan_stream_break(s, why);
}

static void peer_set_name(xdc_wan_peer *p, const char *addr)
{
    if (p->id.region[0]) snprintf(p->name, sizeof p->name, "peer %s/%d (%s)", p->id.region, p->id.rank, addr);
    else snprintf(p->name, sizeof p->name, "peer ? (%s)", addr);
}

static void handshake_done(wan_stream *s)
{
    xdc_wan_engine *eng = s->is_client ? s->peer->eng : s->listener->eng;
    xdc_diag d;
    if (s->is_client) {
        xdc_wan_peer *p = s->peer;
        xdc_wan_identity got;
        if (wan_io_tls_check_peer(&s->io, &eng->self, p->expect_any ? NULL : p->expect_region, p->expect_rank, &got,
                                  &d) != XDC_OK) {
            wan_peer_fail(p, XDC_ERR_AUTH, "refused peer at %s:%d: %s", p->host, p->port, d.msg);
            return;
        }
        if (p->expect_any && strcmp(got.region, p->id.region) != 0) {
            /* A peer dialled without expectation keeps the identity its first stream showed. */
            if (p->id.region[0]) {
                wan_peer_fail(p, XDC_ERR_AUTH,
                              "refused peer at %s:%d: stream %d names xdc://%s/%s/%d, stream 0 "
                              "named %s/%d",
                              p->host, p->port, s->idx, got.run, got.region, got.rank, p->id.region, p->id.rank);
                return;
            }
            p->id = got;
            char addr[96];
            snprintf(addr, sizeof addr, "%s:%d", p->host, p->port);
            peer_set_name(p, addr);
        }
        wan_frame h = {
            .type = WAN_FT_HELLO, .msg_seq = p->session, .msg_off = (uint64_t)s->idx, .msg_len = (uint64_t)p->nstreams};
        wan_stream_queue_ctrl(s, &h);
    } else {
        xdc_wan_identity got;
        if (wan_io_tls_check_peer(&s->io, &eng->self, NULL, 0, &got, &d) != XDC_OK) {
            wan_stream_break(s, d.msg);
            return;
        }
    }
    s->state = WAN_ST_HELLO;
    s->kick = 1;
}

int wan_stream_io(wan_stream *s, enum wan_io_op op, void *buf, size_t len, size_t *n)
{
    size_t moved = 0;
    int r = op == WAN_IO_HANDSHAKE ? wan_io_handshake(&s->io)
            : op == WAN_IO_READ    ? wan_io_read(&s->io, buf, len, &moved)
                                   : wan_io_write(&s->io, buf, len, &moved);
    if (n) *n = moved;
    if (r != WAN_IO_FAILED) return r;
    char why[sizeof s->io.why]; /* the stack is reset by what follows */
    snprintf(why, sizeof why, "%s", s->io.why[0] ? s->io.why : "connection failed");
    xdc_err_t err = s->io.err;
    xdc_wan_peer *p = s->peer;
    if (s->is_client && err == XDC_ERR_AUTH && op == WAN_IO_HANDSHAKE)
        wan_peer_fail(p, XDC_ERR_AUTH, "refused peer at %s:%d: %s", p->host, p->port, why);
    else if (s->is_client && err == XDC_ERR_AUTH && op == WAN_IO_READ && s->state == WAN_ST_HELLO)
        wan_peer_fail(p, XDC_ERR_AUTH, "refused by peer at %s:%d: %s", p->host, p->port, why);
    else wan_stream_break(s, why);
    return WAN_IO_FAILED;
}

static void handshake_step(wan_stream *s)
{
    if (wan_stream_io(s, WAN_IO_HANDSHAKE, NULL, 0, NULL) == WAN_IO_DONE) handshake_done(s);
}

/* Read one control header during the HELLO exchange. 1: complete, 0: need more, -1: stream gone. */
static int hello_read(wan_stream *s, wan_frame *f)
{
    while (s->rx_hdr_got < WAN_FRAME_HDR_BYTES) {
        size_t n = 0;
        int io = wan_stream_io(s, WAN_IO_READ, s->rx_hdr + s->rx_hdr_got, WAN_FRAME_HDR_BYTES - s->rx_hdr_got, &n);
        if (io != WAN_IO_DONE) return io;
        s->rx_hdr_got += n;
    }
    s->rx_hdr_got = 0;
    xdc_diag d;
    if (wan_frame_decode(s->rx_hdr, 0, f, &d) != XDC_OK) {
        wan_stream_break(s, d.msg);
        return -1;
    }
    return 1;
}

/* Server: a HELLO arrived on a pending connection; bind it to a new or existing peer session. */
static void server_hello(xdc_wan_engine *eng, wan_stream *s, const wan_frame *f)
{
    xdc_wan_identity got;
    xdc_diag d;
    wan_io_tls_check_peer(&s->io, &eng->self, NULL, 0, &got, &d);
    xdc_wan_peer *p = NULL;
    for (xdc_wan_peer *q = eng->peers; q; q = q->next)
        if (!q->is_client && q->session == f->msg_seq && strcmp(q->id.region, got.region) == 0 &&
            q->id.rank == got.rank && q->fail_err == XDC_OK && !q->closed)
            p = q;
    int resumed = p != NULL;
    if (wan_frame_check_hello(f, p ? p->nstreams : 0, &d) != XDC_OK) {
        wan_stream_break(s, d.msg);
        return;
    }
    if (!p) {
        if (wan_peer_alloc(eng, (int)f->msg_len, &p) != XDC_OK) {
            wan_stream_break(s, "out of memory for a new peer");
            return;
        }
        p->session = f->msg_seq;
        p->id = got;
        p->via = s->listener; /* half-open until every stream it announced is up: counted as a handshake */
        p->addr = s->from;
        p->next_ping_ns = xdc_now_ns();
        peer_set_name(p, s->peer_addr);
        p->next = eng->peers;
        eng->peers = p;
    }
    /* Unlink from the pending list; replace whatever sat in the slot (a broken or half-open stream). */
    for (wan_stream **pp = &eng->pending; *pp; pp = &(*pp)->next_pending)
        if (*pp == s) {
            *pp = s->next_pending;
            if (s->listener) s->listener->n_pending--;
            break;
        }
    int idx = (int)f->msg_off;
    wan_stream *old = p->streams[idx];
    if (old) {
        wan_stream_break(old, "replaced by a redialled stream");
        old->next_pending = eng->graveyard;
        eng->graveyard = old;
        if (p->established) p->st.reconnects++;
    }
    s->peer = p;
    s->idx = idx;
    s->state = WAN_ST_READY;
    p->streams[idx] = s;
    p->last_rx_ns = xdc_now_ns();
    wan_frame ack = {.type = WAN_FT_HELLO_ACK,
                     .msg_seq = p->session,
                     .flags = resumed ? WAN_FLAG_RESUMED : 0,
                     .seq = p->rel.rx_cum[XDC_WAN_LATENCY],
                     .msg_off = p->rel.rx_cum[XDC_WAN_BULK]};
    for (int c = 0; c < XDC_WAN_NUM_CLASSES; c++) p->rel.ack_sent[c] = p->rel.rx_cum[c];
    wan_stream_queue_ctrl(s, &ack);
    s->kick = 1;
    peer_update_up(p);
    if (p->established) p->via = NULL;
    if (p->established && !p->accepted) {
        p->accepted = 1;
        xdc_wan_listener *l = s->listener;
        if (l && l->n_ready < (int)(sizeof l->ready / sizeof l->ready[0])) {
            l->ready[l->n_ready++] = p;
            XDC_INFO(XDC_SUB_WAN, "accepted %s with %d streams", p->name, p->nstreams);
        } else {
            p->released = 1; /* nobody will accept it */
            wan_peer_fail(p, XDC_ERR_UNAVAILABLE, "%s refused: %d peers already wait for accept()", p->name,
                          l ? l->n_ready : 0);
        }
    }
    pthread_cond_broadcast(&eng->cv);
}

static void client_hello_ack(wan_stream *s, const wan_frame *f)
{
    xdc_wan_peer *p = s->peer;
    if (f->type != WAN_FT_HELLO_ACK || f->msg_seq != p->session) {
        wan_peer_fail(p, XDC_ERR_PROTO, "%s answered HELLO with %s for another session", p->name,
                      wan_frame_type_name(f->type));
        return;
    }
    if (p->established && !(f->flags & WAN_FLAG_RESUMED)) {
        wan_peer_fail(p, XDC_ERR_PEER_LOST, "%s lost our session (restarted?); unacknowledged data cannot be resumed",
                      p->name);
        return;
    }
    if (wan_peer_ack(p, XDC_WAN_LATENCY, f->seq) != XDC_OK || wan_peer_ack(p, XDC_WAN_BULK, f->msg_off) != XDC_OK)
        return;
    wan_peer_force_ack(p); /* the server may have lost our last ACK with the old stream */
    if (p->established) p->st.reconnects++;
    p->admitted = 1;
    s->state = WAN_ST_READY;
    s->backoff_ms = p->eng->cfg.backoff_min_ms;
    s->kick = 1;
    p->last_rx_ns = xdc_now_ns();
    peer_update_up(p);
    if (p->established) XDC_DEBUG(XDC_SUB_WAN, "%s: stream %d ready", p->name, s->idx);
    pthread_cond_broadcast(&p->eng->cv);
}

static void stream_progress(xdc_wan_engine *eng, wan_stream *s)
{
    wan_frame f;
    switch (s->state) {
    case WAN_ST_HANDSHAKE: handshake_step(s); return;
    case WAN_ST_HELLO:
        if (s->is_client) {
            if (wan_stream_write(s) < 0) return;
            if (hello_read(s, &f) == 1) client_hello_ack(s, &f);
        } else if (hello_read(s, &f) == 1) {
            server_hello(eng, s, &f);
        }
        return;
    case WAN_ST_READY: wan_stream_pump(s); return;
    default: return;
    }
}

static short stream_events(const wan_stream *s)
{
    switch (s->state) {
    case WAN_ST_HANDSHAKE: return (short)((s->io.want ? s->io.want : POLLIN) & ~s->io.hold);
    case WAN_ST_HELLO:
    case WAN_ST_READY: {
        short ev = s->io.want;
        if (!s->stalled) ev |= POLLIN;
        if (wan_stream_wants_write(s)) ev |= POLLOUT;
        return (short)(ev & ~s->io.hold); /* a direction a layer holds still waits for time (retry_ns) */
    }
    default: return 0;
    }
}

/* How long a connection may take from accept() to its HELLO, and a server session from its first HELLO
 * to its last stream: min(deadline, 10 s). */
static uint64_t handshake_limit_ns(const xdc_wan_engine *eng)
{
    return (uint64_t)(eng->cfg.deadline_ms < 10000 ? eng->cfg.deadline_ms : 10000) * XDC_NS_PER_MS;
}

/* 1 while p is a server session some of whose announced streams never opened: it holds a handshake slot. */
static int half_open(const xdc_wan_peer *p) { return p->via && !p->established && p->fail_err == XDC_OK && !p->closed; }

static void peer_timers(xdc_wan_peer *p)
{
    uint64_t now = xdc_now_ns(); /* after the streams ran: their timestamps are not in the future */
    if (p->fail_err != XDC_OK || p->closed) return;
    const xdc_wan_config *cfg = &p->eng->cfg;
    uint64_t limit = (uint64_t)cfg->deadline_ms * XDC_NS_PER_MS;
    if (half_open(p) && p->down_since_ns && now - p->down_since_ns > handshake_limit_ns(p->eng)) {
        /* A HELLO that announces streams it never opens holds a session's memory: no longer than a handshake. */
        wan_peer_fail(p, XDC_ERR_TIMEOUT, "%s: %d of the %d streams its HELLO announced opened within %lld ms", p->name,
                      p->st.streams_up, p->nstreams, (long long)(handshake_limit_ns(p->eng) / XDC_NS_PER_MS));
        return;
    }
    if (p->down_since_ns && now - p->down_since_ns > limit) {
        wan_peer_fail(p, XDC_ERR_TIMEOUT,
                      "%s unreachable: %d of %d streams down for %lld ms (deadline %lld ms); last heard %.1f s ago: %s;"
                      " last error: %s",
                      p->name, p->nstreams - p->st.streams_up, p->nstreams,
                      (long long)((now - p->down_since_ns) / XDC_NS_PER_MS), (long long)cfg->deadline_ms,
                      (double)(now - p->last_rx_ns) / 1e9, p->last_heard, p->last_err[0] ? p->last_err : "none");
        return;
    }
    int stalled = 0; /* we stopped reading ourselves (no receive posted): silence is not the peer's fault */
    for (int i = 0; i < p->nstreams; i++) stalled |= p->streams[i] && p->streams[i]->stalled;
    if (stalled) p->last_rx_ns = now;
    if (p->established && now - p->last_rx_ns > limit) {
        wan_peer_fail(p, XDC_ERR_TIMEOUT, "%s silent for %lld ms (deadline %lld ms); last heard: %s", p->name,
                      (long long)((now - p->last_rx_ns) / XDC_NS_PER_MS), (long long)cfg->deadline_ms, p->last_heard);
        return;
    }
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = p->streams[i];
        if (s && s->is_client && s->state == WAN_ST_DOWN && now >= s->since_ns && (i == 0 || p->admitted))
            stream_dial(s);
    }
    if (now >= p->next_ping_ns) {
        p->next_ping_ns = now + (uint64_t)cfg->ping_interval_ms * XDC_NS_PER_MS;
        for (int k = 0; k < p->nstreams; k++) {
            wan_stream *s = p->streams[(p->ping_rr + k) % p->nstreams];
            if (s && s->state == WAN_ST_READY) {
                wan_frame ping = {.type = WAN_FT_PING, .msg_off = now};
                wan_stream_queue_ctrl(s, &ping);
                p->ping_rr = (p->ping_rr + k + 1) % p->nstreams;
                break;
            }
        }
    }
}

static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 1;
}

/* A connection over the handshake caps: closed at once and counted as refused. Logged when the count
 * of refusals reaches a power of two, so a flood cannot flood the log as well. */
static void refuse_early(xdc_wan_listener *l, int fd, const struct sockaddr_storage *a, const char *fmt, int n)
{
    char addr[80], why[256];
    close(fd);
    addr_text(a, addr, sizeof addr);
    snprintf(why, sizeof why, fmt, n);
    l->refused++;
    snprintf(l->last_refusal, sizeof l->last_refusal, "refused %s: %s", addr, why);
    if ((l->refused & (l->refused - 1)) == 0)
        XDC_WARN(XDC_SUB_WAN, "refused connection from %s: %s (%d refused on port %d so far)", addr, why, l->refused,
                 l->port);
    pthread_cond_broadcast(&l->eng->cv);
}

/* accept() failed for want of descriptors or memory: stop polling the listener for a while instead
 * of spinning on its ever-readable socket (the backlog waits in the kernel meanwhile). */
static void accept_pause(xdc_wan_listener *l, int err)
{
    l->pause_ms = l->pause_ms ? (l->pause_ms * 2 > 1000 ? 1000 : l->pause_ms * 2) : 10;
    l->paused_until_ns = xdc_now_ns() + (uint64_t)l->pause_ms * XDC_NS_PER_MS;
    if (l->pause_ms == 10 || l->pause_ms == 1000)
        XDC_WARN(XDC_SUB_WAN, "accept on port %d: %s; not accepting for %d ms", l->port, strerror(err), l->pause_ms);
}

static void accept_new(xdc_wan_engine *eng, xdc_wan_listener *l)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        int fd = accept4(l->fd, (struct sockaddr *)&a, &alen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) accept_pause(l, errno);
            return;
        }
        l->pause_ms = 0;
        /* Half-open sessions count as one handshake each, so announcing streams one never opens is capped too. */
        int on_listener = l->n_pending, from_addr = 0;
        for (const xdc_wan_peer *q = eng->peers; q; q = q->next)
            if (half_open(q) && q->via == l) {
                on_listener++;
                from_addr += same_host(&q->addr, &a);
            }
        if (on_listener >= eng->cfg.max_pending_handshakes) {
            refuse_early(l, fd, &a, "%d handshakes already pending on this listener", on_listener);
            continue;
        }
        for (const wan_stream *q = eng->pending; q; q = q->next_pending)
            from_addr += q->listener == l && same_host(&q->from, &a);
        if (from_addr >= eng->cfg.max_pending_per_addr) {
            refuse_early(l, fd, &a, "%d handshakes already pending from this address", from_addr);
            continue;
        }
        wan_stream *s = stream_new(0);
        if (!s) {
            close(fd);
            return;
        }
        s->listener = l;
        s->from = a;
        addr_text(&a, s->peer_addr, sizeof s->peer_addr);
        if (wan_io_tcp_adopt(&s->io, fd, eng->cfg.sockbuf_bytes) != XDC_OK) {
            xdc_free(s);
            continue;
        }
        if (stream_stack(eng, s) != 0) {
            stream_close_io(s);
            xdc_free(s);
            continue;
        }
        s->next_pending = eng->pending;
        eng->pending = s;
        l->n_pending++;
    }
}

typedef struct {
    struct pollfd *pfd;
    wan_stream **who; /* (cap) stream per pollfd, NULL for the wake fd and listeners */
    xdc_wan_listener **lis;
    int n, cap;
} poll_set;

static int poll_add(poll_set *ps, int fd, short ev, wan_stream *s, xdc_wan_listener *l)
{
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        struct pollfd *pfd = xdc_realloc(ps->pfd, (size_t)cap * sizeof *pfd);
        if (pfd) ps->pfd = pfd;
        wan_stream **who = xdc_realloc(ps->who, (size_t)cap * sizeof *who);
        if (who) ps->who = who;
        xdc_wan_listener **lis = xdc_realloc(ps->lis, (size_t)cap * sizeof *lis);
        if (lis) ps->lis = lis;
        if (!pfd || !who || !lis) return -1;
        ps->cap = cap;
    }
    ps->pfd[ps->n] = (struct pollfd){.fd = fd, .events = ev};
    ps->who[ps->n] = s;
    ps->lis[ps->n] = l;
    ps->n++;
    return 0;
}

static void peer_free_all(xdc_wan_peer *p)
{
    for (int i = 0; i < p->nstreams; i++)
        if (p->streams[i]) {
            stream_close_io(p->streams[i]);
            xdc_free(p->streams[i]);
        }
    wan_peer_free(p);
}

/* Free the peers nobody holds any more: destroyed by their owner, refused before accept(), or server
 * sessions that failed before they were established (nobody ever saw them), once no request of theirs
 * is out. Without this every session a listener ever served stayed in memory and in the loop. */
static void reap_peers(xdc_wan_engine *eng)
{
    for (xdc_wan_peer **pp = &eng->peers; *pp;) {
        xdc_wan_peer *p = *pp;
        int unowned = p->released || (!p->is_client && !p->accepted && (p->fail_err != XDC_OK || p->closed));
        if (unowned && p->nreqs == 0) {
            *pp = p->next;
            peer_free_all(p);
        } else {
            pp = &p->next;
        }
    }
}

/* A new CRL is in force: connections whose peer certificate it lists end now, not at their next handshake.
 * Peers fail for good (XDC_ERR_AUTH, their requests with them); streams still before their HELLO break. */
static void cut_revoked(xdc_wan_engine *eng)
{
    for (xdc_wan_peer *p = eng->peers; p; p = p->next)
        for (int i = 0; i < p->nstreams && p->fail_err == XDC_OK; i++) {
            wan_stream *s = p->streams[i];
            if (s && s->io.top && wan_io_tls_revoked(&s->io, &eng->crl))
                wan_peer_fail(p, XDC_ERR_AUTH, "%s: certificate revoked (CRL %s); connection cut", p->name,
                              eng->crl.path);
        }
    for (wan_stream *s = eng->pending; s; s = s->next_pending)
        if (s->io.top && s->state != WAN_ST_DOWN && wan_io_tls_revoked(&s->io, &eng->crl))
            wan_stream_break(s, "certificate revoked");
}

/* Progress a stream that poll() found ready, that asked to run again (kick), or whose I/O stack waits for
 * a time that has come (a fault layer's delay). */
static void stream_turn(xdc_wan_engine *eng, wan_stream *s, uint64_t now)
{
    if (!s->revents && !s->kick && !(s->io.retry_ns && now >= s->io.retry_ns)) return;
    s->kick = 0;
    s->io.want = s->io.hold = 0;
    s->io.retry_ns = 0;
    stream_progress(eng, s);
    s->revents = 0;
}

static void *engine_main(void *arg)
{
    xdc_wan_engine *eng = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* SIGPIPE from a dead socket becomes EPIPE */
    poll_set ps = {0};
    pthread_mutex_lock(&eng->mu);
    while (!eng->stop) {
        ps.n = 0;
        int kick = 0;
        poll_add(&ps, eng->wake_fd, POLLIN, NULL, NULL);
        uint64_t t_poll = xdc_now_ns();
        for (xdc_wan_listener *l = eng->listeners; l; l = l->next)
            if (t_poll >= l->paused_until_ns) poll_add(&ps, l->fd, POLLIN, NULL, l);
        for (wan_stream *s = eng->pending; s; s = s->next_pending) {
            kick |= s->kick;
            if (s->io.fd >= 0) poll_add(&ps, s->io.fd, stream_events(s), s, NULL);
        }
        for (xdc_wan_peer *p = eng->peers; p; p = p->next)
            for (int i = 0; i < p->nstreams; i++) {
                wan_stream *s = p->streams[i];
                if (!s || s->io.fd < 0) continue;
                kick |= s->kick;
                poll_add(&ps, s->io.fd, stream_events(s), s, NULL);
            }
        pthread_mutex_unlock(&eng->mu);
        poll(ps.pfd, (nfds_t)ps.n, kick ? 0 : LOOP_TICK_MS);
        pthread_mutex_lock(&eng->mu);
        uint64_t drain;
        if (ps.pfd[0].revents & POLLIN && read(eng->wake_fd, &drain, sizeof drain) < 0) drain = 0;
        for (int i = 1; i < ps.n; i++) {
            if (ps.who[i]) ps.who[i]->revents = ps.pfd[i].revents;
            else if (ps.lis[i] && ps.pfd[i].revents && !ps.lis[i]->closed) accept_new(eng, ps.lis[i]);
        }
        uint64_t now = xdc_now_ns();
        for (wan_stream *s = eng->pending, *nx; s; s = nx) {
            nx = s->next_pending;
            stream_turn(eng, s, now);
        }
        for (xdc_wan_peer *p = eng->peers; p; p = p->next) {
            for (int i = 0; i < p->nstreams; i++)
                if (p->streams[i] && p->streams[i]->io.fd >= 0) stream_turn(eng, p->streams[i], now);
            peer_timers(p);
        }
        if (wan_tls_crl_refresh(&eng->crl, eng->srv_ctx, eng->cli_ctx, now)) cut_revoked(eng);
        /* Reap refused or timed-out handshakes and replaced streams. */
        uint64_t hs_limit = handshake_limit_ns(eng);
        for (wan_stream **pp = &eng->pending; *pp;) {
            wan_stream *s = *pp;
            if (s->state != WAN_ST_DOWN && now - s->since_ns > hs_limit) wan_stream_break(s, "handshake timed out");
            if (s->state == WAN_ST_DOWN) {
                *pp = s->next_pending;
                if (s->listener) s->listener->n_pending--;
                xdc_free(s);
            } else {
                pp = &s->next_pending;
            }
        }
        while (eng->graveyard) {
            wan_stream *s = eng->graveyard;
            eng->graveyard = s->next_pending;
            xdc_free(s);
        }
        while (eng->dead_listeners) {
            xdc_wan_listener *l = eng->dead_listeners;
            eng->dead_listeners = l->next;
            xdc_free(l);
        }
        reap_peers(eng);
    }
    pthread_mutex_unlock(&eng->mu);
    xdc_free(ps.pfd);
    xdc_free(ps.who);
    xdc_free(ps.lis);
    return NULL;
}

/* ---- public lifecycle ---------------------------------------------------------------------------- */

xdc_err_t xdc_wan_engine_create(const xdc_wan_config *cfg, xdc_wan_engine **out, xdc_diag *diag)
{
    if (!cfg || !out) return XDC_ERR_INVALID;
    if (cfg->streams < 1 || cfg->streams > XDC_WAN_MAX_STREAMS || cfg->frame_bytes < 1024 ||
        cfg->frame_bytes > XDC_WAN_MAX_FRAME_PAYLOAD || cfg->window_frames < 64 ||
        (cfg->window_frames & (cfg->window_frames - 1)) || cfg->deadline_ms < 1 || cfg->backoff_min_ms < 1 ||
        cfg->backoff_max_ms < cfg->backoff_min_ms || cfg->ping_interval_ms < 1 || cfg->max_pending_handshakes < 1 ||
        cfg->max_pending_per_addr < 1) {
        xdc_diag_set(diag,
                     "WAN config out of range: streams 1..%d, frame_bytes 1 KiB..16 MiB, window a power of "
                     "two >= 64, positive deadline, backoff, ping interval and handshake caps",
                     XDC_WAN_MAX_STREAMS);
        return XDC_ERR_CONFIG;
    }
    xdc_wan_engine *eng = xdc_calloc(1, sizeof *eng);
    if (!eng) return XDC_ERR_NOMEM;
    eng->cfg = *cfg;
    eng->wake_fd = -1;
    xdc_pool_init(&eng->reqs, sizeof(xdc_wan_request));
    pthread_mutex_init(&eng->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&eng->cv, &ca);
    pthread_condattr_destroy(&ca);
    xdc_err_t rc;
    XDC_CHECK_GOTO(wan_tls_create(cfg, &eng->srv_ctx, &eng->cli_ctx, &eng->self, &eng->crl, diag), rc, fail);
    eng->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (eng->wake_fd < 0) {
        xdc_diag_set(diag, "eventfd: %m");
        rc = XDC_ERR_IO;
        goto fail;
    }
    if (pthread_create(&eng->thread, NULL, engine_main, eng) != 0) {
        xdc_diag_set(diag, "cannot start the WAN progress thread");
        rc = XDC_ERR_NOMEM;
        goto fail;
    }
    eng->thread_started = 1;
    *out = eng;
    return XDC_OK;
fail:
    xdc_wan_engine_destroy(eng);
    return rc;
}

const xdc_wan_identity *xdc_wan_engine_identity(const xdc_wan_engine *eng) { return &eng->self; }

void xdc_wan_engine_counts(xdc_wan_engine *eng, xdc_wan_counts *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&eng->mu);
    for (const xdc_wan_peer *p = eng->peers; p; p = p->next) {
        out->peers++;
        out->pending += half_open(p);
    }
    for (const wan_stream *s = eng->pending; s; s = s->next_pending) out->pending++;
    out->requests = (int)(xdc_pool_allocated(&eng->reqs) - xdc_pool_free_count(&eng->reqs));
    pthread_mutex_unlock(&eng->mu);
}

static void req_free_owned(void *obj, void *arg)
{
    (void)arg;
    xdc_free(((xdc_wan_request *)obj)->owned);
}

void xdc_wan_engine_destroy(xdc_wan_engine *eng)
{
    if (!eng) return;
    if (eng->thread_started) {
        pthread_mutex_lock(&eng->mu);
        eng->stop = 1;
        pthread_mutex_unlock(&eng->mu);
        wan_engine_wake(eng);
        pthread_join(eng->thread, NULL);
    }
    while (eng->listeners) {
        xdc_wan_listener *l = eng->listeners;
        eng->listeners = l->next;
        close(l->fd);
        xdc_free(l);
    }
    while (eng->dead_listeners) {
        xdc_wan_listener *l = eng->dead_listeners;
        eng->dead_listeners = l->next;
        xdc_free(l);
    }
    while (eng->pending) {
        wan_stream *s = eng->pending;
        eng->pending = s->next_pending;
        stream_close_io(s);
        xdc_free(s);
    }
    while (eng->peers) {
        xdc_wan_peer *p = eng->peers;
        eng->peers = p->next;
        peer_free_all(p);
    }
    xdc_pool_each(&eng->reqs, req_free_owned, NULL); /* copies kept by cancelled sends still pending */
    xdc_pool_destroy(&eng->reqs);
    wan_tls_destroy(eng->srv_ctx, eng->cli_ctx, &eng->crl);
    if (eng->wake_fd >= 0) close(eng->wake_fd);
    pthread_cond_destroy(&eng->cv);
    pthread_mutex_destroy(&eng->mu);
    xdc_free(eng);
}

xdc_err_t xdc_wan_listen(xdc_wan_engine *eng, const char *host, int port, xdc_wan_listener **out, xdc_diag *diag)
{
    if (!eng || !out || port < 0 || port > 65535) return XDC_ERR_INVALID;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (host && host[0] && inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        xdc_diag_set(diag, "listen address '%s' is not an IPv4 address", host);
        return XDC_ERR_INVALID;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
        xdc_diag_set(diag, "listen on %s:%d: %m", host && host[0] ? host : "0.0.0.0", port);
        if (fd >= 0) close(fd);
        return XDC_ERR_UNAVAILABLE;
    }
    socklen_t alen = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &alen);
    xdc_wan_listener *l = xdc_calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return XDC_ERR_NOMEM;
    }
    l->eng = eng;
    l->fd = fd;
    l->port = ntohs(a.sin_port);
    pthread_mutex_lock(&eng->mu);
    l->next = eng->listeners;
    eng->listeners = l;
    pthread_mutex_unlock(&eng->mu);
    wan_engine_wake(eng);
    *out = l;
    return XDC_OK;
}

int xdc_wan_listener_port(const xdc_wan_listener *l) { return l ? l->port : -1; }

static int cv_wait_until(xdc_wan_engine *eng, uint64_t deadline)
{
    if (xdc_deadline_passed(deadline)) return -1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int ms = xdc_deadline_poll_ms(deadline);
    if (ms > 100) ms = 100;
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&eng->cv, &eng->mu, &ts);
    return 0;
}

xdc_err_t xdc_wan_accept(xdc_wan_listener *l, int64_t timeout_ms, xdc_wan_peer **out, xdc_diag *diag)
{
    if (!l || !out) return XDC_ERR_INVALID;
    xdc_wan_engine *eng = l->eng;
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    pthread_mutex_lock(&eng->mu);
    while (l->n_ready == 0 && cv_wait_until(eng, deadline) == 0) {
    }
    xdc_err_t rc = XDC_OK;
    if (l->n_ready) {
        *out = l->ready[0];
        memmove(l->ready, l->ready + 1, (size_t)(--l->n_ready) * sizeof l->ready[0]);
    } else {
        xdc_diag_set(diag, "no peer connected to port %d within %lld ms (%d refused%s%s)", l->port,
                     (long long)timeout_ms, l->refused, l->refused ? "; last: " : "",
                     l->refused ? l->last_refusal : "");
        rc = XDC_ERR_TIMEOUT;
    }
    pthread_mutex_unlock(&eng->mu);
    return rc;
}

int xdc_wan_listener_last_refusal(xdc_wan_listener *l, xdc_diag *diag)
{
    pthread_mutex_lock(&l->eng->mu);
    int n = l->refused;
    xdc_diag_set(diag, "%s", l->last_refusal);
    pthread_mutex_unlock(&l->eng->mu);
    return n;
}

void xdc_wan_listener_close(xdc_wan_listener *l)
{
    if (!l) return;
    xdc_wan_engine *eng = l->eng;
    pthread_mutex_lock(&eng->mu);
    for (xdc_wan_listener **pp = &eng->listeners; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    for (wan_stream *s = eng->pending; s; s = s->next_pending)
        if (s->listener == l) wan_stream_break(s, "listener closed");
    for (xdc_wan_peer *p = eng->peers; p; p = p->next) {
        if (p->via == l) p->via = NULL;
        for (int i = 0; i < p->nstreams; i++)
            if (p->streams[i] && p->streams[i]->listener == l) p->streams[i]->listener = NULL;
    }
    for (int i = 0; i < l->n_ready; i++) { /* established, never handed out: nobody will close them */
        l->ready[i]->released = 1;
        wan_peer_fail(l->ready[i], XDC_ERR_CLOSED, "%s: the listener was closed before accept()", l->ready[i]->name);
    }
    l->n_ready = 0;
    close(l->fd);
    l->closed = 1;
    l->next = eng->dead_listeners;
    eng->dead_listeners = l;
    pthread_mutex_unlock(&eng->mu);
    wan_engine_wake(eng);
}

xdc_err_t xdc_wan_connect(xdc_wan_engine *eng, const char *host, int port, const char *expect_region, int expect_rank,
                          xdc_wan_peer **out, xdc_diag *diag)
{
    if (!eng || !host || !out || port <= 0 || port > 65535) return XDC_ERR_INVALID;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    int g = getaddrinfo(host, ports, &hints, &ai);
    if (g != 0 || !ai) {
        xdc_diag_set(diag, "cannot resolve %s: %s", host, gai_strerror(g));
        return XDC_ERR_UNAVAILABLE;
    }
    xdc_wan_peer *p;
    xdc_err_t rc = wan_peer_alloc(eng, eng->cfg.streams + 1, &p); /* stream 0 carries the latency class */
    if (rc != XDC_OK) {
        freeaddrinfo(ai);
        return rc;
    }
    memcpy(&p->addr, ai->ai_addr, ai->ai_addrlen);
    p->addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    p->is_client = 1;
    snprintf(p->host, sizeof p->host, "%s", host);
    p->port = port;
    p->expect_any = expect_region == NULL;
    snprintf(p->expect_region, sizeof p->expect_region, "%s", expect_region ? expect_region : "");
    p->expect_rank = expect_rank;
    snprintf(p->id.run, sizeof p->id.run, "%s", eng->self.run);
    snprintf(p->id.region, sizeof p->id.region, "%s", p->expect_region);
    p->id.rank = expect_region ? expect_rank : -1;
    char addr[96];
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    peer_set_name(p, addr);
    if (wan_tls_random(&p->session, sizeof p->session) != XDC_OK) p->session = xdc_now_ns();
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = stream_new(1);
        if (!s) {
            for (int j = 0; j < i; j++) xdc_free(p->streams[j]);
            wan_peer_free(p);
            return XDC_ERR_NOMEM;
        }
        s->peer = p;
        s->idx = i;
        s->backoff_ms = eng->cfg.backoff_min_ms;
        s->since_ns = 0; /* dial at the next loop turn */
        p->streams[i] = s;
    }
    pthread_mutex_lock(&eng->mu);
    p->down_since_ns = xdc_now_ns();
    p->next_ping_ns = xdc_now_ns();
    p->next = eng->peers;
    eng->peers = p;
    pthread_mutex_unlock(&eng->mu);
    wan_engine_wake(eng);
    *out = p;
    return XDC_OK;
}

xdc_err_t xdc_wan_peer_wait_ready(xdc_wan_peer *p, int64_t timeout_ms, xdc_diag *diag)
{
    if (!p) return XDC_ERR_INVALID;
    xdc_wan_engine *eng = p->eng;
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    pthread_mutex_lock(&eng->mu);
    while (p->st.streams_up < p->nstreams && p->fail_err == XDC_OK && cv_wait_until(eng, deadline) == 0) {
    }
    xdc_err_t rc = p->fail_err;
    if (rc != XDC_OK) xdc_diag_set(diag, "%s", p->fail_why);
    else if (p->st.streams_up < p->nstreams) {
        xdc_diag_set(diag, "%s: %d of %d streams up after %lld ms; last error: %s", p->name, p->st.streams_up,
                     p->nstreams, (long long)timeout_ms, p->last_err[0] ? p->last_err : "none");
        rc = XDC_ERR_TIMEOUT;
    }
    pthread_mutex_unlock(&eng->mu);
    return rc;
}

const xdc_wan_identity *xdc_wan_peer_identity(const xdc_wan_peer *p) { return &p->id; }

void xdc_wan_peer_stats(xdc_wan_peer *p, xdc_wan_stats *out)
{
    pthread_mutex_lock(&p->eng->mu);
    *out = p->st;
    uint64_t now = xdc_now_ns(), busy = p->tx_busy_ns + (p->tx_since_ns ? now - p->tx_since_ns : 0);
    if (busy) out->goodput_gbps = (double)p->st.tx_payload_bytes * 8.0 / (double)busy;
    out->rx_busy_seconds = (double)(p->rx_busy_ns + (p->rx_arriving ? now - p->rx_busy_since_ns : 0)) / 1e9;
    out->silent_seconds = p->last_rx_ns && now > p->last_rx_ns ? (double)(now - p->last_rx_ns) / 1e9 : 0.0;
    pthread_mutex_unlock(&p->eng->mu);
}

void xdc_wan_peer_close(xdc_wan_peer *p)
{
    if (!p) return;
    xdc_wan_engine *eng = p->eng;
    pthread_mutex_lock(&eng->mu);
    int was_open = p->fail_err == XDC_OK && !p->closed;
    p->closed = 1; /* from here on a stream writes control frames and the frame it is in the middle of only */
    if (was_open) {
        for (int i = 0; i < p->nstreams; i++) {
            wan_stream *s = p->streams[i];
            if (!s || s->state != WAN_ST_READY) continue;
            /* With our acks: an ACK written on another stream may be read after this BYE. */
            wan_frame bye = {
                .type = WAN_FT_BYE, .seq = p->rel.rx_cum[XDC_WAN_LATENCY], .msg_off = p->rel.rx_cum[XDC_WAN_BULK]};
            wan_stream_queue_ctrl(s, &bye);
            wan_stream_write(s); /* best effort: the socket has room for a header almost always */
        }
    }
    /* Streams first, so none points into a request's buffer when the requests end: after this call
     * returns, no buffer of this peer's requests is read or written again. */
    wan_peer_close_streams(p);
    wan_peer_fail_requests(p, XDC_ERR_CLOSED, "the peer was closed locally");
    pthread_cond_broadcast(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    wan_engine_wake(eng);
}

void xdc_wan_peer_destroy(xdc_wan_peer *p)
{
    if (!p) return;
    xdc_wan_engine *eng = p->eng; /* once released, the engine thread may free p at any moment */
    xdc_wan_peer_close(p);
    pthread_mutex_lock(&eng->mu);
    p->released = 1;
    pthread_mutex_unlock(&eng->mu);
    wan_engine_wake(eng);
}
