/* test_kern_model.c — the CPU model ops against central finite differences (every layer's backward), and
 * the CUDA ops against the CPU ones where a GPU is visible. Objectives are sum(out ⊙ R) for a random R,
 * evaluated in double, so dout = R; the tolerances catch a wrong sign or a missing term. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_model_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern const xdc_model_ops xdc_model_cpu_ops;
static const xdc_model_ops *cpu = &xdc_model_cpu_ops;

static void fill(float *x, size_t n, xdc_rng *r, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = xdc_rng_normal(r) * scale;
}

/* The backend `kind`; a CUDA test skips when no GPU is visible. */
static const xdc_kern_backend *backend(xdc_backend_kind kind)
{
    if (kind == XDC_BACKEND_CUDA && xdc_kern_cuda_device_count() <= 0) xdc_test_skip("no GPU: no CUDA device visible");
    const xdc_kern_backend *b = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(kind, &b, NULL));
    return b;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*objective_fn)(void *ctx);

/* Compares analytic[i] with (f(x+e) - f(x-e)) / 2e on up to 32 indices spread over x. */
static void gradcheck(const char *what, objective_fn f, void *ctx, float *x, const float *analytic, size_t n)
{
    const float eps = 1e-2f;
    size_t stride = n > 32 ? n / 32 : 1;
    double max_abs = 0.0;
    for (size_t i = 0; i < n; i += stride) {
        float save = x[i];
        x[i] = save + eps;
        double lp = f(ctx);
        x[i] = save - eps;
        double lm = f(ctx);
        x[i] = save;
        double fd = (lp - lm) / (2.0 * eps), an = analytic[i];
        XDC_ASSERT_MSG(fabs(fd - an) <= 2e-3 + 2e-2 * fabs(fd), "%s[%zu]: analytic %.6g vs finite difference %.6g",
                       what, i, an, fd);
        if (fabs(an) > max_abs) max_abs = fabs(an);
    }
    XDC_ASSERT_MSG(max_abs > 1e-3, "%s: gradient is all zero, the check would be vacuous", what);
}

