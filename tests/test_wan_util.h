/* test_wan_util.h — shared fixtures for the WAN tests: a CA with node certificates in the test's
 * temporary directory, engines built on them, and a connected client/server peer pair on loopback. */
#ifndef XDC_TEST_WAN_UTIL_H
#define XDC_TEST_WAN_UTIL_H

#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

/* Paths of one node's credentials. */
typedef struct wan_test_node {
    char cert[512], key[512], ca[512];
} wan_test_node;

/* Create a CA in DIR (under the test tmpdir, run "testrun") and issue REGION/RANK with the given
 * validity (days, not_before_s relative to now). The CA is created on first use of DIR. */
void wan_test_issue(const char *dir, const char *region, int rank, int days, int64_t not_before_s, wan_test_node *out);
/* The configuration wan_test_engine uses: `streams` streams, small frames (so messages stripe). */
xdc_wan_config wan_test_config(int streams, int64_t deadline_ms);
/* An engine for `node` with `streams` streams and small frames (so messages stripe). */
xdc_wan_engine *wan_test_engine(const wan_test_node *node, int streams, int64_t deadline_ms);
/* An engine for `node` with `cfg` (its credential paths are replaced by the node's). */
xdc_wan_engine *wan_test_engine_cfg(const wan_test_node *node, const xdc_wan_config *cfg);

/* A connected pair: server "us/0" listening on 127.0.0.1, client "eu/0" dialling it. */
typedef struct wan_test_pair {
    xdc_wan_engine *srv_eng, *cli_eng;
    xdc_wan_listener *lis;
    xdc_wan_peer *srv, *cli; /* srv: the server's view of the client; cli: the client's view */
} wan_test_pair;

/* Build the pair; `via_port` > 0 dials that port (a relay in front of the listener) instead. The
 * relay callback, when not NULL, is called with the listener's port before dialling and returns the
 * port to dial. */
void wan_test_pair_open(wan_test_pair *tp, int streams, int64_t deadline_ms, int (*relay)(int port, void *arg),
                        void *arg);
/* The same with both engines built from `cfg` (wan_test_config() and then changed). */
void wan_test_pair_open_cfg(wan_test_pair *tp, const xdc_wan_config *cfg, int (*relay)(int port, void *arg), void *arg);
void wan_test_pair_close(wan_test_pair *tp);

/* Assert what an emulated link must do whatever the machine's load: never deliver faster than `rate_mbps`
 * (5 % for the measurement's own edges) nor sooner than `rtt_ms` (5 %), and still carry traffic (a
 * quarter of the rate, within 3 RTTs + 50 ms). How close the figures come to the model on a quiet
 * machine is for `xdc wan-emu --check` to show on a quiet machine, not for a test to assert. */
void wan_test_assert_shaped(double rtt, double rtt_ms, double rate, double rate_mbps);

/* After a transfer that lived through reconnects: one more message client -> server (bulk,
 * WAN_TEST_TAIL_LEN bytes) arrives whole and first, so nothing extra (a duplicate) waits in front of it. */
#define WAN_TEST_TAIL_LEN 100
void wan_test_send_tail(wan_test_pair *tp, int64_t wait_ms);

/* 30 messages of 200,000 bytes each way at once, received in three slices with outage(arg) called after
 * each of the first two while the rest is in flight; every message arrives whole and once, every send
 * completes, the client reconnected at least 3 times and each side sent and received exactly 30 x 200,000
 * payload bytes. The stats after it in *cli and *srv, for the caller's own checks. */
void wan_test_both_ways_through_outages(wan_test_pair *tp, int64_t wait_ms, void (*outage)(void *arg), void *arg,
                                        xdc_wan_stats *cli, xdc_wan_stats *srv);

/* Fill `buf` with bytes derived from (seed, len) and return their XXH3. */
uint64_t wan_test_fill(uint8_t *buf, size_t len, uint64_t seed);

#endif /* XDC_TEST_WAN_UTIL_H */
