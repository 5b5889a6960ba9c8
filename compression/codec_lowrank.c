/* codec_lowrank.c — the low-rank activation codec (xdc_lowrank.h): the subspace by orthogonal iteration
 * on the rows' second moment, its int8 rounding, the per-row projection and its B-bit quantization (a scale
 * byte per row), the wire format. */
#include "compression/xdc_lowrank.h"

#include "common/xdc_alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LR_MAGIC      'L'
#define LR_VERSION    2
#define LR_FLAG_BASIS 1
#define LR_ITERS      24 /* orthogonal-iteration sweeps: the first basis from a fixed start, later ones warm */
#define LR_MAX_ABS    1.2676506e30f /* 2^100, the chunk codecs' range bound */
#define LR_MIN_BITS   3             /* fewer: the gradients at rank 32 with int2 (then 3 levels) trained to +8 % loss */
#define LR_ROW_BIAS   128           /* row scale byte s: 2^((s - 128) / 8) */

struct xdc_lowrank {
    xdc_lowrank_cfg cfg;
    float *basis;      /* (rank, cols) fp32: the shared subspace, rows orthonormal to ~2^-8 (int8) */
    uint32_t basis_id; /* bases computed (encoder) or stored (decoder); 0: none yet */
    uint64_t sent;     /* messages encoded */
    double *gram;      /* (cols, cols): the message's second moment, when a basis is computed */
    double *q, *z;     /* (rank, cols): the iterate and its product with gram */
    float *coef;       /* (rows, rank): the message's coefficients */
    float *colscale;   /* (rank): each coefficient's scale in this message (its RMS over the rows, bf16) */
    int8_t *bcode;     /* (rank, cols): the basis as sent, basis = bcode · bscale of its row */
    uint16_t *bscale;  /* (rank) bf16: each basis row's scale */
};

int xdc_lowrank_named(const char *text)
{
    return strncmp(text, "lowrank", 7) == 0 && (!text[7] || text[7] == ':' || text[7] == '/');
}

/* One direction's "rank[:intB[:refresh]]" from p (just after "lowrank:" or "/"), into cfg; the end of what
 * was read, or NULL when it is malformed. */
static const char *parse_part(const char *p, xdc_lowrank_cfg *cfg)
{
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p || r < 1 || r > 65535) return NULL;
    cfg->rank = (int)r;
    p = end;
    if (*p == ':') {
        if (strncmp(p + 1, "int", 3) || p[4] < '0' + LR_MIN_BITS || p[4] > '8') return NULL;
        cfg->bits = p[4] - '0';
        p += 5;
    }
    if (*p == ':') {
        long k = strtol(p + 1, &end, 10);
        if (end == p + 1 || k < 1 || k > 1000000) return NULL;
        cfg->refresh = (int)k;
        p = end;
    }
    return p;
}

xdc_err_t xdc_lowrank_parse(const char *text, xdc_lowrank_cfg *fwd, xdc_lowrank_cfg *bwd, xdc_diag *diag)
{
    if (!xdc_lowrank_named(text)) {
        xdc_diag_set(diag, "activation codec '%s' is not lowrank[:rank[:intB[:refresh]]][/rank[:intB[:refresh]]]",
                     text);
        return XDC_ERR_CONFIG;
    }
    /* The defaults are the measured ones (docs/compression.md): activations rank C/4 int4, gradients rank C/2
     * int3, both with a basis every 2 messages. */
    fwd->rank = fwd->cols / 4 > 0 ? fwd->cols / 4 : 1;
    fwd->bits = 4;
    fwd->refresh = 2;
    bwd->rank = bwd->cols / 2 > 0 ? bwd->cols / 2 : 1;
    bwd->bits = 3;
    bwd->refresh = 2;
    const char *p = text + 7;
    if (*p == ':') {
        p = parse_part(p + 1, fwd);
        if (p && *p != '/') { /* the gradients as the activations */
            bwd->rank = fwd->rank;
            bwd->bits = fwd->bits;
            bwd->refresh = fwd->refresh;
        }
    }
    if (p && *p == '/') p = parse_part(p + 1, bwd);
    if (p && !*p) return XDC_OK;
    xdc_diag_set(diag,
                 "activation codec '%s': expected lowrank[:rank[:intB[:refresh]]][/rank[:intB[:refresh]]] (rank >= 1, "
                 "B %d..8, refresh >= 1)",
                 text, LR_MIN_BITS);
    return XDC_ERR_CONFIG;
}

