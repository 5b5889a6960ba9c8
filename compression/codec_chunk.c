/* codec_chunk.c — encoding and decoding of one chunk: lossy stage with error feedback (through the
 * kernels' quant table), then byte planes + zstd when it pays, framed by a checked header; and the
 * whole-buffer loops over chunks. The decoder treats its input as untrusted: every header field is
 * bounded before it sizes or offsets anything, and decoded scales/values are range-checked. */
#include "compression/codec_private.h"

#include "common/xdc_hash.h"

#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "chunk headers are written in host order");

static void hdr_write(uint8_t *p, const codec_hdr *h)
{
    uint32_t magic = CODEC_MAGIC;
    memcpy(p, &magic, 4);
    p[4] = CODEC_VERSION;
    p[5] = h->codec;
    p[6] = h->flags;
    p[7] = h->aux;
    memcpy(p + 8, &h->count, 4);
    memcpy(p + 12, &h->param, 4);
    memcpy(p + 16, &h->raw_len, 4);
    memcpy(p + 20, &h->wire_len, 4);
    memcpy(p + 24, &h->first, 8);
}

/* XXH3 (several times faster than XXH64 on the payload) of the header's first 32 bytes and of the
 * payload, combined; an integrity check against corruption, not a MAC (TLS authenticates). */
static uint64_t chunk_check(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
    return xdc_xxh3(hdr, 32) ^ xdc_xxh3(payload, len);
}

/* ---- encode ----------------------------------------------------------------------------------------- */

/* How many of x (m fp32, device memory) are NaN or above `max_abs`: counted on the device, the count
 * copied back (the stream is synchronized). */
static xdc_err_t count_bad_on_device(xdc_codec *c, const float *x, size_t m, float max_abs, size_t *bad)
{
    XDC_CHECK(c->ops->count_out_of_range(x, m, max_abs, c->count));
    XDC_CHECK(c->dev->copy_d2h(c->hcount, c->count, sizeof(size_t), NULL));
    XDC_CHECK(c->dev->stream_sync(NULL));
    *bad = *c->hcount;
    return XDC_OK;
}

static xdc_err_t reject_range(xdc_codec *c, const float *x, size_t m, size_t first, xdc_diag *diag)
{
    size_t bad = 0;
    XDC_CHECK(count_bad_on_device(c, x, m, XDC_QUANT_MAX_ABS, &bad));
    if (!bad) return XDC_OK;
    /* The error path only: bring the chunk to the host to name the first bad element. */
    const float *h = (const float *)c->hraw;
    XDC_CHECK(c->dev->copy_d2h(c->hraw, x, m * sizeof(float), NULL));
    XDC_CHECK(c->dev->stream_sync(NULL));
    for (size_t i = 0; i < m; i++)
        if (!(h[i] >= -XDC_QUANT_MAX_ABS && h[i] <= XDC_QUANT_MAX_ABS)) {
            xdc_diag_set(diag,
                         "element %zu is %g (and %zu more out of range): codecs accept finite values "
                         "with |x| <= 2^100",
                         first + i, (double)h[i], bad - 1);
            break;
        }
    c->stats.rejected++;
    return XDC_ERR_RANGE;
}

/* Lossy stage of elements xs (m fp32, device) with residual slice r (device, or NULL) into raw (device);
 * *payload is where the raw payload ended up on the device (the input itself for `none`). Top-k leaves
 * ascending indices: the host turns them into gaps on its copy. */
