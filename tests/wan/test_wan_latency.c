/* test_wan_latency.c — the latency class beside bulk traffic, through an emulated link at a low rate:
 * an activation queued while a large bulk message streams in 1 MiB frames arrives before that message
 * completes, with (almost) no bulk bytes written between its isend and its departure; and a bulk message
 * nobody posted a receive for holds neither a latency message's delivery nor its acknowledgement.
 * The first test also prints an activation's delay on the loaded link against the idle link and one
 * bulk frame's transmission time (a measurement, not asserted: docs/wan.md, "Traffic classes"). */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_time.h"
#include "wan/emu/xdc_wan_emu.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS   20000
#define RATE_MBPS 50.0
#define FRAME     (1u << 20) /* bulk frame payload: the transport's default */
#define SMALL     16384      /* one TLS record: "one small frame" */
#define N_ACT     5

static int put_slow_relay(int port, void *arg)
{
    xdc_wan_relay **r = arg;
    xdc_wan_link_model m = {.rate_mbps = RATE_MBPS, .rtt_ms = 10, .seed = 7};
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", port, &m, r, &d) == XDC_OK, "%s", d.msg);
    return xdc_wan_relay_port(*r);
}

static xdc_wan_config slow_link_config(void)
{
    xdc_wan_config cfg = wan_test_config(2, WAIT_MS);
    cfg.frame_bytes = FRAME;
    cfg.sockbuf_bytes = 256 << 10; /* keep most of the bulk message in the engine, not in kernel buffers */
    return cfg;
}

/* Send one activation and wait for its receive; returns the seconds from isend to delivery. */
static double one_activation(wan_test_pair *tp, uint8_t *tx, uint8_t *rx, size_t len, uint64_t seed)
{
    uint64_t h = wan_test_fill(tx, len, seed);
    xdc_wan_request *rr, *sr;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(tp->srv, XDC_WAN_LATENCY, rx, len, &rr));
    uint64_t t0 = xdc_now_ns();
    XDC_ASSERT_OK(xdc_wan_isend(tp->cli, XDC_WAN_LATENCY, tx, len, 0, len, &sr));
    size_t got = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(rr, WAIT_MS, &got, NULL, &d) == XDC_OK, "activation: %s", d.msg);
    double secs = (double)(xdc_now_ns() - t0) / 1e9;
    XDC_ASSERT_EQ(got, len);
    XDC_ASSERT_MSG(xdc_xxh3(rx, got) == h, "activation %llu corrupted", (unsigned long long)seed);
    XDC_ASSERT_MSG(xdc_wan_wait(sr, WAIT_MS, NULL, NULL, &d) == XDC_OK, "activation send: %s", d.msg);
    return secs;
}

/* The bulk request `r` is still pending (it completed after the activations, or not yet). */
static void assert_pending(xdc_wan_request *r)
{
    int done = 0;
    XDC_ASSERT_OK(xdc_wan_test(r, &done, NULL, NULL, NULL));
    XDC_ASSERT_MSG(!done, "the bulk message completed before the activations were through");
}

