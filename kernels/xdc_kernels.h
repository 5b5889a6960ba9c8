/* xdc_kernels.h — the numeric backends. One table per backend (CPU, cpu-strict, CUDA); each table
 * carries the op families, each family declared in its own header: quantize/top-k/error feedback
 * (xdc_quant.h), the model layers, loss and optimizer (xdc_model_ops.h), and the device seam they run on —
 * memory, pinned host memory, streams, events, the per-thread current stream (xdc_device.h,
 * docs/device.md). kern_registry.c is the one file that knows whether CUDA was compiled in. */
#ifndef XDC_KERNELS_H
#define XDC_KERNELS_H

#include "common/xdc_err.h"

typedef enum {
    XDC_BACKEND_CPU = 0,
    XDC_BACKEND_CUDA = 1,
    /* The CPU ops behind a device that fails where a GPU would: memory the host cannot touch, ops that run
     * asynchronously in order on stream threads, real events. Proves the device path without a GPU. */
    XDC_BACKEND_CPU_STRICT = 2,
} xdc_backend_kind;

/* "cpu", "cuda", "cpu-strict" <-> the kind; XDC_ERR_CONFIG on any other word. */
xdc_err_t xdc_backend_parse(const char *name, xdc_backend_kind *out);
const char *xdc_backend_name(xdc_backend_kind kind);

typedef struct xdc_quant_ops xdc_quant_ops;   /* kernels/xdc_quant.h */
typedef struct xdc_model_ops xdc_model_ops;   /* kernels/xdc_model_ops.h */
typedef struct xdc_device_ops xdc_device_ops; /* kernels/xdc_device.h */

typedef struct xdc_kern_backend {
    const char *name; /* "cpu" | "cuda" | "cpu-strict" */
    xdc_backend_kind kind;
    const xdc_quant_ops *quant;
    const xdc_model_ops *model;
    /* Memory, streams, events and the current stream the two op families above run on. */
    const xdc_device_ops *device;
} xdc_kern_backend;

/* The CPU and cpu-strict backends always exist. CUDA: XDC_ERR_UNSUPPORTED when the build has no CUDA,
 * XDC_ERR_UNAVAILABLE when no device is visible; `diag` says which. */
xdc_err_t xdc_kern_backend_get(xdc_backend_kind kind, const xdc_kern_backend **out, xdc_diag *diag);
/* Number of CUDA devices visible (0 without CUDA in the build or without a driver). */
int xdc_kern_cuda_device_count(void);

#endif /* XDC_KERNELS_H */