static xdc_err_t encode_lossy(xdc_codec *c, const float *xs, float *r, size_t m, size_t param, uint8_t *raw,
                              const uint8_t **payload)
{
    const xdc_quant_ops *ops = c->ops;
    size_t nb = param ? (m + param - 1) / param : 0;
    *payload = raw;
    switch (c->cfg.kind) {
    case XDC_CODEC_NONE: *payload = (const uint8_t *)xs; return XDC_OK;
    case XDC_CODEC_BF16: return ops->fp32_to_bf16(xs, r, m, (uint16_t *)raw);
    case XDC_CODEC_INT8: return ops->quantize_int8(xs, r, m, param, (int8_t *)(raw + 4 * nb), (float *)raw);
    case XDC_CODEC_INT4:
        return ops->quantize_int4(xs, r, m, param, raw + 8 * nb, (float *)raw, (float *)(raw + 4 * nb));
    case XDC_CODEC_TOPK: {
        size_t k = param;
        uint32_t *idx = (uint32_t *)raw;
        return ops->topk_select(xs, r, m, k, idx, (float *)(raw + 4 * k), c->topk_scratch);
    }
    case XDC_CODEC_SPARSE: break; /* codec_sparse_encode: its values are coded on the host */
    }
    return XDC_ERR_INTERNAL;
}

/* Codecs without byte planes (int8, int4) probe a sample first; see CODEC_ZSTD_PROBE_BYTES. */
static bool zstd_worth_trying(xdc_codec *c, const uint8_t *payload, size_t raw_len)
{
    if (codec_plane_elem(c->cfg.kind) || raw_len < 4 * CODEC_ZSTD_PROBE_BYTES) return true;
    size_t limit = (size_t)((double)CODEC_ZSTD_PROBE_BYTES / c->cfg.zstd_min_ratio);
    size_t z = ZSTD_compressCCtx(c->cctx, c->planes, limit, payload, CODEC_ZSTD_PROBE_BYTES, c->cfg.zstd_level);
    return !ZSTD_isError(z) && z <= limit;
}

xdc_err_t xdc_codec_encode_chunk(xdc_codec *c, const float *x, size_t n, size_t chunk, uint8_t *out, size_t cap,
                                 size_t *out_len, xdc_diag *diag)
{
    XDC_REQUIRE(c && x && out && out_len, XDC_ERR_INVALID);
    if (n != c->cfg.n_elems || chunk >= xdc_codec_chunk_count(c, n)) {
        xdc_diag_set(diag, "encode of %zu elements, chunk %zu: context holds %zu elements in %zu chunks", n, chunk,
                     c->cfg.n_elems, xdc_codec_chunk_count(c, c->cfg.n_elems));
        return XDC_ERR_INVALID;
    }
    size_t first = chunk * c->cfg.chunk_elems;
    size_t m = n - first < c->cfg.chunk_elems ? n - first : c->cfg.chunk_elems;
    const float *xs = x + first;
    size_t param = codec_chunk_param(&c->cfg, m), aux = c->cfg.kind == XDC_CODEC_SPARSE ? c->cfg.sparse_bits : 0;
    size_t raw_len = codec_raw_len(c->cfg.kind, m, param, aux);
    if (cap < CODEC_HDR_BYTES + raw_len) {
        xdc_diag_set(diag, "output of %zu bytes too small for chunk %zu (needs %zu; size it with xdc_codec_bound)", cap,
                     chunk, (size_t)CODEC_HDR_BYTES + raw_len);
        return XDC_ERR_INVALID;
    }
    XDC_CHECK(reject_range(c, xs, m, first, diag));
    uint8_t *body = out + CODEC_HDR_BYTES;
    float *r = c->residual ? c->residual + first : NULL;
    /* Only the lossy payload crosses to the host: into the output itself when no zstd stage follows and
     * alignment allows (the top-k gaps are 4-byte words), else into the pinned staging. */
    uint8_t *payload = c->cfg.zstd_level == 0 && (uintptr_t)body % 4 == 0 ? body : c->hraw;
    if (c->cfg.kind == XDC_CODEC_SPARSE) {
        XDC_CHECK(codec_sparse_encode(c, xs, r, m, param, payload));
    } else {
        const uint8_t *dpayload = NULL;
        XDC_CHECK(encode_lossy(c, xs, r, m, param, c->raw, &dpayload));
        XDC_CHECK(c->dev->copy_d2h(payload, dpayload, raw_len, NULL));
        XDC_CHECK(c->dev->stream_sync(NULL));
    }
    if (c->cfg.kind == XDC_CODEC_TOPK) {
        uint32_t *idx = (uint32_t *)payload;
        for (size_t i = param; i-- > 1;) idx[i] -= idx[i - 1]; /* ascending indices -> gaps >= 1 */
    }

    codec_hdr h = {.codec = (uint8_t)c->cfg.kind,
                   .aux = (uint8_t)aux,
                   .count = (uint32_t)m,
                   .param = (uint32_t)param,
                   .raw_len = (uint32_t)raw_len,
                   .wire_len = (uint32_t)raw_len,
                   .first = first};
    if (c->cfg.zstd_level != 0 && zstd_worth_trying(c, payload, raw_len)) {
        size_t pe = codec_plane_elem(c->cfg.kind);
        const uint8_t *src = payload;
        if (pe) {
            XDC_CHECK(c->hops->byte_shuffle(payload, raw_len, pe, c->planes));
            src = c->planes;
        }
        size_t limit = (size_t)((double)raw_len / c->cfg.zstd_min_ratio);
        size_t z = ZSTD_compressCCtx(c->cctx, body, limit, src, raw_len, c->cfg.zstd_level);
        if (!ZSTD_isError(z) && z <= limit) {
            h.flags = CODEC_FLAG_ZSTD | (pe ? CODEC_FLAG_SHUFFLED : 0);
            h.wire_len = (uint32_t)z;
            c->stats.chunks_zstd++;
        }
    }
    if (!h.flags && payload != body) memcpy(body, payload, raw_len);
    hdr_write(out, &h);
    h.check = chunk_check(out, body, h.wire_len);
    memcpy(out + 32, &h.check, 8);
    *out_len = CODEC_HDR_BYTES + h.wire_len;
    c->stats.chunks_encoded++;
    c->stats.bytes_in += m * sizeof(float);
    c->stats.bytes_out += *out_len;
    return XDC_OK;
}

