/* xdc_quant.h — the quantize / top-k / error-feedback op family of the kernel backends (one table per
 * backend, reached through xdc_kern_backend.quant). Every pointer argument lives in the backend's
 * memory space: host memory for the CPU table, device memory for the CUDA and cpu-strict tables
 * (including `scratch` and the `count` out-parameter of count_out_of_range). CUDA and cpu-strict ops are
 * asynchronous on the calling thread's current stream (xdc_device_ops.set_stream) and return
 * XDC_ERR_CUDA when a launch fails, or the stream's sticky error; cpu-strict also refuses a pointer that
 * is not device memory and a hazard (docs/device.md) with XDC_ERR_INVALID. CPU ops only fail on invalid
 * arguments.
 *
 * Numeric contract shared by both backends (the CUDA-vs-CPU test checks it):
 *  - callers reject NaN, Inf and |x| > 2^100 (XDC_QUANT_MAX_ABS) first, so no op below has to think
 *    about them and no intermediate can overflow (residuals stay far below 2^127);
 *  - int8 blockwise absmax: scale = absmax/127, q = round-half-away(x * 127/absmax) in [-127, 127];
 *    a block with absmax < 2^-100 is sent as zeros with scale 0;
 *  - int4 blockwise min/max: scale = (max-min)/15, q = round((x-min)/scale) in [0, 15], two values per
 *    byte (element 2i in the low nibble); a block with max-min < 2^-100 gets scale 0, q = 0;
 *  - bf16: round to nearest even;
 *  - top-k: exactly k entries of largest |x|, ties broken towards the lower index, returned in
 *    ascending index order. */
#ifndef XDC_QUANT_H
#define XDC_QUANT_H

#include "common/xdc_err.h"
#include "kernels/xdc_kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest magnitude the codecs accept as input (2^100). */
#define XDC_QUANT_MAX_ABS    1.2676506002282294e30f
/* Smallest block spread that gets a non-zero scale (2^-100). */
#define XDC_QUANT_MIN_SPREAD 7.888609052210118e-31f
/* Block sizes the blockwise codecs accept: even, in [16, 4096]. */
#define XDC_QUANT_BLOCK_MIN  16
#define XDC_QUANT_BLOCK_MAX  4096

struct xdc_quant_ops {
    /* Quantizers and top-k take an optional error-feedback residual r (n fp32, NULL for none): with r
     * they encode y = x + r and leave r = y - decode(encode(y)), fused into their passes over memory. */
    /* x (n) fp32 -> q (n) int8, scales (ceil(n/block)) fp32. */
    xdc_err_t (*quantize_int8)(const float *x, float *r, size_t n, size_t block, int8_t *q, float *scales);
    /* q (n) int8, scales (ceil(n/block)) -> y (n) fp32; with add, y += decoded (receiving side of a
     * reduction, one pass instead of decode-then-add). Same for dequantize_int4. */
    xdc_err_t (*dequantize_int8)(const int8_t *q, const float *scales, size_t n, size_t block, float *y, bool add);
    /* x (n) fp32 -> q ((n+1)/2) bytes, scales and mins (ceil(n/block)) fp32. */
    xdc_err_t (*quantize_int4)(const float *x, float *r, size_t n, size_t block, uint8_t *q, float *scales,
                               float *mins);
    xdc_err_t (*dequantize_int4)(const uint8_t *q, const float *scales, const float *mins, size_t n, size_t block,
                                 float *y, bool add);
    /* x (n) fp32 -> y (n) bf16 bit patterns, and back. */
    xdc_err_t (*fp32_to_bf16)(const float *x, float *r, size_t n, uint16_t *y);
    xdc_err_t (*bf16_to_fp32)(const uint16_t *x, size_t n, float *y);
    /* Scratch bytes topk_select needs for (n, k). */
    size_t (*topk_scratch_bytes)(size_t n, size_t k);
    /* The k (<= n) entries of y = x (+ r) (n) with the largest |y|: idx (k) ascending u32, val (k) = y[idx].
     * With r, r is left as y with the selected entries zeroed (they were sent exactly). */
    xdc_err_t (*topk_select)(const float *x, float *r, size_t n, size_t k, uint32_t *idx, float *val, void *scratch);
    /* *count = number of x (n) that are NaN or have |x| > max_abs (a size_t in backend memory). */
    xdc_err_t (*count_out_of_range)(const float *x, size_t n, float max_abs, size_t *count);
    /* y += x, (n) fp32: accumulating decode. */
    xdc_err_t (*accumulate)(const float *x, size_t n, float *y);
    /* y *= a, (n) fp32, one rounded multiply per element (a cross-region average's 1/R). */
    xdc_err_t (*scale)(float *y, size_t n, float a);
    /* y[idx[i]] = val[i] (with add: y[idx[i]] += val[i]) for i < k: idx (k) u32 strictly ascending, each
     * < n (CPU: XDC_ERR_INVALID otherwise, before writing); val (k) fp32; y (n) fp32, its other entries
     * left as they are. Top-k's decode: only the (index, value) pairs cross to the device. */
    xdc_err_t (*scatter)(const uint32_t *idx, const float *val, size_t k, float *y, size_t n, bool add);
    /* Byte planes: in (n_bytes) seen as elements of `elem` bytes; out[p * (n_bytes/elem) + i] = byte p of
     * element i; trailing n_bytes % elem bytes copied as they are. unshuffle inverts it. */
    xdc_err_t (*byte_shuffle)(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out);
    xdc_err_t (*byte_unshuffle)(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out);
};

/* kern_quant_cpu.c; kern_strict_ops.c; kern_quant.cu (present only in CUDA builds; reach it through
 * xdc_kern_backend_get). */
extern const xdc_quant_ops xdc_quant_cpu_ops;
extern const xdc_quant_ops xdc_quant_strict_ops;
extern const xdc_quant_ops xdc_quant_cuda_ops;

#endif /* XDC_QUANT_H */
