/* kern_cuda_priv.h — shared by the CUDA files of kernels/ only: the calling thread's current stream
 * (kern_cuda_device.cu) that every kernel launch, copy and cuBLAS call of the CUDA op families uses, the
 * stream's sticky error, and its cuBLAS handle. */
#ifndef KERN_CUDA_PRIV_H
#define KERN_CUDA_PRIV_H

#ifdef __cplusplus
extern "C" {
#endif
#include "common/xdc_err.h"
#ifdef __cplusplus
}
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* The current stream of the calling thread (xdc_device_cuda_ops.set_stream), or the main stream of the
 * thread's current device (cudaStreamNonBlocking, created on first use). Never the legacy default stream:
 * when the main stream cannot be created this records an error that the thread's next stream_sync reports
 * and returns cudaStreamPerThread. */
cudaStream_t xdc_cuda_current_stream(void);
/* Records a failure seen in a void op (`what`: the call) as the current stream's sticky error: its next
 * stream_sync, stream_error and model sync report it (the first failure of a stream is kept). */
void xdc_cuda_note_error(xdc_err_t err, const char *what);
/* Right after a kernel launch: the runtime's launch error, if any, noted on the current stream (and
 * cleared from the runtime, so no other stream's report sees it). XDC_OK or the error. */
xdc_err_t xdc_cuda_launched(const char *what);
/* Waits for the current stream and returns its sticky error (xdc_model_ops.sync). */
xdc_err_t xdc_cuda_sync_current(void);
/* The current stream's cuBLAS handle, bound to that stream, TF32 math, created on first use with the
 * stream's device current; NULL (error noted on the stream) when cuBLAS is unusable or the calling
 * thread is on another device than the stream. See kern_cuda_device.cu for why one per stream. */
cublasHandle_t xdc_cuda_current_blas(void);

#endif /* KERN_CUDA_PRIV_H */
