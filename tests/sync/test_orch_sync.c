/* test_orch_sync.c — the comm engine between two "regions" in one process: two WAN engines on a
 * loopback peer pair, one sync engine and one xdc_sync each, rounds whose buckets become ready in pieces at different
 * moments on each side (as backward produces them). Every round must end with both sides holding the
 * same average, bit for bit, with codec none equal to (a + b) / 2. The same sync on device memory
 * (cpu-strict, CUDA) is test_sync_device.c. */
#include "tests/xdc_test.h"
#include "tests/test_sync_util.h"
#include "tests/test_wan_util.h"

#include "common/xdc_rng.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_gpt.h"
#include "sync/xdc_sync.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_ELEMS 70464 /* the demo's first stage */
#define ROUNDS  40

typedef struct {
    xdc_sync_engine *eng; /* each region has its own comm thread */
    xdc_sync *sync;
    float *buf;  /* (N_ELEMS) */
    float *want; /* (ROUNDS, N_ELEMS) */
    int side;
    xdc_err_t rc;
    char why[512];
} side_ctx;

/* A quorum round's membership as the sync takes it: weight 1 for each nonzero member[r] of n, 0 for the others. */
static xdc_err_t set_members(xdc_sync *s, const uint8_t *member, int n, xdc_diag *diag)
{
    float w[XDC_SYNC_MAX_REGIONS];
    for (int r = 0; r < n; r++) w[r] = member[r] ? 1.0f : 0.0f;
    return xdc_sync_set_weights(s, w, diag);
}

static void fill(float *x, int side, int round)
{
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)(side * 1000 + round));
    for (size_t i = 0; i < N_ELEMS; i++) x[i] = xdc_rng_normal(&r);
}

static void *side_main(void *arg)
{
    side_ctx *c = arg;
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)c->side + 77);
    for (int round = 0; round < ROUNDS && c->rc == XDC_OK; round++) {
        fill(c->buf, c->side, round);
        c->rc = xdc_sync_begin(c->sync, c->buf);
        /* Readiness arrives in a few pieces from the end, with the side's own pace. */
        size_t from = N_ELEMS;
        while (from > 0) {
            size_t step = 1 + (size_t)xdc_rng_below(&r, N_ELEMS / 3);
            from = from > step ? from - step : 0;
            xdc_sync_mark_ready(c->sync, from);
            for (int y = (int)xdc_rng_below(&r, 50); y > 0; y--) sched_yield();
        }
        xdc_diag d = {{0}};
        if (c->rc == XDC_OK) c->rc = xdc_sync_end(c->sync, &d);
        if (c->rc != XDC_OK) {
            snprintf(c->why, sizeof c->why, "round %d: %s", round, d.msg);
            break;
        }
        if (memcmp(c->buf, c->want + (size_t)round * N_ELEMS, N_ELEMS * sizeof(float)) != 0) {
            snprintf(c->why, sizeof c->why, "round %d: result differs from (a + b) / 2", round);
            c->rc = XDC_ERR_CORRUPT;
        }
    }
    return NULL;
}

XDC_TEST_T(xdc_sync_two_regions_average_every_round, 120)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    float *want = malloc((size_t)ROUNDS * N_ELEMS * sizeof(float)), *a = malloc(N_ELEMS * sizeof(float)),
          *b = malloc(N_ELEMS * sizeof(float));
    for (int round = 0; round < ROUNDS; round++) {
        fill(a, 0, round);
        fill(b, 1, round);
        for (size_t i = 0; i < N_ELEMS; i++) want[(size_t)round * N_ELEMS + i] = ((0.0f + a[i]) + b[i]) * 0.5f;
    }
    side_ctx ctx[2];
    pthread_t th[2];
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}}; /* per side: the other region's peer */
    for (int s = 0; s < 2; s++) {
        xdc_sync_cfg cfg = {.n_elems = N_ELEMS,
                            .bucket_elems = 65536,
                            .dp = NULL,
                            .peers = peers[s],
                            .n_regions = 2,
                            .my_region = s,
                            .name = "test"};
        xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("none", &cc, NULL));
        cfg.codec = cc;
        ctx[s] = (side_ctx){.buf = malloc(N_ELEMS * sizeof(float)), .want = want, .side = s};
        XDC_ASSERT_OK(xdc_sync_engine_create(&ctx[s].eng, NULL));
        XDC_ASSERT_OK(xdc_sync_create(ctx[s].eng, &cfg, &ctx[s].sync, NULL));
    }
    for (int s = 0; s < 2; s++) pthread_create(&th[s], NULL, side_main, &ctx[s]);
    for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
    for (int s = 0; s < 2; s++) {
        XDC_ASSERT_MSG(ctx[s].rc == XDC_OK, "side %d: %s: %s", s, xdc_errname(ctx[s].rc), ctx[s].why);
        xdc_sync_destroy(ctx[s].sync);
        xdc_sync_engine_destroy(ctx[s].eng);
        free(ctx[s].buf);
    }
    wan_test_pair_close(&tp);
    free(want);
    free(a);
    free(b);
}

