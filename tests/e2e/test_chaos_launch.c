/* test_chaos_launch.c — `xdc launch --chaos` end to end: one-fault schedules on the tiny model's elastic
 * DiLoCo run over three emulated regions with --max-restarts 1. Each seed is chosen here with the schedule's
 * own generator so that its fault falls early (a step read from the run's heartbeats, not a time):
 * - kill-worker: the worker is killed there, its region leaves, is started again and rejoins;
 * - link-down: the link is cut there; cut during an exchange, the workers at its ends see it down from their own
 *   WAN peers (no stream up) while that exchange waits on it, and say how long; cut between two, the next rounds
 *   go around it, relayed by the third region (orchestrator/elastic/orch_routes.h), and the run goes on;
 * and the run ends with every region on one model and the story told: the schedule, the fault and its
 * recovery, one line each. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include "orchestrator/launch/orch_chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHAOS_TOPO  "examples/topology/demo-3region.yaml"
#define CHAOS_STEPS 128
#define CHAOS_RATE  "0.3" /* round(0.3 * 3 regions * 128 steps / 100) = 1 fault */

/* The first seed of `kinds` (one kind) whose one fault comes before step 40, lasting min_ms to max_ms (link
 * faults; 0, 0: any), into *f, chosen with the schedule's own generator for the shape start_chaos builds for
 * this run (3 regions of 1 worker, restarts, a quorum of 2, emulated WAN); then `xdc launch --chaos` of the
 * elastic DiLoCo run (H = 4) with that seed, into dir[600], its output into out[cap]. A link fault fires, once
 * due, during an outer round's exchange (link_at "exchange") or between two (the members compute: "between");
 * "": whenever due (XDC_TEST_CHAOS_LINK_AT, orch_chaos.c). */
static void launch_chaos(const char *kinds, int min_ms, int max_ms, const char *link_at, orch_chaos_fault *f, char *dir,
                         char *out, size_t cap)
{
    e2e_need_corpus();
    orch_chaos_shape sh = {
        .n_regions = 3, .workers = {1, 1, 1}, .steps = CHAOS_STEPS, .restarts = 1, .spare_regions = 1, .links = 1};
    orch_chaos_fault plan[ORCH_CHAOS_MAX_FAULTS];
    orch_chaos_spec s;
    char spec[64], cmd[2048];
    snprintf(spec, sizeof spec, "1:" CHAOS_RATE ":%s", kinds);
    XDC_ASSERT_OK(orch_chaos_spec_parse(spec, &s, NULL));
    int n = 0;
    for (s.seed = 1; s.seed < 1000; s.seed++)
        if ((n = orch_chaos_schedule(&s, &sh, plan, ORCH_CHAOS_MAX_FAULTS)) == 1 && plan[0].step < 40 &&
            (!max_ms || (plan[0].duration_ms >= min_ms && plan[0].duration_ms <= max_ms)))
            break;
    XDC_ASSERT_MSG(n == 1 && s.seed < 1000, "no seed below 1000 plans one early %s", kinds);
    *f = plan[0];
    const char *run = e2e_write_run_p(kinds, "diloco", CHAOS_STEPS, "none", 1,
                                      "microbatches: 1\ndiloco: {inner_steps: 4}\nelastic: {min_regions: 2, grace: 5s}"
                                      "\ntimeouts: {rendezvous: 30s, operation: 30s, heartbeat: 30s}\n");
    snprintf(dir, 600, "%s/chaos-%s", xdc_test_tmpdir(), kinds);
    snprintf(cmd, sizeof cmd,
             "XDC_TEST_CHAOS_LINK_AT=%s timeout 170 %s launch -t %s -c %s --run-dir %s --max-restarts 1 --chaos "
             "%llu:" CHAOS_RATE ":%s 2>&1",
             link_at, xdc_test_bin(), CHAOS_TOPO, run, dir, (unsigned long long)s.seed, kinds);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
}

/* Every region of the run in `dir` on the run's parameters, which the launch's output `out` reports. */
static void expect_one_model(const char *dir, const char *out)
{
    char hash[4][17], final[64];
    XDC_ASSERT_EQ(e2e_final_hashes(dir, hash, 4), 3);
    XDC_ASSERT(strcmp(hash[0], hash[1]) == 0 && strcmp(hash[0], hash[2]) == 0);
    snprintf(final, sizeof final, "params_xxh64=%s", hash[0]);
    XDC_ASSERT_STR_CONTAINS(out, final);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
}

