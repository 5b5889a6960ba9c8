/* kern_quant_cpu.c — the CPU table of xdc_quant.h: blockwise int8/int4, bf16, top-k by sampled
 * threshold estimation plus radix select (for blocks of up to 4096, the sparse codec's, a strided
 * sample and one branch-free candidate pass), error feedback and byte planes. Inner loops are written as
 * branch-free integer/float loops over one block so gcc -O3 -march=native vectorizes them: min/max
 * reductions run on integer keys of the float bits (float max reductions need -ffast-math), rounding
 * adds a signed half and truncates. */
#include "kernels/xdc_quant.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Bits of |x|: their unsigned order is the order of |x| for every non-NaN value. */
static inline uint32_t abs_key(float x) { return f2u(x) & 0x7fffffffu; }

/* Signed-integer key with the order of the float values (non-NaN), and its inverse. */
static inline int32_t ord_key(float x)
{
    int32_t i = (int32_t)f2u(x);
    return i ^ ((i >> 31) & 0x7fffffff);
}

static inline float ord_unkey(int32_t k) { return u2f((uint32_t)(k ^ ((k >> 31) & 0x7fffffff))); }

static int block_ok(size_t block)
{
    return block >= XDC_QUANT_BLOCK_MIN && block <= XDC_QUANT_BLOCK_MAX && !(block & 1);
}

/* ---- int8 absmax ------------------------------------------------------------------------------------ */

/* With error feedback the block's y = x + r is formed once into a stack tile (block <= 4096 values,
 * 16 KiB: stays in L1), so x and r are each read once and r written once (int4). */
static const float *ef_tile(const float *x, const float *r, size_t m, float *tile)
{
    if (!r) return x;
    for (size_t i = 0; i < m; i++) tile[i] = x[i] + r[i];
    return tile;
}

static inline int8_t q8(float y, float inv)
{
    float v = y * inv;
    int t = (int)(v + copysignf(0.5f, v));
    t = t > 127 ? 127 : t;
    return (int8_t)(t < -127 ? -127 : t);
}

/* Quantize one block from an L1 tile and write its residual in the same loop; restrict tells gcc the
 * three arrays do not overlap, which it needs to vectorize a loop storing to two of them. */
static void q8_block_ef(const float *restrict tile, size_t m, float inv, float s, int8_t *restrict q, float *restrict r)
{
    for (size_t i = 0; i < m; i++) {
        float v = tile[i] * inv;
        int t = (int)(v + copysignf(0.5f, v));
        t = t > 127 ? 127 : t;
        t = t < -127 ? -127 : t;
        q[i] = (int8_t)t;
        r[i] = tile[i] - (float)t * s;
    }
}

/* int8 is the codec on the hot path, so its EF variant forms y and its absmax in one loop over memory,
 * then quantizes and updates the residual in one more. */
static xdc_err_t cpu_quantize_int8(const float *x, float *r, size_t n, size_t block, int8_t *q, float *scales)
{
    XDC_REQUIRE(block_ok(block), XDC_ERR_INVALID);
    float tile[XDC_QUANT_BLOCK_MAX];
    for (size_t b0 = 0, bi = 0; b0 < n; b0 += block, bi++) {
        size_t m = n - b0 < block ? n - b0 : block;
        const float *xb = x + b0;
        int8_t *qb = q + b0;
        uint32_t amax = 0;
        if (r) {
            const float *rb = r + b0;
            for (size_t i = 0; i < m; i++) {
                float v = xb[i] + rb[i];
                tile[i] = v;
                uint32_t k = abs_key(v);
                amax = k > amax ? k : amax;
            }
        } else {
            for (size_t i = 0; i < m; i++) {
                uint32_t k = abs_key(xb[i]);
                amax = k > amax ? k : amax;
            }
        }
        float absmax = u2f(amax);
        float inv = 0.0f, s = 0.0f;
        if (absmax >= XDC_QUANT_MIN_SPREAD) {
            inv = 127.0f / absmax;
            s = absmax / 127.0f;
        }
        scales[bi] = s;
        if (r) {
            q8_block_ef(tile, m, inv, s, qb, r + b0);
        } else {
            for (size_t i = 0; i < m; i++) qb[i] = q8(xb[i], inv);
        }
    }
    return XDC_OK;
}

