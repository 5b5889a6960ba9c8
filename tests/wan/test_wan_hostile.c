/* test_wan_hostile.c — the WAN engine and `xdc wan listen` against peers that misbehave: sessions by the
 * thousand (memory must come back), a peer whose data nobody receives (others are still served),
 * floods of connections that never finish their handshake (capped per listener and per address). */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"
#include "common/xdc_time.h"
#include "wan/wan_frame.h"

#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* `xdc wan listen --port 0` for `node` as a child process; returns its pid and the port it printed.
 * announce_ms > 0: its --announce-timeout. */
static pid_t listen_spawn_timeout(const wan_test_node *node, int announce_ms, int *port)
{
    int fds[2];
    XDC_ASSERT(pipe(fds) == 0);
    char out[600];
    snprintf(out, sizeof out, "%s/listen.out", xdc_test_tmpdir());
    pid_t pid = fork();
    XDC_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        if (!freopen(out, "w", stdout)) _exit(70);
        close(fds[0]);
        char ms[32];
        snprintf(ms, sizeof ms, "%d", announce_ms > 0 ? announce_ms : 30000);
        execl(xdc_test_bin(), "xdc", "wan", "listen", "--port", "0", "--host", "127.0.0.1", "--streams", "1", "--cert",
              node->cert, "--key", node->key, "--ca", node->ca, "--announce-timeout", ms, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    *port = 0;
    while (*port == 0 && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "listening on port ");
        if (at) *port = atoi(at + 18);
    }
    fclose(f); /* later diagnostics of the child go nowhere; it writes none while transfers succeed */
    XDC_ASSERT_MSG(*port > 0, "xdc wan listen printed no port");
    return pid;
}

static pid_t listen_spawn(const wan_test_node *node, int *port) { return listen_spawn_timeout(node, 0, port); }

/* Resident set of a process in KiB (VmRSS in /proc/PID/status). */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

/* One `xdc wan send`-style transfer of `bytes` in one message over a fresh peer, which is destroyed. */
static void cli_transfer(xdc_wan_engine *eng, int port, uint64_t bytes)
{
    xdc_wan_peer *p = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_connect(eng, "127.0.0.1", port, "us", 0, &p, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(p, 20000, &d) == XDC_OK, "ready: %s", d.msg);
    uint64_t hello[2] = {bytes, bytes}, reply[2] = {0, 0};
    static uint8_t data[4096];
    xdc_wan_request *rr, *rh, *rd;
    XDC_ASSERT_OK(xdc_wan_irecv(p, XDC_WAN_LATENCY, reply, sizeof reply, &rr));
    XDC_ASSERT_OK(xdc_wan_isend(p, XDC_WAN_LATENCY, hello, sizeof hello, 0, sizeof hello, &rh));
    XDC_ASSERT_OK(xdc_wan_isend(p, XDC_WAN_BULK, data, bytes, 0, bytes, &rd));
    XDC_ASSERT_MSG(xdc_wan_wait(rh, 20000, NULL, NULL, &d) == XDC_OK, "hello: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_wait(rd, 20000, NULL, NULL, &d) == XDC_OK, "data: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_wait(rr, 20000, NULL, NULL, &d) == XDC_OK, "reply: %s", d.msg);
    XDC_ASSERT_EQ((long)reply[0], (long)bytes);
    xdc_wan_peer_destroy(p);
}

static void listen_stop(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
}

/* RSS is the measure of the tests that count memory; AddressSanitizer keeps freed memory in a quarantine
 * (256 MB by default) before reusing it, so RSS grows with every freed session buffer there (this build's
 * LeakSanitizer checks for leaks instead). */
static void skip_rss_under_asan(void)
{
#ifdef __SANITIZE_ADDRESS__
    xdc_test_skip("RSS is not a leak measure under AddressSanitizer (its quarantine holds freed memory)");
#endif
}

/* The listener's node us/0 and the dialler's eu/0, of one CA. */
static void issue_us_eu(wan_test_node *us, wan_test_node *eu)
{
    wan_test_issue("pki", "us", 0, 30, 0, us);
    wan_test_issue("pki", "eu", 0, 30, 0, eu);
}

