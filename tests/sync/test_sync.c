/* test_sync.c — the comm engine's threads: many xdc_sync objects on one xdc_sync_engine share its one
 * thread (16 syncs take as many threads as 4; tests/e2e/test_sync_threads.c checks a streaming run's
 * worker the same way). */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_rng.h"
#include "sync/xdc_sync.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_ELEMS   4000
#define MAX_SYNCS 16

/* Live threads of this process: the tasks in /proc/self/task without PF_EXITING (0x4, the 9th field of
 * their stat line). pthread_join returns when the thread's tid is cleared, which the kernel does during
 * the thread's exit, before it is reaped; until then "Threads:" in /proc/self/status still counts it, so a
 * joined thread could be counted. PF_EXITING is set before the tid is cleared. */
static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    XDC_ASSERT(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        char *stat = xdc_test_read_file(path, NULL);
        if (!stat) continue; /* reaped since readdir */
        const char *p = strrchr(stat, ')');
        unsigned long flags = 0;
        XDC_ASSERT_MSG(p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1, "%s: %s", path, stat);
        free(stat);
        if (!(flags & 0x4)) n++;
    }
    closedir(d);
    return n;
}

static void fill(float *x, int side, int sync)
{
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)(side * 100 + sync));
    for (size_t i = 0; i < N_ELEMS; i++) x[i] = xdc_rng_normal(&r);
}

typedef struct {
    xdc_sync *sync[MAX_SYNCS];
    float *buf[MAX_SYNCS];
    int n, side;
    xdc_err_t rc;
    char why[256];
} side_ctx;

/* Every sync of the side begins a round, then all end: the rounds queue on the one comm thread. */
static void *side_main(void *arg)
{
    side_ctx *c = arg;
    for (int i = 0; i < c->n && c->rc == XDC_OK; i++) {
        fill(c->buf[i], c->side, i);
        c->rc = xdc_sync_begin(c->sync[i], c->buf[i]);
        xdc_sync_mark_ready(c->sync[i], 0);
    }
    for (int i = 0; i < c->n && c->rc == XDC_OK; i++) {
        xdc_diag d = {{0}};
        c->rc = xdc_sync_end(c->sync[i], &d);
        if (c->rc != XDC_OK) snprintf(c->why, sizeof c->why, "sync %d: %s", i, d.msg);
    }
    return NULL;
}

/* Two regions in one process, `n` syncs on each side's engine; returns the threads counted while every
 * sync exists (after a round on all of them) minus those before the engines were created. */
static int threads_for(wan_test_pair *tp, int n)
{
    int before = count_threads();
    xdc_wan_peer *peers[2][2] = {{NULL, tp->srv}, {tp->cli, NULL}};
    xdc_sync_engine *eng[2];
    side_ctx ctx[2];
    for (int s = 0; s < 2; s++) {
        XDC_ASSERT_OK(xdc_sync_engine_create(&eng[s], NULL));
        ctx[s] = (side_ctx){.n = n, .side = s};
        for (int i = 0; i < n; i++) {
            xdc_sync_cfg cfg = {.n_elems = N_ELEMS,
                                .bucket_elems = 1024,
                                .peers = peers[s],
                                .n_regions = 2,
                                .my_region = s,
                                .name = "test"};
            cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
            XDC_ASSERT_OK(xdc_codec_parse("none", &cfg.codec, NULL));
            XDC_ASSERT_OK(xdc_sync_create(eng[s], &cfg, &ctx[s].sync[i], NULL));
            ctx[s].buf[i] = malloc(N_ELEMS * sizeof(float));
        }
        XDC_ASSERT_EQ(xdc_sync_engine_clients(eng[s]), n);
    }
    pthread_t th[2];
    for (int s = 0; s < 2; s++) pthread_create(&th[s], NULL, side_main, &ctx[s]);
    for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
    int during = count_threads();
    float *a = malloc(N_ELEMS * sizeof(float)), *b = malloc(N_ELEMS * sizeof(float));
    for (int s = 0; s < 2; s++) {
        XDC_ASSERT_MSG(ctx[s].rc == XDC_OK, "side %d: %s: %s", s, xdc_errname(ctx[s].rc), ctx[s].why);
        for (int i = 0; i < n; i++) {
            fill(a, 0, i);
            fill(b, 1, i);
            for (size_t k = 0; k < N_ELEMS; k++) a[k] = ((0.0f + a[k]) + b[k]) * 0.5f;
            XDC_ASSERT_MSG(memcmp(a, ctx[s].buf[i], N_ELEMS * sizeof(float)) == 0, "side %d sync %d: not (a + b) / 2",
                           s, i);
        }
    }
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < n; i++) {
            xdc_sync_destroy(ctx[s].sync[i]);
            free(ctx[s].buf[i]);
        }
        XDC_ASSERT_EQ(xdc_sync_engine_clients(eng[s]), 0);
        xdc_sync_engine_destroy(eng[s]);
    }
    XDC_ASSERT_EQ(count_threads(), before);
    free(a);
    free(b);
    return during - before;
}

