/* test_model.c — the GPT stage: whole-model gradient check against finite differences, split-vs-unsplit
 * equality (loss, gradients, parameters after optimizer steps, params_xxh64) with several microbatches in
 * flight, determinism for a seed, and shape validation. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "kernels/xdc_model_ops.h"

#include <stdlib.h>

extern const xdc_model_ops xdc_model_cpu_ops;
static const xdc_model_ops *cpu = &xdc_model_cpu_ops;

static xdc_gpt_stage_config tiny_cfg(int begin, int end, int inflight)
{
    return (xdc_gpt_stage_config){.model = {.n_layer = 3, .n_head = 2, .n_embd = 8, .max_seq_len = 8, .vocab_size = 16},
                                  .layer_begin = begin,
                                  .layer_end = end,
                                  .batch = 2,
                                  .seq_len = 6,
                                  .max_inflight = inflight,
                                  .seed = 42,
                                  .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
}

static void make_batch(int mb, int32_t *tok, int32_t *tgt, int n)
{
    xdc_rng r;
    xdc_rng_seed(&r, 100 + (uint64_t)mb);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)xdc_rng_below(&r, 16), tgt[i] = (int32_t)xdc_rng_below(&r, 16);
}

static float full_loss(xdc_gpt_stage *s, const int32_t *tok, const int32_t *tgt)
{
    float loss = 0.0f;
    XDC_ASSERT_OK(xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss));
    return loss;
}

XDC_TEST(model_whole_gradient_matches_finite_differences)
{
    xdc_gpt_stage_config cfg = tiny_cfg(0, 3, 1);
    xdc_gpt_stage *s = NULL;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &cfg, &s, NULL));
    size_t n = xdc_gpt_stage_num_params(s);
    XDC_ASSERT_EQ(n, xdc_gpt_config_num_params(&cfg.model));
    /* larger random parameters than the 0.02 init so every gradient is well above float noise */
    float *p = xdc_gpt_stage_params(s), *g = xdc_gpt_stage_grads(s);
    xdc_rng r;
    xdc_rng_seed(&r, 9);
    for (size_t i = 0; i < n; i++) p[i] += xdc_rng_normal(&r) * 0.3f;
    int32_t tok[12], tgt[12];
    make_batch(0, tok, tgt, 12);
    full_loss(s, tok, tgt);
    xdc_gpt_stage_zero_grad(s);
    XDC_ASSERT_OK(xdc_gpt_stage_backward(s, 0, NULL, 1.0f, NULL));
    /* check ~300 parameters spread over the arena: every tensor kind of every layer is hit */
    const float eps = 1e-2f;
    size_t stride = n / 300, checked = 0, bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i += stride) {
        float save = p[i];
        p[i] = save + eps;
        double lp = full_loss(s, tok, tgt);
        p[i] = save - eps;
        double lm = full_loss(s, tok, tgt);
        p[i] = save;
        double fd = (lp - lm) / (2 * eps), err = fabs(fd - g[i]);
        if (err > 2e-3 + 5e-2 * fabs(fd)) bad++;
        if (err > worst) worst = err;
        checked++;
    }
    XDC_ASSERT_MSG(bad == 0, "%zu of %zu parameters disagree with finite differences (worst abs error %g)", bad,
                   checked, worst);
    double gsum = 0;
    XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(s, &gsum));
    XDC_ASSERT(gsum > 1e-4);
    xdc_gpt_stage_destroy(s);
}

/* Runs `steps` optimizer steps of M=2 microbatches over the stages with both microbatches in flight at
 * once (F0 F1 then B0 B1 per stage, as a pipeline would), returning the first step's mean loss. */
static float train_stages(xdc_gpt_stage **st, int ns, int steps)
{
    float first_loss = 0.0f;
    for (int step = 0; step < steps; step++) {
        for (int k = 0; k < ns; k++) xdc_gpt_stage_zero_grad(st[k]);
        float loss_sum = 0.0f;
        for (int mb = 0; mb < 2; mb++) {
            int32_t tok[12], tgt[12];
            make_batch(step * 2 + mb, tok, tgt, 12);
            const float *x = NULL;
            for (int k = 0; k < ns; k++) {
                const float *y = NULL;
                float loss = 0.0f;
                XDC_ASSERT_OK(xdc_gpt_stage_forward(st[k], mb, tok, x, tgt, &y, &loss));
                x = y;
                if (k == ns - 1) loss_sum += loss;
            }
        }
        for (int mb = 0; mb < 2; mb++) {
            const float *dy = NULL;
            for (int k = ns - 1; k >= 0; k--) {
                const float *dx = NULL;
                XDC_ASSERT_OK(xdc_gpt_stage_backward(st[k], mb, dy, 0.5f, &dx));
                dy = dx;
            }
        }
        double sumsq = 0;
        for (int k = 0; k < ns; k++) XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[k], &sumsq));
        float scale = xdc_gpt_clip_scale(sumsq, 0.5f);
        for (int k = 0; k < ns; k++) XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[k], 1e-2f, scale));
        if (step == 0) first_loss = loss_sum / 2;
    }
    return first_loss;
}

