/* test_wan.c — the WAN transport on loopback: random messages round-trip over 1..8 streams in both
 * directions and both traffic classes (content checked by hash), a stream shut down mid-transfer
 * loses and duplicates nothing, an oversize message fails only its receive, a dead peer fails
 * requests with an error that names it, and cancelled requests and closed peers give their buffers back
 * at once (run under SAN=address to catch a late touch). */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"
#include "wan/emu/xdc_wan_emu.h"
#include "wan/wan_priv.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 30000

typedef struct {
    uint8_t *tx, *rx; /* (len) bytes each */
    size_t len;
    uint64_t hash;
    xdc_wan_request *sreq, *rreq;
} msg_case;

/* Send n messages from `from` to `to` (alternating classes), receive them all, check every byte. */
static void exchange(xdc_wan_peer *from, xdc_wan_peer *to, const size_t *sizes, int n, uint64_t seed)
{
    msg_case *m = xdc_calloc((size_t)n, sizeof *m);
    for (int i = 0; i < n; i++) {
        m[i].len = sizes[i];
        m[i].tx = xdc_malloc(sizes[i] + 1);
        m[i].rx = xdc_malloc(sizes[i] + 1);
        m[i].hash = wan_test_fill(m[i].tx, sizes[i], seed + (uint64_t)i);
        xdc_wan_class cls = i % 3 == 0 ? XDC_WAN_LATENCY : XDC_WAN_BULK;
        XDC_ASSERT_OK(xdc_wan_irecv(to, cls, m[i].rx, sizes[i] + 1, &m[i].rreq));
        XDC_ASSERT_OK(xdc_wan_isend(from, cls, m[i].tx, sizes[i], (uint8_t)(i & 0xff), sizes[i] * 2, &m[i].sreq));
    }
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        uint8_t codec = 0;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_wan_wait(m[i].rreq, WAIT_MS, &got, &codec, &d) == XDC_OK, "recv %d: %s", i, d.msg);
        XDC_ASSERT_EQ(got, m[i].len);
        XDC_ASSERT_EQ(codec, i & 0xff);
        XDC_ASSERT_MSG(xdc_xxh3(m[i].rx, got) == m[i].hash, "message %d (%zu bytes) content differs", i, got);
        XDC_ASSERT_MSG(xdc_wan_wait(m[i].sreq, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send %d: %s", i, d.msg);
    }
    for (int i = 0; i < n; i++) {
        xdc_free(m[i].tx);
        xdc_free(m[i].rx);
    }
    xdc_free(m);
}

static void roundtrip_with(int streams)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, streams, WAIT_MS, NULL, NULL);
    size_t sizes[24] = {0, 1, 7, 4096, 65535, 65536, 65537, 1 << 20, (3 << 20) + 5};
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)streams);
    for (int i = 9; i < 24; i++) sizes[i] = 1 + xdc_rng_below(&r, xdc_rng_below(&r, 4) == 0 ? (4u << 20) : 200000);
    exchange(tp.cli, tp.srv, sizes, 24, 100);
    xdc_wan_stats st;
    xdc_wan_peer_stats(tp.cli, &st);
    double before_rx = st.rx_busy_seconds; /* the client has received nothing yet */
    uint64_t t0 = xdc_now_ns();
    exchange(tp.srv, tp.cli, sizes, 24, 200);
    double window = (double)(xdc_now_ns() - t0) / 1e9;
    xdc_wan_peer_stats(tp.cli, &st);
    /* Time bytes were arriving: none before the first message, some during, never more than the window. */
    XDC_ASSERT(before_rx == 0);
    XDC_ASSERT_MSG(st.rx_busy_seconds > 0 && st.rx_busy_seconds <= window, "busy %g s in a %g s window",
                   st.rx_busy_seconds, window);
    XDC_ASSERT_EQ(st.streams, streams + 1); /* the bulk streams and the latency stream */
    XDC_ASSERT_EQ(st.streams_up, streams + 1);
    uint64_t total = 0;
    for (int i = 0; i < 24; i++) total += sizes[i];
    XDC_ASSERT_EQ(st.tx_payload_bytes, total);
    XDC_ASSERT_EQ(st.tx_raw_bytes, 2 * total);
    XDC_ASSERT_EQ(st.rx_payload_bytes, total);
    XDC_ASSERT(st.tx_wire_bytes > total);
    /* Goodput counts only the time a send was queued: with every send acknowledged, idle time leaves it
     * as it was (payload over time since the first send would fall). */
    XDC_ASSERT(st.goodput_gbps > 0);
    nanosleep(&(struct timespec){.tv_nsec = 30 * 1000 * 1000}, NULL);
    xdc_wan_stats later;
    xdc_wan_peer_stats(tp.cli, &later);
    XDC_ASSERT_MSG(later.goodput_gbps == st.goodput_gbps, "goodput %.6f Gbit/s fell to %.6f while idle",
                   st.goodput_gbps, later.goodput_gbps);
    wan_test_pair_close(&tp);
}

