/* test_sync_weights.c — the per-member weighting of the cross-region mean (xdc_sync_set_weights): three
 * "regions" in one process on loopback WAN pairs, each with its own comm engine. The weighted result equals a
 * serial reference Σ w_r·x_r / Σ w_r summed in region order, bit for bit; with a lossy codec every member
 * holds the same bytes and each region's error-feedback residual is the one equal weights leave (the weight
 * applies after decoding); a weight of 0 leaves the region out as a non-member; equal weights are the plain
 * mean. One level down (xdc_sync_set_replica_weights), two forked replicas of one region reduce to the
 * replica-weighted mean, bit for bit, and equal replica weights to the plain mean. */
#include "tests/xdc_test.h"
#include "tests/intra/test_intra_ranks.h"
#include "tests/test_sync_util.h"

#include "sync/xdc_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W_ELEMS  12288
#define W_BUCKET 4096

enum { A, B, D, N };

/* The three regions, a full mesh, a sync "weights" over W_ELEMS fp32 in `codec`. */
static void mesh_open(sync_net *m, const char *codec)
{
    sync_net_open(m, N, 0, W_ELEMS, W_BUCKET, codec, NULL, "weights");
}

/* Region r's contribution in round `round`: distinct per region and round, not exactly representable by int8. */
static void fill(float *x, int r, int round)
{
    for (size_t i = 0; i < W_ELEMS; i++)
        x[i] = (float)((i * 13 + (size_t)(r * 31 + round * 7)) % 97) * 0.0371f - 1.5f + 0.25f * (float)r;
}

/* One round of the regions `member` names, each given the same members and weights w
 * (xdc_sync_set_members), all buckets ready at once. */
static void round_over(sync_net *m, const uint8_t *member, const float *w, int round)
{
    xdc_diag d = {{0}};
    for (int r = 0; r < N; r++) {
        if (!member[r]) continue;
        XDC_ASSERT_MSG(xdc_sync_set_members(m->sync[r], member, w, &d) == XDC_OK, "region %d: %s", r, d.msg);
        fill(m->buf[r], r, round);
        XDC_ASSERT_OK(xdc_sync_begin(m->sync[r], m->buf[r]));
        xdc_sync_mark_ready(m->sync[r], 0);
    }
    for (int r = 0; r < N; r++)
        if (member[r]) {
            xdc_err_t rc = xdc_sync_end(m->sync[r], &d);
            XDC_ASSERT_MSG(rc == XDC_OK, "region %d: %s: %s", r, xdc_errname(rc), d.msg);
        }
}

/* One round of the regions whose weight (w, the same on every member) is above 0: xdc_sync_set_weights'
 * members. */
static void round_of(sync_net *m, const float *w, int round)
{
    uint8_t member[N];
    for (int r = 0; r < N; r++) member[r] = w[r] > 0.0f;
    round_over(m, member, w, round);
}

/* The serial reference of codec none: Σ w_r·x_r / Σ w_r in region order, a weight of 1 added as it is. */
static void reference(const float *w, int round, float *want)
{
    float *x = malloc((size_t)N * W_ELEMS * sizeof(float)), total = 0; /* (N, W_ELEMS) */
    for (int r = 0; r < N; r++) {
        fill(x + (size_t)r * W_ELEMS, r, round);
        total += w[r];
    }
    for (size_t i = 0; i < W_ELEMS; i++) {
        float s = 0;
        for (int r = 0; r < N; r++) {
            float xi = x[(size_t)r * W_ELEMS + i];
            if (w[r] > 0.0f) s += w[r] == 1.0f ? xi : w[r] * xi;
        }
        want[i] = s * (1.0f / total);
    }
    free(x);
}

XDC_TEST_T(xdc_sync_weighted_mean_matches_a_serial_reference, 60)
{
    sync_net m;
    mesh_open(&m, "none");
    float *want = malloc(W_ELEMS * sizeof(float));
    const float w[2][N] = {{3.0f, 1.0f, 0.5f}, {1.0f, 7.0f, 2.0f}}; /* tokens each region processed, say */
    for (int round = 0; round < 2; round++) {
        round_of(&m, w[round], round);
        reference(w[round], round, want);
        for (int r = 0; r < N; r++)
            XDC_ASSERT_MSG(memcmp(m.buf[r], want, W_ELEMS * sizeof(float)) == 0,
                           "round %d, region %d: not the serial weighted mean", round, r);
    }
    /* Equal weights are the plain mean, bit for bit: ((a + b) + d) / 3 as the unweighted rounds sum. */
    const float ones[N] = {1, 1, 1};
    round_of(&m, ones, 2);
    float *x[N];
    for (int r = 0; r < N; r++) fill(x[r] = malloc(W_ELEMS * sizeof(float)), r, 2);
    for (size_t i = 0; i < W_ELEMS; i++) want[i] = (((0.0f + x[A][i]) + x[B][i]) + x[D][i]) * (1.0f / 3.0f);
    XDC_ASSERT_MSG(memcmp(m.buf[A], want, W_ELEMS * sizeof(float)) == 0, "equal weights: not the plain mean");
    for (int r = 0; r < N; r++) free(x[r]);
    sync_net_close(&m);
    free(want);
}