XDC_TEST(model_split_stages_match_unsplit_bit_for_bit)
{
    xdc_gpt_stage *whole = NULL, *parts[3] = {NULL};
    xdc_gpt_stage_config cw = tiny_cfg(0, 3, 2), c0 = tiny_cfg(0, 1, 2), c1 = tiny_cfg(1, 2, 2), c2 = tiny_cfg(2, 3, 2);
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &cw, &whole, NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c0, &parts[0], NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c1, &parts[1], NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c2, &parts[2], NULL));
    XDC_ASSERT(xdc_gpt_stage_is_first(parts[0]) && !xdc_gpt_stage_is_last(parts[0]));
    XDC_ASSERT(!xdc_gpt_stage_is_first(parts[1]) && !xdc_gpt_stage_is_last(parts[1]));
    size_t n = xdc_gpt_stage_num_params(whole);
    XDC_ASSERT_EQ(n, xdc_gpt_stage_num_params(parts[0]) + xdc_gpt_stage_num_params(parts[1]) +
                         xdc_gpt_stage_num_params(parts[2]));

    uint64_t hw, hs;
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&whole, 1, &hw));
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(parts, 3, &hs));
    XDC_ASSERT_MSG(hw == hs, "initial params differ between split and unsplit: %016llx vs %016llx",
                   (unsigned long long)hw, (unsigned long long)hs);

    /* one step: same loss, same gradients, concatenated in stage order */
    float lw = train_stages(&whole, 1, 1), ls = train_stages(parts, 3, 1);
    XDC_ASSERT(lw == ls);
    XDC_ASSERT(lw > 2.0f && lw < 4.0f); /* about ln 16 at init */
    size_t off = 0;
    for (int k = 0; k < 3; k++) {
        size_t nk = xdc_gpt_stage_num_params(parts[k]);
        XDC_ASSERT(memcmp(xdc_gpt_stage_grads(whole) + off, xdc_gpt_stage_grads(parts[k]), nk * 4) == 0);
        off += nk;
    }
    /* more steps: parameters stay identical */
    train_stages(&whole, 1, 3);
    train_stages(parts, 3, 3);
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&whole, 1, &hw));
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(parts, 3, &hs));
    XDC_ASSERT_MSG(hw == hs, "after training: %016llx vs %016llx", (unsigned long long)hw, (unsigned long long)hs);
    /* and training moved them */
    xdc_gpt_stage *fresh = NULL;
    uint64_t hf;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &cw, &fresh, NULL));
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&fresh, 1, &hf));
    XDC_ASSERT(hf != hw);
    xdc_gpt_stage_destroy(fresh);
    xdc_gpt_stage_destroy(whole);
    for (int k = 0; k < 3; k++) xdc_gpt_stage_destroy(parts[k]);
}

XDC_TEST(model_training_lowers_loss_and_is_deterministic)
{
    xdc_gpt_stage_config c = tiny_cfg(0, 3, 2);
    xdc_gpt_stage *a = NULL, *b = NULL;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &a, NULL));
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &b, NULL));
    /* the same batch over and over: the model must memorise it */
    int32_t tok[12], tgt[12];
    make_batch(0, tok, tgt, 12);
    float first = full_loss(a, tok, tgt), last = first;
    for (int i = 0; i < 60; i++) {
        xdc_gpt_stage_zero_grad(a);
        last = full_loss(a, tok, tgt);
        XDC_ASSERT_OK(xdc_gpt_stage_backward(a, 0, NULL, 1.0f, NULL));
        XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(a, 1e-2f, 1.0f));
        xdc_gpt_stage_zero_grad(b);
        full_loss(b, tok, tgt);
        XDC_ASSERT_OK(xdc_gpt_stage_backward(b, 0, NULL, 1.0f, NULL));
        XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(b, 1e-2f, 1.0f));
    }
    XDC_ASSERT_MSG(last < 0.5f * first, "loss %g -> %g", first, last);
    uint64_t ha, hb;
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&a, 1, &ha));
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&b, 1, &hb));
    XDC_ASSERT(ha == hb);
    xdc_gpt_stage_destroy(a);
    xdc_gpt_stage_destroy(b);
}

XDC_TEST(model_rejects_bad_shapes_and_inputs)
{
    xdc_diag d = {{0}};
    xdc_gpt_stage *s = NULL;
    xdc_gpt_stage_config c = tiny_cfg(0, 3, 1);
    c.model.n_head = 3; /* 8 % 3 != 0 */
    XDC_ASSERT_ERR(xdc_gpt_stage_create(cpu, &c, &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "multiple of n_head");
    c = tiny_cfg(2, 2, 1);
    XDC_ASSERT_ERR(xdc_gpt_stage_create(cpu, &c, &s, &d), XDC_ERR_INVALID);
    c = tiny_cfg(0, 3, 1);
    c.seq_len = 9;
    XDC_ASSERT_ERR(xdc_gpt_stage_create(cpu, &c, &s, &d), XDC_ERR_INVALID);
    c = tiny_cfg(0, 3, 1);
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &s, &d));
    int32_t tok[12] = {0}, tgt[12] = {0};
    float loss;
    tok[3] = 16; /* out of vocabulary */
    XDC_ASSERT_ERR(xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss), XDC_ERR_RANGE);
    tok[3] = 0;
    XDC_ASSERT_ERR(xdc_gpt_stage_forward(s, 1, tok, NULL, tgt, NULL, &loss), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_gpt_stage_backward(s, 0, NULL, 1.0f, NULL), XDC_ERR_INVALID); /* nothing forwarded */
    xdc_gpt_stage_destroy(s);
    xdc_gpt_stage_destroy(NULL);
}

XDC_TEST(model_create_survives_every_allocation_failure)
{
    xdc_gpt_stage_config c = tiny_cfg(1, 3, 2);
    for (long k = 1; k < 64; k++) {
        xdc_gpt_stage *s = NULL;
        xdc_alloc_fail_at(k);
        xdc_err_t rc = xdc_gpt_stage_create(cpu, &c, &s, NULL);
        xdc_alloc_fail_at(0);
        if (rc == XDC_OK) {
            XDC_ASSERT(k > 3);
            xdc_gpt_stage_destroy(s);
            return;
        }
        XDC_ASSERT_EQ(rc, XDC_ERR_NOMEM);
    }
    XDC_FAIL("create never succeeded within 64 allocations");
}
