/* wan_emu.c — the userspace WAN emulator: a TCP relay that makes one link of a topology real on one
 * machine without root. Each accepted connection is paired with a fresh connection to the target and
 * both directions pass through a link model:
 *   rate    — a token bucket refilled at rate_mbps limits how fast bytes are taken from the sender
 *             (the sender's TCP then sees the bottleneck as backpressure);
 *   delay   — every chunk read is released rtt/2 (+ uniform jitter, never reordering) later;
 *   loss    — per 1448-byte segment with probability loss_pct, the direction stalls one RTT, which is
 *             what a loss costs a TCP flow that recovers by fast retransmit;
 *   outage  — cut() resets every relayed connection and refuses new ones until restore(); a scheduled
 *             outage may wait for a transfer in flight (xdc_wan_outage.in_flight).
 * One thread per relay polls all of its connections. */
#include "wan/emu/xdc_wan_emu.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define EMU_CHUNK           16384       /* bytes read per chunk: the unit of delay */
#define EMU_QUEUE_BYTES     (16u << 20) /* in-flight bytes per direction (>= rate x one-way delay) */
#define EMU_MAX_CONNS       128
#define EMU_MAX_ROUTES      64 /* listen port -> target pairs sharing one link's buckets */
#define EMU_SEGMENT         1448
/* Bytes on their way in one direction of one connection that make a transfer "in flight" for an in-flight
 * outage: one chunk, more than a TLS handshake's flights (a few KB of certificates) ever hold. */
#define EMU_IN_FLIGHT_BYTES EMU_CHUNK

typedef struct emu_chunk {
    uint64_t release_ns;
    uint32_t len, off;
    uint8_t data[EMU_CHUNK];
} emu_chunk;

/* One direction of one connection: bytes read from `in`, delayed in a ring of chunks, written to `out`. */
typedef struct emu_dir {
    emu_chunk *ring; /* (n_slots) chunks */
    uint32_t n_slots, head, count;
    uint64_t queued; /* bytes read and not yet written on */
    uint64_t last_release_ns;
    /* The reader saw EOF (eof), or a reset (eof and reset): once the queue drained, shut down the writer's side, or
     * end the connection with a reset. So the bytes on their way when a side closes or resets still arrive, as on a
     * real link: a peer's last frames (the WAN protocol's BYE) are not lost to the reset that follows them. */
    int eof, reset;
    int shut;
} emu_dir;

/* One listening port and where its connections go. All routes of a relay share its link. */
typedef struct emu_route {
    int lfd, port;
    struct sockaddr_in target;
} emu_route;

typedef struct emu_conn {
    int fd[2];      /* 0: accepted client side, 1: connection to the target */
    int connected;  /* target connect completed */
    emu_dir dir[2]; /* dir[0]: client -> target, dir[1]: target -> client */
} emu_conn;

struct xdc_wan_relay {
    xdc_wan_link_model m;
    int wake_fd;
    emu_route routes[EMU_MAX_ROUTES]; /* [0] made by create, more by add_route */
    int n_routes;
    pthread_t thread;
    pthread_mutex_t mu;
    int stop, cut;
    /* Pending outages, ordered by start; [0] is the next or current one. An in-flight one whose start has
     * passed waits for a transfer (carrying()), then lasts end_ns - start_ns from there. */
    struct {
        uint64_t start_ns, end_ns;
        int in_flight;
    } outages[XDC_WAN_MAX_OUTAGES];
    int n_outages;
    emu_conn *conns[EMU_MAX_CONNS];
    int n_conns;
    xdc_rng rng;
    double tokens[2]; /* bytes; one bucket per direction, shared by every connection of the link */
    int backlog[2];   /* the bucket, not the sender, limited the last read of that direction */
    uint64_t refill_ns;
    unsigned rot;
    uint64_t accepted, bytes;
    uint64_t wakeups; /* polls that returned: what an idle link costs (xdc_wan_relay_wakeups) */
};

static void conn_free(emu_conn *c)
{
    for (int i = 0; i < 2; i++) {
        if (c->fd[i] >= 0) {
            /* Abortive close (RST), like a real link failure or middlebox reset. */
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(c->fd[i]);
        }
        xdc_free(c->dir[i].ring);
    }
    xdc_free(c);
}

