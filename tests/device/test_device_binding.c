/* test_device_binding.c — the device rules of issue 23 on the cpu-strict device (which refuses what a GPU
 * refuses) and, where a GPU is visible, on CUDA:
 *  - a thread is bound to one device: an op on another device's stream or memory is refused, copies may
 *    cross devices;
 *  - a failed enqueue is sticky on its own stream only (one thread's failure never surfaces in another
 *    stream's report);
 *  - the sync's comm thread binds the device of the thread that made the sync (two regions on devices 1
 *    and 2, int8 on the device: every encode is an op on the comm stream);
 *  - a ready event whose record failed fails the round before the comm stream reads the bucket;
 *  - the GPU a worker takes is LOCAL_RANK mod the visible GPUs (Slurm --gpus-per-task=1);
 *  - CUDA only (skipped without a GPU, printing the figures where one is): sumsq against the CPU reference
 *    and bit-identical run to run; every model op over zero elements launches nothing and fails nothing. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_rng.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"
#include "orchestrator/launch/orch_device.h"
#include "sync/xdc_sync.h"
#include "topology/xdc_topology.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const xdc_kern_backend *strict(void)
{
    const xdc_kern_backend *be = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &be, NULL));
    return be;
}

static const xdc_kern_backend *cuda_or_skip(void)
{
    const xdc_kern_backend *be = NULL;
    xdc_diag why = {{0}};
    if (xdc_kern_backend_get(XDC_BACKEND_CUDA, &be, &why) != XDC_OK) xdc_test_skip("no GPU: %s", why.msg);
    return be;
}

/* ---- binding ------------------------------------------------------------------------------------------ */

XDC_TEST(device_strict_ops_stay_on_the_threads_device)
{
    const xdc_kern_backend *be = strict();
    const xdc_device_ops *dev = be->device;
    xdc_stream *s1 = NULL, *s1b = NULL;
    float *x1 = NULL, *x2 = NULL, host[64] = {0};
    XDC_ASSERT_ERR(dev->set_device(XDC_STRICT_DEVICES), XDC_ERR_INVALID);
    XDC_ASSERT_OK(dev->set_device(2));
    XDC_ASSERT_OK(dev->mem_alloc((void **)&x2, sizeof host));
    XDC_ASSERT_OK(dev->set_device(1));
    int d = -1;
    XDC_ASSERT_OK(dev->get_device(&d));
    XDC_ASSERT_EQ(d, 1);
    XDC_ASSERT_OK(dev->stream_create(&s1));
    XDC_ASSERT_OK(dev->stream_create(&s1b));
    XDC_ASSERT_OK(dev->mem_alloc((void **)&x1, sizeof host));
    /* On device 1, with device 1's stream and memory: fine. Copies may cross devices. */
    XDC_ASSERT_OK(dev->set_stream(s1));
    XDC_ASSERT_OK(be->quant->scale(x1, 64, 2.0f));
    XDC_ASSERT_OK(dev->copy_d2d(x2, x1, sizeof host, s1));
    XDC_ASSERT_OK(dev->stream_sync(s1));
    /* Device 2's memory in an op on device 1's stream: refused, naming both. */
    xdc_diag diag = {{0}};
    XDC_ASSERT_ERR(be->quant->scale(x2, 64, 2.0f), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(dev->stream_error(s1, &diag), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "is memory of device 2");
    /* A thread bound to device 0 launching on device 1's stream: refused. */
    XDC_ASSERT_OK(dev->set_device(0));
    XDC_ASSERT_OK(dev->set_stream(s1b));
    XDC_ASSERT_ERR(be->quant->scale(x1, 64, 2.0f), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(dev->stream_error(s1b, &diag), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "of device 1 from a thread bound to device 0");
    XDC_ASSERT_OK(dev->set_stream(NULL));
    XDC_ASSERT_OK(dev->set_device(1));
    dev->stream_destroy(s1);
    dev->stream_destroy(s1b);
    dev->mem_free(x1);
    dev->mem_free(x2);
    XDC_ASSERT_OK(dev->set_device(0));
}

/* ---- sticky per stream --------------------------------------------------------------------------------- */

typedef struct {
    const xdc_device_ops *dev;
    xdc_stream *s;
    float *x;
    int inject;
    xdc_err_t ret, sync;
    pthread_barrier_t *bar;
} sticky_ctx;

static void *sticky_main(void *arg)
{
    sticky_ctx *c = arg;
    XDC_ASSERT_OK(c->dev->set_stream(c->s));
    pthread_barrier_wait(c->bar); /* both threads enqueue at once */
    if (c->inject) xdc_device_strict_fail_next("memset", XDC_ERR_CUDA);
    c->ret = c->dev->memset(c->x, 0, 256, NULL); /* the return ignored, as model/gpt_pass.c's zero() does */
    pthread_barrier_wait(c->bar);
    c->sync = c->dev->stream_sync(NULL);
    XDC_ASSERT_OK(c->dev->set_stream(NULL));
    return NULL;
}

/* A refused memset fails its stream even when the caller drops the return; the other thread's stream is
 * untouched (errors belong to streams, not to the process). */
XDC_TEST(device_strict_failed_enqueue_is_sticky_on_its_stream_only)
{
    const xdc_device_ops *dev = strict()->device;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    sticky_ctx c[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        c[i] = (sticky_ctx){.dev = dev, .inject = i == 0, .bar = &bar};
        XDC_ASSERT_OK(dev->stream_create(&c[i].s));
        XDC_ASSERT_OK(dev->mem_alloc((void **)&c[i].x, 256));
    }
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, sticky_main, &c[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    XDC_ASSERT_EQ(c[0].ret, XDC_ERR_CUDA);
    XDC_ASSERT_EQ(c[0].sync, XDC_ERR_CUDA);
    xdc_diag diag = {{0}};
    XDC_ASSERT_ERR(dev->stream_error(c[0].s, &diag), XDC_ERR_CUDA);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "memset: injected failure");
    XDC_ASSERT_OK(c[1].ret);
    XDC_ASSERT_OK(c[1].sync);
    XDC_ASSERT_OK(dev->stream_error(c[1].s, NULL));
    for (int i = 0; i < 2; i++) {
        dev->stream_destroy(c[i].s);
        dev->mem_free(c[i].x);
    }
    pthread_barrier_destroy(&bar);
}

/* ---- the sync's comm thread ---------------------------------------------------------------------------- */

#define N_ELEMS 40000
#define ROUNDS  3

typedef struct {
    const xdc_kern_backend *be;
    xdc_wan_peer **peers;
    int side, device, inject;
    xdc_err_t rc;
    char why[512];
} bind_side;

static void fill(float *x, int side, int round)
{
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)(side * 1000 + round + 5));
    for (size_t i = 0; i < N_ELEMS; i++) x[i] = xdc_rng_normal(&r);
}

