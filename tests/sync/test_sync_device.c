/* test_sync_device.c — the in-process two-region sync (test_orch_sync.c's) on the CUDA backend, for the
 * GPU window (tests/gpu/run.sh, step sync-cuda): two WAN engines on a loopback pair, one sync engine each,
 * the buffers in device memory written piece by piece on a producer stream that the host never waits for
 * before marking a piece ready, the codec's quantizer and residual on the device.
 *
 * Checked: both regions end every run on identical bits (asserted), and codec none gives (a + b) / 2
 * exactly, as on the CPU. Printed, so the window's log carries numbers: each region's XXH64 of the last
 * round's result, and the largest absolute and relative difference from the CPU backend's run of the same
 * sync (the same inputs, the same codec). int8 is held to within one quantization step of the CPU's (the
 * device's residual may round differently: test_quant_cuda.c's 1e-9), and the stage test (a tiny GPT
 * trained three steps with its gradients synced) only prints its difference from the CPU, which TF32
 * GEMMs make non-zero.
 *
 * Without a GPU the CUDA tests skip; the same code runs here on cpu-strict (the strict twins: the buffer
 * sync, and the stage sync, which is also the proof that cpu-strict trains bit for bit as
 * cpu), so a mistake in this file shows before the window. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_hash.h"
#include "common/xdc_rng.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_gpt.h"
#include "sync/xdc_sync.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ELEMS 70464 /* the demo's first stage */
#define ROUNDS  4

static const xdc_kern_backend *backend(xdc_backend_kind kind)
{
    if (kind == XDC_BACKEND_CUDA && xdc_kern_cuda_device_count() <= 0)
        xdc_test_skip("no GPU: no CUDA device visible (or no CUDA in this build)");
    const xdc_kern_backend *be = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_kern_backend_get(kind, &be, &d) == XDC_OK, "%s: %s", xdc_backend_name(kind), d.msg);
    return be;
}

/* Largest |a - b| and |a - b| / |a| (over |a| > 1e-30) of n floats. */
static void max_diff(const float *a, const float *b, size_t n, double *max_abs, double *max_rel)
{
    *max_abs = *max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > *max_abs) *max_abs = d;
        if (fabs(a[i]) > 1e-30 && d / fabs(a[i]) > *max_rel) *max_rel = d / fabs(a[i]);
    }
}

static void fill(float *x, int side, int round)
{
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)(side * 1000 + round));
    for (size_t i = 0; i < N_ELEMS; i++) x[i] = xdc_rng_normal(&r);
}

/* ---- a buffer synced ROUNDS times ---------------------------------------------------------------------- */

typedef struct {
    const xdc_device_ops *dev;
    xdc_stream *producer;
    xdc_sync_engine *eng;
    xdc_sync *sync;
    float *dbuf;          /* device (N_ELEMS) */
    float *host, *result; /* pinned host (N_ELEMS): the round's input and what came back (the last round's) */
    int side;
    xdc_err_t rc;
    char why[512];
} side;

static void *side_main(void *arg)
{
    side *c = arg;
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)c->side + 91);
    size_t f = sizeof(float);
    for (int round = 0; round < ROUNDS && c->rc == XDC_OK; round++) {
        fill(c->host, c->side, round);
        c->rc = xdc_sync_begin(c->sync, c->dbuf);
        size_t from = N_ELEMS;
        while (from > 0 && c->rc == XDC_OK) { /* ready in pieces from the end, as backward writes them */
            size_t step = 1 + (size_t)xdc_rng_below(&r, N_ELEMS / 3), to = from;
            from = from > step ? from - step : 0;
            c->rc = c->dev->copy_h2d(c->dbuf + from, c->host + from, (to - from) * f, c->producer);
            xdc_sync_mark_ready(c->sync, from);
            for (int y = (int)xdc_rng_below(&r, 50); y > 0; y--) sched_yield();
        }
        xdc_diag d = {{0}};
        if (c->rc == XDC_OK) c->rc = xdc_sync_end(c->sync, &d);
        if (c->rc == XDC_OK) c->rc = c->dev->copy_d2h(c->result, c->dbuf, N_ELEMS * f, c->producer);
        if (c->rc == XDC_OK) c->rc = c->dev->stream_sync(c->producer);
        if (c->rc != XDC_OK) {
            if (!d.msg[0]) c->dev->stream_error(c->producer, &d);
            snprintf(c->why, sizeof c->why, "round %d: %s", round, d.msg);
        }
    }
    return NULL;
}

