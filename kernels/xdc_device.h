/* xdc_device.h — the device seam of a kernel backend: device memory, pinned host memory, streams, async
 * copies, events, the per-thread current stream the op families run on, and the view a communication
 * library gets of device memory. One table per backend, reached through xdc_kern_backend.device:
 *
 *   cpu         synchronous; device memory is host memory; events are complete when recorded.
 *   cpu-strict  device memory the host cannot touch (PROT_NONE), one thread per stream running the CPU
 *               ops asynchronously in order, real events, and a hazard check that fails an op reading
 *               bytes another stream wrote, or writing bytes another stream read or wrote, without an
 *               ordering event (byte ranges, not blocks: docs/device.md).
 *   cuda        cudaMalloc, cudaMallocHost, non-blocking streams, events, cudaMemcpyAsync.
 *
 * Conventions shared by every function below:
 *  - every function that can fail returns xdc_err_t (XDC_OK is 0); results travel through out
 *    parameters, which are left untouched on failure;
 *  - `stream` arguments may be NULL, meaning the calling thread's current stream (xdc_device_ops.set_stream);
 *  - work queued on one stream runs in the order it was queued (an in-order queue, like a CUDA stream);
 *    work on two streams is unordered unless an event orders it (event_record + stream_wait_event) or the
 *    host waited for the first (stream_sync, event_sync) before queueing the second;
 *  - errors inside a stream (a failed kernel, a cpu-strict hazard) are sticky: the stream stops running
 *    work, and every later call that reports on it (stream_sync, the quant ops, xdc_model_ops.sync)
 *    returns the error; stream_error gives the message;
 *  - a failed enqueue (a copy, memset, event record or launch the backend refused) is sticky on its stream
 *    as a failed op is, even when the caller ignores the return: the stream's next report says it. Errors
 *    belong to a stream, never to the process: one thread's failure never surfaces in the report of a
 *    stream it did not use;
 *  - nothing runs on CUDA's legacy default stream: a thread that never called set_stream runs on the
 *    backend's main stream of its bound device (one per device, created on first use; CUDA:
 *    cudaStreamNonBlocking);
 *  - devices: each thread is bound to one device (set_device; device 0 until it calls it), as CUDA binds
 *    each host thread to one GPU. Streams and memory belong to the device of the thread that created them;
 *    an op (a kernel) runs only on a stream of the calling thread's device and only on that device's
 *    memory. Copies may cross devices. A thread the caller starts (a comm thread) binds the creator's
 *    device before its first call (get_device on the creating thread, set_device on the new one).
 *
 * The op families (xdc_model_ops, xdc_quant_ops) of the same backend queue their work on the calling
 * thread's current stream. Their pointer arguments must be device memory from mem_alloc (cpu-strict
 * refuses anything else, naming the op and the argument). */
#ifndef XDC_DEVICE_H
#define XDC_DEVICE_H

#include "common/xdc_err.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xdc_stream xdc_stream; /* opaque, owned by the backend that created it */
typedef struct xdc_event xdc_event;   /* opaque, owned by the backend that created it */