xdc_err_t xdc_codec_encode(xdc_codec *c, const float *x, size_t n, uint8_t *out, size_t cap, size_t *out_len,
                           xdc_diag *diag)
{
    XDC_REQUIRE(c && out_len, XDC_ERR_INVALID);
    if (n == c->cfg.n_elems && cap < xdc_codec_bound(c, n)) { /* before any residual changes */
        xdc_diag_set(diag, "output of %zu bytes below xdc_codec_bound() = %zu", cap, xdc_codec_bound(c, n));
        return XDC_ERR_INVALID;
    }
    size_t pos = 0, nch = xdc_codec_chunk_count(c, n);
    for (size_t i = 0; i < nch; i++) {
        size_t len = 0;
        XDC_CHECK(xdc_codec_encode_chunk(c, x, n, i, out + pos, cap - pos, &len, diag));
        pos += len;
    }
    c->stats.encode_calls++;
    *out_len = pos;
    return XDC_OK;
}

/* ---- decode ----------------------------------------------------------------------------------------- */

#define CORRUPT(...)                     \
    do {                                 \
        xdc_diag_set(diag, __VA_ARGS__); \
        return XDC_ERR_CORRUPT;          \
    } while (0)

/* Parses and bounds every header field against len, this context's chunk size and n. */
static xdc_err_t hdr_parse(const xdc_codec *c, const uint8_t *in, size_t len, size_t n, codec_hdr *h, xdc_diag *diag)
{
    if (len < CODEC_HDR_BYTES) CORRUPT("chunk truncated: %zu bytes, header needs %u", len, CODEC_HDR_BYTES);
    uint32_t magic;
    memcpy(&magic, in, 4);
    if (magic != CODEC_MAGIC) CORRUPT("chunk magic 0x%08x is not \"XDC1\"", magic);
    if (in[4] != CODEC_VERSION) CORRUPT("chunk version %u unsupported (expected %u)", in[4], CODEC_VERSION);
    h->codec = in[5];
    h->flags = in[6];
    h->aux = in[7];
    memcpy(&h->count, in + 8, 4);
    memcpy(&h->param, in + 12, 4);
    memcpy(&h->raw_len, in + 16, 4);
    memcpy(&h->wire_len, in + 20, 4);
    memcpy(&h->first, in + 24, 8);
    memcpy(&h->check, in + 32, 8);
    if (h->codec > XDC_CODEC_SPARSE) CORRUPT("chunk codec id %u unknown", h->codec);
    bool sparse = h->codec == XDC_CODEC_SPARSE;
    if (h->flags & ~(CODEC_FLAG_ZSTD | CODEC_FLAG_SHUFFLED)) CORRUPT("chunk flags 0x%02x not understood", h->flags);
    if (sparse ? h->aux < CODEC_SPARSE_BITS_MIN || h->aux > CODEC_SPARSE_BITS_MAX : h->aux != 0)
        CORRUPT("chunk aux byte %u invalid for codec %u (sparse: value bits %u..%u; others: 0)", h->aux, h->codec,
                CODEC_SPARSE_BITS_MIN, CODEC_SPARSE_BITS_MAX);
    if (h->count < 1 || h->count > c->cfg.chunk_elems)
        CORRUPT("chunk of %u elements outside [1, %zu] (this decoder's chunk size)", h->count, c->cfg.chunk_elems);
    if (h->first > n || h->count > n - h->first)
        CORRUPT("chunk elements [%llu, +%u) outside the %zu-element buffer", (unsigned long long)h->first, h->count, n);
    xdc_codec_kind kind = (xdc_codec_kind)h->codec;
    bool ok;
    if (kind == XDC_CODEC_INT8 || kind == XDC_CODEC_INT4)
        ok = h->param >= XDC_QUANT_BLOCK_MIN && h->param <= XDC_QUANT_BLOCK_MAX && !(h->param & 1);
    else if (kind == XDC_CODEC_TOPK) ok = h->param >= 1 && h->param <= (h->count / 2 ? h->count / 2 : 1);
    else if (sparse) ok = h->param >= 1 && h->param <= CODEC_SPARSE_BLOCK / 2;
    else ok = h->param == 0;
    if (!ok) CORRUPT("chunk parameter %u invalid for codec %u with %u elements", h->param, h->codec, h->count);
    size_t raw_len = codec_raw_len(kind, h->count, h->param, h->aux);
    if (h->raw_len != raw_len)
        CORRUPT("chunk raw length %u, codec %u with %u elements needs %zu", h->raw_len, h->codec, h->count, raw_len);
    bool zstd = h->flags & CODEC_FLAG_ZSTD, shuffled = h->flags & CODEC_FLAG_SHUFFLED;
    if (shuffled != (zstd && codec_plane_elem(kind) > 0)) CORRUPT("chunk flags 0x%02x inconsistent", h->flags);
    if (zstd ? h->wire_len > h->raw_len : h->wire_len != h->raw_len)
        CORRUPT("chunk wire length %u inconsistent with raw length %u", h->wire_len, h->raw_len);
    if (h->wire_len > len - CODEC_HDR_BYTES)
        CORRUPT("chunk truncated: payload of %u bytes, %zu present", h->wire_len, len - CODEC_HDR_BYTES);
    if (chunk_check(in, in + CODEC_HDR_BYTES, h->wire_len) != h->check) CORRUPT("chunk checksum mismatch");
    return XDC_OK;
}