static xdc_err_t cpu_dequantize_int8(const int8_t *q, const float *scales, size_t n, size_t block, float *y, bool add)
{
    XDC_REQUIRE(block_ok(block), XDC_ERR_INVALID);
    for (size_t b0 = 0, bi = 0; b0 < n; b0 += block, bi++) {
        size_t m = n - b0 < block ? n - b0 : block;
        float s = scales[bi];
        const int8_t *qb = q + b0;
        float *yb = y + b0;
        if (add)
            for (size_t i = 0; i < m; i++) yb[i] += (float)qb[i] * s;
        else
            for (size_t i = 0; i < m; i++) yb[i] = (float)qb[i] * s;
    }
    return XDC_OK;
}

/* ---- int4 min/max ----------------------------------------------------------------------------------- */

static xdc_err_t cpu_quantize_int4(const float *x, float *r, size_t n, size_t block, uint8_t *q, float *scales,
                                   float *mins)
{
    XDC_REQUIRE(block_ok(block), XDC_ERR_INVALID);
    float tile[XDC_QUANT_BLOCK_MAX];
    for (size_t b0 = 0, bi = 0; b0 < n; b0 += block, bi++) {
        size_t m = n - b0 < block ? n - b0 : block;
        const float *yb = ef_tile(x + b0, r ? r + b0 : NULL, m, tile);
        uint8_t *qb = q + b0 / 2; /* block is even, so every block starts on a byte */
        int32_t kmin = INT32_MAX, kmax = INT32_MIN;
        for (size_t i = 0; i < m; i++) {
            int32_t k = ord_key(yb[i]);
            kmin = k < kmin ? k : kmin;
            kmax = k > kmax ? k : kmax;
        }
        float lo = ord_unkey(kmin), hi = ord_unkey(kmax);
        float spread = hi - lo; /* inputs are within 2^100, residuals far below: no overflow */
        float inv = 0.0f, s = 0.0f;
        if (spread >= XDC_QUANT_MIN_SPREAD) {
            inv = 15.0f / spread;
            s = spread / 15.0f;
        }
        mins[bi] = lo;
        scales[bi] = s;
        size_t pairs = m / 2;
        for (size_t i = 0; i < pairs; i++) {
            int a = (int)((yb[2 * i] - lo) * inv + 0.5f);
            int b = (int)((yb[2 * i + 1] - lo) * inv + 0.5f);
            a = a > 15 ? 15 : a;
            b = b > 15 ? 15 : b;
            qb[i] = (uint8_t)(a | (b << 4));
        }
        if (m & 1) {
            int a = (int)((yb[m - 1] - lo) * inv + 0.5f);
            qb[pairs] = (uint8_t)(a > 15 ? 15 : a);
        }
        if (r) {
            float *rb = r + b0;
            for (size_t i = 0; i < pairs; i++) {
                rb[2 * i] = yb[2 * i] - (lo + (float)(qb[i] & 15) * s);
                rb[2 * i + 1] = yb[2 * i + 1] - (lo + (float)(qb[i] >> 4) * s);
            }
            if (m & 1) rb[m - 1] = yb[m - 1] - (lo + (float)(qb[pairs] & 15) * s);
        }
    }
    return XDC_OK;
}

