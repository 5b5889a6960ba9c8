/* test_orch_reference.c — the runtime against a single-process reference of the same math, end to end
 * on one machine: `xdc launch` with 2 emulated regions (sync mode, codec none) ends on the parameters
 * of the serial computation: 2 pipeline stages, data-parallel replicas in each region, a pipeline across
 * regions, 1F1B with reused boundary buffers, and sync.delay_steps 1 against the stale-by-one reference. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include "common/xdc_alloc.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_data.h"
#include "model/xdc_gpt.h"
#include "model/xdc_model_config.h"
#include "orchestrator/worker/orch_worker.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static float *read_f32(const char *path, size_t *n)
{
    size_t bytes;
    float *p = (float *)xdc_test_read_file(path, &bytes);
    XDC_ASSERT_MSG(p != NULL, "cannot read %s", path);
    *n = bytes / sizeof(float);
    return p;
}

/* Clip the averaged gradients avg[0..P) (the gradient norm summed over stages in float, as the pipeline's
 * scalar sum does) and take the AdamW step at the learning rate of step lr_step on every stage. */
static void reference_update(xdc_gpt_stage **st, int P, float *const *avg, const size_t *np, const xdc_train_config *c,
                             int lr_step)
{
    xdc_lr_schedule sch = {(float)c->lr, (float)c->min_lr_frac, c->warmup_steps, c->steps};
    float sumsq = 0;
    for (int s = 0; s < P; s++) {
        memcpy(xdc_gpt_stage_grads(st[s]), avg[s], np[s] * 4);
        double ss = 0;
        XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[s], &ss));
        sumsq += (float)ss;
    }
    float scale = xdc_gpt_clip_scale(sumsq, (float)c->grad_clip);
    for (int s = 0; s < P; s++) XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[s], xdc_lr_at(&sch, lr_step), scale));
}

/* The distributed sync step written out serially, for R regions x D replicas x P stages: each replica
 * (global index q = region * D + replica) accumulates M microbatches through the stages; each region
 * averages its replicas in order ((g0 + g1 + ...) * 1/D, as the intra reduce-scatter does), then the
 * regions are summed in region order and scaled by 1/R (as the comm engine does); the gradient norm is
 * summed over stages in float; AdamW. With `delay` (sync.delay_steps 1) step t applies the average of
 * step t-1 at step t-1's learning rate, step 0 applies nothing and the end applies the last step's.
 * Leaves the final stage parameters in st[0..P). */