XDC_TEST_T(sync_engine_one_thread_for_any_number_of_syncs, 60)
{
    wan_test_pair tp; /* one pair for both: the sends of one run complete before the next posts */
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    int four = threads_for(&tp, 4), sixteen = threads_for(&tp, 16);
    wan_test_pair_close(&tp);
    printf("threads added by two engines: %d with 4 syncs each, %d with 16\n", four, sixteen);
    XDC_ASSERT_EQ(four, 2); /* one comm thread per engine */
    XDC_ASSERT_EQ(sixteen, 2);
}

/* Stopping a sync whose round waits in the queue behind another drops it with XDC_ERR_CLOSED, and the
 * engine goes on serving the others. */
XDC_TEST(sync_engine_stop_drops_a_queued_round)
{
    xdc_sync_engine *eng;
    XDC_ASSERT_OK(xdc_sync_engine_create(&eng, NULL));
    xdc_sync *s[3];
    float *buf[3];
    for (int i = 0; i < 3; i++) {
        xdc_sync_cfg cfg = {.n_elems = N_ELEMS, .bucket_elems = 1000, .n_regions = 1, .name = "local"};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("none", &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_create(eng, &cfg, &s[i], NULL));
        buf[i] = calloc(N_ELEMS, sizeof(float));
        buf[i][0] = (float)i;
    }
    XDC_ASSERT_OK(xdc_sync_begin(s[0], buf[0])); /* runs, and waits for readiness: the others queue */
    XDC_ASSERT_OK(xdc_sync_begin(s[1], buf[1]));
    XDC_ASSERT_OK(xdc_sync_begin(s[2], buf[2]));
    xdc_sync_stop(s[1]);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_sync_end(s[1], &d), XDC_ERR_CLOSED);
    XDC_ASSERT_OK(xdc_sync_end(s[0], &d));
    XDC_ASSERT_OK(xdc_sync_end(s[2], &d));
    XDC_ASSERT(buf[2][0] == 2.0f); /* alone: the average of one region is the value */
    XDC_ASSERT_ERR(xdc_sync_begin(s[1], buf[1]), XDC_ERR_INVALID);
    for (int i = 0; i < 3; i++) {
        xdc_sync_destroy(s[i]);
        free(buf[i]);
    }
    xdc_sync_engine_destroy(eng);
}

/* A wait with a deadline before the other region began its round: XDC_ERR_AGAIN, the round still in place;
 * once the other side posts, a plain wait completes it with the exact mean. */
XDC_TEST(sync_wait_deadline_leaves_the_round_running)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 1, 20000, NULL, NULL);
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}};
    xdc_sync_engine *eng[2];
    xdc_sync *s[2];
    float *buf[2];
    for (int i = 0; i < 2; i++) {
        XDC_ASSERT_OK(xdc_sync_engine_create(&eng[i], NULL));
        xdc_sync_cfg cfg = {
            .n_elems = N_ELEMS, .bucket_elems = 1000, .peers = peers[i], .n_regions = 2, .my_region = i, .name = "t"};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("none", &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_create(eng[i], &cfg, &s[i], NULL));
        buf[i] = malloc(N_ELEMS * sizeof(float));
        for (size_t k = 0; k < N_ELEMS; k++) buf[i][k] = (float)(i * 4 + 2);
    }
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_sync_begin(s[0], buf[0]));
    XDC_ASSERT_ERR(xdc_sync_wait(s[0], 0, &d), XDC_ERR_AGAIN);     /* region 1 has posted nothing */
    XDC_ASSERT_ERR(xdc_sync_wait(s[0], 20, &d), XDC_ERR_AGAIN);    /* still nothing: the deadline passes */
    XDC_ASSERT_ERR(xdc_sync_begin(s[0], buf[0]), XDC_ERR_INVALID); /* the round is still in place */
    XDC_ASSERT_OK(xdc_sync_begin(s[1], buf[1]));
    XDC_ASSERT_OK(xdc_sync_wait(s[1], -1, &d));
    XDC_ASSERT_OK(xdc_sync_wait(s[0], -1, &d));
    for (int i = 0; i < 2; i++) {
        XDC_ASSERT(buf[i][0] == 4.0f && buf[i][N_ELEMS - 1] == 4.0f); /* (2 + 6) / 2 */
        xdc_sync_destroy(s[i]);
        xdc_sync_engine_destroy(eng[i]);
        free(buf[i]);
    }
    wan_test_pair_close(&tp);
}

