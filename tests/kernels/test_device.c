/* test_device.c — the device seam (kernels/xdc_device.h) on cpu, cpu-strict and, where a GPU is visible,
 * CUDA: copies round-trip, one stream runs in order, an event orders two streams, the per-thread current
 * stream. cpu-strict alone: a host touch of device memory dies of SIGSEGV naming the allocation, a missing
 * event (read after write and write after read across streams) is refused naming the op, the buffer and
 * both streams, and host pointers handed to device ops are refused naming the op and the argument. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const xdc_kern_backend *backend(xdc_backend_kind kind)
{
    const xdc_kern_backend *b = NULL;
    if (kind == XDC_BACKEND_CUDA && xdc_kern_cuda_device_count() <= 0)
        xdc_test_skip("no GPU: no CUDA device visible (or no CUDA in this build)");
    XDC_ASSERT_OK(xdc_kern_backend_get(kind, &b, NULL));
    XDC_ASSERT(b->device != NULL);
    return b;
}

/* ---- every backend ---- */

static void copies_round_trip(xdc_backend_kind kind)
{
    const xdc_kern_backend *b = backend(kind);
    const xdc_device_ops *D = b->device;
    size_t n = 300000; /* several 64 KiB hazard blocks, not a multiple of one */
    uint8_t *h = NULL, *back = NULL;
    XDC_ASSERT_OK(D->host_alloc((void **)&h, n));
    XDC_ASSERT_OK(D->host_alloc((void **)&back, n));
    for (size_t i = 0; i < n; i++) XDC_ASSERT_MSG(h[i] == 0, "pinned memory not zero-filled at %zu", i);
    for (size_t i = 0; i < n; i++) h[i] = (uint8_t)(i * 31 + 7);
    void *d1 = NULL, *d2 = NULL;
    XDC_ASSERT_OK(D->mem_alloc(&d1, n));
    XDC_ASSERT_OK(D->mem_alloc(&d2, n));
    XDC_ASSERT_OK(D->copy_d2h(back, d1, n, NULL)); /* fresh device memory reads as zeros */
    XDC_ASSERT_OK(D->stream_sync(NULL));
    for (size_t i = 0; i < n; i++) XDC_ASSERT_MSG(back[i] == 0, "device memory not zero-filled at %zu", i);
    XDC_ASSERT_OK(D->copy_h2d(d1, h, n, NULL));
    XDC_ASSERT_OK(D->copy_d2d(d2, d1, n, NULL));
    XDC_ASSERT_OK(D->memset((uint8_t *)d2 + 1000, 0xab, 5000, NULL));
    XDC_ASSERT_OK(D->copy_d2h(back, d2, n, NULL));
    XDC_ASSERT_OK(D->stream_sync(NULL));
    for (size_t i = 0; i < n; i++) {
        uint8_t want = i >= 1000 && i < 6000 ? 0xab : h[i];
        if (back[i] != want) XDC_FAIL("%s: byte %zu is %u, want %u", b->name, i, back[i], want);
    }
    XDC_ASSERT_OK(D->stream_error(NULL, NULL));
    D->mem_free(d1), D->mem_free(d2), D->host_free(h), D->host_free(back);
}
XDC_TEST(device_cpu_copies_round_trip) { copies_round_trip(XDC_BACKEND_CPU); }
XDC_TEST(device_strict_copies_round_trip) { copies_round_trip(XDC_BACKEND_CPU_STRICT); }
XDC_TEST(device_cuda_copies_round_trip) { copies_round_trip(XDC_BACKEND_CUDA); }

/* 200 upload/download pairs through one device buffer on one stream: each download sees exactly the
 * upload before it, and a chain of GELUs (order-dependent) gives the CPU's result bit for bit. */
