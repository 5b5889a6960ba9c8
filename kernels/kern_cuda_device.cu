/* kern_cuda_device.cu — device discovery for the registry (a missing driver counts as zero devices) and
 * the CUDA device table (xdc_device_cuda_ops): cudaMalloc, cudaMallocHost, non-blocking streams, events
 * without timing, cudaMemcpyAsync, the per-thread current stream the CUDA op families launch on, each
 * device's main stream, and the per-stream sticky errors and cuBLAS handles.
 * Compiled and linked on the development VM (no GPU); it has not run on a GPU yet. */
extern "C" {
#include "common/xdc_log.h"
#include "kernels/xdc_device.h"
}
#include "kernels/kern_cuda_priv.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mutex>
#include <new>

extern "C" int xdc_kern_cuda_device_count_impl(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error so later calls start clean */
        return 0;
    }
    return n;
}

/* An xdc_stream is a heap cell around the cudaStream_t with what belongs to the stream and not to the
 * process: its device, its sticky error, and its cuBLAS handle.
 *
 * Errors: a failed enqueue on a stream (a copy, memset, event record, wait or kernel launch the runtime
 * refused, a failed cuBLAS call) is recorded on that stream, first failure kept, and every later report
 * on it (stream_sync, stream_error, the model ops' sync) returns it: callers that ignore an enqueue's
 * return (a memset whose failure the next sync reports) stay correct, and another thread's failure on
 * another stream never shows up here. The runtime's per-thread last error is read right after each
 * launch and cleared, so it cannot leak into the report of another stream of the same thread.
 *
 * cuBLAS: one handle per stream, created on first GEMM with the stream's device current, bound to the
 * stream once, never reconfigured. Its workspace is then only used by work queued on that one stream, so
 * the stream orders every use of it; two threads that share a stream (the main stream) may call GEMMs on
 * the handle at once, which cuBLAS allows while no thread changes its configuration. This replaces one
 * process-wide handle rebound with cublasSetStream under a mutex before every GEMM, whose workspace was
 * shared by GEMMs of all streams and which belonged to whichever device the first thread had. */
struct xdc_stream {
    cudaStream_t s;
    int device;   /* the device current on the creating thread */
    bool is_main; /* a device's main stream: never destroyed */
    std::mutex err_mu;
    std::atomic<int> err{0}; /* xdc_err_t, sticky; the message below is written once, under err_mu */
    char msg[256] = "";
    std::mutex blas_mu;
    cublasHandle_t blas = nullptr;
    bool blas_failed = false;
};
struct xdc_event {
    cudaEvent_t e;
    bool timed;
};

#define MAX_DEVICES 64 /* main streams kept; a process seeing more GPUs than this uses the first 64 */

static std::mutex main_mu;
static xdc_stream *main_streams[MAX_DEVICES]; /* made on first use, with their device current */
static thread_local xdc_stream *current;
/* A failure with no stream to record it on (the main stream could not be made): reported by this
 * thread's next stream_sync / stream_error. */
static thread_local int thread_error;

static void note(xdc_stream *s, xdc_err_t err, const char *what, const char *why)
{
    if (err == XDC_OK) return;
    if (!s) {
        if (!thread_error) thread_error = (int)err;
        return;
    }
    std::lock_guard<std::mutex> lk(s->err_mu);
    if (s->err.load() != XDC_OK) return;
    snprintf(s->msg, sizeof s->msg, "CUDA %s on device %d: %s", what, s->device, why);
    s->err.store((int)err);
}

static xdc_err_t code_of(cudaError_t e) { return e == cudaErrorMemoryAllocation ? XDC_ERR_NOMEM : XDC_ERR_CUDA; }

/* A call that queues work on stream s (or fails doing so): a failure is noted on s, and the runtime's
 * last error, which is that failure, is cleared so no later report of another stream picks it up. */
static xdc_err_t enqueued(xdc_stream *s, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return XDC_OK;
    cudaGetLastError();
    note(s, code_of(e), what, cudaGetErrorString(e));
    return code_of(e);
}

/* A call that queues nothing (allocation, creation): its failure goes back to the caller only. */
static xdc_err_t status(cudaError_t e)
{
    if (e == cudaSuccess) return XDC_OK;
    cudaGetLastError(); /* a non-sticky error: the caller has it */
    return code_of(e);
}