/* ---- the order without replicas: a bucket that becomes ready is sent at once, even while an earlier one
 * still waits for the other region's shard. Region 0 marks its three buckets ready one at a time, each only
 * after the previous one was sent, while region 1 has not begun its round (so none of its shards can come
 * in): all three sends must still happen. An engine that finished the first bucket before sending the next
 * (waiting for region 1) never sends the second. Then region 1 takes part and both get (a + b) / 2. */

#define ORDER_BUCKET 1024
#define ORDER_ELEMS  (3 * ORDER_BUCKET)

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sends; /* ENCODE_SEND phases traced so far */
} send_count;

static void count_sends(void *ctx, const char *name, xdc_sync_phase phase, uint64_t t0, uint64_t dur, size_t bytes)
{
    (void)name, (void)t0, (void)dur, (void)bytes;
    send_count *c = ctx;
    if (phase != XDC_SYNC_PHASE_ENCODE_SEND) return;
    pthread_mutex_lock(&c->mu);
    c->sends++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Wait (10 s at most) until `want` sends were traced; how many were. */
static int wait_sends_traced(send_count *c, int want)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's default clock */
    ts.tv_sec += 10;
    pthread_mutex_lock(&c->mu);
    while (c->sends < want && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0) {
    }
    int n = c->sends;
    pthread_mutex_unlock(&c->mu);
    return n;
}

XDC_TEST_T(xdc_sync_sends_ready_buckets_while_the_peer_is_silent, 60)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}};
    send_count cnt = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    xdc_sync_engine *eng[2];
    xdc_sync *sync[2];
    float *buf[2], *want = malloc(ORDER_ELEMS * sizeof(float));
    for (int s = 0; s < 2; s++) {
        xdc_sync_cfg cfg = {.n_elems = ORDER_ELEMS,
                            .bucket_elems = ORDER_BUCKET,
                            .peers = peers[s],
                            .n_regions = 2,
                            .my_region = s,
                            .name = "order",
                            .trace = s == 0 ? count_sends : NULL,
                            .trace_ctx = &cnt};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("none", &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_engine_create(&eng[s], NULL));
        XDC_ASSERT_OK(xdc_sync_create(eng[s], &cfg, &sync[s], NULL));
        buf[s] = malloc(ORDER_ELEMS * sizeof(float));
        for (size_t i = 0; i < ORDER_ELEMS; i++) buf[s][i] = (float)(i % 97) * (s ? -0.25f : 1.5f) + (float)s;
    }
    for (size_t i = 0; i < ORDER_ELEMS; i++) want[i] = ((0.0f + buf[0][i]) + buf[1][i]) * 0.5f;
    XDC_ASSERT_OK(xdc_sync_begin(sync[0], buf[0]));
    int sent = 0;
    for (int k = 2; k >= 0; k--) { /* bucket k = elements [k * ORDER_BUCKET, ...) */
        xdc_sync_mark_ready(sync[0], (size_t)k * ORDER_BUCKET);
        sent = wait_sends_traced(&cnt, 3 - k);
        if (sent < 3 - k) break;
    }
    /* Region 1 takes part now either way, and region 0 has everything ready, so that a failure below still
     * ends both rounds. */
    xdc_sync_mark_ready(sync[0], 0);
    XDC_ASSERT_OK(xdc_sync_begin(sync[1], buf[1]));
    xdc_diag d[2] = {{{0}}};
    XDC_ASSERT_OK(xdc_sync_end(sync[1], &d[1]));
    XDC_ASSERT_OK(xdc_sync_end(sync[0], &d[0]));
    XDC_ASSERT_MSG(sent == 3, "region 0 sent %d of its 3 ready buckets before region 1 began", sent);
    for (int s = 0; s < 2; s++) {
        XDC_ASSERT_MSG(memcmp(buf[s], want, ORDER_ELEMS * sizeof(float)) == 0, "region %d: not (a + b) / 2", s);
        xdc_sync_destroy(sync[s]);
        xdc_sync_engine_destroy(eng[s]);
        free(buf[s]);
    }
    wan_test_pair_close(&tp);
    free(want);
}

