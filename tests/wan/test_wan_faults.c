/* test_wan_faults.c — the WAN transport's recovery, in one process, on the fault I/O layer (wan/wan_fault.h)
 * instead of relays or sockets shut down behind the engine's back: a reset in the middle of a frame
 * resends from the last acknowledgement and delivers every message exactly once; an outage that resets
 * every stream of both sides and refuses the next dials loses nothing either way; a stalled or
 * black-holed link ends in named errors (which peer, how long silent, what was last heard); a delayed
 * direction is neither a failure nor a reason to resend. Contents are checked by hash, byte counts exactly. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "wan/wan_fault.h"
#include "wan/wan_priv.h"

#include <stdio.h>
#include <string.h>

#define WAIT_MS 30000

/* A connected pair whose engines put a fault layer in every connection (pass-through until armed). */
static void fault_pair_open(wan_test_pair *tp, int streams, int64_t deadline_ms)
{
    wan_test_node us, eu;
    wan_test_issue("pki", "us", 0, 30, 0, &us);
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    tp->srv_eng = wan_test_engine(&us, streams, deadline_ms);
    tp->cli_eng = wan_test_engine(&eu, streams, deadline_ms);
    wan_fault_enable(tp->srv_eng);
    wan_fault_enable(tp->cli_eng);
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_listen(tp->srv_eng, "127.0.0.1", 0, &tp->lis, &d) == XDC_OK, "listen: %s", d.msg);
    XDC_ASSERT_OK(xdc_wan_connect(tp->cli_eng, "127.0.0.1", xdc_wan_listener_port(tp->lis), "us", 0, &tp->cli, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(tp->cli, 20000, &d) == XDC_OK, "ready: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_accept(tp->lis, 20000, &tp->srv, &d) == XDC_OK, "accept: %s", d.msg);
}

/* Why the peer's last stream went down, read under its engine's lock. */
static void last_stream_error(xdc_wan_peer *p, char *out, size_t cap)
{
    pthread_mutex_lock(&p->eng->mu);
    snprintf(out, cap, "%s", p->last_err);
    pthread_mutex_unlock(&p->eng->mu);
}

static wan_fault one_way(int dir, int kind, uint64_t at_bytes, int delay_ms)
{
    wan_fault f = {0};
    f.dir[dir] = (wan_fault_dir){.kind = kind, .at_bytes = at_bytes, .delay_ms = delay_ms};
    return f;
}

/* In-process twin of wan_stream_killed_mid_transfer_delivers_exactly_once: the same transfer and the same
 * assertions, the stream cut by the fault layer in the middle of a frame instead of by shutdown(2), and
 * besides: the frame cut in half was sent again, and the stream's error says what happened. */
XDC_TEST(wan_faults_reset_mid_frame_resends_from_the_last_ack)
{
    enum { N = 40, LEN = 300000 };
    wan_test_pair tp;
    fault_pair_open(&tp, 4, WAIT_MS);
    uint8_t *tx[N], *rx[N];
    uint64_t h[N];
    xdc_wan_request *sreq[N], *rreq[N];
    xdc_diag d = {{0}};
    for (int i = 0; i < N; i++) {
        tx[i] = xdc_malloc(LEN);
        rx[i] = xdc_calloc(1, LEN);
        h[i] = wan_test_fill(tx[i], LEN, 1000 + (uint64_t)i);
        XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, tx[i], LEN, 0, LEN, &sreq[i]));
    }
    /* Receive the first ten, so the rest sit in flight (window) waiting for receives. */
    for (int i = 0; i < 10; i++) XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx[i], LEN, &rreq[i]));
    XDC_ASSERT_MSG(xdc_wan_wait(rreq[9], WAIT_MS, NULL, NULL, &d) == XDC_OK, "%s", d.msg);
    rreq[9] = NULL;
    /* The rest was written into the sockets already (the window is far larger than the transfer), so the
     * cut comes on the reading side: 100000 bytes from now the server's stream 2 is reset, 64 KiB frames,
     * so in the middle of the second one, and what the client had written behind it is lost with it. */
    wan_fault cut = one_way(WAN_FAULT_RX, WAN_FAULT_RESET, 100000, 0);
    XDC_ASSERT_OK(wan_fault_arm(tp.srv, 2, &cut));
    for (int i = 10; i < N; i++) XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx[i], LEN, &rreq[i]));
    for (int i = 0; i < N; i++) {
        size_t got = LEN;
        if (i != 9) XDC_ASSERT_MSG(xdc_wan_wait(rreq[i], WAIT_MS, &got, NULL, &d) == XDC_OK, "recv %d: %s", i, d.msg);
        XDC_ASSERT_EQ(got, LEN);
        XDC_ASSERT_MSG(xdc_xxh3(rx[i], LEN) == h[i], "message %d differs", i);
        XDC_ASSERT_MSG(xdc_wan_wait(sreq[i], WAIT_MS, NULL, NULL, &d) == XDC_OK, "send %d: %s", i, d.msg);
    }
    wan_test_send_tail(&tp, WAIT_MS);
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(tp.cli, WAIT_MS, &d));
    xdc_wan_stats st, ss;
    xdc_wan_peer_stats(tp.cli, &st);
    xdc_wan_peer_stats(tp.srv, &ss);
    XDC_ASSERT(st.reconnects >= 1);
    XDC_ASSERT_EQ(st.streams_up, 4 + 1);
    XDC_ASSERT_MSG(st.retransmit_frames >= 1, "the frame cut in half was not sent again");
    XDC_ASSERT_EQ(ss.rx_payload_bytes, (uint64_t)N * LEN + WAN_TEST_TAIL_LEN);
    XDC_ASSERT_EQ(st.tx_payload_bytes, (uint64_t)N * LEN + WAN_TEST_TAIL_LEN);
    char why[256];
    last_stream_error(tp.srv, why, sizeof why);
    XDC_ASSERT_STR_CONTAINS(why, "stream 2: connection reset by the fault layer (rx, after 100000 bytes)");
    wan_test_pair_close(&tp);
    for (int i = 0; i < N; i++) {
        xdc_free(tx[i]);
        xdc_free(rx[i]);
    }
}