XDC_TEST(wan_roundtrip_1_stream) { roundtrip_with(1); }
XDC_TEST(wan_roundtrip_3_streams) { roundtrip_with(3); }
XDC_TEST(wan_roundtrip_8_streams) { roundtrip_with(8); }

XDC_TEST(wan_roundtrip_32mib_message)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 4, WAIT_MS, NULL, NULL);
    size_t sizes[1] = {32u << 20};
    exchange(tp.cli, tp.srv, sizes, 1, 7);
    wan_test_pair_close(&tp);
}

/* The latency class goes first: with one stream, a LATENCY message posted after a large BULK one is
 * written first. Holding the server's engine lock keeps the client from becoming ready until both
 * are queued, so the order does not depend on timing. */
XDC_TEST(wan_latency_class_overtakes_bulk)
{
    wan_test_node us, eu;
    wan_test_issue("pki", "us", 0, 30, 0, &us);
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    xdc_wan_engine *se = wan_test_engine(&us, 1, WAIT_MS), *ce = wan_test_engine(&eu, 1, WAIT_MS);
    xdc_wan_listener *l;
    xdc_wan_peer *cli, *srv;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &l, &d));
    size_t big = 4u << 20;
    uint8_t *bulk = xdc_malloc(big), *bulk_rx = xdc_malloc(big), act[64], act_rx[64];
    wan_test_fill(bulk, big, 1);
    uint64_t h = wan_test_fill(act, sizeof act, 2);
    xdc_wan_request *rb, *ra, *sb, *sa;
    pthread_mutex_lock(&se->mu);
    XDC_ASSERT_OK(xdc_wan_connect(ce, "127.0.0.1", xdc_wan_listener_port(l), "us", 0, &cli, &d));
    XDC_ASSERT_OK(xdc_wan_isend(cli, XDC_WAN_BULK, bulk, big, 0, big, &sb));
    XDC_ASSERT_OK(xdc_wan_isend(cli, XDC_WAN_LATENCY, act, sizeof act, 0, sizeof act, &sa));
    pthread_mutex_unlock(&se->mu);
    XDC_ASSERT_OK(xdc_wan_accept(l, WAIT_MS, &srv, &d));
    /* Only the activation's receive is posted: the stream stalls on the first bulk frame behind it. */
    XDC_ASSERT_OK(xdc_wan_irecv(srv, XDC_WAN_LATENCY, act_rx, sizeof act_rx, &ra));
    size_t got = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(ra, WAIT_MS, &got, NULL, &d) == XDC_OK, "%s", d.msg);
    XDC_ASSERT_EQ(got, sizeof act);
    XDC_ASSERT(xdc_xxh3(act_rx, got) == h);
    XDC_ASSERT_OK(xdc_wan_irecv(srv, XDC_WAN_BULK, bulk_rx, big, &rb));
    XDC_ASSERT_OK(xdc_wan_wait(rb, WAIT_MS, &got, NULL, &d));
    XDC_ASSERT(got == big && memcmp(bulk, bulk_rx, big) == 0);
    XDC_ASSERT_OK(xdc_wan_wait(sb, WAIT_MS, NULL, NULL, &d));
    XDC_ASSERT_OK(xdc_wan_wait(sa, WAIT_MS, NULL, NULL, &d));
    xdc_wan_engine_destroy(ce);
    xdc_wan_engine_destroy(se);
    xdc_free(bulk);
    xdc_free(bulk_rx);
}

