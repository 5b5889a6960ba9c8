/* test_quorum_host.c — the store host's decisions (orch_quorum.h) alone, against the built-in store over
 * loopback TLS, the regions' arrivals written into the store as workers post them:
 * - DiLoCo's "nobody waits" (orch_quorum_pace): with a round's budget and each region's slowdown, the host
 *   publishes the first round's inner-step counts at once and the next round's with each quorum decision, a
 *   region out of the round counted 0; the rdzv key module's value round-trips;
 * - the longer wait for a region in its first round after the one that took it back (orch_quorum_init's
 *   back_ms): the joiner receives the whole state before it trains its first period, a transfer that may
 *   outlast the grace window; with the grace alone it was dropped again at every return (seen in bench-chaos
 *   over 5 Mbit/s links). Its second round has the plain grace window again, and so has a first round after a
 *   region that sent it the state left; and no region is taken back at the run's last round (orch_quorum's
 *   last_round), whose end would wait for a joiner that trains nothing more;
 * - elastic.grace_min (orch_quorum_spread): a late region dropped at the rounds' arrival spread once 2 rounds
 *   formed it, the longer window in a first round back kept, and the window's clock not started by a region
 *   catching up (it arrives at once, a round before the members);
 * - a late region whose worker answers on the store waited on past the window, a silent one not;
 * - DiLoCo's train_while_waiting (orch_quorum's ran): the inner steps each member region's arrival says it ran
 *   while the round waited, published as ran/<step> before the decision, 0 for a region out of the round. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_time.h"
#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "topology/xdc_topology.h"

#include <string.h>
#include <time.h>

#define TOPO3 "examples/topology/demo-3region.yaml"

/* The host of demo-3region's rounds: its topology, and the built-in store on a loopback engine. */
typedef struct {
    wan_test_node node;
    xdc_wan_engine *eng;
    xdc_topology *t;
    rdzv_server *srv;
} host3;

static void host3_open(host3 *h)
{
    static const char *const names[3] = {"us-east/east-node1:0", "eu-west/west-node1:0", "ap-south/south-node1:0"};
    wan_test_issue("certs", RDZV_SERVER_REGION, 0, 30, -60, &h->node);
    h->eng = wan_test_engine(&h->node, 1, 10000);
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(TOPO3, &h->t, &errs));
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(h->eng, "127.0.0.1", 0, names, 3, &h->srv, &d));
}

static void host3_close(host3 *h)
{
    rdzv_server_destroy(h->srv);
    xdc_wan_engine_destroy(h->eng);
    xdc_topology_destroy(h->t);
}

/* host3_open, and a quorum over its regions that drops a region not there within a 1 ms grace window. */
static void host3_quorum(host3 *h, orch_quorum *q)
{
    host3_open(h);
    orch_quorum_init(q, h->t, h->srv, 2, 1, 0, 600000);
}

/* Tick the host until quorum/<step> is published or `ms` passed; 1 with its value in val[RDZV_VALUE_MAX]. */
static int decided(orch_quorum *q, rdzv_server *srv, long long step, int ms, char *val)
{
    char why[512] = "";
    uint64_t end = xdc_deadline_ms(ms);
    while (rdzv_server_get(srv, rdzv_key_quorum(step).s, val, RDZV_VALUE_MAX) != 0) {
        if (xdc_deadline_passed(end)) return 0;
        XDC_ASSERT_OK(orch_quorum_tick(q, why, sizeof why));
        nanosleep(&(struct timespec){0, 1000000L}, NULL); /* a tick a millisecond, as a host ticks (not a wait) */
    }
    return 1;
}

/* Regions 0 .. n-1 arrive at `step` after posting that they summed those n in the round before it (`prev`, < 0:
 * none). */
