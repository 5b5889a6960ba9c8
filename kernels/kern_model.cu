/* kern_model.cu — the CUDA model ops (xdc_model_cuda_ops): cuBLAS for the linear layers (TF32 tensor
 * cores, fp32 storage and accumulation), simple kernels for the rest. Every kernel gives each output element to one thread and sums in a fixed order (no
 * atomics), so results are deterministic run to run; they are checked against kern_model_cpu.c with
 * tolerances by tests/kernels/test_kern_model.c. Every launch, copy and cuBLAS call goes to the calling thread's
 * current stream (xdc_device_cuda_ops.set_stream; never the legacy default stream); a launch error or a
 * failed cuBLAS call is noted on that stream at once (sticky), and `sync` waits for the stream and reports
 * it. A launch over zero elements is skipped (a zero-block grid is a launch error, and there is no work).
 * The cuBLAS handle is the current stream's (kern_cuda_device.cu: one per stream, so per device, its
 * workspace ordered by that stream). Compiled and linked on the development VM; it has not run on a GPU. */
extern "C" {
#include "kernels/xdc_device.h"
#include "kernels/xdc_model_ops.h"
}

#include "kernels/kern_cuda_priv.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mutex>

#define LN_EPS  1e-5f
#define GELU_K  0.7978845608028654f
#define GELU_A  0.044715f
#define THREADS 256

#define ST xdc_cuda_current_stream()

/* The GEMMs' precision (docs/device.md, "Precision"): TF32 tensor cores — fp32 in memory, inputs rounded to
 * TF32's 10-bit mantissa inside the tensor core, fp32 accumulation — set on each stream's handle when it is
 * made (xdc_cuda_current_blas). Parameters, gradients, optimizer state and activations stay fp32. */
static void blas_check(cublasStatus_t s)
{
    if (s != CUBLAS_STATUS_SUCCESS) xdc_cuda_note_error(XDC_ERR_CUDA, "cublasSgemm");
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

/* Kernel k over n elements (one thread each, THREADS a block) on the current stream; nothing for n == 0;
 * a launch error is noted on the stream. */
#define LAUNCH(k, n, ...)                                       \
    do {                                                        \
        size_t n_ = (n);                                        \
        if (n_) {                                               \
            k<<<blocks_for(n_), THREADS, 0, ST>>>(__VA_ARGS__); \
            (void)xdc_cuda_launched(#k);                        \
        }                                                       \
    } while (0)

/* ---- memory: the device table's allocation; copies on the current stream ---- */
static xdc_err_t cu_alloc(void **out, size_t bytes) { return xdc_device_cuda_ops.mem_alloc(out, bytes); }
static void cu_free(void *p) { xdc_device_cuda_ops.mem_free(p); }
static xdc_err_t cu_copy_sync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    xdc_err_t err = kind == cudaMemcpyHostToDevice ? xdc_device_cuda_ops.copy_h2d(dst, src, bytes, NULL)
                                                   : xdc_device_cuda_ops.copy_d2h(dst, src, bytes, NULL);
    return err != XDC_OK ? err : xdc_cuda_sync_current();
}
static xdc_err_t cu_upload(void *dst, const void *src, size_t bytes)
{
    return cu_copy_sync(dst, src, bytes, cudaMemcpyHostToDevice);
}
static xdc_err_t cu_download(void *dst, const void *src, size_t bytes)
{
    return cu_copy_sync(dst, src, bytes, cudaMemcpyDeviceToHost);
}
static void cu_copy(void *dst, const void *src, size_t bytes)
{
    (void)xdc_device_cuda_ops.copy_d2d(dst, src, bytes, NULL); /* a failure is sticky on the stream */
}
static void cu_zero(void *p, size_t bytes)
{
    (void)xdc_device_cuda_ops.memset(p, 0, bytes, NULL); /* a failure is sticky on the stream */
}
static xdc_err_t cu_sync(void) { return xdc_cuda_sync_current(); }
static void cu_set_threads(int n) { (void)n; }

/* ---- encoder ---- */
__global__ void k_encoder_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int N, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C), t = n % T;
    out[i] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)t * C + c];
}
/* One thread per channel walks every position in order: deterministic sums for repeated tokens. */
__global__ void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int N, int T, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * C + c];
        dwte[(size_t)tok[n] * C + c] += d;
        dwpe[(size_t)(n % T) * C + c] += d;
    }
}
static void cu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                               int C)
{
    size_t n = (size_t)B * T * C;
    LAUNCH(k_encoder_fwd, n, out, tokens, wte, wpe, B * T, T, C);
}
static void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C)
{
    LAUNCH(k_encoder_bwd, (size_t)C, dwte, dwpe, dout, tokens, B * T, T, C);
}

