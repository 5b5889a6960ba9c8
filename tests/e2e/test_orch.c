/* test_orch.c — the runtime end to end on one machine: `xdc launch` with 2 emulated regions x 2 pipeline
 * stages, against a single-process reference of the same math (sync mode, codec none), run-to-run
 * determinism, WAN outages mid-run, a fault schedule (outages, a stopped worker, 1 % packet loss), a
 * worker killed with SIGKILL and resumed from its checkpoint, a worker stopped with SIGSTOP (a timeout
 * naming it), a read-only run folder, and DiLoCo / streaming against sync on the tiny model. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "model/xdc_gpt.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_data.h"
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

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"
#define TINY "examples/models/tiny.yaml"

static void need_corpus(void)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
}

/* A run file in the test's folder: the tiny model with 2 pipeline stages, 2 microbatches and the given
 * mode, steps, codec and extras (an `extra` that names its own model or microbatches replaces those). */
static const char *write_run_pb(const char *name, const char *mode, int steps, const char *codec, int stages,
                                double bucket_mb, const char *extra)
{
    static char path[512];
    char cwd[400], text[2048];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    char model[512] = ""; /* an `extra` that names its own model replaces tiny.yaml */
    if (!(extra && strstr(extra, "model:")))
        snprintf(model, sizeof model, "model: %s/examples/models/tiny.yaml\n", cwd);
    snprintf(text, sizeof text,
             "%sdata: %s\nmode: %s\npipeline_stages: %d\n%s"
             "steps: %d\ncodec: %s\nbucket_mb: %g\nthreads: 1\n%s%s",
             model, DATA, mode, stages, extra && strstr(extra, "microbatches:") ? "" : "microbatches: 2\n", steps,
             codec, bucket_mb,
             extra && strstr(extra, "timeouts:") ? "" : "timeouts: {rendezvous: 30s, operation: 30s}\n",
             extra ? extra : "");
    xdc_test_write_file(path, text);
    return path;
}

static const char *write_run_p(const char *name, const char *mode, int steps, const char *codec, int stages,
                               const char *extra)
{
    return write_run_pb(name, mode, steps, codec, stages, 0.05, extra);
}

static const char *write_run(const char *name, const char *mode, int steps, const char *codec, const char *extra)
{
    return write_run_p(name, mode, steps, codec, 2, extra);
}

/* Run `xdc launch` to completion; returns its exit code, output in out. */
static int launch(const char *run, const char *run_dir, const char *flags, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s %s", xdc_test_bin(), TOPO, run, run_dir,
             flags ? flags : "");
    return xdc_test_run(cmd, out, cap);
}

