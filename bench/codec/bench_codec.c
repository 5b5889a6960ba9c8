/* bench_codec.c — codec throughput and quality on 64 MiB of gradient-like fp32 (one core): per codec,
 * wire bytes / fp32 bytes, encode, decode and accumulating-decode GB/s (of fp32 data), relative RMSE of
 * one encode; next to memcpy and plain ZSTD_compress level 1 on the raw fp32 measured in the same run;
 * then which zstd level each link speed gets and whether shuffled-zstd output keeps up with that link.
 * Speeds are per second of the thread's CPU time. The last line is the machine-readable summary
 * (key=value). */
#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "compression/xdc_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#define BENCH_ELEMS (16u << 20) /* 64 MiB of fp32 */
#define BENCH_REPS  3

/* Seconds of this thread's CPU time: the machine is often shared, and time spent descheduled is not the
 * codec's (cache and memory contention from other work still count). */
static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static double secs(uint64_t t0) { return (double)(cpu_ns() - t0) / 1e9; }

static void die(const char *what, xdc_err_t rc, const xdc_diag *d)
{
    fprintf(stderr, "bench_codec: %s: %s (%s)\n", what, xdc_strerror(rc), d ? d->msg : "");
    exit(70);
}

typedef struct codec_result {
    double ratio, enc_gbps, dec_gbps, acc_gbps, rmse; /* acc: decode in ACCUMULATE mode (out += decoded) */
} codec_result;

static codec_result run_codec(const char *spec, int zstd_level, const float *x, float *y, uint8_t *wire, size_t cap)
{
    size_t n = BENCH_ELEMS, len = 0;
    xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_codec_parse(spec, &cfg, &d);
    if (rc) die(spec, rc, &d);
    cfg.n_elems = n;
    cfg.zstd_level = zstd_level;
    xdc_codec *c = NULL;
    if ((rc = xdc_codec_create(&cfg, &c, &d))) die(spec, rc, &d);
    if (xdc_codec_bound(c, n) > cap) die("bound exceeds the wire buffer", XDC_ERR_INTERNAL, NULL);
    codec_result r = {0};
    /* First encode from a zero residual gives the quality figure (and touches the context's memory). */
    if ((rc = xdc_codec_encode(c, x, n, wire, cap, &len, &d))) die(spec, rc, &d);
    if ((rc = xdc_codec_decode(c, wire, len, y, n, XDC_CODEC_WRITE, &d))) die(spec, rc, &d);
    double se = 0, sx = 0;
    for (size_t i = 0; i < n; i++) se += (double)(x[i] - y[i]) * (x[i] - y[i]), sx += (double)x[i] * x[i];
    r.rmse = sqrt(se / sx);
    double best_e = 1e9, best_d = 1e9, best_a = 1e9;
    for (int rep = 0; rep < BENCH_REPS; rep++) {
        uint64_t t0 = cpu_ns();
        if ((rc = xdc_codec_encode(c, x, n, wire, cap, &len, &d))) die(spec, rc, &d);
        best_e = fmin(best_e, secs(t0));
        t0 = cpu_ns();
        if ((rc = xdc_codec_decode(c, wire, len, y, n, XDC_CODEC_WRITE, &d))) die(spec, rc, &d);
        best_d = fmin(best_d, secs(t0));
        t0 = cpu_ns();
        if ((rc = xdc_codec_decode(c, wire, len, y, n, XDC_CODEC_ACCUMULATE, &d))) die(spec, rc, &d);
        best_a = fmin(best_a, secs(t0));
    }
    r.ratio = (double)len / (double)(n * sizeof(float));
    r.enc_gbps = n * 4.0 / best_e / 1e9;
    r.dec_gbps = n * 4.0 / best_d / 1e9;
    r.acc_gbps = n * 4.0 / best_a / 1e9;
    xdc_codec_destroy(c);
    return r;
}

