/* kern_model_cpu.c — the CPU model ops (xdc_model_cpu_ops): matmuls and the attention products on
 * OpenBLAS cblas_sgemm, everything else as plain loops the compiler vectorises. The reference the CUDA
 * ops are checked against. Deterministic for a fixed OpenBLAS thread count: the loops here are serial and
 * sgemm partitions its work by size and thread count only. */
#include "kernels/xdc_model_ops.h"

#include "common/xdc_alloc.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads); /* libopenblas; not in every cblas.h variant */
char *openblas_get_corename(void);

#define LN_EPS 1e-5f
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* e^x for x in about [-87, 88] (clamped), within a few ulp: Cody–Waite reduction x = n·ln2 + r and a
 * degree-6 polynomial for e^r, with 2^n built in the exponent bits. Branch-free and without libm calls, so
 * the loops that use it vectorise; libm's expf/tanhf were a fifth of a training step. */
static inline float vexpf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest via 1.5·2^23 */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.6666667e-1f +
                                                  r * (4.1666668e-2f + r * (8.3333338e-3f + r * 1.3888889e-3f)))));
    union {
        uint32_t u;
        float f;
    } scale = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * scale.f;
}

/* tanh(u) = 1 - 2/(e^{2u} + 1): saturates cleanly at ±1, absolute error ~1e-7 near 0. */
static inline float vtanhf(float u) { return 1.0f - 2.0f / (vexpf(2.0f * u) + 1.0f); }

static xdc_err_t cpu_alloc(void **out, size_t bytes)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = xdc_aligned_alloc(64, rounded ? rounded : 64);
    if (!p) return XDC_ERR_NOMEM;
    memset(p, 0, rounded);
    *out = p;
    return XDC_OK;
}

static void cpu_free(void *p) { xdc_free(p); }

static xdc_err_t cpu_upload(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return XDC_OK;
}

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static xdc_err_t cpu_sync(void) { return XDC_OK; }
static void cpu_set_threads(int n) { openblas_set_num_threads(n > 0 ? n : 1); }

const char *xdc_model_cpu_blas_core(void) { return openblas_get_corename(); }

void xdc_model_cpu_fit_blas(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE") || strcmp(xdc_model_cpu_blas_core(), "Prescott") != 0) return;
    __builtin_cpu_init();
    const char *core = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) core = "Haswell";
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* not started again: the variable would describe another library's choice */
}

static void cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                                int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tokens[b * T + t] * C, *p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

static void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                                 int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tokens[b * T + t] * C, *dp = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                de[c] += d[c];
                dp[c] += d[c];
            }
        }
}

static void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                  const float *b, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f, v = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(v / (float)C + LN_EPS);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

static void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C, *x = inp + (size_t)i * C;
        float *dx = dinp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        /* dnorm = dout * w; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s, dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s, dnorm = w[c] * d[c];
            db[c] += d[c];
            dw[c] += norm * d[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

static void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (!bias) return;
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

static void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                const float *w, int N, int C, int OC)
{
    /* dinp (N,C) += dout (N,OC) · w (OC,C);  dw (OC,C) += dout^T · inp (N,C) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (!dbias) return;
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC;
        for (int j = 0; j < OC; j++) dbias[j] += d[j];
    }
}

/* Per (batch, head): S = scale·Q·K^T as one sgemm over the strided q/k columns of qkv, a causal softmax
 * row by row, then Y = P·V written straight into the head's columns of out. The masked upper triangle is
 * computed and discarded: half the flops of the product, but it keeps the work in sgemm. */
static void cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
            float *P = att + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, P, T);
            for (int t = 0; t < T; t++) {
                float *row = P + (size_t)t * T;
                float mx = row[0];
                for (int u = 1; u <= t; u++) mx = row[u] > mx ? row[u] : mx;
                float sum = 0.0f;
                for (int u = 0; u <= t; u++) row[u] = vexpf(row[u] - mx);
                for (int u = 0; u <= t; u++) sum += row[u];
                float inv = 1.0f / sum;
                for (int u = 0; u <= t; u++) row[u] *= inv;
                for (int u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, v, C3, 0.0f,
                        out + (size_t)b * T * C + (size_t)h * hs, C);
        }
}

static void cpu_attention_backward(float *dqkv, float *datt_scratch, const float *dout, const float *qkv,
                                   const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
            float *dP = datt_scratch + ((size_t)b * NH + h) * T * T;
            /* dP = dY·V^T;  dV += P^T·dY */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, dP, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dy, C, 1.0f, dv, C3);
            /* softmax backward in place: dS = P ⊙ (dP − Σ P⊙dP) · scale, zero above the diagonal */
            for (int t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T;
                float *d = dP + (size_t)t * T;
                float dot = 0.0f;
                for (int u = 0; u <= t; u++) dot += p[u] * d[u];
                for (int u = 0; u <= t; u++) d[u] = p[u] * (d[u] - dot) * scale;
                for (int u = t + 1; u < T; u++) d[u] = 0.0f;
            }
            /* dQ += dS·K;  dK += dS^T·Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, k, C3, 1.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, q, C3, 1.0f, dk, C3);
        }
}

static void cpu_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vtanhf(GELU_K * (x + GELU_A * x * x * x)));
    }
}

static void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float th = vtanhf(GELU_K * (x + GELU_A * x * x * x));
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] += g * dout[i];
    }
}

static void cpu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_accumulate(float *acc, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

static void cpu_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                     int V)
{
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        float mx = l[0];
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < V; j++) p[j] = vexpf(l[j] - mx);
        for (int j = 0; j < V; j++) sum += p[j];
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) p[j] *= inv;
        losses[i] = -logf(p[targets[i]]);
    }
}

static void cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                      int V)
{
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++) d[j] += (p[j] - (j == targets[i] ? 1.0f : 0.0f)) * dloss;
    }
}

static xdc_err_t cpu_sumsq(const float *x, size_t n, double *acc)
{
    double s = *acc;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    *acc = s;
    return XDC_OK;
}

static void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, int t)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        float mh = m[i] / bc1, vh = v[i] / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + weight_decay * p[i]);
    }
}

static void cpu_sub(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

/* Built with -std=c11, so GCC contracts no a*b+c into an fma: each operation rounds once (the contract). */
static void cpu_outer_nesterov(float *g, float *m, const float *d, size_t n, float lr, float mu)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = mu * m[i] + d[i];
        g[i] -= lr * (d[i] + mu * m[i]);
    }
}

const struct xdc_model_ops xdc_model_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_upload,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .set_threads = cpu_set_threads,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .accumulate = cpu_accumulate,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
    .sub = cpu_sub,
    .outer_nesterov = cpu_outer_nesterov,
};
