/* test_lowrank.c — compression/xdc_lowrank.h: name parsing (activations and gradients apart), the
 * round-trip error bound on low-rank data (projection + quantization), the basis shipped bit for bit and
 * refreshed on schedule, lost or reordered messages refused, the wire bytes against bf16 (>= 10x for the
 * default pair at C=64), identical bytes for identical input, and non-finite input refused. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "compression/xdc_lowrank.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ROWS 1024 /* one microbatch of the tiny model: 16 sequences of 64 tokens */
#define COLS 64

/* A context for the activations (grad 0) or the gradients (grad 1) of `spec`; cfg: its settings. */
static xdc_lowrank *make(const char *spec, int grad, xdc_lowrank_cfg *cfg)
{
    xdc_diag d = {{0}};
    memset(cfg, 0, sizeof *cfg);
    cfg->cols = COLS;
    cfg->rows = ROWS;
    xdc_lowrank_cfg bwd = *cfg;
    XDC_ASSERT_MSG(xdc_lowrank_parse(spec, cfg, &bwd, &d) == XDC_OK, "%s: %s", spec, d.msg);
    if (grad) *cfg = bwd;
    xdc_lowrank *c = NULL;
    XDC_ASSERT_MSG(xdc_lowrank_create(cfg, &c, &d) == XDC_OK, "%s: %s", spec, d.msg);
    return c;
}

/* ROWS × COLS rows in a random `rank`-dimensional subspace (coefficients of decreasing size), plus
 * `noise` of isotropic Gaussian noise, and a common offset (activations have a mean direction). */
static void fill_lowrank(float *x, int rank, float noise, uint64_t seed)
{
    static float dirs[COLS * COLS];
    xdc_rng rng;
    xdc_rng_seed(&rng, seed);
    for (int i = 0; i < rank * COLS; i++) dirs[i] = xdc_rng_normal(&rng);
    for (int n = 0; n < ROWS; n++)
        for (int i = 0; i < COLS; i++) x[n * COLS + i] = noise * xdc_rng_normal(&rng) + 0.5f * dirs[i];
    for (int n = 0; n < ROWS; n++)
        for (int k = 0; k < rank; k++) {
            float a = xdc_rng_normal(&rng) / (1.0f + 0.2f * (float)k);
            for (int i = 0; i < COLS; i++) x[n * COLS + i] += a * dirs[k * COLS + i];
        }
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(e / s);
}

