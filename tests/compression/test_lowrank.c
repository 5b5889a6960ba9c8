/* test_lowrank.c — compression/xdc_lowrank.h: name parsing, the round-trip error bound on low-rank data
 * (projection + quantization), the basis shipped bit for bit and refreshed on schedule, lost or
 * reordered messages refused, the wire bytes against bf16 (>= 10x at C=64, r=16, int4), identical bytes
 * for identical input, and non-finite input refused. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "compression/xdc_lowrank.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ROWS 1024 /* one microbatch of the tiny model: 16 sequences of 64 tokens */
#define COLS 64

static xdc_lowrank *make(const char *spec, xdc_lowrank_cfg *cfg)
{
    xdc_diag d = {{0}};
    memset(cfg, 0, sizeof *cfg);
    cfg->cols = COLS;
    cfg->rows = ROWS;
    XDC_ASSERT_MSG(xdc_lowrank_parse(spec, cfg, &d) == XDC_OK, "%s: %s", spec, d.msg);
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
    xdc_lowrank_cfg cfg = {.cols = COLS};
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank", &cfg, &d));
    XDC_ASSERT_EQ(cfg.rank, COLS / 4);
    XDC_ASSERT_EQ(cfg.bits, 8);
    XDC_ASSERT_EQ(cfg.refresh, 1);
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank:8:int4:5", &cfg, &d));
    XDC_ASSERT_EQ(cfg.rank, 8);
    XDC_ASSERT_EQ(cfg.bits, 4);
    XDC_ASSERT_EQ(cfg.refresh, 5);
    const char *bad[] = {"lowrank:", "lowrank:0", "lowrank:8:int3", "lowrank:8:int4:0", "lowrank:8:int8x",
                         "lowrankx", "bf16"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        XDC_ASSERT_MSG(xdc_lowrank_parse(bad[i], &cfg, &d) == XDC_ERR_CONFIG, "'%s' accepted", bad[i]);
    XDC_ASSERT(xdc_lowrank_named("lowrank:4") && !xdc_lowrank_named("lowrankish") && !xdc_lowrank_named("int8"));
    xdc_lowrank *c = NULL;
    cfg = (xdc_lowrank_cfg){.cols = COLS, .rank = COLS + 1, .bits = 8, .refresh = 1, .rows = 1};
    XDC_ASSERT_ERR(xdc_lowrank_create(&cfg, &c, &d), XDC_ERR_CONFIG);
}

/* Per row: |x - x̂| <= |x - Px| + sqrt(Σ_k (col_k · scale / 2)²) (col_k: coefficient k's scale in the
 * message, read from the wire; scale = the row's largest |c_k| / col_k over qmax, rounded up to bf16); on
 * rank-16 data the projection loses only the noise, so the error is the quantizer's. */
XDC_TEST(lowrank_round_trip_error_is_bounded_on_low_rank_data)
{
    static float x[ROWS * COLS], y[ROWS * COLS];
    static uint8_t wire[1 << 20];
    const char *specs[] = {"lowrank:16:int8", "lowrank:16:int4"};
    const double want[] = {0.01, 0.10};
    for (int s = 0; s < 2; s++) {
        xdc_lowrank_cfg cfg;
        xdc_lowrank *enc = make(specs[s], &cfg), *dec = make(specs[s], &cfg);
        xdc_diag d = {{0}};
        fill_lowrank(x, 16, 1e-4f, 7 + (uint64_t)s);
        size_t len;
        XDC_ASSERT_OK(xdc_lowrank_encode(enc, x, ROWS, wire, sizeof wire, &len, &d));
        XDC_ASSERT_OK(xdc_lowrank_decode(dec, wire, len, y, ROWS, &d));
        const float *b = xdc_lowrank_basis(dec, NULL);
        double qmax = cfg.bits == 8 ? 127 : 7, worst = 0, col[16];
        const uint8_t *cs = wire + XDC_LOWRANK_HEADER + 16 * COLS * 2; /* the column scales, after the basis */
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
            for (int k = 0; k < 16; k++) { /* |c_k - ĉ_k| <= col_k · row scale / 2 */
                double q = col[k] * amax / qmax * (1 + 1.0 / 128) / 2 + 1e-5 * fabs(c[k]);
                qerr += q * q;
            }
            for (int i = 0; i < COLS; i++) {
                e += ((double)x[n * COLS + i] - y[n * COLS + i]) * ((double)x[n * COLS + i] - y[n * COLS + i]);
                out += ((double)x[n * COLS + i] - proj[i]) * ((double)x[n * COLS + i] - proj[i]);
            }
            double bound = sqrt(out) + sqrt(qerr);
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
    xdc_lowrank *enc = make("lowrank:16:int4:3", &cfg), *dec = make("lowrank:16:int4:3", &cfg);
    xdc_lowrank *again = make("lowrank:16:int4:3", &cfg);
    xdc_diag d = {{0}};
    size_t basis_bytes = 16 * COLS * sizeof(float), basis_wire = 16 * COLS * 2;
    for (int m = 0; m < 4; m++) { /* refresh 3: messages 0 and 3 carry a basis */
        fill_lowrank(x, 16, 1e-3f, 100 + (uint64_t)m);
        XDC_ASSERT_OK(xdc_lowrank_encode(enc, x, ROWS, wire[m], sizeof wire[m], &len[m], &d));
        XDC_ASSERT_OK(xdc_lowrank_decode(dec, wire[m], len[m], y, ROWS, &d));
        uint32_t ie, id;
        const float *be = xdc_lowrank_basis(enc, &ie), *bd = xdc_lowrank_basis(dec, &id);
        XDC_ASSERT_EQ(ie, id);
        XDC_ASSERT_EQ(ie, m < 3 ? 1u : 2u);
        XDC_ASSERT_MSG(memcmp(be, bd, basis_bytes) == 0, "message %d: the two ends hold different bases", m);
        XDC_ASSERT_EQ(len[m], XDC_LOWRANK_HEADER + (m % 3 == 0 ? basis_wire : 0) + 16 * 2 + ROWS * (2 + 8));
        size_t l2;
        static uint8_t w2[1 << 18];
        XDC_ASSERT_OK(xdc_lowrank_encode(again, x, ROWS, w2, sizeof w2, &l2, &d));
        XDC_ASSERT_MSG(l2 == len[m] && memcmp(w2, wire[m], l2) == 0, "message %d: same input, different bytes", m);
    }
    /* A fresh receiver that missed message 0 (the basis) and one given message 3 before 1 refuse. */
    xdc_lowrank *late = make("lowrank:16:int4:3", &cfg);
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[1], len[1], y, ROWS, &d), XDC_ERR_PROTO);
    XDC_ASSERT_OK(xdc_lowrank_decode(late, wire[0], len[0], y, ROWS, &d));
    XDC_ASSERT_OK(xdc_lowrank_decode(late, wire[3], len[3], y, ROWS, &d));
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[1], len[1], y, ROWS, &d), XDC_ERR_PROTO);
    wire[2][6] ^= 1; /* columns */
    XDC_ASSERT_ERR(xdc_lowrank_decode(late, wire[2], len[2], y, ROWS, &d), XDC_ERR_CORRUPT);
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

