/* test_codec_wire_cuda.c — the codecs' wire bytes on the CUDA device against the CPU's, for the GPU window
 * (tests/gpu/run.sh, step codec-wire): every codec (none, bf16, int8, int4, topk, sparse) × zstd {0, 3},
 * three rounds of encode with error feedback from device memory and decode-accumulate into device memory,
 * beside the CPU backend on the same inputs. The wire bytes must be equal byte for byte every round (the
 * kernels' numeric contract, kernels/xdc_quant.h, makes them so); the accumulated decode and the residual
 * are held to 1e-9 + 1e-6·|cpu| (test_quant_cuda.c's decode tolerance; 0 on cpu-strict).
 *
 * Printed per codec and level, so the window's log carries numbers: the wire sizes on each device, the first
 * differing byte offset (or none), and the decode's and the residual's max_abs / max_rel against the CPU.
 * Without a GPU the CUDA test skips; its cpu-strict twin runs the same code here. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "compression/xdc_codec.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"

#include <math.h>
#include <stdio.h>

static const char *const codecs[] = {"none", "bf16", "int8:128", "int4:64", "topk:0.05", "sparse:0.05:3"};
static const int levels[] = {0, 3};

static void fill_grad(float *x, size_t n, uint64_t seed)
{
    xdc_rng rng;
    xdc_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) x[i] = xdc_rng_normal(&rng) * 1e-3f * (xdc_rng_below(&rng, 50) ? 1.0f : 20.0f);
}

static xdc_codec *make(const char *spec, size_t n, size_t chunk, int zstd, const xdc_kern_backend *be)
{
    xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_codec_parse(spec, &cfg, &d) == XDC_OK, "%s: %s", spec, d.msg);
    cfg.n_elems = n, cfg.chunk_elems = chunk, cfg.zstd_level = zstd, cfg.error_feedback = true, cfg.backend = be;
    xdc_codec *c = NULL;
    XDC_ASSERT_MSG(xdc_codec_create(&cfg, &c, &d) == XDC_OK, "%s on %s: %s", spec, be ? be->name : "cpu", d.msg);
    return c;
}

/* Largest |a - b| and |a - b| / |a|; fails past tol_abs + tol_rel·|a|. */
static void compare(const float *a, const float *b, size_t n, double tol_rel, double tol_abs, const char *what,
                    double *max_abs, double *max_rel)
{
    *max_abs = *max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > *max_abs) *max_abs = d;
        if (fabs(a[i]) > 1e-30 && d / fabs(a[i]) > *max_rel) *max_rel = d / fabs(a[i]);
        if (!(d <= tol_abs + tol_rel * fabs(a[i]))) XDC_FAIL("%s[%zu]: cpu %.9g, device %.9g", what, i, a[i], b[i]);
    }
    XDC_ASSERT(1);
}