static xdc_err_t cpu_dequantize_int4(const uint8_t *q, const float *scales, const float *mins, size_t n, size_t block,
                                     float *y, bool add)
{
    XDC_REQUIRE(block_ok(block), XDC_ERR_INVALID);
    for (size_t b0 = 0, bi = 0; b0 < n; b0 += block, bi++) {
        size_t m = n - b0 < block ? n - b0 : block;
        float s = scales[bi], lo = mins[bi];
        const uint8_t *qb = q + b0 / 2;
        float *yb = y + b0;
        size_t pairs = m / 2;
        if (add) {
            for (size_t i = 0; i < pairs; i++) {
                yb[2 * i] += lo + (float)(qb[i] & 15) * s;
                yb[2 * i + 1] += lo + (float)(qb[i] >> 4) * s;
            }
            if (m & 1) yb[m - 1] += lo + (float)(qb[pairs] & 15) * s;
        } else {
            for (size_t i = 0; i < pairs; i++) {
                yb[2 * i] = lo + (float)(qb[i] & 15) * s;
                yb[2 * i + 1] = lo + (float)(qb[i] >> 4) * s;
            }
            if (m & 1) yb[m - 1] = lo + (float)(qb[pairs] & 15) * s;
        }
    }
    return XDC_OK;
}

/* ---- bf16 ------------------------------------------------------------------------------------------- */

static inline uint16_t bf16_round(float v)
{
    uint32_t u = f2u(v);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static xdc_err_t cpu_fp32_to_bf16(const float *x, float *r, size_t n, uint16_t *y)
{
    if (!r) {
        for (size_t i = 0; i < n; i++) y[i] = bf16_round(x[i]);
        return XDC_OK;
    }
    for (size_t i = 0; i < n; i++) {
        float v = x[i] + r[i];
        uint16_t b = bf16_round(v);
        y[i] = b;
        r[i] = v - u2f((uint32_t)b << 16);
    }
    return XDC_OK;
}

static xdc_err_t cpu_bf16_to_fp32(const uint16_t *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] = u2f((uint32_t)x[i] << 16);
    return XDC_OK;
}

/* ---- top-k ------------------------------------------------------------------------------------------ */

/* Sampled values for the threshold estimate; the sample rank is inflated so the candidate pass almost
 * always catches at least k entries, and the candidate buffer is sized so it almost never overflows.
 * Either miss falls back to an exact radix select over all n (correct, three more passes). */
#define TOPK_SAMPLE 16384u
#define TOPK_HIST   2048u
#define TOPK_SCAN   64u

static size_t topk_cand_cap(size_t n, size_t k)
{
    size_t cap = 2 * k + 4096;
    return cap < n ? cap : n;
}

static size_t cpu_topk_scratch_bytes(size_t n, size_t k)
{
    return TOPK_HIST * sizeof(uint32_t) + TOPK_SAMPLE * sizeof(float) +
           topk_cand_cap(n, k) * (sizeof(uint32_t) + sizeof(float));
}

/* The abs_key of the k-th largest |v| (1 <= k <= m): radix select over the key bits, 11+11+10 per pass;
 * hist holds TOPK_HIST counters. */
static uint32_t radix_kth_key(const float *v, size_t m, size_t k, uint32_t *hist)
{
    static const int shift[3] = {21, 10, 0};
    static const uint32_t width[3] = {2048, 2048, 1024};
    uint32_t prefix = 0, prefix_mask = 0;
    size_t want = k; /* rank still to find among keys matching the prefix */
    for (int p = 0; p < 3; p++) {
        memset(hist, 0, width[p] * sizeof(uint32_t));
        for (size_t i = 0; i < m; i++) {
            uint32_t key = abs_key(v[i]);
            if ((key & prefix_mask) == prefix) hist[(key >> shift[p]) & (width[p] - 1)]++;
        }
        uint32_t d = width[p];
        while (d > 0) {
            d--;
            if (hist[d] >= want) break;
            want -= hist[d];
        }
        prefix |= d << shift[p];
        prefix_mask |= (width[p] - 1) << shift[p];
    }
    return prefix;
}

