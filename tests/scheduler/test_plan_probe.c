/* test_plan_probe.c — the planner's compute model calibrated by a probe (docs/planner.md, "Compute speed"): a
 * measured speed sets the predicted compute exactly, the host's shared cores divide it (a slowdown's sleep taking
 * none), and it moves the plan's choices; `xdc plan -c` plans with the figure ORCH_PLAN_PROBE_ENV carries, says so
 * under --explain, and keeps the topology's model where the run file asks. Speeds are injected, never timed. */
#include "tests/scheduler/test_plan_util.h"
#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FOUR "bench/e2e/four-region.yaml"

/* bench-e2e's model and tokens per step: bench/e2e/gpt1m.yaml, 4 workers x 16 x 64. */
static void gpt1m(xdc_model_shape *m, xdc_batch_shape *b)
{
    xdc_model_shape_gpt(4, 4, 128, 64, 256, m);
    *b = (xdc_batch_shape){16, 64, 16.0 * 64 * 4};
}

/* DiLoCo with nobody waits, one stage, one microbatch of 16 sequences per worker, every region: the auto row's. */
static xdc_plan_opts auto_row_opts(double probe_flops, int cores, double north_slowdown)
{
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.all_regions = 1;
    o.stages = 1;
    o.micro_batch = 16;
    o.mode = XDC_PLAN_DILOCO;
    o.nobody_waits = north_slowdown > 1; /* a pace to run by */
    o.calib.probe_flops = probe_flops;
    o.calib.probe_cores = cores;
    for (int r = 0; r < 4; r++) o.calib.region_scale[r] = r == 2 ? north_slowdown : 1;
    return o;
}

XDC_TEST(plan_probe_speed_sets_the_predicted_compute)
{
    xdc_topology *t = test_plan_load_topo(FOUR);
    xdc_model_shape m;
    xdc_batch_shape b;
    gpt1m(&m, &b);
    /* A probe that took 0.1 s for one training step of 16 x 64 tokens: the plan's compute per step (one
     * microbatch) is those 0.1 s, the per-microbatch efficiency taken out and put back. */
    double f = xdc_plan_probe_flops(t, &m, 16 * 64, 64, 0.1);
    XDC_ASSERT(f > 0);
    XDC_ASSERT_EQ(xdc_plan_probe_flops(t, &m, 16 * 64, 64, 0), 0);
    xdc_plan_opts o = auto_row_opts(f, 0, 1);
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(s->best.microbatches, 1);
    XDC_ASSERT_NEAR(s->best.t_compute, 0.1, 1e-9);
    xdc_plan_set_destroy(s);
    /* The four workers on 2 cores, north slowed 2x: north computes half its time (the rest its sleep, which takes no
     * core). A fast worker computes beside 2 others while north sleeps (2/3 of a core) and 3 while it computes (1/2):
     * 7/12 of a core; north always beside 3 (1/2), so its pace is 2 x (7/12) / (1/2) = 7/3, not 2. A fast region's
     * step (nobody waits: the plan's step) costs 0.1 / (7/12), and north runs floor(H / (7/3)) of a round's H. */
    o = auto_row_opts(f, 2, 2);
    XDC_ASSERT_NEAR(xdc_plan_host_share(t, 0, &o.calib), 7.0 / 12, 1e-12);
    XDC_ASSERT_NEAR(xdc_plan_host_share(t, 2, &o.calib), 0.5, 1e-12);
    s = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT(s->best.nobody_waits);
    XDC_ASSERT_NEAR(s->best.t_compute, 0.1 * 12 / 7, 1e-9);
    XDC_ASSERT_EQ(s->best.round_steps[0], s->best.inner_steps);
    XDC_ASSERT_EQ(s->best.round_steps[2], xdc_plan_round_steps(s->best.inner_steps, 7.0 / 3));
    xdc_plan_set_destroy(s);
    /* More cores than workers: a core each. No probe: the topology's bf16_tflops x mfu, as before. */
    o = auto_row_opts(f, 16, 2);
    XDC_ASSERT_EQ(xdc_plan_host_share(t, 2, &o.calib), 1);
    o = auto_row_opts(0, 2, 1);
    s = test_plan_search_ok(t, &m, &b, &o);
    double flops_mb = s->best.stage[0].flops_mb;
    XDC_ASSERT_NEAR(s->best.t_compute, flops_mb / (0.05e12 * 0.4) * (1 + 8.0 / 1024), 1e-9);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

/* The measured speed moves the choice: a step 20x shorter has 20x less compute to hide a round behind, so the
 * planner lengthens DiLoCo's period (the same WAN, the same codec ladder). */
XDC_TEST(plan_probe_speed_scales_the_period)
{
    xdc_topology *t = test_plan_load_topo(FOUR);
    xdc_model_shape m;
    xdc_batch_shape b;
    gpt1m(&m, &b);
    int H[2];
    for (int i = 0; i < 2; i++) {
        xdc_plan_opts o = auto_row_opts(xdc_plan_probe_flops(t, &m, 16 * 64, 64, i ? 0.02 : 0.4), 0, 2);
        xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
        H[i] = s->best.inner_steps;
        xdc_plan_set_destroy(s);
    }
    XDC_ASSERT_MSG(H[1] > H[0], "period at a 0.4 s step %d, at a 0.02 s step %d: want the faster longer", H[0], H[1]);
    xdc_topology_destroy(t);
}

/* Run `[env] xdc ARGS`; its exit code, stdout + stderr in out. */
static int run_env_xdc(const char *env, const char *args, char *out, size_t cap)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s %s %s", env, xdc_test_bin(), args);
    return xdc_test_run(cmd, out, cap);
}