static xdc_stream *main_get(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
        cudaGetLastError();
        return nullptr;
    }
    std::lock_guard<std::mutex> lk(main_mu);
    if (!main_streams[dev]) {
        xdc_stream *s = new (std::nothrow) xdc_stream;
        if (!s) return nullptr;
        if (cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking) != cudaSuccess) {
            cudaGetLastError();
            delete s;
            return nullptr;
        }
        s->device = dev;
        s->is_main = true;
        main_streams[dev] = s;
    }
    return main_streams[dev];
}

static xdc_stream *resolve(xdc_stream *s) { return s ? s : (current ? current : main_get()); }

cudaStream_t xdc_cuda_current_stream(void)
{
    xdc_stream *s = resolve(nullptr);
    if (!s) {
        note(nullptr, XDC_ERR_CUDA, "main stream", "cannot be created");
        return cudaStreamPerThread;
    }
    return s->s;
}

void xdc_cuda_note_error(xdc_err_t err, const char *what) { note(resolve(nullptr), err, what, "failed"); }

xdc_err_t xdc_cuda_launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? XDC_OK : enqueued(resolve(nullptr), e, what);
}

/* The sticky error of s (resolved), with this thread's stream-less failure; diag gets the message. */
static xdc_err_t stream_err(xdc_stream *s, xdc_diag *diag)
{
    if (!s || thread_error) {
        xdc_err_t err = thread_error ? (xdc_err_t)thread_error : XDC_ERR_CUDA;
        xdc_diag_set(diag, "CUDA: this thread's main stream cannot be created");
        return err;
    }
    xdc_err_t err = (xdc_err_t)s->err.load();
    if (err != XDC_OK && diag) {
        std::lock_guard<std::mutex> lk(s->err_mu);
        xdc_diag_set(diag, "%s", s->msg);
    }
    return err;
}

xdc_err_t xdc_cuda_sync_current(void)
{
    xdc_stream *s = resolve(nullptr);
    if (s) enqueued(s, cudaStreamSynchronize(s->s), "stream synchronize");
    return stream_err(s, nullptr);
}

cublasHandle_t xdc_cuda_current_blas(void)
{
    xdc_stream *s = resolve(nullptr);
    if (!s) return nullptr; /* xdc_cuda_current_stream noted it */
    std::lock_guard<std::mutex> lk(s->blas_mu);
    if (s->blas || s->blas_failed) {
        if (!s->blas) note(s, XDC_ERR_CUDA, "cuBLAS", "no handle (its creation failed)");
        return s->blas;
    }
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev != s->device) {
        cudaGetLastError();
        char why[96];
        snprintf(why, sizeof why, "GEMM on a stream of device %d from a thread on device %d", s->device, dev);
        note(s, XDC_ERR_CUDA, "cuBLAS", why);
        return nullptr;
    }
    cublasHandle_t h = nullptr;
    /* TF32 tensor cores (docs/device.md, "Precision"): fp32 in memory, inputs rounded to TF32 inside the
     * tensor core, fp32 accumulation; set once, with the stream, at creation. */
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(h, s->s) != CUBLAS_STATUS_SUCCESS) {
        if (h) cublasDestroy(h);
        s->blas_failed = true;
        note(s, XDC_ERR_CUDA, "cuBLAS", "handle creation failed");
        return nullptr;
    }
    s->blas = h;
    return h;
}

static xdc_err_t cu_mem_alloc(void **out, size_t bytes)
{
    void *p = nullptr;
    xdc_err_t err = status(cudaMalloc(&p, bytes ? bytes : 1));
    if (err != XDC_OK) return err;
    /* Zeroed on the calling thread's stream and waited for, so it is complete for every stream. */
    cudaStream_t st = xdc_cuda_current_stream();
    if ((err = status(cudaMemsetAsync(p, 0, bytes, st))) != XDC_OK ||
        (err = status(cudaStreamSynchronize(st))) != XDC_OK) {
        cudaFree(p);
        return err;
    }
    *out = p;
    return XDC_OK;
}

static void cu_mem_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA, "cudaFree");
}

static xdc_err_t cu_host_alloc(void **out, size_t bytes)
{
    void *p = nullptr;
    xdc_err_t err = status(cudaMallocHost(&p, bytes ? bytes : 1));
    if (err != XDC_OK) return err == XDC_ERR_CUDA ? XDC_ERR_NOMEM : err;
    memset(p, 0, bytes);
    *out = p;
    return XDC_OK;
}

static void cu_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA, "cudaFreeHost");
}