static void final_field(const char *out, const char *key, char *val, size_t cap)
{
    const char *f = strstr(out, "final val_loss=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    const char *k = strstr(f, key);
    XDC_ASSERT_MSG(k != NULL, "no %s in the final line", key);
    k += strlen(key);
    size_t n = strcspn(k, " \n");
    snprintf(val, cap, "%.*s", (int)(n < cap ? n : cap - 1), k);
}

/* Launch into TMP/<name>, require success and return its params hash (and the run folder). */
static void launch_hash(const char *run, const char *name, const char *flags, char *out, size_t cap, char *dir,
                        size_t dir_cap, char hash[64])
{
    snprintf(dir, dir_cap, "%s/%s", xdc_test_tmpdir(), name);
    int rc = launch(run, dir, flags, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch %s exited %d:\n%s", name, rc, out);
    final_field(out, "params_xxh64=", hash, 64);
}

static float *read_f32(const char *path, size_t *n)
{
    size_t bytes;
    float *p = (float *)xdc_test_read_file(path, &bytes);
    XDC_ASSERT_MSG(p != NULL, "cannot read %s", path);
    *n = bytes / sizeof(float);
    return p;
}

/* The tiny model with `layers` (1-9) layers and `batch` (10-99) sequences per microbatch, written into
 * the test's folder; returns its path (a static buffer). */
static const char *write_tiny(int layers, int batch)
{
    static char path[600];
    char *text = xdc_test_read_file("examples/models/tiny.yaml", NULL);
    char *l = text ? strstr(text, "layers: 2") : NULL, *b = text ? strstr(text, "batch_size: 16") : NULL;
    XDC_ASSERT(l && b && layers >= 1 && layers <= 9 && batch >= 10 && batch <= 99);
    l[8] = (char)('0' + layers);
    b[12] = (char)('0' + batch / 10);
    b[13] = (char)('0' + batch % 10);
    snprintf(path, sizeof path, "%s/tiny-%d-%d.yaml", xdc_test_tmpdir(), layers, batch);
    xdc_test_write_file(path, text);
    free(text);
    return path;
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
    need_corpus();
    char out[65536];
    const char *run = write_run("sync", "sync", 12, "none", "dump_params: true\n");
    match_reference(run, TOPO, TINY, 12, 2, 2, 1, 2, out, sizeof out);
}

XDC_TEST_T(orch_replicas_in_regions_match_single_process, 300)
{
    need_corpus();
    /* One stage, so each region's two workers are data-parallel replicas: intra reduce-scatter, WAN
     * exchange of the shards, intra all-gather. */
    char out[65536];
    const char *run = write_run_p("dp", "sync", 10, "none", 1, "dump_params: true\n");
    match_reference(run, TOPO, TINY, 10, 2, 2, 2, 1, out, sizeof out);
}

XDC_TEST_T(orch_pipeline_across_regions_matches_single_process, 300)
{
    need_corpus();
    /* Stage 0 in us-east, stage 1 in eu-west: activations and their gradients cross the emulated WAN. */
    char out[65536], bytes[64];
    const char *run = write_run("span", "sync", 8, "none",
                                "dump_params: true\nspan_regions: true\nactivation_codec: none\n");
    match_reference(run, "examples/topology/span-2region.yaml", TINY, 8, 2, 1, 1, 2, out, sizeof out);
    final_field(out, "wan_bytes=", bytes, sizeof bytes);
    XDC_ASSERT_MSG(atoll(bytes) > 0, "no activation crossed the WAN");
}

XDC_TEST_T(orch_1f1b_boundary_buffers_match_single_process, 300)
{
    need_corpus();
    /* 8 microbatches through one pipeline of 4 stages over both regions' 2 workers each: boundaries in a
     * region (stages 0-1, 2-3) and across the WAN (1-2). Each stage's x_in, dy_in and dx_out hold one
     * microbatch and are reused by every microbatch of the steady 1F1B phase (orch_train.c); 48 sequences
     * per microbatch make an activation (768 KiB) larger than the CPU intra ring (512 KiB), so a transfer
     * is not done when its send is posted. The parameters
     * match the serial reference, and a cpu-strict run with the intra backend's NCCL semantics ends at the
     * same params_xxh64. */
    static char out[65536], extra[1024];
    const char *model = write_tiny(4, 48);
    snprintf(extra, sizeof extra,
             "model: %s\nspan_regions: true\nactivation_codec: none\nmicrobatches: 8\ndump_params: true\n", model);
    const char *run = write_run_pb("reuse", "sync", 3, "none", 4, 0.05, extra);
    match_reference(run, TOPO, model, 3, 8, 1, 1, 4, out, sizeof out);
    char cpu[64], strict[64], dir[600], cmd[2048];
    final_field(out, "params_xxh64=", cpu, sizeof cpu);
    snprintf(dir, sizeof dir, "%s/reuse-strict", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "XDC_INTRA_NCCL_SEMANTICS=1 timeout 240 %s launch -t %s -c %s --run-dir %s --device cpu-strict",
             xdc_test_bin(), TOPO, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "cpu-strict exited %d:\n%s", rc, out);
    final_field(out, "params_xxh64=", strict, sizeof strict);
    printf("cpu %s, cpu-strict under NCCL semantics %s\n", cpu, strict);
    XDC_ASSERT_MSG(strcmp(cpu, strict) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, cpu);
}

static int final_hashes(const char *dir, char hash[][17], int cap);

/* sync.delay_steps 1, codec none, 2 regions x 2 replicas, a pipeline across 2 regions and 2 regions x 2
 * stages: the runs end where the serial stale-by-one reference does (step t applies the average of step
 * t-1), and that is not where the undelayed reference ends, so a run applying any other step's gradients
 * fails one of the two. */
XDC_TEST_T(orch_sync_delay_matches_stale_by_one_reference, 300)
{
    need_corpus();
    char out[65536], dir[600];
    /* Replicas in each region (1 stage, 2 workers): the one round averages them and the regions, delayed. */
    const char *run = write_run_p("delay-dp", "sync", 6, "none", 1, "dump_params: true\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, TOPO, TINY, 6, 2, 2, 2, 1, 1, out, sizeof out);
    /* A pipeline across regions: the step-0 loss sum and the gradient norm cross the WAN between stages. */
    run = write_run("delay-span", "sync", 6, "none",
                    "dump_params: true\nspan_regions: true\nactivation_codec: none\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, "examples/topology/span-2region.yaml", TINY, 6, 2, 1, 1, 2, 1, out, sizeof out);
    run = write_run("delay", "sync", 8, "none", "dump_params: true\nsync: {delay_steps: 1}\n");
    match_reference_delayed(run, TOPO, TINY, 8, 2, 2, 1, 2, 1, out, sizeof out);
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    xdc_gpt_stage *st[2];
    reference_run(8, 2, TINY, 2, 1, 2, 0, st);
    double d = params_max_diff(dir, 2, st);
    for (int s = 0; s < 2; s++) xdc_gpt_stage_destroy(st[s]);
    printf("max |delayed run - undelayed reference| = %.3g\n", d);
    XDC_ASSERT_MSG(d > 1e-4, "the delayed run ends %.3g from the undelayed reference: no delay applied", d);
}

/* The delayed run with the int8 codec on 2 regions: every worker of both regions ends on one model, the
 * validation loss falls, and cpu-strict (device memory only through the backend, real events between the
 * compute and comm streams) ends on the cpu run's parameters. Bad values of the key, and resuming a
 * checkpoint with it, are named (exit 78). */
XDC_TEST_T(orch_sync_delay_two_regions_agree_on_cpu_and_strict, 300)
{
    need_corpus();
    static char out[65536];
    const char *run = write_run("delay8", "sync", 12, "int8", "eval_interval: 4\nsync: {delay_steps: 1}\n");
    char hash[2][64], h[8][17], dir[600];
    for (int d = 0; d < 2; d++) {
        char name[32];
        snprintf(name, sizeof name, "delay-%s", d ? "strict" : "cpu");
        launch_hash(run, name, d ? "--device cpu-strict" : "--device cpu", out, sizeof out, dir, sizeof dir, hash[d]);
        int n = final_hashes(dir, h, 8);
        XDC_ASSERT_MSG(n == 2, "%s: %d workers logged their region's final parameters, expected 2", name, n);
        XDC_ASSERT_MSG(strcmp(h[0], h[1]) == 0, "%s: the regions end on %s and %s", name, h[0], h[1]);
        XDC_ASSERT_MSG(strncmp(h[0], hash[d], 16) == 0, "%s: logged %s, result %s", name, h[0], hash[d]);
        const char *v4 = strstr(out, "step     4  val_loss ");
        char last[32];
        final_field(out, "val_loss=", last, sizeof last);
        XDC_ASSERT_MSG(v4 != NULL, "%s: no validation at step 4", name);
        double first = atof(v4 + strlen("step     4  val_loss "));
        XDC_ASSERT_MSG(atof(last) < first - 0.1, "%s: val_loss %.4f at step 4, %s at the end", name, first, last);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) == 0, "cpu-strict ends at %s, cpu at %s", hash[1], hash[0]);
    static const char *const bad[][2] = {
        {"sync: {delay_steps: 2}\n", "delay_steps: 2 is out of range"},
        {"sync: {delay_steps: 1}\ncheckpoint_every: 2\n", "cannot be combined"},
    };
    for (int i = 0; i < 2; i++) {
        char name[32], where[64];
        snprintf(name, sizeof name, "delay-bad-%d", i);
        const char *path = write_run(name, "sync", 4, "int8", bad[i][0]);
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
        XDC_ASSERT_EQ(launch(path, dir, NULL, out, sizeof out), 78);
        snprintf(where, sizeof where, "%s.yaml:11:21:", name); /* the value's line:col */
        XDC_ASSERT_STR_CONTAINS(out, where);
        XDC_ASSERT_STR_CONTAINS(out, bad[i][1]);
    }
    const char *path = write_run("delay-diloco", "diloco", 4, "int8", "sync: {delay_steps: 1}\n");
    snprintf(dir, sizeof dir, "%s/delay-diloco", xdc_test_tmpdir());
    XDC_ASSERT_EQ(launch(path, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "sync.delay_steps needs mode sync (this run's mode is diloco)");
    /* A checkpoint of an undelayed run, resumed with the delay: refused by the workers, the key named. */
    path = write_run("delay-ckpt", "sync", 4, "int8", "checkpoint_every: 2\n");
    snprintf(dir, sizeof dir, "%s/delay-ckpt", xdc_test_tmpdir());
    int rc = launch(path, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "undelayed run with checkpoints exited %d:\n%s", rc, out);
    path = write_run("delay-ckpt", "sync", 4, "int8", "sync: {delay_steps: 1}\n");
    XDC_ASSERT_EQ(launch(path, dir, "--resume", out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "resume: sync.delay_steps 1 in ");
}

XDC_TEST_T(orch_modes_on_cpu_strict_match_cpu, 300)
{
    need_corpus();
    /* Every launch mode on the device the host cannot touch (PROT_NONE memory, stream threads, real
     * events; docs/device.md) ends with the cpu run's parameters bit for bit: sync with pipelines, data-
     * parallel replicas (intra collectives on device buffers), a pipeline across regions (activation codec
     * on the device) with one stage per region and with two, DiLoCo and streaming, streaming with replicas. Buckets of 0.05 MiB, as in the other
     * launch tests: their edges fall inside 64 KiB blocks. */
    static const struct {
        const char *name, *topo, *mode, *codec, *extra;
        int steps, stages;
    } runs[] = {
        {"sync", TOPO, "sync", "none", "", 4, 2},
        {"dp", TOPO, "sync", "int8", "", 4, 1},
        {"span", "examples/topology/span-2region.yaml", "sync", "none", "span_regions: true\nactivation_codec: int8\n",
         3, 2},
        {"diloco", TOPO, "diloco", "int8", "diloco: {inner_steps: 3}\n", 6, 2},
        {"streaming", TOPO, "streaming", "int8", "diloco: {inner_steps: 3}\nstreaming: {fragments: 2}\n", 6, 2},
        {"stream-dp", TOPO, "streaming", "int8", "diloco: {inner_steps: 3}\nstreaming: {fragments: 2}\n", 6, 1},
        {"span-4", TOPO, "sync", "none", NULL, 3, 4},
    };
    static char out[65536], span4[1024];
    /* A pipeline of 4 stages over both regions' 2 workers each: its scalar chain (loss, gradient norm) has an
     * in-region neighbour at every stage, so those messages go through device memory (orch_pipe.c). */
    snprintf(span4, sizeof span4, "model: %s\nspan_regions: true\nactivation_codec: int8\n", write_tiny(4, 16));
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *run = write_run_pb(runs[i].name, runs[i].mode, runs[i].steps, runs[i].codec, runs[i].stages, 0.05,
                                       runs[i].extra ? runs[i].extra : span4);
        char hash[2][64], dir[600], cmd[2048];
        for (int d = 0; d < 2; d++) {
            const char *dev = d ? "cpu-strict" : "cpu";
            snprintf(dir, sizeof dir, "%s/%s-%s", xdc_test_tmpdir(), runs[i].name, dev);
            snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s --device %s", xdc_test_bin(),
                     runs[i].topo, run, dir, dev);
            int rc = xdc_test_run(cmd, out, sizeof out);
            XDC_ASSERT_MSG(rc == 0, "%s on %s exited %d:\n%s", runs[i].name, dev, rc, out);
            final_field(out, "params_xxh64=", hash[d], sizeof hash[d]);
        }
        printf("%s: cpu %s, cpu-strict %s\n", runs[i].name, hash[0], hash[1]);
        XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) == 0, "%s: cpu-strict ends at params_xxh64=%s, cpu at %s", runs[i].name,
                       hash[1], hash[0]);
    }
    /* Checkpoints: a cpu run's checkpoint resumed on cpu-strict, and the strict run's own, both end where
     * the uninterrupted cpu run does (the resume starts from the last checkpoint, step 4). */
    const char *run = write_run_pb("ckpt", "sync", 6, "none", 2, 0.05, "checkpoint_every: 2\n");
    char want[64], got[64], dir[600], cmd[2048];
    const char *legs[3][2] = {{"cpu", ""}, {"cpu-strict", "--resume"}, {"cpu-strict", ""}};
    for (int l = 0; l < 3; l++) {
        snprintf(dir, sizeof dir, "%s/ckpt-%s", xdc_test_tmpdir(), l == 2 ? "strict" : "cpu");
        for (int again = 0; again < (l == 2 ? 2 : 1); again++) {
            snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s --device %s %s", xdc_test_bin(),
                     TOPO, run, dir, legs[l][0], again ? "--resume" : legs[l][1]);
            int rc = xdc_test_run(cmd, out, sizeof out);
            XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
            final_field(out, "params_xxh64=", l ? got : want, 64);
            if (l) XDC_ASSERT_MSG(strcmp(want, got) == 0, "%s ends at %s, the cpu run at %s", cmd, got, want);
        }
    }
    snprintf(cmd, sizeof cmd, "grep -l 'resumed from the checkpoint of step 4' %s/ckpt-*/logs/*.log | wc -l",
             xdc_test_tmpdir());
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 8, "expected 8 resumed workers' logs, got %s", out);
}