/* xdc plan -c RUN.yaml plans the run file as the launch would, with the probe's figure from the environment (a
 * measurement injected: nothing is timed), and --explain says which compute model and where it came from. */
XDC_TEST(plan_cli_plans_with_the_probe_figure)
{
    static char out[65536];
    char cwd[512], run[600], topo_run[600], args[1400];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    const char *names[2] = {"probe-auto", "probe-topology"};
    char *paths[2] = {run, topo_run};
    for (int i = 0; i < 2; i++) {
        snprintf(paths[i], 600, "%s/%s.yaml", xdc_test_tmpdir(), names[i]);
        FILE *f = fopen(paths[i], "w");
        XDC_ASSERT(f != NULL);
        fprintf(f,
                "model: %s/bench/e2e/gpt1m.yaml\ndata: /usr/share/games/fortunes\nplan: auto\nthreads: 1\n"
                "diloco: {slowdown: [1, 1, 2, 1]}\n%s",
                cwd, i ? "plan_compute: topology\n" : "");
        fclose(f);
    }
    snprintf(args, sizeof args, "plan -t " FOUR " -c %s --explain", run);
    XDC_ASSERT_EQ(run_env_xdc("XDC_PLAN_PROBE='2e10 2'", args, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "compute calibrated on this machine: 11.7 GFLOP/s a worker (probe 20 GFLOP/s alone, "
                                 "x0.583 of a core: 4 workers share 2 cores, a slowed region's x0.500)");
    XDC_ASSERT_MSG(strstr(out, "compute probe:") == NULL, "a figure given is not measured again:\n%s", out);
    XDC_ASSERT_EQ(run_env_xdc("XDC_PLAN_PROBE='fast'", args, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "XDC_PLAN_PROBE='fast': want \"FLOPS CORES\"");
    snprintf(args, sizeof args, "plan -t " FOUR " -c %s --explain", topo_run);
    XDC_ASSERT_EQ(run_env_xdc("XDC_PLAN_PROBE='2e10 2'", args, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "compute from the topology (bf16_tflops x MFU 0.4, not calibrated)");
}