/* Shut down one stream's socket while frames are in flight: everything still arrives exactly once. */
XDC_TEST(wan_stream_killed_mid_transfer_delivers_exactly_once)
{
    enum { N = 40, LEN = 300000 };
    wan_test_pair tp;
    wan_test_pair_open(&tp, 4, WAIT_MS, NULL, NULL);
    msg_case m[N];
    xdc_diag d = {{0}};
    for (int i = 0; i < N; i++) {
        m[i].tx = xdc_malloc(LEN);
        m[i].rx = xdc_malloc(LEN);
        memset(m[i].rx, 0, LEN);
        m[i].hash = wan_test_fill(m[i].tx, LEN, 1000 + (uint64_t)i);
        XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, m[i].tx, LEN, 0, LEN, &m[i].sreq));
    }
    /* Receive the first ten, so the rest sit in flight (window) waiting for receives. */
    for (int i = 0; i < 10; i++) XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, m[i].rx, LEN, &m[i].rreq));
    XDC_ASSERT_MSG(xdc_wan_wait(m[9].rreq, WAIT_MS, NULL, NULL, &d) == XDC_OK, "%s", d.msg);
    m[9].rreq = NULL;
    xdc_wan_engine *eng = tp.cli_eng;
    pthread_mutex_lock(&eng->mu);
    wan_stream *s = tp.cli->streams[2];
    XDC_ASSERT(s->state == WAN_ST_READY && s->io.fd >= 0);
    shutdown(s->io.fd, SHUT_RDWR);
    pthread_mutex_unlock(&eng->mu);
    for (int i = 10; i < N; i++) XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, m[i].rx, LEN, &m[i].rreq));
    for (int i = 0; i < N; i++) {
        size_t got = LEN;
        if (m[i].rreq)
            XDC_ASSERT_MSG(xdc_wan_wait(m[i].rreq, WAIT_MS, &got, NULL, &d) == XDC_OK, "recv %d: %s", i, d.msg);
        XDC_ASSERT_EQ(got, LEN);
        XDC_ASSERT_MSG(xdc_xxh3(m[i].rx, LEN) == m[i].hash, "message %d differs", i);
        XDC_ASSERT_MSG(xdc_wan_wait(m[i].sreq, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send %d: %s", i, d.msg);
    }
    wan_test_send_tail(&tp, WAIT_MS);
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(tp.cli, WAIT_MS, &d));
    xdc_wan_stats st;
    xdc_wan_peer_stats(tp.cli, &st);
    XDC_ASSERT(st.reconnects >= 1);
    XDC_ASSERT_EQ(st.streams_up, 4 + 1);
    xdc_wan_stats ss;
    xdc_wan_peer_stats(tp.srv, &ss);
    XDC_ASSERT_EQ(ss.rx_payload_bytes, (uint64_t)N * LEN + WAN_TEST_TAIL_LEN);
    wan_test_pair_close(&tp);
    for (int i = 0; i < N; i++) {
        xdc_free(m[i].tx);
        xdc_free(m[i].rx);
    }
}

XDC_TEST(wan_oversize_message_fails_only_its_receive)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, WAIT_MS, NULL, NULL);
    uint8_t big[200000], small[10], rx[1000];
    wan_test_fill(big, sizeof big, 1);
    uint64_t h = wan_test_fill(small, sizeof small, 2);
    xdc_wan_request *r1, *r2, *s1, *s2;
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx, sizeof rx, &r1));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, big, sizeof big, 0, sizeof big, &s1));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, small, sizeof small, 0, sizeof small, &s2));
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_wait(r1, WAIT_MS, NULL, NULL, &d), XDC_ERR_RANGE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "200000 bytes");
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx, sizeof rx, &r2));
    size_t got = 0;
    XDC_ASSERT_OK(xdc_wan_wait(r2, WAIT_MS, &got, NULL, &d));
    XDC_ASSERT_EQ(got, sizeof small);
    XDC_ASSERT(xdc_xxh3(rx, got) == h);
    XDC_ASSERT_OK(xdc_wan_wait(s1, WAIT_MS, NULL, NULL, &d));
    XDC_ASSERT_OK(xdc_wan_wait(s2, WAIT_MS, NULL, NULL, &d));
    wan_test_pair_close(&tp);
}

