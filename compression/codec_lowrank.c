/* codec_lowrank.c — the low-rank activation codec (xdc_lowrank.h): the subspace by orthogonal iteration
 * on the rows' second moment, the per-row projection and its int8/int4 quantization, the wire format. */
#include "compression/xdc_lowrank.h"

#include "common/xdc_alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LR_MAGIC      'L'
#define LR_VERSION    1
#define LR_FLAG_BASIS 1
#define LR_ITERS      24 /* orthogonal-iteration sweeps: the first basis from a fixed start, later ones warm */
#define LR_MAX_ABS    1.2676506e30f /* 2^100, the chunk codecs' range bound */

struct xdc_lowrank {
    xdc_lowrank_cfg cfg;
    float *basis;      /* (rank, cols) fp32: the shared subspace, orthonormal rows */
    uint32_t basis_id; /* bases computed (encoder) or stored (decoder); 0: none yet */
    uint64_t sent;     /* messages encoded */
    double *gram;      /* (cols, cols): the message's second moment, when a basis is computed */
    double *q, *z;     /* (rank, cols): the iterate and its product with gram */
    float *coef;       /* (rows, rank): the message's coefficients */
    float *colscale;   /* (rank): each coefficient's scale in this message (its RMS over the rows, bf16) */
};

int xdc_lowrank_named(const char *text) { return strncmp(text, "lowrank", 7) == 0 && (!text[7] || text[7] == ':'); }

xdc_err_t xdc_lowrank_parse(const char *text, xdc_lowrank_cfg *cfg, xdc_diag *diag)
{
    if (!xdc_lowrank_named(text)) {
        xdc_diag_set(diag, "activation codec '%s' is not lowrank[:rank[:int8|int4[:refresh]]]", text);
        return XDC_ERR_CONFIG;
    }
    cfg->rank = cfg->cols / 4 > 0 ? cfg->cols / 4 : 1;
    cfg->bits = 8;
    cfg->refresh = 1;
    const char *p = text + 7;
    if (*p == ':') {
        char *end;
        long r = strtol(p + 1, &end, 10);
        if (end == p + 1 || r < 1 || r > 65535) goto bad;
        cfg->rank = (int)r;
        p = end;
    }
    if (*p == ':') {
        if (strncmp(p + 1, "int8", 4) == 0) cfg->bits = 8;
        else if (strncmp(p + 1, "int4", 4) == 0) cfg->bits = 4;
        else goto bad;
        p += 5;
    }
    if (*p == ':') {
        char *end;
        long k = strtol(p + 1, &end, 10);
        if (end == p + 1 || k < 1 || k > 1000000) goto bad;
        cfg->refresh = (int)k;
        p = end;
    }
    if (!*p) return XDC_OK;
bad:
    xdc_diag_set(diag, "activation codec '%s': expected lowrank[:rank[:int8|int4[:refresh]]] (rank >= 1, refresh >= 1)",
                 text);
    return XDC_ERR_CONFIG;
}

static size_t code_bytes(const xdc_lowrank_cfg *cfg) { return ((size_t)cfg->rank * (size_t)cfg->bits + 7) / 8; }

xdc_err_t xdc_lowrank_create(const xdc_lowrank_cfg *cfg, xdc_lowrank **out, xdc_diag *diag)
{
    *out = NULL;
    if (cfg->cols < 1 || cfg->cols > 65535 || cfg->rank < 1 || cfg->rank > cfg->cols ||
        (cfg->bits != 8 && cfg->bits != 4) || cfg->refresh < 1 || cfg->rows > UINT32_MAX) {
        xdc_diag_set(
            diag, "lowrank codec: rank %d of %d columns, %d bits, refresh %d (need 1 <= rank <= columns, 8 or 4 bits)",
            cfg->rank, cfg->cols, cfg->bits, cfg->refresh);
        return XDC_ERR_CONFIG;
    }
    xdc_lowrank *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    c->cfg = *cfg;
    size_t rc = (size_t)cfg->rank * (size_t)cfg->cols;
    c->basis = xdc_malloc(rc * sizeof(float));
    c->gram = xdc_malloc((size_t)cfg->cols * (size_t)cfg->cols * sizeof(double));
    c->q = xdc_malloc(rc * sizeof(double));
    c->z = xdc_malloc(rc * sizeof(double));
    c->coef = xdc_malloc((cfg->rows ? cfg->rows : 1) * (size_t)cfg->rank * sizeof(float));
    c->colscale = xdc_malloc((size_t)cfg->rank * sizeof(float));
    if (!c->basis || !c->gram || !c->q || !c->z || !c->coef || !c->colscale) {
        xdc_lowrank_destroy(c);
        return XDC_ERR_NOMEM;
    }
    *out = c;
    return XDC_OK;
}

