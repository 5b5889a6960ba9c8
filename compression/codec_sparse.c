/* codec_sparse.c — the lossy stage of the sparse codec (docs/compression.md, "Sparse"): each chunk is cut
 * into blocks of CODEC_SPARSE_BLOCK elements; every block keeps its k largest |x + residual| (the
 * backend's top-k select, which also leaves the unsent values in the residual), and the host codes the
 * kept values at B bits (a sign bit and B-1 bits of magnitude, linear between the block's smallest and
 * largest kept |value|) with u16 delta-coded positions. The quantization error of the kept values goes
 * back into the residual, so error feedback loses nothing. The decoder checks every scale and position
 * before it writes a value.
 *
 * Payload of a chunk of m elements in nb = ceil(m / 4096) blocks keeping K values in all:
 *   nb x (f32 lo, f32 hi)   K x u16 position gaps (per block: first position, then gaps >= 1)
 *   K codes of B bits, least significant bit first, padded with zero bits to a multiple of 4 bytes. */
#include "compression/codec_private.h"

#include <math.h>
#include <string.h>

#define CORRUPT(...)                     \
    do {                                 \
        xdc_diag_set(diag, __VA_ARGS__); \
        return XDC_ERR_CORRUPT;          \
    } while (0)

static size_t n_blocks(size_t count) { return (count + CODEC_SPARSE_BLOCK - 1) / CODEC_SPARSE_BLOCK; }

/* A short block keeps its share of kfull (rounded up), at least 1 and at most half of it, as top-k does. */
size_t codec_sparse_block_k(size_t kfull, size_t len)
{
    size_t k = (kfull * len + CODEC_SPARSE_BLOCK - 1) / CODEC_SPARSE_BLOCK, most = len / 2 ? len / 2 : 1;
    return k < 1 ? 1 : k > most ? most : k;
}

size_t codec_sparse_total_k(size_t kfull, size_t count)
{
    size_t full = count / CODEC_SPARSE_BLOCK, tail = count % CODEC_SPARSE_BLOCK;
    return full * codec_sparse_block_k(kfull, CODEC_SPARSE_BLOCK) + (tail ? codec_sparse_block_k(kfull, tail) : 0);
}

/* Magnitude of level q: one expression shared by encoder and decoder so both round alike. */
static float level(float lo, float step, uint32_t q) { return lo + (float)q * step; }

static float step_of(float lo, float hi, uint32_t bits) { return (hi - lo) / (float)((1u << (bits - 1)) - 1); }

xdc_err_t codec_sparse_encode(xdc_codec *c, const float *xs, float *r, size_t m, size_t kfull, uint8_t *payload)
{
    const uint32_t bits = c->cfg.sparse_bits, top = (1u << (bits - 1)) - 1;
    size_t nb = n_blocks(m), total = codec_sparse_total_k(kfull, m);
    uint32_t *didx = (uint32_t *)c->raw;         /* device (total) u32: positions within each block */
    float *dval = (float *)(c->raw + 4 * total); /* device (total) fp32: the kept x + residual */
    for (size_t b = 0, o = 0; b < nb; b++) {
        size_t off = b * CODEC_SPARSE_BLOCK, len = m - off < CODEC_SPARSE_BLOCK ? m - off : CODEC_SPARSE_BLOCK;
        size_t k = codec_sparse_block_k(kfull, len);
        XDC_CHECK(c->ops->topk_select(xs + off, r ? r + off : NULL, len, k, didx + o, dval + o, c->topk_scratch));
        o += k;
    }
    XDC_CHECK(c->dev->copy_d2h(c->planes, c->raw, 8 * total, NULL));
    XDC_CHECK(c->dev->stream_sync(NULL));
    uint32_t *idx = (uint32_t *)c->planes;         /* host (total): block positions, then chunk positions */
    float *val = (float *)(c->planes + 4 * total); /* host (total): kept values, then their quantization error */
    uint8_t *gaps = payload + 8 * nb, *codes = gaps + 2 * total;
    size_t code_bytes = 4 * ((total * bits + 31) / 32);
    memset(codes, 0, code_bytes);
    uint64_t acc = 0; /* bit writer: `fill` pending bits of acc go to codes[out...] */
    size_t fill = 0, out = 0;
    for (size_t b = 0, o = 0; b < nb; b++) {
        size_t off = b * CODEC_SPARSE_BLOCK, len = m - off < CODEC_SPARSE_BLOCK ? m - off : CODEC_SPARSE_BLOCK;
        size_t k = codec_sparse_block_k(kfull, len);
        float lo = INFINITY, hi = 0;
        for (size_t j = 0; j < k; j++) {
            float a = fabsf(val[o + j]);
            lo = a < lo ? a : lo;
            hi = a > hi ? a : hi;
        }
        memcpy(payload + 8 * b, &lo, 4);
        memcpy(payload + 8 * b + 4, &hi, 4);
        float step = step_of(lo, hi, bits);
        for (size_t j = 0; j < k; j++, o++) {
            uint16_t gap = (uint16_t)(j ? idx[o] - idx[o - 1] : idx[o]);
            memcpy(gaps + 2 * o, &gap, 2);
            float v = val[o], a = fabsf(v);
            uint32_t q = step > 0 ? (uint32_t)((a - lo) / step + 0.5f) : 0;
            q = q > top ? top : q;
            float d = signbit(v) ? -level(lo, step, q) : level(lo, step, q);
            acc |= (uint64_t)(q | (uint32_t)(signbit(v) ? 1u << (bits - 1) : 0)) << fill;
            for (fill += bits; fill >= 8; fill -= 8, acc >>= 8) codes[out++] = (uint8_t)acc;
            val[o] = v - d;
        }
        for (size_t j = o - k; j < o; j++) idx[j] += (uint32_t)off;
    }
    if (fill) codes[out] = (uint8_t)acc;
    if (!r) return XDC_OK;
    /* The residual holds 0 where values were kept: add what their quantization lost. */
    XDC_CHECK(codec_scatter_pairs(c, idx, val, total, r, m, true));
    return c->dev->stream_sync(NULL); /* planes are reused by the next chunk */
}

