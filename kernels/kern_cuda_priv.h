/* kern_cuda_priv.h — shared by the CUDA files of kernels/ only: the calling thread's current stream
 * (kern_cuda_device.cu) that every kernel launch, copy and cuBLAS call of the CUDA op families uses. */
#ifndef KERN_CUDA_PRIV_H
#define KERN_CUDA_PRIV_H

#ifdef __cplusplus
extern "C" {
#endif
#include "common/xdc_err.h"
#ifdef __cplusplus
}
#endif

#include <cuda_runtime.h>

/* The current stream of the calling thread (xdc_device_cuda_ops.set_stream), or the process's main stream
 * (cudaStreamNonBlocking, created on first use). Never the legacy default stream: when the main stream
 * cannot be created this records an error for xdc_cuda_take_error and returns cudaStreamPerThread. */
cudaStream_t xdc_cuda_current_stream(void);
/* Records a failure seen in a void op (a cuBLAS status, a launch error) for the next sync to report. */
void xdc_cuda_note_error(xdc_err_t err);
/* The first error recorded since the last call (XDC_OK when none), cleared. */
xdc_err_t xdc_cuda_take_error(void);

#endif /* KERN_CUDA_PRIV_H */