XDC_TEST_T(orch_same_seed_same_parameters, 300)
{
    need_corpus();
    const char *run = write_run("det", "sync", 10, "int8", "metrics_port: 0\n");
    char dir[600], out[65536], h1[64], h2[64];
    launch_hash(run, "a", NULL, out, sizeof out, dir, sizeof dir, h1);
    launch_hash(run, "b", NULL, out, sizeof out, dir, sizeof dir, h2);
    XDC_ASSERT_MSG(strcmp(h1, h2) == 0, "hashes differ: %s vs %s", h1, h2);
    char bytes[64];
    final_field(out, "wan_bytes=", bytes, sizeof bytes);
    XDC_ASSERT(atoll(bytes) > 0);

    /* Observability of the same run: a metrics snapshot per worker, and one merged trace with the
     * compute and WAN lanes of every rank (promtool's verdict on a snapshot is a test of its own). */
    char path[800];
    snprintf(path, sizeof path, "%s/metrics/eu-west-1.prom", dir);
    char *prom = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(prom != NULL, "no metrics snapshot at %s", path);
    XDC_ASSERT_STR_CONTAINS(prom, "xdc_step_total{region=\"eu-west\",host=\"west-node1\",rank=\"1\"} 10");
    XDC_ASSERT_STR_CONTAINS(
        prom, "xdc_wan_tx_bytes_total{region=\"eu-west\",host=\"west-node1\",rank=\"1\",peer=\"us-east\"}");
    free(prom);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    char *trace = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(trace != NULL, "no merged trace at %s", path);
    XDC_ASSERT_STR_CONTAINS(trace, "\"backward\"");
    XDC_ASSERT_STR_CONTAINS(trace, "wait for gradient sync");
    XDC_ASSERT_STR_CONTAINS(trace, "eu-west/west-node1:1");
    free(trace);
}

