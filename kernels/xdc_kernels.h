/* xdc_kernels.h — the numeric backends. One table per backend (CPU, CUDA); each table carries the op
 * families, each family declared in its own header: quantize/top-k/error feedback (xdc_quant.h) and the
 * model layers, loss and optimizer (xdc_model_ops.h). kern_registry.c is the one file that knows
 * whether CUDA was compiled in. */
#ifndef XDC_KERNELS_H
#define XDC_KERNELS_H

#include "common/xdc_err.h"

typedef enum { XDC_BACKEND_CPU = 0, XDC_BACKEND_CUDA = 1 } xdc_backend_kind;

typedef struct xdc_quant_ops xdc_quant_ops; /* kernels/xdc_quant.h */
typedef struct xdc_model_ops xdc_model_ops; /* kernels/xdc_model_ops.h */

typedef struct xdc_kern_backend {
    const char *name; /* "cpu" | "cuda" */
    xdc_backend_kind kind;
    const xdc_quant_ops *quant;
    const xdc_model_ops *model;
} xdc_kern_backend;

/* The CPU backend always exists. CUDA: XDC_ERR_UNSUPPORTED when the build has no CUDA,
 * XDC_ERR_UNAVAILABLE when no device is visible; `diag` says which. */
xdc_err_t xdc_kern_backend_get(xdc_backend_kind kind, const xdc_kern_backend **out, xdc_diag *diag);
/* Number of CUDA devices visible (0 without CUDA in the build or without a driver). */
int xdc_kern_cuda_device_count(void);

#endif /* XDC_KERNELS_H */