/* Undo the lossless stage on the host into c->hraw (or point at the input when it was sent raw and
 * aligned). */
static xdc_err_t payload_restore(xdc_codec *c, const codec_hdr *h, const uint8_t *body, const uint8_t **payload,
                                 xdc_diag *diag)
{
    if (!(h->flags & CODEC_FLAG_ZSTD)) {
        if ((uintptr_t)body % 4 == 0) {
            *payload = body;
        } else {
            memcpy(c->hraw, body, h->raw_len);
            *payload = c->hraw;
        }
        return XDC_OK;
    }
    bool shuffled = h->flags & CODEC_FLAG_SHUFFLED;
    uint8_t *dst = shuffled ? c->planes : c->hraw;
    size_t z = ZSTD_decompressDCtx(c->dctx, dst, h->raw_len, body, h->wire_len);
    if (ZSTD_isError(z) || z != h->raw_len)
        CORRUPT("chunk zstd payload: %s", ZSTD_isError(z) ? ZSTD_getErrorName(z) : "wrong decompressed length");
    if (shuffled) XDC_CHECK(c->hops->byte_unshuffle(c->planes, h->raw_len, codec_plane_elem(h->codec), c->hraw));
    *payload = c->hraw;
    return XDC_OK;
}

/* Wire values on the host side (scales, mins, fp32 and top-k values). */
static xdc_err_t check_floats(const xdc_codec *c, const float *v, size_t m, const char *what, xdc_diag *diag)
{
    size_t bad = 0;
    XDC_CHECK(c->hops->count_out_of_range(v, m, CODEC_WIRE_MAX_ABS, &bad));
    if (bad) CORRUPT("chunk carries %zu non-finite or oversized %s", bad, what);
    return XDC_OK;
}