/* Sum of a counter over every worker's final metrics snapshot in RUN/metrics/; *min_series is the
 * smallest single series (one per worker and peer), *n_series how many were found. */
static double sum_counter(const char *run_dir, const char *name, double *min_series, int *n_series)
{
    char mdir[700], path[1000], line[1024];
    snprintf(mdir, sizeof mdir, "%s/metrics", run_dir);
    DIR *d = opendir(mdir);
    XDC_ASSERT_MSG(d != NULL, "no metrics snapshots in %s", mdir);
    double sum = 0;
    *min_series = -1;
    *n_series = 0;
    size_t nl = strlen(name);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".prom")) continue;
        snprintf(path, sizeof path, "%s/%s", mdir, e->d_name);
        FILE *f = fopen(path, "r");
        XDC_ASSERT(f != NULL);
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, name, nl) != 0 || line[nl] != '{') continue;
            const char *v = strrchr(line, ' ');
            double x = v ? atof(v + 1) : 0;
            sum += x;
            if (*min_series < 0 || x < *min_series) *min_series = x;
            ++*n_series;
        }
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* A run with two outages ends at the fault-free hash; the same hash could come from outages that missed
 * the run, so its counters must show that every worker's streams were cut and came back after each
 * (reconnects >= 2 on each of the 4 workers) and that frames in flight at a cut were sent again. Puts
 * the totals (reconnects, resent frames) in `totals` when not NULL. */
static void expect_cuts_and_resends(const char *dir, double totals[2])
{
    double least;
    int n;
    double reconnects = sum_counter(dir, "xdc_wan_reconnects_total", &least, &n);
    XDC_ASSERT_MSG(n == 4 && least >= 2, "reconnects: %d series, least %g (total %g)", n, least, reconnects);
    double resent = sum_counter(dir, "xdc_wan_retransmit_frames_total", &least, &n);
    XDC_ASSERT_MSG(n == 4 && resent >= 1, "no frame was resent after the outages (%d series)", n);
    if (totals) {
        totals[0] = reconnects;
        totals[1] = resent;
    }
}

XDC_TEST_T(orch_metrics_snapshot_passes_promtool, 120)
{
    need_corpus();
    char out[8192];
    if (xdc_test_run("command -v promtool", out, sizeof out) != 0)
        xdc_test_skip("promtool not installed (Debian package prometheus; `make deps`)");
    const char *run = write_run("prom", "sync", 3, "int8", "metrics_port: 0\n");
    char dir[600], big[65536], h[64], path[800], cmd[1200];
    launch_hash(run, "prom", NULL, big, sizeof big, dir, sizeof dir, h);
    snprintf(path, sizeof path, "%s/metrics/us-east-0.prom", dir);
    XDC_ASSERT_MSG(access(path, R_OK) == 0, "no metrics snapshot at %s", path);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "promtool check metrics: %s", out);
}

XDC_TEST_T(orch_wan_outage_mid_run_loses_nothing, 300)
{
    need_corpus();
    const char *run = write_run("outage", "sync", 40, "none", "metrics_port: 0\n");
    char dir[600], out[65536], h1[64], h2[64];
    launch_hash(run, "plain", NULL, out, sizeof out, dir, sizeof dir, h1);
    /* Two outages, one flag each: the second adds to the schedule, it does not replace the first. */
    launch_hash(run, "cut", "--outage 2s@1s --outage 2s@5s", out, sizeof out, dir, sizeof dir, h2);
    XDC_ASSERT_MSG(strcmp(h1, h2) == 0, "outages changed the result: %s vs %s", h1, h2);
    expect_cuts_and_resends(dir, NULL);
    /* Every worker compared both regions' pace (stragglers): one series per region, each known. */
    double least;
    int n;
    sum_counter(dir, "xdc_region_slowdown_ratio", &least, &n);
    XDC_ASSERT_MSG(n == 8 && least > 0, "region slowdown: %d series, least %g", n, least);
}

/* `xdc launch` in the background, its output in `log`; `outage` (NULL: none) is its --outage schedule. */
static pid_t start_launch(const char *run, const char *dir, const char *log, const char *outage)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "launch", "-t", TOPO, "-c", run, "--run-dir", dir,
              outage ? "--outage" : (char *)NULL, outage, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* Send `sig` to the worker whose pid file is `pidfile`; returns its pid. */
static pid_t signal_worker(const char *pidfile, int sig)
{
    char *pidtext = xdc_test_read_file(pidfile, NULL);
    XDC_ASSERT_MSG(pidtext != NULL, "no pid file %s", pidfile);
    pid_t pid = (pid_t)atoi(pidtext);
    free(pidtext);
    XDC_ASSERT(pid > 0 && kill(pid, sig) == 0);
    return pid;
}

