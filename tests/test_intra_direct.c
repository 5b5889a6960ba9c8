/* test_intra_direct.c — the CPU backend's single-copy collectives (messages of 64 KiB and more go
 * straight between the ranks' buffers) against the staging path: at 2, 3 and 4 ranks, with inputs whose
 * sums round differently in other orders, all_reduce and reduce_scatter must give every rank the bits of
 * a serial sum in rank order on both paths; and a group where one rank cannot (here: will not) copy
 * directly must fall back to staging on every rank alike instead of mismatching steps. */
#include "tests/test_intra_ranks.h"

#include "common/xdc_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIRECT_COUNT 70001 /* fp32: 280 KiB, above the single-copy threshold, odd, not divisible by 3 or 4 */

/* Rank r's element i: not a short binary fraction, so fp32 sums depend on their order. */
static float inexact_value(int r, size_t i)
{
    uint64_t h = ((uint64_t)r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return (float)(h % 2000003u) / 1234.567f - 800.0f;
}

/* The serial reference: element i summed over ranks in rank order in fp32 (scaled by 1/n for avg). */
static float rank_order_sum(int n, size_t i, xdc_intra_redop op)
{
    float acc = inexact_value(0, i);
    for (int r = 1; r < n; r++) acc += inexact_value(r, i);
    return op == XDC_INTRA_AVG && n > 1 ? acc * (1.0f / (float)n) : acc;
}

/* all_reduce in place and reduce_scatter of (n, DIRECT_COUNT) on `comm`, bitwise against the reference. */
static int check_rank_order(xdc_intra_comm *comm, intra_test_rank *tr, float *buf, float *out, const char *path)
{
    int me = xdc_intra_rank(comm), n = xdc_intra_size(comm);
    for (int opi = 0; opi < 2; opi++) {
        xdc_intra_redop op = (xdc_intra_redop)opi;
        for (size_t i = 0; i < DIRECT_COUNT; i++) buf[i] = inexact_value(me, i);
        RCHECK_OK(
            intra_test_run_op(tr, xdc_intra_all_reduce(comm, buf, buf, DIRECT_COUNT, XDC_INTRA_F32, op, &tr->req)), tr);
        for (size_t i = 0; i < DIRECT_COUNT; i++) {
            float want = rank_order_sum(n, i, op);
            RCHECK(memcmp(&buf[i], &want, sizeof want) == 0, tr,
                   "all_reduce (%s path) n=%d %s: [%zu] = %.9g, rank-order sum is %.9g", path, n, opi ? "avg" : "sum",
                   i, buf[i], want);
        }
        for (size_t i = 0; i < (size_t)n * DIRECT_COUNT; i++) buf[i] = inexact_value(me, i);
        RCHECK_OK(
            intra_test_run_op(tr, xdc_intra_reduce_scatter(comm, buf, out, DIRECT_COUNT, XDC_INTRA_F32, op, &tr->req)),
            tr);
        for (size_t i = 0; i < DIRECT_COUNT; i++) {
            float want = rank_order_sum(n, (size_t)me * DIRECT_COUNT + i, op);
            RCHECK(memcmp(&out[i], &want, sizeof want) == 0, tr,
                   "reduce_scatter (%s path) n=%d %s: [%zu] = %.9g, rank-order sum is %.9g", path, n,
                   opi ? "avg" : "sum", i, out[i], want);
        }
    }
    return 0;
}

static int rank_direct(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    int n = xdc_intra_size(comm);
    float *buf = xdc_malloc(sizeof(float) * DIRECT_COUNT * (size_t)n), *out = xdc_malloc(sizeof(float) * DIRECT_COUNT);
    RCHECK(buf && out, tr, "no memory");
    if (check_rank_order(comm, tr, buf, out, "single-copy")) return -1;
    /* A sub-group (all ranks) where rank 1 turns direct copies off when it joins: everyone stages. */
    if (xdc_intra_rank(comm) == 1) setenv("XDC_INTRA_SINGLE_COPY", "0", 1);
    xdc_intra_comm *staged = NULL;
    RCHECK_OK(xdc_intra_split(comm, 0, xdc_intra_rank(comm), &staged, &tr->diag), tr);
    if (check_rank_order(staged, tr, buf, out, "staging")) return -1;
    xdc_intra_destroy(staged);
    xdc_free(buf);
    xdc_free(out);
    return 0;
}

XDC_TEST(intra_cpu_single_copy_and_staging_sum_in_rank_order_at_2_3_4_ranks)
{
    for (int n = 2; n <= 4; n++) intra_test_ranks(XDC_INTRA_CPU, n, rank_direct, NULL, NULL);
}
