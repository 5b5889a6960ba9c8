/* cmd_wan.c — `xdc wan listen|send`: an iperf3-like pair over the real WAN transport (TLS 1.3, K
 * streams). The sender announces the transfer in a LATENCY message (total bytes, message size), streams
 * BULK messages with a few in flight, and stops its clock when the listener's LATENCY reply says every
 * byte arrived. `send` prints exactly one line on stdout:
 *   goodput_gbps=G bytes=N seconds=S streams=K rtt_ms=R retransmits=F reconnects=C cpu_s=U */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_parse.h"
#include "common/xdc_time.h"
#include "wan/xdc_wan.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define WAN_CLI_DEPTH    8 /* messages in flight */
#define WAN_CLI_WAIT_MS  600000
#define WAN_CLI_HELLO_MS 30000         /* a peer that announces nothing within this is dropped */
#define WAN_CLI_SESSIONS 64            /* peers served at once by `listen`; more are turned away */
#define WAN_CLI_MAX_MSG  (64ull << 20) /* largest message a sender may announce */

typedef struct wan_cli_opts {
    xdc_wan_config cfg;
    const char *to;     /* send: HOST:PORT */
    const char *expect; /* send: REGION/RANK, or NULL for any peer of our run */
    const char *host;   /* listen: bind address */
    int port;
    int once;
    int announce_ms; /* listen: a peer that announces no transfer within this is dropped */
    uint64_t bytes;
    uint64_t msg_bytes;
} wan_cli_opts;