XDC_TEST_T(orch_killed_worker_is_named_and_resume_matches, 420)
{
    need_corpus();
    const char *run = write_run("kill", "sync", 40, "none", "checkpoint_every: 5\n");
    char dir[600], out[65536], want[64], got[64];
    launch_hash(run, "whole", NULL, out, sizeof out, dir, sizeof dir, want);

    snprintf(dir, sizeof dir, "%s/killed", xdc_test_tmpdir());
    char log[700], manifest[800], pidfile[800];
    snprintf(log, sizeof log, "%s/killed.log", xdc_test_tmpdir());
    pid_t p = start_launch(run, dir, log, NULL);
    /* Wait (bounded) until a checkpoint is complete, then kill a worker of the second region. */
    snprintf(manifest, sizeof manifest, "%s/ckpt/step-00000010/MANIFEST", dir);
    snprintf(pidfile, sizeof pidfile, "%s/pids/eu-west-1.pid", dir);
    int seen = 0;
    for (int i = 0; i < 2400 && !seen; i++) {
        seen = access(manifest, R_OK) == 0;
        if (!seen) nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(seen, "no checkpoint of step 10 appeared");
    signal_worker(pidfile, SIGKILL);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 69,
                   "launch ended with 0x%x after a worker was killed, "
                   "expected exit 69 (a member is gone)",
                   status);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "run failed: worker eu-west/west-node1:1");
    XDC_ASSERT_STR_CONTAINS(text, "killed by signal 9");
    free(text);

    char note[800];
    snprintf(note, sizeof note, "%s/failed-eu-west-0", dir);
    XDC_ASSERT_MSG(access(note, R_OK) == 0, "the agent left no failure note at %s", note);
    int rc = launch(run, dir, "--resume", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "resume exited %d:\n%s", rc, out);
    final_field(out, "params_xxh64=", got, sizeof got);
    XDC_ASSERT_MSG(strcmp(want, got) == 0, "resumed run ends at %s, uninterrupted at %s", got, want);
    /* The resumed run's step log is fresh; the killed run's rows are kept beside it. */
    char kept[900];
    snprintf(kept, sizeof kept, "%s/steps/us-east-0.tsv.1", dir);
    XDC_ASSERT_MSG(access(kept, R_OK) == 0, "the step log before the resume was not kept as %s", kept);
    /* The earlier attempt's note is not this attempt's: the agent removed it when it started. */
    XDC_ASSERT_MSG(access(note, F_OK) != 0, "the earlier attempt's note %s is still there after --resume", note);
}