XDC_TEST_T(xdc_sync_weight_zero_is_not_a_member, 60)
{
    sync_net m;
    mesh_open(&m, "none");
    float *want = malloc(W_ELEMS * sizeof(float));
    /* D has weight 0: it runs no round and A and B neither send to it nor wait for it. */
    const float w[N] = {2.0f, 5.0f, 0.0f};
    round_of(&m, w, 0);
    reference(w, 0, want);
    for (int r = A; r <= B; r++)
        XDC_ASSERT_MSG(memcmp(m.buf[r], want, W_ELEMS * sizeof(float)) == 0, "region %d: not (2a + 5b) / 7", r);
    uint8_t got[N];
    xdc_sync_received(m.sync[A], got);
    XDC_ASSERT_MSG(got[A] && got[B] && !got[D], "A summed %d%d%d, expected 110", got[A], got[B], got[D]);
    /* A region's own weight must be above 0, and no weight is negative or NaN. */
    xdc_diag d = {{0}};
    const float own_zero[N] = {0.0f, 1.0f, 1.0f}, negative[N] = {1.0f, -1.0f, 1.0f};
    XDC_ASSERT_ERR(xdc_sync_set_weights(m.sync[A], own_zero, &d), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_sync_set_weights(m.sync[A], negative, &d), XDC_ERR_INVALID);
    /* Back to all three, weighted: D takes part again. */
    const float all[N] = {1.0f, 2.0f, 4.0f};
    round_of(&m, all, 1);
    reference(all, 1, want);
    for (int r = 0; r < N; r++)
        XDC_ASSERT_MSG(memcmp(m.buf[r], want, W_ELEMS * sizeof(float)) == 0, "round 2, region %d", r);
    sync_net_close(&m);
    free(want);
}

/* xdc_sync_set_members: D is a member of weight 0 (a region that rejoins while its state is on its way): it
 * sends (any contribution: it is left out) and receives, and all three end on A's and B's weighted mean, bit
 * for bit the mean without D. With every member of weight 0 the round's result is 0 everywhere. */
XDC_TEST_T(xdc_sync_member_of_weight_zero_takes_the_mean_without_changing_it, 60)
{
    sync_net m;
    mesh_open(&m, "none");
    float *want = malloc(W_ELEMS * sizeof(float));
    const float w[N] = {2.0f, 5.0f, 0.0f};
    const uint8_t all[N] = {1, 1, 1};
    round_over(&m, all, w, 0);
    reference(w, 0, want);
    for (int r = 0; r < N; r++)
        XDC_ASSERT_MSG(memcmp(m.buf[r], want, W_ELEMS * sizeof(float)) == 0, "region %d: not (2a + 5b) / 7", r);
    uint8_t got[N];
    xdc_sync_received(m.sync[A], got);
    XDC_ASSERT_MSG(got[A] && got[B] && got[D], "A received %d%d%d, expected 111", got[A], got[B], got[D]);
    const float none[N] = {0.0f, 0.0f, 0.0f};
    round_over(&m, all, none, 1);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < W_ELEMS; i++)
            XDC_ASSERT_MSG(m.buf[r][i] == 0.0f, "region %d, element %zu: %g with no member weighed", r, i,
                           (double)m.buf[r][i]);
    sync_net_close(&m);
    free(want);
}

/* With a lossy codec (int8 with error feedback): unequal weights leave every member on the same bytes, and
 * each region's residual is the one equal weights leave, round after round: the codec sees each region's
 * own contribution, the weight only its decoded copy. */