static void drop_all(xdc_wan_relay *r)
{
    for (int i = 0; i < r->n_conns; i++) conn_free(r->conns[i]);
    r->n_conns = 0;
    /* no sender is held back any more: a stale flag would let an in-flight outage (carrying()) cut the next
     * connection's handshake */
    r->backlog[0] = r->backlog[1] = 0;
}

static uint64_t one_way_ns(xdc_wan_relay *r)
{
    double ms = r->m.rtt_ms / 2;
    if (r->m.jitter_ms > 0) ms += r->m.jitter_ms * xdc_rng_uniform(&r->rng);
    return (uint64_t)(ms * 1e6);
}

static void accept_conns(xdc_wan_relay *r, const emu_route *rt)
{
    for (;;) {
        int fd = accept4(rt->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (r->cut || r->n_conns == EMU_MAX_CONNS) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(fd);
            continue;
        }
        emu_conn *c = xdc_calloc(1, sizeof *c);
        int t = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        uint32_t slots = (uint32_t)(EMU_QUEUE_BYTES / EMU_CHUNK);
        if (c) {
            c->dir[0].ring = xdc_malloc(slots * sizeof(emu_chunk));
            c->dir[1].ring = xdc_malloc(slots * sizeof(emu_chunk));
        }
        if (!c || t < 0 || !c->dir[0].ring || !c->dir[1].ring ||
            (connect(t, (const struct sockaddr *)&rt->target, sizeof rt->target) != 0 && errno != EINPROGRESS)) {
            close(fd);
            if (t >= 0) close(t);
            if (c) {
                xdc_free(c->dir[0].ring);
                xdc_free(c->dir[1].ring);
                xdc_free(c);
            }
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd[0] = fd;
        c->fd[1] = t;
        c->dir[0].n_slots = c->dir[1].n_slots = slots;
        r->conns[r->n_conns++] = c;
        r->accepted++;
    }
}

static void refill(xdc_wan_relay *r, uint64_t now)
{
    if (r->m.rate_mbps <= 0) return;
    double bytes_per_ns = r->m.rate_mbps * 1e6 / 8 / 1e9;
    double add = (double)(now - r->refill_ns) * bytes_per_ns;
    for (int d = 0; d < 2; d++) {
        /* An idle link may bank 10 ms of tokens (or one chunk): a short burst, as on a real link. While
         * senders wait on the bucket, a late wakeup of this thread must not cost rate, so then up to
         * 250 ms of tokens carry over. */
        double ms = r->backlog[d] ? 250e6 : 10e6;
        double cap = bytes_per_ns * ms > EMU_CHUNK ? bytes_per_ns * ms : EMU_CHUNK;
        r->tokens[d] = r->tokens[d] + add > cap ? cap : r->tokens[d] + add;
    }
    r->refill_ns = now;
}

/* The side direction d writes to is gone (reset): what is on its way there has nowhere to go, and nothing more is
 * read for it. */
static void dir_drop(emu_dir *q)
{
    q->count = 0;
    q->queued = 0;
    q->eof = 1;
}

/* Read what the token bucket and the queue allow from c->fd[d] into direction d. */
static void dir_read(xdc_wan_relay *r, emu_conn *c, int d, uint64_t now)
{
    emu_dir *q = &c->dir[d];
    double *tokens = &r->tokens[d];
    while (!q->eof && q->count < q->n_slots) {
        size_t want = EMU_CHUNK;
        if (r->m.rate_mbps > 0) {
            if (*tokens < 1) {
                r->backlog[d] = 1;
                return;
            }
            if (*tokens < want) want = (size_t)*tokens;
        }
        emu_chunk *ch = &q->ring[(q->head + q->count) % q->n_slots];
        ssize_t n = recv(c->fd[d], ch->data, want, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            r->backlog[d] = 0; /* this sender is drained: the link is not saturated by it */
            return;
        }
        if (n <= 0) {
            q->eof = 1;
            q->reset = n < 0;
            return;
        }
        if (r->m.rate_mbps > 0) *tokens -= (double)n;
        uint64_t rel = now + one_way_ns(r);
        if (r->m.loss_pct > 0) {
            for (ssize_t seg = 0; seg < n; seg += EMU_SEGMENT)
                if (xdc_rng_uniform(&r->rng) * 100.0 < r->m.loss_pct) rel += (uint64_t)(r->m.rtt_ms * 1e6);
        }
        if (rel < q->last_release_ns) rel = q->last_release_ns; /* jitter never reorders a byte stream */
        q->last_release_ns = rel;
        ch->release_ns = rel;
        ch->len = (uint32_t)n;
        ch->off = 0;
        q->count++;
        q->queued += (uint64_t)n;
        r->bytes += (uint64_t)n;
    }
}

/* Write released chunks of direction d to the other side. -1: connection over (a side reset and the bytes it sent
 * before are delivered: conn_free passes the reset on). */
static int dir_write(emu_conn *c, int d, uint64_t now)
{
    emu_dir *q = &c->dir[d];
    int out = c->fd[1 - d];
    if (c->dir[1 - d].reset) dir_drop(q);
    while (q->count) {
        emu_chunk *ch = &q->ring[q->head];
        if (ch->release_ns > now) break;
        ssize_t n = send(out, ch->data + ch->off, ch->len - ch->off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n < 0) { /* that side reset: what it sent is still delivered to this one */
            c->dir[1 - d].eof = c->dir[1 - d].reset = 1;
            dir_drop(q);
            return 0;
        }
        ch->off += (uint32_t)n;
        q->queued -= (uint64_t)n;
        if (ch->off < ch->len) return 0;
        q->head = (q->head + 1) % q->n_slots;
        q->count--;
    }
    if (q->eof && !q->count && q->reset) return -1;
    if (q->eof && !q->count && !q->shut) {
        shutdown(out, SHUT_WR);
        q->shut = 1;
    }
    return 0;
}

/* Some direction of some connection has a transfer on its way: EMU_IN_FLIGHT_BYTES or more in the delay line, or
 * a sender held back by the link's rate (a slow link with a short delay never holds a chunk's worth; an idle link's
 * bucket holds at least one chunk, so no handshake flight waits on it). */
static int carrying(const xdc_wan_relay *r)
{
    if (r->n_conns && (r->backlog[0] || r->backlog[1])) return 1;
    for (int i = 0; i < r->n_conns; i++)
        for (int d = 0; d < 2; d++)
            if (r->conns[i]->dir[d].queued >= EMU_IN_FLIGHT_BYTES) return 1;
    return 0;
}

/* The next outage is due but waits for a transfer to cut (its start passed, the link carries none yet). */
static int outage_waits(const xdc_wan_relay *r, uint64_t now)
{
    return r->n_outages && !r->cut && r->outages[0].in_flight && now >= r->outages[0].start_ns && !carrying(r);
}

static void *relay_main(void *arg)
{
    xdc_wan_relay *r = arg;
    struct pollfd pfd[1 + EMU_MAX_ROUTES + 2 * EMU_MAX_CONNS];
    pthread_mutex_lock(&r->mu);
    r->refill_ns = xdc_now_ns();
    while (!r->stop) {
        uint64_t now = xdc_now_ns();
        while (r->n_outages && now >= r->outages[0].start_ns && !outage_waits(r, now)) {
            if (r->outages[0].in_flight && !r->cut) { /* a transfer is on its way: the outage starts now */
                r->outages[0].end_ns = now + (r->outages[0].end_ns - r->outages[0].start_ns);
                r->outages[0].start_ns = now;
                r->outages[0].in_flight = 0;
            }
            r->cut = 1;
            drop_all(r);
            if (now < r->outages[0].end_ns) break;
            r->cut = 0; /* over: the next one may have begun already (overlap), then it cuts again */
            memmove(&r->outages[0], &r->outages[1], (size_t)--r->n_outages * sizeof r->outages[0]);
        }
        int n = 0, starved = 0; /* starved: a direction with room and bytes to take waits on its bucket */
        uint64_t timeout = 50 * XDC_NS_PER_MS; /* ns: ppoll keeps release times exact to the scheduler */
        pfd[n++] = (struct pollfd){.fd = r->wake_fd, .events = POLLIN};
        int n_routes = r->n_routes; /* routes added during the poll are picked up next turn */
        for (int i = 0; i < n_routes; i++) pfd[n++] = (struct pollfd){.fd = r->routes[i].lfd, .events = POLLIN};
        for (int i = 0; i < r->n_conns; i++) {
            emu_conn *c = r->conns[i];
            for (int s = 0; s < 2; s++) {
                short ev = 0;
                emu_dir *in = &c->dir[s], *outq = &c->dir[1 - s];
                double tok = r->tokens[s];
                /* No POLLIN while the bucket is empty: the 1 ms tick refills it, poll would only spin. */
                if ((c->connected || s == 0) && !in->eof && in->count < in->n_slots) {
                    if (r->m.rate_mbps <= 0 || tok >= 1) ev |= POLLIN;
                    else starved = 1;
                }
                if (s == 1 && !c->connected) ev |= POLLOUT;
                if (outq->count) {
                    uint64_t rel = outq->ring[outq->head].release_ns;
                    if (rel <= now) ev |= POLLOUT;
                    else if (rel - now < timeout) {
                        timeout = rel - now;
                    }
                }
                /* a side that reset is not polled: its socket would report the error on every turn */
                pfd[n++] = (struct pollfd){.fd = in->reset ? -1 : c->fd[s], .events = ev};
            }
        }
        /* An empty bucket refills continuously: come back at 1 ms granularity while a direction waits on one. A
         * link whose buckets are not empty waits in ppoll for its bytes: idle, it costs no wakeups (the tick on
         * every rate-limited link was ~1,000 wakeups and ~10,000 failed reads a second per relay thread, all
         * run long: bench-e2e's launch spent ~4 % of a core on it). */
        if (starved && timeout > XDC_NS_PER_MS) timeout = XDC_NS_PER_MS;
        if (r->n_outages && !outage_waits(r, now)) { /* a waiting one is woken by the bytes it waits for */
            uint64_t t = r->cut ? r->outages[0].end_ns : r->outages[0].start_ns;
            if (t - now < timeout) timeout = t > now ? t - now : 0;
        }
        pthread_mutex_unlock(&r->mu);
        struct timespec ts = {.tv_sec = (time_t)(timeout / 1000000000u), .tv_nsec = (long)(timeout % 1000000000u)};
        ppoll(pfd, (nfds_t)n, &ts, NULL);
        pthread_mutex_lock(&r->mu);
        r->wakeups++;
        uint64_t drain;
        if ((pfd[0].revents & POLLIN) && read(r->wake_fd, &drain, sizeof drain) < 0) drain = 0;
        if (r->stop) break;
        if (r->cut) drop_all(r);
        for (int i = 0; i < n_routes; i++)
            if (pfd[1 + i].revents & POLLIN) accept_conns(r, &r->routes[i]);
        now = xdc_now_ns();
        refill(r, now);
        /* Start at a rotating connection so no stream gets the freshly refilled tokens every time. */
        int first = r->n_conns ? (int)(r->rot++ % (unsigned)r->n_conns) : 0;
        for (int k = 0; k < r->n_conns; k++) {
            int i = (first + k) % r->n_conns;
            emu_conn *c = r->conns[i];
            int bad = 0;
            if (!c->connected) {
                int err = 0;
                socklen_t len = sizeof err;
                struct pollfd t = {.fd = c->fd[1], .events = POLLOUT};
                if (poll(&t, 1, 0) == 1) {
                    getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len);
                    if (err) bad = 1;
                    else c->connected = 1;
                }
            }
            for (int d = 0; d < 2 && !bad && c->connected; d++) {
                dir_read(r, c, d, now);
                bad = dir_write(c, d, now) < 0;
            }
            if (!bad && c->dir[0].shut && c->dir[1].shut) bad = 1;
            if (bad) {
                conn_free(c);
                r->conns[i] = r->conns[--r->n_conns];
                k--;
            }
        }
    }
    drop_all(r);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int parse_ipv4(const char *host, struct in_addr *out)
{
    if (!host || !host[0] || strcmp(host, "localhost") == 0) return inet_pton(AF_INET, "127.0.0.1", out) == 1;
    return inet_pton(AF_INET, host, out) == 1;
}

/* Listen on listen_host:listen_port (0 = any) for connections to forward to target: the next route. */
static xdc_err_t route_open(xdc_wan_relay *r, const char *listen_host, int listen_port, const char *target_host,
                            int target_port, xdc_diag *diag)
{
    emu_route *rt = &r->routes[r->n_routes];
    rt->target.sin_family = AF_INET;
    rt->target.sin_port = htons((uint16_t)target_port);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)listen_port)};
    if (!parse_ipv4(target_host, &rt->target.sin_addr) || !parse_ipv4(listen_host, &a.sin_addr)) {
        xdc_diag_set(diag, "relay: '%s' or '%s' is not an IPv4 address", listen_host ? listen_host : "",
                     target_host ? target_host : "");
        return XDC_ERR_INVALID;
    }
    int one = 1;
    rt->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (rt->lfd >= 0) setsockopt(rt->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t alen = sizeof a;
    if (rt->lfd < 0 || bind(rt->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(rt->lfd, 128) != 0 ||
        getsockname(rt->lfd, (struct sockaddr *)&a, &alen) != 0) {
        xdc_diag_set(diag, "relay: listen on %s:%d: %m", listen_host ? listen_host : "127.0.0.1", listen_port);
        if (rt->lfd >= 0) close(rt->lfd);
        return XDC_ERR_UNAVAILABLE;
    }
    rt->port = ntohs(a.sin_port);
    r->n_routes++;
    return XDC_OK;
}

xdc_err_t xdc_wan_relay_create(const char *listen_host, int listen_port, const char *target_host, int target_port,
                               const xdc_wan_link_model *m, xdc_wan_relay **out, xdc_diag *diag)
{
    if (!m || !out || listen_port < 0 || listen_port > 65535 || target_port <= 0 || target_port > 65535 ||
        m->rate_mbps < 0 || m->rtt_ms < 0 || m->jitter_ms < 0 || m->loss_pct < 0 || m->loss_pct >= 100) {
        xdc_diag_set(diag, "relay: ports or link model out of range (rate, rtt, jitter >= 0; loss in [0, 100))");
        return XDC_ERR_INVALID;
    }
    xdc_wan_relay *r = xdc_calloc(1, sizeof *r);
    if (!r) return XDC_ERR_NOMEM;
    r->m = *m;
    r->wake_fd = -1;
    xdc_rng_seed(&r->rng, m->seed);
    xdc_err_t rc = route_open(r, listen_host, listen_port, target_host, target_port, diag);
    if (rc != XDC_OK) {
        xdc_free(r);
        return rc;
    }
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&r->mu, NULL);
    if (r->wake_fd < 0 || pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        xdc_diag_set(diag, "relay: cannot start its thread");
        close(r->routes[0].lfd);
        if (r->wake_fd >= 0) close(r->wake_fd);
        pthread_mutex_destroy(&r->mu);
        xdc_free(r);
        return XDC_ERR_NOMEM;
    }
    XDC_DEBUG(XDC_SUB_WAN, "relay :%d -> %s:%d (rate %.1f Mbit/s, rtt %.1f ms, jitter %.1f ms, loss %.3f%%)",
              r->routes[0].port, target_host, target_port, m->rate_mbps, m->rtt_ms, m->jitter_ms, m->loss_pct);
    *out = r;
    return XDC_OK;
}