/* ---- a region lost during a round (docs/runtime.md, "Leaving during a round"): three regions A, B, D; D
 * sends its shards to A and never to B, as a region that died between its sends would. B is told D is gone
 * while it waits and finishes without D; A summed D in. The two learn the final set (what both received: A
 * and B) and sum again over it: both end on (a + b) / 2, bit for bit, and the next round between them runs
 * as usual. */

#define LOST_ELEMS  16384
#define LOST_BUCKET 4096

static void lost_fill(float *x, int region, int round)
{
    for (size_t i = 0; i < LOST_ELEMS; i++) x[i] = (float)((i * 7 + (size_t)round) % 101) * 0.125f - (float)region;
}

enum { A, B, D, N };

/* Regions A, B and D on loopback WAN pairs (the first region of each pair listens, the second dials), a comm engine
 * and a sync `name` each over LOST_ELEMS fp32 in codec none, `route` its first routes (NULL: a full mesh). */
static void trio_open(sync_net *t, const int *route, const char *name)
{
    sync_net_open(t, N, 0, LOST_ELEMS, LOST_BUCKET, "none", route, name);
}

XDC_TEST_T(xdc_sync_region_lost_mid_round_ends_on_one_sum, 60)
{
    sync_net t;
    trio_open(&t, NULL, "lost");
    xdc_sync **sync = t.sync;
    float **buf = t.buf, *want = malloc(LOST_ELEMS * sizeof(float));
    for (int r = 0; r < N; r++) lost_fill(buf[r], r, 0);
    for (size_t i = 0; i < LOST_ELEMS; i++) want[i] = ((0.0f + buf[A][i]) + buf[B][i]) * 0.5f;
    const uint8_t d_talks_to_a[N] = {1, 0, 1};
    XDC_ASSERT_OK(set_members(sync[D], d_talks_to_a, N, NULL));
    xdc_diag d = {{0}};
    for (int r = 0; r < N; r++) { /* every bucket ready at once: the rounds run while this thread waits on one */
        XDC_ASSERT_OK(xdc_sync_begin(sync[r], buf[r]));
        xdc_sync_mark_ready(sync[r], 0);
    }
    XDC_ASSERT_OK(xdc_sync_end(sync[D], &d));
    XDC_ASSERT_OK(xdc_sync_end(sync[A], &d));
    /* B cannot finish: D's shards never come. Told D is gone while it waits, it goes on without them. */
    XDC_ASSERT_ERR(xdc_sync_wait(sync[B], 300, &d), XDC_ERR_AGAIN);
    xdc_sync_lose(sync[B], D);
    XDC_ASSERT_OK(xdc_sync_end(sync[B], &d));
    uint8_t got[N][N];
    for (int r = A; r <= B; r++) xdc_sync_received(sync[r], got[r]);
    XDC_ASSERT_MSG(got[A][A] && got[A][B] && got[A][D], "A received %d%d%d, expected 111", got[A][A], got[A][B],
                   got[A][D]);
    XDC_ASSERT_MSG(got[B][A] && got[B][B] && !got[B][D], "B received %d%d%d, expected 110", got[B][A], got[B][B],
                   got[B][D]);
    XDC_ASSERT_MSG(memcmp(buf[A], buf[B], LOST_ELEMS * sizeof(float)) != 0, "A and B agree before the final set");
    /* A set with D in it cannot be summed where D's shards are missing. */
    const uint8_t all[N] = {1, 1, 1}, final[N] = {1, 1, 0};
    XDC_ASSERT_ERR(xdc_sync_resum(sync[B], all, &d), XDC_ERR_INVALID);
    for (int r = A; r <= B; r++) {
        XDC_ASSERT_OK(xdc_sync_resum(sync[r], final, &d));
        XDC_ASSERT_MSG(memcmp(buf[r], want, LOST_ELEMS * sizeof(float)) == 0, "region %d: not (a + b) / 2", r);
    }
    /* D is out from now on: the next round between A and B is theirs alone. */
    for (int r = A; r <= B; r++) {
        XDC_ASSERT_OK(set_members(sync[r], final, N, &d));
        lost_fill(buf[r], r, 1);
    }
    for (size_t i = 0; i < LOST_ELEMS; i++) want[i] = ((0.0f + buf[A][i]) + buf[B][i]) * 0.5f;
    for (int r = A; r <= B; r++) {
        XDC_ASSERT_OK(xdc_sync_begin(sync[r], buf[r]));
        xdc_sync_mark_ready(sync[r], 0);
    }
    for (int r = A; r <= B; r++) {
        XDC_ASSERT_OK(xdc_sync_end(sync[r], &d));
        XDC_ASSERT_MSG(memcmp(buf[r], want, LOST_ELEMS * sizeof(float)) == 0, "round 2, region %d: not (a + b) / 2", r);
    }
    sync_net_close(&t);
    free(want);
}