/* The done-when figure of the trust issue: 1,000 sessions leave `wan listen` within 5 MB of where it
 * stood after a warm-up (before the fix: +38 MB, never given back). The dialling engine frees its
 * destroyed peers as well. No timing is asserted; the numbers are printed for the log. */
XDC_TEST_T(wan_listen_rss_stays_flat_over_1000_sessions, 240)
{
    skip_rss_under_asan();
    wan_test_node us, eu;
    issue_us_eu(&us, &eu);
    int port;
    pid_t pid = listen_spawn(&us, &port);
    xdc_wan_engine *eng = wan_test_engine(&eu, 1, 30000);
    for (int i = 0; i < 100; i++) cli_transfer(eng, port, 1 + (uint64_t)i % 4000);
    long lis0 = rss_kib(pid), self0 = rss_kib(getpid());
    for (int i = 0; i < 1000; i++) cli_transfer(eng, port, 1 + (uint64_t)i % 4000);
    long lis1 = rss_kib(pid), self1 = rss_kib(getpid());
    printf("wan listen RSS: %ld KiB after 100 sessions, %ld KiB after 1100 (%+ld KiB); dialler %ld -> %ld KiB\n", lis0,
           lis1, lis1 - lis0, self0, self1);
    xdc_wan_engine_destroy(eng);
    listen_stop(pid);
    XDC_ASSERT(lis0 > 0 && lis1 > 0);
    XDC_ASSERT_MSG(lis1 - lis0 <= 5 * 1024, "listener grew by %ld KiB over 1000 sessions", lis1 - lis0);
    XDC_ASSERT_MSG(self1 - self0 <= 5 * 1024, "dialler grew by %ld KiB over 1000 sessions", self1 - self0);
}

/* A peer that sends a bulk message nobody receives (before any announcement) stalls its own session
 * only: another peer's transfer through the same `wan listen` completes meanwhile (before, the listener
 * served one peer at a time and waited 600 s on the first). */
XDC_TEST_T(wan_listen_serves_others_while_one_peer_stalls, 120)
{
    wan_test_node us, eu, ap;
    wan_test_issue("pki", "us", 0, 30, 0, &us);
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    wan_test_issue("pki", "ap", 1, 30, 0, &ap);
    int port;
    pid_t pid = listen_spawn(&us, &port);
    xdc_wan_engine *bad_eng = wan_test_engine(&ap, 1, 60000), *eng = wan_test_engine(&eu, 1, 30000);
    xdc_wan_peer *bad = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_connect(bad_eng, "127.0.0.1", port, "us", 0, &bad, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(bad, 20000, &d) == XDC_OK, "ready: %s", d.msg);
    size_t big = 1u << 20;
    uint8_t *junk = calloc(1, big);
    xdc_wan_request *stuck;
    XDC_ASSERT_OK(xdc_wan_isend(bad, XDC_WAN_BULK, junk, big, 0, big, &stuck));
    cli_transfer(eng, port, 3000); /* served although the stalled peer came first */
    int done = 1;
    XDC_ASSERT_OK(xdc_wan_test(stuck, &done, NULL, NULL, &d));
    XDC_ASSERT_MSG(!done, "the stalled message was received, so the test proves nothing");
    xdc_wan_peer_destroy(bad);
    free(junk);
    xdc_wan_engine_destroy(eng);
    xdc_wan_engine_destroy(bad_eng);
    listen_stop(pid);
}

/* A plain TCP connection to 127.0.0.1:port that never starts TLS: it sits among the pending handshakes. */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    XDC_ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* Half-open connections beyond the cap are closed at once and named in the listener's refusal; once the
 * squatters go, a real peer gets in. */