static void one_stream_runs_in_order(xdc_backend_kind kind)
{
    const xdc_kern_backend *b = backend(kind);
    const xdc_device_ops *D = b->device;
    xdc_stream *s = NULL;
    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT_OK(D->set_stream(s));
    enum { ROUNDS = 200, N = 4096 };
    uint32_t *in = NULL, *out = NULL;
    XDC_ASSERT_OK(D->host_alloc((void **)&in, sizeof(uint32_t) * ROUNDS * N));
    XDC_ASSERT_OK(D->host_alloc((void **)&out, sizeof(uint32_t) * ROUNDS * N));
    for (size_t i = 0; i < (size_t)ROUNDS * N; i++) in[i] = (uint32_t)(i * 2654435761u);
    void *d = NULL;
    XDC_ASSERT_OK(D->mem_alloc(&d, sizeof(uint32_t) * N));
    for (int r = 0; r < ROUNDS; r++) {
        XDC_ASSERT_OK(D->copy_h2d(d, in + (size_t)r * N, sizeof(uint32_t) * N, s));
        XDC_ASSERT_OK(D->copy_d2h(out + (size_t)r * N, d, sizeof(uint32_t) * N, NULL)); /* NULL: current = s */
    }
    XDC_ASSERT_OK(D->stream_sync(s));
    XDC_ASSERT(memcmp(in, out, sizeof(uint32_t) * ROUNDS * N) == 0);

    size_t n = 100000;
    float *x = xdc_malloc(n * 4), *want = xdc_malloc(n * 4), *got = xdc_malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i % 2001) - 1000) * 1e-3f;
    float *dx = NULL, *dy = NULL;
    XDC_ASSERT_OK(b->model->alloc((void **)&dx, n * 4));
    XDC_ASSERT_OK(b->model->alloc((void **)&dy, n * 4));
    XDC_ASSERT_OK(b->model->upload(dx, x, n * 4));
    memcpy(want, x, n * 4);
    float *tmp = xdc_malloc(n * 4);
    for (int k = 0; k < 20; k++) {
        b->model->gelu_forward(dy, dx, n);
        b->model->residual_forward(dx, dy, dy, n);
        xdc_model_cpu_ops.gelu_forward(tmp, want, n);
        xdc_model_cpu_ops.residual_forward(want, tmp, tmp, n);
    }
    XDC_ASSERT_OK(b->model->download(got, dx, n * 4));
    XDC_ASSERT_OK(b->model->sync());
    if (kind == XDC_BACKEND_CUDA)
        for (size_t i = 0; i < n; i++) XDC_ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * fabsf(want[i]));
    else XDC_ASSERT_MSG(memcmp(got, want, n * 4) == 0, "%s: GELU chain differs from cpu", b->name);
    b->model->free(dx), b->model->free(dy), D->mem_free(d);
    xdc_free(x), xdc_free(want), xdc_free(got), xdc_free(tmp), D->host_free(in), D->host_free(out);
    XDC_ASSERT_OK(D->set_stream(NULL));
    D->stream_destroy(s);
}
XDC_TEST(device_cpu_one_stream_runs_in_order) { one_stream_runs_in_order(XDC_BACKEND_CPU); }
XDC_TEST(device_strict_one_stream_runs_in_order) { one_stream_runs_in_order(XDC_BACKEND_CPU_STRICT); }
XDC_TEST(device_cuda_one_stream_runs_in_order) { one_stream_runs_in_order(XDC_BACKEND_CUDA); }

/* Stream A computes (a long GELU chain), records an event; stream B waits on it and downloads. B must see
 * A's final values: on cpu-strict A's thread is still busy when B's copy is queued. */