/* A region lost during a relayed round (docs/runtime.md, "Chaos"): the round routes A <-> D through B, as around
 * a link seen down when D's process died (bench-chaos, and elastic tests that kill a worker as the round begins), and
 * D never sends. B, told D is gone, has no D shard to forward: it forwards an empty message in its place, which A's
 * receive of D's shard takes whether A gave it up already or not. Both end the round on (a + b) / 2, and the next
 * round (direct, D out) ends on the mean of A and B. Before, B forwarded nothing, and A's given-up receive (a receive
 * consumes one message, xdc_wan_request_cancel) took B's shard of that next round: A waited for it until its
 * peer's deadline (35 s in the elastic launch tests, which then failed the run). */
XDC_TEST_T(xdc_sync_region_lost_in_a_relayed_round_leaves_the_link_in_order, 60)
{
    /* [src * N + dst]: the region dst gets src's shard from; A's and D's to each other through B */
    const int relayed[N * N] = {-1, A, B, B, -1, B, B, D, -1};
    sync_net t;
    trio_open(&t, relayed, "relayed");
    xdc_sync **sync = t.sync;
    float **buf = t.buf, *want = malloc(LOST_ELEMS * sizeof(float));
    xdc_diag d = {{0}};
    const uint8_t final[N] = {1, 1, 0};
    for (int round = 0; round < 2; round++) {
        for (int r = A; r <= B; r++) {
            if (round) XDC_ASSERT_OK(set_members(sync[r], final, N, &d)); /* D out, every link direct */
            if (round) XDC_ASSERT_OK(xdc_sync_set_routes(sync[r], NULL, &d));
            lost_fill(buf[r], r, round);
        }
        for (size_t i = 0; i < LOST_ELEMS; i++) want[i] = ((0.0f + buf[A][i]) + buf[B][i]) * 0.5f;
        for (int r = A; r <= B; r++) { /* D's process died: it never begins */
            XDC_ASSERT_OK(xdc_sync_begin(sync[r], buf[r]));
            xdc_sync_mark_ready(sync[r], 0);
        }
        for (int r = A; r <= B && round == 0; r++) xdc_sync_lose(sync[r], D); /* while the round waits for D */
        for (int r = A; r <= B; r++) {
            XDC_ASSERT_MSG(xdc_sync_end(sync[r], &d) == XDC_OK, "round %d, region %d: %s", round, r, d.msg);
            uint8_t got[N];
            xdc_sync_received(sync[r], got);
            XDC_ASSERT_MSG(got[A] && got[B] && !got[D], "round %d: region %d received %d%d%d, expected 110", round, r,
                           got[A], got[B], got[D]);
            XDC_ASSERT_MSG(memcmp(buf[r], want, LOST_ELEMS * sizeof(float)) == 0,
                           "round %d, region %d: not (a + b) / 2", round, r);
        }
    }
    sync_net_close(&t);
    free(want);
}