XDC_TEST_T(wan_activation_departs_ahead_of_streaming_bulk, 120)
{
    enum { BIG = 24u << 20, ACT = 64u << 10 }; /* bytes: 4 s of bulk at 50 Mbit/s; one activation */
    xdc_wan_relay *relay = NULL;
    xdc_wan_config cfg = slow_link_config();
    wan_test_pair tp;
    wan_test_pair_open_cfg(&tp, &cfg, put_slow_relay, &relay);
    uint8_t *bulk = xdc_malloc(BIG), *bulk_rx = xdc_malloc(BIG), *act = xdc_malloc(ACT), *act_rx = xdc_malloc(ACT);
    XDC_ASSERT(bulk && bulk_rx && act && act_rx);
    uint64_t hb = wan_test_fill(bulk, BIG, 1);
    xdc_diag d = {{0}};

    /* The idle link first: what an activation takes with nothing else on it. */
    double idle = 1e9;
    for (int i = 0; i < N_ACT; i++) {
        double t = one_activation(&tp, act, act_rx, ACT, 100 + (uint64_t)i);
        if (t < idle) idle = t;
    }

    xdc_wan_request *sb, *rb;
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, bulk_rx, BIG, &rb));
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, bulk, BIG, 0, BIG, &sb));
    /* Let the bulk message stream: bounded wait for its first frames to reach the receiver's side. */
    xdc_wan_stats st;
    for (int i = 0; i < 10000; i++) {
        xdc_wan_peer_stats(tp.cli, &st);
        if (st.tx_wire_bytes >= 2u * FRAME) break;
        usleep(1000);
    }
    XDC_ASSERT_MSG(st.tx_wire_bytes >= 2u * FRAME, "bulk did not start: %llu bytes written",
                   (unsigned long long)st.tx_wire_bytes);

    double loaded[N_ACT], worst = 0, sum = 0;
    for (int i = 0; i < N_ACT; i++) {
        xdc_wan_peer_stats(tp.cli, &st);
        /* The bulk message still has bytes the engine has not written: it is streaming, not finished. */
        XDC_ASSERT_MSG(st.tx_wire_bytes < (uint64_t)BIG, "bulk all written before activation %d", i);
        loaded[i] = one_activation(&tp, act, act_rx, ACT, 200 + (uint64_t)i);
        assert_pending(rb); /* each activation arrived before the bulk message completed */
        if (loaded[i] > worst) worst = loaded[i];
        sum += loaded[i];
    }
    xdc_wan_peer_stats(tp.cli, &st);
    XDC_ASSERT_MSG(st.latency_bulk_ahead_bytes <= SMALL,
                   "%llu bulk bytes were written between an activation's isend and its departure",
                   (unsigned long long)st.latency_bulk_ahead_bytes);

    size_t got = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(rb, 60000, &got, NULL, &d) == XDC_OK, "bulk: %s", d.msg);
    XDC_ASSERT(got == BIG && xdc_xxh3(bulk_rx, got) == hb);
    XDC_ASSERT_OK(xdc_wan_wait(sb, WAIT_MS, NULL, NULL, &d));

    double frame_s = (double)FRAME * 8 / (RATE_MBPS * 1e6);
    printf("activation of %u KiB on a %.0f Mbit/s, 10 ms link, 2 bulk streams busy with %u KiB frames: idle %.1f ms,"
           " loaded mean %.1f ms, worst %.1f ms (extra %.1f ms mean, %.1f ms worst); one bulk frame takes %.1f ms;"
           " bulk bytes written ahead of an activation: %llu\n",
           ACT >> 10, RATE_MBPS, FRAME >> 10, idle * 1e3, sum / N_ACT * 1e3, worst * 1e3, (sum / N_ACT - idle) * 1e3,
           (worst - idle) * 1e3, frame_s * 1e3, (unsigned long long)st.latency_bulk_ahead_bytes);
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
    xdc_free(bulk);
    xdc_free(bulk_rx);
    xdc_free(act);
    xdc_free(act_rx);
}

/* The receiver posts no bulk receive: the bulk streams stop at the first bulk frame, and latency messages
 * (and their acknowledgements) still go through, more than one. Then the bulk receive is posted and the
 * bulk message arrives whole. */
XDC_TEST_T(wan_bulk_without_receive_does_not_hold_latency, 60)
{
    enum { BIG = 4u << 20, ACT = 100000 };
    xdc_wan_relay *relay = NULL;
    xdc_wan_config cfg = slow_link_config();
    wan_test_pair tp;
    wan_test_pair_open_cfg(&tp, &cfg, put_slow_relay, &relay);
    uint8_t *bulk = xdc_malloc(BIG), *bulk_rx = xdc_malloc(BIG), *act = xdc_malloc(ACT), *act_rx = xdc_malloc(ACT);
    XDC_ASSERT(bulk && bulk_rx && act && act_rx);
    uint64_t hb = wan_test_fill(bulk, BIG, 3);
    xdc_wan_request *sb, *rb;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_isend(tp.cli, XDC_WAN_BULK, bulk, BIG, 0, BIG, &sb));
    for (int i = 0; i < 3; i++) {
        one_activation(&tp, act, act_rx, ACT, 300 + (uint64_t)i); /* delivered and acknowledged */
        assert_pending(sb);
    }
    xdc_wan_stats st;
    xdc_wan_peer_stats(tp.srv, &st);
    XDC_ASSERT_EQ(st.rx_payload_bytes, 3u * ACT); /* only the activations arrived */
    XDC_ASSERT_OK(xdc_wan_irecv(tp.srv, XDC_WAN_BULK, bulk_rx, BIG, &rb));
    size_t got = 0;
    XDC_ASSERT_MSG(xdc_wan_wait(rb, WAIT_MS, &got, NULL, &d) == XDC_OK, "bulk: %s", d.msg);
    XDC_ASSERT(got == BIG && xdc_xxh3(bulk_rx, got) == hb);
    XDC_ASSERT_OK(xdc_wan_wait(sb, WAIT_MS, NULL, NULL, &d));
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
    xdc_free(bulk);
    xdc_free(bulk_rx);
    xdc_free(act);
    xdc_free(act_rx);
}
