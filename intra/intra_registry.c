/* intra_registry.c — the backend tables. The only place in intra/ that tests XDC_HAVE_NCCL. */
#include "intra/intra_priv.h"

extern const intra_backend_ops intra_cpu_ops; /* intra_cpu.c */
#ifdef XDC_HAVE_NCCL
extern const intra_backend_ops intra_nccl_ops; /* intra_nccl.cu */
#endif

const intra_backend_ops *intra_backend_lookup(xdc_intra_backend backend, xdc_diag *diag)
{
    if (backend == XDC_INTRA_CPU) return &intra_cpu_ops;
    if (backend == XDC_INTRA_NCCL) {
#ifdef XDC_HAVE_NCCL
        return &intra_nccl_ops;
#else
        xdc_diag_set(diag, "intra: this build has no NCCL (nvcc was not found or CUDA=0)");
        return NULL;
#endif
    }
    xdc_diag_set(diag, "intra: unknown backend %d", (int)backend);
    return NULL;
}