static void wire_matches_cpu(xdc_backend_kind kind)
{
    if (kind == XDC_BACKEND_CUDA && xdc_kern_cuda_device_count() <= 0)
        xdc_test_skip("no GPU: no CUDA device visible (or no CUDA in this build)");
    const xdc_kern_backend *be = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(kind, &be, NULL));
    const xdc_device_ops *dev = be->device;
    bool exact = kind == XDC_BACKEND_CPU_STRICT;
    double tol_rel = exact ? 0 : 1e-6, tol_abs = exact ? 0 : 1e-9;
    size_t n = 100000, chunk = 30000, bytes = n * sizeof(float);
    float *x = xdc_malloc(bytes), *acc = xdc_malloc(bytes), *got = xdc_malloc(bytes);
    float *dx = NULL, *dacc = NULL;
    XDC_ASSERT_OK(dev->mem_alloc((void **)&dx, bytes));
    XDC_ASSERT_OK(dev->mem_alloc((void **)&dacc, bytes));
    int checked = 0;
    for (size_t ci = 0; ci < sizeof codecs / sizeof codecs[0]; ci++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
            xdc_codec *c = make(codecs[ci], n, chunk, levels[li], NULL),
                      *g = make(codecs[ci], n, chunk, levels[li], be);
            size_t cap = xdc_codec_bound(c, n), lc = 0, lg = 0, total_c = 0, total_g = 0;
            long first_diff = -1;
            int diff_round = -1;
            uint8_t *wc = xdc_malloc(cap), *wg = NULL;
            XDC_ASSERT_OK(dev->host_alloc((void **)&wg, cap));
            memset(acc, 0, bytes);
            XDC_ASSERT_OK(dev->memset(dacc, 0, bytes, NULL));
            xdc_diag d = {{0}};
            for (int round = 0; round < 3; round++) {
                fill_grad(x, n, 300 + (uint64_t)round);
                XDC_ASSERT_OK(dev->copy_h2d(dx, x, bytes, NULL));
                XDC_ASSERT_OK(xdc_codec_encode(c, x, n, wc, cap, &lc, NULL));
                XDC_ASSERT_MSG(xdc_codec_encode(g, dx, n, wg, cap, &lg, &d) == XDC_OK, "%s encode: %s", codecs[ci],
                               d.msg);
                total_c += lc, total_g += lg;
                if (first_diff < 0 && (lc != lg || memcmp(wc, wg, lc) != 0)) {
                    size_t i = 0;
                    while (i < lc && i < lg && wc[i] == wg[i]) i++;
                    first_diff = (long)i, diff_round = round;
                }
                /* each decodes its own bytes, so a wire difference does not hide a decode difference */
                XDC_ASSERT_OK(xdc_codec_decode(c, wc, lc, acc, n, XDC_CODEC_ACCUMULATE, NULL));
                XDC_ASSERT_MSG(xdc_codec_decode(g, wg, lg, dacc, n, XDC_CODEC_ACCUMULATE, &d) == XDC_OK,
                               "%s decode: %s", codecs[ci], d.msg);
            }
            XDC_ASSERT_OK(dev->copy_d2h(got, dacc, bytes, NULL));
            XDC_ASSERT_OK(dev->stream_sync(NULL));
            char what[96];
            snprintf(what, sizeof what, "%s zstd %d decoded", codecs[ci], levels[li]);
            double dec_abs, dec_rel, res_abs = 0, res_rel = 0;
            compare(acc, got, n, tol_rel, tol_abs, what, &dec_abs, &dec_rel);
            if (xdc_codec_residual(c)) {
                XDC_ASSERT_OK(dev->copy_d2h(got, xdc_codec_residual(g), bytes, NULL));
                XDC_ASSERT_OK(dev->stream_sync(NULL));
                snprintf(what, sizeof what, "%s zstd %d residual", codecs[ci], levels[li]);
                compare(xdc_codec_residual(c), got, n, tol_rel, tol_abs, what, &res_abs, &res_rel);
            }
            char diff[64] = "none";
            if (first_diff >= 0) snprintf(diff, sizeof diff, "%ld (round %d)", first_diff, diff_round);
            printf(
                "codec_wire %s codec=%s zstd=%d rounds=3 cpu_bytes=%zu %s_bytes=%zu first_diff=%s decode max_abs=%.3g "
                "max_rel=%.3g residual max_abs=%.3g max_rel=%.3g tol=%.3g+%.3g*|cpu|\n",
                be->name, codecs[ci], levels[li], total_c, be->name, total_g, diff, dec_abs, dec_rel, res_abs, res_rel,
                tol_abs, tol_rel);
            XDC_ASSERT_MSG(first_diff < 0, "%s zstd %d: wire bytes differ from the cpu's at offset %ld of round %d",
                           codecs[ci], levels[li], first_diff, diff_round);
            checked++;
            dev->host_free(wg);
            xdc_free(wc);
            xdc_codec_destroy(c), xdc_codec_destroy(g);
        }
    XDC_ASSERT_EQ(checked, 12);
    printf("codec_wire %s: %d codec x zstd pairs, wire bytes equal to the cpu's in every round\n", be->name, checked);
    dev->mem_free(dx), dev->mem_free(dacc);
    xdc_free(x), xdc_free(acc), xdc_free(got);
}

XDC_TEST(codec_wire_bytes_on_cuda_equal_cpu) { wire_matches_cpu(XDC_BACKEND_CUDA); }

XDC_TEST(codec_wire_bytes_on_strict_equal_cpu_with_figures) { wire_matches_cpu(XDC_BACKEND_CPU_STRICT); }
