/* test_plan_pace.c — the planner's DiLoCo settings beyond codec and period: nobody waits (each region's inner
 * steps per round from its pace: its GPUs and the run's diloco.slowdown) and the overlapped outer round, each
 * priced against the plan without it, and the two together; and `plan: auto` on a run file whose regions
 * differ in pace gives a configuration the run-config checks accept, with the decider's step counts. */
#include "tests/xdc_test.h"

#include "tests/scheduler/test_plan_util.h"

#include "model/xdc_model_shape.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "scheduler/xdc_plan.h"

#include <stdio.h>
#include <string.h>

/* bench-e2e's WAN-bound pair (bench/e2e/two-region.yaml, 10 Mbit/s; its 0.87M GPT, one microbatch of 16x64
 * tokens per worker) as `plan: auto` searches it, DiLoCo at period H. */
static xdc_topology *wan_pair(int H, xdc_model_shape *m, xdc_batch_shape *b, xdc_plan_opts *o)
{
    xdc_model_shape_gpt(4, 4, 128, 64, 256, m);
    *b = (xdc_batch_shape){16, 64, 16.0 * 64 * 2};
    *o = (xdc_plan_opts)XDC_PLAN_OPTS_INIT;
    o->all_regions = 1;
    o->mode = XDC_PLAN_DILOCO;
    o->inner_steps = H;
    return test_plan_load_topo("bench/e2e/two-region.yaml");
}

/* The best candidate of set s (pick order) with these nobody_waits and overlap settings, or NULL. */
static const xdc_plan *first_with(const xdc_plan_set *s, int nobody_waits, int overlap)
{
    for (int i = 0; i < s->n_cands; i++)
        if (s->cands[i].mode == XDC_PLAN_DILOCO && s->cands[i].nobody_waits == nobody_waits &&
            (s->cands[i].overlap_steps > 0) == overlap)
            return &s->cands[i];
    return NULL;
}

/* bench-e2e's WAN-bound pair with eu-west 3x slower (diloco.slowdown [1, 3]) at H = 12: nobody waits gives
 * us-east 12 inner steps a round and eu-west 4, the tokens of 16 steps in the time of 12, and wins, its round
 * overlapped with the next inner step (less exposed than the same plan with its round blocking; the run's length
 * unknown, the overlap is no lossier); the plan where every region runs 12 and waits is slower per token; a run
 * file without nobody waits (-1) gets none. Equal regions gain nothing from it. The simulator agrees. */
XDC_TEST(plan_nobody_waits_counts_each_regions_steps_by_its_pace)
{
    xdc_model_shape m;
    xdc_batch_shape b;
    xdc_plan_opts o;
    xdc_topology *t = wan_pair(12, &m, &b, &o);
    o.calib.region_scale[1] = 3;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best, *wait = first_with(s, 0, 0), *block = first_with(s, 1, 0);
    XDC_ASSERT_MSG(p->nobody_waits && p->overlap_steps == 1, "chosen nobody_waits %d overlap %d", p->nobody_waits,
                   p->overlap_steps);
    XDC_ASSERT(block != NULL && block->fidelity == p->fidelity && block->round_steps[1] == 4);
    XDC_ASSERT_MSG(p->t_wan_exposed < block->t_wan_exposed && p->t_step < block->t_step,
                   "overlapped exposed %.4f step %.4f, blocking %.4f %.4f", p->t_wan_exposed, p->t_step,
                   block->t_wan_exposed, block->t_step);
    XDC_ASSERT_EQ(p->round_steps[0], 12);
    XDC_ASSERT_EQ(p->round_steps[1], 4);
    XDC_ASSERT(wait != NULL);
    XDC_ASSERT_NEAR(p->tokens / wait->tokens, 16.0 / 24.0, 1e-9); /* (12 + 4) of 12 steps of 2 replicas */
    XDC_ASSERT_MSG(p->t_step / p->tokens < 0.8 * wait->t_step / wait->tokens, "nobody waits %.4g s/token, waiting %.4g",
                   p->t_step / p->tokens, wait->t_step / wait->tokens);
    /* The simulator runs each region's inner steps on its own clock, the round joining them: within 10 % of the
     * planner over two rounds, and the waiting plan's as well. */
    xdc_sim_result r, rw;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_sim_run(t, &m, p, &o.calib, 24, &r, &d));
    XDC_ASSERT_OK(xdc_sim_run(t, &m, wait, &o.calib, 24, &rw, &d));
    XDC_ASSERT_MSG(r.t_step < 1.10 * p->t_step && r.t_step > 0.90 * p->t_step, "simulated %.4f s, planned %.4f s",
                   r.t_step, p->t_step);
    XDC_ASSERT_MSG(rw.t_step < 1.10 * wait->t_step && rw.t_step > 0.90 * wait->t_step,
                   "waiting: simulated %.4f s, planned %.4f s", rw.t_step, wait->t_step);
    o.nobody_waits = -1;
    xdc_plan_set *n = test_plan_search_ok(t, &m, &b, &o);
    for (int i = 0; i < n->n_cands; i++) XDC_ASSERT(!n->cands[i].nobody_waits);
    /* Equal paces: nothing to gain, no such candidate. */
    o.nobody_waits = 0;
    o.calib.region_scale[1] = 0;
    xdc_plan_set *e = test_plan_search_ok(t, &m, &b, &o);
    for (int i = 0; i < e->n_cands; i++) XDC_ASSERT(!e->cands[i].nobody_waits);
    xdc_plan_set_destroy(s);
    xdc_plan_set_destroy(n);
    xdc_plan_set_destroy(e);
    xdc_topology_destroy(t);
}