typedef struct xdc_device_ops {
    const char *name; /* "cpu" | "cpu-strict" | "cuda" */

    /* ---- device memory ---- */
    /* mem_alloc() :
     *  Allocates `bytes` (0 allowed: a valid, unique pointer) of device memory, zero-filled, aligned to at
     *  least 256 bytes. The zeroing is complete when this returns (no stream involved).
     *  @return XDC_OK and *out, or XDC_ERR_NOMEM (XDC_ERR_CUDA when the driver fails otherwise). */
    xdc_err_t (*mem_alloc)(void **out, size_t bytes);
    /* mem_free() :
     *  Releases memory from mem_alloc. NULL is a no-op. The caller makes sure no queued work still uses
     *  it (cpu-strict and CUDA wait for the device to be idle on this memory; do not rely on it). */
    void (*mem_free)(void *p);

    /* ---- pinned host memory ---- */
    /* host_alloc() :
     *  Allocates `bytes` of page-locked host memory, zero-filled: host code (the WAN) reads and writes it
     *  directly, and copies between it and device memory can run asynchronously (cudaMallocHost).
     *  @return XDC_OK and *out, or XDC_ERR_NOMEM. */
    xdc_err_t (*host_alloc)(void **out, size_t bytes);
    /* host_free() : releases memory from host_alloc; NULL is a no-op. */
    void (*host_free)(void *p);

    /* ---- streams ---- */
    /* stream_create() :
     *  A new in-order work queue (CUDA: cudaStreamCreateWithFlags(cudaStreamNonBlocking); cpu-strict: a
     *  thread). It is ordered with no other stream until an event or a host wait orders it.
     *  @return XDC_OK and *out, XDC_ERR_NOMEM, XDC_ERR_CUDA. */
    xdc_err_t (*stream_create)(xdc_stream **out);
    /* stream_destroy() :
     *  Waits for the work queued on `s`, then releases it. NULL is a no-op; the main stream is never
     *  destroyed (passing it is a no-op). A stream current on some thread must not be destroyed. */
    void (*stream_destroy)(xdc_stream *s);
    /* stream_sync() :
     *  Blocks the calling thread until all work queued on `s` (NULL: the current stream) so far has run.
     *  Afterwards the host is ordered after that work (it may read what it wrote through a copy, and work
     *  it queues on any stream runs after it).
     *  @return XDC_OK, or the stream's sticky error (see stream_error). */
    xdc_err_t (*stream_sync)(xdc_stream *s);
    /* stream_error() :
     *  The sticky error of `s` (NULL: current) without waiting: XDC_OK while nothing failed. With a
     *  non-NULL diag, copies the message ("<op>: ...") when there is an error. */
    xdc_err_t (*stream_error)(xdc_stream *s, xdc_diag *diag);

    /* stream_wrap() :
     *  An xdc_stream for a stream the caller's own runtime made, so work of this backend can be ordered
     *  with it (event_record, stream_wait_event, stream_sync; libxdc's device entry points take the
     *  caller's stream this way). `native`: CUDA: a cudaStream_t, NULL or 1 the legacy default stream, 2
     *  the per-thread default stream (the values of __cuda_array_interface__'s "stream"); cpu-strict: an
     *  xdc_stream of this backend, NULL the calling thread's current stream; cpu: ignored (the main
     *  stream). It belongs to the calling thread's device. Release it with stream_unwrap, never
     *  stream_destroy (the caller's stream stays the caller's).
     *  @return XDC_OK and *out, XDC_ERR_INVALID (cpu-strict: not a stream), XDC_ERR_NOMEM, XDC_ERR_CUDA. */
    xdc_err_t (*stream_wrap)(void *native, xdc_stream **out);
    /* stream_unwrap() : releases what stream_wrap made (not the caller's stream); NULL is a no-op. */
    void (*stream_unwrap)(xdc_stream *s);

    /* ---- the current stream (per thread) ---- */
    /* set_stream() :
     *  Makes `s` the calling thread's current stream: the model and quant ops of this backend called from
     *  this thread queue on it, and NULL stream arguments mean it. NULL restores the main stream.
     *  @return XDC_OK, or XDC_ERR_INVALID when `s` belongs to another backend (cpu-strict checks). */
    xdc_err_t (*set_stream)(xdc_stream *s);
    /* get_stream() :
     *  The calling thread's current stream (never NULL on success; the main stream when none was set,
     *  created on first use).
     *  @return XDC_OK and *out, or XDC_ERR_NOMEM / XDC_ERR_CUDA when the main stream cannot be created. */
    xdc_err_t (*get_stream)(xdc_stream **out);

    /* ---- the bound device (per thread) ---- */
    /* set_device() :
     *  Binds the calling thread to device `ordinal` (CUDA: cudaSetDevice): the streams and memory it
     *  creates from now on belong to it, its ops must run on that device's streams and memory, and with
     *  no current stream it uses that device's main stream. cpu: only device 0; cpu-strict: devices
     *  0 to XDC_STRICT_DEVICES - 1, which share the host but refuse to mix as GPUs do.
     *  @return XDC_OK, XDC_ERR_INVALID (no such device), XDC_ERR_CUDA. */
    xdc_err_t (*set_device)(int ordinal);
    /* get_device() : the calling thread's bound device (0 when it never called set_device).
     *  @return XDC_OK and *out, or XDC_ERR_CUDA. */
    xdc_err_t (*get_device)(int *out);

    /* ---- asynchronous copies (queued on `s`; NULL: current) ---- */
    /* copy_h2d() :
     *  Copies `bytes` from host memory `src` to device memory `dst`. `src` must stay valid and unchanged
     *  until the copy ran (stream_sync or an event); from pinned memory (host_alloc) the copy overlaps
     *  host work on CUDA, from pageable memory CUDA may copy before returning.
     *  @return XDC_OK (queued), XDC_ERR_INVALID (cpu-strict: dst is not device memory, or src is),
     *          or the stream's sticky error. */
    xdc_err_t (*copy_h2d)(void *dst, const void *src, size_t bytes, xdc_stream *s);
    /* copy_d2h() :
     *  Copies `bytes` from device memory `src` to host memory `dst`; `dst` holds the data once the stream
     *  was synchronized (or an event recorded after the copy completed). Same returns as copy_h2d. */
    xdc_err_t (*copy_d2h)(void *dst, const void *src, size_t bytes, xdc_stream *s);
    /* copy_d2d() : device to device, `bytes`; the ranges must not overlap. Same returns as copy_h2d. */
    xdc_err_t (*copy_d2d)(void *dst, const void *src, size_t bytes, xdc_stream *s);
    /* memset() : sets `bytes` of device memory `dst` to the byte `value`. Same returns as copy_h2d. */
    xdc_err_t (*memset)(void *dst, int value, size_t bytes, xdc_stream *s);

    /* ---- events ---- */
    /* event_create() :
     *  A new event, complete until first recorded (CUDA: cudaEventDisableTiming).
     *  @return XDC_OK and *out, XDC_ERR_NOMEM, XDC_ERR_CUDA. */
    xdc_err_t (*event_create)(xdc_event **out);
    /* event_create_timed() :
     *  As event_create, and the event also keeps when its capture completed, for event_elapsed (CUDA: an
     *  event with timing; cpu: the host clock at record, the work having run; cpu-strict: the host clock
     *  when the stream thread reached the record). Timing costs a little per record: events that only
     *  order streams use event_create.
     *  @return XDC_OK and *out, XDC_ERR_NOMEM, XDC_ERR_CUDA. */
    xdc_err_t (*event_create_timed)(xdc_event **out);
    /* event_elapsed() :
     *  *ms = milliseconds from the completion of `start`'s capture to that of `end`'s (both timed events,
     *  recorded; waits for `end`). The device's own clock, so host scheduling between the two records does
     *  not count (CUDA: cudaEventElapsedTime, about 0.5 us resolution).
     *  @return XDC_OK and *ms, XDC_ERR_INVALID (an event not timed or not recorded), or the recording
     *          stream's sticky error. */
    xdc_err_t (*event_elapsed)(xdc_event *start, xdc_event *end, double *ms);
    /* event_destroy() : releases an event; NULL is a no-op. Waits already queued on it still hold. */
    void (*event_destroy)(xdc_event *e);
    /* event_record() :
     *  Captures the work queued on `s` (NULL: current) so far: the event completes when that work ran.
     *  Recording again replaces the capture (waits queued earlier keep the earlier one).
     *  @return XDC_OK, XDC_ERR_CUDA, or the stream's sticky error. */
    xdc_err_t (*event_record)(xdc_event *e, xdc_stream *s);
    /* stream_wait_event() :
     *  Work queued on `s` (NULL: current) after this call waits until `e`'s latest capture completed; the
     *  host does not block. Waiting on a never-recorded event is a no-op.
     *  @return XDC_OK, XDC_ERR_CUDA, or the stream's sticky error. */
    xdc_err_t (*stream_wait_event)(xdc_stream *s, xdc_event *e);
    /* event_sync() :
     *  Blocks the calling thread until `e` completed; the host is then ordered after the captured work.
     *  @return XDC_OK, or the sticky error of the recording stream (XDC_ERR_CUDA on CUDA). */
    xdc_err_t (*event_sync)(xdc_event *e);
    /* event_query() :
     *  *done = whether `e` completed, without blocking (true orders the host like event_sync).
     *  @return XDC_OK, or the recording stream's sticky error / XDC_ERR_CUDA. */
    xdc_err_t (*event_query)(xdc_event *e, bool *done);

    /* ---- communication view ---- */
    /* comm_view() :
     *  The address that a communication library running "on the device" (the CPU intra backend, as NCCL's
     *  kernels do on a GPU) reads and writes for the device pointer `dev_ptr`: cpu: the pointer itself;
     *  cpu-strict: the read-write alias of the PROT_NONE view; cuda: the device pointer itself. Only work
     *  ordered by the caller (stream_sync or event_sync before, and no queued op touching it meanwhile)
     *  may go through the view. A pointer into the middle of an allocation maps to the same offset.
     *  @return XDC_OK and *out, or XDC_ERR_INVALID (cpu-strict: not device memory). */
    xdc_err_t (*comm_view)(const void *dev_ptr, void **out);
    /* comm_hold() / comm_release() :
     *  Optional (NULL: nothing tracked; cpu-strict only). A communication operation's access to `bytes` of
     *  device memory at `dev_ptr` (`write`: it writes them), from its start until the host saw it
     *  complete (comm_release(*token)): until then a stream op that writes bytes it reads, or touches bytes
     *  it writes, is refused (cpu-strict's hazard rule, the message naming `what`), as such a race on a GPU
     *  would corrupt the transfer. *token 0: not tracked (host memory). The intra communicator holds
     *  the buffers of its sends and receives (intra/intra_comm.c). */
    void (*comm_hold)(const void *dev_ptr, size_t bytes, bool write, const char *what, uint64_t *token);
    void (*comm_release)(uint64_t token);
} xdc_device_ops;

/* kern_device_cpu.c, kern_device_strict.c; kern_cuda_device.cu (CUDA builds only). Reach them through
 * xdc_kern_backend_get(kind)->device. */
extern const xdc_device_ops xdc_device_cpu_ops;
extern const xdc_device_ops xdc_device_strict_ops;
extern const xdc_device_ops xdc_device_cuda_ops;

/* Devices the cpu-strict backend pretends to have (set_device). */
#define XDC_STRICT_DEVICES 4

/* cpu-strict only, for tests: the calling thread's next call of the device function named `fn`
 * ("event_record", "stream_wait_event", "memset", "copy_h2d", "copy_d2h", "copy_d2d") fails with `err`
 * without doing its work, as a CUDA call the driver refuses does, and the failure is sticky on the
 * stream it named. Once per call of this function; err XDC_OK or fn NULL cancels. */
void xdc_device_strict_fail_next(const char *fn, xdc_err_t err);

#ifdef __cplusplus
}
#endif

#endif /* XDC_DEVICE_H */