/* One region: everything made on this thread bound to c->device; rounds whose buffer a producer stream
 * writes (never waited for by the host) before marking it ready; with c->inject the first ready event's
 * record fails. */
static void *bind_side_main(void *arg)
{
    bind_side *c = arg;
    const xdc_device_ops *dev = c->be->device;
    xdc_stream *producer = NULL;
    float *dbuf = NULL, *host = NULL;
    xdc_sync_engine *eng = NULL;
    xdc_sync *sync = NULL;
    xdc_diag d = {{0}};
    c->rc = dev->set_device(c->device);
    if (c->rc == XDC_OK) c->rc = dev->stream_create(&producer);
    if (c->rc == XDC_OK) c->rc = dev->mem_alloc((void **)&dbuf, N_ELEMS * sizeof(float));
    if (c->rc == XDC_OK) c->rc = dev->host_alloc((void **)&host, N_ELEMS * sizeof(float));
    xdc_sync_cfg cfg = {.n_elems = N_ELEMS,
                        .bucket_elems = 10000,
                        .peers = c->peers,
                        .n_regions = 2,
                        .my_region = c->side,
                        .name = "bind",
                        .backend = c->be,
                        .compute = producer};
    cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
    if (c->rc == XDC_OK) c->rc = xdc_codec_parse("int8", &cfg.codec, &d);
    if (c->rc == XDC_OK) c->rc = xdc_sync_engine_create(&eng, &d);
    if (c->rc == XDC_OK) c->rc = xdc_sync_create(eng, &cfg, &sync, &d);
    for (int round = 0; round < ROUNDS && c->rc == XDC_OK; round++) {
        fill(host, c->side, round);
        c->rc = xdc_sync_begin(sync, dbuf);
        if (c->rc == XDC_OK) c->rc = dev->copy_h2d(dbuf, host, N_ELEMS * sizeof(float), producer);
        if (c->rc != XDC_OK) break;
        if (c->inject) xdc_device_strict_fail_next("event_record", XDC_ERR_CUDA);
        xdc_sync_mark_ready(sync, N_ELEMS / 2);
        c->rc = xdc_sync_end(sync, &d);
        if (c->rc == XDC_OK) c->rc = dev->stream_sync(producer);
        if (c->rc != XDC_OK && !d.msg[0]) dev->stream_error(producer, &d);
    }
    if (c->rc != XDC_OK) snprintf(c->why, sizeof c->why, "%s", d.msg);
    xdc_sync_destroy(sync);
    xdc_sync_engine_destroy(eng);
    dev->stream_destroy(producer);
    dev->mem_free(dbuf);
    dev->host_free(host);
    (void)dev->set_device(0);
    return NULL;
}

