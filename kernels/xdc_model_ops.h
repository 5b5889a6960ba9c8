/* xdc_model_ops.h — the model op family of a kernel backend: memory, the GPT layers forward and
 * backward, softmax cross-entropy, gradient norm and AdamW. One table per backend: xdc_model_cpu_ops
 * (kern_model_cpu.c, OpenBLAS sgemm), xdc_model_strict_ops (kern_strict_ops.c: the CPU ops queued on
 * cpu-strict streams) and xdc_model_cuda_ops (kern_model.cu, cuBLAS + own kernels).
 *
 * Conventions shared by every op:
 *  - pointers are backend memory (host for CPU, device for CUDA and cpu-strict) obtained from `alloc`
 *    (the same memory as xdc_device_ops.mem_alloc of the backend);
 *  - N = B*T rows, C channels, OC output channels, V vocabulary, NH heads, all row-major fp32;
 *  - backward ops ACCUMULATE (+=) into every gradient they write (input and parameter gradients), so a
 *    residual branch and gradient accumulation over microbatches need no extra adds; the caller zeroes;
 *  - ops are queued on the calling thread's current stream (xdc_device_ops.set_stream) and are
 *    asynchronous on CUDA and cpu-strict; `sync` waits for the current stream and reports its first
 *    error; `upload`, `download` and `sumsq` wait for the current stream before they return;
 *  - on CPU every op is deterministic for a given thread count (set_threads). */
#ifndef XDC_MODEL_OPS_H
#define XDC_MODEL_OPS_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct xdc_model_ops {
    const char *name;

    /* ---- memory ---- */
    xdc_err_t (*alloc)(void **out, size_t bytes); /* zero-filled */
    void (*free)(void *p);                        /* NULL is a no-op */
    xdc_err_t (*upload)(void *dst, const void *host_src, size_t bytes);
    xdc_err_t (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* backend to backend */
    void (*zero)(void *p, size_t bytes);
    xdc_err_t (*sync)(void);
    /* Threads used by the matmuls and the other ops (CPU: OpenBLAS threads); ignored on CUDA. */
    void (*set_threads)(int n);

    /* ---- layers ---- */
    /* out (N,C) = wte[tokens] (V,C) + wpe[t] (maxT,C); tokens (B,T) int32. */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C);
    /* out (N,C); mean, rstd (N) kept for backward; w, b (C). eps 1e-5. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);
    /* out (N,OC) = inp (N,C) · w^T (OC,C) + bias (OC) (bias may be NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                            int N, int C, int OC);
    /* Causal multi-head self-attention. qkv (B,T,3C) = [q | k | v] per token, head h uses channels
     * h*C/NH..(h+1)*C/NH of each; out (B,T,C); att (B,NH,T,T) softmax probabilities (0 above the diagonal),
     * kept for backward. datt_scratch (B,NH,T,T) is backward scratch (not accumulated). */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(float *dqkv, float *datt_scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int C, int NH);
    /* tanh-approximation GELU over n elements. */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* out = a + b (n). */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* acc += x (n): the backward of a residual add (and of a copy). */
    void (*accumulate)(float *acc, const float *x, size_t n);
    /* Softmax over V of logits (N,V) into probs (N,V); losses (N) = -log probs[target]. */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                 int V);
    /* dlogits (N,V) += (probs - onehot(target)) * dloss (dloss: d(total loss)/d(each row's loss)). */
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                  int V);

    /* ---- optimizer ---- */
    /* *acc += sum of x[i]^2 in double, in index order on CPU (so chained calls over parts equal one call
     * over the whole). Synchronous. */
    xdc_err_t (*sumsq)(const float *x, size_t n, double *acc);
    /* AdamW (decoupled weight decay) on n params; the gradient is multiplied by grad_scale first (clipping,
     * averaging); t is the 1-based step for bias correction. m, v (n) moment buffers. */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int t);

    /* ---- outer optimizer (DiLoCo, streaming DiLoCo) ----
     * fp32 with one rounding per operation in the order written, no fused multiply-add: every backend
     * gives the CPU's bits, so a run's outer state does not depend on the device it ran on. */
    /* out = a - b (n); out may be a or b (the pseudo-gradient global - local, a fragment's local progress). */
    void (*sub)(float *out, const float *a, const float *b, size_t n);
    /* Nesterov outer step on n params g with pseudo-gradient d and momentum m:
     * m = mu*m + d; g -= lr*(d + mu*m) (the new m). */
    void (*outer_nesterov)(float *g, float *m, const float *d, size_t n, float lr, float mu);
};

extern const struct xdc_model_ops xdc_model_cpu_ops;
extern const struct xdc_model_ops xdc_model_strict_ops;
extern const struct xdc_model_ops xdc_model_cuda_ops; /* CUDA builds only */

/* OpenBLAS picks its sgemm kernels from the CPU's model number and falls back to its generic SSE3 core
 * ("Prescott") on a model it does not know, which a hypervisor that masks the model gets: 3.3x slower on the
 * AVX-512 VMs this project is built on (the probe's forward + backward of gpt1m, 0.197 s against 0.061 s).
 * The choice is made as the library loads, before main, and read only from OPENBLAS_CORETYPE; so when it
 * fell back on a CPU with AVX2 and the variable is unset, this sets it from the CPU's features (SkylakeX
 * with AVX-512, else Haswell) and executes the program again with the same argv. Call it first in main,
 * before any thread; it returns where there is nothing to do or the exec fails. A process that cannot start
 * again (a library's host: Python) sets the variable itself. */
void xdc_model_cpu_fit_blas(char **argv);
/* The name of the core OpenBLAS runs its kernels for ("SkylakeX", "Haswell", "Prescott", ...). */
const char *xdc_model_cpu_blas_core(void);

#ifdef __cplusplus
}
#endif

#endif /* XDC_MODEL_OPS_H */