static void reference_run(int steps, int M, const char *model, int R, int D, int P, int delay, xdc_gpt_stage **st)
{
    xdc_train_config c;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_model_config_load(model, &c, &errs));
    const xdc_kern_backend *be;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU, &be, NULL));
    be->model->set_threads(1);
    int Q = R * D;
    xdc_data *data[8];
    XDC_ASSERT(Q <= 8 && P <= 4);
    for (int q = 0; q < Q; q++) {
        xdc_data_config dc = {.batch = c.batch_size,
                              .seq_len = c.seq_len,
                              .val_fraction = c.val_fraction,
                              .seed = (uint64_t)c.seed,
                              .rank = q,
                              .world = Q,
                              .vocab_size = c.model.vocab_size};
        XDC_ASSERT_OK(xdc_data_open(DATA, &dc, &data[q], NULL));
    }
    size_t np[4], btc = (size_t)c.batch_size * c.seq_len * c.model.n_embd, bt = (size_t)c.batch_size * c.seq_len;
    float *reg[4], *tot[4], *prev[4]; /* (np[s]) fp32: one replica's sum, the regions' sum, the delayed average */
    for (int s = 0; s < P; s++) {
        xdc_gpt_stage_config sc = {.model = c.model,
                                   .batch = c.batch_size,
                                   .seq_len = c.seq_len,
                                   .max_inflight = M,
                                   .seed = (uint64_t)c.seed,
                                   .adamw = {(float)c.beta1, (float)c.beta2, (float)c.eps, (float)c.weight_decay}};
        orch_stage_layers(c.model.n_layer, P, s, &sc.layer_begin, &sc.layer_end);
        XDC_ASSERT_OK(xdc_gpt_stage_create(be->model, &sc, &st[s], NULL));
        np[s] = xdc_gpt_stage_num_params(st[s]);
        reg[s] = xdc_malloc(np[s] * 4);
        tot[s] = xdc_malloc(np[s] * 4);
        prev[s] = xdc_malloc(np[s] * 4);
    }
    int32_t *tok = xdc_malloc(bt * 4), *tgt = xdc_malloc(bt * 4);
    float *act = xdc_malloc(btc * 4), *dy = xdc_malloc(btc * 4);
    for (int step = 0; step < steps; step++) {
        for (int s = 0; s < P; s++) memset(tot[s], 0, np[s] * 4);
        for (int r = 0; r < R; r++) {
            for (int d = 0; d < D; d++) {
                for (int s = 0; s < P; s++) xdc_gpt_stage_zero_grad(st[s]);
                for (int mb = 0; mb < M; mb++) {
                    const float *y = NULL, *dx = NULL;
                    float loss;
                    XDC_ASSERT_OK(xdc_data_next_train(data[r * D + d], tok, tgt));
                    for (int s = 0; s < P; s++) {
                        XDC_ASSERT_OK(
                            xdc_gpt_stage_forward(st[s], mb, tok, s ? act : NULL, tgt, s < P - 1 ? &y : NULL, &loss));
                        if (s < P - 1) memcpy(act, y, btc * 4);
                    }
                    for (int s = P - 1; s >= 0; s--) {
                        XDC_ASSERT_OK(
                            xdc_gpt_stage_backward(st[s], mb, s < P - 1 ? dy : NULL, 1.0f / (float)M, s ? &dx : NULL));
                        if (s) memcpy(dy, dx, btc * 4);
                    }
                }
                for (int s = 0; s < P; s++) {
                    const float *g = xdc_gpt_stage_grads(st[s]);
                    for (size_t i = 0; i < np[s]; i++) reg[s][i] = d ? reg[s][i] + g[i] : g[i];
                }
            }
            for (int s = 0; s < P; s++)
                for (size_t i = 0; i < np[s]; i++) tot[s][i] += D > 1 ? reg[s][i] * (1.0f / (float)D) : reg[s][i];
        }
        for (int s = 0; s < P; s++)
            for (size_t i = 0; i < np[s]; i++) tot[s][i] *= 1.0f / (float)R;
        if (!delay) {
            reference_update(st, P, tot, np, &c, step);
            continue;
        }
        if (step > 0) reference_update(st, P, prev, np, &c, step - 1);
        for (int s = 0; s < P; s++) { /* this step's average waits for the next step */
            float *t = prev[s];
            prev[s] = tot[s], tot[s] = t;
        }
    }
    if (delay) reference_update(st, P, prev, np, &c, steps - 1);
    for (int s = 0; s < P; s++) {
        xdc_free(reg[s]);
        xdc_free(tot[s]);
        xdc_free(prev[s]);
    }
    xdc_free(tok);
    xdc_free(tgt);
    xdc_free(act);
    xdc_free(dy);
    for (int q = 0; q < Q; q++) xdc_data_destroy(data[q]);
}

/* The largest difference between the parameters a run dumped (run_dir/params-stage-S.f32) and st[0..P)'s. */
static double params_max_diff(const char *dir, int P, xdc_gpt_stage **st)
{
    double max_diff = 0;
    for (int s = 0; s < P; s++) {
        char path[700];
        snprintf(path, sizeof path, "%s/params-stage-%d.f32", dir, s);
        size_t n;
        float *got = read_f32(path, &n);
        XDC_ASSERT_EQ(n, xdc_gpt_stage_num_params(st[s]));
        const float *want = xdc_gpt_stage_params(st[s]);
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]);
            if (d > max_diff) max_diff = d;
        }
        free(got);
    }
    return max_diff;
}

/* Compare the parameters a run dumped with the reference's, and free the reference. */
static void expect_params_match(const char *dir, int P, xdc_gpt_stage **st)
{
    /* Tolerance: the same operations in the same order give identical floats; allow float rounding in case
     * a reduction order differs (1e-6 relative to the parameter scale, far below one step's update). */
    double max_diff = params_max_diff(dir, P, st);
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
    reference_run(steps, M, model, R, D, P, delay, st);
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
    reference_run(8, 2, TINY, 2, 1, 2, 0, st);
    double d = params_max_diff(dir, 2, st);
    for (int s = 0; s < 2; s++) xdc_gpt_stage_destroy(st[s]);
    printf("max |delayed run - undelayed reference| = %.3g\n", d);
    XDC_ASSERT_MSG(d > 1e-4, "the delayed run ends %.3g from the undelayed reference: no delay applied", d);
}