static void regions_arrive(rdzv_server *srv, int n, long long prev, long long step)
{
    const uint8_t got[3] = {1, 1, n > 2};
    for (int r = 0; r < n; r++) {
        if (prev >= 0) rdzv_server_set(srv, rdzv_key_xchg(r, 0).s, rdzv_val_xchg(prev, got, 3).s);
        rdzv_server_set(srv, rdzv_key_outer(r, 0).s, rdzv_val_round(step).s);
    }
}

XDC_TEST_T(quorum_pace_counts_each_rounds_inner_steps, 30)
{
    host3 host;
    orch_quorum q;
    host3_quorum(&host, &q);
    rdzv_server *srv = host.srv;
    /* A budget of 10 inner steps: a region 3x slower runs 3, one 2.5x slower 4. */
    const double slowdown[3] = {1.0, 3.0, 2.5};
    orch_quorum_pace(&q, 10, slowdown);
    char val[RDZV_VALUE_MAX] = "";
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_steps(0).s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, "10,3,4") == 0, "got '%s', expected 10,3,4", val);
    int h[3];
    XDC_ASSERT_OK(rdzv_val_steps_parse(val, 3, h));
    XDC_ASSERT_MSG(h[0] == 10 && h[1] == 3 && h[2] == 4, "parsed %d,%d,%d", h[0], h[1], h[2]);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,3", 3, h), XDC_ERR_PROTO);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,3,4,1", 3, h), XDC_ERR_PROTO);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,-3,4", 3, h), XDC_ERR_PROTO);
    rdzv_key_parts parts;
    XDC_ASSERT_OK(rdzv_key_parse(rdzv_key_steps(10).s, &parts));
    XDC_ASSERT_MSG(parts.kind == RDZV_KIND_STEPS && parts.num == 10, "steps/10 parsed as kind %d, step %lld",
                   (int)parts.kind, parts.num);
    /* Two regions arrive at the round at step 10, the third never does: the round goes on without it, and the
     * next round's counts leave it out. */
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, "10");
    rdzv_server_set(srv, rdzv_key_outer(1, 0).s, "10");
    XDC_ASSERT(decided(&q, srv, 10, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "110") == 0, "got '%s', expected 110", val);
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_steps(10).s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, "10,3,0") == 0, "got '%s', expected 10,3,0", val);
    host3_close(&host);
}

/* The round at `step` is decided as `quorum` and ran/<step> says `ran`. */
static void decided_with_ran(orch_quorum *q, rdzv_server *srv, long long step, const char *quorum, const char *ran)
{
    char val[RDZV_VALUE_MAX] = "";
    XDC_ASSERT(decided(q, srv, step, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, quorum) == 0, "round %lld: got '%s', expected %s", step, val, quorum);
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_ran(step).s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, ran) == 0, "ran/%lld is '%s', expected %s", step, val, ran);
}

XDC_TEST_T(quorum_counts_the_steps_members_ran_while_the_round_waited, 30)
{
    host3 host;
    orch_quorum q;
    host3_quorum(&host, &q);
    rdzv_server *srv = host.srv;
    q.ran = 1;
    /* us-east arrived first and ran 7 inner steps since, ap-south 2; eu-west arrived last, plainly */
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, rdzv_val_arrival(6, RDZV_ARRIVE, 7).s);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_arrival(6, RDZV_ARRIVE, 2).s);
    rdzv_server_set(srv, rdzv_key_outer(1, 0).s, rdzv_val_arrival(6, RDZV_ARRIVE, 0).s);
    decided_with_ran(&q, srv, 6, "111", "7,0,2");
    /* At the next round ap-south never comes: out of the round, it counts 0 whatever it posted last. */
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, rdzv_val_arrival(12, RDZV_ARRIVE, 1).s);
    rdzv_server_set(srv, rdzv_key_outer(1, 0).s, rdzv_val_arrival(12, RDZV_ARRIVE, 4).s);
    decided_with_ran(&q, srv, 12, "110", "1,4,0");
    host3_close(&host);
}