/* In-process twin of wan_emu_outage_mid_transfer_delivers_exactly_once (the same transfer and assertions,
 * wan_test_both_ways_through_outages): the outage lasts several redials. Besides: both sides resent.
 * Each outage: every stream of both sides reset at its next byte either way, and the client's next three
 * dials cut in their handshake. */
static void fault_outage(void *arg)
{
    wan_test_pair *tp = arg;
    wan_fault reset = {.dir = {{.kind = WAN_FAULT_RESET}, {.kind = WAN_FAULT_RESET}}};
    wan_fault_next_dials(tp->cli_eng, 3, &reset);
    XDC_ASSERT_OK(wan_fault_arm(tp->cli, -1, &reset));
    XDC_ASSERT_OK(wan_fault_arm(tp->srv, -1, &reset));
}

XDC_TEST(wan_faults_outage_both_ways_resends_and_loses_nothing)
{
    wan_test_pair tp;
    fault_pair_open(&tp, 3, WAIT_MS);
    xdc_wan_stats st, ss;
    wan_test_both_ways_through_outages(&tp, WAIT_MS, fault_outage, &tp, &st, &ss);
    XDC_ASSERT_MSG(st.retransmit_frames >= 1 && ss.retransmit_frames >= 1, "resent: client %llu, server %llu frames",
                   (unsigned long long)st.retransmit_frames, (unsigned long long)ss.retransmit_frames);
    char why[256];
    last_stream_error(tp.cli, why, sizeof why);
    XDC_ASSERT_STR_CONTAINS(why, "connection reset by the fault layer");
    wan_test_pair_close(&tp);
}

/* Nothing more arrives on any stream (TCP alive, the path dead): the pending requests fail once the
 * deadline passed, naming the peer, how long it was silent, and what was heard last. */
