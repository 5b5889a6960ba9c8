/* codec_ctx.c — the codec registry (names, parameters, cost estimates), codec configuration
 * (parse/format, zstd level per link), context lifetime, residual access and stats. The chunk encoder/decoder lives in codec_chunk.c. */
#include "compression/codec_private.h"

#include "common/xdc_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Single-core speeds and ratios from bench/codec (docs/benchmarks.md); with zstd, bf16 and int8 output
 * shrinks and the encoder slows down. int4's ratio is that of block 64 (the default block 128 sends
 * 0.141). Top-k sends a value and a delta-coded index per kept element: ~2f of the fp32 bytes, ~1.2f after
 * zstd. Sparse sends a u16 gap and B bits per kept element, (16 + B) / 32 f, plus 8 bytes of scales per
 * 4096 elements; zstd takes it to ~0.33 f (bench/codec, 2026-12-03). Its speeds were measured on a VM loaded
 * by a parallel build and scaled by top-k's quiet / loaded ratio (encode ~9x slower than top-k: a top-k
 * select per 4096-element block and the quantization error spread back into the residual). tests/compression/test_codec.c checks every ratio without zstd against what the encoder sends. */
static const xdc_codec_info registry[] = {
    {.name = "none",
     .kind = XDC_CODEC_NONE,
     .lossiness = 0,
     .for_activations = true,
     .plain = {.ratio = 1.0, .enc_Bps = 3.7e9, .dec_Bps = 4.0e9},
     .zstd = {.ratio = 1.0, .enc_Bps = 3.7e9, .dec_Bps = 4.0e9}},
    {.name = "bf16",
     .kind = XDC_CODEC_BF16,
     .lossiness = 1,
     .for_activations = true,
     .plain = {.ratio = 0.5, .enc_Bps = 3.4e9, .dec_Bps = 4.5e9},
     .zstd = {.ratio = 0.344, .enc_Bps = 0.9e9, .dec_Bps = 2.4e9}},
    {.name = "int8",
     .kind = XDC_CODEC_INT8,
     .param = "block",
     .lossiness = 2,
     .for_activations = true,
     .plain = {.ratio = 0.258, .enc_Bps = 3.2e9, .dec_Bps = 6.6e9},
     .zstd = {.ratio = 0.227, .enc_Bps = 1.8e9, .dec_Bps = 3.3e9}},
    {.name = "int4",
     .kind = XDC_CODEC_INT4,
     .param = "block",
     .lossiness = 3,
     .plain = {.ratio = 0.156, .enc_Bps = 2.9e9, .dec_Bps = 6.2e9},
     .zstd = {.ratio = 0.144, .enc_Bps = 1.9e9, .dec_Bps = 3.4e9}},
    {.name = "topk",
     .kind = XDC_CODEC_TOPK,
     .param = "fraction",
     .param_in_size = true,
     .lossiness = 5,
     .plain = {.ratio = 2.0, .enc_Bps = 2.4e9, .dec_Bps = 8.6e9},
     .zstd = {.ratio = 1.2, .enc_Bps = 2.4e9, .dec_Bps = 8.6e9}},
    {.name = "sparse",
     .kind = XDC_CODEC_SPARSE,
     .param = "fraction[:bits]",
     .param_in_size = true,
     .lossiness = 6,
     .plain = {.ratio = 0.5625, .enc_Bps = 2.4e9, .dec_Bps = 4.0e9},
     .zstd = {.ratio = 0.33, .enc_Bps = 2.4e9, .dec_Bps = 2.0e9}},
};
#define N_CODECS (sizeof registry / sizeof registry[0])

size_t xdc_codec_info_count(void) { return N_CODECS; }

const xdc_codec_info *xdc_codec_info_at(size_t i) { return i < N_CODECS ? &registry[i] : NULL; }

const xdc_codec_info *xdc_codec_info_find(const char *name, size_t len)
{
    for (size_t i = 0; name && i < N_CODECS; i++)
        if (strlen(registry[i].name) == len && strncmp(name, registry[i].name, len) == 0) return &registry[i];
    return NULL;
}

