/* wan_io_fault.c — the fault I/O layer for tests (wan_fault.h): sits on top of a WAN stream's stack and
 * passes bytes through until an armed byte count, then drops, delays, resets or stalls that direction.
 * A waiting direction is left out of poll (stack->hold) and looked at again by time (stack->retry_ns),
 * so a stall costs no CPU. Also the test entry points that put the layer in an engine's connections. */
#include "wan/wan_fault.h"
#include "wan/wan_io.h"
#include "wan/wan_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <poll.h>

#define FAULT_RECHECK_MS 20 /* a stalled direction is looked at again this often (it may be re-armed) */

typedef struct fault_dir {
    wan_fault_dir f;
    uint64_t passed;   /* bytes through since arming */
    uint64_t until_ns; /* DELAY: holding until then; 0 before it started */
} fault_dir;

typedef struct wan_io_fault {
    wan_io io;
    fault_dir dir[2];
} wan_io_fault;

static const char *const dir_name[2] = {"tx", "rx"};

/* Wait for time, not the socket, in direction d. */
static int fault_wait(wan_io *io, int d, uint64_t until_ns)
{
    io->stk->hold |= d == WAN_FAULT_TX ? POLLOUT : POLLIN;
    if (!io->stk->retry_ns || until_ns < io->stk->retry_ns) io->stk->retry_ns = until_ns;
    return WAN_IO_AGAIN;
}

static int fault_reset(wan_io *io, int d)
{
    fault_dir *fd = &((wan_io_fault *)io)->dir[d];
    io->lower->ops->shutdown(io->lower, 1);
    return wan_io_fail(io->stk, XDC_ERR_CLOSED, "connection reset by the fault layer (%s, after %llu bytes)",
                       dir_name[d], (unsigned long long)fd->passed);
}

/* Before moving bytes in direction d: how many may pass (*len clamped to the fault's byte count), or a
 * result when the fault is in force. Returns 1 to go on. */
static int fault_gate(wan_io *io, int d, size_t *len, int *result)
{
    fault_dir *fd = &((wan_io_fault *)io)->dir[d];
    if (fd->f.kind == WAN_FAULT_NONE) return 1;
    if (fd->passed < fd->f.at_bytes) {
        uint64_t left = fd->f.at_bytes - fd->passed;
        if (*len > left) *len = (size_t)left;
        return 1;
    }
    uint64_t now = xdc_now_ns();
    switch (fd->f.kind) {
    case WAN_FAULT_DELAY:
        if (!fd->until_ns) fd->until_ns = now + (uint64_t)fd->f.delay_ms * XDC_NS_PER_MS;
        if (now < fd->until_ns) {
            *result = fault_wait(io, d, fd->until_ns);
            return 0;
        }
        fd->f.kind = WAN_FAULT_NONE; /* held once: from here on a plain pass-through */
        return 1;
    case WAN_FAULT_RESET: *result = fault_reset(io, d); return 0;
    case WAN_FAULT_STALL: *result = fault_wait(io, d, now + FAULT_RECHECK_MS * XDC_NS_PER_MS); return 0;
    default: return 1; /* DROP: the caller moves the bytes and discards them */
    }
}

static int fault_handshake(wan_io *io)
{
    wan_io_fault *f = (wan_io_fault *)io;
    for (int d = 0; d < 2; d++)
        if (f->dir[d].f.kind == WAN_FAULT_RESET && f->dir[d].f.at_bytes == 0) return fault_reset(io, d);
    return io->lower->ops->handshake(io->lower);
}

static int fault_read(wan_io *io, void *buf, size_t len, size_t *n)
{
    fault_dir *fd = &((wan_io_fault *)io)->dir[WAN_FAULT_RX];
    int result = WAN_IO_AGAIN;
    *n = 0;
    if (!fault_gate(io, WAN_FAULT_RX, &len, &result)) return result;
    int r = io->lower->ops->read(io->lower, buf, len, n);
    if (r != WAN_IO_DONE) return r;
    if (fd->f.kind == WAN_FAULT_DROP && fd->passed >= fd->f.at_bytes) {
        /* Read and thrown away: the caller sees nothing arrive; come back for more when the socket has it. */
        *n = 0;
        io->stk->want |= POLLIN;
        return WAN_IO_AGAIN;
    }
    fd->passed += *n;
    return WAN_IO_DONE;
}

static int fault_write(wan_io *io, const void *buf, size_t len, size_t *n)
{
    fault_dir *fd = &((wan_io_fault *)io)->dir[WAN_FAULT_TX];
    int result = WAN_IO_AGAIN;
    *n = 0;
    if (!fault_gate(io, WAN_FAULT_TX, &len, &result)) return result;
    if (fd->f.kind == WAN_FAULT_DROP && fd->passed >= fd->f.at_bytes) {
        *n = len; /* reported written, never sent */
        return WAN_IO_DONE;
    }
    int r = io->lower->ops->write(io->lower, buf, len, n);
    if (r == WAN_IO_DONE) fd->passed += *n;
    return r;
}

static void fault_shutdown(wan_io *io, int abortive) { io->lower->ops->shutdown(io->lower, abortive); }
static void fault_close(wan_io *io) { xdc_free(io); }

static const wan_io_ops fault_ops = {
    .name = "fault",
    .handshake = fault_handshake,
    .read = fault_read,
    .write = fault_write,
    .shutdown = fault_shutdown,
    .close = fault_close,
};

static void fault_set(wan_io_fault *f, const wan_fault *spec)
{
    for (int d = 0; d < 2; d++) {
        f->dir[d] = (fault_dir){0};
        if (spec) f->dir[d].f = spec->dir[d];
    }
}

xdc_err_t wan_io_fault_push(wan_io_stack *stk, const wan_fault *spec)
{
    wan_io_fault *f = xdc_calloc(1, sizeof *f);
    if (!f) return XDC_ERR_NOMEM;
    fault_set(f, spec);
    wan_io_push(stk, &f->io, &fault_ops);
    return XDC_OK;
}

xdc_err_t wan_io_fault_arm(wan_io_stack *stk, const wan_fault *spec)
{
    wan_io_fault *f = (wan_io_fault *)wan_io_find(stk, &fault_ops);
    if (!f) return XDC_ERR_INVALID;
    fault_set(f, spec);
    return XDC_OK;
}

/* ---- test entry points (wan_fault.h) ---------------------------------------------------------------- */

void wan_fault_enable(xdc_wan_engine *eng)
{
    pthread_mutex_lock(&eng->mu);
    eng->faults.on = 1;
    pthread_mutex_unlock(&eng->mu);
}

xdc_err_t wan_fault_arm(xdc_wan_peer *p, int idx, const wan_fault *f)
{
    xdc_err_t rc = XDC_ERR_INVALID;
    pthread_mutex_lock(&p->eng->mu);
    for (int i = 0; i < p->nstreams; i++) {
        wan_stream *s = p->streams[i];
        if ((idx >= 0 && i != idx) || !s || !s->io.top) continue;
        rc = wan_io_fault_arm(&s->io, f);
        if (rc != XDC_OK) break;
        s->kick = 1; /* a stalled direction may move again */
    }
    pthread_mutex_unlock(&p->eng->mu);
    wan_engine_wake(p->eng);
    return rc;
}

void wan_fault_next_dials(xdc_wan_engine *eng, int n, const wan_fault *f)
{
    pthread_mutex_lock(&eng->mu);
    eng->faults.on = 1;
    eng->faults.next_dials = n;
    eng->faults.next = *f;
    pthread_mutex_unlock(&eng->mu);
}
