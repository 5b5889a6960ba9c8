/* orch_doctor.c — the checks of `xdc doctor` (orch_doctor.h): the probe server every region runs, the
 * probes a node sends over the WAN transport to measure its links, the checks of the node itself, and
 * the one-machine mode through the emulator's relays. The report's output is orch_doctor_report.c. */
#include "orchestrator/doctor/orch_doctor.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_parse.h"
#include "common/xdc_time.h"
#include "orchestrator/launch/orch_launch.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "wan/emu/xdc_wan_emu.h"
#include "wan/xdc_wan.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DOCTOR_SESSIONS     16
#define DOCTOR_PROBE_MAX    (64u << 20) /* bytes: the largest bandwidth message a server accepts */
#define DOCTOR_IDLE_MS      30000       /* a session with no request this long ends */
#define DOCTOR_CLOCK_MAX_MS 100.0       /* clock offset beyond this (after the RTT's uncertainty) fails */
#define DOCTOR_OFF_FACTOR   2.0         /* a figure more than this many times off the topology's fails */
#define DOCTOR_MIN_BULK     (64u << 10) /* bytes: a bandwidth transfer is never smaller */
#define DOCTOR_BULK_TRIES   3           /* bandwidth transfers per link */

/* One probe message (LATENCY class), both ways. Ping 'P' {a = t1} -> 'p' {t1, t2, t3} (wall clock, ns);
 * bulk 'B' {a = bytes} -> one BULK message of that many bytes -> 'b' {a = bytes received}.
 * Host byte order: both ends are this program. */
typedef struct doctor_msg {
    uint32_t op, zero;
    uint64_t a, b, c;
} doctor_msg;

/* ---- server -------------------------------------------------------------------------------------- */

typedef struct doctor_session {
    orch_doctor_server *srv;
    xdc_wan_peer *peer; /* NULL once the session gave it up (under srv->mu) */
    pthread_t th;
    int used, done;
} doctor_session;

struct orch_doctor_server {
    xdc_wan_engine *eng;
    xdc_wan_listener *lis;
    pthread_t acceptor;
    pthread_mutex_t mu;
    int stop, served;
    doctor_session slot[DOCTOR_SESSIONS];
};

/* Wait for a request while the server runs: XDC_ERR_AGAIN past `timeout_ms` (the request cancelled). */
static xdc_err_t session_wait(orch_doctor_server *s, xdc_wan_request *r, int64_t timeout_ms, size_t *got)
{
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    xdc_diag d = {{0}};
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(r, 200, got, NULL, &d);
        if (rc != XDC_ERR_AGAIN) return rc;
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop || xdc_deadline_passed(deadline)) {
            xdc_wan_request_cancel(r);
            return XDC_ERR_AGAIN;
        }
    }
}

static xdc_err_t session_send(doctor_session *ss, const doctor_msg *m)
{
    xdc_wan_request *r;
    XDC_CHECK(xdc_wan_isend(ss->peer, XDC_WAN_LATENCY, m, sizeof *m, 0, sizeof *m, &r));
    return session_wait(ss->srv, r, DOCTOR_IDLE_MS, NULL);
}

/* A bulk request: one BULK message of m->a bytes into a buffer kept for the session (its content is
 * never read), then the count back. */
static xdc_err_t session_bulk(doctor_session *ss, const doctor_msg *m, uint8_t **buf, size_t *cap)
{
    if (m->a == 0 || m->a > DOCTOR_PROBE_MAX) return XDC_ERR_PROTO;
    if (m->a > *cap) {
        uint8_t *nb = xdc_realloc(*buf, (size_t)m->a);
        if (!nb) return XDC_ERR_NOMEM;
        *buf = nb;
        *cap = (size_t)m->a;
    }
    xdc_wan_request *r;
    size_t got = 0;
    XDC_CHECK(xdc_wan_irecv(ss->peer, XDC_WAN_BULK, *buf, (size_t)m->a, &r));
    XDC_CHECK(session_wait(ss->srv, r, DOCTOR_IDLE_MS, &got));
    doctor_msg reply = {.op = 'b', .a = (uint64_t)got};
    return session_send(ss, &reply);
}

static void *session_main(void *arg)
{
    doctor_session *ss = arg;
    uint8_t *buf = NULL;
    size_t cap = 0;
    xdc_err_t rc = XDC_OK;
    while (rc == XDC_OK) {
        doctor_msg m;
        size_t got = 0;
        xdc_wan_request *r;
        rc = xdc_wan_irecv(ss->peer, XDC_WAN_LATENCY, &m, sizeof m, &r);
        if (rc == XDC_OK) rc = session_wait(ss->srv, r, DOCTOR_IDLE_MS, &got);
        if (rc != XDC_OK) break;
        uint64_t t2 = xdc_wall_ns();
        if (got != sizeof m) rc = XDC_ERR_PROTO;
        else if (m.op == 'P') {
            doctor_msg reply = {.op = 'p', .a = m.a, .b = t2, .c = xdc_wall_ns()};
            rc = session_send(ss, &reply);
        } else if (m.op == 'B') rc = session_bulk(ss, &m, &buf, &cap);
        else rc = XDC_ERR_PROTO;
    }
    if (rc == XDC_ERR_PROTO) {
        const xdc_wan_identity *id = xdc_wan_peer_identity(ss->peer);
        XDC_WARN(XDC_SUB_ORCH, "doctor: %s/%d sent a request that is not a probe; session closed", id->region,
                 id->rank);
    }
    xdc_free(buf);
    pthread_mutex_lock(&ss->srv->mu);
    xdc_wan_peer *p = ss->peer;
    ss->peer = NULL;
    ss->done = 1;
    ss->srv->served++;
    pthread_mutex_unlock(&ss->srv->mu);
    xdc_wan_peer_destroy(p);
    return NULL;
}