static void pending_cap_case(int per_listener, int per_addr, const char *want)
{
    wan_test_node us, eu;
    issue_us_eu(&us, &eu);
    xdc_wan_config cfg = wan_test_config(1, 60000);
    cfg.max_pending_handshakes = per_listener;
    cfg.max_pending_per_addr = per_addr;
    xdc_wan_engine *srv = wan_test_engine_cfg(&us, &cfg), *cli = wan_test_engine(&eu, 1, 60000);
    xdc_wan_listener *l = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(srv, "127.0.0.1", 0, &l, &d));
    int port = xdc_wan_listener_port(l), cap = per_listener < per_addr ? per_listener : per_addr, fds[16];
    for (int i = 0; i <= cap; i++) fds[i] = raw_connect(port);
    /* The engine accepts in connection order; the one over the cap is closed: its read sees EOF. */
    char b;
    XDC_ASSERT_EQ((long)read(fds[cap], &b, 1), 0L);
    XDC_ASSERT(xdc_wan_listener_last_refusal(l, &d) >= 1);
    XDC_ASSERT_STR_CONTAINS(d.msg, want);
    for (int i = 0; i <= cap; i++) close(fds[i]);
    xdc_wan_peer *p = NULL, *sp = NULL;
    XDC_ASSERT_OK(xdc_wan_connect(cli, "127.0.0.1", port, "us", 0, &p, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(p, 30000, &d) == XDC_OK, "ready after the squatters left: %s", d.msg);
    XDC_ASSERT_OK(xdc_wan_accept(l, 30000, &sp, &d));
    xdc_wan_peer_destroy(sp);
    xdc_wan_peer_destroy(p);
    xdc_wan_engine_destroy(cli);
    xdc_wan_engine_destroy(srv);
}

XDC_TEST(wan_pending_handshakes_capped_per_address)
{
    pending_cap_case(16, 3, "3 handshakes already pending from this address");
}

XDC_TEST(wan_pending_handshakes_capped_per_listener)
{
    pending_cap_case(2, 16, "2 handshakes already pending on this listener");
}

/* A hostile member: a valid certificate, and frames written by hand over its own TLS connection. */
typedef struct {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
} raw_peer;

/* 0 when the TLS handshake completed; -1 when the listener closed the connection first (refused). */
static int raw_try_open(raw_peer *r, const wan_test_node *n, int port)
{
    r->ctx = SSL_CTX_new(TLS_client_method());
    XDC_ASSERT(r->ctx && SSL_CTX_set_min_proto_version(r->ctx, TLS1_3_VERSION) == 1);
    XDC_ASSERT(SSL_CTX_use_certificate_chain_file(r->ctx, n->cert) == 1);
    XDC_ASSERT(SSL_CTX_use_PrivateKey_file(r->ctx, n->key, SSL_FILETYPE_PEM) == 1);
    r->fd = raw_connect(port);
    r->ssl = SSL_new(r->ctx);
    XDC_ASSERT(r->ssl && SSL_set_fd(r->ssl, r->fd) == 1);
    return SSL_connect(r->ssl) == 1 ? 0 : -1;
}

static void raw_open(raw_peer *r, const wan_test_node *n, int port) { XDC_ASSERT(raw_try_open(r, n, port) == 0); }

static void raw_write(raw_peer *r, const wan_frame *f, const uint8_t *payload)
{
    uint8_t hdr[WAN_FRAME_HDR_BYTES];
    wan_frame_encode(f, hdr);
    XDC_ASSERT(SSL_write(r->ssl, hdr, sizeof hdr) == (int)sizeof hdr);
    if (f->payload_len) XDC_ASSERT(SSL_write(r->ssl, payload, (int)f->payload_len) == (int)f->payload_len);
}

static void raw_close(raw_peer *r)
{
    SSL_free(r->ssl);
    SSL_CTX_free(r->ctx);
    close(r->fd);
}

/* Announced lengths are judged when the header arrives: a message longer than the posted receive fails
 * that receive at its first frame (the rest would never come), and a claim of 2^62 bytes, beyond the
 * bound of every message, fails the peer at once with a protocol error naming it. */