/* Both regions on backend `be` with `codec`; out[s] (N_ELEMS) gets region s's last result. */
static void two_regions(wan_test_pair *tp, const xdc_kern_backend *be, const char *codec, float *out[2])
{
    const xdc_device_ops *dev = be->device;
    side ctx[2];
    pthread_t th[2];
    xdc_wan_peer *peers[2][2] = {{NULL, tp->srv}, {tp->cli, NULL}};
    for (int s = 0; s < 2; s++) {
        ctx[s] = (side){.dev = dev, .side = s};
        XDC_ASSERT_OK(dev->stream_create(&ctx[s].producer));
        XDC_ASSERT_OK(dev->mem_alloc((void **)&ctx[s].dbuf, N_ELEMS * sizeof(float)));
        XDC_ASSERT_OK(dev->host_alloc((void **)&ctx[s].host, N_ELEMS * sizeof(float)));
        XDC_ASSERT_OK(dev->host_alloc((void **)&ctx[s].result, N_ELEMS * sizeof(float)));
        xdc_sync_cfg cfg = {.n_elems = N_ELEMS,
                            .bucket_elems = 13106,
                            .peers = peers[s],
                            .n_regions = 2,
                            .my_region = s,
                            .name = "cuda-check",
                            .backend = be,
                            .compute = ctx[s].producer};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse(codec, &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_engine_create(&ctx[s].eng, NULL));
        XDC_ASSERT_OK(xdc_sync_create(ctx[s].eng, &cfg, &ctx[s].sync, NULL));
    }
    for (int s = 0; s < 2; s++) pthread_create(&th[s], NULL, side_main, &ctx[s]);
    for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
    for (int s = 0; s < 2; s++)
        XDC_ASSERT_MSG(ctx[s].rc == XDC_OK, "%s %s region %d: %s: %s", be->name, codec, s, xdc_errname(ctx[s].rc),
                       ctx[s].why);
    for (int s = 0; s < 2; s++) {
        memcpy(out[s], ctx[s].result, N_ELEMS * sizeof(float));
        xdc_sync_destroy(ctx[s].sync);
        xdc_sync_engine_destroy(ctx[s].eng);
        XDC_ASSERT_OK(dev->stream_error(ctx[s].producer, NULL));
        dev->stream_destroy(ctx[s].producer);
        dev->mem_free(ctx[s].dbuf);
        dev->host_free(ctx[s].host);
        dev->host_free(ctx[s].result);
    }
}

/* The sync on `kind` against the same sync on the CPU backend, codecs none and int8. */
static void sync_on_device_matches_cpu(xdc_backend_kind kind)
{
    const xdc_kern_backend *gpu = backend(kind), *cpu = backend(XDC_BACKEND_CPU);
    bool exact = kind == XDC_BACKEND_CPU_STRICT;
    wan_test_pair tp; /* one pair for every run: the sends of one run complete before the next posts */
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    float *a = malloc(N_ELEMS * sizeof(float)), *b = malloc(N_ELEMS * sizeof(float));
    float *dres[2], *cres[2];
    for (int s = 0; s < 2; s++) dres[s] = malloc(N_ELEMS * sizeof(float)), cres[s] = malloc(N_ELEMS * sizeof(float));
    const char *codecs[] = {"none", "int8"};
    for (int ci = 0; ci < 2; ci++) {
        two_regions(&tp, cpu, codecs[ci], cres);
        two_regions(&tp, gpu, codecs[ci], dres);
        uint64_t h[2] = {xdc_xxh64(dres[0], N_ELEMS * sizeof(float), 0),
                         xdc_xxh64(dres[1], N_ELEMS * sizeof(float), 0)};
        uint64_t hc = xdc_xxh64(cres[0], N_ELEMS * sizeof(float), 0);
        double max_abs, max_rel, absmax = 0;
        max_diff(cres[0], dres[0], N_ELEMS, &max_abs, &max_rel);
        for (size_t i = 0; i < N_ELEMS; i++) absmax = fmax(absmax, fabs(cres[0][i]));
        /* int8: one step of a block's scale (absmax / 127) at most; none and cpu-strict: bit for bit */
        double tol = exact || ci == 0 ? 0.0 : absmax / 127.0;
        printf("sync %s codec=%s elems=%d rounds=%d region0_xxh64=%016llx region1_xxh64=%016llx cpu_xxh64=%016llx "
               "max_abs=%.3g max_rel=%.3g tol=%.3g regions_identical=%s\n",
               gpu->name, codecs[ci], N_ELEMS, ROUNDS, (unsigned long long)h[0], (unsigned long long)h[1],
               (unsigned long long)hc, max_abs, max_rel, tol,
               memcmp(dres[0], dres[1], N_ELEMS * sizeof(float)) == 0 ? "yes" : "NO");
        XDC_ASSERT_MSG(memcmp(dres[0], dres[1], N_ELEMS * sizeof(float)) == 0, "%s %s: the regions differ", gpu->name,
                       codecs[ci]);
        XDC_ASSERT_MSG(memcmp(cres[0], cres[1], N_ELEMS * sizeof(float)) == 0, "cpu %s: the regions differ",
                       codecs[ci]);
        XDC_ASSERT_MSG(max_abs <= tol, "%s %s: max_abs %g from the cpu's result (tol %g)", gpu->name, codecs[ci],
                       max_abs, tol);
        if (ci == 0) { /* none: (a + b) / 2 of the last round, exactly */
            fill(a, 0, ROUNDS - 1), fill(b, 1, ROUNDS - 1);
            for (size_t i = 0; i < N_ELEMS; i++)
                if (dres[0][i] != ((0.0f + a[i]) + b[i]) * 0.5f)
                    XDC_FAIL("%s none elem %zu: %g, want (a + b) / 2 = %g", gpu->name, i, dres[0][i],
                             ((0.0f + a[i]) + b[i]) * 0.5f);
        }
    }
    wan_test_pair_close(&tp);
    for (int s = 0; s < 2; s++) free(dres[s]), free(cres[s]);
    free(a), free(b);
}