/* Join sessions that ended; under no lock (the acceptor and destroy call it). */
static void reap_sessions(orch_doctor_server *s, int all)
{
    for (int i = 0; i < DOCTOR_SESSIONS; i++) {
        doctor_session *ss = &s->slot[i];
        pthread_mutex_lock(&s->mu);
        int join = ss->used && (ss->done || all);
        pthread_mutex_unlock(&s->mu);
        if (!join) continue;
        pthread_join(ss->th, NULL);
        ss->used = ss->done = 0;
    }
}

static void *acceptor_main(void *arg)
{
    orch_doctor_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) return NULL;
        reap_sessions(s, 0);
        xdc_wan_peer *p = NULL;
        xdc_diag d = {{0}};
        if (xdc_wan_accept(s->lis, 200, &p, &d) != XDC_OK) continue;
        doctor_session *ss = NULL;
        for (int i = 0; i < DOCTOR_SESSIONS && !ss; i++)
            if (!s->slot[i].used) ss = &s->slot[i];
        if (ss) {
            *ss = (doctor_session){.srv = s, .peer = p, .used = 1};
            if (pthread_create(&ss->th, NULL, session_main, ss) == 0) continue;
            ss->used = 0;
        }
        const xdc_wan_identity *id = xdc_wan_peer_identity(p);
        XDC_WARN(XDC_SUB_ORCH, "doctor: turned %s/%d away: %d probes in progress", id->region, id->rank,
                 DOCTOR_SESSIONS);
        xdc_wan_peer_destroy(p);
    }
}

/* An engine holding REGION-0's certificate from `dir`. */
static xdc_err_t region_engine(const char *dir, const char *region, int streams, int64_t deadline_ms,
                               xdc_wan_engine **out, xdc_diag *diag)
{
    char cert[600], key[600], ca[600];
    snprintf(cert, sizeof cert, "%s/%s-0.pem", dir, region);
    snprintf(key, sizeof key, "%s/%s-0.key", dir, region);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    wc.cert_path = cert;
    wc.key_path = key;
    wc.ca_path = ca;
    wc.streams = streams;
    wc.frame_bytes = 256u << 10; /* several frames per probe message: acknowledgements come in steps */
    wc.deadline_ms = deadline_ms;
    return xdc_wan_engine_create(&wc, out, diag);
}

xdc_err_t orch_doctor_server_create(const char *certs_dir, const char *region, const char *host, int port,
                                    orch_doctor_server **out, xdc_diag *diag)
{
    if (!certs_dir || !region || !out) return XDC_ERR_INVALID;
    orch_doctor_server *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    xdc_err_t rc = region_engine(certs_dir, region, 1, DOCTOR_IDLE_MS, &s->eng, diag);
    if (rc == XDC_OK) rc = xdc_wan_listen(s->eng, host, port, &s->lis, diag);
    if (rc == XDC_OK && pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) rc = XDC_ERR_NOMEM;
    if (rc != XDC_OK) {
        xdc_wan_engine_destroy(s->eng);
        pthread_mutex_destroy(&s->mu);
        xdc_free(s);
        return rc;
    }
    *out = s;
    return XDC_OK;
}

int orch_doctor_server_port(const orch_doctor_server *s) { return xdc_wan_listener_port(s->lis); }

int orch_doctor_server_sessions(orch_doctor_server *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->served;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void orch_doctor_server_destroy(orch_doctor_server *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1; /* sessions see it within their 200 ms wait slice */
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->acceptor, NULL);
    reap_sessions(s, 1);
    xdc_wan_engine_destroy(s->eng); /* closes the listener */
    pthread_mutex_destroy(&s->mu);
    xdc_free(s);
}

/* ---- report rows ----------------------------------------------------------------------------------- */

xdc_err_t orch_doctor_report_create(const xdc_topology *t, orch_doctor_report **out)
{
    orch_doctor_report *r = xdc_calloc(1, sizeof *r);
    if (!r) return XDC_ERR_NOMEM;
    r->n_links = t->n_links;
    r->links = xdc_calloc((size_t)(t->n_links ? t->n_links : 1), sizeof *r->links);
    if (!r->links) {
        xdc_free(r);
        return XDC_ERR_NOMEM;
    }
    *out = r;
    return XDC_OK;
}

void orch_doctor_report_destroy(orch_doctor_report *r)
{
    if (!r) return;
    xdc_free(r->rows);
    xdc_free(r->links);
    xdc_free(r);
}

int orch_doctor_report_passed(const orch_doctor_report *r)
{
    return orch_doctor_report_find(r, NULL, ORCH_DOCTOR_FAIL) == NULL;
}

const orch_doctor_row *orch_doctor_report_find(const orch_doctor_report *r, const char *check,
                                               orch_doctor_verdict verdict)
{
    for (int i = 0; i < r->n_rows; i++)
        if (r->rows[i].verdict == verdict && (!check || strcmp(r->rows[i].check, check) == 0)) return &r->rows[i];
    return NULL;
}