xdc_err_t codec_scatter_pairs(xdc_codec *c, const uint32_t *idx, const float *val, size_t k, float *dst, size_t n,
                              bool add)
{
    if (!add) XDC_CHECK(c->dev->memset(dst, 0, n * sizeof(float), NULL));
    XDC_CHECK(c->dev->copy_h2d(c->raw, idx, 4 * k, NULL));
    XDC_CHECK(c->dev->copy_h2d(c->raw + 4 * k, val, 4 * k, NULL));
    return c->ops->scatter((const uint32_t *)c->raw, (const float *)(c->raw + 4 * k), k, dst, n, add);
}

/* Top-k: validates every index on the host before touching out, turning the gaps into absolute indices
 * (pinned host, c->planes); then the pairs are scattered on the device. */
static xdc_err_t decode_topk(xdc_codec *c, const codec_hdr *h, const uint8_t *payload, float *dst, xdc_codec_mode mode,
                             xdc_diag *diag)
{
    size_t k = h->param;
    const uint32_t *gap = (const uint32_t *)payload;
    const float *val = (const float *)(payload + 4 * k);
    XDC_CHECK(check_floats(c, val, k, "top-k values", diag));
    uint32_t *idx = (uint32_t *)c->planes; /* raw_cap >= 4 * chunk_elems >= 8k */
    uint64_t pos = gap[0];
    idx[0] = gap[0];
    for (uint32_t i = 1; i < k && pos < h->count; i++) {
        if (gap[i] == 0) CORRUPT("top-k index %u repeats the previous one", i);
        pos += gap[i];
        idx[i] = (uint32_t)pos;
    }
    if (pos >= h->count) CORRUPT("top-k indices run past the chunk's %u elements", h->count);
    return codec_scatter_pairs(c, idx, val, k, dst, h->count, mode == XDC_CODEC_ACCUMULATE);
}