XDC_TEST(wan_announced_length_is_refused_at_the_header)
{
    wan_test_node us, eu;
    issue_us_eu(&us, &eu);
    xdc_wan_engine *srv = wan_test_engine(&us, 1, 60000);
    xdc_wan_listener *l = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(srv, "127.0.0.1", 0, &l, &d));
    raw_peer r;
    raw_open(&r, &eu, xdc_wan_listener_port(l));
    wan_frame hello = {.type = WAN_FT_HELLO, .msg_seq = 42, .msg_off = 0, .msg_len = 1};
    raw_write(&r, &hello, NULL);
    xdc_wan_peer *p = NULL;
    XDC_ASSERT_OK(xdc_wan_accept(l, 20000, &p, &d));
    static uint8_t rx[1000], piece[1024];
    xdc_wan_request *r0, *r1;
    XDC_ASSERT_OK(xdc_wan_irecv(p, XDC_WAN_BULK, rx, sizeof rx, &r0));
    XDC_ASSERT_OK(xdc_wan_irecv(p, XDC_WAN_BULK, rx, sizeof rx, &r1));
    wan_frame big = {.type = WAN_FT_DATA, .cls = XDC_WAN_BULK, .payload_len = sizeof piece, .msg_len = 1u << 30};
    raw_write(&r, &big, piece); /* 1 KiB of a 1 GiB message */
    XDC_ASSERT_ERR(xdc_wan_wait(r0, 20000, NULL, NULL, &d), XDC_ERR_RANGE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "is 1073741824 bytes, the receive buffer holds 1000");
    wan_frame huge = {.type = WAN_FT_DATA,
                      .cls = XDC_WAN_BULK,
                      .payload_len = sizeof piece,
                      .seq = 1,
                      .msg_seq = 1,
                      .msg_len = 1ull << 62};
    raw_write(&r, &huge, piece);
    XDC_ASSERT_ERR(xdc_wan_wait(r1, 20000, NULL, NULL, &d), XDC_ERR_PROTO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "protocol error from peer eu/0");
    XDC_ASSERT_STR_CONTAINS(d.msg, "announces a message of 4611686018427387904 bytes, above the bound");
    xdc_wan_peer_destroy(p);
    raw_close(&r);
    xdc_wan_engine_destroy(srv);
}