typedef struct {
    float *inp, *w, *b, *out, *R;
    int N, C, OC;
} mm_ctx;
static double mm_obj(void *p)
{
    mm_ctx *c = p;
    cpu->matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

XDC_TEST(kern_matmul_backward_matches_finite_differences)
{
    xdc_rng r;
    xdc_rng_seed(&r, 1);
    enum { N = 6, C = 5, OC = 7 };
    float inp[N * C], w[OC * C], b[OC], out[N * OC], R[N * OC], dinp[N * C] = {0}, dw[OC * C] = {0}, db[OC] = {0};
    fill(inp, N * C, &r, 1), fill(w, OC * C, &r, 1), fill(b, OC, &r, 1), fill(R, N * OC, &r, 1);
    mm_ctx c = {inp, w, b, out, R, N, C, OC};
    cpu->matmul_backward(dinp, dw, db, R, inp, w, N, C, OC);
    gradcheck("matmul dinp", mm_obj, &c, inp, dinp, N * C);
    gradcheck("matmul dw", mm_obj, &c, w, dw, OC * C);
    gradcheck("matmul dbias", mm_obj, &c, b, db, OC);
}

typedef struct {
    float *inp, *w, *b, *out, *mean, *rstd, *R;
    int N, C;
} ln_ctx;
static double ln_obj(void *p)
{
    ln_ctx *c = p;
    cpu->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

XDC_TEST(kern_layernorm_backward_matches_finite_differences)
{
    xdc_rng r;
    xdc_rng_seed(&r, 2);
    enum { N = 4, C = 8 };
    float inp[N * C], w[C], b[C], out[N * C], mean[N], rstd[N], R[N * C], dinp[N * C] = {0}, dw[C] = {0}, db[C] = {0};
    fill(inp, N * C, &r, 1), fill(w, C, &r, 1), fill(b, C, &r, 1), fill(R, N * C, &r, 1);
    ln_ctx c = {inp, w, b, out, mean, rstd, R, N, C};
    ln_obj(&c);
    cpu->layernorm_backward(dinp, dw, db, R, inp, w, mean, rstd, N, C);
    gradcheck("layernorm dinp", ln_obj, &c, inp, dinp, N * C);
    gradcheck("layernorm dw", ln_obj, &c, w, dw, C);
    gradcheck("layernorm db", ln_obj, &c, b, db, C);
}

typedef struct {
    float *qkv, *out, *att, *R;
    int B, T, C, NH;
} att_ctx;
static double att_obj(void *p)
{
    att_ctx *c = p;
    cpu->attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

XDC_TEST(kern_attention_backward_matches_finite_differences_and_is_causal)
{
    xdc_rng r;
    xdc_rng_seed(&r, 3);
    enum { B = 2, T = 5, C = 8, NH = 2 };
    float qkv[B * T * 3 * C], out[B * T * C], att[B * NH * T * T], R[B * T * C], dqkv[B * T * 3 * C] = {0};
    float scratch[B * NH * T * T];
    fill(qkv, B * T * 3 * C, &r, 1), fill(R, B * T * C, &r, 1);
    att_ctx c = {qkv, out, att, R, B, T, C, NH};
    att_obj(&c);
    /* rows are distributions over the past only */
    for (int row = 0; row < B * NH * T; row++) {
        int t = row % T;
        double s = 0;
        for (int u = 0; u < T; u++) {
            if (u > t) XDC_ASSERT(att[row * T + u] == 0.0f);
            s += att[row * T + u];
        }
        XDC_ASSERT_NEAR(s, 1.0, 1e-5);
    }
    /* causality: changing the last token's q/k/v must not change earlier outputs */
    float before = out[0], save = qkv[(T - 1) * 3 * C];
    qkv[(T - 1) * 3 * C] += 5.0f;
    att_obj(&c);
    XDC_ASSERT(out[0] == before);
    qkv[(T - 1) * 3 * C] = save;
    att_obj(&c);
    cpu->attention_backward(dqkv, scratch, R, qkv, att, B, T, C, NH);
    gradcheck("attention dq", att_obj, &c, qkv, dqkv, B * T * 3 * C);
    /* spot-check k and v thirds specifically (the spread above may favour one) */
    gradcheck("attention dk", att_obj, &c, qkv + C, dqkv + C, C);
    gradcheck("attention dv", att_obj, &c, qkv + 2 * C, dqkv + 2 * C, C);
}

typedef struct {
    float *inp, *out, *R;
    size_t n;
} gelu_ctx;
static double gelu_obj(void *p)
{
    gelu_ctx *c = p;
    cpu->gelu_forward(c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}

XDC_TEST(kern_gelu_backward_matches_finite_differences)
{
    xdc_rng r;
    xdc_rng_seed(&r, 4);
    enum { n = 64 };
    float inp[n], out[n], R[n], dinp[n] = {0};
    fill(inp, n, &r, 2), fill(R, n, &r, 1);
    gelu_ctx c = {inp, out, R, n};
    cpu->gelu_backward(dinp, inp, R, n);
    gradcheck("gelu", gelu_obj, &c, inp, dinp, n);
    float z = 0.0f, big = 10.0f, o[2], in2[2] = {z, big};
    cpu->gelu_forward(o, in2, 2);
    XDC_ASSERT_NEAR(o[0], 0.0, 1e-7);
    XDC_ASSERT_NEAR(o[1], 10.0, 1e-4);
}

typedef struct {
    float *logits, *probs, *losses;
    int32_t *targets;
    int N, V;
    float dloss;
} ce_ctx;
static double ce_obj(void *p)
{
    ce_ctx *c = p;
    cpu->crossentropy_forward(c->losses, c->probs, c->logits, c->targets, c->N, c->V);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s * c->dloss;
}

XDC_TEST(kern_crossentropy_backward_matches_finite_differences)
{
    xdc_rng r;
    xdc_rng_seed(&r, 5);
    enum { N = 4, V = 10 };
    float logits[N * V], probs[N * V], losses[N], dlogits[N * V] = {0};
    int32_t targets[N] = {0, 3, 9, 3};
    fill(logits, N * V, &r, 2);
    ce_ctx c = {logits, probs, losses, targets, N, V, 0.7f};
    ce_obj(&c);
    cpu->crossentropy_backward(dlogits, probs, targets, c.dloss, N, V);
    gradcheck("crossentropy", ce_obj, &c, logits, dlogits, N * V);
    double uniform_loss;
    float flat[V] = {0}, p1[V], l1;
    int32_t t0 = 2;
    cpu->crossentropy_forward(&l1, p1, flat, &t0, 1, V);
    uniform_loss = log((double)V);
    XDC_ASSERT_NEAR(l1, uniform_loss, 1e-5);
}

typedef struct {
    float *wte, *wpe, *out, *R;
    int32_t *tokens;
    int B, T, C;
} enc_ctx;
static double enc_obj(void *p)
{
    enc_ctx *c = p;
    cpu->encoder_forward(c->out, c->tokens, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

XDC_TEST(kern_encoder_backward_matches_finite_differences)
{
    xdc_rng r;
    xdc_rng_seed(&r, 6);
    enum { B = 2, T = 3, C = 4, V = 5 };
    float wte[V * C], wpe[T * C], out[B * T * C], R[B * T * C], dwte[V * C] = {0}, dwpe[T * C] = {0};
    int32_t tokens[B * T] = {1, 4, 1, 0, 1, 2}; /* token 1 repeats: its gradient must sum */
    fill(wte, V * C, &r, 1), fill(wpe, T * C, &r, 1), fill(R, B * T * C, &r, 1);
    enc_ctx c = {wte, wpe, out, R, tokens, B, T, C};
    cpu->encoder_backward(dwte, dwpe, R, tokens, B, T, C);
    gradcheck("encoder dwte", enc_obj, &c, wte, dwte, V * C);
    gradcheck("encoder dwpe", enc_obj, &c, wpe, dwpe, T * C);
}

XDC_TEST(kern_adamw_and_sumsq_follow_the_formulas)
{
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, 0.0f, -1.0f}, m[3] = {0}, v[3] = {0};
    double acc = 1.0;
    XDC_ASSERT_OK(cpu->sumsq(g, 3, &acc));
    XDC_ASSERT_NEAR(acc, 1.0 + 0.25 + 1.0, 1e-12);
    /* first step with bias correction: update = lr * (sign(g) + wd * p) for |g| >> eps */
    cpu->adamw(p, g, m, v, 3, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2.0f, 1);
    XDC_ASSERT_NEAR(p[0], 1.0 - 0.1 * (1.0 + 0.01 * 1.0), 1e-6);
    XDC_ASSERT_NEAR(p[1], -2.0 - 0.1 * (0.01 * -2.0), 1e-6);
    XDC_ASSERT_NEAR(p[2], 0.5 - 0.1 * (-1.0 + 0.01 * 0.5), 1e-6);
    XDC_ASSERT_NEAR(m[0], 0.1 * 1.0, 1e-7); /* the gradient was scaled by 2 first */
}

/* DiLoCo's outer step and streaming's landing, by the formulas: m = mu*m + d; g -= lr*(d + mu*m);
 * p = g + (p - s). */
XDC_TEST(kern_outer_ops_follow_the_formulas)
{
    float g[2] = {1.0f, -2.0f}, p[2] = {0.75f, -1.5f}, m[2] = {0.5f, 0.0f}, d[2], s[2] = {1.0f, -1.0f};
    cpu->sub(d, g, p, 2); /* pseudo-gradient global - local */
    XDC_ASSERT_NEAR(d[0], 0.25, 0);
    XDC_ASSERT_NEAR(d[1], -0.5, 0);
    cpu->outer_nesterov(g, m, d, 2, 0.5f, 0.5f);
    XDC_ASSERT_NEAR(m[0], 0.5 * 0.5 + 0.25, 0);
    XDC_ASSERT_NEAR(g[0], 1.0 - 0.5 * (0.25 + 0.5 * 0.5), 0);
    XDC_ASSERT_NEAR(m[1], -0.5, 0);
    XDC_ASSERT_NEAR(g[1], -2.0 - 0.5 * (-0.5 + 0.5 * -0.5), 0);
    cpu->sub(s, p, s, 2); /* in place: the local progress since the snapshot */
    cpu->residual_forward(p, g, s, 2);
    XDC_ASSERT_NEAR(p[0], 0.75 + (0.75 - 1.0), 0);
    XDC_ASSERT_NEAR(p[1], -1.625 + (-1.5 + 1.0), 0);
}

/* The outer ops on a device backend give the CPU's bits (their contract: one rounding per operation, no
 * fused multiply-add), so where the outer state lives does not change a run's parameters. */
static void outer_ops_match_cpu(const xdc_kern_backend *dev)
{
    enum { N = 4099, ARRAYS = 4 };
    const xdc_model_ops *G = dev->model;
    float *h[ARRAYS], *back = xdc_malloc(N * sizeof(float)); /* global, mom, local, snapshot */
    void *d[ARRAYS + 1];                                     /* the same on the device, then the pseudo-gradient */
    xdc_rng r;
    xdc_rng_seed(&r, 5);
    for (int k = 0; k < ARRAYS; k++) {
        h[k] = xdc_malloc(N * sizeof(float));
        fill(h[k], N, &r, k == 1 ? 1e-3f : 1.0f);
        XDC_ASSERT_OK(G->alloc(&d[k], N * sizeof(float)));
        XDC_ASSERT_OK(G->upload(d[k], h[k], N * sizeof(float)));
    }
    XDC_ASSERT_OK(G->alloc(&d[ARRAYS], N * sizeof(float)));
    float *pseudo = xdc_malloc(N * sizeof(float)), **dv = (float **)d;
    cpu->sub(pseudo, h[0], h[2], N);
    cpu->outer_nesterov(h[0], h[1], pseudo, N, 0.7f, 0.9f);
    cpu->sub(h[3], h[2], h[3], N);
    cpu->residual_forward(h[2], h[0], h[3], N);
    G->sub(dv[4], dv[0], dv[2], N);
    G->outer_nesterov(dv[0], dv[1], dv[4], N, 0.7f, 0.9f);
    G->sub(dv[3], dv[2], dv[3], N);
    G->residual_forward(dv[2], dv[0], dv[3], N);
    XDC_ASSERT_OK(G->sync());
    for (int k = 0; k < ARRAYS; k++) {
        XDC_ASSERT_OK(G->download(back, d[k], N * sizeof(float)));
        if (memcmp(back, h[k], N * sizeof(float)) != 0) XDC_FAIL("outer ops: array %d differs on %s", k, dev->name);
        G->free(d[k]);
        xdc_free(h[k]);
    }
    G->free(d[ARRAYS]);
    xdc_free(pseudo);
    xdc_free(back);
}

XDC_TEST(kern_strict_outer_ops_match_cpu_bit_for_bit) { outer_ops_match_cpu(backend(XDC_BACKEND_CPU_STRICT)); }

XDC_TEST(kern_cuda_outer_ops_match_cpu_bit_for_bit) { outer_ops_match_cpu(backend(XDC_BACKEND_CUDA)); }

XDC_TEST(kern_lr_schedule_warms_up_then_decays_by_cosine)
{
    xdc_lr_schedule s = {.lr = 1.0f, .min_frac = 0.1f, .warmup = 10, .total = 110};
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 0), 0.1, 1e-6);
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 9), 1.0, 1e-6);
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 10), 1.0, 1e-6);
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 60), 0.55, 1e-5);
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 110), 0.1, 1e-6);
    XDC_ASSERT_NEAR(xdc_lr_at(&s, 500), 0.1, 1e-6);
    XDC_ASSERT(xdc_lr_at(&s, 30) > xdc_lr_at(&s, 31));
    XDC_ASSERT_NEAR(xdc_gpt_clip_scale(16.0, 2.0f), 0.5, 1e-7);
    XDC_ASSERT_NEAR(xdc_gpt_clip_scale(1.0, 2.0f), 1.0, 0);
}

