/* kern_strict_priv.h — inside kernels/ only: the cpu-strict core (kern_device_strict.c) as the op
 * wrappers of kern_strict_ops.c use it. An op is queued with the list of the device ranges it reads and
 * writes; the core translates each pointer to its read-write alias, applies the hazard rule and queues
 * the CPU op on the calling thread's current stream. */
#ifndef KERN_STRICT_PRIV_H
#define KERN_STRICT_PRIV_H

#include "common/xdc_err.h"
#include "kernels/xdc_device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STRICT_MAX_ARGS 10
/* An extent that runs to the end of the pointer's allocation (a table whose size the op is not told). */
#define STRICT_TO_END   SIZE_MAX

enum { STRICT_R = 1, STRICT_W = 2, STRICT_RW = 3, STRICT_OPTIONAL = 4, STRICT_HOST = 8 };

/* One pointer argument of an op: its name (for messages), extent in bytes, access mode. STRICT_HOST:
 * host memory the op fills (sumsq's accumulator): passed through, and it must not be device memory. */
typedef struct strict_arg {
    const void *ptr;
    const char *name;
    size_t bytes;
    int mode;
} strict_arg;

typedef struct strict_op strict_op;
struct strict_op {
    const char *name;
    xdc_err_t (*fn)(strict_op *o); /* runs on the stream thread with p[] translated */
    void *p[STRICT_MAX_ARGS];
    size_t z[4];
    int i[6];
    float f[8];
    bool b;
};

/* Queues `o` on the current stream with its arguments translated into o->p[0..n). With `wait`, blocks
 * until it ran (and everything before it on that stream) and returns its result. Otherwise returns
 * XDC_OK once queued, or the error that kept it from being queued (which also fails the stream), or the
 * stream's sticky error. */
xdc_err_t strict_submit(strict_op *o, const strict_arg *args, int n, bool wait);
/* The current stream's sticky error (XDC_OK when none) — xdc_model_ops.sync after a stream_sync. */
xdc_err_t strict_sync_current(void);

#endif /* KERN_STRICT_PRIV_H */
