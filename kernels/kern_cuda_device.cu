/* kern_cuda_device.cu — device discovery for the registry (a missing driver counts as zero devices) and
 * the CUDA device table (xdc_device_cuda_ops): cudaMalloc, cudaMallocHost, non-blocking streams, events
 * without timing, cudaMemcpyAsync, and the per-thread current stream the CUDA op families launch on.
 * Compiled and linked on the development VM (no GPU); it has not run on a GPU yet. */
extern "C" {
#include "kernels/xdc_device.h"
}
#include "kernels/kern_cuda_priv.h"

#include <atomic>
#include <cstring>
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

/* An xdc_stream is a heap cell around the cudaStream_t, so the main stream can be told apart. */
struct xdc_stream {
    cudaStream_t s;
};
struct xdc_event {
    cudaEvent_t e;
};

static std::once_flag main_once;
static xdc_stream main_stream;
static bool main_ok;
static thread_local xdc_stream *current;
static std::atomic<int> pending_error{0};

void xdc_cuda_note_error(xdc_err_t err)
{
    int expected = 0;
    if (err != XDC_OK) pending_error.compare_exchange_strong(expected, (int)err);
}

xdc_err_t xdc_cuda_take_error(void) { return (xdc_err_t)pending_error.exchange(0); }

static xdc_err_t status(cudaError_t e)
{
    if (e == cudaSuccess) return XDC_OK;
    cudaGetLastError(); /* clear a non-sticky error */
    return e == cudaErrorMemoryAllocation ? XDC_ERR_NOMEM : XDC_ERR_CUDA;
}

static xdc_stream *main_get(void)
{
    std::call_once(main_once,
                   [] { main_ok = cudaStreamCreateWithFlags(&main_stream.s, cudaStreamNonBlocking) == cudaSuccess; });
    return main_ok ? &main_stream : nullptr;
}

static xdc_stream *resolve(xdc_stream *s) { return s ? s : (current ? current : main_get()); }

cudaStream_t xdc_cuda_current_stream(void)
{
    xdc_stream *s = resolve(nullptr);
    if (!s) {
        xdc_cuda_note_error(XDC_ERR_CUDA);
        return cudaStreamPerThread;
    }
    return s->s;
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
    if (p && cudaFree(p) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA);
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
    if (p && cudaFreeHost(p) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA);
}

static xdc_err_t cu_stream_create(xdc_stream **out)
{
    xdc_stream *s = new (std::nothrow) xdc_stream;
    if (!s) return XDC_ERR_NOMEM;
    xdc_err_t err = status(cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking));
    if (err != XDC_OK) {
        delete s;
        return err;
    }
    *out = s;
    return XDC_OK;
}

static void cu_stream_destroy(xdc_stream *s)
{
    if (!s || s == &main_stream) return;
    if (cudaStreamSynchronize(s->s) != cudaSuccess || cudaStreamDestroy(s->s) != cudaSuccess)
        xdc_cuda_note_error(XDC_ERR_CUDA);
    delete s;
}

static xdc_err_t cu_stream_sync(xdc_stream *s)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    xdc_err_t err = status(cudaStreamSynchronize(s->s));
    if (err == XDC_OK) err = status(cudaGetLastError());
    xdc_err_t noted = xdc_cuda_take_error();
    return err != XDC_OK ? err : noted;
}

static xdc_err_t cu_stream_error(xdc_stream *s, xdc_diag *diag)
{
    s = resolve(s);
    cudaError_t e = s ? cudaStreamQuery(s->s) : cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess || e == cudaErrorNotReady) e = cudaPeekAtLastError();
    if (e == cudaSuccess) return XDC_OK;
    xdc_diag_set(diag, "CUDA: %s", cudaGetErrorString(e));
    return XDC_ERR_CUDA;
}

static xdc_err_t cu_set_stream(xdc_stream *s)
{
    current = s == &main_stream ? nullptr : s;
    return XDC_OK;
}

static xdc_err_t cu_get_stream(xdc_stream **out)
{
    xdc_stream *s = resolve(nullptr);
    if (!s) return XDC_ERR_CUDA;
    *out = s;
    return XDC_OK;
}

static xdc_err_t cu_copy(void *dst, const void *src, size_t bytes, xdc_stream *s, cudaMemcpyKind kind)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    if (!bytes) return XDC_OK;
    return status(cudaMemcpyAsync(dst, src, bytes, kind, s->s));
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
    if (!bytes) return XDC_OK;
    return status(cudaMemsetAsync(dst, value, bytes, s->s));
}

static xdc_err_t cu_event_create(xdc_event **out)
{
    xdc_event *e = new (std::nothrow) xdc_event;
    if (!e) return XDC_ERR_NOMEM;
    xdc_err_t err = status(cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming));
    if (err != XDC_OK) {
        delete e;
        return err;
    }
    *out = e;
    return XDC_OK;
}

static void cu_event_destroy(xdc_event *e)
{
    if (!e) return;
    if (cudaEventDestroy(e->e) != cudaSuccess) xdc_cuda_note_error(XDC_ERR_CUDA);
    delete e;
}

static xdc_err_t cu_event_record(xdc_event *e, xdc_stream *s)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    return status(cudaEventRecord(e->e, s->s));
}

static xdc_err_t cu_stream_wait_event(xdc_stream *s, xdc_event *e)
{
    s = resolve(s);
    if (!s) return XDC_ERR_CUDA;
    return status(cudaStreamWaitEvent(s->s, e->e, 0));
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
    o.stream_sync = cu_stream_sync;
    o.stream_error = cu_stream_error;
    o.set_stream = cu_set_stream;
    o.get_stream = cu_get_stream;
    o.copy_h2d = cu_copy_h2d;
    o.copy_d2h = cu_copy_d2h;
    o.copy_d2d = cu_copy_d2d;
    o.memset = cu_memset;
    o.event_create = cu_event_create;
    o.event_destroy = cu_event_destroy;
    o.event_record = cu_event_record;
    o.stream_wait_event = cu_stream_wait_event;
    o.event_sync = cu_event_sync;
    o.event_query = cu_event_query;
    o.comm_view = cu_comm_view;
    return o;
}

extern "C" const xdc_device_ops xdc_device_cuda_ops = make_ops();