/* Wait (bounded) until `needle` appears in file `path`; 1 when it did. */
static int wait_for_text(const char *path, const char *needle, int tries)
{
    for (int i = 0; i < tries; i++) {
        char *text = xdc_test_read_file(path, NULL);
        int seen = text && strstr(text, needle);
        free(text);
        if (seen) return 1;
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    return 0;
}

/* A worker stopped with SIGSTOP mid-run: its peers' waits run into the operation deadline. The run is a
 * temporary failure (exit 75, not 64 as when a wait went on with a request already released), and the
 * final line names the stopped member, not the first member that gave up waiting for it. */
XDC_TEST_T(orch_stopped_worker_is_a_timeout_naming_it, 120)
{
    need_corpus();
    /* The operation deadline outlasts the sync's first "waiting for" line (5 s). */
    const char *run = write_run("stopped", "sync", 2000, "none", "timeouts: {rendezvous: 30s, operation: 8s}\n");
    char dir[600], log[700], pidfile[800];
    snprintf(dir, sizeof dir, "%s/stopped", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/stopped.log", xdc_test_tmpdir());
    pid_t p = start_launch(run, dir, log, NULL);
    XDC_ASSERT_MSG(wait_for_text(log, "step    10/", 2400), "the run never reached step 10");
    snprintf(pidfile, sizeof pidfile, "%s/pids/eu-west-1.pid", dir);
    pid_t victim = signal_worker(pidfile, SIGSTOP);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    kill(victim, SIGCONT); /* already killed by its agent, normally; never left stopped */
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 75, "launch ended with 0x%x, expected exit 75:\n%s",
                   status, text);
    XDC_ASSERT_STR_CONTAINS(text, "run failed: eu-west/west-node1:1 stopped answering");
    XDC_ASSERT_STR_CONTAINS(text, "its connection silent for "); /* the store's line tells it from the blocked */
    XDC_ASSERT_STR_CONTAINS(text, "gave up waiting");
    free(text);
    /* Its peer in us-east said whom it was waiting for, and for how long, while it waited. */
    char plog[800];
    snprintf(plog, sizeof plog, "%s/logs/us-east-east-node1-1.log", dir);
    text = xdc_test_read_file(plog, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "waiting for eu-west/1 for ");
    XDC_ASSERT_STR_CONTAINS(text, "its last rounds kept us waiting ");
    /* and, when it gave up, since when and which key of the run file sets the limit */
    XDC_ASSERT_STR_CONTAINS(text, "UTC; timeouts.operation = 8000 ms in the run file)");
    free(text);
}

/* Packet loss for a whole `xdc launch`: the TCP packets that leave through the loopback of a network
 * namespace of the run's own, `pct` in 100 of them dropped at random (nftables; this kernel has no netem,
 * and tc has no drop action). Every hop of a launch is TCP on loopback (worker to relay, relay to worker,
 * the rendezvous), so each crossing meets the loss, and kernel TCP retransmits as on a lossy WAN; the
 * loopback's minimum retransmission timeout is 20 ms there instead of the kernel's 200 ms (a WAN's
 * follows its RTT; loopback's floor would make every lost packet a 200 ms stall). The namespace is
 * unshare's, not a named one: it ends with its last process, so a test that fails or times out leaves
 * nothing behind. Skips where it cannot be made (no root, no nft, no nf_tables). */
#define LOSS_RULES(pct)                                                                                           \
    "ip link set lo up && ip route replace local 127.0.0.1 dev lo table local proto kernel scope host src "       \
    "127.0.0.1 rto_min 20ms && nft add table inet xdcloss && nft add chain inet xdcloss out '{ type filter hook " \
    "output priority 0; }' && nft add rule inet xdcloss out meta l4proto tcp numgen random mod 100 lt " #pct      \
    " counter drop"

static void need_lossy_namespace(void)
{
    char out[2048];
    if (geteuid() != 0) xdc_test_skip("packet loss needs root (a network namespace and nftables)");
    if (xdc_test_run("unshare --net bash -c \"" LOSS_RULES(1) "\"", out, sizeof out) != 0)
        xdc_test_skip("no nftables packet loss in a namespace here (Debian package nftables; `make deps`): %s", out);
}

/* start_launch's run in a namespace whose loopback drops 1 % of TCP packets; after the run the log's last
 * line says how many were dropped ("lossy loopback: N TCP packets dropped"). */
static pid_t start_lossy_launch(const char *run, const char *dir, const char *log, const char *outage)
{
    char script[4096];
    snprintf(
        script, sizeof script,
        LOSS_RULES(
            1) " || exit 69; timeout 240 %s launch -t %s -c %s --run-dir %s --outage %s; rc=$?; nft list chain inet "
               "xdcloss out | sed -n 's/.*counter packets \\([0-9]*\\).*/lossy loopback: \\1 TCP packets dropped/p'; "
               "exit $rc",
        xdc_test_bin(), TOPO, run, dir, outage);
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execlp("unshare", "unshare", "--net", "bash", "-c", script, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* A fault schedule nobody tuned the code to (issue 16): in one run (sync, codec none), two outages of
 * different lengths cut every WAN stream, a worker is stopped with SIGSTOP for 3 s and continued, and 1 %
 * of the run's TCP packets are lost throughout (start_lossy_launch). The run ends at the fault-free hash,
 * each worker's counters show its streams cut and re-established after both outages and frames in flight
 * sent again, and the loss rule counts the packets it dropped. */
XDC_TEST_T(orch_fault_schedule_ends_at_the_fault_free_hash, 300)
{
    need_corpus();
    need_lossy_namespace();
    const char *run = write_run("schedule", "sync", 80, "none", "metrics_port: 0\n");
    char dir[600], calm_dir[600], calm_log[700], want[64], got[64], log[700], pidfile[800];
    /* The fault-free run beside the faulty one (its hash does not depend on timing; most of the faulty
     * run's time is spent waiting). */
    snprintf(calm_dir, sizeof calm_dir, "%s/calm", xdc_test_tmpdir());
    snprintf(calm_log, sizeof calm_log, "%s/calm.log", xdc_test_tmpdir());
    pid_t calm = start_launch(run, calm_dir, calm_log, NULL);
    snprintf(dir, sizeof dir, "%s/stormy", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/stormy.log", xdc_test_tmpdir());
    pid_t p = start_lossy_launch(run, dir, log, "1s@2s,4s@7s");
    XDC_ASSERT_MSG(wait_for_text(log, "step    10/", 2400), "the run never reached step 10");
    snprintf(pidfile, sizeof pidfile, "%s/pids/eu-west-1.pid", dir);
    pid_t victim = signal_worker(pidfile, SIGSTOP);
    nanosleep(&(struct timespec){3, 0}, NULL); /* the length of the fault, not a wait for anything */
    kill(victim, SIGCONT);
    int status;
    XDC_ASSERT(waitpid(calm, &status, 0) == calm);
    char *text = xdc_test_read_file(calm_log, NULL);
    XDC_ASSERT_MSG(text && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the fault-free launch ended with 0x%x:\n%s",
                   status, text ? text : "(no log)");
    final_field(text, "params_xxh64=", want, sizeof want);
    free(text);
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(text && WIFEXITED(status) && WEXITSTATUS(status) == 0, "launch ended with 0x%x:\n%s", status,
                   text ? text : "(no log)");
    final_field(text, "params_xxh64=", got, sizeof got);
    const char *lost = strstr(text, "lossy loopback: ");
    long dropped = lost ? atol(lost + strlen("lossy loopback: ")) : -1;
    free(text);
    XDC_ASSERT_MSG(strcmp(want, got) == 0, "the faults changed the result: %s vs %s without them", got, want);
    XDC_ASSERT_MSG(dropped > 0, "the loss rule dropped no packet (%ld)", dropped);
    double totals[2];
    expect_cuts_and_resends(dir, totals);
    printf("fault schedule: %g stream reconnects, %g frames resent over 4 workers, %ld TCP packets lost; hash %s as "
           "without faults\n",
           totals[0], totals[1], dropped, got);
}

XDC_TEST_T(orch_diloco_and_streaming_near_sync, 400)
{
    need_corpus();
    /* Margin (docs/runtime.md): DiLoCo with H=10 and streaming with 4 fragments end within 0.35 nats of
     * sync's validation loss after 100 steps of the tiny model. */
    const double margin = 0.35;
    char dir[600], out[65536], v[64];
    double loss[3];
    const char *modes[3] = {"sync", "diloco", "streaming"};
    for (int m = 0; m < 3; m++) {
        const char *run = write_run(modes[m], modes[m], 100, "int8",
                                    "diloco: {inner_steps: 10}\nstreaming: {fragments: 4}\n");
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), modes[m]);
        int rc = launch(run, dir, NULL, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "%s run exited %d:\n%s", modes[m], rc, out);
        final_field(out, "val_loss=", v, sizeof v);
        loss[m] = atof(v);
        printf("%s: val_loss %.4f\n", modes[m], loss[m]);
    }
    XDC_ASSERT_MSG(loss[0] < 3.0, "sync did not learn: %.3f", loss[0]);
    XDC_ASSERT_MSG(loss[1] <= loss[0] + margin, "diloco %.3f vs sync %.3f", loss[1], loss[0]);
    XDC_ASSERT_MSG(loss[2] <= loss[0] + margin, "streaming %.3f vs sync %.3f", loss[2], loss[0]);
}

/* Start `xdc coordinator` for `run` (output in log) and return its address once it listens (bounded
 * wait); *pid receives its process. The caller frees the address. */
static char *start_coordinator(const char *run, const char *dir, const char *log, const char *run_id, pid_t *pid)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", TOPO, "-c", run, "--run-dir", dir, "--host",
              "127.0.0.1", "--port", "0", "--run-id", run_id, (char *)NULL);
        _exit(127);
    }
    *pid = p;
    char *coord = NULL;
    for (int i = 0; i < 400 && !coord; i++) {
        char *text = xdc_test_read_file(log, NULL);
        char *at = text ? strstr(text, "--coordinator ") : NULL;
        if (at) coord = strndup(at + strlen("--coordinator "), strcspn(at + strlen("--coordinator "), " \n"));
        free(text);
        if (!coord) nanosleep(&(struct timespec){0, 25 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(coord != NULL, "the coordinator did not start");
    return coord;
}

XDC_TEST_T(orch_members_that_never_arrive_are_named, 120)
{
    need_corpus();
    const char *run = write_run("absent", "sync", 5, "none", "timeouts: {rendezvous: 3s, operation: 10s}\n");
    char dir[600], log[700], cmd[2048], out[16384];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    pid_t p;
    char *coord = start_coordinator(run, dir, log, "absent-test", &p);
    /* Only us-east's agent comes; eu-west never does. */
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s agent -t %s -c %s --run-dir %s --region us-east --node 0 --coordinator %s "
             "--run-id absent-test",
             xdc_test_bin(), TOPO, run, dir, coord);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "agent exited %d, expected 69:\n%s", rc, out);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 69);
    char *text3 = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text3, "eu-west/west-node1:0 (never joined");
    free(text3);
    free(coord);
}