static void event_orders_two_streams(xdc_backend_kind kind)
{
    const xdc_kern_backend *b = backend(kind);
    const xdc_device_ops *D = b->device;
    xdc_stream *sa = NULL, *sb = NULL;
    xdc_event *e = NULL;
    XDC_ASSERT_OK(D->stream_create(&sa));
    XDC_ASSERT_OK(D->stream_create(&sb));
    XDC_ASSERT_OK(D->event_create(&e));
    bool done = false;
    XDC_ASSERT_OK(D->event_query(e, &done)); /* never recorded: complete */
    XDC_ASSERT(done);
    size_t n = 1 << 20;
    float *x = xdc_malloc(n * 4), *want = xdc_malloc(n * 4), *got = NULL, *tmp = xdc_malloc(n * 4);
    XDC_ASSERT_OK(D->host_alloc((void **)&got, n * 4));
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i % 4001) - 2000) * 1e-3f;
    float *dx = NULL, *dy = NULL;
    XDC_ASSERT_OK(D->mem_alloc((void **)&dx, n * 4));
    XDC_ASSERT_OK(D->mem_alloc((void **)&dy, n * 4));
    XDC_ASSERT_OK(D->set_stream(sa));
    XDC_ASSERT_OK(D->copy_h2d(dx, x, n * 4, NULL));
    memcpy(want, x, n * 4);
    for (int k = 0; k < 12; k++) {
        b->model->gelu_forward(dy, dx, n);
        b->model->accumulate(dx, dy, n);
        xdc_model_cpu_ops.gelu_forward(tmp, want, n);
        xdc_model_cpu_ops.accumulate(want, tmp, n);
    }
    XDC_ASSERT_OK(D->event_record(e, sa));
    XDC_ASSERT_OK(D->set_stream(sb));
    XDC_ASSERT_OK(D->stream_wait_event(NULL, e));
    XDC_ASSERT_OK(D->copy_d2h(got, dx, n * 4, NULL));
    XDC_ASSERT_OK(D->stream_sync(sb));
    XDC_ASSERT_OK(D->event_query(e, &done)); /* B ran after A's captured work */
    XDC_ASSERT(done);
    XDC_ASSERT_OK(D->event_sync(e));
    if (kind == XDC_BACKEND_CUDA)
        for (size_t i = 0; i < n; i++) XDC_ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * fabsf(want[i]));
    else XDC_ASSERT_MSG(memcmp(got, want, n * 4) == 0, "%s: stream B did not see stream A's result", b->name);
    XDC_ASSERT_OK(D->stream_error(sa, NULL));
    XDC_ASSERT_OK(D->stream_error(sb, NULL));
    XDC_ASSERT_OK(D->set_stream(NULL));
    D->mem_free(dx), D->mem_free(dy), D->host_free(got), D->event_destroy(e);
    D->stream_destroy(sa), D->stream_destroy(sb);
    xdc_free(x), xdc_free(want), xdc_free(tmp);
}
XDC_TEST(device_cpu_event_orders_two_streams) { event_orders_two_streams(XDC_BACKEND_CPU); }
XDC_TEST(device_strict_event_orders_two_streams) { event_orders_two_streams(XDC_BACKEND_CPU_STRICT); }
XDC_TEST(device_cuda_event_orders_two_streams) { event_orders_two_streams(XDC_BACKEND_CUDA); }

typedef struct {
    const xdc_device_ops *D;
    xdc_stream *seen;
    xdc_err_t err;
} thread_probe;

static void *probe_main(void *p)
{
    thread_probe *t = p;
    t->err = t->D->get_stream(&t->seen);
    return NULL;
}

static void current_stream_is_per_thread(xdc_backend_kind kind)
{
    const xdc_device_ops *D = backend(kind)->device;
    xdc_stream *main_s = NULL, *s = NULL, *got = NULL;
    XDC_ASSERT_OK(D->get_stream(&main_s));
    XDC_ASSERT(main_s != NULL);
    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT(s != main_s);
    XDC_ASSERT_OK(D->set_stream(s));
    XDC_ASSERT_OK(D->get_stream(&got));
    XDC_ASSERT(got == s);
    thread_probe t = {.D = D};
    pthread_t th;
    XDC_ASSERT(pthread_create(&th, NULL, probe_main, &t) == 0);
    pthread_join(th, NULL);
    XDC_ASSERT_OK(t.err);
    XDC_ASSERT(t.seen == main_s); /* another thread still runs on the main stream */
    XDC_ASSERT_OK(D->set_stream(NULL));
    XDC_ASSERT_OK(D->get_stream(&got));
    XDC_ASSERT(got == main_s);
    D->stream_destroy(s);
    D->stream_destroy(main_s); /* a no-op on the main stream */
    XDC_ASSERT_OK(D->stream_sync(NULL));
}
XDC_TEST(device_cpu_current_stream_is_per_thread) { current_stream_is_per_thread(XDC_BACKEND_CPU); }
XDC_TEST(device_strict_current_stream_is_per_thread) { current_stream_is_per_thread(XDC_BACKEND_CPU_STRICT); }
XDC_TEST(device_cuda_current_stream_is_per_thread) { current_stream_is_per_thread(XDC_BACKEND_CUDA); }

XDC_TEST(device_comm_view_reads_device_memory)
{
    const xdc_kern_backend *cpu = backend(XDC_BACKEND_CPU), *strict = backend(XDC_BACKEND_CPU_STRICT);
    void *d = NULL, *v = NULL;
    XDC_ASSERT_OK(cpu->device->mem_alloc(&d, 64));
    XDC_ASSERT_OK(cpu->device->comm_view((char *)d + 8, &v));
    XDC_ASSERT(v == (char *)d + 8); /* identity */
    cpu->device->mem_free(d);

    const xdc_device_ops *D = strict->device;
    uint32_t h[1000];
    for (int i = 0; i < 1000; i++) h[i] = (uint32_t)i * 3u;
    XDC_ASSERT_OK(D->mem_alloc(&d, sizeof h));
    XDC_ASSERT_OK(D->copy_h2d(d, h, sizeof h, NULL));
    XDC_ASSERT_OK(D->stream_sync(NULL));
    XDC_ASSERT_OK(D->comm_view((uint32_t *)d + 10, &v));
    XDC_ASSERT(v != (uint32_t *)d + 10); /* the read-write alias, not the PROT_NONE view */
    XDC_ASSERT_EQ(((uint32_t *)v)[0], 30);
    ((uint32_t *)v)[1] = 7; /* the comm library writes through the view... */
    uint32_t back = 0;
    XDC_ASSERT_OK(D->copy_d2h(&back, (uint32_t *)d + 11, 4, NULL)); /* ...and the device sees it */
    XDC_ASSERT_OK(D->stream_sync(NULL));
    XDC_ASSERT_EQ(back, 7);
    XDC_ASSERT_ERR(D->comm_view(h, &v), XDC_ERR_INVALID); /* host memory has no view */
    D->mem_free(d);
}

