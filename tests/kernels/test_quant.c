/* test_quant.c — the CPU quant table (kernels/xdc_quant.h): error bounds of int8/int4/bf16, fused error
 * feedback, exact top-k against a sorting reference (both the sampled and the fallback path, with
 * ties), range counting and byte planes. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "kernels/xdc_quant.h"

#include <float.h>
#include <stdlib.h>

static const xdc_quant_ops *Q = &xdc_quant_cpu_ops;

static float *grad_like(size_t n, uint64_t seed)
{
    xdc_rng rng;
    xdc_rng_seed(&rng, seed);
    float *x = xdc_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float v = xdc_rng_normal(&rng) * 1e-3f;
        if (xdc_rng_below(&rng, 100) == 0) v *= 30.0f; /* heavy tail, like real gradients */
        x[i] = v;
    }
    return x;
}

static float block_absmax(const float *x, size_t n, size_t b0, size_t block)
{
    float m = 0;
    for (size_t i = b0; i < n && i < b0 + block; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

XDC_TEST(quant_int8_error_within_half_step_for_all_block_sizes)
{
    static const size_t blocks[] = {16, 64, 128, 256, 4096};
    size_t n = 10007; /* not a multiple of any block */
    float *x = grad_like(n, 1), *y = xdc_malloc(n * 4), *scales = xdc_malloc(n * 4);
    int8_t *q = xdc_malloc(n);
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        size_t block = blocks[bi];
        XDC_ASSERT_OK(Q->quantize_int8(x, NULL, n, block, q, scales));
        XDC_ASSERT_OK(Q->dequantize_int8(q, scales, n, block, y, false));
        for (size_t i = 0; i < n; i++) {
            float am = block_absmax(x, n, i / block * block, block);
            if (fabsf(x[i] - y[i]) > am / 254.0f * 1.0001f + 1e-30f)
                XDC_FAIL("block %zu elem %zu: %g vs %g (absmax %g)", block, i, x[i], y[i], am);
            if (q[i] == -128) XDC_FAIL("q out of range");
        }
        XDC_ASSERT_NEAR(scales[0], block_absmax(x, n, 0, block) / 127.0f, 1e-12);
    }
    XDC_ASSERT_ERR(Q->quantize_int8(x, NULL, n, 15, q, scales), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(Q->quantize_int8(x, NULL, n, 8192, q, scales), XDC_ERR_INVALID);
    xdc_free(x), xdc_free(y), xdc_free(scales), xdc_free(q);
}

XDC_TEST(quant_fused_error_feedback_leaves_input_minus_decoded)
{
    size_t n = 3000, block = 64, nb = (n + block - 1) / block;
    float *x = grad_like(n, 2), *r = grad_like(n, 3), *r0 = xdc_malloc(n * 4), *y = xdc_malloc(n * 4);
    float *s = xdc_malloc(nb * 4), *mins = xdc_malloc(nb * 4);
    uint8_t *q = xdc_malloc(n);
    uint16_t *h = xdc_malloc(n * 2);
    for (int codec = 0; codec < 3; codec++) {
        for (size_t i = 0; i < n; i++) r0[i] = r[i] = x[(i * 7) % n] * 0.1f;
        if (codec == 0) {
            XDC_ASSERT_OK(Q->quantize_int8(x, r, n, block, (int8_t *)q, s));
            XDC_ASSERT_OK(Q->dequantize_int8((int8_t *)q, s, n, block, y, false));
        } else if (codec == 1) {
            XDC_ASSERT_OK(Q->quantize_int4(x, r, n, block, q, s, mins));
            XDC_ASSERT_OK(Q->dequantize_int4(q, s, mins, n, block, y, false));
        } else {
            XDC_ASSERT_OK(Q->fp32_to_bf16(x, r, n, h));
            XDC_ASSERT_OK(Q->bf16_to_fp32(h, n, y));
        }
        for (size_t i = 0; i < n; i++) /* the residual is exactly (x + r0) - decoded, in float */
            if (r[i] != (x[i] + r0[i]) - y[i])
                XDC_FAIL("codec %d elem %zu: r %g, want %g", codec, i, r[i], (x[i] + r0[i]) - y[i]);
        XDC_ASSERT(1);
    }
    xdc_free(x), xdc_free(r), xdc_free(r0), xdc_free(y), xdc_free(s), xdc_free(mins), xdc_free(q), xdc_free(h);
}

XDC_TEST(quant_int4_error_within_half_step_and_odd_lengths)
{
    size_t n = 1001, block = 32, nb = (n + block - 1) / block;
    float *x = grad_like(n, 4), *y = xdc_malloc(n * 4), *s = xdc_malloc(nb * 4), *mins = xdc_malloc(nb * 4);
    uint8_t *q = xdc_malloc((n + 1) / 2);
    XDC_ASSERT_OK(Q->quantize_int4(x, NULL, n, block, q, s, mins));
    XDC_ASSERT_OK(Q->dequantize_int4(q, s, mins, n, block, y, false));
    for (size_t i = 0; i < n; i++) {
        size_t b = i / block;
        float lo = INFINITY, hi = -INFINITY;
        for (size_t j = b * block; j < n && j < (b + 1) * block; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
        if (fabsf(x[i] - y[i]) > (hi - lo) / 30.0f * 1.0001f + 1e-30f) XDC_FAIL("elem %zu: %g vs %g", i, x[i], y[i]);
        XDC_ASSERT_NEAR(mins[b], lo, 0);
    }
    /* accumulating form: y + decoded in one pass, bit for bit the same as decode-then-add */
    float *acc = xdc_malloc(n * 4);
    for (size_t i = 0; i < n; i++) acc[i] = x[i];
    XDC_ASSERT_OK(Q->dequantize_int4(q, s, mins, n, block, acc, true));
    for (size_t i = 0; i < n; i++)
        if (acc[i] != x[i] + y[i]) XDC_FAIL("int4 add elem %zu", i);
    int8_t *q8 = xdc_malloc(n);
    XDC_ASSERT_OK(Q->quantize_int8(x, NULL, n, block, q8, s));
    XDC_ASSERT_OK(Q->dequantize_int8(q8, s, n, block, y, false));
    for (size_t i = 0; i < n; i++) acc[i] = x[i];
    XDC_ASSERT_OK(Q->dequantize_int8(q8, s, n, block, acc, true));
    for (size_t i = 0; i < n; i++)
        if (acc[i] != x[i] + y[i]) XDC_FAIL("int8 add elem %zu", i);
    XDC_ASSERT(1);
    xdc_free(acc), xdc_free(q8);
    xdc_free(x), xdc_free(y), xdc_free(s), xdc_free(mins), xdc_free(q);
}

XDC_TEST(quant_bf16_rounds_to_nearest_even)
{
    /* 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0);
     * 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: rounds up to the even one. */
    float in[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 3.14159265f, 1e-40f, 0.0f};
    float want[] = {1.0f, 1.0f + 4.0f / 256, -2.5f, 3.140625f, 0, 0};
    uint16_t h[6];
    float out[6];
    XDC_ASSERT_OK(Q->fp32_to_bf16(in, NULL, 6, h));
    XDC_ASSERT_OK(Q->bf16_to_fp32(h, 6, out));
    for (int i = 0; i < 4; i++) XDC_ASSERT_NEAR(out[i], want[i], 0);
    XDC_ASSERT(fabsf(out[4] - in[4]) < 1e-41f);
    XDC_ASSERT(out[5] == 0.0f);
}

static int cmp_desc_abs(const void *a, const void *b)
{
    /* Reference order: larger |x| first, then lower index (pairs of value, index). */
    const float *pa = a, *pb = b;
    float fa = fabsf(pa[0]), fb = fabsf(pb[0]);
    if (fa != fb) return fa < fb ? 1 : -1;
    return pa[1] < pb[1] ? -1 : pa[1] > pb[1];
}

static void check_topk(const float *x, size_t n, size_t k)
{
    uint32_t *idx = xdc_malloc(k * 4 + 4);
    float *val = xdc_malloc(k * 4 + 4);
    void *scratch = xdc_malloc(Q->topk_scratch_bytes(n, k));
    XDC_ASSERT_OK(Q->topk_select(x, NULL, n, k, idx, val, scratch));
    float *pairs = xdc_malloc(n * 2 * sizeof(float));
    for (size_t i = 0; i < n; i++) pairs[2 * i] = x[i], pairs[2 * i + 1] = (float)i;
    qsort(pairs, n, 2 * sizeof(float), cmp_desc_abs);
    char *want = xdc_calloc(n, 1);
    for (size_t i = 0; i < k; i++) want[(size_t)pairs[2 * i + 1]] = 1;
    for (size_t i = 0; i < k; i++) {
        if (i && idx[i] <= idx[i - 1]) XDC_FAIL("n %zu k %zu: indices not ascending at %zu", n, k, i);
        if (!want[idx[i]]) XDC_FAIL("n %zu k %zu: index %u not among the top k", n, k, idx[i]);
        if (val[i] != x[idx[i]]) XDC_FAIL("value mismatch at %zu", i);
    }
    XDC_ASSERT(1);
    xdc_free(idx), xdc_free(val), xdc_free(scratch), xdc_free(pairs), xdc_free(want);
}

XDC_TEST(quant_topk_matches_sort_reference_with_ties)
{
    size_t n = 200003; /* index fits a float exactly (< 2^24) for the reference's pairs */
    float *x = grad_like(n, 5);
    check_topk(x, n, 2000); /* sampled threshold path */
    check_topk(x, n, 1);
    check_topk(x, n, n / 2); /* too large for sampling: radix select over everything */
    check_topk(x, 1000, 10); /* small n */
    /* Blocks of up to 4096 (the sparse codec's): the sampled estimate, and an estimate that catches
     * fewer than k because the large values sit exactly at the sampled positions (16 j + 8). */
    static const size_t block_k[] = {1, 4, 82, 1000, 2048};
    for (size_t i = 0; i < 5; i++) check_topk(x, 4096, block_k[i]);
    float *b = xdc_malloc(4096 * sizeof(float));
    for (size_t i = 0; i < 4096; i++) b[i] = i % 16 == 8 ? 1.0f : (float)(i % 5) * 1e-3f;
    check_topk(b, 4096, 1000);
    check_topk(b, 4096, 300);
    for (size_t i = 0; i < 4096; i++) b[i] = (float)(i % 7) - 3.0f;
    check_topk(b, 4096, 82);
    memset(b, 0, 4096 * sizeof(float));
    check_topk(b, 4096, 82);
    xdc_free(b);
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f; /* massive ties: lower index wins */
    check_topk(x, n, 5000);
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
    check_topk(x, n, 100);
    XDC_ASSERT_ERR(Q->topk_select(x, NULL, 10, 11, NULL, NULL, NULL), XDC_ERR_INVALID);
    xdc_free(x);
}

XDC_TEST(quant_topk_error_feedback_selects_from_input_plus_residual)
{
    static const size_t sizes[] = {1000, 4096, 150000}; /* unsampled, small-block and sampled paths */
    for (int si = 0; si < 3; si++) {
        size_t n = sizes[si], k = n / 100;
        float *x = grad_like(n, 6), *r = grad_like(n, 7), *y = xdc_malloc(n * 4), *val = xdc_malloc(k * 4);
        uint32_t *idx = xdc_malloc(k * 4), *ref = xdc_malloc(k * 4);
        void *scratch = xdc_malloc(Q->topk_scratch_bytes(n, k));
        for (size_t i = 0; i < n; i++) y[i] = x[i] + r[i];
        XDC_ASSERT_OK(Q->topk_select(y, NULL, n, k, ref, val, scratch));
        XDC_ASSERT_OK(Q->topk_select(x, r, n, k, idx, val, scratch));
        XDC_ASSERT(memcmp(idx, ref, k * 4) == 0);
        size_t zeroed = 0;
        for (size_t i = 0; i < n; i++) zeroed += r[i] == 0.0f;
        XDC_ASSERT_EQ(zeroed, k);
        for (size_t i = 0; i < k; i++) XDC_ASSERT_NEAR(val[i], y[idx[i]], 0);
        for (size_t i = 0, j = 0; i < n; i++) {
            if (j < k && idx[j] == i) {
                j++;
                continue;
            }
            if (r[i] != y[i]) XDC_FAIL("n %zu: r[%zu] = %g, want x + r = %g", n, i, r[i], y[i]);
        }
        xdc_free(x), xdc_free(r), xdc_free(y), xdc_free(val), xdc_free(idx), xdc_free(ref), xdc_free(scratch);
    }
}

XDC_TEST(quant_count_out_of_range_sees_nan_inf_and_huge)
{
    float x[] = {1.0f, NAN, -INFINITY, INFINITY, 2e30f, -2e30f, 1e30f, FLT_MIN / 4, -0.0f};
    size_t c = 0;
    XDC_ASSERT_OK(Q->count_out_of_range(x, 9, XDC_QUANT_MAX_ABS, &c));
    XDC_ASSERT_EQ(c, 5);
    XDC_ASSERT_OK(Q->count_out_of_range(x, 9, FLT_MAX, &c));
    XDC_ASSERT_EQ(c, 3);
}

XDC_TEST(quant_scatter_writes_or_adds_the_pairs_and_refuses_bad_indices)
{
    float y[6] = {1, -0.0f, 3, 4, 5, 6}, val[3] = {0.5f, 2.0f, -1.0f};
    uint32_t idx[3] = {0, 2, 5}, repeat[3] = {0, 2, 2}, past[3] = {0, 2, 6};
    XDC_ASSERT_OK(Q->scatter(idx, val, 3, y, 6, true));
    float added[6] = {1.5f, -0.0f, 5, 4, 5, 5};
    XDC_ASSERT(memcmp(y, added, sizeof y) == 0); /* untouched entries keep their bits, -0 included */
    XDC_ASSERT_OK(Q->scatter(idx, val, 3, y, 6, false));
    float written[6] = {0.5f, -0.0f, 2, 4, 5, -1};
    XDC_ASSERT(memcmp(y, written, sizeof y) == 0);
    XDC_ASSERT_EQ(Q->scatter(repeat, val, 3, y, 6, true), XDC_ERR_INVALID);
    XDC_ASSERT_EQ(Q->scatter(past, val, 3, y, 6, true), XDC_ERR_INVALID);
    XDC_ASSERT(memcmp(y, written, sizeof y) == 0); /* refused before writing */
}

XDC_TEST(quant_byte_planes_round_trip_with_tails)
{
    uint8_t in[103], mid[103], out[103];
    for (int i = 0; i < 103; i++) in[i] = (uint8_t)(i * 37 + 11);
    for (size_t elem = 1; elem <= 8; elem++) {
        XDC_ASSERT_OK(Q->byte_shuffle(in, 103, elem, mid));
        size_t ne = 103 / elem;
        if (elem > 1) XDC_ASSERT_EQ(mid[ne], in[1]); /* plane 1 starts with byte 1 of element 0 */
        XDC_ASSERT_OK(Q->byte_unshuffle(mid, 103, elem, out));
        XDC_ASSERT(memcmp(in, out, 103) == 0);
    }
}
