/* test_wan_util.c — fixtures shared by the WAN tests (see test_wan_util.h). */
#include "tests/test_wan_util.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_rng.h"
#include "tests/xdc_test.h"
#include "wan/xdc_wan_certs.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

void wan_test_issue(const char *dir, const char *region, int rank, int days, int64_t not_before_s, wan_test_node *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", xdc_test_tmpdir(), dir);
    mkdir(path, 0700);
    char ca[600];
    snprintf(ca, sizeof ca, "%s/ca.pem", path);
    xdc_diag d = {{0}};
    xdc_wan_cert_opts o = {.dir = path, .run = "testrun", .region = region, .rank = rank, .days = 3650};
    if (access(ca, F_OK) != 0) XDC_ASSERT_MSG(xdc_wan_cert_init_ca(&o, &d) == XDC_OK, "CA: %s", d.msg);
    o.days = days;
    o.not_before_s = not_before_s;
    XDC_ASSERT_MSG(xdc_wan_cert_issue(&o, out->cert, sizeof out->cert, out->key, sizeof out->key, &d) == XDC_OK,
                   "issue %s/%d: %s", region, rank, d.msg);
    snprintf(out->ca, sizeof out->ca, "%s", ca);
}

xdc_wan_config wan_test_config(int streams, int64_t deadline_ms)
{
    xdc_wan_config cfg = XDC_WAN_CONFIG_INIT;
    cfg.streams = streams;
    cfg.frame_bytes = 64 << 10;
    cfg.deadline_ms = deadline_ms;
    cfg.ping_interval_ms = 50;
    return cfg;
}

xdc_wan_engine *wan_test_engine(const wan_test_node *node, int streams, int64_t deadline_ms)
{
    xdc_wan_config cfg = wan_test_config(streams, deadline_ms);
    return wan_test_engine_cfg(node, &cfg);
}

xdc_wan_engine *wan_test_engine_cfg(const wan_test_node *node, const xdc_wan_config *base)
{
    xdc_wan_config cfg = *base;
    cfg.cert_path = node->cert;
    cfg.key_path = node->key;
    cfg.ca_path = node->ca;
    xdc_wan_engine *eng = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_engine_create(&cfg, &eng, &d) == XDC_OK, "engine: %s", d.msg);
    return eng;
}

void wan_test_pair_open(wan_test_pair *tp, int streams, int64_t deadline_ms, int (*relay)(int port, void *arg),
                        void *arg)
{
    xdc_wan_config cfg = wan_test_config(streams, deadline_ms);
    wan_test_pair_open_cfg(tp, &cfg, relay, arg);
}

/* The pairs' credentials for `region`/0, issued by the first pair of the test and shared by the others. */
static void pair_node(const char *region, wan_test_node *out)
{
    snprintf(out->cert, sizeof out->cert, "%s/pki/%s-0.pem", xdc_test_tmpdir(), region);
    snprintf(out->key, sizeof out->key, "%s/pki/%s-0.key", xdc_test_tmpdir(), region);
    snprintf(out->ca, sizeof out->ca, "%s/pki/ca.pem", xdc_test_tmpdir());
    if (access(out->key, F_OK) != 0) wan_test_issue("pki", region, 0, 30, 0, out);
}

void wan_test_pair_open_cfg(wan_test_pair *tp, const xdc_wan_config *cfg, int (*relay)(int port, void *arg), void *arg)
{
    wan_test_node us, eu;
    pair_node("us", &us);
    pair_node("eu", &eu);
    tp->srv_eng = wan_test_engine_cfg(&us, cfg);
    tp->cli_eng = wan_test_engine_cfg(&eu, cfg);
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_listen(tp->srv_eng, "127.0.0.1", 0, &tp->lis, &d) == XDC_OK, "listen: %s", d.msg);
    int port = xdc_wan_listener_port(tp->lis);
    XDC_ASSERT(port > 0);
    if (relay) port = relay(port, arg);
    XDC_ASSERT_OK(xdc_wan_connect(tp->cli_eng, "127.0.0.1", port, "us", 0, &tp->cli, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(tp->cli, 20000, &d) == XDC_OK, "ready: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_accept(tp->lis, 20000, &tp->srv, &d) == XDC_OK, "accept: %s", d.msg);
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(tp->srv)->region, "eu") == 0);
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(tp->cli)->region, "us") == 0);
}