XDC_TEST_T(quorum_waits_longer_for_a_region_in_its_first_round_back, 30)
{
    host3 host;
    host3_open(&host);
    rdzv_server *srv = host.srv;
    orch_quorum q;
    orch_quorum_init(&q, host.t, srv, 2, 1, 600000, 600000); /* 1 ms of grace; 10 min more in a first round back */
    char why[512] = "", val[RDZV_VALUE_MAX];
    XDC_ASSERT_OK(orch_quorum_lose(&q, 2, "its agent exited", why, sizeof why));
    /* ap-south's restarted worker asks to rejoin; the round at step 10 takes it back. */
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_join("n1", 0).s);
    regions_arrive(srv, 2, -1, 10);
    XDC_ASSERT(decided(&q, srv, 10, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "11j") == 0, "round 10: got '%s', expected 11j", val);
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_rejoin("n1").s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, "10") == 0, "rejoin/n1 = '%s', expected 10", val);
    /* Its first round: the two members are there, ap-south is still taking the state, and 200 ms (200 grace
     * windows) later the round is still waiting for it; it arrives and is in the round. */
    regions_arrive(srv, 2, 10, 20);
    XDC_ASSERT_MSG(!decided(&q, srv, 20, 200, val), "round 20 decided without the returning region: '%s'", val);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_round(20).s);
    XDC_ASSERT(decided(&q, srv, 20, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "111") == 0, "round 20: got '%s', expected 111", val);
    /* Its second round has the grace window alone: late, it is dropped. */
    static const uint8_t all[3] = {1, 1, 1};
    rdzv_server_set(srv, rdzv_key_xchg(2, 0).s, rdzv_val_xchg(20, all, 3).s);
    for (int r = 0; r < 2; r++) {
        rdzv_server_set(srv, rdzv_key_xchg(r, 0).s, rdzv_val_xchg(20, all, 3).s);
        rdzv_server_set(srv, rdzv_key_outer(r, 0).s, rdzv_val_round(30).s);
    }
    XDC_ASSERT(decided(&q, srv, 30, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "110") == 0, "round 30: got '%s', expected 110", val);
    /* Taken back at round 40 again, and one of the regions that sent it the state (eu-west) leaves: it would
     * wait for that slice until the WAN deadline, so its first round has the grace window alone. */
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_join("n2", 0).s);
    regions_arrive(srv, 2, 30, 40);
    XDC_ASSERT(decided(&q, srv, 40, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "11j") == 0, "round 40: got '%s', expected 11j", val);
    XDC_ASSERT_OK(orch_quorum_lose(&q, 1, "its agent exited", why, sizeof why));
    q.min_regions = 1;
    rdzv_server_set(srv, rdzv_key_xchg(0, 0).s, rdzv_val_xchg(40, (const uint8_t[3]){1, 0, 0}, 3).s);
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, rdzv_val_round(50).s);
    XDC_ASSERT(decided(&q, srv, 50, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "100") == 0, "round 50: got '%s', expected 100", val);
    /* Asking again at the run's last round (60), it is not taken back there (it would train nothing more, and
     * the end would wait for its state), nor at the end; its request stays unanswered, and the end's decision
     * tells its worker it is not needed. */
    q.last_round = 60;
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_join("n3", 0).s);
    rdzv_server_set(srv, rdzv_key_xchg(0, 0).s, rdzv_val_xchg(50, (const uint8_t[3]){1, 0, 0}, 3).s);
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, rdzv_val_round(60).s);
    XDC_ASSERT(decided(&q, srv, 60, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "100") == 0, "round 60: got '%s', expected 100", val);
    XDC_ASSERT_MSG(orch_quorum_asks(&q, 2, 0), "ap-south's request at the last round was answered");
    rdzv_server_set(srv, rdzv_key_xchg(0, 0).s, rdzv_val_xchg(60, (const uint8_t[3]){1, 0, 0}, 3).s);
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, rdzv_val_round(RDZV_ROUND_END).s);
    XDC_ASSERT(decided(&q, srv, RDZV_ROUND_END, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "100") == 0, "the end: got '%s', expected 100", val);
    XDC_ASSERT_MSG(rdzv_server_get(srv, rdzv_key_rejoin("n3").s, val, sizeof val) != 0, "rejoin/n3 = '%s'", val);
    host3_close(&host);
}