XDC_TEST(wan_deadline_failure_names_the_peer)
{
    wan_test_node eu;
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    xdc_wan_engine *eng = wan_test_engine(&eu, 2, 300);
    /* A port that was just free: nothing listens there. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t alen = sizeof a;
    XDC_ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    int port = ntohs(a.sin_port);
    close(fd);
    xdc_wan_peer *p;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_connect(eng, "127.0.0.1", port, "us", 3, &p, &d));
    uint8_t buf[16] = {0};
    xdc_wan_request *r;
    XDC_ASSERT_OK(xdc_wan_isend(p, XDC_WAN_LATENCY, buf, sizeof buf, 0, sizeof buf, &r));
    XDC_ASSERT_ERR(xdc_wan_wait(r, WAIT_MS, NULL, NULL, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/3 (127.0.0.1:");
    XDC_ASSERT_STR_CONTAINS(d.msg, "Connection refused");
    XDC_ASSERT_STR_CONTAINS(d.msg, "last heard");
    XDC_ASSERT_ERR(xdc_wan_peer_wait_ready(p, WAIT_MS, &d), XDC_ERR_TIMEOUT);
    xdc_wan_engine_destroy(eng);
}

XDC_TEST(wan_server_gone_fails_pending_receive_naming_it)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 400, NULL, NULL);
    uint8_t rx[64];
    xdc_wan_request *r;
    XDC_ASSERT_OK(xdc_wan_irecv(tp.cli, XDC_WAN_BULK, rx, sizeof rx, &r));
    xdc_wan_engine_destroy(tp.srv_eng);
    tp.srv_eng = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_wait(r, WAIT_MS, NULL, NULL, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/0");
    XDC_ASSERT_STR_CONTAINS(d.msg, "last heard");
    wan_test_pair_close(&tp);
}

XDC_TEST(wan_config_out_of_range_is_refused)
{
    xdc_wan_config cfg = XDC_WAN_CONFIG_INIT;
    cfg.cert_path = cfg.key_path = cfg.ca_path = "/nonexistent";
    xdc_wan_engine *eng = NULL;
    xdc_diag d = {{0}};
    cfg.streams = 0;
    XDC_ASSERT_ERR(xdc_wan_engine_create(&cfg, &eng, &d), XDC_ERR_CONFIG);
    cfg.streams = 2;
    cfg.window_frames = 100;
    XDC_ASSERT_ERR(xdc_wan_engine_create(&cfg, &eng, &d), XDC_ERR_CONFIG);
    cfg.window_frames = 128;
    XDC_ASSERT_ERR(xdc_wan_engine_create(&cfg, &eng, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "/nonexistent");
    XDC_ASSERT(eng == NULL);
    xdc_wan_engine_destroy(NULL);
}

XDC_TEST(wan_frame_decoder_refuses_oversize_and_corrupt_headers)
{
    wan_frame f = {.type = WAN_FT_DATA,
                   .cls = 1,
                   .codec = 2,
                   .payload_len = 4096,
                   .seq = 9,
                   .msg_seq = 1,
                   .msg_off = 8192,
                   .msg_len = 1 << 20},
              g;
    uint8_t h[WAN_FRAME_HDR_BYTES];
    xdc_diag d = {{0}};
    wan_frame_encode(&f, h);
    XDC_ASSERT_OK(wan_frame_decode(h, 1 << 20, &g, &d));
    XDC_ASSERT(g.seq == 9 && g.msg_off == 8192 && g.payload_len == 4096 && g.codec == 2);
    XDC_ASSERT_ERR(wan_frame_decode(h, 1024, &g, &d), XDC_ERR_PROTO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "exceeds the bound of 1024 bytes");
    f.payload_len = 0xffffffffu;
    f.msg_len = UINT64_MAX;
    f.msg_off = 0;
    wan_frame_encode(&f, h);
    XDC_ASSERT_ERR(wan_frame_decode(h, XDC_WAN_MAX_FRAME_PAYLOAD, &g, &d), XDC_ERR_PROTO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "exceeds the bound");
    h[20] ^= 1; /* any flipped bit: the check word no longer matches */
    XDC_ASSERT_ERR(wan_frame_decode(h, XDC_WAN_MAX_FRAME_PAYLOAD, &g, &d), XDC_ERR_PROTO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "check word");
    h[0] = 'H';
    XDC_ASSERT_ERR(wan_frame_decode(h, XDC_WAN_MAX_FRAME_PAYLOAD, &g, &d), XDC_ERR_PROTO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "magic");
}