xdc_err_t xdc_codec_estimate_for(const char *text, double link_gbps, xdc_codec_estimate *out,
                                 const xdc_codec_info **info)
{
    XDC_REQUIRE(text && out, XDC_ERR_INVALID);
    const char *colon = strchr(text, ':');
    const xdc_codec_info *ci = xdc_codec_info_find(text, colon ? (size_t)(colon - text) : strlen(text));
    if (!ci || (colon != NULL) != ci->param_in_size) return XDC_ERR_CONFIG;
    double f = 1.0;
    long bits = 2;
    if (colon) {
        char *end;
        f = strtod(colon + 1, &end);
        if (ci->kind == XDC_CODEC_SPARSE && *end == ':') bits = strtol(end + 1, &end, 10);
        if (*end || !(f > 0 && f <= 0.5) || bits < CODEC_SPARSE_BITS_MIN || bits > CODEC_SPARSE_BITS_MAX)
            return XDC_ERR_CONFIG;
    }
    *out = xdc_codec_zstd_level_for_link(link_gbps) != 0 ? ci->zstd : ci->plain;
    if (colon) out->ratio = out->ratio * f * (ci->kind == XDC_CODEC_SPARSE ? (16.0 + (double)bits) / 18.0 : 1.0);
    if (info) *info = ci;
    return XDC_OK;
}

size_t codec_raw_len(xdc_codec_kind kind, size_t count, size_t param, size_t aux)
{
    size_t nb = param ? (count + param - 1) / param : 0;
    switch (kind) {
    case XDC_CODEC_NONE: return 4 * count;
    case XDC_CODEC_BF16: return 2 * count;
    case XDC_CODEC_INT8: return 4 * nb + count;
    case XDC_CODEC_INT4: return 8 * nb + (count + 1) / 2;
    case XDC_CODEC_TOPK: return 8 * param; /* param is k: delta-coded u32 indices, then fp32 values */
    case XDC_CODEC_SPARSE: {               /* per block 2 fp32 scales; per kept value a u16 gap and `aux` bits */
        size_t k = codec_sparse_total_k(param, count);
        return 8 * ((count + CODEC_SPARSE_BLOCK - 1) / CODEC_SPARSE_BLOCK) + 2 * k + 4 * ((k * aux + 31) / 32);
    }
    }
    return 0;
}

size_t codec_plane_elem(xdc_codec_kind kind)
{
    switch (kind) {
    case XDC_CODEC_NONE: return 4;
    case XDC_CODEC_BF16: return 2;
    case XDC_CODEC_TOPK: return 4;
    case XDC_CODEC_SPARSE: return 2; /* the u16 gaps dominate: their high bytes are mostly zero */
    default: return 0;
    }
}

size_t codec_chunk_param(const xdc_codec_cfg *cfg, size_t count)
{
    switch (cfg->kind) {
    case XDC_CODEC_INT8:
    case XDC_CODEC_INT4: return cfg->block;
    case XDC_CODEC_TOPK: return codec_topk_k(cfg->topk_fraction, count);
    case XDC_CODEC_SPARSE: return codec_topk_k(cfg->sparse_fraction, CODEC_SPARSE_BLOCK);
    default: return 0;
    }
}

size_t codec_topk_k(float fraction, size_t count)
{
    size_t k = (size_t)((double)fraction * (double)count + 0.5);
    if (k < 1) k = 1;
    return k > count / 2 ? (count / 2 ? count / 2 : 1) : k;
}

static bool block_valid(unsigned long b) { return b >= XDC_QUANT_BLOCK_MIN && b <= XDC_QUANT_BLOCK_MAX && !(b & 1); }