/* A new row (NULL when out of memory); detail and fix are filled by the caller. */
static orch_doctor_row *add_row(orch_doctor_report *r, const char *check, const char *subject, orch_doctor_verdict v,
                                double measured, double expected, const char *unit)
{
    if (r->n_rows == r->cap_rows) {
        int cap = r->cap_rows ? 2 * r->cap_rows : 32;
        orch_doctor_row *nr = xdc_realloc(r->rows, (size_t)cap * sizeof *nr);
        if (!nr) return NULL;
        r->rows = nr;
        r->cap_rows = cap;
    }
    orch_doctor_row *row = &r->rows[r->n_rows++];
    memset(row, 0, sizeof *row);
    snprintf(row->check, sizeof row->check, "%s", check);
    snprintf(row->subject, sizeof row->subject, "%s", subject);
    snprintf(row->unit, sizeof row->unit, "%s", unit);
    row->verdict = v;
    row->measured = measured;
    row->expected = expected;
    return row;
}

/* More than DOCTOR_OFF_FACTOR times off, with `slack` (same unit) for figures near zero. */
static int is_off(double measured, double expected, double slack)
{
    return measured > expected * DOCTOR_OFF_FACTOR + slack || measured < expected / DOCTOR_OFF_FACTOR - slack;
}

/* ---- link probes --------------------------------------------------------------------------------- */

typedef struct doctor_run {
    const orch_doctor_opts *o;
    orch_doctor_report *rep;
    xdc_wan_engine *eng;
    uint8_t *bulk; /* (the largest probe_bytes of our links) bytes every bandwidth probe sends; content irrelevant */
} doctor_run;

/* TCP connect to host:port within timeout_ms with path MTU discovery on; the path MTU and the connect
 * time. XDC_ERR_UNAVAILABLE with the reason in diag. */
static xdc_err_t tcp_probe(const char *host, int port, int64_t timeout_ms, int *mtu, double *ms, xdc_diag *diag)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int gai = getaddrinfo(host, service, &hints, &ai);
    if (gai != 0) {
        xdc_diag_set(diag, "cannot resolve %s: %s", host, gai_strerror(gai));
        return XDC_ERR_UNAVAILABLE;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
    int pmtu = IP_PMTUDISC_DO;
    uint64_t t0 = xdc_now_ns();
    if (fd < 0) err = errno;
    else {
        setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) err = errno;
    }
    freeaddrinfo(ai);
    if (!err) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        socklen_t len = sizeof err;
        int n = poll(&pf, 1, timeout_ms > INT32_MAX ? INT32_MAX : (int)timeout_ms);
        if (n == 0) err = ETIMEDOUT;
        else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    *ms = (double)(xdc_now_ns() - t0) / 1e6;
    socklen_t len = sizeof *mtu;
    if (!err && getsockopt(fd, IPPROTO_IP, IP_MTU, mtu, &len) != 0) err = errno;
    if (fd >= 0) close(fd);
    if (err) {
        xdc_diag_set(diag, "TCP connect to %s:%d: %s%s", host, port, strerror(err),
                     err == ETIMEDOUT ? " (nothing answered: a firewall dropping the port, or no route)" : "");
        return XDC_ERR_UNAVAILABLE;
    }
    return XDC_OK;
}

/* Send one probe and wait for its answer (within timeout_ms). */
static xdc_err_t probe_call(xdc_wan_peer *p, const doctor_msg *req, doctor_msg *reply, int64_t timeout_ms,
                            xdc_diag *diag)
{
    xdc_wan_request *rr, *rs;
    size_t got = 0;
    XDC_CHECK(xdc_wan_irecv(p, XDC_WAN_LATENCY, reply, sizeof *reply, &rr));
    xdc_err_t rc = xdc_wan_isend(p, XDC_WAN_LATENCY, req, sizeof *req, 0, sizeof *req, &rs);
    if (rc != XDC_OK) {
        xdc_wan_request_cancel(rr);
        return rc;
    }
    rc = xdc_wan_wait(rs, timeout_ms, NULL, NULL, diag);
    if (rc == XDC_ERR_AGAIN) xdc_wan_request_cancel(rs);
    if (rc == XDC_OK) rc = xdc_wan_wait(rr, timeout_ms, &got, NULL, diag);
    else xdc_wan_request_cancel(rr);
    if (rc == XDC_ERR_AGAIN) xdc_wan_request_cancel(rr);
    if (rc == XDC_OK && got != sizeof *reply) {
        xdc_diag_set(diag, "a probe answer of %zu bytes (expected %zu)", got, sizeof *reply);
        rc = XDC_ERR_PROTO;
    }
    return rc;
}

/* Ping-pongs: the sample with the smallest round trip gives RTT and clock offset. */
static xdc_err_t probe_pings(const doctor_run *R, xdc_wan_peer *p, double *rtt_ms, double *offset_ms, xdc_diag *diag)
{
    double best = INFINITY;
    for (int i = 0; i < R->o->pings; i++) {
        doctor_msg req = {.op = 'P', .a = xdc_wall_ns()}, rep;
        XDC_CHECK(probe_call(p, &req, &rep, R->o->handshake_ms, diag));
        uint64_t t4 = xdc_wall_ns();
        if (rep.op != 'p' || rep.a != req.a) {
            xdc_diag_set(diag, "the answer to a ping is not its echo");
            return XDC_ERR_PROTO;
        }
        double delay = ((double)(int64_t)(t4 - req.a) - (double)(int64_t)(rep.c - rep.b)) / 1e6;
        if (delay < best) {
            best = delay;
            *offset_ms = ((double)(int64_t)(rep.b - req.a) + (double)(int64_t)(rep.c - t4)) / 2e6;
        }
    }
    *rtt_ms = best < 0 ? 0 : best;
    return XDC_OK;
}