XDC_TEST_T(chaos_launch_kills_a_worker_at_its_step_and_the_run_ends_on_one_model, 180)
{
    orch_chaos_fault f[1];
    const char *regions[3] = {"us-east", "eu-west", "ap-south"};
    char dir[600], want[256];
    static char out[1 << 18];
    launch_chaos("kill-worker", 0, 0, "", f, dir, out, sizeof out);
    XDC_ASSERT(f[0].kind == ORCH_CHAOS_KILL_WORKER);
    /* The story: the plan, the fault where the schedule put it, the recovery with its times. */
    snprintf(want, sizeof want, "1 planned: 1 kill-worker %s/0 at step %lld\n", regions[f[0].region],
             (long long)f[0].step);
    XDC_ASSERT_STR_CONTAINS(out, want);
    snprintf(want, sizeof want, "worker %s/0 killed (SIGKILL)\n", regions[f[0].region]);
    XDC_ASSERT_STR_CONTAINS(out, want);
    const char *fault = strstr(out, "chaos: fault 1 kill-worker at step ");
    long long at = -1;
    XDC_ASSERT_MSG(fault && sscanf(fault, "chaos: fault 1 kill-worker at step %lld", &at) == 1, "%s", out);
    XDC_ASSERT_MSG(at >= f[0].step, "fired at step %lld, before its step %lld", at, (long long)f[0].step);
    snprintf(want, sizeof want, "region %s back in the run and training; left ", regions[f[0].region]);
    XDC_ASSERT_STR_CONTAINS(out, "chaos: recovered 1 kill-worker at step ");
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_STR_CONTAINS(out, "recovery_s=");
    XDC_ASSERT_STR_CONTAINS(out, "chaos: 1 faults injected of 1 planned, 1 recovered");
    /* The story's steps out end where the joiner trains again, which its own line names: in elastic DiLoCo it
     * takes part in the round that took it back and, when its state is in by that round's end, trains from it
     * (else from a later round, after rounds with weight 0). */
    char *wlog = e2e_region_log(dir, regions[f[0].region]);
    const char *trains = strstr(wlog, "it trains from step ");
    long long from = -1;
    XDC_ASSERT_MSG(trains && sscanf(trains, "it trains from step %lld", &from) == 1, "%s", wlog);
    free(wlog);
    char tail[64];
    snprintf(tail, sizeof tail, "-%lld)\n", from);
    const char *line = strstr(out, "chaos: recovered 1 kill-worker at step ");
    XDC_ASSERT_MSG(line && strstr(line, tail) && strstr(line, tail) < strchr(line, '\n'),
                   "steps out do not end where the joiner trains again (step %lld):\n%s", from, out);
    expect_one_model(dir, out);
}

/* A cut link is found by the run's own events: the workers at its ends see their WAN peer with no stream up
 * while an outer round's exchange waits on it (the cut comes during one), and an end still waiting on it names the
 * link and the seconds it waited; an end whose part of that exchange was already in (it can be, under load) sees
 * its streams to the other go down. That exchange holds until the link is back (routes change between rounds
 * only), no region leaves, and the story says what the run did meanwhile. */