xdc_err_t xdc_codec_parse(const char *text, xdc_codec_cfg *cfg, xdc_diag *diag)
{
    XDC_REQUIRE(text && cfg, XDC_ERR_INVALID);
    const char *colon = strchr(text, ':');
    size_t name_len = colon ? (size_t)(colon - text) : strlen(text);
    const xdc_codec_info *ci = xdc_codec_info_find(text, name_len);
    if (!ci) {
        char list[160] = "";
        for (size_t i = 0; i < N_CODECS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s%s%s%s", i ? ", " : "", registry[i].name,
                     registry[i].param ? "[:" : "", registry[i].param ? registry[i].param : "",
                     registry[i].param ? "]" : "");
        xdc_diag_set(diag, "codec \"%s\": unknown name (expected %s)", text, list);
        return XDC_ERR_CONFIG;
    }
    int kind = (int)ci->kind;
    if (colon) {
        const char *arg = colon + 1;
        char *end = NULL;
        errno = 0;
        if (kind == XDC_CODEC_INT8 || kind == XDC_CODEC_INT4) {
            unsigned long b = strtoul(arg, &end, 10);
            if (!*arg || *end || errno || !block_valid(b)) {
                xdc_diag_set(diag, "codec \"%s\": block must be an even number in [%d, %d]", text, XDC_QUANT_BLOCK_MIN,
                             XDC_QUANT_BLOCK_MAX);
                return XDC_ERR_CONFIG;
            }
            cfg->block = (uint32_t)b;
        } else if (kind == XDC_CODEC_TOPK) {
            float f = strtof(arg, &end);
            if (!*arg || *end || errno || !(f > 0.0f && f <= 0.5f)) {
                xdc_diag_set(diag, "codec \"%s\": top-k fraction must be in (0, 0.5]", text);
                return XDC_ERR_CONFIG;
            }
            cfg->topk_fraction = f;
        } else if (kind == XDC_CODEC_SPARSE) {
            float f = strtof(arg, &end);
            unsigned long bits = cfg->sparse_bits;
            if (*end == ':') bits = strtoul(end + 1, &end, 10);
            if (!*arg || *end || errno || !(f > 0.0f && f <= 0.5f) || bits < CODEC_SPARSE_BITS_MIN ||
                bits > CODEC_SPARSE_BITS_MAX) {
                xdc_diag_set(diag,
                             "codec \"%s\": sparse takes fraction in (0, 0.5] and bits in [%u, %u] (\"sparse:0.02:2\")",
                             text, CODEC_SPARSE_BITS_MIN, CODEC_SPARSE_BITS_MAX);
                return XDC_ERR_CONFIG;
            }
            cfg->sparse_fraction = f;
            cfg->sparse_bits = (uint32_t)bits;
        } else {
            xdc_diag_set(diag, "codec \"%s\": %s takes no parameter", text, ci->name);
            return XDC_ERR_CONFIG;
        }
    }
    cfg->kind = (xdc_codec_kind)kind;
    return XDC_OK;
}

void xdc_codec_format(const xdc_codec_cfg *cfg, char *buf, size_t cap)
{
    const xdc_codec_info *ci = xdc_codec_info_at((size_t)cfg->kind);
    const char *name = ci ? ci->name : "?";
    if (cfg->kind == XDC_CODEC_INT8 || cfg->kind == XDC_CODEC_INT4)
        snprintf(buf, cap, "%s:%u", name, (unsigned)cfg->block);
    else if (cfg->kind == XDC_CODEC_TOPK) snprintf(buf, cap, "%s:%g", name, (double)cfg->topk_fraction);
    else if (cfg->kind == XDC_CODEC_SPARSE)
        snprintf(buf, cap, "%s:%g:%u", name, (double)cfg->sparse_fraction, (unsigned)cfg->sparse_bits);
    else snprintf(buf, cap, "%s", name);
}

int xdc_codec_zstd_level_for_link(double link_gbps)
{
    /* Wire output of the bf16 codec with shuffled zstd on one core, measured by bench/codec on the
     * development VM (docs/benchmarks.md): level 3 ~1.5 Gbit/s, level 1 ~2.4, level -3 ~3.6 when the
     * core is free, about a third less when it is shared. Each level serves links up to roughly half of
     * its quiet-core rate so the codec keeps up on a busy core too. Faster links get no zstd: the
     * lossy stage alone already cuts the bytes and runs near memory speed. */
    if (link_gbps <= 0.5) return 3;
    if (link_gbps <= 1.0) return 1;
    if (link_gbps <= 2.0) return -3;
    return 0;
}