static xdc_err_t decode_one(xdc_codec *c, const uint8_t *in, size_t len, float *out, size_t n, xdc_codec_mode mode,
                            size_t expect_first, size_t *consumed, size_t *first, size_t *count, xdc_diag *diag)
{
    XDC_REQUIRE(c && in && out && (mode == XDC_CODEC_WRITE || mode == XDC_CODEC_ACCUMULATE), XDC_ERR_INVALID);
    codec_hdr h;
    XDC_CHECK(hdr_parse(c, in, len, n, &h, diag));
    if (expect_first != SIZE_MAX && h.first != expect_first)
        CORRUPT("chunk starts at element %llu, expected %zu", (unsigned long long)h.first, expect_first);
    const uint8_t *payload = NULL;
    XDC_CHECK(payload_restore(c, &h, in + CODEC_HDR_BYTES, &payload, diag));
    const xdc_quant_ops *ops = c->ops;
    const xdc_device_ops *dev = c->dev;
    float *slice = out + h.first;
    size_t m = h.count, nb = h.param ? (m + h.param - 1) / h.param : 0;
    bool add = mode == XDC_CODEC_ACCUMULATE;
    /* Wire fields are checked on the host copy; the payload then crosses to the device (c->raw), where
     * the dequantizers write or add into out. */
    switch ((xdc_codec_kind)h.codec) {
    case XDC_CODEC_NONE:
        XDC_CHECK(check_floats(c, (const float *)payload, m, "values", diag));
        if (add) {
            XDC_CHECK(dev->copy_h2d(c->raw, payload, m * sizeof(float), NULL));
            XDC_CHECK(ops->accumulate((const float *)c->raw, m, slice));
        } else {
            XDC_CHECK(dev->copy_h2d(slice, payload, m * sizeof(float), NULL));
        }
        break;
    case XDC_CODEC_BF16: { /* values are only known after conversion: check before adding */
        float *dst = add ? c->decoded : slice;
        size_t bad = 0;
        XDC_CHECK(dev->copy_h2d(c->raw, payload, h.raw_len, NULL));
        XDC_CHECK(ops->bf16_to_fp32((const uint16_t *)c->raw, m, dst));
        XDC_CHECK(count_bad_on_device(c, dst, m, CODEC_WIRE_MAX_ABS, &bad));
        if (bad) CORRUPT("chunk carries %zu non-finite or oversized values", bad);
        if (add) XDC_CHECK(ops->accumulate(dst, m, slice));
        break;
    }
    case XDC_CODEC_INT8: /* decoded |values| <= 127 * scale: checking the scales bounds them all */
        XDC_CHECK(check_floats(c, (const float *)payload, nb, "scales", diag));
        XDC_CHECK(dev->copy_h2d(c->raw, payload, h.raw_len, NULL));
        XDC_CHECK(
            ops->dequantize_int8((const int8_t *)(c->raw + 4 * nb), (const float *)c->raw, m, h.param, slice, add));
        break;
    case XDC_CODEC_INT4:
        XDC_CHECK(check_floats(c, (const float *)payload, 2 * nb, "scales", diag));
        XDC_CHECK(dev->copy_h2d(c->raw, payload, h.raw_len, NULL));
        XDC_CHECK(ops->dequantize_int4(c->raw + 8 * nb, (const float *)c->raw, (const float *)(c->raw + 4 * nb), m,
                                       h.param, slice, add));
        break;
    case XDC_CODEC_TOPK: XDC_CHECK(decode_topk(c, &h, payload, slice, mode, diag)); break;
    case XDC_CODEC_SPARSE: XDC_CHECK(codec_sparse_decode(c, &h, payload, slice, add, diag)); break;
    }
    /* The host staging (hraw, planes) and the caller's wire bytes may be reused once this returns. */
    XDC_CHECK(dev->stream_sync(NULL));
    c->stats.chunks_decoded++;
    *consumed = CODEC_HDR_BYTES + h.wire_len;
    if (first) *first = h.first;
    if (count) *count = m;
    return XDC_OK;
}

xdc_err_t xdc_codec_decode_chunk(xdc_codec *c, const uint8_t *in, size_t len, float *out, size_t n, xdc_codec_mode mode,
                                 size_t *consumed, size_t *first, size_t *count, xdc_diag *diag)
{
    XDC_REQUIRE(consumed, XDC_ERR_INVALID);
    return decode_one(c, in, len, out, n, mode, SIZE_MAX, consumed, first, count, diag);
}

xdc_err_t xdc_codec_decode(xdc_codec *c, const uint8_t *in, size_t len, float *out, size_t n, xdc_codec_mode mode,
                           xdc_diag *diag)
{
    size_t pos = 0, next = 0;
    while (pos < len && next < n) {
        size_t used = 0, count = 0;
        xdc_err_t rc = decode_one(c, in + pos, len - pos, out, n, mode, next, &used, NULL, &count, diag);
        if (rc != XDC_OK) {
            xdc_diag_prefix(diag, "byte %zu", pos);
            return rc;
        }
        pos += used;
        next += count;
    }
    if (next != n || pos != len) CORRUPT("chunks cover %zu of %zu elements using %zu of %zu bytes", next, n, pos, len);
    return XDC_OK;
}