XDC_TEST_T(xdc_sync_weights_keep_error_feedback_per_region, 60)
{
    sync_net eq, wt;
    mesh_open(&eq, "int8");
    mesh_open(&wt, "int8");
    const float ones[N] = {1, 1, 1}, w[N] = {10.0f, 3.0f, 1.0f};
    size_t n = xdc_sync_residual_elems(wt.sync[A]);
    XDC_ASSERT_MSG(n == W_ELEMS, "int8 keeps a residual of %zu elements, not %d", n, W_ELEMS);
    float *re = malloc(n * sizeof(float)), *rw = malloc(n * sizeof(float));
    for (int round = 0; round < 3; round++) {
        round_of(&eq, ones, round);
        round_of(&wt, w, round);
        for (int r = 1; r < N; r++)
            XDC_ASSERT_MSG(memcmp(wt.buf[r], wt.buf[A], W_ELEMS * sizeof(float)) == 0,
                           "round %d: region %d's weighted mean differs from region A's", round, r);
        XDC_ASSERT_MSG(memcmp(wt.buf[A], eq.buf[A], W_ELEMS * sizeof(float)) != 0,
                       "round %d: the weights changed nothing", round);
        for (int r = 0; r < N; r++) {
            XDC_ASSERT_OK(xdc_sync_residual_get(eq.sync[r], re, n, NULL));
            XDC_ASSERT_OK(xdc_sync_residual_get(wt.sync[r], rw, n, NULL));
            XDC_ASSERT_MSG(memcmp(re, rw, n * sizeof(float)) == 0,
                           "round %d, region %d: the weights changed its error-feedback residual", round, r);
        }
    }
    free(re);
    free(rw);
    sync_net_close(&eq);
    sync_net_close(&wt);
}

/* Elements of the replica test: not a multiple of 2, so the last bucket takes the padded path. */
#define R_ELEMS 10001 /* <= W_ELEMS */

/* One replica of a region of two: rounds with weights {3, 1} (replica 0 ran three microbatches, replica 1
 * one), then {2, 2}. Both replicas end on (3·x0 + x1) · (1/4), then on the plain mean (x0 + x1) · 0.5, bit for
 * bit (two addends: the collective's order cannot matter). */
static int rank_replica_weights(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg)
{
    (void)arg;
    xdc_wan_peer *peers[1] = {NULL};
    xdc_sync_cfg cfg = {
        .n_elems = R_ELEMS, .bucket_elems = 4096, .dp = comm, .peers = peers, .n_regions = 1, .name = "replicas"};
    cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
    xdc_sync_engine *eng = NULL;
    xdc_sync *s = NULL;
    RCHECK_OK(xdc_sync_engine_create(&eng, &tr->diag), tr);
    RCHECK_OK(xdc_sync_create(eng, &cfg, &s, &tr->diag), tr);
    float *buf = malloc(W_ELEMS * sizeof(float)), *x0 = malloc(W_ELEMS * sizeof(float)),
          *x1 = malloc(W_ELEMS * sizeof(float)); /* fill writes W_ELEMS; the sync uses the first R_ELEMS */
    const float w[2][2] = {{3.0f, 1.0f}, {2.0f, 2.0f}};
    int bad = -1;
    for (int round = 0; round < 2 && bad < 0; round++) {
        RCHECK_OK(xdc_sync_set_replica_weights(s, w[round], &tr->diag), tr);
        fill(buf, tr->rank, round);
        RCHECK_OK(xdc_sync_begin(s, buf), tr);
        xdc_sync_mark_ready(s, 0);
        RCHECK_OK(xdc_sync_end(s, &tr->diag), tr);
        fill(x0, 0, round);
        fill(x1, 1, round);
        for (size_t i = 0; i < R_ELEMS && bad < 0; i++) {
            float want = round == 0 ? (3.0f * x0[i] + x1[i]) * (1.0f / 4.0f) : (x0[i] + x1[i]) * 0.5f;
            if (memcmp(&buf[i], &want, sizeof want) != 0) bad = (int)i;
        }
        RCHECK(bad < 0, tr, "round %d, element %d: %.9g, not the replica-weighted mean", round, bad, (double)buf[bad]);
    }
    const float zero[2] = {1.0f, 0.0f};
    RCHECK(xdc_sync_set_replica_weights(s, zero, &tr->diag) == XDC_ERR_INVALID, tr, "a replica weight of 0 passed");
    xdc_sync_destroy(s);
    xdc_sync_engine_destroy(eng);
    free(buf);
    free(x0);
    free(x1);
    return 0;
}

XDC_TEST_T(xdc_sync_replica_weights_weigh_the_region_mean, 60)
{
    intra_test_ranks(XDC_INTRA_CPU, 2, rank_replica_weights, NULL, NULL);
}