/* Writes the k entries of x (positions pos[0..m) when pos != NULL, else 0..m) whose key is above t, then
 * as many with key == t as are still missing, the lowest indices first. Branch-free: the ties are
 * counted first, and every entry is written where the next one goes (the loop stops at k). */
static void topk_emit(const float *x, const uint32_t *pos, size_t m, uint32_t t, size_t k, uint32_t *idx, float *val)
{
    size_t ties = k;
    for (size_t j = 0; j < m; j++) ties -= abs_key(x[pos ? pos[j] : j]) > t;
    size_t o = 0;
    for (size_t j = 0; j < m && o < k; j++) {
        uint32_t i = pos ? pos[j] : (uint32_t)j, key = abs_key(x[i]);
        size_t tie = key == t && ties > 0;
        ties -= tie;
        idx[o] = i;
        val[o] = x[i];
        o += key > t || tie;
    }
}

/* The k-th largest of key (m u32, 1 <= k <= m; reordered and overwritten, where radix_kth_key only
 * reads): radix select over 8-bit digits of the offset within [min, max] of the keys still in play, so
 * keys bunched above one threshold (the candidates of a block) take one or two passes. Each pass moves
 * the keys of the bin that holds the k-th to the front; it ends when the k-th is the largest or the
 * smallest of them. hist holds 256 counters. */
#define TOPK_RANGE_BITS 8

static uint32_t range_kth_key(uint32_t *key, size_t m, size_t k, uint32_t *hist)
{
    for (;;) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t i = 0; i < m; i++) {
            lo = key[i] < lo ? key[i] : lo;
            hi = key[i] > hi ? key[i] : hi;
        }
        if (k == 1 || lo == hi) return hi;
        if (k == m) return lo;
        int bits = 32 - __builtin_clz(hi - lo), shift = bits > TOPK_RANGE_BITS ? bits - TOPK_RANGE_BITS : 0;
        uint32_t d = ((hi - lo) >> shift) + 1;
        memset(hist, 0, d * sizeof(uint32_t));
        for (size_t i = 0; i < m; i++) hist[(key[i] - lo) >> shift]++;
        while (hist[--d] < k) k -= hist[d];
        size_t c = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = key[i];
            key[c] = v;
            c += (v - lo) >> shift == d;
        }
        m = c;
    }
}

/* Blocks up to XDC_QUANT_BLOCK_MAX elements (the sparse codec's 4096) take a shorter path than larger
 * inputs, for which a 16384-entry sample and 2048-counter histograms would outweigh the block: the
 * threshold estimate is the matching rank among every TOPK_SMALL_STRIDE-th |y|; one branch-free pass
 * collects the positions at or above it (the candidate buffer holds n); range_kth_key among their keys
 * finds the k-th. An estimate that catches fewer than k entries (a block whose large values sit at the
 * sampled positions) is replaced by 0, which catches all n. */
#define TOPK_SMALL_STRIDE 16u

static void topk_small(const float *y, size_t n, size_t k, uint32_t *idx, float *val, uint32_t *sample, uint32_t *cand,
                       uint32_t *cand_key, uint32_t *hist)
{
    uint32_t t_low = 0;
    size_t s = n / TOPK_SMALL_STRIDE, c = 0;
    if (k < n / 4 && s >= 64) {
        for (size_t j = 0; j < s; j++) sample[j] = abs_key(y[j * TOPK_SMALL_STRIDE + TOPK_SMALL_STRIDE / 2]);
        size_t rank = k * s / n + k * s / (4 * n) + 4; /* 1.25 k s / n, plus slack for small k */
        t_low = range_kth_key(sample, s, rank, hist);
    }
    for (int attempt = 0; attempt < 2 && c < k; attempt++, t_low = 0) {
        c = 0;
        for (size_t i = 0; i < n; i++) {
            cand[c] = (uint32_t)i;
            c += abs_key(y[i]) >= t_low;
        }
    }
    for (size_t j = 0; j < c; j++) cand_key[j] = abs_key(y[cand[j]]);
    topk_emit(y, cand, c, range_kth_key(cand_key, c, k, hist), k, idx, val);
}

