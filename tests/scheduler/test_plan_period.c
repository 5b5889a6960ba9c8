/* test_plan_period.c — the planner's DiLoCo / streaming period for the loss at the run's length: with the run's
 * steps known, periods are searched only up to xdc_plan_max_period (enough outer rounds for the regions taking
 * part), the shortest whatever it says; with them unknown, time per token alone chooses, as before. */
#include "tests/xdc_test.h"

#include "tests/scheduler/test_plan_util.h"

#include "model/xdc_model_shape.h"
#include "scheduler/xdc_plan.h"

#include <string.h>

/* The longest period of any DiLoCo / streaming candidate of s. */
static int longest_period(const xdc_plan_set *s)
{
    int H = 0;
    for (int i = 0; i < s->n_cands; i++)
        if (s->cands[i].mode == XDC_PLAN_DILOCO || s->cands[i].mode == XDC_PLAN_STREAMING)
            H = s->cands[i].inner_steps > H ? s->cands[i].inner_steps : H;
    return H;
}

/* bench-e2e's 4-region row (bench/e2e/four-region.yaml, north slowed 2x, its 0.87M GPT, 16x64 tokens per worker):
 * at 450 steps (the bench's xdc rows) 45 rounds are wanted, so H = 10, where the time-only search (steps unknown)
 * takes a longer period; a 300-step run, too short for 45 rounds at any period, keeps the shortest (10); a long
 * run allows longer periods again (20000 steps: up to 444, so 250 of the list). The rule's arithmetic: 15 rounds
 * per region beyond the first. */
XDC_TEST(plan_period_leaves_the_run_enough_outer_rounds)
{
    XDC_ASSERT_EQ(xdc_plan_max_period(450, 4), 10);
    XDC_ASSERT_EQ(xdc_plan_max_period(450, 2), 30);
    XDC_ASSERT_EQ(xdc_plan_max_period(0, 4), 0);   /* steps unknown: no bound */
    XDC_ASSERT_EQ(xdc_plan_max_period(450, 1), 0); /* one region: no rounds */
    xdc_model_shape m;
    xdc_model_shape_gpt(4, 4, 128, 64, 256, &m);
    xdc_batch_shape b = {16, 64, 16.0 * 64 * 4};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.all_regions = 1;
    o.calib.region_scale[2] = 2; /* north */
    xdc_topology *t = test_plan_load_topo("bench/e2e/four-region.yaml");
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(s->best.mode, XDC_PLAN_DILOCO);
    int untimed = s->best.inner_steps;
    XDC_ASSERT_MSG(untimed > 10, "steps unknown: H = %d (want the time-only choice, longer than 10)", untimed);
    xdc_plan_set_destroy(s);
    static const int steps[] = {450, 300, 20000}, want_longest[] = {10, 10, 250};
    for (int i = 0; i < 3; i++) {
        o.steps = steps[i];
        s = test_plan_search_ok(t, &m, &b, &o);
        XDC_ASSERT_EQ(s->best.mode, XDC_PLAN_DILOCO);
        XDC_ASSERT_MSG(longest_period(s) == want_longest[i], "%d steps: longest period searched %d (want %d)", steps[i],
                       longest_period(s), want_longest[i]);
        if (i < 2) XDC_ASSERT_EQ(s->best.inner_steps, 10);
        xdc_plan_set_destroy(s);
    }
    xdc_topology_destroy(t);
}

/* `plan: auto` takes the period from the run's own steps: bench-e2e's auto row (450 steps) runs H = 10, and its
 * sparse rounds at the densest variant (0.05:2), where the time-only search took 0.02:2 at H = 10. */
XDC_TEST(plan_auto_period_follows_the_runs_steps)
{
    xdc_topology *t = test_plan_load_topo("bench/e2e/four-region.yaml");
    static orch_run_config c;
    static orch_planned pl;
    test_plan_auto_run("period450", "steps: 450\ndiloco: {slowdown: [1, 1, 2, 1]}\n", t, &c, &pl, NULL);
    XDC_ASSERT_EQ(c.mode, ORCH_MODE_DILOCO);
    XDC_ASSERT_EQ(c.diloco.inner_steps, 10);
    XDC_ASSERT_MSG(strcmp(c.codec, "sparse:0.05:2") == 0, "codec %s (want sparse:0.05:2)", c.codec);
    XDC_ASSERT(c.diloco.nobody_waits && c.diloco.keep_unsent);
    xdc_topology_destroy(t);
}