/* The same pair at equal pace, int8 DiLoCo at H = 10: the round (~0.5 s of bytes on 10 Mbit/s) blocks its step
 * without overlap; overlapped with the next inner step it shows only by what outlasts that step, and the search
 * takes it (same fidelity, faster). The simulator replays the overlapped plan within 10 % of the planner. */
XDC_TEST(plan_overlap_hides_the_round_behind_the_next_step)
{
    xdc_model_shape m;
    xdc_batch_shape b;
    xdc_plan_opts o;
    xdc_topology *t = wan_pair(10, &m, &b, &o);
    o.keep_unsent = -1;
    snprintf(o.codec, sizeof o.codec, "int8");
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best, *block = first_with(s, 0, 0);
    XDC_ASSERT_MSG(p->overlap_steps == 1, "chosen overlap %d", p->overlap_steps);
    XDC_ASSERT(block != NULL && block->fidelity == p->fidelity);
    XDC_ASSERT_MSG(p->t_wan_exposed < block->t_wan_exposed && p->t_step < block->t_step,
                   "overlapped exposed %.4f step %.4f, blocking %.4f %.4f", p->t_wan_exposed, p->t_step,
                   block->t_wan_exposed, block->t_step);
    XDC_ASSERT_NEAR(p->wan_bytes, block->wan_bytes, 1);
    xdc_sim_result r;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_sim_run(t, &m, p, &o.calib, 20, &r, &d));
    XDC_ASSERT_MSG(r.t_step < 1.10 * p->t_step && r.t_step > 0.90 * p->t_step, "simulated %.4f s, planned %.4f s",
                   r.t_step, p->t_step);
    /* Pinned (a run file's overlap_steps): only overlapped DiLoCo plans. */
    o.overlap = 1;
    xdc_plan_set *q = test_plan_search_ok(t, &m, &b, &o);
    for (int i = 0; i < q->n_cands; i++) XDC_ASSERT(q->cands[i].mode == XDC_PLAN_DILOCO && q->cands[i].overlap_steps);
    xdc_plan_set_destroy(s);
    xdc_plan_set_destroy(q);
    xdc_topology_destroy(t);
}

/* plan: auto with eu-west slowed 3x: DiLoCo with nobody waits, the decider's counts (orch_run_config_pace) the
 * plan's. With the run's length known an overlapped round is one step lossier, which hiding at most 1 / H of the
 * step does not buy at H >= 10: the round blocks, with or without the slowdown, as it must where checkpoint_every
 * is no multiple of the planned period (a round in flight is in no checkpoint). Either set by hand binds the plan. */