static void relay_poke(xdc_wan_relay *r);

xdc_err_t xdc_wan_relay_add_route(xdc_wan_relay *r, const char *listen_host, int listen_port, const char *target_host,
                                  int target_port, int *bound_port, xdc_diag *diag)
{
    if (listen_port < 0 || listen_port > 65535 || target_port <= 0 || target_port > 65535) {
        xdc_diag_set(diag, "relay route: ports out of range");
        return XDC_ERR_INVALID;
    }
    pthread_mutex_lock(&r->mu);
    xdc_err_t rc = r->n_routes == EMU_MAX_ROUTES
                       ? XDC_ERR_RANGE
                       : route_open(r, listen_host, listen_port, target_host, target_port, diag);
    if (rc == XDC_ERR_RANGE) xdc_diag_set(diag, "relay: more than %d routes on one link", EMU_MAX_ROUTES);
    if (rc == XDC_OK && bound_port) *bound_port = r->routes[r->n_routes - 1].port;
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
    return rc;
}

int xdc_wan_relay_port(const xdc_wan_relay *r) { return r ? r->routes[0].port : -1; }
static void relay_poke(xdc_wan_relay *r)
{
    uint64_t one = 1;
    ssize_t n = write(r->wake_fd, &one, sizeof one);
    (void)n;
}