static size_t code_bytes(const xdc_lowrank_cfg *cfg) { return ((size_t)cfg->rank * (size_t)cfg->bits + 7) / 8; }
/* The basis on the wire: rank bf16 row scales, then rank x cols int8. */
static size_t basis_bytes(const xdc_lowrank_cfg *cfg) { return (size_t)cfg->rank * ((size_t)cfg->cols + 2); }
/* A message of `rows` rows: header, the basis when shipped, the column scales, a scale byte and the codes per row. */
static size_t message_bytes(const xdc_lowrank_cfg *cfg, size_t rows, int ship)
{
    return XDC_LOWRANK_HEADER + (ship ? basis_bytes(cfg) : 0) + (size_t)cfg->rank * 2 + rows * (1 + code_bytes(cfg));
}

/* One direction's share of xdc_lowrank_estimate: wire bytes and flops per message, the basis amortized. */
static void estimate_part(const xdc_lowrank_cfg *cfg, size_t rows, double *bytes, double *flops)
{
    double C = cfg->cols, r = cfg->rank, n = (double)rows, k = cfg->refresh;
    *bytes = ((double)message_bytes(cfg, rows, 1) + (k - 1) * (double)message_bytes(cfg, rows, 0)) / k;
    double fit = n * C * C + LR_ITERS * (2 * r * C * C + 4 * r * r * C); /* XᵀX (half), G·Q and Gram-Schmidt */
    *flops = fit / k + 4 * n * r * C;                                    /* projection and reconstruction */
}

xdc_err_t xdc_lowrank_estimate(const char *spec, int cols, size_t rows, double *ratio, double *flops, xdc_diag *diag)
{
    xdc_lowrank_cfg f = {.cols = cols, .rows = rows}, g = f;
    XDC_CHECK(xdc_lowrank_parse(spec, &f, &g, diag));
    if (f.rank > cols || g.rank > cols) {
        xdc_diag_set(diag, "activation codec '%s': rank above the %d columns", spec, cols);
        return XDC_ERR_CONFIG;
    }
    double bf, ff, bg, fg;
    estimate_part(&f, rows, &bf, &ff);
    estimate_part(&g, rows, &bg, &fg);
    *ratio = (bf + bg) / (2.0 * (double)rows * cols * sizeof(float));
    *flops = ff + fg;
    return XDC_OK;
}