/* With error feedback the first pass writes r = x + r and the selection then reads r; the selected
 * entries are zeroed at the end. */
static xdc_err_t cpu_topk_select(const float *x, float *r, size_t n, size_t k, uint32_t *idx, float *val, void *scratch)
{
    XDC_REQUIRE(k <= n && n <= UINT32_MAX, XDC_ERR_INVALID);
    uint32_t *hist = scratch;
    float *sample = (float *)(hist + TOPK_HIST);
    uint32_t *cand = (uint32_t *)(sample + TOPK_SAMPLE);
    size_t cap = topk_cand_cap(n, k);
    float *cand_val = (float *)(cand + cap);
    const float *y = r ? r : x;
    bool done = false;

    if (n <= XDC_QUANT_BLOCK_MAX) { /* cap == n: every entry fits the candidate buffer */
        if (r)
            for (size_t i = 0; i < n; i++) r[i] += x[i];
        if (k > 0) topk_small(y, n, k, idx, val, (uint32_t *)sample, cand, (uint32_t *)cand_val, hist);
        done = true;
    } else if (n > 4 * (size_t)TOPK_SAMPLE && k < n / 4) {
        size_t stride = n / TOPK_SAMPLE;
        for (size_t s = 0; s < TOPK_SAMPLE; s++) {
            size_t i = s * stride + stride / 2;
            sample[s] = r ? x[i] + r[i] : x[i];
        }
        size_t rank = (size_t)((double)k * TOPK_SAMPLE / (double)n * 1.25) + 8;
        uint32_t t_low = radix_kth_key(sample, TOPK_SAMPLE, rank < TOPK_SAMPLE ? rank : TOPK_SAMPLE, hist);
        size_t c = 0;
        bool overflow = false;
        for (size_t b0 = 0; b0 < n; b0 += TOPK_SCAN) {
            size_t m = n - b0 < TOPK_SCAN ? n - b0 : TOPK_SCAN;
            if (r)
                for (size_t i = 0; i < m; i++) r[b0 + i] += x[b0 + i];
            const float *yb = y + b0;
            uint32_t hit = 0;
            for (size_t i = 0; i < m; i++) hit |= abs_key(yb[i]) >= t_low;
            if (!hit || overflow) continue; /* after an overflow the pass only finishes r += x */
            for (size_t i = 0; i < m && !overflow; i++) {
                if (abs_key(yb[i]) < t_low) continue;
                if (c == cap) {
                    overflow = true;
                    break;
                }
                cand[c] = (uint32_t)(b0 + i);
                cand_val[c++] = yb[i];
            }
        }
        if (!overflow && c >= k && k > 0) {
            uint32_t t = radix_kth_key(cand_val, c, k, hist);
            topk_emit(y, cand, c, t, k, idx, val);
            done = true;
        }
    } else if (r) {
        for (size_t i = 0; i < n; i++) r[i] += x[i];
    }
    if (!done && k > 0) {
        uint32_t t = radix_kth_key(y, n, k, hist);
        topk_emit(y, NULL, n, t, k, idx, val);
    }
    if (r)
        for (size_t i = 0; i < k; i++) r[idx[i]] = 0.0f;
    return XDC_OK;
}

/* ---- range check, accumulation ------------------------------------------------------ */

/* The common case (nothing out of range) is a max reduction over integer keys, the cheapest loop the
 * vectorizer makes; only a block whose maximum is out of range gets counted. */
static xdc_err_t cpu_count_out_of_range(const float *x, size_t n, float max_abs, size_t *count)
{
    uint32_t limit = abs_key(max_abs); /* NaN keys sit above every finite and infinite key */
    size_t c = 0;
    for (size_t b0 = 0; b0 < n; b0 += XDC_QUANT_BLOCK_MAX) {
        size_t m = n - b0 < XDC_QUANT_BLOCK_MAX ? n - b0 : XDC_QUANT_BLOCK_MAX;
        const float *xb = x + b0;
        uint32_t top = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t k = abs_key(xb[i]);
            top = k > top ? k : top;
        }
        if (top > limit)
            for (size_t i = 0; i < m; i++) c += abs_key(xb[i]) > limit;
    }
    *count = c;
    return XDC_OK;
}