void xdc_lowrank_destroy(xdc_lowrank *c)
{
    if (!c) return;
    xdc_free(c->basis);
    xdc_free(c->gram);
    xdc_free(c->q);
    xdc_free(c->z);
    xdc_free(c->coef);
    xdc_free(c->colscale);
    xdc_free(c);
}

size_t xdc_lowrank_bound(const xdc_lowrank *c, size_t rows)
{
    return XDC_LOWRANK_HEADER + (size_t)c->cfg.rank * ((size_t)c->cfg.cols + 1) * 2 + rows * (2 + code_bytes(&c->cfg));
}

const float *xdc_lowrank_basis(const xdc_lowrank *c, uint32_t *id)
{
    if (id) *id = c->basis_id;
    return c->basis_id ? c->basis : NULL;
}

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    put16(p, v);
    put16(p + 2, v >> 16);
}
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p) { return get16(p) | get16(p + 2) << 16; }

/* v rounded to the nearest bf16 (ties to even; v finite): the basis travels, and is used by both ends,
 * at that precision — orthonormal to ~2^-8, which the decoder's reconstruction with the same basis does
 * not notice. */
static uint16_t bf16_near(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* The bf16 at or above |v| (v >= 0, finite): a scale that never makes a code overflow. */
static uint16_t bf16_up(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    uint32_t hi = b >> 16;
    if (b & 0xffffu) hi++;
    return (uint16_t)hi;
}
static float bf16_to_f32(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* Row k of the iterate: made orthogonal to rows 0..k-1 (Gram-Schmidt, twice for accuracy) and unit
 * length. A row that vanishes (data of lower rank than r) is replaced by the first unit vector that
 * keeps the basis orthonormal, so the basis always has r rows. */
static void orthonormalise_row(double *q, int k, int cols)
{
    double *v = q + (size_t)k * cols;
    for (int attempt = 0; attempt <= cols; attempt++) {
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < k; j++) {
                const double *u = q + (size_t)j * cols;
                double d = 0;
                for (int i = 0; i < cols; i++) d += u[i] * v[i];
                for (int i = 0; i < cols; i++) v[i] -= d * u[i];
            }
        double n = 0;
        for (int i = 0; i < cols; i++) n += v[i] * v[i];
        if (n > 1e-20) {
            double s = 1.0 / sqrt(n);
            for (int i = 0; i < cols; i++) v[i] *= s;
            return;
        }
        memset(v, 0, (size_t)cols * sizeof(double));
        v[attempt % cols] = 1.0;
    }
}

/* The top-r eigenvectors of x's second moment xᵀx (not centred: the rows' mean direction is part of what
 * is sent) by orthogonal iteration, warm-started from the current basis, into c->basis. */
static void compute_basis(xdc_lowrank *c, const float *x, size_t rows)
{
    int C = c->cfg.cols, r = c->cfg.rank;
    double *g = c->gram;
    memset(g, 0, (size_t)C * C * sizeof(double));
    for (size_t n = 0; n < rows; n++) {
        const float *row = x + n * C;
        for (int i = 0; i < C; i++) {
            double a = row[i];
            if (a == 0) continue;
            double *gi = g + (size_t)i * C;
            for (int j = i; j < C; j++) gi[j] += a * row[j];
        }
    }
    for (int i = 0; i < C; i++)
        for (int j = 0; j < i; j++) g[(size_t)i * C + j] = g[(size_t)j * C + i];
    if (c->basis_id) {
        for (size_t i = 0; i < (size_t)r * C; i++) c->q[i] = c->basis[i];
    } else { /* a fixed pseudo-random start (an LCG), the same at every run */
        uint32_t s = 12345;
        for (size_t i = 0; i < (size_t)r * C; i++) {
            s = s * 1664525u + 1013904223u;
            c->q[i] = (double)(s >> 8) / (double)(1u << 24) - 0.5;
        }
    }
    for (int it = 0; it < LR_ITERS; it++) {
        for (int k = 0; k < r; k++) { /* z_k = G q_k */
            const double *qk = c->q + (size_t)k * C;
            double *zk = c->z + (size_t)k * C;
            for (int i = 0; i < C; i++) {
                const double *gi = g + (size_t)i * C;
                double d = 0;
                for (int j = 0; j < C; j++) d += gi[j] * qk[j];
                zk[i] = d;
            }
        }
        double *t = c->q;
        c->q = c->z;
        c->z = t;
        for (int k = 0; k < r; k++) orthonormalise_row(c->q, k, C);
    }
    for (size_t i = 0; i < (size_t)r * C; i++) c->basis[i] = bf16_to_f32(bf16_near((float)c->q[i]));
    c->basis_id++;
}

xdc_err_t xdc_lowrank_encode(xdc_lowrank *c, const float *x, size_t rows, uint8_t *out, size_t cap, size_t *len,
                             xdc_diag *diag)
{
    const xdc_lowrank_cfg *cfg = &c->cfg;
    int C = cfg->cols, r = cfg->rank;
    if (rows > cfg->rows) {
        xdc_diag_set(diag, "lowrank encode of %zu rows, context made for %zu", rows, cfg->rows);
        return XDC_ERR_INVALID;
    }
    for (size_t i = 0; i < rows * (size_t)C; i++)
        if (!(fabsf(x[i]) <= LR_MAX_ABS)) {
            xdc_diag_set(diag, "lowrank encode: element %zu is %g (NaN, Inf or beyond 2^100)", i, (double)x[i]);
            return XDC_ERR_RANGE;
        }
    int ship = c->sent % (uint64_t)cfg->refresh == 0;
    size_t need = XDC_LOWRANK_HEADER + (ship ? (size_t)r * C * 2 : 0) + (size_t)r * 2 + rows * (2 + code_bytes(cfg));
    if (cap < need) {
        xdc_diag_set(diag, "lowrank encode needs %zu bytes, %zu given", need, cap);
        return XDC_ERR_RANGE;
    }
    if (ship) compute_basis(c, x, rows);
    uint8_t *p = out;
    p[0] = LR_MAGIC;
    p[1] = LR_VERSION;
    p[2] = (uint8_t)cfg->bits;
    p[3] = ship ? LR_FLAG_BASIS : 0;
    put16(p + 4, (uint32_t)r);
    put16(p + 6, (uint32_t)C);
    put32(p + 8, (uint32_t)rows);
    put32(p + 12, c->basis_id);
    p += XDC_LOWRANK_HEADER;
    if (ship) {
        for (size_t i = 0; i < (size_t)r * C; i++) put16(p + 2 * i, bf16_near(c->basis[i]));
        p += (size_t)r * C * 2;
    }
    /* Coefficient k of row n = <basis_k, row n>, fp32 in a fixed order; each coefficient is scaled by its
     * RMS over the message first, so the weaker directions are not quantized on the strongest one's grid. */
    for (int k = 0; k < r; k++) {
        const float *b = c->basis + (size_t)k * C;
        double ss = 0;
        for (size_t n = 0; n < rows; n++) {
            const float *row = x + n * C;
            float d = 0;
            for (int i = 0; i < C; i++) d += b[i] * row[i];
            c->coef[n * r + k] = d;
            ss += (double)d * d;
        }
        uint16_t h = bf16_near(rows ? (float)sqrt(ss / (double)rows) : 0.0f);
        c->colscale[k] = bf16_to_f32(h);
        put16(p + 2 * k, h);
    }
    p += (size_t)r * 2;
    float qmax = cfg->bits == 8 ? 127.0f : 7.0f;
    size_t cb = code_bytes(cfg);
    for (size_t n = 0; n < rows; n++) {
        float *cn = c->coef + n * r, amax = 0;
        for (int k = 0; k < r; k++) {
            cn[k] = c->colscale[k] > 0 ? cn[k] / c->colscale[k] : 0.0f;
            if (fabsf(cn[k]) > amax) amax = fabsf(cn[k]);
        }
        uint16_t sh = bf16_up(amax / qmax);
        float scale = bf16_to_f32(sh);
        put16(p, sh);
        p += 2;
        memset(p, 0, cb);
        for (int k = 0; k < r; k++) {
            long q = scale > 0 ? lrintf(cn[k] / scale) : 0;
            if (q > (long)qmax) q = (long)qmax;
            if (q < -(long)qmax) q = -(long)qmax;
            if (cfg->bits == 8) p[k] = (uint8_t)(int8_t)q;
            else p[k / 2] |= (uint8_t)(((uint32_t)q & 0xfu) << (4 * (k & 1)));
        }
        p += cb;
    }
    c->sent++;
    *len = (size_t)(p - out);
    return XDC_OK;
}

xdc_err_t xdc_lowrank_decode(xdc_lowrank *c, const uint8_t *in, size_t len, float *x, size_t rows, xdc_diag *diag)
{
    const xdc_lowrank_cfg *cfg = &c->cfg;
    int C = cfg->cols, r = cfg->rank;
    if (len < XDC_LOWRANK_HEADER || in[0] != LR_MAGIC || in[1] != LR_VERSION || in[2] != cfg->bits ||
        (in[3] & ~LR_FLAG_BASIS) || get16(in + 4) != (uint32_t)r || get16(in + 6) != (uint32_t)C ||
        get32(in + 8) != rows || rows > cfg->rows) {
        xdc_diag_set(
            diag, "lowrank message header does not match: %zu bytes, expected rank %d, %d columns, %zu rows, %d bits",
            len, r, C, rows, cfg->bits);
        return XDC_ERR_CORRUPT;
    }
    int has_basis = in[3] & LR_FLAG_BASIS;
    size_t need = XDC_LOWRANK_HEADER + (has_basis ? (size_t)r * C * 2 : 0) + (size_t)r * 2 +
                  rows * (2 + code_bytes(cfg));
    if (len != need) {
        xdc_diag_set(diag, "lowrank message of %zu bytes, its header says %zu", len, need);
        return XDC_ERR_CORRUPT;
    }
    uint32_t id = get32(in + 12);
    if (id != c->basis_id + (has_basis ? 1u : 0u) || id == 0) {
        xdc_diag_set(diag, "lowrank message with basis %u%s, this end holds basis %u (a message lost or out of order)",
                     id, has_basis ? " (shipped)" : "", c->basis_id);
        return XDC_ERR_PROTO;
    }
    const uint8_t *p = in + XDC_LOWRANK_HEADER;
    if (has_basis) {
        for (size_t i = 0; i < (size_t)r * C; i++) c->basis[i] = bf16_to_f32((uint16_t)get16(p + 2 * i));
        c->basis_id = id;
        p += (size_t)r * C * 2;
    }
    for (int k = 0; k < r; k++) c->colscale[k] = bf16_to_f32((uint16_t)get16(p + 2 * k));
    p += (size_t)r * 2;
    size_t cb = code_bytes(cfg);
    for (size_t n = 0; n < rows; n++) {
        float scale = bf16_to_f32((uint16_t)get16(p));
        p += 2;
        for (int k = 0; k < r; k++) {
            int q = cfg->bits == 8 ? (int)(int8_t)p[k] : (int)((p[k / 2] >> (4 * (k & 1))) & 0xfu);
            if (cfg->bits == 4 && q > 7) q -= 16;
            c->coef[k] = (float)q * scale * c->colscale[k];
        }
        float *row = x + n * C;
        memset(row, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < r; k++) {
            const float *b = c->basis + (size_t)k * C;
            float a = c->coef[k];
            for (int i = 0; i < C; i++) row[i] += a * b[i];
        }
        p += cb;
    }
    return XDC_OK;
}