/* One listener, two peers of different identities: accept() hands out both and says who is who, and
 * each gets its own message. */
XDC_TEST(wan_listener_accepts_several_peers_and_names_them)
{
    wan_test_node us, e0, e1;
    wan_test_issue("pki", "us", 0, 30, 0, &us);
    wan_test_issue("pki", "eu", 0, 30, 0, &e0);
    wan_test_issue("pki", "eu", 1, 30, 0, &e1);
    xdc_wan_engine *se = wan_test_engine(&us, 2, WAIT_MS), *c0 = wan_test_engine(&e0, 2, WAIT_MS),
                   *c1 = wan_test_engine(&e1, 3, WAIT_MS);
    xdc_wan_listener *l;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &l, &d));
    xdc_wan_peer *p0, *p1, *a, *b;
    XDC_ASSERT_OK(xdc_wan_connect(c0, "127.0.0.1", xdc_wan_listener_port(l), "us", 0, &p0, &d));
    XDC_ASSERT_OK(xdc_wan_connect(c1, "localhost", xdc_wan_listener_port(l), NULL, 0, &p1, &d));
    XDC_ASSERT_OK(xdc_wan_accept(l, WAIT_MS, &a, &d));
    XDC_ASSERT_OK(xdc_wan_accept(l, WAIT_MS, &b, &d));
    if (xdc_wan_peer_identity(a)->rank == 1) {
        xdc_wan_peer *t = a;
        a = b;
        b = t;
    }
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(a)->region, "eu") == 0 && xdc_wan_peer_identity(a)->rank == 0);
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(b)->region, "eu") == 0 && xdc_wan_peer_identity(b)->rank == 1);
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(p1, WAIT_MS, &d));
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(p1)->region, "us") == 0); /* learnt from the certificate */
    xdc_wan_stats st;
    xdc_wan_peer_stats(b, &st);
    XDC_ASSERT_EQ(st.streams, 3 + 1); /* the dialler's stream count wins (and its latency stream) */
    char m0[] = "to rank zero", m1[] = "to rank one", r0[32], r1[32];
    xdc_wan_request *q[4];
    XDC_ASSERT_OK(xdc_wan_irecv(p0, XDC_WAN_LATENCY, r0, sizeof r0, &q[0]));
    XDC_ASSERT_OK(xdc_wan_irecv(p1, XDC_WAN_LATENCY, r1, sizeof r1, &q[1]));
    XDC_ASSERT_OK(xdc_wan_isend(a, XDC_WAN_LATENCY, m0, sizeof m0, 0, sizeof m0, &q[2]));
    XDC_ASSERT_OK(xdc_wan_isend(b, XDC_WAN_LATENCY, m1, sizeof m1, 0, sizeof m1, &q[3]));
    for (int i = 0; i < 4; i++) XDC_ASSERT_OK(xdc_wan_wait(q[i], WAIT_MS, NULL, NULL, &d));
    XDC_ASSERT(strcmp(r0, m0) == 0 && strcmp(r1, m1) == 0);
    xdc_wan_listener_close(l);
    xdc_wan_listener_close(NULL);
    xdc_wan_engine_destroy(c0);
    xdc_wan_engine_destroy(c1);
    xdc_wan_engine_destroy(se);
}

/* ---- cancel -------------------------------------------------------------------------------------- */

/* A slow link (100 Mbit/s), a small window (64 frames of 64 KiB in flight) and small socket buffers, so
 * a 12 MiB message takes about a second and is caught half-way, on either side, with streams in the
 * middle of a frame, independently of the kernel's buffer autotuning. */
enum { CANCEL_BIG = 12 << 20, CANCEL_SMALL = 100000 };