/* Seconds some send to the peer was queued, from the engine's goodput (payload bits over exactly that
 * time): the engine timestamps each send from its isend to its acknowledgement, so a slow thread on our
 * side only ever lengthens it (a rate read from it errs low, never high). */
static double busy_seconds(const xdc_wan_stats *st)
{
    return st->goodput_gbps > 0 ? (double)st->tx_payload_bytes * 8 / (st->goodput_gbps * 1e9) : 0;
}

/* The bulk probe: *mbps measured over one message of `bytes`, or *timed_out when it did not finish
 * within `limit_s`. The rate is the engine's own measure of this transfer (its goodput's bytes and busy
 * seconds, before and after), so it counts slow start and one RTT: a figure at most a little low. A
 * failure or a timeout closes the peer. */
static xdc_err_t probe_bulk(const doctor_run *R, xdc_wan_peer *p, uint64_t bytes, double limit_s, double *mbps,
                            int *timed_out, xdc_diag *diag)
{
    uint64_t deadline = xdc_now_ns() + (uint64_t)(limit_s * 1e9);
    doctor_msg req = {.op = 'B', .a = bytes}, rep = {0};
    xdc_wan_request *q[3] = {NULL, NULL, NULL}; /* announcement, message, the server's count */
    xdc_wan_stats s0, s1;
    *timed_out = 0;
    xdc_wan_peer_stats(p, &s0);
    xdc_err_t rc = xdc_wan_irecv(p, XDC_WAN_LATENCY, &rep, sizeof rep, &q[2]);
    if (rc == XDC_OK) rc = xdc_wan_isend(p, XDC_WAN_LATENCY, &req, sizeof req, 0, sizeof req, &q[0]);
    if (rc == XDC_OK) rc = xdc_wan_isend(p, XDC_WAN_BULK, R->bulk, (size_t)bytes, 0, (size_t)bytes, &q[1]);
    for (int i = 0; i < 3 && rc == XDC_OK; i++) {
        int ms = xdc_deadline_poll_ms(deadline);
        rc = xdc_wan_wait(q[i], ms > 0 ? ms : 0, NULL, NULL, diag);
        if (rc != XDC_ERR_AGAIN) q[i] = NULL; /* released */
    }
    if (rc == XDC_OK && (rep.op != 'b' || rep.a != bytes)) {
        xdc_diag_set(diag, "the server counted %llu of %llu bytes", (unsigned long long)rep.a,
                     (unsigned long long)bytes);
        rc = XDC_ERR_PROTO;
    }
    if (rc == XDC_OK) {
        xdc_wan_peer_stats(p, &s1);
        double s = busy_seconds(&s1) - busy_seconds(&s0);
        *mbps = s > 0 ? (double)(s1.tx_payload_bytes - s0.tx_payload_bytes) * 8 / s / 1e6 : 0;
        return XDC_OK;
    }
    xdc_wan_peer_close(p); /* fails what is still out; cancelling then releases it */
    for (int i = 0; i < 3; i++) xdc_wan_request_cancel(q[i]);
    if (rc == XDC_ERR_AGAIN) {
        *timed_out = 1;
        rc = XDC_OK;
    }
    return rc;
}

/* Bytes of link l's bandwidth transfer: what takes probe_seconds at the topology's rate, within
 * [DOCTOR_MIN_BULK, probe_bytes_max]. */
static uint64_t probe_bytes(const orch_doctor_opts *o, const xdc_link *l)
{
    double sized = l->bandwidth_gbps * 1e9 / 8 * o->probe_seconds;
    uint64_t bytes = sized > (double)o->probe_bytes_max ? o->probe_bytes_max : (uint64_t)sized;
    return bytes < DOCTOR_MIN_BULK ? DOCTOR_MIN_BULK : bytes;
}

/* The endpoint of region b ("HOST:PORT") or NULL when it has none. */
static const char *endpoint_of(const orch_doctor_opts *o, int b)
{
    if (o->endpoints && o->endpoints[b]) return o->endpoints[b];
    return o->topo->regions[b].wan_endpoint[0] ? o->topo->regions[b].wan_endpoint : NULL;
}

#define ROW_OR_NOMEM(row) \
    if (!(row)) return XDC_ERR_NOMEM