/* The sparse codec end to end through `xdc launch`: DiLoCo and streaming runs complete with a finite
 * validation loss and send under a tenth of the WAN bytes of the same DiLoCo run with int8. */
XDC_TEST_T(orch_sparse_codec_runs_diloco_and_streaming, 300)
{
    need_corpus();
    static char out[65536];
    static const char *const runs[][2] = {
        {"diloco", "int8"}, {"diloco", "sparse:0.02:2"}, {"streaming", "sparse:0.02:2"}};
    double bytes[3];
    for (int i = 0; i < 3; i++) {
        char name[32], dir[600], val[64];
        snprintf(name, sizeof name, "sparse-%d", i);
        const char *run = write_run(name, runs[i][0], 40, runs[i][1],
                                    "diloco: {inner_steps: 10}\nstreaming: {fragments: 4}\n");
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
        int rc = launch(run, dir, NULL, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "%s %s exited %d:\n%s", runs[i][0], runs[i][1], rc, out);
        final_field(out, "val_loss=", val, sizeof val);
        XDC_ASSERT_MSG(isfinite(atof(val)) && atof(val) > 0, "%s %s: val_loss %s", runs[i][0], runs[i][1], val);
        final_field(out, "wan_bytes=", val, sizeof val);
        bytes[i] = atof(val);
    }
    XDC_ASSERT_MSG(bytes[1] * 10 < bytes[0] && bytes[2] * 10 < bytes[0],
                   "WAN bytes int8 %g, sparse diloco %g, streaming %g", bytes[0], bytes[1], bytes[2]);
}

/* The params_xxh64 every worker logged as its region's final parameters (at most 8, into hash[][17]); how
 * many. */
static int final_hashes(const char *dir, char hash[][17], int cap)
{
    char logs[700], path[1000];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    DIR *d = opendir(logs);
    XDC_ASSERT_MSG(d != NULL, "no logs in %s", logs);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < cap;) {
        if (!strstr(e->d_name, ".log")) continue;
        snprintf(path, sizeof path, "%s/%s", logs, e->d_name);
        char *text = xdc_test_read_file(path, NULL);
        const char *h = text ? strstr(text, "final parameters of region ") : NULL;
        if (h && (h = strstr(h, "params_xxh64="))) snprintf(hash[n++], 17, "%.16s", h + strlen("params_xxh64="));
        free(text);
    }
    closedir(d);
    return n;
}

/* diloco.keep_unsent with a sparse codec and diloco.final_codec int8: the unsent part of each round stays in
 * each region's parameters, yet the last round (int8, so more bytes than the sparse run without the two
 * options) leaves both regions on one model; the run differs from the plain one. keep_unsent outside DiLoCo
 * or with replicas, and an unknown final codec, are refused at load, named (exit 78). */
XDC_TEST_T(orch_diloco_keep_unsent_ends_on_one_model, 300)
{
    need_corpus();
    static char out[65536];
    static const char *const extra[2] = {"diloco: {inner_steps: 10}\n",
                                         "diloco: {inner_steps: 10, keep_unsent: true, final_codec: int8}\n"};
    char hash[2][64], h[8][17], dir[600], bytes[2][64];
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "keep-%d", i);
        launch_hash(write_run(name, "diloco", 40, "sparse:0.02:2", extra[i]), name, NULL, out, sizeof out, dir,
                    sizeof dir, hash[i]);
        final_field(out, "wan_bytes=", bytes[i], sizeof bytes[i]);
        int n = final_hashes(dir, h, 8);
        XDC_ASSERT_MSG(n >= 2, "%s: %d workers logged final parameters", name, n);
        for (int k = 1; k < n; k++) XDC_ASSERT_MSG(strcmp(h[k], h[0]) == 0, "%s: %s against %s", name, h[k], h[0]);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) != 0, "keep_unsent changed nothing (%s)", hash[0]);
    XDC_ASSERT_MSG(atof(bytes[1]) > atof(bytes[0]), "final int8 round: %s bytes, all sparse %s", bytes[1], bytes[0]);
    const char *bad = write_run("keep-streaming", "streaming", 20, "sparse:0.02:2", "diloco: {keep_unsent: true}\n");
    snprintf(dir, sizeof dir, "%s/keep-streaming", xdc_test_tmpdir());
    XDC_ASSERT_EQ(launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.keep_unsent needs mode diloco");
    bad = write_run_p("keep-replicas", "diloco", 20, "sparse:0.02:2", 1, "diloco: {keep_unsent: true}\n");
    snprintf(dir, sizeof dir, "%s/keep-replicas", xdc_test_tmpdir());
    XDC_ASSERT_EQ(launch(bad, dir, NULL, out, sizeof out), 78); /* 2 workers, 1 stage: 2 replicas per region */
    XDC_ASSERT_STR_CONTAINS(out, "needs one replica per stage in each region, but region");
    bad = write_run("final-bad", "diloco", 20, "int8", "diloco: {final_codec: int9}\n");
    snprintf(dir, sizeof dir, "%s/final-bad", xdc_test_tmpdir());
    XDC_ASSERT_EQ(launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.final_codec:");
}

/* A `plan: auto` sync run re-planning every 3 steps on the demo link, emulated at `degrade` x its
 * bandwidth ("1" = as the topology says); the launcher's output in out. */
static void replan_run(const char *degrade, char *out, size_t cap)
{
    need_corpus();
    char text[1024], cwd[400], path[600], cmd[2048];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/replan.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\nplan: auto\nmicrobatches: 2\nsteps: 15\n"
             "replan_every: 3\ntimeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, DATA);
    xdc_test_write_file(path, text);
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s/run --degrade-links %s", xdc_test_bin(),
             TOPO, path, xdc_test_tmpdir(), degrade);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "plan: sync");
    XDC_ASSERT_STR_CONTAINS(out, "final val_loss=");
}

XDC_TEST_T(orch_plan_auto_and_replan_on_a_degraded_link, 300)
{
    /* The emulated link carries 5 % of what the topology promises, so the first re-plan check finds
     * the link far slower than planned and switches to a stronger codec, in every region at the same
     * step (or the run would not finish). */
    char out[65536];
    replan_run("0.05", out, sizeof out);
    XDC_ASSERT_STR_CONTAINS(out, "re-plan: goodput");
}