static int slow_relay(int port, void *arg)
{
    xdc_wan_relay **r = arg;
    xdc_wan_link_model m = {.rate_mbps = 100, .rtt_ms = 2, .seed = 7};
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", port, &m, r, &d) == XDC_OK, "%s", d.msg);
    return xdc_wan_relay_port(*r);
}

static void slow_pair_open(wan_test_pair *tp, xdc_wan_relay **relay)
{
    xdc_wan_config cfg = wan_test_config(2, WAIT_MS);
    cfg.window_frames = 64;
    cfg.sockbuf_bytes = 32 << 10; /* the socket, not the window, holds a stream back: streams sit mid-frame */
    wan_test_pair_open_cfg(tp, &cfg, slow_relay, relay);
}

/* Read a request's progress under its engine's lock: receive bytes placed, or send bytes framed. */
static uint64_t req_progress(xdc_wan_engine *eng, const xdc_wan_request *r)
{
    pthread_mutex_lock(&eng->mu);
    uint64_t v = r->is_send ? r->framed : r->rx_bytes;
    pthread_mutex_unlock(&eng->mu);
    return v;
}

static int req_state(xdc_wan_engine *eng, const xdc_wan_request *r)
{
    pthread_mutex_lock(&eng->mu);
    int v = r->state;
    pthread_mutex_unlock(&eng->mu);
    return v;
}

/* Poll until some of the request's bytes moved (and not all of them). */
static uint64_t wait_progress(xdc_wan_engine *eng, const xdc_wan_request *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 20000 && (v = req_progress(eng, r)) == 0; i++) usleep(1000);
    XDC_ASSERT_MSG(v > 0, "no byte of the message moved within 20 s");
    return v;
}

XDC_TEST(wan_cancelled_receive_drops_its_buffer_and_the_next_message_arrives_in_order)
{
    xdc_wan_relay *relay = NULL;
    wan_test_pair tp;
    slow_pair_open(&tp, &relay);
    uint8_t *tx0 = xdc_malloc(CANCEL_SMALL), *tx1 = xdc_malloc(CANCEL_BIG), *tx2 = xdc_malloc(CANCEL_SMALL);
    uint8_t *rx0 = xdc_malloc(CANCEL_SMALL), *rx1 = xdc_malloc(CANCEL_BIG), *rx2 = xdc_malloc(CANCEL_SMALL);
    wan_test_fill(tx0, CANCEL_SMALL, 1);
    wan_test_fill(tx1, CANCEL_BIG, 2);
    uint64_t h2 = wan_test_fill(tx2, CANCEL_SMALL, 3);
    xdc_wan_request *r0, *r1, *r2, *s0, *s1, *s2;
    xdc_diag d = {{0}};
    /* Receive 0 is cancelled before its message was even sent; its buffer is freed at once. */
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx0, CANCEL_SMALL, &r0));
    XDC_ASSERT_OK(xdc_wan_request_cancel(r0));
    xdc_free(rx0);
    XDC_ASSERT_ERR(xdc_wan_request_cancel(r0), XDC_ERR_INVALID); /* the handle was given up */
    XDC_ASSERT_ERR(xdc_wan_test(r0, &(int){0}, NULL, NULL, &d), XDC_ERR_INVALID);
    XDC_ASSERT_OK(xdc_wan_request_cancel(NULL));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx1, CANCEL_BIG, &r1));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx2, CANCEL_SMALL, &r2));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx0, CANCEL_SMALL, 0, CANCEL_SMALL, &s0));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx1, CANCEL_BIG, 0, CANCEL_BIG, &s1));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx2, CANCEL_SMALL, 0, CANCEL_SMALL, &s2));
    /* Receive 1 is cancelled half-way through its message; the rest of it must not land in rx1. */
    uint64_t got1 = wait_progress(tp.srv_eng, r1);
    XDC_ASSERT_MSG(got1 < CANCEL_BIG, "message 1 arrived whole before the cancel (%llu bytes)",
                   (unsigned long long)got1);
    XDC_ASSERT_OK(xdc_wan_request_cancel(r1));
    memset(rx1, 0xee, CANCEL_BIG);
    xdc_free(rx1); /* ASan builds catch any later write */
    size_t got = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(r2, WAIT_MS, &got, NULL, &d) == XDC_OK, "recv 2: %s", d.msg);
    XDC_ASSERT_EQ(got, CANCEL_SMALL);
    XDC_ASSERT_MSG(xdc_xxh3(rx2, got) == h2, "message 2 differs");
    /* The sender completes every message: discarded frames are acknowledged all the same. */
    XDC_ASSERT_MSG(xdc_wan_wait(s0, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send 0: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_wait(s1, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send 1: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_wait(s2, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send 2: %s", d.msg);
    xdc_wan_stats st;
    xdc_wan_peer_stats(tp.srv, &st);
    XDC_ASSERT_EQ(st.rx_payload_bytes, CANCEL_SMALL); /* only message 2 was delivered */
    /* Cancel of a completed request releases it. */
    xdc_wan_request *r3, *s3;
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx2, CANCEL_SMALL, &r3));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx2, 10, 0, 10, &s3));
    XDC_ASSERT_OK(xdc_wan_wait(s3, WAIT_MS, NULL, NULL, &d));
    for (int i = 0; i < 20000 && req_state(tp.srv_eng, r3) == WAN_REQ_PENDING; i++) usleep(1000);
    XDC_ASSERT_EQ(req_state(tp.srv_eng, r3), WAN_REQ_DONE);
    XDC_ASSERT_OK(xdc_wan_request_cancel(r3));
    XDC_ASSERT_EQ(req_state(tp.srv_eng, r3), WAN_REQ_FREE);
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
    xdc_free(tx0);
    xdc_free(tx1);
    xdc_free(tx2);
    xdc_free(rx2);
}