/* ---- layernorm ---- */
__global__ void k_ln_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                         int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C;
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= (float)C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    float s = rsqrtf(v / (float)C + LN_EPS);
    float *o = out + (size_t)i * C;
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
}
__global__ void k_ln_bwd_inp(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *d = dout + (size_t)i * C, *x = inp + (size_t)i * C;
    float m = mean[i], s = rstd[i], dm = 0.0f, dnm = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s, dn = w[c] * d[c];
        dm += dn;
        dnm += dn * norm;
    }
    dm /= (float)C;
    dnm /= (float)C;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s, dn = w[c] * d[c];
        dinp[(size_t)i * C + c] += (dn - dm - norm * dnm) * s;
    }
}
__global__ void k_ln_bwd_params(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                                const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        float d = dout[(size_t)i * C + c];
        sb += d;
        sw += (inp[(size_t)i * C + c] - mean[i]) * rstd[i] * d;
    }
    dw[c] += sw;
    db[c] += sb;
}
static void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                 int N, int C)
{
    LAUNCH(k_ln_fwd, (size_t)N, out, mean, rstd, inp, w, b, N, C);
}
static void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                  const float *w, const float *mean, const float *rstd, int N, int C)
{
    LAUNCH(k_ln_bwd_inp, (size_t)N, dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCH(k_ln_bwd_params, (size_t)C, dw, db, dout, inp, mean, rstd, N, C);
}

/* ---- matmul (cuBLAS is column-major: a row-major (R,K) matrix is its column-major transpose) ---- */
__global__ void k_add_bias(float *out, const float *bias, int N, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] += bias[i % OC];
}
__global__ void k_bias_bwd(float *dbias, const float *dout, int N, int OC)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + j];
    dbias[j] += s;
}
/* An empty output (N or OC zero) is no work; an empty inner dimension (C zero) makes out zero (cuBLAS
 * refuses a leading dimension of 0). */
static void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {
        cu_zero(out, (size_t)N * OC * sizeof(float));
    } else {
        cublasHandle_t h = xdc_cuda_current_blas();
        if (!h) return;
        blas_check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C, &zero, out, OC));
    }
    if (bias) LAUNCH(k_add_bias, (size_t)N * OC, out, bias, N, OC);
}
static void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *w, int N, int C, int OC)
{
    const float one = 1.0f;
    if (N > 0 && C > 0 && OC > 0) { /* otherwise dinp and dw are empty or receive zero */
        cublasHandle_t h = xdc_cuda_current_blas();
        if (!h) return;
        blas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC, &one, dinp, C));
        blas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dw, C));
    }
    if (dbias) LAUNCH(k_bias_bwd, (size_t)OC, dbias, dout, N, OC);
}

/* ---- attention: scores, causal softmax, weighted sum; backward in the same pieces ---- */
__global__ void k_att_scores(float *att, const float *qkv, int B, int T, int C, int NH, float scale)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * T) return;
    int u = (int)(i % T), t = (int)((i / T) % T), h = (int)((i / ((size_t)T * T)) % NH),
        b = (int)(i / ((size_t)NH * T * T));
    if (u > t) {
        att[i] = 0.0f;
        return;
    }
    int hs = C / NH;
    const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs, *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s += q[d] * k[d];
    att[i] = s * scale;
}
__global__ void k_att_softmax(float *att, int rows, int T)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int t = r % T;
    float *row = att + (size_t)r * T;
    float mx = row[0];
    for (int u = 1; u <= t; u++) mx = fmaxf(mx, row[u]);
    float sum = 0.0f;
    for (int u = 0; u <= t; u++) {
        row[u] = expf(row[u] - mx);
        sum += row[u];
    }
    for (int u = 0; u <= t; u++) row[u] /= sum;
}
__global__ void k_att_out(float *out, const float *att, const float *qkv, int B, int T, int C, int NH)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int c = (int)(i % C), t = (int)((i / C) % T), b = (int)(i / ((size_t)T * C)), hs = C / NH, h = c / hs;
    const float *p = att + (((size_t)b * NH + h) * T + t) * T;
    float s = 0.0f;
    for (int u = 0; u <= t; u++) s += p[u] * qkv[((size_t)b * T + u) * 3 * C + 2 * C + c];
    out[i] = s;
}
/* dS = P ⊙ (dP − Σ P⊙dP) · scale with dP = dY·V^T, one thread per (b, h, t) row. */
__global__ void k_att_dscores(float *ds, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                              int NH, float scale)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B * NH * T) return;
    int t = r % T, h = (r / T) % NH, b = r / (T * NH), hs = C / NH;
    const float *p = att + (size_t)r * T, *dy = dout + ((size_t)b * T + t) * C + h * hs;
    float *d = ds + (size_t)r * T;
    float dot = 0.0f;
    for (int u = 0; u <= t; u++) {
        const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
        float dp = 0.0f;
        for (int k = 0; k < hs; k++) dp += dy[k] * v[k];
        d[u] = dp;
        dot += p[u] * dp;
    }
    for (int u = 0; u < T; u++) d[u] = u <= t ? p[u] * (d[u] - dot) * scale : 0.0f;
}
/* dq[t] += Σ_u dS[t,u]·k[u];  dk[u] += Σ_t dS[t,u]·q[t];  dv[u] += Σ_t P[t,u]·dY[t] — one thread per
 * (b, position, channel) of each. */