/* ---- a device backend vs CPU: a whole stage (every layer op) plus one AdamW step. CUDA within the TF32
 * tolerances of docs/device.md ("Precision"); cpu-strict (the CPU ops queued on a stream thread, on memory the
 * host cannot touch) bit for bit. */
static void stage_matches_cpu(const xdc_kern_backend *gpu)
{
    bool exact = gpu->kind == XDC_BACKEND_CPU_STRICT;
    xdc_gpt_stage_config cfg = {.model = {2, 2, 16, 8, 32},
                                .layer_begin = 0,
                                .layer_end = 2,
                                .batch = 2,
                                .seq_len = 8,
                                .max_inflight = 1,
                                .seed = 7,
                                .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    xdc_gpt_stage *sc = NULL, *sg = NULL;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &cfg, &sc, NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_create(gpu->model, &cfg, &sg, NULL));
    int32_t tok[16], tgt[16];
    for (int i = 0; i < 16; i++) tok[i] = (i * 7) % 32, tgt[i] = (i * 5 + 1) % 32;
    float lc, lg;
    XDC_ASSERT_OK(xdc_gpt_stage_forward(sc, 0, tok, NULL, tgt, NULL, &lc));
    XDC_ASSERT_OK(xdc_gpt_stage_forward(sg, 0, tok, NULL, tgt, NULL, &lg));
    XDC_ASSERT_NEAR(lc, lg, exact ? 0 : 1e-3);
    XDC_ASSERT_OK(xdc_gpt_stage_backward(sc, 0, NULL, 1.0f, NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_backward(sg, 0, NULL, 1.0f, NULL));
    size_t n = xdc_gpt_stage_num_params(sc);
    float *gc = malloc(n * 4), *gg = malloc(n * 4);
    XDC_ASSERT_OK(gpu->model->download(gg, xdc_gpt_stage_grads(sg), n * 4));
    memcpy(gc, xdc_gpt_stage_grads(sc), n * 4);
    if (exact) XDC_ASSERT_MSG(memcmp(gc, gg, n * 4) == 0, "%s gradients differ from cpu", gpu->name);
    float gmax = 0.0f;
    for (size_t i = 0; i < n; i++) gmax = fmaxf(gmax, fabsf(gc[i]));
    for (size_t i = 0; i < n; i++)
        XDC_ASSERT_MSG(fabsf(gc[i] - gg[i]) <= 2e-3f * gmax + 1e-2f * fabsf(gc[i]), "grad[%zu] cpu %g %s %g", i, gc[i],
                       gpu->name, gg[i]);
    double nc = 0.0, ng = 0.0;
    XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(sc, &nc));
    XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(sg, &ng));
    XDC_ASSERT_NEAR(nc, ng, exact ? 0 : 5e-3 * nc);
    /* AdamW from the same gradients: an fp32 elementwise op, so it is held to fp32 tolerances (a TF32
     * difference in a near-zero gradient could flip its sign, and Adam's first step is ±lr either way). */
    XDC_ASSERT_OK(gpu->model->upload(xdc_gpt_stage_grads(sg), gc, n * 4));
    XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(sc, 1e-3f, 0.5f));
    XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(sg, 1e-3f, 0.5f));
    XDC_ASSERT_OK(gpu->model->download(gg, xdc_gpt_stage_params(sg), n * 4));
    memcpy(gc, xdc_gpt_stage_params(sc), n * 4);
    if (exact) XDC_ASSERT_MSG(memcmp(gc, gg, n * 4) == 0, "%s parameters differ from cpu", gpu->name);
    for (size_t i = 0; i < n; i++) XDC_ASSERT_NEAR(gc[i], gg[i], 2e-5 + 1e-4 * fabsf(gc[i]));
    free(gc), free(gg);
    xdc_gpt_stage_destroy(sc), xdc_gpt_stage_destroy(sg);
    XDC_ASSERT_OK(gpu->model->sync());
}