/* Semantics of a cancelled send: framed in part, it is still delivered whole and correct (from the
 * engine's copy; the caller's buffer is overwritten and freed right after the cancel); not framed at
 * all, it is withdrawn and the next message takes its place. Never a part. */
XDC_TEST(wan_cancelled_send_is_delivered_whole_or_not_at_all)
{
    xdc_wan_relay *relay = NULL;
    wan_test_pair tp;
    slow_pair_open(&tp, &relay);
    uint8_t *tx1 = xdc_malloc(CANCEL_BIG), *tx2 = xdc_malloc(CANCEL_BIG), *tx3 = xdc_malloc(CANCEL_SMALL);
    uint8_t *rx1 = xdc_malloc(CANCEL_BIG), *rx2 = xdc_malloc(CANCEL_BIG), *rx3 = xdc_malloc(CANCEL_SMALL);
    uint64_t h1 = wan_test_fill(tx1, CANCEL_BIG, 11);
    wan_test_fill(tx2, CANCEL_BIG, 12);
    uint64_t h3 = wan_test_fill(tx3, CANCEL_SMALL, 13);
    xdc_wan_request *r1, *r2, *r3, *s1, *s2, *s3;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx1, CANCEL_BIG, &r1));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx2, CANCEL_BIG, &r2));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx3, CANCEL_SMALL, &r3));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx1, CANCEL_BIG, 1, CANCEL_BIG, &s1));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx2, CANCEL_BIG, 2, CANCEL_BIG, &s2));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx3, CANCEL_SMALL, 3, CANCEL_SMALL, &s3));
    uint64_t framed1 = wait_progress(tp.cli_eng, s1);
    XDC_ASSERT_MSG(framed1 < CANCEL_BIG, "send 1 was framed whole before the cancel");
    XDC_ASSERT_EQ(req_progress(tp.cli_eng, s2), 0);
    XDC_ASSERT_OK(xdc_wan_request_cancel(s1)); /* framed in part: finished from the engine's copy */
    memset(tx1, 0xee, CANCEL_BIG);
    xdc_free(tx1);
    XDC_ASSERT_OK(xdc_wan_request_cancel(s2)); /* not framed: withdrawn */
    memset(tx2, 0xee, CANCEL_BIG);
    xdc_free(tx2);
    size_t got = 0;
    uint8_t codec = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(r1, WAIT_MS, &got, &codec, &d) == XDC_OK, "recv 1: %s", d.msg);
    XDC_ASSERT_EQ(got, CANCEL_BIG);
    XDC_ASSERT_EQ(codec, 1);
    XDC_ASSERT_MSG(xdc_xxh3(rx1, got) == h1, "message 1 differs: cancelled sends must arrive whole and correct");
    XDC_ASSERT_MSG(xdc_wan_wait(r2, WAIT_MS, &got, &codec, &d) == XDC_OK, "recv 2: %s", d.msg);
    XDC_ASSERT_EQ(got, CANCEL_SMALL); /* message 3: the withdrawn message 2 left no trace */
    XDC_ASSERT_EQ(codec, 3);
    XDC_ASSERT_MSG(xdc_xxh3(rx2, got) == h3, "the message after the withdrawn one differs");
    XDC_ASSERT_MSG(xdc_wan_wait(s3, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send 3: %s", d.msg);
    xdc_wan_stats st;
    xdc_wan_peer_stats(tp.cli, &st);
    XDC_ASSERT_EQ(st.tx_payload_bytes, (uint64_t)CANCEL_BIG + CANCEL_SMALL);
    /* Receive 3 waits for message 2, not sent yet: cancelled, it still consumes message 2 when it comes
     * (discarding it), and message 3 goes to the next receive. */
    XDC_ASSERT_OK(xdc_wan_request_cancel(r3));
    xdc_free(rx3);
    uint8_t a[100], b[100], c[100];
    wan_test_fill(a, sizeof a, 14);
    uint64_t hb = wan_test_fill(b, sizeof b, 15);
    xdc_wan_request *rb, *sa, *sb;
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, a, sizeof a, 0, sizeof a, &sa)); /* message 2 */
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, b, sizeof b, 0, sizeof b, &sb)); /* message 3 */
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, c, sizeof c, &rb));
    XDC_ASSERT_MSG(xdc_wan_wait(rb, WAIT_MS, &got, NULL, &d) == XDC_OK, "recv 3: %s", d.msg);
    XDC_ASSERT(got == sizeof b && xdc_xxh3(c, got) == hb);
    XDC_ASSERT_OK(xdc_wan_wait(sa, WAIT_MS, NULL, NULL, &d));
    XDC_ASSERT_OK(xdc_wan_wait(sb, WAIT_MS, NULL, NULL, &d));
    xdc_wan_peer_stats(tp.srv, &st);
    XDC_ASSERT_EQ(st.rx_payload_bytes, (uint64_t)CANCEL_BIG + CANCEL_SMALL + sizeof b);
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
    xdc_free(tx3);
    xdc_free(rx1);
    xdc_free(rx2);
}