static xdc_err_t cpu_accumulate(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
    return XDC_OK;
}

static xdc_err_t cpu_scale(float *y, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) y[i] *= a;
    return XDC_OK;
}

static xdc_err_t cpu_scatter(const uint32_t *idx, const float *val, size_t k, float *y, size_t n, bool add)
{
    for (size_t i = 0; i < k; i++)
        if (idx[i] >= n || (i && idx[i] <= idx[i - 1])) return XDC_ERR_INVALID;
    for (size_t i = 0; i < k; i++) y[idx[i]] = add ? y[idx[i]] + val[i] : val[i];
    return XDC_OK;
}

/* ---- byte planes ------------------------------------------------------------------------------------ */

static xdc_err_t cpu_byte_shuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    XDC_REQUIRE(elem >= 1 && elem <= 16, XDC_ERR_INVALID);
    size_t ne = n_bytes / elem;
    if (elem == 4) { /* the common case gets a fixed-width loop the vectorizer turns into shuffles */
        for (size_t i = 0; i < ne; i++) {
            out[i] = in[4 * i];
            out[ne + i] = in[4 * i + 1];
            out[2 * ne + i] = in[4 * i + 2];
            out[3 * ne + i] = in[4 * i + 3];
        }
    } else if (elem == 2) {
        for (size_t i = 0; i < ne; i++) {
            out[i] = in[2 * i];
            out[ne + i] = in[2 * i + 1];
        }
    } else {
        for (size_t p = 0; p < elem; p++)
            for (size_t i = 0; i < ne; i++) out[p * ne + i] = in[i * elem + p];
    }
    memcpy(out + ne * elem, in + ne * elem, n_bytes - ne * elem);
    return XDC_OK;
}

static xdc_err_t cpu_byte_unshuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    XDC_REQUIRE(elem >= 1 && elem <= 16, XDC_ERR_INVALID);
    size_t ne = n_bytes / elem;
    if (elem == 4) {
        for (size_t i = 0; i < ne; i++) {
            out[4 * i] = in[i];
            out[4 * i + 1] = in[ne + i];
            out[4 * i + 2] = in[2 * ne + i];
            out[4 * i + 3] = in[3 * ne + i];
        }
    } else if (elem == 2) {
        for (size_t i = 0; i < ne; i++) {
            out[2 * i] = in[i];
            out[2 * i + 1] = in[ne + i];
        }
    } else {
        for (size_t p = 0; p < elem; p++)
            for (size_t i = 0; i < ne; i++) out[i * elem + p] = in[p * ne + i];
    }
    memcpy(out + ne * elem, in + ne * elem, n_bytes - ne * elem);
    return XDC_OK;
}

const xdc_quant_ops xdc_quant_cpu_ops = {
    .quantize_int8 = cpu_quantize_int8,
    .dequantize_int8 = cpu_dequantize_int8,
    .quantize_int4 = cpu_quantize_int4,
    .dequantize_int4 = cpu_dequantize_int4,
    .fp32_to_bf16 = cpu_fp32_to_bf16,
    .bf16_to_fp32 = cpu_bf16_to_fp32,
    .topk_scratch_bytes = cpu_topk_scratch_bytes,
    .topk_select = cpu_topk_select,
    .count_out_of_range = cpu_count_out_of_range,
    .accumulate = cpu_accumulate,
    .scale = cpu_scale,
    .scatter = cpu_scatter,
    .byte_shuffle = cpu_byte_shuffle,
    .byte_unshuffle = cpu_byte_unshuffle,
};