/* Sessions from env XDC_HOSTILE_SESSIONS (a manual run shows the issue's 3,000), else `dflt`. */
static int hostile_sessions(int dflt)
{
    const char *v = getenv("XDC_HOSTILE_SESSIONS");
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* A raw session's HELLO for a session of `streams` streams (this connection is stream 0). */
static void raw_hello(raw_peer *r, uint64_t session, int streams)
{
    wan_frame hello = {.type = WAN_FT_HELLO, .msg_seq = session, .msg_off = 0, .msg_len = (uint64_t)streams};
    raw_write(r, &hello, NULL);
}

/* Read until the other side closes (bounded by a 20 s receive timeout): 1 when it closed. */
static int raw_until_eof(raw_peer *r)
{
    struct timeval tv = {20, 0};
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t buf[256];
    errno = 0;
    while (SSL_read(r->ssl, buf, sizeof buf) > 0) {
    }
    return errno != EAGAIN && errno != EWOULDBLOCK; /* closed (cleanly or not), not the receive timeout */
}

/* Sessions that announce nothing until the listener gives up on them, and sessions reset in the middle of
 * a frame: `xdc wan listen` frees each (before: a timed-out announcement stayed posted, so its peer was
 * never reaped, ~42 KiB a session without bound). RSS within 5 MiB of where it stood after a warm-up. */
XDC_TEST_T(wan_listen_frees_sessions_that_time_out_or_reset_mid_frame, 60)
{
    skip_rss_under_asan();
    wan_test_node us, eu;
    issue_us_eu(&us, &eu);
    int port, sessions = hostile_sessions(600), timed_out = 0;
    pid_t pid = listen_spawn_timeout(&us, 100, &port);
    long rss0 = 0;
    uint64_t t0 = xdc_now_ns();
    for (int done = 0, batch = 32; done < sessions + 64; done += batch) {
        if (done >= 64 && !rss0) rss0 = rss_kib(pid); /* after a warm-up of 64 */
        raw_peer r[32];
        for (int i = 0; i < batch; i++) {
            raw_open(&r[i], &eu, port);
            raw_hello(&r[i], (uint64_t)(done + i + 1) << 8, 1);
            if (i % 2) {
                /* Reset mid-frame: a DATA header for 64 bytes, 8 of them, then RST (SO_LINGER 0). */
                wan_frame f = {.type = WAN_FT_DATA, .cls = XDC_WAN_LATENCY, .payload_len = 64, .msg_len = 64};
                uint8_t hdr[WAN_FRAME_HDR_BYTES], part[8] = {0};
                wan_frame_encode(&f, hdr);
                XDC_ASSERT(SSL_write(r[i].ssl, hdr, sizeof hdr) == (int)sizeof hdr);
                XDC_ASSERT(SSL_write(r[i].ssl, part, sizeof part) == (int)sizeof part);
                struct linger lg = {1, 0};
                setsockopt(r[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            }
        }
        for (int i = 0; i < batch; i++) {
            if (i % 2 == 0) timed_out += raw_until_eof(&r[i]); /* the listener dropped it: nothing announced */
            raw_close(&r[i]);
        }
    }
    long rss1 = rss_kib(pid);
    printf("wan listen: %d sessions (half timed out, half reset mid-frame) in %.1f s; RSS %ld -> %ld KiB (%+ld)\n",
           sessions, (double)(xdc_now_ns() - t0) / 1e9, rss0, rss1, rss1 - rss0);
    listen_stop(pid);
    XDC_ASSERT_EQ(timed_out, (sessions + 64 + 31) / 32 * 16);
    XDC_ASSERT(rss0 > 0 && rss1 > 0);
    XDC_ASSERT_MSG(rss1 - rss0 <= 5 * 1024, "listener grew by %ld KiB over %d sessions", rss1 - rss0, sessions);
}

/* HELLOs that announce 64 streams and open one: each such session counts as a pending handshake (so the
 * per-address cap turns the flood away) and ends after the handshake limit, min(deadline, 10 s), instead of
 * holding a 64-stream session for the whole deadline; the engine's own counters come back to zero and a
 * real peer still gets in. */
XDC_TEST_T(wan_half_open_sessions_count_as_handshakes_and_are_freed, 60)
{
    wan_test_node us, eu;
    issue_us_eu(&us, &eu);
    xdc_wan_config cfg = wan_test_config(1, 1500); /* handshake limit 1.5 s */
    cfg.max_pending_per_addr = 16;
    xdc_wan_engine *srv = wan_test_engine_cfg(&us, &cfg), *cli = wan_test_engine(&eu, 1, 30000);
    xdc_wan_listener *l = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(srv, "127.0.0.1", 0, &l, &d));
    int port = xdc_wan_listener_port(l), sessions = hostile_sessions(200), most = 0;
    for (int i = 0; i < sessions; i++) {
        raw_peer r;
        if (raw_try_open(&r, &eu, port) == 0) { /* over the cap the listener closes it before TLS completes */
            SSL_set_quiet_shutdown(r.ssl, 1);
            wan_frame hello = {.type = WAN_FT_HELLO, .msg_seq = (uint64_t)(i + 1) << 8, .msg_len = 64};
            uint8_t hdr[WAN_FRAME_HDR_BYTES];
            wan_frame_encode(&hello, hdr);
            (void)SSL_write(r.ssl, hdr, sizeof hdr); /* may find the connection refused already */
        }
        raw_close(&r);
        xdc_wan_counts c;
        xdc_wan_engine_counts(srv, &c);
        most = c.pending > most ? c.pending : most;
    }
    int refused = xdc_wan_listener_last_refusal(l, &d);
    xdc_wan_counts c = {0};
    for (int t = 0; t < 1000; t++) { /* bounded: the last ones end 1.5 s after their HELLO */
        xdc_wan_engine_counts(srv, &c);
        if (c.peers == 0 && c.pending == 0) break;
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    printf("%d half-open 64-stream sessions: at most %d pending at once, %d refused, then %d peers %d pending\n",
           sessions, most, refused, c.peers, c.pending);
    XDC_ASSERT_MSG(most <= 16, "%d handshakes pending at once, over the cap of 16 per address", most);
    XDC_ASSERT(refused > 0);
    XDC_ASSERT_EQ(c.peers, 0);
    XDC_ASSERT_EQ(c.pending, 0);
    xdc_wan_peer *p = NULL, *sp = NULL;
    XDC_ASSERT_OK(xdc_wan_connect(cli, "127.0.0.1", port, "us", 0, &p, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(p, 30000, &d) == XDC_OK, "ready after the flood: %s", d.msg);
    XDC_ASSERT_OK(xdc_wan_accept(l, 30000, &sp, &d));
    xdc_wan_peer_destroy(sp);
    xdc_wan_peer_destroy(p);
    xdc_wan_engine_destroy(cli);
    xdc_wan_engine_destroy(srv);
}