static void two_sides(int dev0, int dev1, int inject, bind_side out[2])
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    xdc_wan_peer *peers[2][2] = {{NULL, tp.srv}, {tp.cli, NULL}};
    pthread_t th[2];
    for (int s = 0; s < 2; s++) {
        out[s] = (bind_side){.be = strict(), .peers = peers[s], .side = s, .device = s ? dev1 : dev0, .inject = inject};
        pthread_create(&th[s], NULL, bind_side_main, &out[s]);
    }
    for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
    wan_test_pair_close(&tp);
}

/* Each region's sync is made on a thread bound to device 1 or 2; the comm thread (a thread of the engine,
 * bound to device 0 until it binds) runs int8's quantizer on the comm stream. Without the comm thread's
 * set_device the strict device refuses the first encode ("from a thread bound to device 0"). */
XDC_TEST_T(sync_comm_thread_binds_the_device_of_its_sync, 120)
{
    bind_side c[2];
    two_sides(1, 2, 0, c);
    for (int s = 0; s < 2; s++)
        XDC_ASSERT_MSG(c[s].rc == XDC_OK, "side %d on device %d: %s: %s", s, c[s].device, xdc_errname(c[s].rc),
                       c[s].why);
}

/* The first ready event's record fails on both regions (injected: nothing recorded, as a refused
 * cudaEventRecord). The round must stop with that error before the comm stream reads the bucket: a read
 * would be unordered after the producer's copy, which the strict device would report as a hazard ("no
 * event or host wait ordering them") instead. */
XDC_TEST_T(sync_failed_ready_event_record_fails_the_round_before_any_read, 120)
{
    bind_side c[2];
    two_sides(0, 0, 1, c);
    for (int s = 0; s < 2; s++) {
        XDC_ASSERT_MSG(c[s].rc == XDC_ERR_CUDA, "side %d: %s: %s", s, xdc_errname(c[s].rc), c[s].why);
        XDC_ASSERT_STR_CONTAINS(c[s].why, "recording its ready event on the compute stream failed");
        XDC_ASSERT_STR_CONTAINS(c[s].why, "event_record: injected failure");
        XDC_ASSERT_MSG(!strstr(c[s].why, "no event or host wait"), "side %d read early: %s", s, c[s].why);
    }
}

/* ---- which GPU a worker takes ------------------------------------------------------------------------- */

XDC_TEST(orch_device_cuda_ordinal_is_local_rank_mod_visible)
{
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(0, 8), 0);
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(3, 8), 3); /* enough visible: LOCAL_RANK itself */
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(1, 1), 0); /* Slurm --gpus-per-task=1: its own GPU, ordinal 0 */
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(3, 1), 0);
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(5, 2), 1); /* fewer visible: shared round-robin */
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(0, 0), -1);
    XDC_ASSERT_EQ(orch_device_cuda_ordinal(-1, 4), -1);
}

static int visible_gpus;
static int probe_gpus(void) { return visible_gpus; }
static xdc_err_t probe_kernels(orch_device d, xdc_diag *diag)
{
    (void)d;
    (void)diag;
    return XDC_OK;
}

/* The worker's own check accepts the one GPU a Slurm task sees where the node check wants one per worker;
 * with none visible it refuses as the node check does. */