XDC_TEST_T(chaos_launch_cut_link_is_seen_by_the_exchange_that_waits_on_it, 180)
{
    orch_chaos_fault f[1];
    static const char *const regions[3] = {"us-east", "eu-west", "ap-south"}, *const hosts[3] = {"east", "west",
                                                                                                 "south"};
    char dir[600], want[256];
    static char out[1 << 18];
    launch_chaos("link-down", 3000, 6000, "exchange", f, dir, out, sizeof out); /* a cut longer than a round */
    XDC_ASSERT(f[0].kind == ORCH_CHAOS_LINK_DOWN);
    int ends[2] = {f[0].region, f[0].other};
    XDC_ASSERT_STR_CONTAINS(out, "chaos: recovered 1 link-down at step ");
    snprintf(want, sizeof want, "link %s<->%s back at its rate after ", regions[ends[0]], regions[ends[1]]);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_STR_CONTAINS(out, "; the run went from step ");
    XDC_ASSERT_MSG(!strstr(out, "dropped from the run"), "a region left over a cut link:\n%s", out);
    int waited = 0;
    for (int e = 0; e < 2; e++) { /* both ends saw it, each from its own peer */
        char log[800], line[160], peer[160];
        snprintf(log, sizeof log, "%s/logs/%s-%s-node1-0.log", dir, regions[ends[e]], hosts[ends[e]]);
        char *text = xdc_test_read_file(log, NULL);
        XDC_ASSERT_MSG(text != NULL, "no log %s", log);
        snprintf(line, sizeof line, ": the link to region %s was down for ", regions[ends[1 - e]]);
        snprintf(peer, sizeof peer, "peer %s/0 (", regions[ends[1 - e]]);
        const char *named = strstr(text, line), *down = strstr(text, peer);
        XDC_ASSERT_MSG(named || (down && strstr(down, " down: ")), "%s does not say its link was down:\n%s", log, text);
        if (named) XDC_ASSERT_STR_CONTAINS(named, "the exchange waited for it");
        waited += named != NULL;
        free(text);
    }
    XDC_ASSERT_MSG(waited >= 1, "neither end of the cut link says the exchange waited for it:\n%s", out);
    expect_one_model(dir, out);
}

/* A link cut for longer than a few rounds is gone around (orch_routes.h): its ends report it down as they arrive
 * at the next round, the decider routes its shards through the third region, and every member says so. The run
 * does not stand still for the cut: a round completes while the link is still cut (routes go back to direct only
 * once its ends report it up, so the third region's relayed bytes are such a round's; counted by the run's events,
 * not by how many steps fit in the cut's seconds, which the machine's load decides), and every region ends on one
 * model. */
XDC_TEST_T(chaos_launch_cut_link_is_routed_around_and_the_run_goes_on, 180)
{
    orch_chaos_fault f[1];
    static const char *const regions[3] = {"us-east", "eu-west", "ap-south"}, *const hosts[3] = {"east", "west",
                                                                                                 "south"};
    char dir[600], want[256];
    static char out[1 << 18];
    launch_chaos("link-down", 12000, 20000, "between", f, dir, out, sizeof out); /* a cut of many rounds */
    XDC_ASSERT(f[0].kind == ORCH_CHAOS_LINK_DOWN);
    int third = 3 - f[0].region - f[0].other;
    /* the cut ended within the run, or (a quiet machine runs the 128 steps in seconds) the run ended first */
    XDC_ASSERT_MSG(
        strstr(out, "chaos: recovered 1 link-down at step ") ||
            (strstr(out, "chaos: not recovered 1 link-down at step ") && strstr(out, ": the run ended first")),
        "the cut link's story has no end:\n%s", out);
    XDC_ASSERT_MSG(!strstr(out, "dropped from the run"), "a region left over a cut link:\n%s", out);
    for (int r = 0; r < 3; r++) { /* every member applies the round's routes and says so */
        char log[800];
        snprintf(log, sizeof log, "%s/logs/%s-%s-node1-0.log", dir, regions[r], hosts[r]);
        char *text = xdc_test_read_file(log, NULL);
        XDC_ASSERT_MSG(text != NULL, "no log %s", log);
        int lo = f[0].region < f[0].other ? f[0].region : f[0].other, hi = f[0].region ^ f[0].other ^ lo;
        snprintf(want, sizeof want, "%s<->%s avoided (down): relayed through %s", regions[lo], regions[hi],
                 regions[third]);
        XDC_ASSERT_MSG(strstr(text, want) != NULL, "%s does not say '%s':\n%s", log, want, text);
        long long relayed = -1;
        const char *bytes = strstr(text, "relayed_bytes=");
        XDC_ASSERT_MSG(bytes && sscanf(bytes, "relayed_bytes=%lld", &relayed) == 1, "%s: no WAN bytes line", log);
        XDC_ASSERT_MSG((relayed > 0) == (r == third), "%s: relayed_bytes=%lld", log, relayed);
        free(text);
    }
    expect_one_model(dir, out);
}