XDC_TEST(kern_cuda_stage_matches_cpu) { stage_matches_cpu(backend(XDC_BACKEND_CUDA)); }

/* Needs the model to reach its memory through the ops only (the seam conversion of model/): until then a
 * host touch of a parameter dies of SIGSEGV with "host touched cpu-strict device memory". */
XDC_TEST(kern_strict_stage_matches_cpu_bit_for_bit) { stage_matches_cpu(backend(XDC_BACKEND_CPU_STRICT)); }

/* Five training steps (two microbatches each, clipping, AdamW) on a 2-stage split, cpu vs cpu-strict: the
 * same loss every step and the same params_xxh64 at the end, bit for bit. */
XDC_TEST(kern_strict_training_steps_match_cpu_hash)
{
    const xdc_kern_backend *dev = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &dev, NULL));
    const xdc_model_ops *ops[2] = {cpu, dev->model};
    xdc_gpt_stage *st[2][2] = {{NULL, NULL}, {NULL, NULL}};
    uint64_t hash[2] = {0, 0};
    float loss[2][5];
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < 2; k++) {
            xdc_gpt_stage_config cfg = {.model = {3, 2, 16, 8, 32},
                                        .layer_begin = k == 0 ? 0 : 2,
                                        .layer_end = k == 0 ? 2 : 3,
                                        .batch = 2,
                                        .seq_len = 8,
                                        .max_inflight = 2,
                                        .seed = 11,
                                        .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
            XDC_ASSERT_OK(xdc_gpt_stage_create(ops[b], &cfg, &st[b][k], NULL));
        }
        for (int step = 0; step < 5; step++) {
            xdc_gpt_stage_zero_grad(st[b][0]);
            xdc_gpt_stage_zero_grad(st[b][1]);
            float total = 0.0f;
            for (int mb = 0; mb < 2; mb++) {
                int32_t tok[16], tgt[16];
                for (int i = 0; i < 16; i++)
                    tok[i] = (i * 7 + step * 3 + mb) % 32, tgt[i] = (i * 5 + 1 + step + mb * 2) % 32;
                const float *act = NULL, *dx = NULL;
                float l = 0.0f;
                XDC_ASSERT_OK(xdc_gpt_stage_forward(st[b][0], mb, tok, NULL, NULL, &act, NULL));
                XDC_ASSERT_OK(xdc_gpt_stage_forward(st[b][1], mb, NULL, act, tgt, NULL, &l));
                XDC_ASSERT_OK(xdc_gpt_stage_backward(st[b][1], mb, NULL, 0.5f, &dx));
                XDC_ASSERT_OK(xdc_gpt_stage_backward(st[b][0], mb, dx, 0.5f, NULL));
                total += 0.5f * l;
            }
            loss[b][step] = total;
            double sumsq = 0.0;
            XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[b][0], &sumsq));
            XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[b][1], &sumsq));
            float scale = xdc_gpt_clip_scale(sumsq, 1.0f);
            XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[b][0], 3e-3f, scale));
            XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[b][1], 3e-3f, scale));
        }
        XDC_ASSERT_OK(xdc_gpt_params_xxh64(st[b], 2, &hash[b]));
        XDC_ASSERT_OK(ops[b]->sync());
    }
    for (int step = 0; step < 5; step++)
        XDC_ASSERT_MSG(memcmp(&loss[0][step], &loss[1][step], sizeof(float)) == 0, "step %d loss cpu %.9g strict %.9g",
                       step, loss[0][step], loss[1][step]);
    XDC_ASSERT_MSG(hash[0] == hash[1], "params_xxh64 cpu %016llx cpu-strict %016llx", (unsigned long long)hash[0],
                   (unsigned long long)hash[1]);
    for (int b = 0; b < 2; b++) xdc_gpt_stage_destroy(st[b][0]), xdc_gpt_stage_destroy(st[b][1]);
}

