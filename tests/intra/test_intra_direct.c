/* test_intra_direct.c — the CPU backend's single-copy collectives (messages of 64 KiB and more go
 * straight between the ranks' buffers) against the staging path: at 2, 3 and 4 ranks, with inputs whose
 * sums round differently in other orders, all_reduce and reduce_scatter must give every rank the bits of
 * a serial sum in rank order on both paths, with plain buffers, buffers in shared allocations (which the
 * peers map and reduce in place) and a mix of the two; and a group where one rank cannot (here: will not) copy
 * directly must fall back to staging on every rank alike instead of mismatching steps. */
#include "tests/intra/test_intra_ranks.h"

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

/* Mappings of shared allocations (xdc_shared_alloc's memfds) in this process: its own and its peers'. */
static int shared_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, "memfd:xdc-shared") != NULL;
    if (f) fclose(f);
    return n;
}

/* arg: how the ranks allocate their buffers. Shared ones are reduced in place by the peers (mapped);
 * plain ones are copied with process_vm_readv/writev; "mixed" has both in one operation. */
typedef enum { BUF_PLAIN, BUF_SHARED, BUF_MIXED } buf_kind;

static int rank_direct(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    buf_kind kind = *(const buf_kind *)arg;
    int n = xdc_intra_size(comm), me = xdc_intra_rank(comm);
    int shared = kind == BUF_SHARED || (kind == BUF_MIXED && me % 2 == 0);
    size_t buf_bytes = sizeof(float) * DIRECT_COUNT * (size_t)n, out_bytes = sizeof(float) * DIRECT_COUNT;
    float *buf = shared ? xdc_shared_alloc(buf_bytes) : xdc_malloc(buf_bytes),
          *out = shared ? xdc_shared_alloc(out_bytes) : xdc_malloc(out_bytes);
    RCHECK(buf && out, tr, "no memory");
    int own = shared_mappings();
    if (check_rank_order(comm, tr, buf, out, kind == BUF_PLAIN ? "single-copy" : "single-copy, mapped")) return -1;
    /* A rank whose peers allocated shared buffers used them in place: it mapped at least one of them. */
    int peers_shared = kind == BUF_SHARED || (kind == BUF_MIXED && (me % 2 == 1 || n > 2));
    RCHECK(
        !peers_shared || shared_mappings() > own, tr,
        "rank %d of %d: no peer's shared buffer is mapped here (%d shared mappings before the collectives, %d after)",
        me, n, own, shared_mappings());
    /* A sub-group (all ranks) where rank 1 turns direct copies off when it joins: everyone stages. */
    if (xdc_intra_rank(comm) == 1) setenv("XDC_INTRA_SINGLE_COPY", "0", 1);
    xdc_intra_comm *staged = NULL;
    RCHECK_OK(xdc_intra_split(comm, 0, xdc_intra_rank(comm), &staged, &tr->diag), tr);
    if (check_rank_order(staged, tr, buf, out, "staging")) return -1;
    xdc_intra_destroy(staged);
    xdc_shared_free(buf); /* frees a plain allocation too */
    xdc_shared_free(out);
    return 0;
}

XDC_TEST(intra_cpu_single_copy_and_staging_sum_in_rank_order_at_2_3_4_ranks)
{
    buf_kind kind = BUF_PLAIN;
    for (int n = 2; n <= 4; n++) intra_test_ranks(XDC_INTRA_CPU, n, rank_direct, &kind, NULL);
}

XDC_TEST(intra_cpu_single_copy_in_peers_shared_buffers_sums_in_rank_order_at_2_3_4_ranks)
{
    buf_kind kinds[] = {BUF_SHARED, BUF_MIXED};
    for (int k = 0; k < 2; k++)
        for (int n = 2; n <= 4; n++) intra_test_ranks(XDC_INTRA_CPU, n, rank_direct, &kinds[k], NULL);
}