/* ---- cpu-strict only ---- */

/* In a child: allocate strict memory and read (or write) it from the host. The child must die of SIGSEGV
 * (or, under AddressSanitizer, its report) after the handler's message naming address and size. */
static void host_touch_dies(bool write)
{
    int pipefd[2];
    XDC_ASSERT(pipe(pipefd) == 0);
    pid_t pid = fork();
    XDC_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        const xdc_kern_backend *b = NULL;
        void *d = NULL;
        if (xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &b, NULL) != XDC_OK ||
            b->device->mem_alloc(&d, 1000) != XDC_OK)
            _exit(3);
        volatile uint8_t *p = (volatile uint8_t *)d + 100;
        if (write) *p = 1;
        else (void)*p;
        _exit(0); /* not reached when the device works */
    }
    close(pipefd[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t r;
    while (len + 1 < sizeof buf && (r = read(pipefd[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)r;
    buf[len] = 0;
    close(pipefd[0]);
    int st = 0;
    XDC_ASSERT(waitpid(pid, &st, 0) == pid);
    XDC_ASSERT_MSG((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
                       (WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3),
                   "child %s strict memory and was not killed (status %#x): %s", write ? "wrote" : "read", st, buf);
    XDC_ASSERT_STR_CONTAINS(buf, "host touched cpu-strict device memory at 0x");
    XDC_ASSERT_STR_CONTAINS(buf, "(allocation of 1000 bytes)");
}
XDC_TEST(device_strict_host_read_faults_naming_the_allocation) { host_touch_dies(false); }
XDC_TEST(device_strict_host_write_faults_naming_the_allocation) { host_touch_dies(true); }

typedef struct {
    const xdc_kern_backend *b;
    const xdc_device_ops *D;
    xdc_stream *sa, *sb;
    float *dx, *dy, *host;
    size_t n;
} two_streams;

static void two_open(two_streams *t)
{
    memset(t, 0, sizeof *t);
    t->b = backend(XDC_BACKEND_CPU_STRICT);
    t->D = t->b->device;
    t->n = 1 << 18;
    XDC_ASSERT_OK(t->D->stream_create(&t->sa));
    XDC_ASSERT_OK(t->D->stream_create(&t->sb));
    XDC_ASSERT_OK(t->D->mem_alloc((void **)&t->dx, t->n * 4));
    XDC_ASSERT_OK(t->D->mem_alloc((void **)&t->dy, t->n * 4));
    XDC_ASSERT_OK(t->D->host_alloc((void **)&t->host, t->n * 4));
}

static void two_close(two_streams *t)
{
    XDC_ASSERT_OK(t->D->set_stream(NULL));
    t->D->mem_free(t->dx), t->D->mem_free(t->dy), t->D->host_free(t->host);
    t->D->stream_destroy(t->sa), t->D->stream_destroy(t->sb);
}

/* Read after write: A writes dx (accumulate), B downloads dx with no event. Refused when B's copy is
 * queued, every time, whatever the threads' timing; the message names op, argument, buffer, streams. */
XDC_TEST(device_strict_missing_event_read_after_write_is_reported)
{
    for (int rep = 0; rep < 20; rep++) {
        two_streams t;
        two_open(&t);
        XDC_ASSERT_OK(t.D->set_stream(t.sa));
        t.b->model->gelu_forward(t.dy, t.dx, t.n);
        t.b->model->accumulate(t.dx, t.dy, t.n);
        XDC_ASSERT_ERR(t.D->copy_d2h(t.host, t.dx, t.n * 4, t.sb), XDC_ERR_INVALID);
        xdc_diag d = {{0}};
        XDC_ASSERT_ERR(t.D->stream_error(t.sb, &d), XDC_ERR_INVALID);
        XDC_ASSERT_STR_CONTAINS(d.msg, "copy_d2h on stream");
        XDC_ASSERT_STR_CONTAINS(d.msg, "reads argument src");
        XDC_ASSERT_STR_CONTAINS(d.msg, "last written by accumulate on stream");
        char buf[64];
        snprintf(buf, sizeof buf, "device buffer %p of %zu bytes", (void *)t.dx, t.n * 4);
        XDC_ASSERT_STR_CONTAINS(d.msg, buf);
        XDC_ASSERT_ERR(t.D->stream_sync(t.sb), XDC_ERR_INVALID); /* sticky */
        XDC_ASSERT_OK(t.D->stream_sync(t.sa));                   /* A itself is fine */
        two_close(&t);
    }
}

/* Write after read: B downloads dx (ordered after A's upload by an event), then A overwrites dx without
 * waiting for B. Refused naming the reader. */
XDC_TEST(device_strict_missing_event_write_after_read_is_reported)
{
    two_streams t;
    two_open(&t);
    xdc_event *e = NULL;
    XDC_ASSERT_OK(t.D->event_create(&e));
    XDC_ASSERT_OK(t.D->copy_h2d(t.dx, t.host, t.n * 4, t.sa));
    XDC_ASSERT_OK(t.D->event_record(e, t.sa));
    XDC_ASSERT_OK(t.D->stream_wait_event(t.sb, e));
    XDC_ASSERT_OK(t.D->copy_d2h(t.host, t.dx, t.n * 4, t.sb));
    XDC_ASSERT_OK(t.D->set_stream(t.sa));
    t.b->model->zero(t.dx, t.n * 4);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(t.b->model->sync(), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(t.D->stream_error(t.sa, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "memset on stream");
    XDC_ASSERT_STR_CONTAINS(d.msg, "writes argument dst");
    XDC_ASSERT_STR_CONTAINS(d.msg, "still being read by stream");
    XDC_ASSERT_OK(t.D->stream_sync(t.sb));
    t.D->event_destroy(e);
    two_close(&t);
}

/* A communication hold (what the intra communicator takes for a send or a receive on device memory):
 * rewriting a buffer a send still reads is refused until the host saw the send end (comm_release), as
 * the 1F1B loop's dx_out must wait for the previous send (orch_train.c); a stream reading a buffer a
 * receive still writes is refused the same way; after the release both go through; host memory is not
 * tracked. */
XDC_TEST(device_strict_comm_hold_refuses_reuse_before_release)
{
    two_streams t;
    two_open(&t);
    uint64_t send = 0, recv = 0, host = 1;
    t.D->comm_hold(t.dx, t.n * 4, false, "intra send", &send);
    t.D->comm_hold(t.host, t.n * 4, false, "intra send", &host);
    XDC_ASSERT(send != 0);
    XDC_ASSERT_EQ(host, 0);
    (void)t.D->copy_d2d(t.dx, t.dy, t.n * 4, t.sa); /* the next backward's copy into dx_out, too early */
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(t.D->stream_sync(t.sa), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(t.D->stream_error(t.sa, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "copy_d2d on stream");
    XDC_ASSERT_STR_CONTAINS(d.msg, "still being read by stream");
    XDC_ASSERT_STR_CONTAINS(d.msg, "intra send");
    t.D->comm_hold(t.dy, t.n * 4, true, "intra recv", &recv);
    (void)t.D->copy_d2h(t.host, t.dy, t.n * 4, t.sb); /* the forward reading x_in before the receive ended */
    XDC_ASSERT_ERR(t.D->stream_sync(t.sb), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(t.D->stream_error(t.sb, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "last written by intra recv");
    t.D->comm_release(send);
    t.D->comm_release(recv);
    xdc_stream *sc = NULL;
    XDC_ASSERT_OK(t.D->stream_create(&sc));
    XDC_ASSERT_OK(t.D->copy_d2d(t.dx, t.dy, t.n * 4, sc));
    XDC_ASSERT_OK(t.D->stream_sync(sc));
    t.D->stream_destroy(sc);
    two_close(&t);
}

/* The orderings that are enough: an event (A -> B), or the host waiting for A before queueing on B. */
XDC_TEST(device_strict_event_or_host_wait_satisfies_the_rule)
{
    two_streams t;
    two_open(&t);
    xdc_event *e = NULL;
    XDC_ASSERT_OK(t.D->event_create(&e));
    XDC_ASSERT_OK(t.D->set_stream(t.sa));
    t.b->model->gelu_forward(t.dy, t.dx, t.n);
    XDC_ASSERT_OK(t.D->event_record(e, NULL));
    XDC_ASSERT_OK(t.D->stream_wait_event(t.sb, e));
    XDC_ASSERT_OK(t.D->copy_d2h(t.host, t.dy, t.n * 4, t.sb)); /* RAW ordered by the event */
    XDC_ASSERT_OK(t.D->stream_sync(t.sb));
    t.b->model->gelu_forward(t.dy, t.dx, t.n); /* WAR: B's read was waited for by the host */
    XDC_ASSERT_OK(t.D->stream_sync(t.sa));
    XDC_ASSERT_OK(t.D->copy_d2d(t.dx, t.dy, t.n * 4, t.sb)); /* RAW ordered by the host wait */
    XDC_ASSERT_OK(t.D->stream_sync(t.sb));
    /* two streams writing disjoint 64 KiB blocks of one buffer need no event */
    XDC_ASSERT_OK(t.D->memset(t.dx, 1, 65536, t.sa));
    XDC_ASSERT_OK(t.D->memset((char *)t.dx + 65536, 2, 65536, t.sb));
    XDC_ASSERT_OK(t.D->stream_sync(t.sa));
    XDC_ASSERT_OK(t.D->stream_sync(t.sb));
    t.D->event_destroy(e);
    two_close(&t);
}

/* The rule is precise to bytes: inside one 64 KiB block, A and B write adjacent, disjoint ranges (a
 * bucket edge not aligned to anything), then A reads its own range and B its own, all without events —
 * no report, and the bytes are what each stream wrote. Several rounds, so entries are replaced and
 * merged. */
XDC_TEST(device_strict_disjoint_ranges_in_one_block_need_no_event)
{
    two_streams t;
    two_open(&t);
    size_t edge = 12804; /* a 0.05 MiB-like bucket edge, not 64 KiB (nor 4 KiB) aligned */
    char *x = (char *)t.dx;
    for (int round = 0; round < 5; round++) {
        XDC_ASSERT_OK(t.D->memset(x + 100, 1 + round, edge - 100, t.sa));
        XDC_ASSERT_OK(t.D->memset(x + edge, 11 + round, 3000, t.sb));
        XDC_ASSERT_OK(t.D->copy_d2h((char *)t.host + 100, x + 100, edge - 100, t.sa)); /* A reads A's bytes */
        XDC_ASSERT_OK(t.D->copy_d2h((char *)t.host + edge, x + edge, 3000, t.sb));
        XDC_ASSERT_OK(t.D->set_stream(t.sb)); /* a model op on B next to A's bytes */
        t.b->model->accumulate((float *)(x + edge + 3000), (const float *)(x + edge), 100);
        XDC_ASSERT_OK(t.b->model->sync());
        XDC_ASSERT_OK(t.D->set_stream(NULL));
        XDC_ASSERT_OK(t.D->stream_sync(t.sa));
        const unsigned char *h = (const unsigned char *)t.host;
        XDC_ASSERT(h[100] == 1 + round && h[edge - 1] == 1 + round);
        XDC_ASSERT(h[edge] == 11 + round && h[edge + 2999] == 11 + round);
    }
    XDC_ASSERT_OK(t.D->stream_error(t.sa, NULL));
    XDC_ASSERT_OK(t.D->stream_error(t.sb, NULL));
    two_close(&t);
}

/* Overlapping ranges without an event are still refused, every time, however small the overlap: write
 * after write (one byte over the edge), read after write, write after read; the message names the op,
 * the argument, the buffer, the overlapping bytes and both streams. */
XDC_TEST(device_strict_overlapping_ranges_in_one_block_are_reported)
{
    for (int rep = 0; rep < 10; rep++) {
        two_streams t;
        two_open(&t);
        size_t edge = 12804;
        char *x = (char *)t.dx;
        char buf[160];
        xdc_diag d = {{0}};
        /* WAW: B's range starts one byte before A's ends */
        XDC_ASSERT_OK(t.D->memset(x + 100, 1, edge - 100, t.sa));
        XDC_ASSERT_ERR(t.D->memset(x + edge - 1, 2, 3000, t.sb), XDC_ERR_INVALID);
        XDC_ASSERT_ERR(t.D->stream_error(t.sb, &d), XDC_ERR_INVALID);
        XDC_ASSERT_STR_CONTAINS(d.msg, "memset on stream");
        XDC_ASSERT_STR_CONTAINS(d.msg, "writes argument dst");
        snprintf(buf, sizeof buf, "device buffer %p of %zu bytes, bytes [%zu, %zu)) last written by memset on stream",
                 (void *)t.dx, t.n * 4, edge - 1, edge);
        XDC_ASSERT_STR_CONTAINS(d.msg, buf);
        XDC_ASSERT_OK(t.D->stream_sync(t.sa));
        two_close(&t);

        /* RAW: a model op on B reads 4 bytes A's accumulate wrote */
        two_open(&t);
        x = (char *)t.dx;
        XDC_ASSERT_OK(t.D->set_stream(t.sa));
        t.b->model->accumulate((float *)x, (const float *)t.dy, 1000); /* bytes [0, 4000) */
        XDC_ASSERT_OK(t.D->set_stream(t.sb));
        t.b->model->gelu_forward(t.dy + 2000, (const float *)(x + 3996), 10);
        XDC_ASSERT_ERR(t.b->model->sync(), XDC_ERR_INVALID);
        XDC_ASSERT_ERR(t.D->stream_error(t.sb, &d), XDC_ERR_INVALID);
        XDC_ASSERT_STR_CONTAINS(d.msg, "gelu_forward on stream");
        XDC_ASSERT_STR_CONTAINS(d.msg, "reads argument inp");
        XDC_ASSERT_STR_CONTAINS(d.msg, "bytes [3996, 4000)) last written by accumulate on stream");
        XDC_ASSERT_OK(t.D->set_stream(NULL));
        XDC_ASSERT_OK(t.D->stream_sync(t.sa));
        two_close(&t);

        /* WAR: B reads [5000, 6000) after an event; A then overwrites [5996, 7000) without waiting for B */
        two_open(&t);
        x = (char *)t.dx;
        xdc_event *e = NULL;
        XDC_ASSERT_OK(t.D->event_create(&e));
        XDC_ASSERT_OK(t.D->memset(x, 3, 8000, t.sa));
        XDC_ASSERT_OK(t.D->event_record(e, t.sa));
        XDC_ASSERT_OK(t.D->stream_wait_event(t.sb, e));
        XDC_ASSERT_OK(t.D->copy_d2h(t.host, x + 5000, 1000, t.sb));
        XDC_ASSERT_OK(t.D->memset(x + 100, 4, 4900, t.sa)); /* disjoint from B's read: fine */
        XDC_ASSERT_ERR(t.D->memset(x + 5996, 4, 1004, t.sa), XDC_ERR_INVALID);
        XDC_ASSERT_ERR(t.D->stream_error(t.sa, &d), XDC_ERR_INVALID);
        XDC_ASSERT_STR_CONTAINS(d.msg, "bytes [5996, 6000)) still being read by stream");
        XDC_ASSERT_STR_CONTAINS(d.msg, "copy_d2h");
        XDC_ASSERT_OK(t.D->stream_sync(t.sb));
        t.D->event_destroy(e);
        two_close(&t);
    }
}

/* Many small accesses of two streams in one block (more entries than a block keeps): merged entries may
 * only over-report, never hide a hazard — a real overlap afterwards is still refused. */
XDC_TEST(device_strict_many_ranges_in_one_block_keep_the_guarantee)
{
    two_streams t;
    two_open(&t);
    char *x = (char *)t.dx;
    for (int i = 0; i < 200; i++) { /* A writes every even 100-byte piece, B every odd one */
        XDC_ASSERT_OK(t.D->memset(x + 200 * (size_t)i, 1, 100, t.sa));
        XDC_ASSERT_OK(t.D->memset(x + 200 * (size_t)i + 100, 2, 100, t.sb));
    }
    XDC_ASSERT_OK(t.D->stream_error(t.sb, NULL));
    XDC_ASSERT_ERR(t.D->copy_d2h(t.host, x + 150, 10, t.sa), XDC_ERR_INVALID); /* B's bytes on A */
    XDC_ASSERT_OK(t.D->stream_sync(t.sb));
    two_close(&t);
}

/* Host memory where device memory is required: refused naming op and argument (quant ops return the
 * error; void model ops fail the stream for the next sync). */
XDC_TEST(device_strict_refuses_host_pointers_naming_op_and_argument)
{
    const xdc_kern_backend *b = backend(XDC_BACKEND_CPU_STRICT);
    const xdc_device_ops *D = b->device;
    xdc_stream *s = NULL;
    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT_OK(D->set_stream(s));
    float host[256] = {0};
    float *dev = NULL;
    XDC_ASSERT_OK(D->mem_alloc((void **)&dev, sizeof host));
    int8_t *dq = NULL;
    float *ds = NULL;
    XDC_ASSERT_OK(D->mem_alloc((void **)&dq, 256));
    XDC_ASSERT_OK(D->mem_alloc((void **)&ds, 64));
    XDC_ASSERT_ERR(b->quant->quantize_int8(dev, NULL, 256, 15, dq, ds), XDC_ERR_INVALID); /* bad block: no fail */
    XDC_ASSERT_OK(D->stream_error(NULL, NULL));
    XDC_ASSERT_ERR(b->quant->quantize_int8(host, NULL, 256, 64, dq, ds), XDC_ERR_INVALID);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(D->stream_error(NULL, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "quantize_int8: argument x");
    XDC_ASSERT_STR_CONTAINS(d.msg, "is not cpu-strict device memory");
    XDC_ASSERT_ERR(b->quant->accumulate(dev, 256, dev), XDC_ERR_INVALID); /* the stream stays failed */
    D->stream_destroy(s);

    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT_OK(D->set_stream(s));
    b->model->gelu_forward(dev, host, 256);
    XDC_ASSERT_ERR(b->model->sync(), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(D->stream_error(NULL, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "gelu_forward: argument inp");
    D->stream_destroy(s);

    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT_OK(D->set_stream(s));
    b->model->gelu_forward(dev, dev + 1, 256); /* one float past the end */
    XDC_ASSERT_ERR(b->model->sync(), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(D->stream_error(NULL, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "runs past the end of its allocation of 1024 bytes");
    XDC_ASSERT_ERR(D->copy_h2d(dev, dq, 16, NULL), XDC_ERR_INVALID); /* failed stream refuses more work */
    XDC_ASSERT_OK(D->set_stream(NULL));
    D->stream_destroy(s);

    double acc = 0.0;
    XDC_ASSERT_OK(D->copy_h2d(dev, host, sizeof host, NULL));
    XDC_ASSERT_OK(b->model->sumsq(dev, 256, &acc)); /* waits: the host reads acc right away */
    XDC_ASSERT_EQ(acc, 0);
    XDC_ASSERT_ERR(b->model->sumsq(dev, 256, (double *)(void *)ds), XDC_ERR_INVALID); /* acc must be host */
    D->mem_free(dev), D->mem_free(dq), D->mem_free(ds);
}

/* Two host threads, each on its own stream, handing a buffer over with a host wait and a condition
 * variable (the compute thread / comm thread pattern): no event needed, no report. */
typedef struct {
    const xdc_kern_backend *b;
    float *buf, *out;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ready;
    xdc_err_t err;
} handover;

static void *consumer_main(void *p)
{
    handover *h = p;
    const xdc_device_ops *D = h->b->device;
    xdc_stream *s = NULL;
    h->err = D->stream_create(&s);
    if (h->err != XDC_OK) return NULL;
    D->set_stream(s);
    pthread_mutex_lock(&h->mu);
    while (!h->ready) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    h->b->model->gelu_forward(h->out, h->buf, h->n); /* reads what the producer's stream wrote */
    h->err = D->stream_sync(NULL);
    D->set_stream(NULL);
    D->stream_destroy(s);
    return NULL;
}

XDC_TEST(device_strict_host_wait_hands_buffers_between_threads)
{
    handover h = {.b = backend(XDC_BACKEND_CPU_STRICT), .n = 1 << 18};
    const xdc_device_ops *D = h.b->device;
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    XDC_ASSERT_OK(D->mem_alloc((void **)&h.buf, h.n * 4));
    XDC_ASSERT_OK(D->mem_alloc((void **)&h.out, h.n * 4));
    pthread_t th;
    XDC_ASSERT(pthread_create(&th, NULL, consumer_main, &h) == 0);
    xdc_stream *s = NULL;
    XDC_ASSERT_OK(D->stream_create(&s));
    XDC_ASSERT_OK(D->set_stream(s));
    XDC_ASSERT_OK(D->memset(h.buf, 0x3f, h.n * 4, NULL));
    h.b->model->gelu_forward(h.buf, h.buf, h.n);
    XDC_ASSERT_OK(D->stream_sync(NULL));
    pthread_mutex_lock(&h.mu);
    h.ready = true;
    pthread_cond_signal(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(th, NULL);
    XDC_ASSERT_OK(h.err);
    XDC_ASSERT_OK(D->set_stream(NULL));
    D->stream_destroy(s);
    D->mem_free(h.buf), D->mem_free(h.out);
}