/* C = 64, r = 16, int4: a row is 2 bytes of scale and 8 of codes against bf16's 128 (12.8x); with a basis
 * (2 KiB) in every message of 1024 rows, the default, still >= 10x. Counted from what encode wrote. */
XDC_TEST(lowrank_int4_rank16_sends_ten_times_fewer_bytes_than_bf16)
{
    static float x[ROWS * COLS];
    static uint8_t wire[1 << 18];
    xdc_lowrank_cfg cfg;
    xdc_lowrank *enc = make("lowrank:16:int4:16", &cfg), *every = make("lowrank:16:int4", &cfg);
    xdc_diag d = {{0}};
    size_t plain = 0, each = 0;
    for (int m = 0; m < 2; m++) {
        fill_lowrank(x, 16, 1e-2f, 300 + (uint64_t)m);
        XDC_ASSERT_OK(xdc_lowrank_encode(enc, x, ROWS, wire, sizeof wire, &plain, &d));
        XDC_ASSERT_OK(xdc_lowrank_encode(every, x, ROWS, wire, sizeof wire, &each, &d));
        XDC_ASSERT(each <= xdc_lowrank_bound(every, ROWS));
    }
    double bf16 = (double)ROWS * COLS * 2;
    printf("bf16 %.0f bytes a message; lowrank:16:int4:16 %zu without a basis (x%.2f); lowrank:16:int4 (a basis in "
           "each) %zu (x%.2f)\n",
           bf16, plain, bf16 / (double)plain, each, bf16 / (double)each);
    XDC_ASSERT_MSG(bf16 / (double)plain >= 10.0, "x%.2f without a basis", bf16 / (double)plain);
    XDC_ASSERT_MSG(bf16 / (double)each >= 10.0, "x%.2f with a basis in each message", bf16 / (double)each);
    xdc_lowrank_destroy(enc);
    xdc_lowrank_destroy(every);
}