xdc_err_t codec_sparse_decode(xdc_codec *c, const codec_hdr *h, const uint8_t *payload, float *dst, bool add,
                              xdc_diag *diag)
{
    const uint32_t bits = h->aux, top = (1u << (bits - 1)) - 1;
    size_t m = h->count, nb = n_blocks(m), total = codec_sparse_total_k(h->param, m);
    size_t bad = 0;
    XDC_CHECK(c->hops->count_out_of_range((const float *)payload, 2 * nb, CODEC_WIRE_MAX_ABS, &bad));
    if (bad) CORRUPT("sparse chunk carries %zu non-finite or oversized scales", bad);
    const uint8_t *gaps = payload + 8 * nb, *codes = gaps + 2 * total;
    uint32_t *idx = (uint32_t *)c->planes;         /* host (total): chunk positions; 8 total <= 4 m <= raw_cap */
    float *val = (float *)(c->planes + 4 * total); /* host (total): decoded values */
    uint64_t acc = 0; /* bit reader: `fill` bits of acc not yet used, next byte codes[in] */
    size_t fill = 0, in = 0;
    for (size_t b = 0, o = 0; b < nb; b++) {
        size_t off = b * CODEC_SPARSE_BLOCK, len = m - off < CODEC_SPARSE_BLOCK ? m - off : CODEC_SPARSE_BLOCK;
        size_t k = codec_sparse_block_k(h->param, len);
        float lo, hi;
        memcpy(&lo, payload + 8 * b, 4);
        memcpy(&hi, payload + 8 * b + 4, 4);
        if (!(lo >= 0 && hi >= lo)) CORRUPT("sparse block %zu: scales lo %g, hi %g out of order", b, lo, hi);
        float step = step_of(lo, hi, bits);
        size_t pos = 0;
        for (size_t j = 0; j < k; j++, o++) {
            uint16_t gap;
            memcpy(&gap, gaps + 2 * o, 2);
            if (j && gap == 0) CORRUPT("sparse block %zu: position %zu repeats the previous one", b, j);
            pos += gap;
            if (pos >= len) CORRUPT("sparse block %zu: positions run past its %zu elements", b, len);
            for (; fill < bits; fill += 8) acc |= (uint64_t)codes[in++] << fill;
            uint32_t code = (uint32_t)acc & ((1u << bits) - 1);
            acc >>= bits;
            fill -= bits;
            float d = level(lo, step, code & top);
            idx[o] = (uint32_t)(off + pos);
            val[o] = code >> (bits - 1) ? -d : d;
        }
    }
    return codec_scatter_pairs(c, idx, val, total, dst, m, add);
}