/* xdc_sync_residual_take (DiLoCo's keep_unsent): after a sparse round, what region 0's codec did not send
 * leaves its residual into the buffer given (dst -= residual), so with region 1 sending zeros
 * 2 * mean - dst is region 0's input again; the residual is then zero, and a take during a round is refused. */
XDC_TEST(sync_residual_take_moves_the_unsent_part_into_the_buffer)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 1, 20000, NULL, NULL);
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}};
    xdc_sync_engine *eng[2];
    xdc_sync *s[2];
    float *buf[2], *x = malloc(N_ELEMS * sizeof(float)), *dst = calloc(N_ELEMS, sizeof(float));
    float *res = malloc(N_ELEMS * sizeof(float));
    for (int i = 0; i < 2; i++) {
        XDC_ASSERT_OK(xdc_sync_engine_create(&eng[i], NULL));
        xdc_sync_cfg cfg = {
            .n_elems = N_ELEMS, .bucket_elems = 1000, .peers = peers[i], .n_regions = 2, .my_region = i, .name = "t"};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse("sparse:0.05:2", &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_create(eng[i], &cfg, &s[i], NULL));
        buf[i] = calloc(N_ELEMS, sizeof(float));
    }
    fill(x, 0, 0);
    memcpy(buf[0], x, N_ELEMS * sizeof(float));
    xdc_diag d = {{0}};
    for (int i = 0; i < 2; i++) {
        XDC_ASSERT_OK(xdc_sync_begin(s[i], buf[i]));
        xdc_sync_mark_ready(s[i], 0);
    }
    XDC_ASSERT_ERR(xdc_sync_residual_take(s[0], dst, &d), XDC_ERR_INVALID); /* region 0's round is under way */
    for (int i = 0; i < 2; i++) XDC_ASSERT_OK(xdc_sync_wait(s[i], -1, &d));
    XDC_ASSERT_OK(xdc_sync_residual_take(s[0], dst, &d));
    XDC_ASSERT_EQ(xdc_sync_residual_elems(s[0]), (size_t)N_ELEMS);
    XDC_ASSERT_OK(xdc_sync_residual_get(s[0], res, N_ELEMS, &d));
    size_t unsent = 0;
    for (size_t k = 0; k < N_ELEMS; k++) {
        unsent += dst[k] != 0.0f;
        XDC_ASSERT_MSG(res[k] == 0.0f, "residual[%zu] = %g after the take", k, (double)res[k]);
        float back = 2.0f * buf[0][k] - dst[k]; /* decoded + residual = the input */
        XDC_ASSERT_MSG(fabsf(back - x[k]) <= 1e-5f * (1.0f + fabsf(x[k])), "element %zu: %g, input %g", k, (double)back,
                       (double)x[k]);
    }
    XDC_ASSERT(unsent > N_ELEMS / 2); /* 5 % sent: most of the input was left for later */
    for (int i = 0; i < 2; i++) {
        xdc_sync_destroy(s[i]);
        xdc_sync_engine_destroy(eng[i]);
        free(buf[i]);
    }
    free(x);
    free(dst);
    free(res);
    wan_test_pair_close(&tp);
}

/* build/xdc_sync_standalone: the sync linked without the orchestrator, model, scheduler, topology or
 * config layers runs an int8 + error-feedback all-reduce between two regions over loopback TLS and
 * matches its serial reference bit for bit. */
XDC_TEST_T(sync_standalone_int8_allreduce_matches_serial_reference, 120)
{
    char bin[600], cmd[1400], out[8192];
    snprintf(bin, sizeof bin, "%s", xdc_test_bin());
    char *slash = strrchr(bin, '/');
    snprintf(slash ? slash + 1 : bin, sizeof bin - (size_t)(slash ? slash + 1 - bin : 0), "xdc_sync_standalone");
    if (access(bin, X_OK) != 0) XDC_FAIL("%s not built (make all builds it)", bin);
    snprintf(cmd, sizeof cmd, "%s --codec int8 --rounds 6 2>&1", bin);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", bin, rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "codec int8:128 + error feedback");
    XDC_ASSERT_STR_CONTAINS(out, "6 rounds: bit-identical to the serial reference on every region");
    /* Linked from the lower layers only: no symbol of the layers above sync. */
    snprintf(cmd, sizeof cmd, "nm %s | grep -cE ' [TtDdBb] (orch_|rdzv_|xdc_gpt_|xdc_topology_|xdc_plan_|xdc_cfg_)'",
             bin);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 0, "%s holds %d symbols of the layers above sync", bin, atoi(out));
    snprintf(cmd, sizeof cmd, "nm %s | grep -c ' T xdc_sync_engine_create'", bin);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_EQ(atoi(out), 1);
}