/* elastic.grace_min (orch_quorum_spread): with a 10-minute grace, a region late at a round is waited for
 * until ORCH_QUORUM_SPREADS_MIN rounds were reached by everyone; after them it is dropped at a few times their
 * arrival spread (here every region arrives at once, so at grace_min), and a region in its first round back
 * (taking the state) still has grace + back_ms. Each step is a region's arrival or absence, not a clock. */
XDC_TEST_T(quorum_drops_a_late_region_at_the_rounds_arrival_spread, 60)
{
    host3 host;
    host3_open(&host);
    rdzv_server *srv = host.srv;
    orch_quorum q;
    orch_quorum_init(&q, host.t, srv, 2, 600000, 600000, 600000); /* 10 min of grace, 10 min more back */
    orch_quorum_spread(&q, 1);
    char val[RDZV_VALUE_MAX];
    /* Round 10, before any spread was seen: ap-south late is waited for, then arrives and is in it (a spread of
     * 200 ms or more: the window after it is at least 0.8 s, all inside the 60 s the drop below may take). */
    regions_arrive(srv, 2, -1, 10);
    XDC_ASSERT_MSG(!decided(&q, srv, 10, 200, val), "round 10 decided with no spread seen: '%s'", val);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_round(10).s);
    XDC_ASSERT(decided(&q, srv, 10, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "111") == 0, "round 10: got '%s', expected 111", val);
    /* Rounds 20 .. 10 x ORCH_QUORUM_SPREADS_MIN: everyone at once, the spreads the window follows. */
    long long step = 10;
    for (int i = 1; i < ORCH_QUORUM_SPREADS_MIN; i++, step += 10) {
        regions_arrive(srv, 3, step, step + 10);
        XDC_ASSERT(decided(&q, srv, step + 10, 5000, val));
        XDC_ASSERT_MSG(strcmp(val, "111") == 0, "round %lld: got '%s', expected 111", step + 10, val);
    }
    /* ap-south stops (it posts nothing): dropped at the spread's window, far inside the 10-minute grace. */
    regions_arrive(srv, 2, step, step + 10);
    rdzv_server_set(srv, rdzv_key_xchg(2, 0).s, rdzv_val_xchg(step, (const uint8_t[3]){1, 1, 1}, 3).s);
    step += 10;
    XDC_ASSERT(decided(&q, srv, step, 60000, val));
    XDC_ASSERT_MSG(strcmp(val, "110") == 0, "round %lld: got '%s', expected 110 (ap-south dropped)", step, val);
    /* It asks back and is taken at the next round; in its first round back it is waited for (the state's
     * transfer), not dropped at the spread's window; it arrives and is in it. */
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_join("n1", 0).s);
    regions_arrive(srv, 2, step, step + 10);
    step += 10;
    XDC_ASSERT(decided(&q, srv, step, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "11j") == 0, "round %lld: got '%s', expected 11j", step, val);
    regions_arrive(srv, 2, step, step + 10);
    step += 10;
    XDC_ASSERT_MSG(!decided(&q, srv, step, 200, val), "round %lld decided without the returning region: '%s'", step,
                   val);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_round(step).s);
    XDC_ASSERT(decided(&q, srv, step, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "111") == 0, "round %lld: got '%s', expected 111", step, val);
    /* DiLoCo's catch-up: a region still taking the state runs no inner step and arrives at once ('t'), a round
     * before the members. The window runs from the first member's arrival: 200 ms (200 windows) on, no member
     * was dropped; they arrive and the round has all three, ap-south with weight 0. */
    rdzv_server_set(srv, rdzv_key_xchg(2, 0).s, rdzv_val_xchg(step, (const uint8_t[3]){1, 1, 1}, 3).s);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_arrival(step + 10, RDZV_ARRIVE_TAKING, 0).s);
    XDC_ASSERT_MSG(!decided(&q, srv, step + 10, 200, val), "round %lld decided with no member there: '%s'", step + 10,
                   val);
    regions_arrive(srv, 2, step, step + 10);
    step += 10;
    XDC_ASSERT(decided(&q, srv, step, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "11t") == 0, "round %lld: got '%s', expected 11t", step, val);
    host3_close(&host);
}