/* Every check of link li (from our region): reach, mtu, tls, rtt, clock, bandwidth. */
static xdc_err_t check_link(doctor_run *R, int li)
{
    const orch_doctor_opts *o = R->o;
    const xdc_topology *t = o->topo;
    const xdc_link *l = &t->links[li];
    const char *bname = t->regions[l->to].name;
    orch_doctor_link *m = &R->rep->links[li];
    char link[2 * XDC_NAME_MAX + 4], where[XDC_NAME_MAX + 300], host[256];
    snprintf(link, sizeof link, "%s->%s", t->regions[l->from].name, bname);
    const char *ep = endpoint_of(o, l->to);
    int port = 0;
    orch_doctor_row *row;
    xdc_diag d = {{0}};
    if (!ep || xdc_parse_host_port(ep, host, sizeof host, &port, &d) != XDC_OK) {
        ROW_OR_NOMEM(row = add_row(R->rep, "reach", bname, ORCH_DOCTOR_FAIL, 0, 0, ""));
        snprintf(row->detail, sizeof row->detail, "region %s has no usable wan_endpoint ('%s')", bname, ep ? ep : "");
        snprintf(row->fix, sizeof row->fix,
                 "set wan_endpoint: HOST:PORT for region %s (%s:%d:%d), where its `xdc doctor --serve` listens", bname,
                 t->path, t->regions[l->to].line, t->regions[l->to].col);
        return XDC_OK;
    }
    snprintf(where, sizeof where, "%s at %s", bname, ep);
    double connect_ms = 0;
    int mtu = 0;
    if (tcp_probe(host, port, o->handshake_ms, &mtu, &connect_ms, &d) != XDC_OK) {
        ROW_OR_NOMEM(row = add_row(R->rep, "reach", where, ORCH_DOCTOR_FAIL, 0, 0, ""));
        snprintf(row->detail, sizeof row->detail, "%s", d.msg);
        snprintf(row->fix, sizeof row->fix,
                 "start `xdc doctor --serve` on %s's node; if it runs, open TCP port %d to %s (firewall, security "
                 "group, NAT port forward)",
                 bname, port, t->regions[l->from].name);
        return XDC_OK;
    }
    ROW_OR_NOMEM(row = add_row(R->rep, "reach", where, ORCH_DOCTOR_PASS, connect_ms, 0, "ms"));
    snprintf(row->detail, sizeof row->detail, "TCP connect in %.1f ms", connect_ms);
    m->mtu = mtu;
    int mtu_bad = mtu < l->mtu;
    ROW_OR_NOMEM(
        row = add_row(R->rep, "mtu", link, mtu_bad ? ORCH_DOCTOR_FAIL : ORCH_DOCTOR_PASS, mtu, l->mtu, "bytes"));
    snprintf(row->detail, sizeof row->detail, "path MTU %d bytes (topology: %d)", mtu, l->mtu);
    if (mtu_bad)
        snprintf(row->fix, sizeof row->fix,
                 "the path carries smaller packets than the link's mtu (a tunnel or VPN on the way): lower mtu in "
                 "the topology (%s:%d:%d) or fix the route",
                 t->path, l->line, l->col);

    /* TLS and identity: the server must be region b's rank 0 of our run. */
    xdc_wan_peer *p = NULL;
    uint64_t since = xdc_wall_ns();
    xdc_err_t rc = xdc_wan_connect(R->eng, host, port, bname, 0, &p, &d);
    if (rc == XDC_OK) rc = xdc_wan_peer_wait_ready(p, o->handshake_ms, &d);
    if (rc != XDC_OK) {
        char who[XDC_NAME_MAX + 32];
        snprintf(who, sizeof who, "%s/0 (xdc doctor --serve)", bname);
        if (rc == XDC_ERR_TIMEOUT) orch_wait_expired(&d, "TLS handshake", who, ep, since, o->handshake_ms, "handshake");
        row = add_row(R->rep, "tls", where, ORCH_DOCTOR_FAIL, 0, 0, "");
        if (row) {
            snprintf(row->detail, sizeof row->detail, "%s", d.msg);
            snprintf(row->fix, sizeof row->fix, "%s",
                     rc == XDC_ERR_TIMEOUT ? "the port answers TCP but not the WAN handshake: is `xdc doctor --serve` "
                                             "listening there, and not another program?"
                     : rc == XDC_ERR_AUTH  ? "the node there holds a certificate of another region, rank or run: "
                                             "issue the region's REGION-0 certificate from this run's CA (xdc certs)"
                                           : "both nodes need certificates from the same cluster CA (xdc certs), "
                                             "valid now (check the clocks)");
        }
        xdc_wan_peer_destroy(p);
        return row ? XDC_OK : XDC_ERR_NOMEM;
    }
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    ROW_OR_NOMEM(row = add_row(R->rep, "tls", where, ORCH_DOCTOR_PASS, 0, 0, ""));
    snprintf(row->detail, sizeof row->detail, "TLS 1.3, identity xdc://%s/%s/%d as expected", id->run, id->region,
             id->rank);

    /* RTT and clock. */
    double rtt = 0, offset = 0;
    rc = probe_pings(R, p, &rtt, &offset, &d);
    if (rc != XDC_OK) {
        xdc_wan_peer_destroy(p);
        ROW_OR_NOMEM(row = add_row(R->rep, "rtt", link, ORCH_DOCTOR_FAIL, 0, l->rtt_ms, "ms"));
        snprintf(row->detail, sizeof row->detail, "probe failed: %s", d.msg);
        snprintf(row->fix, sizeof row->fix,
                 "the far end stopped answering after the handshake: rerun, and check "
                 "its `xdc doctor --serve` log");
        return XDC_OK;
    }
    m->measured = 1;
    m->rtt_ms = rtt;
    m->clock_offset_ms = offset;
    int rtt_bad = is_off(rtt, l->rtt_ms, 1.0);
    ROW_OR_NOMEM(
        row = add_row(R->rep, "rtt", link, rtt_bad ? ORCH_DOCTOR_FAIL : ORCH_DOCTOR_PASS, rtt, l->rtt_ms, "ms"));
    snprintf(row->detail, sizeof row->detail, "smallest of %d round trips %.2f ms (topology: %.2f ms)", o->pings, rtt,
             l->rtt_ms);
    if (rtt_bad)
        snprintf(row->fix, sizeof row->fix,
                 "more than %gx off: correct rtt_ms of the link (%s:%d:%d; --write-topology FILE writes the measured "
                 "figures), or find why the route differs (traceroute)",
                 DOCTOR_OFF_FACTOR, t->path, l->line, l->col);
    int clock_bad = fabs(offset) - rtt / 2 > DOCTOR_CLOCK_MAX_MS;
    ROW_OR_NOMEM(
        row = add_row(R->rep, "clock", link, clock_bad ? ORCH_DOCTOR_FAIL : ORCH_DOCTOR_PASS, offset, 0, "ms"));
    snprintf(row->detail, sizeof row->detail, "%s's clock is %+.2f ms from ours (+/- %.2f ms)", bname, offset, rtt / 2);
    if (clock_bad)
        snprintf(row->fix, sizeof row->fix,
                 "synchronise the clocks (chrony or NTP) of %s and %s: logs, traces and certificates compare times "
                 "across nodes",
                 t->regions[l->from].name, bname);

    /* Bandwidth: sized to take probe_seconds at the topology's rate, bounded in bytes and in time. */
    double want = l->bandwidth_gbps * 1000.0, mbps = 0, limit_s = 8 * o->probe_seconds + 2 + 0.02 * l->rtt_ms;
    uint64_t bytes = probe_bytes(o, l);
    int timed_out = 0, tries = 0;
    /* The best of DOCTOR_BULK_TRIES, as the RTT is the smallest of its pings: the measure errs only low (a
     * busy host slows a transfer, never speeds it up). A timeout or failure closes the peer: no retry. */
    do {
        double one = 0;
        rc = probe_bulk(R, p, bytes, limit_s, &one, &timed_out, &d);
        if (one > mbps) mbps = one;
    } while (rc == XDC_OK && !timed_out && ++tries < DOCTOR_BULK_TRIES);
    xdc_wan_peer_destroy(p);
    int bw_bad = rc != XDC_OK || timed_out || is_off(mbps, want, 0);
    ROW_OR_NOMEM(
        row = add_row(R->rep, "bandwidth", link, bw_bad ? ORCH_DOCTOR_FAIL : ORCH_DOCTOR_PASS, mbps, want, "Mbit/s"));
    if (rc != XDC_OK) snprintf(row->detail, sizeof row->detail, "transfer failed: %s", d.msg);
    else if (timed_out)
        snprintf(row->detail, sizeof row->detail,
                 "a %llu-byte transfer did not finish in %.1f s: below %.2f Mbit/s (topology: %.1f Mbit/s)",
                 (unsigned long long)bytes, limit_s, (double)bytes * 8 / limit_s / 1e6, want);
    else {
        snprintf(row->detail, sizeof row->detail,
                 "%.1f Mbit/s, the best of %d transfer(s) of %llu bytes (topology: %.1f Mbit/s)", mbps, tries,
                 (unsigned long long)bytes, want);
        m->bandwidth_gbps = mbps / 1000.0;
    }
    if (bw_bad)
        snprintf(row->fix, sizeof row->fix,
                 "more than %gx off: correct bandwidth_gbps of the link (%s:%d:%d; --write-topology FILE writes the "
                 "measured figures), or find the bottleneck (`xdc wan send` between the nodes, NIC, rate limits)",
                 DOCTOR_OFF_FACTOR, t->path, l->line, l->col);
    return XDC_OK;
}