XDC_TEST(wan_faults_stalled_link_fails_by_deadline_naming_the_peer)
{
    wan_test_pair tp;
    fault_pair_open(&tp, 2, 400);
    uint8_t buf[64] = {0}, rx[64];
    xdc_wan_request *r, *s;
    wan_fault stall = one_way(WAN_FAULT_RX, WAN_FAULT_STALL, 0, 0);
    XDC_ASSERT_OK(wan_fault_arm(tp.cli, -1, &stall));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.cli, XDC_WAN_BULK, rx, sizeof rx, &r));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_LATENCY, buf, sizeof buf, 0, sizeof buf, &s));
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_wait(r, WAIT_MS, NULL, NULL, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/0");
    XDC_ASSERT_STR_CONTAINS(d.msg, "silent for");
    XDC_ASSERT_STR_CONTAINS(d.msg, "last heard");
    /* The send's ACK could not be read either: it fails the same way rather than report success. */
    XDC_ASSERT_ERR(xdc_wan_wait(s, WAIT_MS, NULL, NULL, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/0");
    wan_test_pair_close(&tp);
}

/* Everything the client writes vanishes (a black hole): the server's receive fails by its deadline naming
 * the silent client, and the client's send, never acknowledged, is not reported delivered: it fails
 * naming the server (its session is gone when the client reconnects, or the deadline passes first). */
XDC_TEST(wan_faults_black_hole_fails_both_sides_with_named_errors)
{
    wan_test_pair tp;
    fault_pair_open(&tp, 2, 400);
    uint8_t buf[1000], rx[1000];
    wan_test_fill(buf, sizeof buf, 9);
    xdc_wan_request *r, *s;
    wan_fault drop = one_way(WAN_FAULT_TX, WAN_FAULT_DROP, 0, 0);
    XDC_ASSERT_OK(wan_fault_arm(tp.cli, -1, &drop));
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, rx, sizeof rx, &r));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, buf, sizeof buf, 0, sizeof buf, &s));
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_wait(r, WAIT_MS, NULL, NULL, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer eu/0");
    XDC_ASSERT_STR_CONTAINS(d.msg, "silent for");
    xdc_err_t rc = xdc_wan_wait(s, WAIT_MS, NULL, NULL, &d);
    XDC_ASSERT_MSG(rc == XDC_ERR_PEER_LOST || rc == XDC_ERR_TIMEOUT, "send ended with %s: %s", xdc_strerror(rc), d.msg);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/0");
    wan_test_pair_close(&tp);
}

/* Each direction of every stream holds still for 60 ms in the middle of the transfer: every message
 * arrives intact, and a delay is neither a broken stream nor a reason to send anything twice. */
XDC_TEST(wan_faults_delay_is_neither_a_failure_nor_a_resend)
{
    enum { N = 8, LEN = 150000 };
    wan_test_pair tp;
    fault_pair_open(&tp, 2, WAIT_MS);
    wan_fault slow = {.dir = {{.kind = WAN_FAULT_DELAY, .at_bytes = 70000, .delay_ms = 60},
                              {.kind = WAN_FAULT_DELAY, .at_bytes = 90000, .delay_ms = 60}}};
    XDC_ASSERT_OK(wan_fault_arm(tp.cli, -1, &slow));
    XDC_ASSERT_OK(wan_fault_arm(tp.srv, -1, &slow));
    uint8_t *tx[N], *rx[N];
    uint64_t h[N];
    xdc_wan_request *sr[N], *rr[N];
    xdc_diag d = {{0}};
    for (int i = 0; i < N; i++) {
        tx[i] = xdc_malloc(LEN);
        rx[i] = xdc_calloc(1, LEN);
        h[i] = wan_test_fill(tx[i], LEN, 300 + (uint64_t)i);
        xdc_wan_class cls = i % 2 ? XDC_WAN_BULK : XDC_WAN_LATENCY;
        XDC_ASSERT_OK(xdc_wan_irecv(i < N / 2 ? tp.srv : tp.cli, cls, rx[i], LEN, &rr[i]));
        XDC_ASSERT_OK(xdc_wan_isend(i < N / 2 ? tp.cli : tp.srv, cls, tx[i], LEN, 0, LEN, &sr[i]));
    }
    for (int i = 0; i < N; i++) {
        size_t got = 0;
        XDC_ASSERT_MSG(xdc_wan_wait(rr[i], WAIT_MS, &got, NULL, &d) == XDC_OK, "recv %d: %s", i, d.msg);
        XDC_ASSERT_EQ(got, LEN);
        XDC_ASSERT_MSG(xdc_xxh3(rx[i], LEN) == h[i], "message %d differs", i);
        XDC_ASSERT_MSG(xdc_wan_wait(sr[i], WAIT_MS, NULL, NULL, &d) == XDC_OK, "send %d: %s", i, d.msg);
    }
    xdc_wan_stats st, ss;
    xdc_wan_peer_stats(tp.cli, &st);
    xdc_wan_peer_stats(tp.srv, &ss);
    XDC_ASSERT_EQ(st.reconnects + ss.reconnects, 0);
    XDC_ASSERT_EQ(st.retransmit_frames + ss.retransmit_frames, 0);
    XDC_ASSERT_EQ(st.duplicate_frames + ss.duplicate_frames, 0);
    XDC_ASSERT_EQ(ss.rx_payload_bytes, (uint64_t)N / 2 * LEN);
    XDC_ASSERT_EQ(st.rx_payload_bytes, (uint64_t)N / 2 * LEN);
    wan_test_pair_close(&tp);
    for (int i = 0; i < N; i++) {
        xdc_free(tx[i]);
        xdc_free(rx[i]);
    }
}
