/* test_model.c — the GPT stage: whole-model gradient check against finite differences, split-vs-unsplit
 * equality (loss, gradients, parameters after optimizer steps, params_xxh64) with several microbatches in
 * flight, determinism for a seed, shape validation, and the activation slots: their bytes are what the
 * model's shape counts, and the high-water mark follows forwards and backwards. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "model/xdc_model_shape.h"
#include "kernels/xdc_model_ops.h"

#include <stdlib.h>
#include <string.h>

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

/* grad_buffers 2: swap_grads hands over the arena backward filled and re-points the typed views, so the
 * next backward fills the other arena (the same gradients a one-arena stage computes) and leaves the
 * handed-over one as it was. One arena: NULL. */
XDC_TEST(model_swap_grads_hands_over_the_filled_arena)
{
    xdc_gpt_stage *two = NULL, *one = NULL;
    xdc_gpt_stage_config c = tiny_cfg(0, 3, 1);
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &one, NULL));
    c.grad_buffers = 3;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_gpt_stage_create(cpu, &c, &two, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "grad_buffers");
    c.grad_buffers = 2;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &two, NULL));
    XDC_ASSERT(xdc_gpt_stage_swap_grads(one) == NULL);
    size_t n = xdc_gpt_stage_num_params(two);
    float *g0 = xdc_malloc(n * sizeof(float)); /* (n) fp32: the first batch's gradients */
    int32_t tok[12], tgt[12];
    float loss;
    for (int b = 0; b < 2; b++) {
        make_batch(b, tok, tgt, 12);
        xdc_gpt_stage *st[2] = {two, one};
        for (int k = 0; k < 2; k++) {
            xdc_gpt_stage_zero_grad(st[k]);
            XDC_ASSERT_OK(xdc_gpt_stage_forward(st[k], 0, tok, NULL, tgt, NULL, &loss));
            XDC_ASSERT_OK(xdc_gpt_stage_backward(st[k], 0, NULL, 1.0f, NULL));
        }
        XDC_ASSERT(memcmp(xdc_gpt_stage_grads(two), xdc_gpt_stage_grads(one), n * sizeof(float)) == 0);
        if (b) break;
        float *first = xdc_gpt_stage_grads(two);
        memcpy(g0, first, n * sizeof(float));
        XDC_ASSERT(xdc_gpt_stage_swap_grads(two) == first);
        XDC_ASSERT(xdc_gpt_stage_grads(two) != first);
    }
    float *second = xdc_gpt_stage_grads(two), *first = xdc_gpt_stage_swap_grads(two);
    XDC_ASSERT(first == second);
    XDC_ASSERT(memcmp(xdc_gpt_stage_grads(two), g0, n * sizeof(float)) == 0); /* untouched by batch 1 */
    xdc_free(g0);
    xdc_gpt_stage_destroy(two);
    xdc_gpt_stage_destroy(one);
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

XDC_TEST(model_slot_bytes_are_what_the_shape_counts)
{
    /* Odd widths, batches and lengths so that the 64-byte rounding of every tensor matters; every kind of
     * stage: the whole model, first, middle, last. */
    static const int shapes[][7] = {/* L, NH, C, maxT, V, B, T */
                                    {3, 2, 8, 8, 16, 2, 6},
                                    {4, 3, 9, 7, 11, 3, 5},
                                    {2, 4, 64, 64, 256, 16, 64},
                                    {5, 1, 5, 3, 2, 1, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int *v = shapes[k];
        xdc_gpt_config g = {.n_layer = v[0], .n_head = v[1], .n_embd = v[2], .max_seq_len = v[3], .vocab_size = v[4]};
        xdc_model_shape m;
        xdc_model_shape_of(&g, &m);
        int ranges[][2] = {{0, v[0]}, {0, 1}, {1, v[0] - 1}, {v[0] - 1, v[0]}};
        for (int r = 0; r < 4; r++) {
            if (ranges[r][0] >= ranges[r][1]) continue;
            xdc_gpt_stage_config c = {.model = g,
                                      .layer_begin = ranges[r][0],
                                      .layer_end = ranges[r][1],
                                      .batch = v[5],
                                      .seq_len = v[6],
                                      .max_inflight = 2,
                                      .seed = 1};
            xdc_gpt_stage *st = NULL;
            XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &st, NULL));
            double want = xdc_model_shape_slot_bytes(&m, c.layer_begin, c.layer_end, c.batch, c.seq_len);
            double want_sc = xdc_model_shape_scratch_bytes(&m, c.layer_begin, c.layer_end, c.batch, c.seq_len);
            XDC_ASSERT_MSG((double)xdc_gpt_stage_slot_bytes(st) == want,
                           "shape %zu layers [%d,%d): a slot takes %zu bytes, the shape counts %.0f", k, c.layer_begin,
                           c.layer_end, xdc_gpt_stage_slot_bytes(st), want);
            XDC_ASSERT_MSG((double)xdc_gpt_stage_scratch_bytes(st) == want_sc,
                           "shape %zu layers [%d,%d): the scratch takes %zu bytes, the shape counts %.0f", k,
                           c.layer_begin, c.layer_end, xdc_gpt_stage_scratch_bytes(st), want_sc);
            XDC_ASSERT_EQ(xdc_gpt_stage_slots(st), 2);
            XDC_ASSERT_EQ(xdc_gpt_stage_activation_bytes(st), (size_t)0);
            xdc_gpt_stage_destroy(st);
        }
    }
}

XDC_TEST(model_activation_peak_counts_slots_held)
{
    /* F0 F1 B0 F2 B1 B2 through slots mb % 2: at most two held at once; the mark stays at two after the
     * backwards free them; a forward into a slot still held (validation) holds it still. */
    xdc_gpt_stage_config c = tiny_cfg(0, 3, 2);
    xdc_gpt_stage *s = NULL;
    XDC_ASSERT_OK(xdc_gpt_stage_create(cpu, &c, &s, NULL));
    XDC_ASSERT_EQ(xdc_gpt_stage_slot_of(s, 0), 0);
    XDC_ASSERT_EQ(xdc_gpt_stage_slot_of(s, 3), 1);
    int32_t tok[12], tgt[12];
    float loss;
    static const int ops[][2] = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {1, 2}}; /* {backward?, microbatch} */
    static const int peak[] = {1, 2, 2, 2, 2, 2};
    xdc_gpt_stage_zero_grad(s);
    for (int i = 0; i < 6; i++) {
        int mb = ops[i][1], slot = xdc_gpt_stage_slot_of(s, mb);
        make_batch(mb, tok, tgt, 12);
        if (ops[i][0]) XDC_ASSERT_OK(xdc_gpt_stage_backward(s, slot, NULL, 1.0f / 3, NULL));
        else XDC_ASSERT_OK(xdc_gpt_stage_forward(s, slot, tok, NULL, tgt, NULL, &loss));
        XDC_ASSERT_EQ(xdc_gpt_stage_slots_peak(s), peak[i]);
    }
    XDC_ASSERT_EQ(xdc_gpt_stage_activation_bytes(s), 2 * xdc_gpt_stage_slot_bytes(s));
    xdc_gpt_stage_reset_activation_peak(s);
    XDC_ASSERT_EQ(xdc_gpt_stage_slots_peak(s), 0);
    for (int i = 0; i < 3; i++) XDC_ASSERT_OK(xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss));
    XDC_ASSERT_EQ(xdc_gpt_stage_slots_peak(s), 1);
    xdc_gpt_stage_destroy(s);
}