void xdc_wan_relay_cut(xdc_wan_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->cut = 1;
    drop_all(r);
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
}

void xdc_wan_relay_restore(xdc_wan_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->cut = 0;
    r->n_outages = 0;
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
}

void xdc_wan_relay_set_rate(xdc_wan_relay *r, double rate_mbps, double *was_mbps)
{
    pthread_mutex_lock(&r->mu);
    if (was_mbps) *was_mbps = r->m.rate_mbps;
    refill(r, xdc_now_ns()); /* the tokens earned so far at the old rate */
    r->m.rate_mbps = rate_mbps > 0 ? rate_mbps : 0;
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
}

xdc_err_t xdc_wan_relay_schedule_outage(xdc_wan_relay *r, const xdc_wan_outage *o)
{
    int64_t start_ms = o->start_ms, duration_ms = o->duration_ms;
    uint64_t start = xdc_now_ns() + (uint64_t)(start_ms > 0 ? start_ms : 0) * XDC_NS_PER_MS;
    uint64_t end = start + (uint64_t)(duration_ms > 0 ? duration_ms : 0) * XDC_NS_PER_MS;
    pthread_mutex_lock(&r->mu);
    int full = r->n_outages == XDC_WAN_MAX_OUTAGES;
    if (!full) {
        int i = r->n_outages++;
        for (; i > 0 && r->outages[i - 1].start_ns > start; i--) r->outages[i] = r->outages[i - 1];
        r->outages[i].start_ns = start;
        r->outages[i].end_ns = end;
        r->outages[i].in_flight = o->in_flight;
    }
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
    return full ? XDC_ERR_RANGE : XDC_OK;
}