XDC_TEST(plan_auto_takes_nobody_waits_and_overlap_the_runtime_accepts)
{
    xdc_topology *t = test_plan_load_topo("bench/e2e/two-region.yaml");
    static orch_run_config c;
    orch_planned pl;
    test_plan_auto_run("pace", "diloco: {slowdown: [1, 3]}\ncheckpoint_every: 0\n", t, &c, &pl, NULL);
    XDC_ASSERT_EQ(c.mode, ORCH_MODE_DILOCO);
    XDC_ASSERT(c.diloco.nobody_waits && pl.plan.nobody_waits && c.diloco.overlap_steps == 0);
    double pace[XDC_TOPO_MAX_REGIONS];
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_run_config_pace(&c, t, pace, &d));
    for (int r = 0; r < 2; r++)
        XDC_ASSERT_EQ(pl.plan.round_steps[r], xdc_plan_round_steps(c.diloco.inner_steps, pace[r]));
    XDC_ASSERT(pl.plan.round_steps[1] < pl.plan.round_steps[0]);
    test_plan_auto_run("ovl", "checkpoint_every: 0\n", t, &c, &pl, NULL);
    XDC_ASSERT_MSG(c.mode == ORCH_MODE_DILOCO && c.diloco.overlap_steps == 0 && !c.diloco.nobody_waits,
                   "mode %d overlap %d", (int)c.mode, c.diloco.overlap_steps);
    /* Set by hand they bind: overlap keeps its steps, nobody waits holds at equal paces (every region all H). */
    test_plan_auto_run("pin-ovl", "diloco: {overlap_steps: 2}\ncheckpoint_every: 0\n", t, &c, &pl, NULL);
    XDC_ASSERT(c.mode == ORCH_MODE_DILOCO && c.diloco.overlap_steps == 2 && pl.plan.overlap_steps == 1);
    test_plan_auto_run("pin-nw", "diloco: {nobody_waits: true}\n", t, &c, &pl, NULL);
    XDC_ASSERT(c.diloco.nobody_waits && pl.plan.nobody_waits && !c.diloco.overlap_steps);
    XDC_ASSERT(pl.plan.round_steps[0] == c.diloco.inner_steps && pl.plan.round_steps[1] == c.diloco.inner_steps);
    test_plan_auto_run("ckpt", "checkpoint_every: 7\n", t, &c, &pl, NULL);
    XDC_ASSERT_MSG(c.diloco.overlap_steps == 0 || 7 % c.diloco.inner_steps == 0, "overlap %d H %d",
                   c.diloco.overlap_steps, c.diloco.inner_steps);
    xdc_topology_destroy(t);
}

/* A region counted h of a round's H steps runs them spread over the round (xdc_plan_round_runs, the runtime's
 * and the simulator's placement): its k-th at step ⌊k·H/h⌋, so bench-e2e's north (4 of 10) at steps 0, 2, 5, 7,
 * not 0-3; of a round cut at p steps it ran ⌈p·h/H⌉ (the outer mean's weight); every step at h = H, none at 0. */
XDC_TEST(plan_round_spreads_a_slow_regions_steps_over_the_round)
{
    struct {
        int h, H;
        const char *at;
    } cases[] = {{4, 10, "0 2 5 7 "}, {2, 6, "0 3 "},  {1, 10, "0 "}, {10, 10, "0 1 2 3 4 5 6 7 8 9 "},
                 {0, 10, ""},         {3, 8, "0 2 5 "}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char at[64] = "";
        for (int p = 0; p < cases[c].H; p++)
            if (xdc_plan_round_runs(cases[c].h, cases[c].H, p))
                snprintf(at + strlen(at), sizeof at - strlen(at), "%d ", p);
        XDC_ASSERT_MSG(strcmp(at, cases[c].at) == 0, "%d of %d: runs at '%s', want '%s'", cases[c].h, cases[c].H, at,
                       cases[c].at);
        XDC_ASSERT(xdc_plan_round_ran(cases[c].h, cases[c].H, cases[c].H) == cases[c].h);
    }
    XDC_ASSERT(xdc_plan_round_ran(4, 10, 3) == 2 && xdc_plan_round_ran(4, 10, 5) == 2 &&
               xdc_plan_round_ran(4, 10, 6) == 3);
}
