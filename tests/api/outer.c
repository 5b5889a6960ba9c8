/* outer.c — a libxdc program for the suite (tests/e2e/test_api.c): DiLoCo outer rounds over a list of two
 * parameters. Every member starts from 1.0, each "inner phase" moves its parameters by -(rank + 1) / 8,
 * and with the run file's codec none, diloco.outer_lr 0.5 and outer_momentum 0.5 the two rounds must give
 * exactly (all values are multiples of 1/128):
 *   delta = mean (rank + 1) / 8 = (size + 1) / 16; round 1: m = delta, global = 1 - 0.5 (delta + 0.5 m);
 *   round 2: m = 0.5 m + delta, global -= 0.5 (delta + 0.5 m).
 * Also: an all-reduce on the outer tag and a round on a tag never set up are XDC_STATUS_INVALID;
 * xdc_comm_get_stats counts bytes after the rounds, fills only what a shorter (older) struct covers, and
 * refuses a struct_size of 0; xdc_comm_check_same passes equal values and refuses the ranks. Prints
 * "outer: rank R: 2 rounds exact" and exits 0, or says what differed and exits 1. */
#include <xdc.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(xdc_comm *c, const char *what, int st)
{
    fprintf(stderr, "outer: %s: %s: %s\n", what, xdc_status_string(st), xdc_comm_last_error(c));
    return 1;
}

int main(void)
{
    char err[1024];
    xdc_comm *c;
    int st = xdc_comm_create(NULL, &c, err, sizeof err);
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "outer: create: %s: %s\n", xdc_status_string(st), err);
        return 1;
    }
    int rank = xdc_comm_rank(c), size = xdc_comm_size(c);
    static float a[100], b[37]; /* the two parameters, fp32 host */
    float *params[2] = {a, b};
    size_t counts[2] = {100, 37};
    for (int i = 0; i < 100; i++) a[i] = 1.0f;
    for (int i = 0; i < 37; i++) b[i] = 1.0f;
    if ((st = xdc_outer_init(c, 3, 2, params, counts)) != XDC_SUCCESS) return fail(c, "outer_init", st);
    if ((st = xdc_allreduce(c, 3, a, 100)) != XDC_STATUS_INVALID) return fail(c, "all-reduce on an outer tag", st);
    if ((st = xdc_outer_round(c, 9, params)) != XDC_STATUS_INVALID) return fail(c, "round on tag 9", st);
    double delta = (size + 1) / 16.0, m = 0, global = 1;
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < 100; i++) a[i] -= (float)(rank + 1) / 8.0f;
        for (int i = 0; i < 37; i++) b[i] -= (float)(rank + 1) / 8.0f;
        if ((st = xdc_outer_round(c, 3, params)) != XDC_SUCCESS) return fail(c, "outer_round", st);
        m = 0.5 * m + delta;
        global -= 0.5 * (delta + 0.5 * m);
        for (int i = 0; i < 137; i++) {
            float got = i < 100 ? a[i] : b[i - 100];
            if (got != (float)global) {
                fprintf(stderr, "outer: rank %d round %d: value %d is %.9g, want %.9g\n", rank, round, i, got, global);
                return 1;
            }
        }
    }
    /* the WAN bytes of those rounds; a caller's older, shorter struct gets only the fields it has */
    xdc_comm_stats full = XDC_COMM_STATS_INIT, old = {.struct_size = offsetof(xdc_comm_stats, wan_rx_bytes)};
    old.wan_rx_bytes = 12345;
    if ((st = xdc_comm_get_stats(c, &full)) != XDC_SUCCESS) return fail(c, "get_stats", st);
    if ((st = xdc_comm_get_stats(c, &old)) != XDC_SUCCESS) return fail(c, "get_stats (short struct)", st);
    if (full.wan_tx_bytes == 0 || full.wan_rx_bytes == 0 || full.wan_raw_bytes == 0 ||
        full.wan_wire_bytes <= full.wan_tx_bytes || old.wan_tx_bytes == 0 || old.wan_rx_bytes != 12345 ||
        old.struct_size != offsetof(xdc_comm_stats, wan_rx_bytes)) {
        fprintf(stderr, "outer: rank %d: stats tx %llu rx %llu raw %llu wire %llu; short struct tx %llu rx %llu\n",
                rank, (unsigned long long)full.wan_tx_bytes, (unsigned long long)full.wan_rx_bytes,
                (unsigned long long)full.wan_raw_bytes, (unsigned long long)full.wan_wire_bytes,
                (unsigned long long)old.wan_tx_bytes, (unsigned long long)old.wan_rx_bytes);
        return 1;
    }
    xdc_comm_stats none = {.struct_size = 0};
    if ((st = xdc_comm_get_stats(c, &none)) != XDC_STATUS_INVALID) return fail(c, "get_stats of size 0", st);
    /* every member holds 42; then each its own rank, which differ: refused on every member */
    if ((st = xdc_comm_check_same(c, 42)) != XDC_SUCCESS) return fail(c, "check_same of equal values", st);
    if ((st = xdc_comm_check_same(c, (uint64_t)rank)) != XDC_STATUS_CORRUPT)
        return fail(c, "check_same of different values", st);
    if ((st = xdc_comm_finalize(c)) != XDC_SUCCESS) return fail(c, "finalize", st);
    printf("outer: rank %d: 2 rounds exact (%.9g)\n", rank, global);
    xdc_comm_destroy(c);
    return 0;
}