XDC_TEST(orch_device_worker_check_takes_one_visible_gpu)
{
    /* the demo topology with gpus_per_node: 2 in every region (two workers per node) */
    char src[256], path[512], out[8192];
    char *text = xdc_test_read_file(xdc_test_src("examples/topology/demo-2region.yaml", src, sizeof src), NULL);
    XDC_ASSERT(text != NULL);
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line && n < sizeof out - 200; line = strtok(NULL, "\n")) {
        if (strstr(line, "workers_per_node:")) continue;
        n += (size_t)snprintf(out + n, sizeof out - n, "%s\n",
                              strstr(line, "gpus_per_node:") ? "    gpus_per_node: 2" : line);
    }
    free(text);
    snprintf(path, sizeof path, "%s/binding-gpus-2.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path, out);
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    xdc_diag diag = {{0}};
    XDC_ASSERT_OK(xdc_topology_load(path, &t, &errs));
    orch_device_probe probe = {.cuda_devices = probe_gpus, .kernels = probe_kernels};
    visible_gpus = 1;
    XDC_ASSERT_ERR(orch_device_check_node(ORCH_DEVICE_CUDA, "the topology", t, 0, "east-node1", &probe, &diag),
                   XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_OK(orch_device_check_worker(ORCH_DEVICE_CUDA, "the topology", t, 0, "east-node1", &probe, &diag));
    visible_gpus = 0;
    XDC_ASSERT_ERR(orch_device_check_worker(ORCH_DEVICE_CUDA, "the topology", t, 0, "east-node1", &probe, &diag),
                   XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "node us-east/east-node1: device cuda expected 2 GPUs");
    XDC_ASSERT_STR_CONTAINS(diag.msg, "found 0 visible");
    xdc_topology_destroy(t);
}

/* ---- CUDA: the kernels changed here, checked by numbers (skipped without a GPU) ----------------------- */

/* sumsq: the multi-block reduction against the CPU's sequential double sum (printed), and two runs bit
 * for bit. */
XDC_TEST(kern_cuda_sumsq_is_deterministic_and_near_cpu)
{
    const xdc_kern_backend *cu = cuda_or_skip(), *cpu = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU, &cpu, NULL));
    const size_t sizes[] = {0, 1, 255, 257, 262151, 3000017};
    float *h = malloc(3000017 * sizeof(float)), *dx = NULL;
    xdc_rng r;
    xdc_rng_seed(&r, 23);
    for (size_t i = 0; i < 3000017; i++) h[i] = xdc_rng_normal(&r);
    XDC_ASSERT_OK(cu->model->alloc((void **)&dx, 3000017 * sizeof(float)));
    XDC_ASSERT_OK(cu->model->upload(dx, h, 3000017 * sizeof(float)));
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        double want = 0.0, a = 0.0, b = 0.0;
        XDC_ASSERT_OK(cpu->model->sumsq(h, n, &want));
        XDC_ASSERT_OK(cu->model->sumsq(dx, n, &a));
        XDC_ASSERT_OK(cu->model->sumsq(dx, n, &b));
        double rel = want ? fabs(a - want) / want : fabs(a);
        printf("sumsq n=%zu: cpu %.17g cuda %.17g abs %.3g rel %.3g\n", n, want, a, fabs(a - want), rel);
        XDC_ASSERT_MSG(memcmp(&a, &b, sizeof a) == 0, "sumsq n=%zu differs run to run: %.17g vs %.17g", n, a, b);
        XDC_ASSERT_MSG(rel <= 1e-12, "sumsq n=%zu: rel %.3g", n, rel);
    }
    cu->model->free(dx);
    free(h);
}

/* Every model op with a zero element count: nothing is launched, nothing fails (a zero-block grid would be
 * cudaErrorInvalidConfiguration, noted on the stream). */