/* The strict device under allocation failure: every failing allocation of a stage create (block tables,
 * queue items, streams) ends in a clean XDC_ERR_NOMEM, and a later create works. */
XDC_TEST(kern_strict_stage_create_survives_every_allocation_failure)
{
    const xdc_kern_backend *dev = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &dev, NULL));
    xdc_gpt_stage_config cfg = {.model = {2, 2, 16, 8, 32},
                                .layer_begin = 0,
                                .layer_end = 2,
                                .batch = 2,
                                .seq_len = 8,
                                .max_inflight = 1,
                                .seed = 7,
                                .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    for (long k = 1; k < 256; k++) {
        xdc_gpt_stage *s = NULL;
        xdc_alloc_fail_at(k);
        xdc_err_t rc = xdc_gpt_stage_create(dev->model, &cfg, &s, NULL);
        xdc_alloc_fail_at(0);
        if (rc == XDC_OK) {
            xdc_gpt_stage_destroy(s);
            XDC_ASSERT_OK(dev->device->stream_sync(NULL));
            return;
        }
        XDC_ASSERT_EQ(rc, XDC_ERR_NOMEM);
    }
    XDC_FAIL("create never succeeded within 256 allocations");
}

/* A CPU with AVX2 runs OpenBLAS's kernels for it, not the generic SSE3 fallback ("Prescott") that a model
 * number OpenBLAS does not know gets (xdc_model_cpu_fit_blas, called first in the test binary's main as in
 * xdc's): unless OPENBLAS_CORETYPE asks for that fallback. */
XDC_TEST(model_cpu_blas_runs_the_cpus_kernels_not_the_generic_fallback)
{
    __builtin_cpu_init();
    const char *core = xdc_model_cpu_blas_core(), *asked = getenv("OPENBLAS_CORETYPE");
    printf("  OpenBLAS core %s (OPENBLAS_CORETYPE %s)\n", core, asked ? asked : "unset");
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        xdc_test_skip("no AVX2: the fallback is right");
    if (asked && strcasecmp(asked, "Prescott") == 0) xdc_test_skip("OPENBLAS_CORETYPE=Prescott asks for the fallback");
    XDC_ASSERT_MSG(strcmp(core, "Prescott") != 0, "OpenBLAS runs its generic core on a CPU with AVX2");
}
