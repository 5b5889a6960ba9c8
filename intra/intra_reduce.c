/* intra_reduce.c — host reductions for the CPU backend: sum/average of n rank contributions in fp32,
 * bf16 widened to fp32, summed in rank order and rounded to nearest even once, so a result is the same
 * bits on every rank and equals a serial reference that adds in rank order. */
#include "intra/intra_priv.h"

#include <string.h>

#define REDUCE_BLOCK 1024 /* elements accumulated on the stack at a time */

float xdc_intra_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t xdc_intra_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static void load_block(float *acc, const void *src, size_t off, size_t len, xdc_intra_dtype dtype, int add)
{
    if (dtype == XDC_INTRA_F32) {
        const float *s = (const float *)src + off;
        if (add)
            for (size_t i = 0; i < len; i++) acc[i] += s[i];
        else memcpy(acc, s, len * sizeof(float));
    } else {
        const uint16_t *s = (const uint16_t *)src + off;
        if (add)
            for (size_t i = 0; i < len; i++) acc[i] += xdc_intra_bf16_to_f32(s[i]);
        else
            for (size_t i = 0; i < len; i++) acc[i] = xdc_intra_bf16_to_f32(s[i]);
    }
}

/* fp32 from two ranks: one pass, out[i] = (in0[i] + in1[i]) [* 1/2], the same bits as the general loop below.
 * out may be either input (in place), which an element-by-element loop allows. */
static void reduce_f32_pair(float *out, const float *a, const float *b, size_t count, int avg)
{
    if (avg)
        for (size_t i = 0; i < count; i++) out[i] = (a[i] + b[i]) * 0.5f;
    else
        for (size_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

void intra_reduce_host(void *out, const void *const *in, int n, size_t count, xdc_intra_dtype dtype, xdc_intra_redop op)
{
    if (dtype == XDC_INTRA_F32 && n == 2) {
        reduce_f32_pair(out, in[0], in[1], count, op == XDC_INTRA_AVG);
        return;
    }
    float acc[REDUCE_BLOCK];
    float inv_n = 1.0f / (float)n;
    for (size_t off = 0; off < count; off += REDUCE_BLOCK) {
        size_t len = count - off < REDUCE_BLOCK ? count - off : REDUCE_BLOCK;
        load_block(acc, in[0], off, len, dtype, 0);
        for (int k = 1; k < n; k++) load_block(acc, in[k], off, len, dtype, 1);
        if (op == XDC_INTRA_AVG && n > 1)
            for (size_t i = 0; i < len; i++) acc[i] *= inv_n;
        if (dtype == XDC_INTRA_F32) {
            memcpy((float *)out + off, acc, len * sizeof(float));
        } else {
            uint16_t *o = (uint16_t *)out + off;
            for (size_t i = 0; i < len; i++) o[i] = xdc_intra_f32_to_bf16(acc[i]);
        }
    }
}