/* xdc_wan_peer_close is synchronous: buffers of the peer's requests may be freed as soon as it returns,
 * mid-transfer, on both sides, while both engines keep running. */
XDC_TEST(wan_closed_peer_releases_request_buffers_at_once)
{
    xdc_wan_relay *relay = NULL;
    wan_test_pair tp;
    slow_pair_open(&tp, &relay);
    uint8_t *tx = xdc_malloc(CANCEL_BIG), *rx = xdc_malloc(CANCEL_BIG);
    wan_test_fill(tx, CANCEL_BIG, 21);
    xdc_wan_request *r, *s, *late;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx, CANCEL_BIG, &r));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx, CANCEL_BIG, 0, CANCEL_BIG, &s));
    XDC_ASSERT(wait_progress(tp.srv_eng, r) < CANCEL_BIG);
    xdc_wan_peer_close(tp.srv);
    memset(rx, 0xee, CANCEL_BIG);
    xdc_free(rx);
    xdc_wan_peer_close(tp.cli);
    memset(tx, 0xee, CANCEL_BIG);
    xdc_free(tx);
    usleep(300 * 1000); /* both engines keep polling: nothing may touch the freed buffers */
    int done = 0;
    XDC_ASSERT_ERR(xdc_wan_test(r, &done, NULL, NULL, &d), XDC_ERR_CLOSED);
    XDC_ASSERT_EQ(done, 1);
    XDC_ASSERT_ERR(xdc_wan_test(s, &done, NULL, NULL, &d), XDC_ERR_CLOSED);
    XDC_ASSERT_EQ(done, 1);
    uint8_t one = 0;
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, &one, 1, &late)); /* posted after close: fails at once */
    XDC_ASSERT_ERR(xdc_wan_wait(late, 1000, NULL, NULL, &d), XDC_ERR_CLOSED);
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
}