/* Past the window, a late region whose worker answers on the store (a stopped worker continued: it computes its
 * way to the round) is waited on for up to another window, and is in the round when it comes; one that answers
 * and does not come is dropped after both, its reason saying so; a silent one (never joined) at the window alone. */
XDC_TEST_T(quorum_waits_on_past_the_window_for_a_late_region_that_answers, 60)
{
    host3 host;
    host3_open(&host);
    rdzv_server *srv = host.srv;
    wan_test_node node;
    wan_test_issue("certs", "ap-south", 0, 30, -60, &node);
    xdc_wan_engine *eng = wan_test_engine(&node, 1, 10000);
    rdzv_client *c = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(
        rdzv_client_create(eng, "127.0.0.1", rdzv_server_port(srv), "ap-south/south-node1:0", 10000, &c, &d) == XDC_OK,
        "ap-south's worker joins the store: %s", d.msg);
    orch_quorum q;
    orch_quorum_init(&q, host.t, srv, 1, 2000, 600000, 600000); /* a 2 s window */
    char val[RDZV_VALUE_MAX];
    /* Round 10: ap-south late but answering, not dropped at the window; it comes and is in the round. */
    regions_arrive(srv, 2, -1, 10);
    XDC_ASSERT_MSG(!decided(&q, srv, 10, 3000, val), "round 10 decided past its 2 s window without ap-south: '%s'",
                   val);
    rdzv_server_set(srv, rdzv_key_outer(2, 0).s, rdzv_val_round(10).s);
    XDC_ASSERT(decided(&q, srv, 10, 5000, val));
    XDC_ASSERT_MSG(strcmp(val, "111") == 0, "round 10: got '%s', expected 111", val);
    /* Round 20: it answers and does not come: dropped after the window and as long again. */
    for (int r = 0; r < 3; r++)
        rdzv_server_set(srv, rdzv_key_xchg(r, 0).s, rdzv_val_xchg(10, (const uint8_t[3]){1, 1, 1}, 3).s);
    regions_arrive(srv, 2, -1, 20);
    XDC_ASSERT(decided(&q, srv, 20, 10000, val));
    XDC_ASSERT_MSG(strcmp(val, "110") == 0, "round 20: got '%s', expected 110 (ap-south dropped)", val);
    XDC_ASSERT_STR_CONTAINS(q.dropped,
                            "ap-south (missed the outer round at step 20 (2.0 s grace window and up to 2.0 s "
                            "more while it answered))");
    /* Round 30: eu-west, which never joined the store (silent), late: dropped at the window alone. */
    regions_arrive(srv, 2, 20, 20); /* both post their sums of round 20 */
    regions_arrive(srv, 1, -1, 30);
    XDC_ASSERT(decided(&q, srv, 30, 10000, val));
    XDC_ASSERT_MSG(strcmp(val, "100") == 0, "round 30: got '%s', expected 100 (eu-west dropped)", val);
    XDC_ASSERT_STR_CONTAINS(q.dropped, "eu-west (missed the outer round at step 30 (2.0 s grace window))");
    rdzv_client_destroy(c);
    xdc_wan_engine_destroy(eng);
    host3_close(&host);
}