/* ---- node checks ------------------------------------------------------------------------------- */

static xdc_err_t check_gpus(doctor_run *R, const char *node)
{
    const orch_doctor_opts *o = R->o;
    orch_doctor_row *row;
    if (!o->gpu_probe) {
        ROW_OR_NOMEM(row = add_row(R->rep, "gpus", node, ORCH_DOCTOR_SKIP, 0, 0, ""));
        snprintf(row->detail, sizeof row->detail, "no device probe in this build");
        return XDC_OK;
    }
    orch_device dev = orch_device_of_region(o->device, o->topo, o->region);
    int need = orch_device_gpus_needed(dev, o->topo, o->region);
    xdc_diag d = {{0}};
    const char *source = o->device == ORCH_DEVICE_TOPOLOGY ? "the topology" : "--device";
    xdc_err_t rc = orch_device_check_node(dev, source, o->topo, o->region, node, o->gpu_probe, &d);
    ROW_OR_NOMEM(row = add_row(R->rep, "gpus", node, rc == XDC_OK ? ORCH_DOCTOR_PASS : ORCH_DOCTOR_FAIL,
                               o->gpu_probe->cuda_devices ? o->gpu_probe->cuda_devices() : 0, need, ""));
    if (rc == XDC_OK)
        snprintf(row->detail, sizeof row->detail, "device %s: %d GPU(s) needed per node, present",
                 orch_device_name(dev), need);
    else {
        snprintf(row->detail, sizeof row->detail, "%s", d.msg);
        snprintf(row->fix, sizeof row->fix,
                 "make the GPUs visible (driver, CUDA_VISIBLE_DEVICES), or correct gpus_per_node of region %s "
                 "(%s:%d:%d)",
                 o->topo->regions[o->region].name, o->topo->path, o->topo->regions[o->region].line,
                 o->topo->regions[o->region].col);
    }
    return XDC_OK;
}