XDC_TEST_T(xdc_sync_two_regions_on_cuda_identical_bits, 120) { sync_on_device_matches_cpu(XDC_BACKEND_CUDA); }

/* On the cpu-strict device the buffer is device memory the host cannot touch, written piece by piece by
 * asynchronous copies on a producer stream (as backward's kernels would be) that the host never waits for
 * before marking the piece ready. Only the ready events order the comm stream after the writes: without the
 * wait in stage_a the device's hazard check fails the round ("missing event"). */
XDC_TEST_T(xdc_sync_two_regions_on_the_strict_device, 120) { sync_on_device_matches_cpu(XDC_BACKEND_CPU_STRICT); }

/* ---- a stage and its gradient sync together, as a worker runs them (on CUDA, and on cpu-strict beside cpu): each region trains the tiny GPT for
 * three steps of two microbatches, the last backward marking buckets ready through the gradient-ready
 * hook while earlier layers are still computing, the int8 round overlapping it, the optimizer stepping on
 * the averaged gradients. On cpu-strict the only ordering between the backward's kernels and the comm
 * stream's reads is the ready event of each bucket (the backward does not drain its stream before the
 * hook), and the optimizer's reads follow the round through the done event. Both regions, on both
 * backends, end with the same params_xxh64. Buckets are 0.05 MiB (13106 fp32): their edges fall inside
 * the strict device's 64 KiB blocks, which its byte-range hazard rule must tell apart. */

typedef struct {
    const xdc_kern_backend *be;
    xdc_wan_peer **peers;
    int side;
    uint64_t hash;
    float *params; /* malloc'd (n_params) */
    size_t n_params;
    xdc_err_t rc;
    char why[512];
} stage_side;

static void on_ready(void *ctx, size_t from) { xdc_sync_mark_ready(ctx, from); }

/* Three steps of two microbatches of the tiny GPT; the second backward marks buckets ready as it goes. */
static xdc_err_t train_three_steps(stage_side *c, xdc_gpt_stage *st, xdc_sync *sync, xdc_diag *d)
{
    xdc_err_t rc = XDC_OK;
    for (int step = 0; step < 3 && rc == XDC_OK; step++) {
        xdc_gpt_stage_zero_grad(st);
        for (int mb = 0; mb < 2 && rc == XDC_OK; mb++) {
            int32_t tok[32], tgt[32];
            for (int i = 0; i < 32; i++)
                tok[i] = (i * 7 + step * 13 + mb * 5 + c->side * 31) % 256, tgt[i] = (tok[i] * 3 + 1) % 256;
            float loss = 0;
            rc = xdc_gpt_stage_forward(st, mb, tok, NULL, tgt, NULL, &loss);
        }
        for (int mb = 0; mb < 2 && rc == XDC_OK; mb++) {
            if (mb == 1) {
                rc = xdc_sync_begin(sync, xdc_gpt_stage_grads(st));
                xdc_gpt_stage_arm_grad_ready(st, on_ready, sync);
            }
            if (rc == XDC_OK) rc = xdc_gpt_stage_backward(st, mb, NULL, 0.5f, NULL);
        }
        if (rc == XDC_OK) rc = xdc_sync_end(sync, d);
        double sumsq = 0;
        if (rc == XDC_OK) rc = xdc_gpt_stage_grad_sumsq(st, &sumsq);
        if (rc == XDC_OK) rc = xdc_gpt_stage_optimizer_step(st, 3e-3f, xdc_gpt_clip_scale(sumsq, 1.0f));
        if (rc != XDC_OK) snprintf(c->why, sizeof c->why, "step %d: ", step);
    }
    return rc;
}