static int wan_usage(FILE *f)
{
    fprintf(f, "usage: xdc wan listen --port P --cert C --key K --ca CA [--crl CRL] [--streams K] [--host ADDR]\n"
               "                      [--once] [--announce-timeout MS]\n"
               "       xdc wan send --to HOST:P --bytes N --cert C --key K --ca CA [--crl CRL] [--streams K]\n"
               "                    [--expect REGION/RANK] [--msg-bytes M] [--sockbuf BYTES]\n"
               "  An iperf3-like pair over the WAN transport (TLS 1.3, mutual auth, K streams). N and M take\n"
               "  K/M/G suffixes (binary). send prints one line: goodput_gbps=... bytes=... seconds=... streams=...\n"
               "  listen serves up to 64 peers at once, each on its own thread (--once: the first peer only),\n"
               "  and prints one line per transfer. --crl (e.g. CA_DIR/crl.pem): refuse peers it revokes.\n"
               "  --announce-timeout: drop a peer that announces no transfer within MS (default 30000).\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* "256M" -> 268435456. */
static int parse_size(const char *flag, const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    uint64_t mul = 1;
    if (end && *end) {
        switch (*end) {
        case 'k':
        case 'K': mul = 1ull << 10; break;
        case 'm':
        case 'M': mul = 1ull << 20; break;
        case 'g':
        case 'G': mul = 1ull << 30; break;
        default: mul = 0;
        }
        if (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !(end[1] == 'B' && !end[2])) mul = 0;
    }
    if (end == text || errno || mul == 0 || v < 0 || v * (double)mul > 1e15) {
        fprintf(stderr, "xdc wan: %s '%s' is not a byte count (e.g. 1048576, 256M, 2G)\n", flag, text);
        return -1;
    }
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

/* A strict integer flag value; 0, or -1 after saying which flag and why. */
static int parse_flag_int(const char *flag, const char *text, int lo, int hi, int *out)
{
    xdc_diag d;
    if (xdc_parse_int(text, lo, hi, out, &d) == XDC_OK) return 0;
    fprintf(stderr, "xdc wan: %s: %s\n", flag, d.msg);
    return -1;
}

static int parse_opts(int argc, char **argv, wan_cli_opts *o)
{
    static const struct option opts[] = {
        {"port", required_argument, NULL, 'p'},    {"cert", required_argument, NULL, 'c'},
        {"key", required_argument, NULL, 'k'},     {"ca", required_argument, NULL, 'a'},
        {"streams", required_argument, NULL, 's'}, {"to", required_argument, NULL, 't'},
        {"bytes", required_argument, NULL, 'b'},   {"msg-bytes", required_argument, NULL, 'm'},
        {"expect", required_argument, NULL, 'e'},  {"host", required_argument, NULL, 'H'},
        {"sockbuf", required_argument, NULL, 'B'}, {"once", no_argument, NULL, '1'},
        {"crl", required_argument, NULL, 'r'},     {"announce-timeout", required_argument, NULL, 'A'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c;
    uint64_t v;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (parse_flag_int("--port", optarg, 0, 65535, &o->port)) return XDC_EX_USAGE;
            break;
        case 'c': o->cfg.cert_path = optarg; break;
        case 'k': o->cfg.key_path = optarg; break;
        case 'a': o->cfg.ca_path = optarg; break;
        case 'r': o->cfg.crl_path = optarg; break;
        case 's':
            if (parse_flag_int("--streams", optarg, 1, XDC_WAN_MAX_STREAMS, &o->cfg.streams)) return XDC_EX_USAGE;
            break;
        case 't': o->to = optarg; break;
        case 'e': o->expect = optarg; break;
        case 'H': o->host = optarg; break;
        case '1': o->once = 1; break;
        case 'A':
            if (parse_flag_int("--announce-timeout", optarg, 1, 3600000, &o->announce_ms)) return XDC_EX_USAGE;
            break;
        case 'b':
            if (parse_size("--bytes", optarg, &o->bytes)) return XDC_EX_USAGE;
            break;
        case 'm':
            if (parse_size("--msg-bytes", optarg, &o->msg_bytes)) return XDC_EX_USAGE;
            break;
        case 'B':
            if (parse_size("--sockbuf", optarg, &v) || v > (1u << 30)) return XDC_EX_USAGE;
            o->cfg.sockbuf_bytes = (int)v;
            break;
        case 'h': return wan_usage(stdout) == XDC_EX_OK ? -1 : XDC_EX_USAGE;
        default: return wan_usage(stderr);
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "xdc wan: unexpected argument '%s'\n", argv[optind + 1]);
        return XDC_EX_USAGE;
    }
    if (!o->cfg.cert_path || !o->cfg.key_path || !o->cfg.ca_path) {
        fprintf(stderr, "xdc wan: --cert, --key and --ca are required\n");
        return XDC_EX_USAGE;
    }
    if (o->msg_bytes < 1 || o->msg_bytes > (1ull << 30)) {
        fprintf(stderr, "xdc wan: --msg-bytes must be 1..1G\n");
        return XDC_EX_USAGE;
    }
    return XDC_EX_OK;
}

static int fail(const char *what, xdc_err_t rc, const xdc_diag *d)
{
    fprintf(stderr, "xdc wan %s: %s\n", what, d->msg[0] ? d->msg : xdc_strerror(rc));
    return xdc_cli_exit_code(rc);
}

/* The transfer announcement and the completion reply, both LATENCY messages of two u64 words. */
typedef struct {
    uint64_t total, msg_bytes;
} wan_cli_hello;

/* Check a transfer announcement: exactly two u64 words, a message size in 1..cap. */
static xdc_err_t announce_check(const wan_cli_hello *h, size_t got, uint64_t cap, xdc_diag *d)
{
    if (got != sizeof *h || h->msg_bytes == 0 || h->msg_bytes > cap) {
        xdc_diag_set(d, "bad transfer announcement (%zu bytes, message size %llu, limit %llu)", got,
                     (unsigned long long)h->msg_bytes, (unsigned long long)cap);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* Wait for r up to timeout_ms. Only XDC_ERR_AGAIN leaves the request ours, and only then is it cancelled
 * (XDC_ERR_TIMEOUT: `what` within the time); any other result already released it to the engine, which may
 * have handed it to another session since, so it is never touched again. */
static xdc_err_t wait_or_cancel(xdc_wan_request *r, int64_t timeout_ms, size_t *got, const char *what, xdc_diag *d)
{
    xdc_err_t rc = xdc_wan_wait(r, timeout_ms, got, NULL, d);
    if (rc != XDC_ERR_AGAIN) return rc;
    xdc_wan_request_cancel(r);
    xdc_diag_set(d, "%s within %lld ms", what, (long long)timeout_ms);
    return XDC_ERR_TIMEOUT;
}

/* One transfer from one peer; its receive buffers, (WAN_CLI_DEPTH, msg_bytes) bytes, live as long. */
static xdc_err_t serve_one(xdc_wan_peer *p, int announce_ms, xdc_diag *d)
{
    wan_cli_hello h;
    xdc_wan_request *r;
    size_t got = 0;
    XDC_CHECK(xdc_wan_irecv(p, XDC_WAN_LATENCY, &h, sizeof h, &r));
    xdc_err_t rc = wait_or_cancel(r, announce_ms, &got, "no transfer announcement", d);
    XDC_CHECK(rc);
    XDC_CHECK(announce_check(&h, got, WAN_CLI_MAX_MSG, d));
    uint8_t *bufs = xdc_malloc(h.msg_bytes * WAN_CLI_DEPTH);
    if (!bufs) return XDC_ERR_NOMEM;
    uint64_t n_msgs = (h.total + h.msg_bytes - 1) / h.msg_bytes, posted = 0, done = 0, bytes = 0;
    xdc_wan_request *q[WAN_CLI_DEPTH];
    uint64_t t0 = xdc_now_ns();
    while (rc == XDC_OK && done < n_msgs) {
        while (rc == XDC_OK && posted < n_msgs && posted - done < WAN_CLI_DEPTH) {
            rc = xdc_wan_irecv(p, XDC_WAN_BULK, bufs + (posted % WAN_CLI_DEPTH) * h.msg_bytes, h.msg_bytes,
                               &q[posted % WAN_CLI_DEPTH]);
            posted += rc == XDC_OK;
        }
        if (rc != XDC_OK) break;
        rc = xdc_wan_wait(q[done % WAN_CLI_DEPTH], WAN_CLI_WAIT_MS, &got, NULL, d);
        if (rc == XDC_ERR_AGAIN) { /* still ours: cancelled with the others below */
            xdc_diag_set(d, "message %llu of %llu did not arrive within %d ms", (unsigned long long)done,
                         (unsigned long long)n_msgs, WAN_CLI_WAIT_MS);
            rc = XDC_ERR_TIMEOUT;
            break;
        }
        bytes += rc == XDC_OK ? got : 0;
        done++; /* completed or failed (XDC_ERR_TIMEOUT too: the peer went silent): released either way */
    }
    /* Receives still out give their buffers up before the buffers go (and let the peer be freed). */
    for (uint64_t i = done; i < posted; i++) xdc_wan_request_cancel(q[i % WAN_CLI_DEPTH]);
    xdc_free(bufs);
    XDC_CHECK(rc);
    double secs = (double)(xdc_now_ns() - t0) / 1e9;
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    printf("received bytes=%llu seconds=%.3f goodput_gbps=%.3f from=%s/%d\n", (unsigned long long)bytes, secs,
           secs > 0 ? (double)bytes * 8 / secs / 1e9 : 0.0, id->region, id->rank);
    fflush(stdout);
    wan_cli_hello reply = {bytes, h.msg_bytes};
    XDC_CHECK(xdc_wan_isend(p, XDC_WAN_LATENCY, &reply, sizeof reply, 0, sizeof reply, &r));
    /* The sender closes (BYE) as soon as the reply arrives, possibly before its ACK reaches us. */
    rc = wait_or_cancel(r, WAN_CLI_WAIT_MS, NULL, "the completion reply was not taken", d);
    return rc == XDC_ERR_CLOSED ? XDC_OK : rc;
}

/* Sessions being served by `listen`, each on a detached thread of its own, so a peer that stalls (sends
 * a message nobody receives, or nothing at all) holds up its own thread only. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active;
    int announce_ms;
} wan_cli_sessions;

typedef struct {
    wan_cli_sessions *set;
    xdc_wan_peer *peer;
} wan_cli_session;

static void session_serve(xdc_wan_peer *p, int announce_ms)
{
    xdc_diag d = {{0}};
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    if (serve_one(p, announce_ms, &d) != XDC_OK)
        fprintf(stderr, "xdc wan listen: transfer from %s/%d failed: %s\n", id->region, id->rank, d.msg);
    xdc_wan_peer_destroy(p);
}

static void *session_main(void *arg)
{
    wan_cli_session *ss = arg;
    wan_cli_sessions *set = ss->set;
    session_serve(ss->peer, set->announce_ms);
    xdc_free(ss);
    pthread_mutex_lock(&set->mu);
    set->active--;
    pthread_cond_broadcast(&set->cv);
    pthread_mutex_unlock(&set->mu);
    return NULL;
}

/* Start a session thread for p; the peer is turned away when WAN_CLI_SESSIONS are busy. */
static void session_start(wan_cli_sessions *set, xdc_wan_peer *p)
{
    wan_cli_session *ss = xdc_malloc(sizeof *ss);
    pthread_mutex_lock(&set->mu);
    int ok = ss && set->active < WAN_CLI_SESSIONS;
    set->active += ok;
    pthread_mutex_unlock(&set->mu);
    if (!ok) {
        const xdc_wan_identity *id = xdc_wan_peer_identity(p);
        fprintf(stderr, "xdc wan listen: turned %s/%d away: %d transfers in progress\n", id->region, id->rank,
                WAN_CLI_SESSIONS);
        xdc_wan_peer_destroy(p);
        xdc_free(ss);
        return;
    }
    *ss = (wan_cli_session){.set = set, .peer = p};
    pthread_attr_t at;
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, session_main, ss) != 0) session_main(ss); /* serve it here; frees the slot */
    pthread_attr_destroy(&at);
}

static int wan_listen(wan_cli_opts *o)
{
    xdc_diag d = {{0}};
    xdc_wan_engine *eng = NULL;
    xdc_wan_listener *l = NULL;
    wan_cli_sessions set = {
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .announce_ms = o->announce_ms};
    xdc_err_t rc = xdc_wan_engine_create(&o->cfg, &eng, &d);
    if (rc != XDC_OK) return fail("listen", rc, &d);
    rc = xdc_wan_listen(eng, o->host, o->port, &l, &d);
    if (rc != XDC_OK) goto done;
    fprintf(stderr, "xdc wan listen: %s/%d listening on port %d\n", xdc_wan_engine_identity(eng)->region,
            xdc_wan_engine_identity(eng)->rank, xdc_wan_listener_port(l));
    do {
        xdc_wan_peer *p;
        rc = xdc_wan_accept(l, -1, &p, &d);
        if (rc != XDC_OK) break;
        if (o->once) session_serve(p, o->announce_ms);
        else session_start(&set, p);
    } while (!o->once);
done:
    /* Session threads use the engine: wait for them before it goes. */
    pthread_mutex_lock(&set.mu);
    while (set.active) pthread_cond_wait(&set.cv, &set.mu);
    pthread_mutex_unlock(&set.mu);
    xdc_wan_engine_destroy(eng);
    return rc == XDC_OK ? XDC_EX_OK : fail("listen", rc, &d);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static int wan_send(wan_cli_opts *o)
{
    char host[256];
    int port = 0;
    xdc_diag d = {{0}};
    if (!o->to || o->bytes == 0) {
        fprintf(stderr, "xdc wan send: --to HOST:PORT and --bytes N (> 0) are required\n");
        return XDC_EX_USAGE;
    }
    if (xdc_parse_host_port(o->to, host, sizeof host, &port, &d) != XDC_OK) {
        fprintf(stderr, "xdc wan send: --to: %s\n", d.msg);
        return XDC_EX_USAGE;
    }
    char region[XDC_WAN_NAME_MAX] = "";
    int rank = 0;
    if (o->expect) {
        const char *slash = strchr(o->expect, '/');
        if (!slash || slash == o->expect || (size_t)(slash - o->expect) >= sizeof region) {
            fprintf(stderr, "xdc wan send: --expect takes REGION/RANK, got '%s'\n", o->expect);
            return XDC_EX_USAGE;
        }
        memcpy(region, o->expect, (size_t)(slash - o->expect));
        if (parse_flag_int("--expect RANK", slash + 1, 0, 1000000, &rank)) return XDC_EX_USAGE;
    }
    xdc_wan_engine *eng = NULL;
    xdc_wan_peer *p = NULL;
    uint64_t msg = o->msg_bytes < o->bytes ? o->msg_bytes : o->bytes;
    uint8_t *buf = NULL;
    xdc_err_t rc = xdc_wan_engine_create(&o->cfg, &eng, &d);
    if (rc != XDC_OK) return fail("send", rc, &d);
    XDC_CHECK_GOTO(xdc_wan_connect(eng, host, port, o->expect ? region : NULL, rank, &p, &d), rc, done);
    XDC_CHECK_GOTO(xdc_wan_peer_wait_ready(p, 60000, &d), rc, done);
    if (!(buf = xdc_malloc(msg))) {
        rc = XDC_ERR_NOMEM;
        goto done;
    }
    for (uint64_t i = 0; i < msg; i++) buf[i] = (uint8_t)(i * 131 + 7);
    double cpu0 = cpu_seconds();
    uint64_t t0 = xdc_now_ns();
    wan_cli_hello h = {o->bytes, msg}, reply = {0, 0};
    xdc_wan_request *r, *rr, *q[WAN_CLI_DEPTH];
    XDC_CHECK_GOTO(xdc_wan_irecv(p, XDC_WAN_LATENCY, &reply, sizeof reply, &rr), rc, done);
    XDC_CHECK_GOTO(xdc_wan_isend(p, XDC_WAN_LATENCY, &h, sizeof h, 0, sizeof h, &r), rc, done);
    XDC_CHECK_GOTO(xdc_wan_wait(r, WAN_CLI_WAIT_MS, NULL, NULL, &d), rc, done);
    uint64_t n_msgs = (o->bytes + msg - 1) / msg, posted = 0, done_n = 0;
    while (done_n < n_msgs) {
        while (posted < n_msgs && posted - done_n < WAN_CLI_DEPTH) {
            uint64_t len = posted == n_msgs - 1 ? o->bytes - posted * msg : msg;
            XDC_CHECK_GOTO(xdc_wan_isend(p, XDC_WAN_BULK, buf, len, 0, len, &q[posted % WAN_CLI_DEPTH]), rc, done);
            posted++;
        }
        XDC_CHECK_GOTO(xdc_wan_wait(q[done_n % WAN_CLI_DEPTH], WAN_CLI_WAIT_MS, NULL, NULL, &d), rc, done);
        done_n++;
    }
    XDC_CHECK_GOTO(xdc_wan_wait(rr, WAN_CLI_WAIT_MS, NULL, NULL, &d), rc, done);
    double secs = (double)(xdc_now_ns() - t0) / 1e9, cpu = cpu_seconds() - cpu0;
    if (reply.total != o->bytes) {
        xdc_diag_set(&d, "the listener confirmed %llu of %llu bytes", (unsigned long long)reply.total,
                     (unsigned long long)o->bytes);
        rc = XDC_ERR_PROTO;
        goto done;
    }
    xdc_wan_stats st;
    xdc_wan_peer_stats(p, &st);
    printf("goodput_gbps=%.4f bytes=%llu seconds=%.3f streams=%d rtt_ms=%.2f retransmits=%llu reconnects=%llu "
           "cpu_s=%.3f\n",
           (double)o->bytes * 8 / secs / 1e9, (unsigned long long)o->bytes, secs, o->cfg.streams, st.rtt_ms,
           (unsigned long long)st.retransmit_frames, (unsigned long long)st.reconnects, cpu);
done:
    xdc_wan_peer_destroy(p);
    xdc_wan_engine_destroy(eng);
    xdc_free(buf);
    return rc == XDC_OK ? XDC_EX_OK : fail("send", rc, &d);
}

int xdc_cmd_wan(int argc, char **argv)
{
    if (argc < 2) return wan_usage(stderr);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return wan_usage(stdout);
    int listen = strcmp(argv[1], "listen") == 0;
    if (!listen && strcmp(argv[1], "send") != 0) {
        fprintf(stderr, "xdc wan: unknown subcommand '%s'\n", argv[1]);
        return wan_usage(stderr);
    }
    wan_cli_opts o = {.cfg = XDC_WAN_CONFIG_INIT, .msg_bytes = 4u << 20, .announce_ms = WAN_CLI_HELLO_MS};
    o.cfg.sockbuf_bytes = 0;
    int prc = parse_opts(argc, argv, &o);
    if (prc != XDC_EX_OK) return prc < 0 ? XDC_EX_OK : prc;
    return listen ? wan_listen(&o) : wan_send(&o);
}