static xdc_err_t check_ports(doctor_run *R, const char *node)
{
    const orch_doctor_opts *o = R->o;
    orch_doctor_row *row;
    if (o->n_ports == 0) {
        ROW_OR_NOMEM(row = add_row(R->rep, "ports", node, ORCH_DOCTOR_SKIP, 0, 0, ""));
        snprintf(row->detail, sizeof row->detail,
                 "no fixed port to check (no metrics_port in the run file, no --port; WAN listeners take any free "
                 "port)");
        return XDC_OK;
    }
    for (int i = 0; i < o->n_ports; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, err = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->ports[i])};
        /* SO_REUSEADDR as the run's listeners set it: a connection in TIME_WAIT does not hold the port */
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
            err = errno;
        if (fd >= 0) close(fd);
        char subject[160];
        snprintf(subject, sizeof subject, "%s:%d", node, o->ports[i]);
        ROW_OR_NOMEM(
            row = add_row(R->rep, "ports", subject, err ? ORCH_DOCTOR_FAIL : ORCH_DOCTOR_PASS, o->ports[i], 0, ""));
        snprintf(row->detail, sizeof row->detail, "port %d (%s) %s%s", o->ports[i],
                 o->port_owners ? o->port_owners[i] : "--port", err ? "cannot be bound: " : "is free",
                 err ? strerror(err) : "");
        if (err)
            snprintf(row->fix, sizeof row->fix,
                     "stop what holds it (ss -ltnp 'sport = :%d') or move the run to another port", o->ports[i]);
    }
    return XDC_OK;
}

/* The built-in coordinator: a TLS handshake with its identity (coordinator/0 of our run). */
static xdc_err_t rdzv_check_builtin(doctor_run *R, const char *addr, orch_doctor_row *row)
{
    char host[256];
    int port;
    xdc_diag d = {{0}};
    xdc_wan_peer *p = NULL;
    uint64_t since = xdc_wall_ns();
    int mtu;
    double ms;
    xdc_err_t rc = xdc_parse_host_port(addr, host, sizeof host, &port, &d);
    if (rc == XDC_OK) rc = tcp_probe(host, port, R->o->handshake_ms, &mtu, &ms, &d); /* a refusal fails at once */
    if (rc == XDC_OK) rc = xdc_wan_connect(R->eng, host, port, RDZV_SERVER_REGION, 0, &p, &d);
    if (rc == XDC_OK) rc = xdc_wan_peer_wait_ready(p, R->o->handshake_ms, &d);
    if (rc == XDC_ERR_TIMEOUT)
        orch_wait_expired(&d, "rendezvous", "the coordinator", addr, since, R->o->handshake_ms, "handshake");
    xdc_wan_peer_destroy(p);
    row->verdict = rc == XDC_OK ? ORCH_DOCTOR_PASS : ORCH_DOCTOR_FAIL;
    if (rc == XDC_OK)
        snprintf(row->detail, sizeof row->detail, "built-in coordinator at %s answered as %s/0", addr,
                 RDZV_SERVER_REGION);
    else {
        snprintf(row->detail, sizeof row->detail, "%s", d.msg);
        snprintf(row->fix, sizeof row->fix,
                 "start `xdc coordinator` (or `xdc launch`) there, point XDC_COORDINATOR at it, and open its port "
                 "to this node");
    }
    return XDC_OK;
}

/* etcd: a range read under the run's prefix through the rendezvous backend (rdzv_ping), over the
 * given TLS files, so reachability, TLS and etcd's auth are all checked. */
static xdc_err_t rdzv_check_etcd(doctor_run *R, const char *addr, orch_doctor_row *row)
{
    rdzv_target t;
    xdc_diag d = {{0}};
    xdc_err_t rc = rdzv_target_parse(addr, "doctor", &t, &d);
    if (rc == XDC_OK) {
        rdzv_flags_tls(&R->o->etcd_tls, &t);
        rc = rdzv_ping(&t, R->o->handshake_ms, &d);
    }
    row->verdict = rc == XDC_OK ? ORCH_DOCTOR_PASS : ORCH_DOCTOR_FAIL;
    if (rc == XDC_OK) {
        snprintf(row->detail, sizeof row->detail, "etcd at %s:%d answered a read under %s%s", t.host, t.port, t.prefix,
                 t.cacert ? " over TLS" : "");
    } else {
        snprintf(row->detail, sizeof row->detail, "%s", d.msg);
        snprintf(row->fix, sizeof row->fix,
                 "start etcd there (its client URL must listen on that address), open its port to this node, and "
                 "give --etcd-cacert/--etcd-cert/--etcd-key when it wants TLS");
    }
    return XDC_OK;
}

/* Rendezvous backends by address scheme; the last row (no scheme) is the built-in coordinator. */
static const struct {
    const char *scheme;
    xdc_err_t (*check)(doctor_run *R, const char *addr, orch_doctor_row *row);
} rdzv_checks[] = {{"etcd://", rdzv_check_etcd}, {"", rdzv_check_builtin}};

static xdc_err_t check_rdzv(doctor_run *R)
{
    const char *addr = R->o->rdzv;
    orch_doctor_row *row;
    ROW_OR_NOMEM(row = add_row(R->rep, "rendezvous", addr ? addr : "-", ORCH_DOCTOR_SKIP, 0, 0, ""));
    if (!addr) {
        snprintf(row->detail, sizeof row->detail, "no rendezvous given (--rdzv, or XDC_COORDINATOR)");
        return XDC_OK;
    }
    for (size_t i = 0;; i++)
        if (strncmp(addr, rdzv_checks[i].scheme, strlen(rdzv_checks[i].scheme)) == 0)
            return rdzv_checks[i].check(R, addr, row);
}