XDC_TEST(kern_cuda_zero_element_ops_launch_nothing)
{
    const xdc_kern_backend *cu = cuda_or_skip();
    const xdc_model_ops *o = cu->model;
    float *p = NULL;
    int32_t *tok = NULL;
    XDC_ASSERT_OK(o->alloc((void **)&p, 4096));
    XDC_ASSERT_OK(o->alloc((void **)&tok, 256));
    o->encoder_forward(p, tok, p, p, 0, 4, 8);
    o->encoder_backward(p, p, p, tok, 1, 1, 0);
    o->layernorm_forward(p, p, p, p, p, p, 0, 8);
    o->layernorm_backward(p, p, p, p, p, p, p, p, 0, 0);
    o->matmul_forward(p, p, p, p, 0, 8, 8);
    o->matmul_forward(p, p, p, NULL, 4, 0, 8);
    o->matmul_backward(p, p, p, p, p, p, 0, 8, 0);
    o->attention_forward(p, p, p, 0, 4, 8, 2);
    o->attention_backward(p, p, p, p, p, 0, 4, 8, 2);
    o->gelu_forward(p, p, 0);
    o->gelu_backward(p, p, p, 0);
    o->residual_forward(p, p, p, 0);
    o->accumulate(p, p, 0);
    o->crossentropy_forward(p, p, p, tok, 0, 8);
    o->crossentropy_backward(p, p, tok, 1.0f, 0, 8);
    o->adamw(p, p, p, p, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
    o->sub(p, p, p, 0);
    o->outer_nesterov(p, p, p, 0, 0.7f, 0.9f);
    double acc = 0.0;
    XDC_ASSERT_OK(o->sumsq(p, 0, &acc));
    XDC_ASSERT_OK(o->sync());
    o->free(p);
    o->free(tok);
}

/* CUDA: a refused enqueue (memset of a host pointer: cudaErrorInvalidValue) is sticky on its stream, and
 * another stream of the process reports nothing. */
XDC_TEST(device_cuda_failed_enqueue_is_sticky_on_its_stream_only)
{
    const xdc_device_ops *dev = cuda_or_skip()->device;
    xdc_stream *a = NULL, *b = NULL;
    float *x = NULL, host[4];
    XDC_ASSERT_OK(dev->stream_create(&a));
    XDC_ASSERT_OK(dev->stream_create(&b));
    XDC_ASSERT_OK(dev->mem_alloc((void **)&x, sizeof host));
    xdc_err_t rc = dev->memset((void *)0x10, 0, 4096, a);
    printf("memset of an invalid pointer: %s\n", xdc_errname(rc));
    XDC_ASSERT(rc != XDC_OK);
    xdc_diag diag = {{0}};
    XDC_ASSERT(dev->stream_sync(a) != XDC_OK);
    XDC_ASSERT(dev->stream_error(a, &diag) != XDC_OK);
    printf("stream a: %s\n", diag.msg);
    XDC_ASSERT_OK(dev->copy_d2h(host, x, sizeof host, b));
    XDC_ASSERT_OK(dev->stream_sync(b));
    XDC_ASSERT_OK(dev->stream_error(b, NULL));
    dev->stream_destroy(a);
    dev->stream_destroy(b);
    dev->mem_free(x);
}

/* ---- timed events (bench/gpu's clock) ----------------------------------------------------------------- */

static void timed_events(xdc_backend_kind kind)
{
    const xdc_kern_backend *be = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(kind, &be, NULL));
    const xdc_device_ops *dev = be->device;
    xdc_event *a = NULL, *b = NULL, *plain = NULL;
    float *x = NULL;
    XDC_ASSERT_OK(dev->event_create_timed(&a));
    XDC_ASSERT_OK(dev->event_create_timed(&b));
    XDC_ASSERT_OK(dev->event_create(&plain));
    XDC_ASSERT_OK(dev->mem_alloc((void **)&x, 1 << 20));
    double ms = -1;
    XDC_ASSERT_ERR(dev->event_elapsed(a, b, &ms), XDC_ERR_INVALID); /* not recorded yet */
    XDC_ASSERT_OK(dev->event_record(a, NULL));
    XDC_ASSERT_OK(be->quant->scale(x, (1 << 20) / 4, 2.0f));
    XDC_ASSERT_OK(dev->event_record(b, NULL));
    XDC_ASSERT_OK(dev->event_record(plain, NULL));
    XDC_ASSERT_OK(dev->event_elapsed(a, b, &ms));
    XDC_ASSERT_MSG(ms >= 0, "elapsed %g ms", ms); /* end completed after start: never negative */
    XDC_ASSERT_ERR(dev->event_elapsed(a, plain, &ms), XDC_ERR_INVALID);
    XDC_ASSERT_OK(dev->stream_sync(NULL));
    dev->mem_free(x);
    dev->event_destroy(a);
    dev->event_destroy(b);
    dev->event_destroy(plain);
}

XDC_TEST(device_cpu_timed_events_measure_between_records) { timed_events(XDC_BACKEND_CPU); }
XDC_TEST(device_strict_timed_events_measure_between_records) { timed_events(XDC_BACKEND_CPU_STRICT); }
XDC_TEST(device_cuda_timed_events_measure_between_records)
{
    cuda_or_skip();
    timed_events(XDC_BACKEND_CUDA);
}