XDC_TEST(lowrank_parse_names_and_defaults)
{
    xdc_lowrank_cfg f = {.cols = COLS}, g = {.cols = COLS};
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank", &f, &g, &d)); /* the measured pair */
    XDC_ASSERT(f.rank == COLS / 4 && f.bits == 4 && f.refresh == 2);
    XDC_ASSERT(g.rank == COLS / 2 && g.bits == 3 && g.refresh == 2);
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank:8:int5:5", &f, &g, &d)); /* the gradients as the activations */
    XDC_ASSERT(f.rank == 8 && f.bits == 5 && f.refresh == 5);
    XDC_ASSERT(g.rank == 8 && g.bits == 5 && g.refresh == 5);
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank:12/40:int3:1", &f, &g, &d));
    XDC_ASSERT(f.rank == 12 && f.bits == 4 && f.refresh == 2);
    XDC_ASSERT(g.rank == 40 && g.bits == 3 && g.refresh == 1);
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank/20", &f, &g, &d));
    XDC_ASSERT(f.rank == COLS / 4 && g.rank == 20 && g.bits == 3);
    const char *bad[] = {"lowrank:",        "lowrank:0",  "lowrank:8:int2",      "lowrank:8:int9", "lowrank:8:int4:0",
                         "lowrank:8:int8x", "lowrank:8/", "lowrank:8/16:int4/4", "lowrankx",       "bf16"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        XDC_ASSERT_MSG(xdc_lowrank_parse(bad[i], &f, &g, &d) == XDC_ERR_CONFIG, "'%s' accepted", bad[i]);
    XDC_ASSERT(xdc_lowrank_named("lowrank:4") && !xdc_lowrank_named("lowrankish") && !xdc_lowrank_named("int8"));
    xdc_lowrank *c = NULL;
    f = (xdc_lowrank_cfg){.cols = COLS, .rank = COLS + 1, .bits = 8, .refresh = 1, .rows = 1};
    XDC_ASSERT_ERR(xdc_lowrank_create(&f, &c, &d), XDC_ERR_CONFIG);
}

/* Per row: |x - x̂| <= |x - Px| + 1.02 · sqrt(Σ_k (col_k · step / 2)²) (col_k: coefficient k's scale in the
 * message, read from the wire; step: the row's largest |c_k| / col_k over 2^(B-1), rounded up on the
 * scale byte's 2^(1/8) grid; 1.02 bounds the int8 basis' norm); on rank-16 data the projection loses only
 * the noise, so the error is the quantizer's. */
XDC_TEST(lowrank_round_trip_error_is_bounded_on_low_rank_data)
{
    static float x[ROWS * COLS], y[ROWS * COLS];
    static uint8_t wire[1 << 20];
    const char *specs[] = {"lowrank:16:int8", "lowrank:16:int4", "lowrank:16:int3"};
    const double want[] = {0.01, 0.10, 0.20};
    for (int s = 0; s < 3; s++) {
        xdc_lowrank_cfg cfg;
        xdc_lowrank *enc = make(specs[s], 0, &cfg), *dec = make(specs[s], 0, &cfg);
        xdc_diag d = {{0}};
        fill_lowrank(x, 16, 1e-4f, 7 + (uint64_t)s);
        size_t len;
        XDC_ASSERT_OK(xdc_lowrank_encode(enc, x, ROWS, wire, sizeof wire, &len, &d));
        XDC_ASSERT_OK(xdc_lowrank_decode(dec, wire, len, y, ROWS, &d));
        const float *b = xdc_lowrank_basis(dec, NULL);
        double levels = 1 << cfg.bits, worst = 0, col[16];
        const uint8_t *cs = wire + XDC_LOWRANK_HEADER + 16 * (COLS + 2); /* the column scales, after the basis */
        for (int k = 0; k < 16; k++) {
            uint32_t bits = (uint32_t)(cs[2 * k] | cs[2 * k + 1] << 8) << 16;
            float f;
            memcpy(&f, &bits, 4);
            col[k] = f;
            XDC_ASSERT(col[k] > 0);
        }
        for (int n = 0; n < ROWS; n++) {
            double proj[COLS] = {0}, c[16], amax = 0, e = 0, out = 0, qerr = 0;
            for (int k = 0; k < 16; k++) {
                c[k] = 0;
                for (int i = 0; i < COLS; i++) c[k] += (double)b[k * COLS + i] * x[n * COLS + i];
                amax = fmax(amax, fabs(c[k]) / col[k]);
                for (int i = 0; i < COLS; i++) proj[i] += c[k] * b[k * COLS + i];
            }
            for (int k = 0; k < 16; k++) { /* |c_k - ĉ_k| <= col_k · step / 2 */
                double q = col[k] * 2 * amax / levels * 1.0906 / 2 + 1e-5 * fabs(c[k]);
                qerr += q * q;
            }
            for (int i = 0; i < COLS; i++) {
                e += ((double)x[n * COLS + i] - y[n * COLS + i]) * ((double)x[n * COLS + i] - y[n * COLS + i]);
                out += ((double)x[n * COLS + i] - proj[i]) * ((double)x[n * COLS + i] - proj[i]);
            }
            double bound = sqrt(out) + 1.02 * sqrt(qerr);
            worst = fmax(worst, sqrt(e) / bound);
        }
        double r = rel_err(x, y, ROWS * COLS);
        printf("%s: relative error %.4f (bound %.2f), worst row error / its bound %.3f\n", specs[s], r, want[s], worst);
        XDC_ASSERT_MSG(worst <= 1.0, "%s: a row's error is %.3f times its bound", specs[s], worst);
        XDC_ASSERT_MSG(r <= want[s], "%s: relative error %.4f above %.2f", specs[s], r, want[s]);
        xdc_lowrank_destroy(enc);
        xdc_lowrank_destroy(dec);
    }
}

XDC_TEST(lowrank_ships_the_basis_exactly_and_refuses_lost_messages)
{
    static float x[ROWS * COLS], y[ROWS * COLS];
    static uint8_t wire[4][1 << 18];
    size_t len[4];
    xdc_lowrank_cfg cfg;
    xdc_lowrank *enc = make("lowrank:16:int4:3", 0, &cfg), *dec = make("lowrank:16:int4:3", 0, &cfg);
    xdc_lowrank *again = make("lowrank:16:int4:3", 0, &cfg);
    xdc_diag d = {{0}};
    size_t basis_bytes = 16 * COLS * sizeof(float), basis_wire = 16 * (COLS + 2);
    for (int m = 0; m < 4; m++) { /* refresh 3: messages 0 and 3 carry a basis */
        fill_lowrank(x, 16, 1e-3f, 100 + (uint64_t)m);
        XDC_ASSERT_OK(xdc_lowrank_encode(enc, x, ROWS, wire[m], sizeof wire[m], &len[m], &d));
        XDC_ASSERT_OK(xdc_lowrank_decode(dec, wire[m], len[m], y, ROWS, &d));
        uint32_t ie, id;
        const float *be = xdc_lowrank_basis(enc, &ie), *bd = xdc_lowrank_basis(dec, &id);
        XDC_ASSERT_EQ(ie, id);
        XDC_ASSERT_EQ(ie, m < 3 ? 1u : 2u);
        XDC_ASSERT_MSG(memcmp(be, bd, basis_bytes) == 0, "message %d: the two ends hold different bases", m);
        XDC_ASSERT_EQ(len[m], XDC_LOWRANK_HEADER + (m % 3 == 0 ? basis_wire : 0) + 16 * 2 + ROWS * (1 + 8));
        size_t l2;
        static uint8_t w2[1 << 18];
        XDC_ASSERT_OK(xdc_lowrank_encode(again, x, ROWS, w2, sizeof w2, &l2, &d));
        XDC_ASSERT_MSG(l2 == len[m] && memcmp(w2, wire[m], l2) == 0, "message %d: same input, different bytes", m);
    }
    /* A fresh receiver that missed message 0 (the basis) and one given message 3 before 1 refuse. */
    xdc_lowrank *late = make("lowrank:16:int4:3", 0, &cfg);
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[1], len[1], y, ROWS, &d), XDC_ERR_PROTO);
    XDC_ASSERT_OK(xdc_lowrank_decode(late, wire[0], len[0], y, ROWS, &d));
    XDC_ASSERT_OK(xdc_lowrank_decode(late, wire[3], len[3], y, ROWS, &d));
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[1], len[1], y, ROWS, &d), XDC_ERR_PROTO);
    wire[2][6] ^= 1; /* columns */
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[2], len[2], y, ROWS, &d), XDC_ERR_CORRUPT);
    wire[2][6] ^= 1;
    /* A NaN scale, of a basis row in message 0 or of a column in message 2, is corrupt. */
    xdc_lowrank *fresh = make("lowrank:16:int4:3", 0, &cfg);
    uint8_t keep[2] = {wire[0][XDC_LOWRANK_HEADER], wire[0][XDC_LOWRANK_HEADER + 1]};
    wire[0][XDC_LOWRANK_HEADER] = wire[2][XDC_LOWRANK_HEADER] = 0xc1;
    wire[0][XDC_LOWRANK_HEADER + 1] = wire[2][XDC_LOWRANK_HEADER + 1] = 0x7f;
    XDC_ASSERT_ERR(xdc_lowrank_decode(fresh, wire[0], len[0], y, ROWS, &d), XDC_ERR_CORRUPT);
    memcpy(wire[0] + XDC_LOWRANK_HEADER, keep, 2);
    XDC_ASSERT_OK(xdc_lowrank_decode(fresh, wire[0], len[0], y, ROWS, &d));
    XDC_ASSERT_OK(xdc_lowrank_decode(fresh, wire[1], len[1], y, ROWS, &d));
    XDC_ASSERT_ERR(xdc_lowrank_decode(fresh, wire[2], len[2], y, ROWS, &d), XDC_ERR_CORRUPT);
    xdc_lowrank_destroy(fresh);
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[3], len[3] - 1, y, ROWS, &d), XDC_ERR_CORRUPT);
    /* Non-finite input is refused and does not count as a message. */
    x[77] = NAN;
    XDC_ASSERT_ERR(xdc_lowrank_encode(enc, x, ROWS, wire[0], sizeof wire[0], &len[0], &d), XDC_ERR_RANGE);
    x[77] = INFINITY;
    XDC_ASSERT_ERR(xdc_lowrank_encode(enc, x, ROWS, wire[0], sizeof wire[0], &len[0], &d), XDC_ERR_RANGE);
    uint32_t id;
    xdc_lowrank_basis(enc, &id);
    XDC_ASSERT_EQ(id, 2u);
    xdc_lowrank_destroy(enc);
    xdc_lowrank_destroy(dec);
    xdc_lowrank_destroy(again);
    xdc_lowrank_destroy(late);
}