xdc_err_t orch_doctor_run(const orch_doctor_opts *o, orch_doctor_report *rep, xdc_diag *diag)
{
    if (!o || !o->topo || !o->certs_dir || !rep || o->region < 0 || o->region >= o->topo->n_regions || o->pings < 1 ||
        o->probe_seconds <= 0 || o->handshake_ms <= 0 || rep->n_links != o->topo->n_links)
        return XDC_ERR_INVALID;
    const xdc_topology *t = o->topo;
    doctor_run R = {.o = o, .rep = rep};
    int streams = 1;
    uint64_t bulk = DOCTOR_MIN_BULK;
    for (int i = 0; i < t->n_links; i++) {
        if (t->links[i].from != o->region) continue;
        if (t->links[i].streams > streams) streams = t->links[i].streams;
        if (probe_bytes(o, &t->links[i]) > bulk) bulk = probe_bytes(o, &t->links[i]);
    }
    int64_t deadline = o->handshake_ms > 10000 ? o->handshake_ms : 10000;
    XDC_CHECK(region_engine(o->certs_dir, t->regions[o->region].name, streams, deadline, &R.eng, diag));
    xdc_err_t rc = XDC_OK;
    R.bulk = xdc_calloc(1, (size_t)bulk);
    if (!R.bulk) rc = XDC_ERR_NOMEM;
    for (int i = 0; i < t->n_links && rc == XDC_OK; i++)
        if (t->links[i].from == o->region) rc = check_link(&R, i);
    if (rc == XDC_OK && o->node_checks) {
        char node[XDC_NAME_MAX + 300], host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(node, sizeof node, "%s/%s", t->regions[o->region].name, host);
        rc = check_gpus(&R, node);
        if (rc == XDC_OK) rc = check_ports(&R, node);
        if (rc == XDC_OK) rc = check_rdzv(&R);
    }
    xdc_wan_engine_destroy(R.eng);
    xdc_free(R.bulk);
    return rc;
}

/* ---- one machine --------------------------------------------------------------------------------- */

/* A loopback port nothing listens on (bound, then released), as a stopped node's endpoint. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

xdc_err_t orch_doctor_emulate(const orch_doctor_opts *o, const xdc_topology *emulated, const char *const *stopped,
                              int n_stopped, orch_doctor_report *rep, xdc_diag *diag)
{
    if (!o || !o->topo || !rep) return XDC_ERR_INVALID;
    const xdc_topology *t = o->topo;
    if (!emulated) emulated = t;
    int n = t->n_regions;
    orch_doctor_server **srv = xdc_calloc((size_t)n, sizeof *srv);
    int *port = xdc_calloc((size_t)n, sizeof *port);
    xdc_wan_relay **relay = xdc_calloc((size_t)(t->n_links ? t->n_links : 1), sizeof *relay);
    char(*ep)[32] = xdc_calloc((size_t)n, sizeof *ep);
    const char **eps = xdc_calloc((size_t)n, sizeof *eps);
    xdc_err_t rc = srv && port && relay && ep && eps ? XDC_OK : XDC_ERR_NOMEM;
    for (int r = 0; r < n && rc == XDC_OK; r++) {
        int down = 0;
        for (int k = 0; k < n_stopped; k++) down |= strcmp(stopped[k], t->regions[r].name) == 0;
        if (down) port[r] = dead_port();
        else if ((rc = orch_doctor_server_create(o->certs_dir, t->regions[r].name, "127.0.0.1", 0, &srv[r], diag)) ==
                 XDC_OK)
            port[r] = orch_doctor_server_port(srv[r]);
    }
    for (int i = 0; i < t->n_links && rc == XDC_OK; i++) {
        const xdc_link *l = &t->links[i];
        if (!srv[l->to]) continue; /* a stopped node: dialled directly, and refuses */
        int ef = xdc_topology_region_index(emulated, t->regions[l->from].name);
        int et = xdc_topology_region_index(emulated, t->regions[l->to].name);
        const xdc_link *el = ef >= 0 && et >= 0 ? xdc_topology_link(emulated, ef, et) : NULL;
        if (!el) {
            xdc_diag_set(diag, "%s has no link %s->%s to emulate", emulated->path, t->regions[l->from].name,
                         t->regions[l->to].name);
            rc = XDC_ERR_CONFIG;
            break;
        }
        xdc_wan_link_model m;
        orch_link_model(el, (uint64_t)i + 1, &m);
        rc = xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", port[l->to], &m, &relay[i], diag);
    }
    for (int a = 0; a < n && rc == XDC_OK; a++) {
        for (int b = 0; b < n; b++) eps[b] = NULL;
        for (int i = 0; i < t->n_links; i++) {
            const xdc_link *l = &t->links[i];
            if (l->from != a) continue;
            snprintf(ep[l->to], sizeof ep[l->to], "127.0.0.1:%d",
                     relay[i] ? xdc_wan_relay_port(relay[i]) : port[l->to]);
            eps[l->to] = ep[l->to];
        }
        orch_doctor_opts oa = *o;
        oa.region = a;
        oa.endpoints = eps;
        oa.node_checks = o->node_checks && a == o->region;
        rc = orch_doctor_run(&oa, rep, diag);
    }
    for (int i = 0; relay && i < t->n_links; i++) xdc_wan_relay_destroy(relay[i]);
    for (int r = 0; srv && r < n; r++) orch_doctor_server_destroy(srv[r]);
    xdc_free(srv);
    xdc_free(port);
    xdc_free(relay);
    xdc_free(ep);
    xdc_free(eps);
    return rc;
}
