/* test_orch_reference.c — the runtime against a single-process reference of the same math, end to end
 * on one machine: `xdc launch` with 2 emulated regions (sync mode, codec none) ends on the parameters
 * of the serial computation: 2 pipeline stages, data-parallel replicas in each region, a pipeline across
 * regions, 1F1B with reused boundary buffers, and sync.delay_steps 1 against the stale-by-one reference. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include "model/xdc_gpt.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Compare the parameters a run dumped with the reference's, and free the reference. */
static void expect_params_match(const char *dir, int P, xdc_gpt_stage **st)
{
    /* Tolerance: the same operations in the same order give identical floats; allow float rounding in case
     * a reduction order differs (1e-6 relative to the parameter scale, far below one step's update). */
    double max_diff = e2e_params_max_diff(dir, P, st);
    for (int s = 0; s < P; s++) xdc_gpt_stage_destroy(st[s]);
    printf("max |distributed - reference| = %.3g\n", max_diff);
    XDC_ASSERT_MSG(max_diff <= 1e-6, "parameters differ from the single-process reference by %.3g", max_diff);
}

/* A clean finish logs no stream going down, on any rank or in the launcher (a stream that just ends
 * without BYE reads as "TLS error 1: unexpected eof while reading" on the other side). */
static void expect_quiet_finish(const char *dir, const char *out)
{
    XDC_ASSERT_MSG(!strstr(out, " down: "), "the launcher logged a stream down in a clean run:\n%s", out);
    char logs[700], path[1000];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    DIR *d = opendir(logs);
    XDC_ASSERT_MSG(d != NULL, "no logs in %s", logs);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".log")) continue;
        snprintf(path, sizeof path, "%s/%s", logs, e->d_name);
        char *text = xdc_test_read_file(path, NULL);
        const char *down = text ? strstr(text, " down: ") : NULL;
        XDC_ASSERT_MSG(!down, "%s logged a stream down in a clean run: %.200s", path, down);
        free(text);
    }
    closedir(d);
}

/* Launch `run` on `topo` (it must dump its parameters), then check them against the serial reference
 * of R regions x D replicas x P stages of `model` (the run's), M microbatches per step, averages applied
 * `delay` steps late. Returns the launch output. */
static void match_reference_delayed(const char *run, const char *topo, const char *model, int steps, int M, int R,
                                    int D, int P, int delay, char *out, size_t cap)
{
    char dir[600], cmd[2048];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), topo, run, dir);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    expect_quiet_finish(dir, out);
    xdc_gpt_stage *st[4];
    e2e_reference_run(steps, M, model, R, D, P, delay, NULL, st);
    expect_params_match(dir, P, st);
}

static void match_reference(const char *run, const char *topo, const char *model, int steps, int M, int R, int D, int P,
                            char *out, size_t cap)
{
    match_reference_delayed(run, topo, model, steps, M, R, D, P, 0, out, cap);
}

XDC_TEST_T(xdc_sync_matches_single_process_reference, 300)
{
    e2e_need_corpus();
    char out[65536];
    const char *run = e2e_write_run("sync", "sync", 12, "none", "dump_params: true\n");
    match_reference(run, TOPO, TINY, 12, 2, 2, 1, 2, out, sizeof out);
}

XDC_TEST_T(orch_replicas_in_regions_match_single_process, 300)
{
    e2e_need_corpus();
    /* One stage, so each region's two workers are data-parallel replicas: intra reduce-scatter, WAN
     * exchange of the shards, intra all-gather. */
    char out[65536];
    const char *run = e2e_write_run_p("dp", "sync", 10, "none", 1, "dump_params: true\n");
    match_reference(run, TOPO, TINY, 10, 2, 2, 2, 1, out, sizeof out);
}

XDC_TEST_T(orch_unequal_replicas_match_the_equal_split, 300)
{
    e2e_need_corpus();
    /* Each region's two replicas run 3 and 1 microbatches per step (microbatches_per_replica), weighted 3:1 in
     * the region's mean: the run ends where one process does that averages the same global batch, all 8
     * microbatches (1 / 8 each), read in the same order (xdc_data.h's slots). The sums are grouped differently (3 and 1 per
     * replica, then by weight and region), so the result is equal up to fp32 rounding, not bit for bit. */
    char out[65536];
    const char *run = e2e_write_run_p("unequal", "sync", 6, "none", 1,
                                      "dump_params: true\nmicrobatches_per_replica: [3, 1]\n");
    match_reference(run, TOPO, TINY, 6, 8, 1, 1, 1, out, sizeof out);
    /* One count per replica of every region: region totals 4 and 2, weighted 4:2 across the regions too. */
    run = e2e_write_run_p("unequal2", "sync", 6, "none", 1,
                          "dump_params: true\nmicrobatches_per_replica: [3, 1, 1, 1]\n");
    match_reference(run, TOPO, TINY, 6, 6, 1, 1, 1, out, sizeof out);
}

