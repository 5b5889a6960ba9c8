/* test_wan_emu.c — the userspace WAN emulator: a relayed link shows the configured RTT (within 10 %)
 * and rate (within 5 %), and an outage cut through the relay's API breaks every stream of a transfer,
 * which still delivers every message exactly once after restore. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"

#include <stdio.h>

#define WAIT_MS 30000

XDC_TEST(wan_emu_measured_rtt_and_rate_match_the_model)
{
    xdc_wan_link_model m = {.rate_mbps = 80, .rtt_ms = 30, .seed = 1};
    double rtt = 0, rate = 0;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_emu_measure(&m, 1.5, &rtt, &rate, &d) == XDC_OK, "%s", d.msg);
    XDC_ASSERT_MSG(fabs(rtt - 30) <= 3.0, "rtt %.2f ms vs 30 ms", rtt);
    XDC_ASSERT_MSG(fabs(rate - 80) <= 4.0, "rate %.2f Mbit/s vs 80 Mbit/s", rate);
}

XDC_TEST(wan_emu_rejects_bad_model)
{
    xdc_wan_link_model m = {.rate_mbps = 10, .rtt_ms = 10, .loss_pct = 100};
    xdc_wan_relay *r = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", 9, &m, &r, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "loss");
    m.loss_pct = 0;
    XDC_ASSERT_ERR(xdc_wan_relay_create("127.0.0.1", 0, "not-an-ip", 9, &m, &r, &d), XDC_ERR_INVALID);
    XDC_ASSERT(r == NULL);
    xdc_wan_relay_destroy(NULL);
}

static int put_relay(int port, void *arg)
{
    xdc_wan_relay **r = arg;
    xdc_wan_link_model m = {.rtt_ms = 4, .jitter_ms = 1, .seed = 3};
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", port, &m, r, &d) == XDC_OK, "%s", d.msg);
    return xdc_wan_relay_port(*r);
}

/* Messages both ways; the relay is cut twice while frames and ACKs are in flight. */
XDC_TEST(wan_emu_outage_mid_transfer_delivers_exactly_once)
{
    enum { N = 30, LEN = 200000 };
    xdc_wan_relay *relay = NULL;
    wan_test_pair tp;
    wan_test_pair_open(&tp, 3, WAIT_MS, put_relay, &relay);
    xdc_wan_peer *from[2] = {tp.cli, tp.srv}, *to[2] = {tp.srv, tp.cli};
    uint8_t *tx[2][N], *rx[2][N];
    uint64_t h[2][N];
    xdc_wan_request *sr[2][N], *rr[2][N];
    xdc_diag d = {{0}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            tx[k][i] = xdc_malloc(LEN);
            rx[k][i] = xdc_calloc(1, LEN);
            h[k][i] = wan_test_fill(tx[k][i], LEN, 77 + (uint64_t)(k * N + i));
            XDC_ASSERT_OK(xdc_wan_isend(from[k], XDC_WAN_BULK, tx[k][i], LEN, 0, LEN, &sr[k][i]));
        }
    uint64_t conns_before = 0;
    xdc_wan_relay_counters(relay, &conns_before, NULL);
    /* Receive in three slices with a cut after each of the first two: the rest is in flight each time. */
    for (int slice = 0; slice < 3; slice++) {
        int lo = slice * N / 3, hi = (slice + 1) * N / 3;
        for (int k = 0; k < 2; k++)
            for (int i = lo; i < hi; i++) XDC_ASSERT_OK(xdc_wan_irecv(to[k], XDC_WAN_BULK, rx[k][i], LEN, &rr[k][i]));
        for (int k = 0; k < 2; k++)
            for (int i = lo; i < hi; i++) {
                size_t got = 0;
                XDC_ASSERT_MSG(xdc_wan_wait(rr[k][i], WAIT_MS, &got, NULL, &d) == XDC_OK, "recv %d/%d: %s", k, i, d.msg);
                XDC_ASSERT_EQ(got, LEN);
                XDC_ASSERT_MSG(xdc_xxh3(rx[k][i], LEN) == h[k][i], "message %d/%d differs", k, i);
            }
        if (slice < 2) {
            xdc_wan_relay_cut(relay); /* every stream is reset while the rest is in flight */
            xdc_wan_relay_restore(relay);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            XDC_ASSERT_MSG(xdc_wan_wait(sr[k][i], WAIT_MS, NULL, NULL, &d) == XDC_OK, "send %d/%d: %s", k, i, d.msg);
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(tp.cli, WAIT_MS, &d));
    uint64_t conns_after = 0;
    xdc_wan_relay_counters(relay, &conns_after, NULL);
    XDC_ASSERT(conns_after >= conns_before + 3); /* every stream redialled */
    xdc_wan_stats st, ss;
    xdc_wan_peer_stats(tp.cli, &st);
    xdc_wan_peer_stats(tp.srv, &ss);
    XDC_ASSERT(st.reconnects >= 3);
    XDC_ASSERT_EQ(ss.rx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(st.rx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(st.tx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(ss.tx_payload_bytes, (uint64_t)N * LEN);
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            xdc_free(tx[k][i]);
            xdc_free(rx[k][i]);
        }
}