/* A region that died with this sync's sends to it still pending, and came back (a rejoin: orch_rejoin_give
 * destroys the old peer and takes the new process's connection): A's round told D gone never waited for its
 * send to D (sends are waited for at the bucket's next round), and the old peer's destruction failed it. The
 * next round with D a member again drops that send instead of failing on it ("send to region 1: the peer was
 * closed locally"), as a streaming fragment's sync did when its next round was the one that took D back. */
XDC_TEST_T(xdc_sync_region_back_after_a_lost_round_drops_its_stale_sends, 60)
{
    enum { A, D, N };
    wan_test_pair old, back; /* A listens (srv), D dials (cli) */
    wan_test_pair_open(&old, 2, 20000, NULL, NULL);
    xdc_wan_peer *peers[N][N] = {{NULL, old.srv}, {old.cli, NULL}};
    xdc_sync_engine *eng[N];
    xdc_sync *sync[N] = {NULL, NULL};
    float *buf[N];
    xdc_sync_cfg cfg[N];
    for (int r = 0; r < N; r++) {
        cfg[r] = (xdc_sync_cfg){.n_elems = LOST_ELEMS,
                                .bucket_elems = LOST_BUCKET,
                                .peers = peers[r],
                                .n_regions = N,
                                .my_region = r,
                                .name = "back"};
        cfg[r].codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("none", &cfg[r].codec, NULL));
        XDC_ASSERT_OK(xdc_sync_engine_create(&eng[r], NULL));
        buf[r] = malloc(LOST_ELEMS * sizeof(float));
    }
    XDC_ASSERT_OK(xdc_sync_create(eng[A], &cfg[A], &sync[A], NULL));
    /* D's process dies before the round: its end of the connection goes; A's sends to it stay pending. */
    xdc_wan_engine_destroy(old.cli_eng);
    old.cli_eng = NULL;
    xdc_diag d = {{0}};
    lost_fill(buf[A], A, 0);
    XDC_ASSERT_OK(xdc_sync_begin(sync[A], buf[A]));
    xdc_sync_mark_ready(sync[A], 0);
    XDC_ASSERT_ERR(xdc_sync_wait(sync[A], 300, &d), XDC_ERR_AGAIN);
    xdc_sync_lose(sync[A], D);
    XDC_ASSERT_OK(xdc_sync_end(sync[A], &d));
    /* D's new process: A replaces its peer, the old one destroyed (its pending send fails with it). */
    wan_test_pair_open(&back, 2, 20000, NULL, NULL);
    xdc_wan_peer_destroy(peers[A][D]);
    peers[A][D] = back.srv;
    peers[D][A] = back.cli;
    XDC_ASSERT_OK(xdc_sync_create(eng[D], &cfg[D], &sync[D], NULL));
    const uint8_t all[N] = {1, 1};
    for (int r = 0; r < N; r++) {
        XDC_ASSERT_OK(set_members(sync[r], all, N, &d));
        lost_fill(buf[r], r, 1);
        XDC_ASSERT_OK(xdc_sync_begin(sync[r], buf[r]));
        xdc_sync_mark_ready(sync[r], 0);
    }
    for (int r = 0; r < N; r++) XDC_ASSERT_MSG(xdc_sync_end(sync[r], &d) == XDC_OK, "region %d: %s", r, d.msg);
    for (size_t i = 0; i < LOST_ELEMS; i++) { /* D's value at i is x - 1, A's x: the mean x - 0.5 */
        float want = ((float)((i * 7 + 1) % 101) * 0.125f) - 0.5f;
        XDC_ASSERT_MSG(buf[A][i] == want, "at %zu: A holds %g, not the mean %g", i, buf[A][i], want);
    }
    for (int r = 0; r < N; r++) {
        xdc_sync_destroy(sync[r]);
        xdc_sync_engine_destroy(eng[r]);
        free(buf[r]);
    }
    xdc_wan_engine_destroy(old.srv_eng);
    wan_test_pair_close(&back);
}