__global__ void k_att_dqkv(float *dqkv, const float *ds, const float *dout, const float *qkv, const float *att, int B,
                           int T, int C, int NH)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * 3 * C) return;
    int c3 = (int)(i % (3 * C)), t = (int)((i / (3 * C)) % T), b = (int)(i / ((size_t)T * 3 * C));
    int part = c3 / C, c = c3 % C, hs = C / NH, h = c / hs;
    const float *S = ds + ((size_t)b * NH + h) * T * T, *P = att + ((size_t)b * NH + h) * T * T;
    float s = 0.0f;
    if (part == 0) {
        for (int u = 0; u <= t; u++) s += S[(size_t)t * T + u] * qkv[((size_t)b * T + u) * 3 * C + C + c];
    } else if (part == 1) {
        for (int r = t; r < T; r++) s += S[(size_t)r * T + t] * qkv[((size_t)b * T + r) * 3 * C + c];
    } else {
        for (int r = t; r < T; r++) s += P[(size_t)r * T + t] * dout[((size_t)b * T + r) * C + c];
    }
    dqkv[i] += s;
}
static void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    LAUNCH(k_att_scores, (size_t)B * NH * T * T, att, qkv, B, T, C, NH, scale);
    LAUNCH(k_att_softmax, (size_t)B * NH * T, att, B * NH * T, T);
    LAUNCH(k_att_out, (size_t)B * T * C, out, att, qkv, B, T, C, NH);
}
static void cu_attention_backward(float *dqkv, float *datt_scratch, const float *dout, const float *qkv,
                                  const float *att, int B, int T, int C, int NH)
{
    float scale = 1.0f / sqrtf((float)(C / NH));
    LAUNCH(k_att_dscores, (size_t)B * NH * T, datt_scratch, dout, qkv, att, B, T, C, NH, scale);
    LAUNCH(k_att_dqkv, (size_t)B * T * 3 * C, dqkv, datt_scratch, dout, qkv, att, B, T, C, NH);
}

/* ---- pointwise ---- */
__global__ void k_gelu_fwd(float *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_A * x * x * x)));
}
__global__ void k_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], th = tanhf(GELU_K * (x + GELU_A * x * x * x));
    float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    dinp[i] += g * dout[i];
}
__global__ void k_add(float *out, const float *a, const float *b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
static void cu_gelu_forward(float *out, const float *inp, size_t n) { LAUNCH(k_gelu_fwd, n, out, inp, n); }
static void cu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    LAUNCH(k_gelu_bwd, n, dinp, inp, dout, n);
}
static void cu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    LAUNCH(k_add, n, out, a, b, n);
}
static void cu_accumulate(float *acc, const float *x, size_t n) { LAUNCH(k_add, n, acc, acc, x, n); }

/* ---- loss ---- */
__global__ void k_ce_fwd(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *l = logits + (size_t)i * V;
    float *p = probs + (size_t)i * V;
    float mx = l[0];
    for (int j = 1; j < V; j++) mx = fmaxf(mx, l[j]);
    float sum = 0.0f;
    for (int j = 0; j < V; j++) {
        p[j] = expf(l[j] - mx);
        sum += p[j];
    }
    for (int j = 0; j < V; j++) p[j] /= sum;
    losses[i] = -logf(p[targets[i]]);
}
__global__ void k_ce_bwd(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N, int V)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int j = (int)(i % V), n = (int)(i / V);
    dlogits[i] += (probs[i] - (j == targets[n] ? 1.0f : 0.0f)) * dloss;
}
static void cu_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                    int V)
{
    LAUNCH(k_ce_fwd, (size_t)N, losses, probs, logits, targets, N, V);
}
static void cu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                     int V)
{
    LAUNCH(k_ce_bwd, (size_t)N * V, dlogits, probs, targets, dloss, N, V);
}