static void *stage_side_main(void *arg)
{
    stage_side *c = arg;
    xdc_gpt_stage_config cfg = {.model = {2, 4, 64, 64, 256},
                                .layer_begin = 0,
                                .layer_end = 2,
                                .batch = 2,
                                .seq_len = 16,
                                .max_inflight = 2,
                                .seed = 5,
                                .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    xdc_gpt_stage *st = NULL;
    xdc_sync_engine *eng = NULL;
    xdc_sync *sync = NULL;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_gpt_stage_create(c->be->model, &cfg, &st, &d);
    if (rc == XDC_OK) rc = xdc_sync_engine_create(&eng, &d);
    if (rc == XDC_OK) {
        xdc_sync_cfg sc = {.n_elems = xdc_gpt_stage_num_params(st),
                           .bucket_elems = 13106,
                           .peers = c->peers,
                           .n_regions = 2,
                           .my_region = c->side,
                           .name = "gradients",
                           .backend = c->be,
                           .compute = xdc_gpt_stage_stream(st)};
        sc.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT; /* int8 + error feedback + zstd */
        rc = xdc_sync_create(eng, &sc, &sync, &d);
    }
    if (rc == XDC_OK) rc = train_three_steps(c, st, sync, &d);
    if (rc != XDC_OK && !d.msg[0] && st) c->be->device->stream_error(xdc_gpt_stage_stream(st), &d);
    if (rc == XDC_OK) rc = xdc_gpt_params_xxh64(&st, 1, &c->hash);
    if (rc == XDC_OK) {
        c->n_params = xdc_gpt_stage_num_params(st);
        c->params = malloc(c->n_params * sizeof(float));
        rc = c->params ? c->be->model->download(c->params, xdc_gpt_stage_params(st), c->n_params * sizeof(float))
                       : XDC_ERR_NOMEM;
    }
    if (rc != XDC_OK) {
        size_t used = strlen(c->why);
        snprintf(c->why + used, sizeof c->why - used, "%s", d.msg);
    }
    xdc_sync_destroy(sync);
    xdc_sync_engine_destroy(eng);
    xdc_gpt_stage_destroy(st);
    c->rc = rc;
    return NULL;
}

static void stage_sync_on_device(xdc_backend_kind kind)
{
    const xdc_kern_backend *bes[2] = {backend(XDC_BACKEND_CPU), backend(kind)};
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}};
    stage_side ctx[2][2]; /* [cpu, device][region] */
    for (int b = 0; b < 2; b++) {
        pthread_t th[2];
        for (int s = 0; s < 2; s++) {
            ctx[b][s] = (stage_side){.be = bes[b], .peers = peers[s], .side = s};
            pthread_create(&th[s], NULL, stage_side_main, &ctx[b][s]);
        }
        for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
        for (int s = 0; s < 2; s++)
            XDC_ASSERT_MSG(ctx[b][s].rc == XDC_OK, "%s region %d: %s: %s", bes[b]->name, s, xdc_errname(ctx[b][s].rc),
                           ctx[b][s].why);
    }
    wan_test_pair_close(&tp);
    double max_abs, max_rel;
    max_diff(ctx[0][0].params, ctx[1][0].params, ctx[0][0].n_params, &max_abs, &max_rel);
    printf("stage sync %s: params=%zu region0 params_xxh64=%016llx region1 params_xxh64=%016llx; cpu %016llx; "
           "params vs cpu max_abs=%.3g max_rel=%.3g\n",
           bes[1]->name, ctx[1][0].n_params, (unsigned long long)ctx[1][0].hash, (unsigned long long)ctx[1][1].hash,
           (unsigned long long)ctx[0][0].hash, max_abs, max_rel);
    XDC_ASSERT_MSG(ctx[1][0].hash == ctx[1][1].hash, "%s: the regions end on different parameters", bes[1]->name);
    XDC_ASSERT(ctx[0][0].hash == ctx[0][1].hash);
    if (kind == XDC_BACKEND_CPU_STRICT) XDC_ASSERT(ctx[1][0].hash == ctx[0][0].hash);
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < 2; s++) free(ctx[b][s].params);
}

XDC_TEST_T(xdc_sync_stage_gradients_on_cuda_one_hash_in_both_regions, 120) { stage_sync_on_device(XDC_BACKEND_CUDA); }

XDC_TEST_T(xdc_sync_stage_gradients_on_the_strict_device_match_cpu, 120)
{
    stage_sync_on_device(XDC_BACKEND_CPU_STRICT);
}