int main(void)
{
    size_t n = BENCH_ELEMS, bytes = n * sizeof(float), cap = bytes + bytes / 8 + (1u << 20);
    float *x = xdc_aligned_alloc(64, bytes), *y = xdc_aligned_alloc(64, bytes);
    uint8_t *wire = xdc_aligned_alloc(64, cap);
    if (!x || !y || !wire) die("allocation", XDC_ERR_NOMEM, NULL);
    xdc_rng rng;
    xdc_rng_seed(&rng, 2024);
    /* Gradient-like: N(0, 1e-3) with a 2% tail twenty times wider. */
    for (size_t i = 0; i < n; i++) x[i] = xdc_rng_normal(&rng) * 1e-3f * (xdc_rng_below(&rng, 50) ? 1.0f : 20.0f);
    memset(y, 0, bytes);
    memset(wire, 0, cap);

    double best = 1e9;
    for (int rep = 0; rep < BENCH_REPS; rep++) {
        uint64_t t0 = cpu_ns();
        memcpy(y, x, bytes);
        best = fmin(best, secs(t0));
    }
    double memcpy_gbps = bytes / best / 1e9;
    uint64_t t0 = cpu_ns();
    size_t z = ZSTD_compress(wire, cap, x, bytes, 1);
    double zstd_gbps = bytes / secs(t0) / 1e9, zstd_ratio = (double)z / bytes;
    printf("# codec bench: %zu MiB gradient-like fp32, one core, best of %d\n", bytes >> 20, BENCH_REPS);
    printf("%-12s %6s %10s %10s %10s %10s %10s\n", "codec", "zstd", "wire/fp32", "enc_GB/s", "dec_GB/s", "acc_GB/s",
           "rel_rmse");
    printf("%-12s %6s %10s %10.2f %10s %10s %10s\n", "memcpy", "-", "1.000", memcpy_gbps, "-", "-", "0");
    printf("%-12s %6d %10.3f %10.2f %10s %10s %10s\n", "ZSTD_compress", 1, zstd_ratio, zstd_gbps, "-", "-", "0");

    static const char *const specs[] = {"none", "bf16", "int8:128", "int4:64", "topk:0.01", "sparse:0.02:2"};
    static const int levels[] = {0, 1};
    codec_result res[6][2];
    for (int s = 0; s < 6; s++)
        for (int l = 0; l < 2; l++) {
            res[s][l] = run_codec(specs[s], levels[l], x, y, wire, cap);
            printf("%-12s %6d %10.3f %10.2f %10.2f %10.2f %10.2e\n", specs[s], levels[l], res[s][l].ratio,
                   res[s][l].enc_gbps, res[s][l].dec_gbps, res[s][l].acc_gbps, res[s][l].rmse);
        }

    /* zstd level per link: the codec's wire output rate at the picked level must reach the link rate. */
    printf("# link_gbps picked_level bf16_wire_gbps keeps_up\n");
    static const double links[] = {0.1, 0.5, 1.0, 2.0, 5.0, 25.0}; /* the table's edges */
    int all_keep_up = 1;
    for (int i = 0; i < 6; i++) {
        int lvl = xdc_codec_zstd_level_for_link(links[i]);
        codec_result r = run_codec("bf16", lvl, x, y, wire, cap);
        double wire_gbps = r.enc_gbps * r.ratio * 8.0;
        int ok = wire_gbps >= links[i];
        if (lvl != 0) all_keep_up &= ok; /* level 0 runs no zstd: nothing to judge */
        printf("  %6.1f %4d %8.2f %s\n", links[i], lvl, wire_gbps, lvl == 0 ? "n/a (zstd off)" : ok ? "yes" : "NO");
    }
    /* int8/int4/top-k/sparse keys: error feedback on; "encode" without zstd, the _zstd keys and the top-k
     * and sparse speeds with level 1 (sparse_vs_topk, the ratio of their encode speeds, is the figure that
     * holds on a loaded machine). */
    printf("int8_encode_vs_memcpy=%.3f int8_zstd_encode_vs_memcpy=%.3f topk_gbps=%.2f int8_ratio=%.3f "
           "int8_zstd_ratio=%.3f int4_zstd_ratio=%.3f bf16_zstd_ratio=%.3f topk_zstd_ratio=%.4f sparse_gbps=%.2f "
           "sparse_vs_topk=%.2f sparse_dec_gbps=%.2f sparse_ratio=%.4f sparse_zstd_ratio=%.4f zstd1_raw_ratio=%.3f "
           "zstd1_gbps=%.2f memcpy_gbps=%.2f zstd_keeps_up=%s\n",
           res[2][0].enc_gbps / memcpy_gbps, res[2][1].enc_gbps / memcpy_gbps, res[4][1].enc_gbps, res[2][0].ratio,
           res[2][1].ratio, res[3][1].ratio, res[1][1].ratio, res[4][1].ratio, res[5][1].enc_gbps,
           res[5][1].enc_gbps / res[4][1].enc_gbps, res[5][1].dec_gbps, res[5][0].ratio, res[5][1].ratio, zstd_ratio,
           zstd_gbps, memcpy_gbps, all_keep_up ? "yes" : "no");
    xdc_free(x), xdc_free(y), xdc_free(wire);
    return 0;
}
