/* test_orch_sync.c — the comm engine between two "regions" in one process: two WAN engines on a
 * loopback peer pair, one sync engine and one xdc_sync each, rounds whose buckets become ready in pieces at different
 * moments on each side (as backward produces them). Every round must end with both sides holding the
 * same average, bit for bit, with codec none equal to (a + b) / 2. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_rng.h"
#include "sync/xdc_sync.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

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