xdc_err_t xdc_wan_outages_parse(const char *text, xdc_wan_outage *sched, int *n, xdc_diag *diag)
{
    int k = *n;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        char part[64], *at;
        if (len >= sizeof part) len = sizeof part - 1;
        snprintf(part, sizeof part, "%.*s", (int)len, p);
        at = strchr(part, '@');
        if (at) *at = '\0';
        char *how = at ? strchr(at + 1, ':') : NULL;
        if (how) *how++ = '\0';
        if (k == XDC_WAN_MAX_OUTAGES) {
            xdc_diag_set(diag, "more than %d outages in the schedule", XDC_WAN_MAX_OUTAGES);
            return XDC_ERR_RANGE;
        }
        if (!at || xdc_parse_duration_ms(part, &sched[k].duration_ms) != 0 ||
            xdc_parse_duration_ms(at + 1, &sched[k].start_ms) != 0 || (how && strcmp(how, "in-flight") != 0)) {
            xdc_diag_set(diag, "'%.*s' is not DURATION@START[:in-flight] (e.g. 5s@10s)", (int)strcspn(p, ","), p);
            return XDC_ERR_INVALID;
        }
        sched[k].in_flight = how != NULL;
        k++;
        p += strcspn(p, ",");
        if (!*p++) break;
    }
    *n = k;
    return XDC_OK;
}

void xdc_wan_relay_counters(xdc_wan_relay *r, uint64_t *conns, uint64_t *bytes)
{
    pthread_mutex_lock(&r->mu);
    if (conns) *conns = r->accepted;
    if (bytes) *bytes = r->bytes;
    pthread_mutex_unlock(&r->mu);
}

uint64_t xdc_wan_relay_wakeups(xdc_wan_relay *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->wakeups;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void xdc_wan_relay_destroy(xdc_wan_relay *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
    relay_poke(r);
    pthread_join(r->thread, NULL);
    for (int i = 0; i < r->n_routes; i++) close(r->routes[i].lfd);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    xdc_free(r);
}