xdc_err_t xdc_lowrank_create(const xdc_lowrank_cfg *cfg, xdc_lowrank **out, xdc_diag *diag)
{
    *out = NULL;
    if (cfg->cols < 1 || cfg->cols > 65535 || cfg->rank < 1 || cfg->rank > cfg->cols || cfg->bits < LR_MIN_BITS ||
        cfg->bits > 8 || cfg->refresh < 1 || cfg->rows > UINT32_MAX) {
        xdc_diag_set(
            diag, "lowrank codec: rank %d of %d columns, %d bits, refresh %d (need 1 <= rank <= columns, %d..8 bits)",
            cfg->rank, cfg->cols, cfg->bits, cfg->refresh, LR_MIN_BITS);
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
    c->bcode = xdc_malloc(rc);
    c->bscale = xdc_malloc((size_t)cfg->rank * sizeof(uint16_t));
    if (!c->basis || !c->gram || !c->q || !c->z || !c->coef || !c->colscale || !c->bcode || !c->bscale) {
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
    xdc_free(c->bcode);
    xdc_free(c->bscale);
    xdc_free(c);
}

size_t xdc_lowrank_bound(const xdc_lowrank *c, size_t rows) { return message_bytes(&c->cfg, rows, 1); }

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

/* v rounded to the nearest bf16 (ties to even; v finite): the column scales' precision. */
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

/* basis = bcode · bscale, row by row (both ends). */
static void basis_from_codes(xdc_lowrank *c)
{
    int C = c->cfg.cols;
    for (int k = 0; k < c->cfg.rank; k++)
        for (int i = 0; i < C; i++)
            c->basis[(size_t)k * C + i] = (float)c->bcode[(size_t)k * C + i] * bf16_to_f32(c->bscale[k]);
}

/* The iterate rounded to int8 with a bf16 scale per row, into bcode/bscale and the basis both ends then use
 * bit for bit: orthonormal to ~2^-8, which costs far less than the int3/int4 coefficients and halves the
 * basis against bf16. */
static void set_basis_int8(xdc_lowrank *c)
{
    int C = c->cfg.cols, r = c->cfg.rank;
    for (int k = 0; k < r; k++) {
        const double *qk = c->q + (size_t)k * C;
        double amax = 0;
        for (int i = 0; i < C; i++) amax = fmax(amax, fabs(qk[i]));
        c->bscale[k] = bf16_up((float)(amax / 127));
        float s = bf16_to_f32(c->bscale[k]);
        for (int i = 0; i < C; i++) {
            long q = s > 0 ? lrint(qk[i] / s) : 0;
            c->bcode[(size_t)k * C + i] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
    }
    basis_from_codes(c);
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
    set_basis_int8(c);
    c->basis_id++;
}

/* The row scale byte s stands for 2^((s - LR_ROW_BIAS) / 8): a 9 % grid over 2^-16..2^16 times the column
 * scales, which covers every row (a coefficient is at most sqrt(rows) <= 2^16 times its column's RMS). */
static float row_scale(int s)
{
    static const float frac[8] = {1.0f,        1.09050773f, 1.18920712f, 1.29683955f,
                                  1.41421356f, 1.54221083f, 1.68179283f, 1.83400809f}; /* 2^(i/8) */
    return ldexpf(frac[s & 7], (s >> 3) - LR_ROW_BIAS / 8);
}

/* The smallest scale byte whose scale is >= v (v >= 0); 255 when none is. */
static int row_scale_up(float v)
{
    int s = 0;
    for (int step = 128; step > 0; step >>= 1)
        if (s + step <= 255 && row_scale(s + step - 1) < v) s += step;
    return s;
}

/* Codes are midrise: B bits give 2^B levels (u - (2^B - 1) / 2) · step, u = 0..2^B - 1, all used (int3 has
 * 8 levels, not the 7 of a signed code), packed B bits each, least significant first. */
static void put_code(uint8_t *p, int k, int bits, uint32_t u)
{
    size_t bit = (size_t)k * (size_t)bits;
    p[bit / 8] |= (uint8_t)(u << (bit % 8));
    if (bit % 8 + (size_t)bits > 8) p[bit / 8 + 1] |= (uint8_t)(u >> (8 - bit % 8));
}
static uint32_t get_code(const uint8_t *p, int k, int bits)
{
    size_t bit = (size_t)k * (size_t)bits;
    uint32_t u = p[bit / 8] >> (bit % 8);
    if (bit % 8 + (size_t)bits > 8) u |= (uint32_t)p[bit / 8 + 1] << (8 - bit % 8);
    return u & ((1u << bits) - 1u);
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
    size_t need = message_bytes(cfg, rows, ship);
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
        for (int k = 0; k < r; k++) put16(p + 2 * k, c->bscale[k]);
        memcpy(p + 2 * r, c->bcode, (size_t)r * C);
        p += basis_bytes(cfg);
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
    int levels = 1 << cfg->bits;
    size_t cb = code_bytes(cfg);
    for (size_t n = 0; n < rows; n++) {
        float *cn = c->coef + n * r, amax = 0;
        for (int k = 0; k < r; k++) {
            cn[k] = c->colscale[k] > 0 ? cn[k] / c->colscale[k] : 0.0f;
            if (fabsf(cn[k]) > amax) amax = fabsf(cn[k]);
        }
        int sb = row_scale_up(2.0f * amax / (float)levels); /* the levels reach ±levels/2 · step >= amax */
        float step = row_scale(sb);
        *p++ = (uint8_t)sb;
        memset(p, 0, cb);
        for (int k = 0; k < r; k++) {
            long u = (long)floorf(cn[k] / step + (float)levels / 2);
            put_code(p, k, cfg->bits, (uint32_t)(u < 0 ? 0 : u >= levels ? levels - 1 : u));
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
    size_t need = message_bytes(cfg, rows, has_basis);
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
        for (int k = 0; k < r; k++) {
            c->bscale[k] = (uint16_t)get16(p + 2 * k);
            if (!isfinite(bf16_to_f32(c->bscale[k]))) {
                xdc_diag_set(diag, "lowrank message: basis row %d has scale %g", k, (double)bf16_to_f32(c->bscale[k]));
                return XDC_ERR_CORRUPT;
            }
        }
        memcpy(c->bcode, p + 2 * r, (size_t)r * C);
        basis_from_codes(c);
        c->basis_id = id;
        p += basis_bytes(cfg);
    }
    for (int k = 0; k < r; k++) {
        c->colscale[k] = bf16_to_f32((uint16_t)get16(p + 2 * k));
        if (!isfinite(c->colscale[k])) {
            xdc_diag_set(diag, "lowrank message: column %d has scale %g", k, (double)c->colscale[k]);
            return XDC_ERR_CORRUPT;
        }
    }
    p += (size_t)r * 2;
    size_t cb = code_bytes(cfg);
    float half = (float)((1 << cfg->bits) - 1) / 2;
    for (size_t n = 0; n < rows; n++) {
        float step = row_scale(*p++);
        for (int k = 0; k < r; k++) c->coef[k] = ((float)get_code(p, k, cfg->bits) - half) * step * c->colscale[k];
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
