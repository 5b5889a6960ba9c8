/* kern_device_cpu.c — the device table of the plain CPU backend (xdc_device_cpu_ops): device memory is
 * host memory, every copy and memset runs before it returns, streams are tokens, and an event is complete
 * as soon as it is recorded. The CPU model and quant ops run on the calling thread whatever its current
 * stream, so results are exactly those of calling the ops directly. */
#include "kernels/xdc_device.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <stdbool.h>
#include <stdint.h>

#include <string.h>

struct xdc_stream {
    int dummy;
};
struct xdc_event {
    bool timed, recorded;
    uint64_t t_ns; /* host clock at the last record (timed events) */
};

static struct xdc_stream main_stream;
static _Thread_local struct xdc_stream *current;

/* Buffers of a message's size and up come from xdc_shared_alloc: the CPU intra backend's collectives then
 * reduce straight in a peer's buffer (docs/intra.md, single copy). */
#define CPU_SHARED_MIN ((size_t)64 << 10)

static xdc_err_t cpu_mem_alloc(void **out, size_t bytes)
{
    size_t rounded = bytes ? (bytes + 255) & ~(size_t)255 : 256;
    void *p = rounded >= CPU_SHARED_MIN ? xdc_shared_alloc(rounded) : xdc_aligned_alloc(256, rounded);
    if (!p) return XDC_ERR_NOMEM;
    if (rounded < CPU_SHARED_MIN) memset(p, 0, rounded); /* shared allocations come zeroed */
    *out = p;
    return XDC_OK;
}

static void cpu_mem_free(void *p) { xdc_shared_free(p); /* frees an ordinary allocation too */ }

/* One device: the host. */
static xdc_err_t cpu_set_device(int ordinal) { return ordinal == 0 ? XDC_OK : XDC_ERR_INVALID; }
static xdc_err_t cpu_get_device(int *out)
{
    *out = 0;
    return XDC_OK;
}

static xdc_err_t cpu_stream_create(xdc_stream **out)
{
    xdc_stream *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    *out = s;
    return XDC_OK;
}

static void cpu_stream_destroy(xdc_stream *s)
{
    if (s && s != &main_stream) xdc_free(s);
}

static xdc_err_t cpu_stream_wrap(void *native, xdc_stream **out)
{
    (void)native; /* synchronous: every stream is ordered with every other */
    *out = &main_stream;
    return XDC_OK;
}

static void cpu_stream_unwrap(xdc_stream *s) { (void)s; }

static xdc_err_t cpu_stream_sync(xdc_stream *s)
{
    (void)s;
    return XDC_OK;
}

static xdc_err_t cpu_stream_error(xdc_stream *s, xdc_diag *diag)
{
    (void)s;
    (void)diag;
    return XDC_OK;
}

static xdc_err_t cpu_set_stream(xdc_stream *s)
{
    current = s;
    return XDC_OK;
}

static xdc_err_t cpu_get_stream(xdc_stream **out)
{
    *out = current ? current : &main_stream;
    return XDC_OK;
}

static xdc_err_t cpu_copy(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    (void)s;
    if (bytes) memcpy(dst, src, bytes);
    return XDC_OK;
}

static xdc_err_t cpu_memset(void *dst, int value, size_t bytes, xdc_stream *s)
{
    (void)s;
    if (bytes) memset(dst, value, bytes);
    return XDC_OK;
}

static xdc_err_t cpu_event_create(xdc_event **out)
{
    xdc_event *e = xdc_calloc(1, sizeof *e);
    if (!e) return XDC_ERR_NOMEM;
    *out = e;
    return XDC_OK;
}

static void cpu_event_destroy(xdc_event *e) { xdc_free(e); }

static xdc_err_t cpu_event_create_timed(xdc_event **out)
{
    XDC_CHECK(cpu_event_create(out));
    (*out)->timed = true;
    return XDC_OK;
}

/* Every op ran before it returned: the host clock now is when the captured work completed. */
static xdc_err_t cpu_event_record(xdc_event *e, xdc_stream *s)
{
    (void)s;
    e->recorded = true;
    if (e->timed) e->t_ns = xdc_now_ns();
    return XDC_OK;
}

static xdc_err_t cpu_event_elapsed(xdc_event *start, xdc_event *end, double *ms)
{
    if (!start->timed || !end->timed || !start->recorded || !end->recorded) return XDC_ERR_INVALID;
    *ms = ((double)end->t_ns - (double)start->t_ns) / 1e6;
    return XDC_OK;
}

static xdc_err_t cpu_stream_wait_event(xdc_stream *s, xdc_event *e)
{
    (void)s;
    (void)e;
    return XDC_OK;
}

static xdc_err_t cpu_event_sync(xdc_event *e)
{
    (void)e;
    return XDC_OK;
}

static xdc_err_t cpu_event_query(xdc_event *e, bool *done)
{
    (void)e;
    *done = true;
    return XDC_OK;
}

static xdc_err_t cpu_comm_view(const void *dev_ptr, void **out)
{
    *out = (void *)dev_ptr;
    return XDC_OK;
}

const xdc_device_ops xdc_device_cpu_ops = {
    .name = "cpu",
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .host_alloc = cpu_mem_alloc,
    .host_free = cpu_mem_free,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_wrap = cpu_stream_wrap,
    .stream_unwrap = cpu_stream_unwrap,
    .stream_sync = cpu_stream_sync,
    .stream_error = cpu_stream_error,
    .set_stream = cpu_set_stream,
    .get_stream = cpu_get_stream,
    .set_device = cpu_set_device,
    .get_device = cpu_get_device,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .memset = cpu_memset,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_create_timed = cpu_event_create_timed,
    .event_elapsed = cpu_event_elapsed,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
    .comm_view = cpu_comm_view,
};
