/* test_train_waiting.c — train_while_waiting (DiLoCo and streaming) under `xdc launch` (demo-3region: three regions of one worker
 * each, ap-south made 4x slower by diloco.slowdown): while each round waits for ap-south, us-east and eu-west run
 * inner steps, the decider counts them (ran/<step>; each region's count what it ran, or a step short a round) and
 * every region weighs the round's pseudo-gradients by those counts, so all three end on one model. The compute utilisation is printed, not asserted: it is a timing. And a
 * topology whose regions hold two workers each is refused, naming why. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO3 "examples/topology/demo-3region.yaml"

/* The inner steps region `region` ran in the run's steps and while its rounds waited, from its log in `dir`. */
static void counted(const char *dir, const char *region, long long *steps, long long *waiting)
{
    char *log = e2e_region_log(dir, region);
    const char *p = log ? strstr(log, " inner steps (and ") : NULL, *at = p;
    while (at && at > log && at[-1] != ' ') at--; /* back to the count before " inner steps" */
    XDC_ASSERT_MSG(p && at, "%s: no counts of region %s in its log", dir, region);
    *steps = atoll(at);
    *waiting = atoll(p + strlen(" inner steps (and "));
    free(log);
}

/* `mode` (diloco or streaming, 12 steps, H = 6) under train_while_waiting on demo-3region with ap-south 4x slower:
 * every region ends on one params_xxh64, each ran the run's 12 inner steps, the fast ones more while `rounds` rounds
 * waited, each region's count what the decider counted or at most a step more a round. */
static void fast_regions_train_on(const char *mode, const char *extra, int rounds)
{
    e2e_need_corpus();
    static char out[65536];
    char name[64], dir[600], cmd[2048], h[8][17], util[32], util_min[32];
    snprintf(name, sizeof name, "train-waiting-%s", mode);
    const char *run = e2e_write_run_p(name, mode, 12, "int8", 1, extra);
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "timeout 150 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), TOPO3, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    int n = e2e_final_hashes(dir, h, 8);
    XDC_ASSERT_MSG(n == 3 && strcmp(h[0], h[1]) == 0 && strcmp(h[0], h[2]) == 0, "%s: the regions end on %s, %s and %s",
                   mode, h[0], n > 1 ? h[1] : "-", n > 2 ? h[2] : "-");
    static const char *const region[3] = {"us-east", "eu-west", "ap-south"};
    long long steps[3], waiting[3];
    for (int r = 0; r < 3; r++) {
        counted(dir, region[r], &steps[r], &waiting[r]);
        XDC_ASSERT_MSG(steps[r] == 12, "%s: region %s ran %lld inner steps of the run's 12", mode, region[r], steps[r]);
    }
    /* Each fast region waits several of its steps for ap-south at each round; it trains on after 2. */
    XDC_ASSERT_MSG(waiting[0] > 0 && waiting[1] > 0,
                   "%s: us-east and eu-west ran %lld and %lld inner steps while rounds waited", mode, waiting[0],
                   waiting[1]);
    /* The decider's counts: each region's is what it ran, or one step short a round (a step it began just after the
     * decider read its arrival). */
    long long counted_by_decider[3] = {0, 0, 0};
    for (const char *p = strstr(out, "inner steps run while it waited: "); p;
         p = strstr(p + 1, "inner steps run while it waited: "))
        for (int r = 0; r < 3; r++) {
            char word[64];
            snprintf(word, sizeof word, "%s ", region[r]);
            const char *eol = strchr(p, '\n'), *at = strstr(p, word);
            if (at && (!eol || at < eol)) counted_by_decider[r] += atoll(at + strlen(word));
        }
    for (int r = 0; r < 3; r++)
        XDC_ASSERT_MSG(
            counted_by_decider[r] <= waiting[r] && waiting[r] <= counted_by_decider[r] + rounds,
            "%s: region %s ran %lld inner steps while rounds waited, the decider counted %lld over %d rounds", mode,
            region[r], waiting[r], counted_by_decider[r], rounds);
    e2e_final_field(out, "compute_util=", util, sizeof util);
    e2e_final_field(out, "compute_util_min=", util_min, sizeof util_min);
    printf("%s, train while waiting, ap-south x4 slower: inner steps while rounds waited us-east %lld, eu-west %lld, "
           "ap-south %lld; compute_util %s (min %s)\n",
           mode, waiting[0], waiting[1], waiting[2], util, util_min);
}

XDC_TEST_T(diloco_train_while_waiting_fast_regions_train_on_and_end_on_one_model, 180)
{
    /* two rounds of 6 steps */
    fast_regions_train_on("diloco", "diloco: {inner_steps: 6, train_while_waiting: true, slowdown: [1, 1, 4]}\n", 2);
    /* Two workers in a region (demo-2region's replicas): they step together, and no decision fixes their count. */
    static char out[65536];
    char dir[600];
    const char *two = e2e_write_run_p("train-waiting-2", "diloco", 4, "int8", 1,
                                      "diloco: {inner_steps: 2, train_while_waiting: true}\n");
    snprintf(dir, sizeof dir, "%s/train-waiting-2", xdc_test_tmpdir());
    int rc = e2e_launch(two, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "a region of two workers: exit %d, not 78 (EX_CONFIG):\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.train_while_waiting needs one worker per region, but region us-east has 2");
}

/* Streaming: two fragments over H = 6, a fragment's round every 3 steps (at 3, 6 and 9) and the final one at 12. The
 * steps run in a fragment's wait land in that fragment's pseudo-gradient once (its snapshot is taken after the wait):
 * counted twice, the regions would still agree, so the one model alone would not show it; the serial reference in
 * test_outer_overlap pins the arithmetic. */
XDC_TEST_T(streaming_train_while_waiting_fast_regions_train_on_and_end_on_one_model, 180)
{
    fast_regions_train_on("streaming",
                          "streaming: {fragments: 2}\ndiloco: {inner_steps: 6, train_while_waiting: true, "
                          "slowdown: [1, 1, 4]}\n",
                          4);
}