static xdc_err_t check_cfg(const xdc_codec_cfg *cfg, xdc_diag *diag)
{
    if ((unsigned)cfg->kind > XDC_CODEC_SPARSE) {
        xdc_diag_set(diag, "codec kind %d unknown", (int)cfg->kind);
        return XDC_ERR_CONFIG;
    }
    if (cfg->chunk_elems < 1 || cfg->chunk_elems > CODEC_MAX_CHUNK_ELEMS) {
        xdc_diag_set(diag, "chunk_elems %zu outside [1, %u]", cfg->chunk_elems, CODEC_MAX_CHUNK_ELEMS);
        return XDC_ERR_CONFIG;
    }
    if (cfg->n_elems < 1) {
        xdc_diag_set(diag, "n_elems must be at least 1");
        return XDC_ERR_CONFIG;
    }
    if ((cfg->kind == XDC_CODEC_INT8 || cfg->kind == XDC_CODEC_INT4) && !block_valid(cfg->block)) {
        xdc_diag_set(diag, "block %u must be an even number in [%d, %d]", (unsigned)cfg->block, XDC_QUANT_BLOCK_MIN,
                     XDC_QUANT_BLOCK_MAX);
        return XDC_ERR_CONFIG;
    }
    if (cfg->kind == XDC_CODEC_TOPK && !(cfg->topk_fraction > 0.0f && cfg->topk_fraction <= 0.5f)) {
        xdc_diag_set(diag, "top-k fraction %g must be in (0, 0.5]", (double)cfg->topk_fraction);
        return XDC_ERR_CONFIG;
    }
    if (cfg->kind == XDC_CODEC_SPARSE &&
        (!(cfg->sparse_fraction > 0.0f && cfg->sparse_fraction <= 0.5f) || cfg->sparse_bits < CODEC_SPARSE_BITS_MIN ||
         cfg->sparse_bits > CODEC_SPARSE_BITS_MAX)) {
        xdc_diag_set(diag, "sparse fraction %g must be in (0, 0.5] and bits %u in [%u, %u]",
                     (double)cfg->sparse_fraction, (unsigned)cfg->sparse_bits, CODEC_SPARSE_BITS_MIN,
                     CODEC_SPARSE_BITS_MAX);
        return XDC_ERR_CONFIG;
    }
    if (cfg->zstd_level != 0 && (cfg->zstd_level < ZSTD_minCLevel() || cfg->zstd_level > ZSTD_maxCLevel())) {
        xdc_diag_set(diag, "zstd level %d outside [%d, %d] (0 turns zstd off)", cfg->zstd_level, ZSTD_minCLevel(),
                     ZSTD_maxCLevel());
        return XDC_ERR_CONFIG;
    }
    if (!(cfg->zstd_min_ratio >= 1.0f)) {
        xdc_diag_set(diag, "zstd_min_ratio %g must be >= 1", (double)cfg->zstd_min_ratio);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

xdc_err_t xdc_codec_create(const xdc_codec_cfg *cfg, xdc_codec **out, xdc_diag *diag)
{
    XDC_REQUIRE(cfg && out, XDC_ERR_INVALID);
    *out = NULL;
    XDC_CHECK(check_cfg(cfg, diag));
    const xdc_kern_backend *be = cfg->backend, *cpu = NULL;
    XDC_CHECK(xdc_kern_backend_get(XDC_BACKEND_CPU, &cpu, diag));
    if (!be) be = cpu;
    xdc_codec *c = xdc_calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->cfg = *cfg;
    c->cfg.backend = be;
    c->ops = be->quant;
    c->hops = cpu->quant;
    c->dev = be->device;
    const xdc_device_ops *dev = c->dev;
    size_t ce = cfg->chunk_elems;
    /* Largest raw payload any codec can send for one chunk (the decoder accepts every codec):
     * fp32 (4 B/elem) dominates int8 (1 + 4/16), int4 (1/2 + 8/16 + 1), top-k (8 k <= 4 count) and sparse
     * (its device staging is 8 k <= 4 count; its payload 2 k + k B / 8 + 8 per block, padded). */
    c->raw_cap = 4 * ce + 16;
    if (dev->mem_alloc((void **)&c->raw, c->raw_cap) != XDC_OK ||
        dev->host_alloc((void **)&c->hraw, c->raw_cap) != XDC_OK ||
        dev->host_alloc((void **)&c->planes, c->raw_cap) != XDC_OK ||
        dev->mem_alloc((void **)&c->decoded, ce * sizeof(float)) != XDC_OK ||
        dev->mem_alloc((void **)&c->count, sizeof(size_t)) != XDC_OK ||
        dev->host_alloc((void **)&c->hcount, sizeof(size_t)) != XDC_OK)
        goto nomem;
    if (cfg->kind == XDC_CODEC_TOPK) {
        size_t k = codec_topk_k(cfg->topk_fraction, ce);
        if (dev->mem_alloc(&c->topk_scratch, c->ops->topk_scratch_bytes(ce, k)) != XDC_OK) goto nomem;
    }
    if (cfg->kind == XDC_CODEC_SPARSE) {
        size_t len = ce < CODEC_SPARSE_BLOCK ? ce : CODEC_SPARSE_BLOCK;
        size_t k = codec_sparse_block_k(codec_chunk_param(cfg, ce), len);
        if (dev->mem_alloc(&c->topk_scratch, c->ops->topk_scratch_bytes(len, k)) != XDC_OK) goto nomem;
    }
    if (cfg->error_feedback && cfg->kind != XDC_CODEC_NONE) /* zero-filled by mem_alloc */
        if (dev->mem_alloc((void **)&c->residual, cfg->n_elems * sizeof(float)) != XDC_OK) goto nomem;
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    if (!c->cctx || !c->dctx) goto nomem;
    *out = c;
    return XDC_OK;
nomem:
    xdc_diag_set(diag, "codec context for %zu elements on %s: out of memory", cfg->n_elems, be->name);
    xdc_codec_destroy(c);
    return XDC_ERR_NOMEM;
}

void xdc_codec_destroy(xdc_codec *c)
{
    if (!c) return;
    const xdc_device_ops *dev = c->dev;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    if (dev) {
        dev->mem_free(c->residual);
        dev->mem_free(c->topk_scratch);
        dev->host_free(c->hcount);
        dev->mem_free(c->count);
        dev->mem_free(c->decoded);
        dev->host_free(c->planes);
        dev->host_free(c->hraw);
        dev->mem_free(c->raw);
    }
    xdc_free(c);
}

size_t xdc_codec_chunk_count(const xdc_codec *c, size_t n) { return (n + c->cfg.chunk_elems - 1) / c->cfg.chunk_elems; }

size_t xdc_codec_bound(const xdc_codec *c, size_t n)
{
    /* zstd output is kept only when smaller than the raw payload, so raw + header bounds every chunk. */
    const xdc_codec_cfg *cfg = &c->cfg;
    size_t ce = cfg->chunk_elems, full = n / ce, tail = n % ce;
    size_t aux = cfg->kind == XDC_CODEC_SPARSE ? cfg->sparse_bits : 0;
    size_t per_full = CODEC_HDR_BYTES + codec_raw_len(cfg->kind, ce, codec_chunk_param(cfg, ce), aux);
    size_t per_tail = tail ? CODEC_HDR_BYTES + codec_raw_len(cfg->kind, tail, codec_chunk_param(cfg, tail), aux) : 0;
    return full * per_full + per_tail;
}

const float *xdc_codec_residual(const xdc_codec *c) { return c->residual; }

xdc_err_t xdc_codec_set_residual(xdc_codec *c, const float *r, size_t n)
{
    XDC_REQUIRE(c && n == c->cfg.n_elems, XDC_ERR_INVALID);
    if (!c->residual) return r ? XDC_ERR_INVALID : XDC_OK; /* no EF: only "zero it" makes sense */
    if (r) XDC_CHECK(c->dev->copy_d2d(c->residual, r, n * sizeof(float), NULL));
    else XDC_CHECK(c->dev->memset(c->residual, 0, n * sizeof(float), NULL));
    return c->dev->stream_sync(NULL); /* `r` may be freed or rewritten once this returns */
}

xdc_err_t xdc_codec_set_zstd_level(xdc_codec *c, int level)
{
    XDC_REQUIRE(c, XDC_ERR_INVALID);
    XDC_REQUIRE(level == 0 || (level >= ZSTD_minCLevel() && level <= ZSTD_maxCLevel()), XDC_ERR_RANGE);
    c->cfg.zstd_level = level;
    return XDC_OK;
}

void xdc_codec_get_stats(const xdc_codec *c, xdc_codec_stats *out) { *out = c->stats; }