/* ---- optimizer ---- */
/* The sum of squares (the gradient norm) as a deterministic two-pass reduction: SUMSQ_BLOCKS blocks,
 * whatever n is, thread t of block b summing elements b*THREADS + t, then every SUMSQ_BLOCKS*THREADS-th,
 * in order, in double; each block's threads combine in a fixed tree into one partial per block; one block
 * then adds the partials in a fixed order (thread t: partials t, t + THREADS, ...; then the same tree).
 * No atomics and no dependence on timing or on how many blocks ran at once: bit-identical run to run on
 * one GPU model. It differs from the CPU's sequential sum by rounding only (doubles of fp32 squares).
 * One partial-sum table per device (a __device__ array exists once per device); the mutex keeps two
 * streams' reductions on one device from sharing it at once. */
#define SUMSQ_BLOCKS 1024
__device__ double d_sumsq_part[SUMSQ_BLOCKS];
__device__ double d_sumsq_out;
__device__ void block_tree(double *part)
{
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
}
__global__ void k_sumsq_part(const float *x, size_t n)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (size_t)SUMSQ_BLOCKS * THREADS)
        s += (double)x[i] * (double)x[i];
    part[threadIdx.x] = s;
    block_tree(part);
    if (threadIdx.x == 0) d_sumsq_part[blockIdx.x] = part[0];
}
__global__ void k_sumsq_final(void)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (int b = threadIdx.x; b < SUMSQ_BLOCKS; b += THREADS) s += d_sumsq_part[b];
    part[threadIdx.x] = s;
    block_tree(part);
    if (threadIdx.x == 0) d_sumsq_out = part[0];
}
static xdc_err_t cu_sumsq(const float *x, size_t n, double *acc)
{
    if (!n) return xdc_cuda_sync_current(); /* nothing to add; still reports the stream's state */
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    cudaStream_t st = ST;
    double s = 0.0;
    k_sumsq_part<<<SUMSQ_BLOCKS, THREADS, 0, st>>>(x, n);
    XDC_CHECK(xdc_cuda_launched("k_sumsq_part"));
    k_sumsq_final<<<1, THREADS, 0, st>>>();
    XDC_CHECK(xdc_cuda_launched("k_sumsq_final"));
    cudaError_t e = cudaMemcpyFromSymbolAsync(&s, d_sumsq_out, sizeof s, 0, cudaMemcpyDeviceToHost, st);
    if (e != cudaSuccess) {
        cudaGetLastError();
        xdc_cuda_note_error(XDC_ERR_CUDA, "cudaMemcpyFromSymbolAsync");
    }
    XDC_CHECK(xdc_cuda_sync_current());
    *acc += s;
    return XDC_OK;
}
__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                        float wd, float scale, float bc1, float bc2)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * scale;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] -= lr * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + eps) + wd * p[i]);
}
static void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, float grad_scale, int t)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    LAUNCH(k_adamw, n, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
}

/* ---- outer optimizer: the intrinsics round each operation once and never fuse, as the CPU loop does ---- */
__global__ void k_sub(float *out, const float *a, const float *b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fsub_rn(a[i], b[i]);
}
static void cu_sub(float *out, const float *a, const float *b, size_t n) { LAUNCH(k_sub, n, out, a, b, n); }
__global__ void k_outer_nesterov(float *g, float *m, const float *d, size_t n, float lr, float mu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mi = __fadd_rn(__fmul_rn(mu, m[i]), d[i]);
    m[i] = mi;
    g[i] = __fsub_rn(g[i], __fmul_rn(lr, __fadd_rn(d[i], __fmul_rn(mu, mi))));
}
static void cu_outer_nesterov(float *g, float *m, const float *d, size_t n, float lr, float mu)
{
    LAUNCH(k_outer_nesterov, n, g, m, d, n, lr, mu);
}

static xdc_model_ops make_cuda_ops(void)
{
    xdc_model_ops o = {};
    o.name = "cuda";
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.upload = cu_upload;
    o.download = cu_download;
    o.copy = cu_copy;
    o.zero = cu_zero;
    o.sync = cu_sync;
    o.set_threads = cu_set_threads;
    o.encoder_forward = cu_encoder_forward;
    o.encoder_backward = cu_encoder_backward;
    o.layernorm_forward = cu_layernorm_forward;
    o.layernorm_backward = cu_layernorm_backward;
    o.matmul_forward = cu_matmul_forward;
    o.matmul_backward = cu_matmul_backward;
    o.attention_forward = cu_attention_forward;
    o.attention_backward = cu_attention_backward;
    o.gelu_forward = cu_gelu_forward;
    o.gelu_backward = cu_gelu_backward;
    o.residual_forward = cu_residual_forward;
    o.accumulate = cu_accumulate;
    o.crossentropy_forward = cu_crossentropy_forward;
    o.crossentropy_backward = cu_crossentropy_backward;
    o.sumsq = cu_sumsq;
    o.adamw = cu_adamw;
    o.sub = cu_sub;
    o.outer_nesterov = cu_outer_nesterov;
    return o;
}

extern "C" const xdc_model_ops xdc_model_cuda_ops = make_cuda_ops();