/* A new cell on the calling thread's device around `st`: a stream of ours, or (borrowed) the caller's. */
static xdc_err_t new_cell(cudaStream_t st, bool create, xdc_stream **out)
{
    int dev = 0;
    xdc_err_t err = status(cudaGetDevice(&dev));
    if (err != XDC_OK) return err;
    xdc_stream *s = new (std::nothrow) xdc_stream;
    if (!s) return XDC_ERR_NOMEM;
    s->device = dev;
    s->s = st;
    if (create && (err = status(cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking))) != XDC_OK) {
        delete s;
        return err;
    }
    *out = s;
    return XDC_OK;
}

/* The cell alone (its stream, ours or the caller's, is handled by the caller). */
static void free_cell(xdc_stream *s)
{
    if (s->blas) cublasDestroy(s->blas);
    if (current == s) current = nullptr;
    delete s;
}

static xdc_err_t cu_stream_create(xdc_stream **out) { return new_cell(nullptr, true, out); }

static void cu_stream_destroy(xdc_stream *s)
{
    if (!s || s->is_main) return;
    if (cudaStreamSynchronize(s->s) != cudaSuccess || cudaStreamDestroy(s->s) != cudaSuccess) {
        cudaGetLastError();
        XDC_ERROR(XDC_SUB_KERN, "CUDA: destroying a stream of device %d failed", s->device);
    }
    free_cell(s);
}

/* A cell around the caller's cudaStream_t (1 and NULL: the legacy default stream, 2: the per-thread one), on
 * the calling thread's device; unwrap frees the cell only. */
static xdc_err_t cu_stream_wrap(void *native, xdc_stream **out)
{
    uintptr_t v = (uintptr_t)native;
    return new_cell(v == 0 || v == 1 ? cudaStreamLegacy
                    : v == 2         ? cudaStreamPerThread
                                     : (cudaStream_t)native,
                    false, out);
}

static void cu_stream_unwrap(xdc_stream *s)
{
    if (s && !s->is_main) free_cell(s);
}

static xdc_err_t cu_stream_sync(xdc_stream *s)
{
    s = resolve(s);
    if (s) enqueued(s, cudaStreamSynchronize(s->s), "stream synchronize");
    return stream_err(s, nullptr);
}

/* Without waiting: the stream's sticky error, or a device failure cudaStreamQuery reports now (an
 * asynchronous kernel fault), which becomes the stream's. */
static xdc_err_t cu_stream_error(xdc_stream *s, xdc_diag *diag)
{
    s = resolve(s);
    if (s) {
        cudaError_t e = cudaStreamQuery(s->s);
        if (e != cudaSuccess && e != cudaErrorNotReady) enqueued(s, e, "stream query");
    }
    return stream_err(s, diag);
}

static xdc_err_t cu_set_stream(xdc_stream *s)
{
    current = s && s->is_main ? nullptr : s;
    return XDC_OK;
}

static xdc_err_t cu_get_stream(xdc_stream **out)
{
    xdc_stream *s = resolve(nullptr);
    if (!s) return XDC_ERR_CUDA;
    *out = s;
    return XDC_OK;
}

static xdc_err_t cu_set_device(int ordinal)
{
    if (ordinal < 0) return XDC_ERR_INVALID;
    return status(cudaSetDevice(ordinal));
}

static xdc_err_t cu_get_device(int *out)
{
    int d = 0;
    xdc_err_t err = status(cudaGetDevice(&d));
    if (err == XDC_OK) *out = d;
    return err;
}

/* An enqueue on a stream already failed reports that failure and queues nothing more, as the other
 * devices' sticky streams do. */
static xdc_err_t cu_copy(void *dst, const void *src, size_t bytes, xdc_stream *s, cudaMemcpyKind kind)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    if (s->err.load() != XDC_OK) return (xdc_err_t)s->err.load();
    if (!bytes) return XDC_OK;
    return enqueued(s, cudaMemcpyAsync(dst, src, bytes, kind, s->s), "cudaMemcpyAsync");
}
static xdc_err_t cu_copy_h2d(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return cu_copy(dst, src, bytes, s, cudaMemcpyHostToDevice);
}
static xdc_err_t cu_copy_d2h(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return cu_copy(dst, src, bytes, s, cudaMemcpyDeviceToHost);
}
static xdc_err_t cu_copy_d2d(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return cu_copy(dst, src, bytes, s, cudaMemcpyDeviceToDevice);
}