XDC_TEST_T(orch_pipeline_across_regions_matches_single_process, 300)
{
    e2e_need_corpus();
    /* Stage 0 in us-east, stage 1 in eu-west: activations and their gradients cross the emulated WAN. */
    char out[65536], bytes[64];
    const char *run = e2e_write_run("span", "sync", 8, "none",
                                    "dump_params: true\nspan_regions: true\nactivation_codec: none\n");
    match_reference(run, "examples/topology/span-2region.yaml", TINY, 8, 2, 1, 1, 2, out, sizeof out);
    e2e_final_field(out, "wan_bytes=", bytes, sizeof bytes);
    XDC_ASSERT_MSG(atoll(bytes) > 0, "no activation crossed the WAN");
}

XDC_TEST_T(orch_1f1b_boundary_buffers_match_single_process, 300)
{
    e2e_need_corpus();
    /* 8 microbatches through one pipeline of 4 stages over both regions' 2 workers each: boundaries in a
     * region (stages 0-1, 2-3) and across the WAN (1-2). Each stage's x_in, dy_in and dx_out hold one
     * microbatch and are reused by every microbatch of the steady 1F1B phase (orch_train.c); 48 sequences
     * per microbatch make an activation (768 KiB) larger than the CPU intra ring (512 KiB), so a transfer
     * is not done when its send is posted. The parameters
     * match the serial reference, and a cpu-strict run with the intra backend's NCCL semantics ends at the
     * same params_xxh64. */
    static char out[65536], extra[1024];
    const char *model = e2e_write_tiny(4, 48);
    snprintf(extra, sizeof extra,
             "model: %s\nspan_regions: true\nactivation_codec: none\nmicrobatches: 8\ndump_params: true\n", model);
    const char *run = e2e_write_run_pb("reuse", "sync", 3, "none", 4, 0.05, extra);
    match_reference(run, TOPO, model, 3, 8, 1, 1, 4, out, sizeof out);
    char cpu[64], strict[64], dir[600], cmd[2048];
    e2e_final_field(out, "params_xxh64=", cpu, sizeof cpu);
    snprintf(dir, sizeof dir, "%s/reuse-strict", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "XDC_INTRA_NCCL_SEMANTICS=1 timeout 240 %s launch -t %s -c %s --run-dir %s --device cpu-strict",
             xdc_test_bin(), TOPO, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "cpu-strict exited %d:\n%s", rc, out);
    e2e_final_field(out, "params_xxh64=", strict, sizeof strict);
    printf("cpu %s, cpu-strict under NCCL semantics %s\n", cpu, strict);
    XDC_ASSERT_MSG(strcmp(cpu, strict) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, cpu);
    /* The two stages at the cut keep encoded buffers for what 1F1B has in flight there, the sender's
     * slots (3 of stage 1), not the 8 microbatches: stage 1 dy and y, stage 2 x and dx. */
    snprintf(cmd, sizeof cmd, "cat %s/logs/*.log | grep -o 'activation wire buffers: .*' | sort", dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    printf("%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "(x 0, dy 3, y 3, dx 0)");
    XDC_ASSERT_STR_CONTAINS(out, "(x 3, dy 0, y 0, dx 3)");
}

/* sync.delay_steps 1, codec none, 2 regions x 2 replicas, a pipeline across 2 regions and 2 regions x 2
 * stages: the runs end where the serial stale-by-one reference does (step t applies the average of step
 * t-1), and that is not where the undelayed reference ends, so a run applying any other step's gradients
 * fails one of the two. */
XDC_TEST_T(orch_sync_delay_matches_stale_by_one_reference, 300)
{
    e2e_need_corpus();
    char out[65536], dir[600];
    /* Replicas in each region (1 stage, 2 workers): the one round averages them and the regions, delayed. */
    const char *run = e2e_write_run_p("delay-dp", "sync", 6, "none", 1, "dump_params: true\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, TOPO, TINY, 6, 2, 2, 2, 1, 1, out, sizeof out);
    /* A pipeline across regions: the step-0 loss sum and the gradient norm cross the WAN between stages. */
    run = e2e_write_run("delay-span", "sync", 6, "none",
                        "dump_params: true\nspan_regions: true\nactivation_codec: none\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, "examples/topology/span-2region.yaml", TINY, 6, 2, 1, 1, 2, 1, out, sizeof out);
    run = e2e_write_run("delay", "sync", 8, "none", "dump_params: true\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, TOPO, TINY, 8, 2, 2, 1, 2, 1, out, sizeof out);
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    xdc_gpt_stage *st[2];
    e2e_reference_run(8, 2, TINY, 2, 1, 2, 0, NULL, st);
    double d = e2e_params_max_diff(dir, 2, st);
    for (int s = 0; s < 2; s++) xdc_gpt_stage_destroy(st[s]);
    printf("max |delayed run - undelayed reference| = %.3g\n", d);
    XDC_ASSERT_MSG(d > 1e-4, "the delayed run ends %.3g from the undelayed reference: no delay applied", d);
}