/* C = 64, plain "lowrank": an activation row is a scale byte and 16 int4 codes (9 bytes), a gradient row
 * a scale byte and 32 int3 codes (13 bytes), against bf16's 128 each (x11.6 for the pair); with a basis
 * (int8, 16 and 32 rows of 66 bytes) in every second message of 1024 rows, still >= 10x. Counted from what
 * encode wrote. */
XDC_TEST(lowrank_default_pair_sends_ten_times_fewer_bytes_than_bf16)
{
    static float x[ROWS * COLS];
    static uint8_t wire[1 << 18];
    xdc_lowrank_cfg cfg;
    xdc_lowrank *act = make("lowrank", 0, &cfg), *grad = make("lowrank", 1, &cfg);
    xdc_diag d = {{0}};
    size_t total = 0, len;
    for (int m = 0; m < 4; m++) {
        fill_lowrank(x, 16, 1e-2f, 300 + (uint64_t)m);
        XDC_ASSERT_OK(xdc_lowrank_encode(act, x, ROWS, wire, sizeof wire, &len, &d));
        XDC_ASSERT(len <= xdc_lowrank_bound(act, ROWS));
        total += len;
        XDC_ASSERT_OK(xdc_lowrank_encode(grad, x, ROWS, wire, sizeof wire, &len, &d));
        XDC_ASSERT(len <= xdc_lowrank_bound(grad, ROWS));
        total += len;
    }
    double bf16 = 8.0 * ROWS * COLS * 2;
    printf("bf16 %.0f bytes for 4 activations and 4 gradients; lowrank %zu (x%.2f)\n", bf16, total,
           bf16 / (double)total);
    XDC_ASSERT_EQ(total, 8 * (size_t)XDC_LOWRANK_HEADER + 2 * (16 + 32) * (COLS + 2) + 4 * (16 + 32) * 2 +
                             4 * (size_t)ROWS * (9 + 13));
    XDC_ASSERT_MSG(bf16 / (double)total >= 10.0, "x%.2f", bf16 / (double)total);
    xdc_lowrank_destroy(act);
    xdc_lowrank_destroy(grad);
}