void wan_test_pair_close(wan_test_pair *tp)
{
    xdc_wan_engine_destroy(tp->cli_eng);
    xdc_wan_engine_destroy(tp->srv_eng);
}

uint64_t wan_test_fill(uint8_t *buf, size_t len, uint64_t seed)
{
    xdc_rng r;
    xdc_rng_seed(&r, seed ^ (len * 0x9e3779b97f4a7c15ull));
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = xdc_rng_u64(&r);
        memcpy(buf + i, &v, 8);
    }
    for (; i < len; i++) buf[i] = (uint8_t)xdc_rng_u64(&r);
    return xdc_xxh3(buf, len);
}

void wan_test_assert_shaped(double rtt, double rtt_ms, double rate, double rate_mbps)
{
    XDC_ASSERT_MSG(rtt >= 0.95 * rtt_ms && rtt <= 3 * rtt_ms + 50, "rtt %.2f ms vs %.2f ms", rtt, rtt_ms);
    XDC_ASSERT_MSG(rate <= 1.05 * rate_mbps && rate >= 0.25 * rate_mbps, "rate %.2f Mbit/s vs %.2f Mbit/s", rate,
                   rate_mbps);
}

void wan_test_send_tail(wan_test_pair *tp, int64_t wait_ms)
{
    uint8_t tail_tx[WAN_TEST_TAIL_LEN], tail_rx[WAN_TEST_TAIL_LEN];
    uint64_t th = wan_test_fill(tail_tx, sizeof tail_tx, 5);
    xdc_wan_request *ts, *tr;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(tp->srv, XDC_WAN_BULK, tail_rx, sizeof tail_rx, &tr));
    XDC_ASSERT_OK(xdc_wan_isend(tp->cli, XDC_WAN_BULK, tail_tx, sizeof tail_tx, 0, sizeof tail_tx, &ts));
    size_t got = 0;
    XDC_ASSERT_OK(xdc_wan_wait(tr, wait_ms, &got, NULL, &d));
    XDC_ASSERT_EQ(got, sizeof tail_tx);
    XDC_ASSERT(xdc_xxh3(tail_rx, got) == th);
    XDC_ASSERT_OK(xdc_wan_wait(ts, wait_ms, NULL, NULL, &d));
}

void wan_test_both_ways_through_outages(wan_test_pair *tp, int64_t wait_ms, void (*outage)(void *arg), void *arg,
                                        xdc_wan_stats *cli, xdc_wan_stats *srv)
{
    enum { N = 30, LEN = 200000 };
    xdc_wan_peer *from[2] = {tp->cli, tp->srv}, *to[2] = {tp->srv, tp->cli};
    uint8_t *tx[2][N], *rx[2][N]; /* (direction, message) LEN bytes each */
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
    for (int slice = 0; slice < 3; slice++) {
        int lo = slice * N / 3, hi = (slice + 1) * N / 3;
        for (int k = 0; k < 2; k++)
            for (int i = lo; i < hi; i++) XDC_ASSERT_OK(xdc_wan_irecv(to[k], XDC_WAN_BULK, rx[k][i], LEN, &rr[k][i]));
        for (int k = 0; k < 2; k++)
            for (int i = lo; i < hi; i++) {
                size_t got = 0;
                XDC_ASSERT_MSG(xdc_wan_wait(rr[k][i], wait_ms, &got, NULL, &d) == XDC_OK, "recv %d/%d: %s", k, i,
                               d.msg);
                XDC_ASSERT_EQ(got, LEN);
                XDC_ASSERT_MSG(xdc_xxh3(rx[k][i], LEN) == h[k][i], "message %d/%d differs", k, i);
            }
        if (slice < 2) outage(arg);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            XDC_ASSERT_MSG(xdc_wan_wait(sr[k][i], wait_ms, NULL, NULL, &d) == XDC_OK, "send %d/%d: %s", k, i, d.msg);
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(tp->cli, wait_ms, &d));
    xdc_wan_peer_stats(tp->cli, cli);
    xdc_wan_peer_stats(tp->srv, srv);
    XDC_ASSERT(cli->reconnects >= 3);
    XDC_ASSERT_EQ(srv->rx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(cli->rx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(cli->tx_payload_bytes, (uint64_t)N * LEN);
    XDC_ASSERT_EQ(srv->tx_payload_bytes, (uint64_t)N * LEN);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            xdc_free(tx[k][i]);
            xdc_free(rx[k][i]);
        }
}
