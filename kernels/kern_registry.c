/* kern_registry.c — the backend tables. The only place in kernels/ that tests XDC_HAVE_CUDA. */
#include "kernels/xdc_kernels.h"

#include <string.h>

/* Each op family exports one table per backend; see xdc_quant.h and xdc_model_ops.h. */
extern const xdc_quant_ops xdc_quant_cpu_ops;
extern const xdc_model_ops xdc_model_cpu_ops;
extern const xdc_device_ops xdc_device_cpu_ops;
extern const xdc_quant_ops xdc_quant_strict_ops;
extern const xdc_model_ops xdc_model_strict_ops;
extern const xdc_device_ops xdc_device_strict_ops;

static const xdc_kern_backend cpu_backend = {"cpu", XDC_BACKEND_CPU, &xdc_quant_cpu_ops, &xdc_model_cpu_ops,
                                             &xdc_device_cpu_ops};
static const xdc_kern_backend strict_backend = {"cpu-strict", XDC_BACKEND_CPU_STRICT, &xdc_quant_strict_ops,
                                                &xdc_model_strict_ops, &xdc_device_strict_ops};

#ifdef XDC_HAVE_CUDA
extern const xdc_quant_ops xdc_quant_cuda_ops;
extern const xdc_model_ops xdc_model_cuda_ops;
extern const xdc_device_ops xdc_device_cuda_ops;
static const xdc_kern_backend cuda_backend = {"cuda", XDC_BACKEND_CUDA, &xdc_quant_cuda_ops, &xdc_model_cuda_ops,
                                              &xdc_device_cuda_ops};
int xdc_kern_cuda_device_count_impl(void); /* kern_cuda_device.cu */
#endif

int xdc_kern_cuda_device_count(void)
{
#ifdef XDC_HAVE_CUDA
    return xdc_kern_cuda_device_count_impl();
#else
    return 0;
#endif
}

static const char *const backend_names[] = {
    [XDC_BACKEND_CPU] = "cpu", [XDC_BACKEND_CUDA] = "cuda", [XDC_BACKEND_CPU_STRICT] = "cpu-strict"};

xdc_err_t xdc_backend_parse(const char *name, xdc_backend_kind *out)
{
    for (int k = 0; k < (int)(sizeof backend_names / sizeof backend_names[0]); k++)
        if (strcmp(name, backend_names[k]) == 0) {
            *out = (xdc_backend_kind)k;
            return XDC_OK;
        }
    return XDC_ERR_CONFIG;
}

const char *xdc_backend_name(xdc_backend_kind kind)
{
    return kind >= 0 && kind < (int)(sizeof backend_names / sizeof backend_names[0]) ? backend_names[kind] : "?";
}

xdc_err_t xdc_kern_backend_get(xdc_backend_kind kind, const xdc_kern_backend **out, xdc_diag *diag)
{
    if (kind == XDC_BACKEND_CPU) {
        *out = &cpu_backend;
        return XDC_OK;
    }
    if (kind == XDC_BACKEND_CPU_STRICT) {
        *out = &strict_backend;
        return XDC_OK;
    }
#ifdef XDC_HAVE_CUDA
    if (xdc_kern_cuda_device_count() <= 0) {
        xdc_diag_set(diag, "no CUDA device visible (cudaGetDeviceCount found none)");
        return XDC_ERR_UNAVAILABLE;
    }
    *out = &cuda_backend;
    return XDC_OK;
#else
    xdc_diag_set(diag, "this build has no CUDA (nvcc was not found or CUDA=0)");
    return XDC_ERR_UNSUPPORTED;
#endif
}