XDC_TEST_T(orch_plan_auto_keeps_its_plan_on_a_healthy_link, 300)
{
    /* The link as planned: five checks over the run, none may re-plan, however long each region waits
     * for the other's compute (goodput counts only the time bytes were arriving). */
    char out[65536];
    replan_run("1", out, sizeof out);
    XDC_ASSERT_MSG(strstr(out, "re-plan") == NULL, "a healthy link re-planned:\n%s", out);
    /* The planner picked the microbatches: the run file's 2 of tiny's 16 sequences per worker make 2 x 16 x 4
     * sequences per step, cut for the P stages per replica it chose (4 / P replicas: 32 P sequences each) into
     * M microbatches of b; one stage has no bubble to shrink, so one microbatch. */
    const char *plan = strstr(out, "plan: sync, ");
    int P = 0, M = 0, b = 0;
    XDC_ASSERT(plan && sscanf(plan, "plan: sync, %d stage", &P) == 1);
    const char *mb = strstr(plan, " microbatches of ");
    XDC_ASSERT(mb != NULL);
    while (mb > plan && mb[-1] >= '0' && mb[-1] <= '9') mb--;
    XDC_ASSERT(sscanf(mb, "%d microbatches of %d sequences", &M, &b) == 2);
    XDC_ASSERT_MSG(M * b == 32 * P, "%d stages per replica, %d microbatches of %d sequences", P, M, b);
    if (P == 1) XDC_ASSERT_EQ(M, 1);
}

XDC_TEST_T(orch_killing_the_launcher_leaves_no_workers, 120)
{
    need_corpus();
    const char *run = write_run("orphan", "sync", 2000, "none", NULL);
    char dir[600], log[700], pidfile[800];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/launch.log", xdc_test_tmpdir());
    pid_t launcher = start_launch(run, dir, log, NULL);
    /* Bounded wait for every worker to exist, then SIGKILL the launcher: it cannot clean up. */
    pid_t workers[4] = {0};
    const char *names[4] = {"us-east-0", "us-east-1", "eu-west-0", "eu-west-1"};
    for (int i = 0; i < 4; i++) {
        snprintf(pidfile, sizeof pidfile, "%s/pids/%s.pid", dir, names[i]);
        for (int t = 0; t < 1200 && !workers[i]; t++) {
            char *text = xdc_test_read_file(pidfile, NULL);
            if (text) workers[i] = (pid_t)atoi(text);
            free(text);
            if (!workers[i]) nanosleep(&(struct timespec){0, 25 * 1000000L}, NULL);
        }
        XDC_ASSERT_MSG(workers[i] > 0, "worker %s never started", names[i]);
    }
    XDC_ASSERT(kill(launcher, SIGKILL) == 0);
    int status;
    XDC_ASSERT(waitpid(launcher, &status, 0) == launcher);
    /* Agents get SIGTERM from the kernel when the launcher dies and stop their workers. */
    int alive = 4;
    for (int t = 0; t < 800 && alive; t++) {
        alive = 0;
        for (int i = 0; i < 4; i++) alive += kill(workers[i], 0) == 0;
        if (alive) nanosleep(&(struct timespec){0, 25 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(alive == 0, "%d workers outlived the launcher", alive);
}

XDC_TEST_T(orch_streaming_with_replicas_completes, 240)
{
    need_corpus();
    /* One stage, two replicas per region: fragment syncs overlap the next inner step's gradient sync on
     * the replicas, each on its own communicator (otherwise replicas would interleave collectives in
     * different orders and the run would fail or hang). */
    char out[65536], v[64];
    const char *run = write_run_p("stream-dp", "streaming", 40, "int8", 1,
                                  "diloco: {inner_steps: 8}\nstreaming: {fragments: 4}\n");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    int rc = launch(run, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    final_field(out, "val_loss=", v, sizeof v);
    XDC_ASSERT_MSG(atof(v) > 0 && atof(v) < 4.5, "val_loss %s", v);
}

XDC_TEST_T(orch_coordinator_runs_agents_started_elsewhere, 240)
{
    need_corpus();
    /* The multi-host path on one machine: `xdc coordinator`, then one `xdc agent` per node as a launch
     * script would start them; the coordinator ends the run with its summary once everyone is done. */
    const char *run = write_run("coord", "sync", 8, "int8", NULL);
    char dir[600], log[700], cmd[2048], out[16384];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    pid_t p;
    char *coord = start_coordinator(run, dir, log, "coord-test", &p);
    /* Both nodes' agents at once, as two launch scripts would; direct WAN (no emulator) on loopback. */
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; "
             "timeout 120 %1$s agent -t %2$s -c %3$s --run-dir %4$s --region us-east --node 0 --coordinator %5$s "
             "--run-id coord-test & p=$!; "
             "timeout 120 %1$s agent -t %2$s -c %3$s --run-dir %4$s --region eu-west --node 0 --coordinator %5$s "
             "--run-id coord-test; "
             "a=$?; wait $p; b=$?; exit $((a + b))",
             xdc_test_bin(), TOPO, run, dir, coord);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "agents exited %d:\n%s", rc, out);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "coordinator exited with status 0x%x", status);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "final val_loss=");
    XDC_ASSERT(strstr(text, "params_xxh64=0 ") == NULL);
    free(text);
    free(coord);
}

/* A run folder on a read-only file system (a tmpfs mounted read-only in a mount namespace of its own)
 * fails at once with EROFS and the folder named, exit 74, not with ENOENT for a certificate later. */
XDC_TEST_T(orch_read_only_run_dir_reports_erofs, 60)
{
    need_corpus();
    const char *run = write_run("ro", "sync", 2, "none", NULL);
    char ro[600], cmd[3000], out[8192];
    snprintf(ro, sizeof ro, "%s/ro", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s && unshare -m true 2>/dev/null", ro);
    if (xdc_test_run(cmd, out, sizeof out) != 0) xdc_test_skip("no mount namespaces here (unshare -m needs root)");
    snprintf(cmd, sizeof cmd,
             "unshare -m sh -c 'mount -t tmpfs -o ro tmpfs %s && exec timeout 30 %s launch -t %s -c %s --run-dir "
             "%s/run'",
             ro, xdc_test_bin(), TOPO, run, ro);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 74, "launch exited %d, expected 74 (EX_IOERR):\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "Read-only file system");
    XDC_ASSERT_STR_CONTAINS(out, "/ro/run");
}