static xdc_err_t cu_memset(void *dst, int value, size_t bytes, xdc_stream *s)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    if (s->err.load() != XDC_OK) return (xdc_err_t)s->err.load();
    if (!bytes) return XDC_OK;
    return enqueued(s, cudaMemsetAsync(dst, value, bytes, s->s), "cudaMemsetAsync");
}

static xdc_err_t cu_event_create(xdc_event **out)
{
    xdc_event *e = new (std::nothrow) xdc_event;
    if (!e) return XDC_ERR_NOMEM;
    e->timed = false;
    xdc_err_t err = status(cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming));
    if (err != XDC_OK) {
        delete e;
        return err;
    }
    *out = e;
    return XDC_OK;
}

static xdc_err_t cu_event_create_timed(xdc_event **out)
{
    xdc_event *e = new (std::nothrow) xdc_event;
    if (!e) return XDC_ERR_NOMEM;
    xdc_err_t err = status(cudaEventCreate(&e->e));
    if (err != XDC_OK) {
        delete e;
        return err;
    }
    e->timed = true;
    *out = e;
    return XDC_OK;
}

static xdc_err_t cu_event_elapsed(xdc_event *start, xdc_event *end, double *ms)
{
    if (!start->timed || !end->timed) return XDC_ERR_INVALID;
    xdc_err_t err = status(cudaEventSynchronize(end->e));
    float f = 0.0f;
    if (err == XDC_OK) err = status(cudaEventElapsedTime(&f, start->e, end->e));
    if (err == XDC_OK) *ms = (double)f;
    return err;
}

static void cu_event_destroy(xdc_event *e)
{
    if (!e) return;
    if (cudaEventDestroy(e->e) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA, "cudaEventDestroy");
    delete e;
}

static xdc_err_t cu_event_record(xdc_event *e, xdc_stream *s)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    if (s->err.load() != XDC_OK) return (xdc_err_t)s->err.load();
    return enqueued(s, cudaEventRecord(e->e, s->s), "cudaEventRecord");
}

static xdc_err_t cu_stream_wait_event(xdc_stream *s, xdc_event *e)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    if (s->err.load() != XDC_OK) return (xdc_err_t)s->err.load();
    return enqueued(s, cudaStreamWaitEvent(s->s, e->e, 0), "cudaStreamWaitEvent");
}

static xdc_err_t cu_event_sync(xdc_event *e) { return status(cudaEventSynchronize(e->e)); }

static xdc_err_t cu_event_query(xdc_event *e, bool *done)
{
    cudaError_t r = cudaEventQuery(e->e);
    if (r == cudaErrorNotReady) {
        *done = false;
        return XDC_OK;
    }
    xdc_err_t err = status(r);
    if (err == XDC_OK) *done = true;
    return err;
}

static xdc_err_t cu_comm_view(const void *dev_ptr, void **out)
{
    *out = const_cast<void *>(dev_ptr);
    return XDC_OK;
}

static xdc_device_ops make_ops(void)
{
    xdc_device_ops o = {};
    o.name = "cuda";
    o.mem_alloc = cu_mem_alloc;
    o.mem_free = cu_mem_free;
    o.host_alloc = cu_host_alloc;
    o.host_free = cu_host_free;
    o.stream_create = cu_stream_create;
    o.stream_destroy = cu_stream_destroy;
    o.stream_wrap = cu_stream_wrap;
    o.stream_unwrap = cu_stream_unwrap;
    o.stream_sync = cu_stream_sync;
    o.stream_error = cu_stream_error;
    o.set_stream = cu_set_stream;
    o.get_stream = cu_get_stream;
    o.set_device = cu_set_device;
    o.get_device = cu_get_device;
    o.copy_h2d = cu_copy_h2d;
    o.copy_d2h = cu_copy_d2h;
    o.copy_d2d = cu_copy_d2d;
    o.memset = cu_memset;
    o.event_create = cu_event_create;
    o.event_destroy = cu_event_destroy;
    o.event_create_timed = cu_event_create_timed;
    o.event_elapsed = cu_event_elapsed;
    o.event_record = cu_event_record;
    o.stream_wait_event = cu_stream_wait_event;
    o.event_sync = cu_event_sync;
    o.event_query = cu_event_query;
    o.comm_view = cu_comm_view;
    return o;
}

extern "C" const xdc_device_ops xdc_device_cuda_ops = make_ops();
