/* kern_strict_ops.c — the model and quant op tables of cpu-strict (xdc_model_strict_ops,
 * xdc_quant_strict_ops): each op names the device ranges it reads and writes, and the strict core
 * (kern_device_strict.c) translates them to their read-write aliases, checks the hazard rule and queues
 * the CPU op of the same name on the calling thread's current stream. The CPU ops run in the order they
 * were queued, so results are bit for bit those of the cpu backend. Ops that hand a value to the host
 * (sumsq) wait for their stream; upload and download wait too (they are synchronous by contract). */
#include "kernels/kern_strict_priv.h"

#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"

#define F32(n)   ((size_t)(n) * sizeof(float))
#define I32(n)   ((size_t)(n) * sizeof(int32_t))
#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const xdc_model_ops *const cm = &xdc_model_cpu_ops;
static const xdc_quant_ops *const cq = &xdc_quant_cpu_ops;

/* Op arguments are translated into o->p[] in the order of the argument list. */
#define P(k, T) ((T)o->p[k])

/* ---- model: memory ---- */

static xdc_err_t s_alloc(void **out, size_t bytes) { return xdc_device_strict_ops.mem_alloc(out, bytes); }
static void s_free(void *p) { xdc_device_strict_ops.mem_free(p); }

static xdc_err_t s_upload(void *dst, const void *src, size_t bytes)
{
    xdc_err_t err = xdc_device_strict_ops.copy_h2d(dst, src, bytes, NULL);
    return err != XDC_OK ? err : xdc_device_strict_ops.stream_sync(NULL);
}

static xdc_err_t s_download(void *dst, const void *src, size_t bytes)
{
    xdc_err_t err = xdc_device_strict_ops.copy_d2h(dst, src, bytes, NULL);
    return err != XDC_OK ? err : xdc_device_strict_ops.stream_sync(NULL);
}

/* Void ops: a refusal fails the stream; the next sync reports it. */
static void s_copy(void *dst, const void *src, size_t bytes)
{
    (void)xdc_device_strict_ops.copy_d2d(dst, src, bytes, NULL);
}
static void s_zero(void *p, size_t bytes) { (void)xdc_device_strict_ops.memset(p, 0, bytes, NULL); }
static xdc_err_t s_sync(void) { return strict_sync_current(); }
static void s_set_threads(int n) { cm->set_threads(n); }

/* ---- model: layers ---- */

static xdc_err_t x_encoder_forward(strict_op *o)
{
    cm->encoder_forward(P(0, float *), P(1, const int32_t *), P(2, const float *), P(3, const float *), o->i[0],
                        o->i[1], o->i[2]);
    return XDC_OK;
}
/* wte (V,C): V is not an argument. In the model's arena wpe follows wte, so wte ends where wpe starts
 * when both sit in one allocation in that order; otherwise wte is taken to run to its allocation's end. */
static size_t wte_extent(const void *wte, const void *wpe)
{
    return wpe > wte ? (size_t)((const char *)wpe - (const char *)wte) : STRICT_TO_END;
}
static void s_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                              int C)
{
    size_t N = (size_t)B * T;
    strict_op o = {.name = "encoder_forward", .fn = x_encoder_forward, .i = {B, T, C}};
    strict_arg a[] = {{out, "out", F32(N * C), STRICT_W},
                      {tokens, "tokens", I32(N), STRICT_R},
                      {wte, "wte", wte_extent(wte, wpe), STRICT_R},
                      {wpe, "wpe", F32((size_t)T * C), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_encoder_backward(strict_op *o)
{
    cm->encoder_backward(P(0, float *), P(1, float *), P(2, const float *), P(3, const int32_t *), o->i[0], o->i[1],
                         o->i[2]);
    return XDC_OK;
}
static void s_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C)
{
    size_t N = (size_t)B * T;
    strict_op o = {.name = "encoder_backward", .fn = x_encoder_backward, .i = {B, T, C}};
    strict_arg a[] = {{dwte, "dwte", wte_extent(dwte, dwpe), STRICT_RW},
                      {dwpe, "dwpe", F32((size_t)T * C), STRICT_RW},
                      {dout, "dout", F32(N * C), STRICT_R},
                      {tokens, "tokens", I32(N), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_layernorm_forward(strict_op *o)
{
    cm->layernorm_forward(P(0, float *), P(1, float *), P(2, float *), P(3, const float *), P(4, const float *),
                          P(5, const float *), o->i[0], o->i[1]);
    return XDC_OK;
}
static void s_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                int N, int C)
{
    strict_op o = {.name = "layernorm_forward", .fn = x_layernorm_forward, .i = {N, C}};
    size_t NC = (size_t)N * C;
    strict_arg a[] = {{out, "out", F32(NC), STRICT_W},  {mean, "mean", F32(N), STRICT_W},
                      {rstd, "rstd", F32(N), STRICT_W}, {inp, "inp", F32(NC), STRICT_R},
                      {w, "w", F32(C), STRICT_R},       {b, "b", F32(C), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_layernorm_backward(strict_op *o)
{
    cm->layernorm_backward(P(0, float *), P(1, float *), P(2, float *), P(3, const float *), P(4, const float *),
                           P(5, const float *), P(6, const float *), P(7, const float *), o->i[0], o->i[1]);
    return XDC_OK;
}
static void s_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int N, int C)
{
    strict_op o = {.name = "layernorm_backward", .fn = x_layernorm_backward, .i = {N, C}};
    size_t NC = (size_t)N * C;
    strict_arg a[] = {{dinp, "dinp", F32(NC), STRICT_RW}, {dw, "dw", F32(C), STRICT_RW},
                      {db, "db", F32(C), STRICT_RW},      {dout, "dout", F32(NC), STRICT_R},
                      {inp, "inp", F32(NC), STRICT_R},    {w, "w", F32(C), STRICT_R},
                      {mean, "mean", F32(N), STRICT_R},   {rstd, "rstd", F32(N), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_matmul_forward(strict_op *o)
{
    cm->matmul_forward(P(0, float *), P(1, const float *), P(2, const float *), P(3, const float *), o->i[0], o->i[1],
                       o->i[2]);
    return XDC_OK;
}
static void s_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    strict_op o = {.name = "matmul_forward", .fn = x_matmul_forward, .i = {N, C, OC}};
    strict_arg a[] = {{out, "out", F32((size_t)N * OC), STRICT_W},
                      {inp, "inp", F32((size_t)N * C), STRICT_R},
                      {w, "w", F32((size_t)OC * C), STRICT_R},
                      {bias, "bias", F32(OC), STRICT_R | STRICT_OPTIONAL}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_matmul_backward(strict_op *o)
{
    cm->matmul_backward(P(0, float *), P(1, float *), P(2, float *), P(3, const float *), P(4, const float *),
                        P(5, const float *), o->i[0], o->i[1], o->i[2]);
    return XDC_OK;
}
static void s_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                              int N, int C, int OC)
{
    strict_op o = {.name = "matmul_backward", .fn = x_matmul_backward, .i = {N, C, OC}};
    strict_arg a[] = {{dinp, "dinp", F32((size_t)N * C), STRICT_RW},
                      {dw, "dw", F32((size_t)OC * C), STRICT_RW},
                      {dbias, "dbias", F32(OC), STRICT_RW | STRICT_OPTIONAL},
                      {dout, "dout", F32((size_t)N * OC), STRICT_R},
                      {inp, "inp", F32((size_t)N * C), STRICT_R},
                      {w, "w", F32((size_t)OC * C), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_attention_forward(strict_op *o)
{
    cm->attention_forward(P(0, float *), P(1, float *), P(2, const float *), o->i[0], o->i[1], o->i[2], o->i[3]);
    return XDC_OK;
}
static void s_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    strict_op o = {.name = "attention_forward", .fn = x_attention_forward, .i = {B, T, C, NH}};
    size_t BT = (size_t)B * T;
    strict_arg a[] = {{out, "out", F32(BT * C), STRICT_W},
                      {att, "att", F32((size_t)B * NH * T * T), STRICT_W},
                      {qkv, "qkv", F32(BT * 3 * C), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_attention_backward(strict_op *o)
{
    cm->attention_backward(P(0, float *), P(1, float *), P(2, const float *), P(3, const float *), P(4, const float *),
                           o->i[0], o->i[1], o->i[2], o->i[3]);
    return XDC_OK;
}
static void s_attention_backward(float *dqkv, float *datt_scratch, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH)
{
    strict_op o = {.name = "attention_backward", .fn = x_attention_backward, .i = {B, T, C, NH}};
    size_t BT = (size_t)B * T, att_n = (size_t)B * NH * T * T;
    strict_arg a[] = {{dqkv, "dqkv", F32(BT * 3 * C), STRICT_RW},
                      {datt_scratch, "datt_scratch", F32(att_n), STRICT_W},
                      {dout, "dout", F32(BT * C), STRICT_R},
                      {qkv, "qkv", F32(BT * 3 * C), STRICT_R},
                      {att, "att", F32(att_n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_gelu_forward(strict_op *o)
{
    cm->gelu_forward(P(0, float *), P(1, const float *), o->z[0]);
    return XDC_OK;
}
static void s_gelu_forward(float *out, const float *inp, size_t n)
{
    strict_op o = {.name = "gelu_forward", .fn = x_gelu_forward, .z = {n}};
    strict_arg a[] = {{out, "out", F32(n), STRICT_W}, {inp, "inp", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_gelu_backward(strict_op *o)
{
    cm->gelu_backward(P(0, float *), P(1, const float *), P(2, const float *), o->z[0]);
    return XDC_OK;
}
static void s_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    strict_op o = {.name = "gelu_backward", .fn = x_gelu_backward, .z = {n}};
    strict_arg a[] = {
        {dinp, "dinp", F32(n), STRICT_RW}, {inp, "inp", F32(n), STRICT_R}, {dout, "dout", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_residual_forward(strict_op *o)
{
    cm->residual_forward(P(0, float *), P(1, const float *), P(2, const float *), o->z[0]);
    return XDC_OK;
}
static void s_residual_forward(float *out, const float *x, const float *y, size_t n)
{
    strict_op o = {.name = "residual_forward", .fn = x_residual_forward, .z = {n}};
    strict_arg a[] = {{out, "out", F32(n), STRICT_W}, {x, "a", F32(n), STRICT_R}, {y, "b", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_accumulate(strict_op *o)
{
    cm->accumulate(P(0, float *), P(1, const float *), o->z[0]);
    return XDC_OK;
}
static void s_accumulate(float *acc, const float *x, size_t n)
{
    strict_op o = {.name = "accumulate", .fn = x_accumulate, .z = {n}};
    strict_arg a[] = {{acc, "acc", F32(n), STRICT_RW}, {x, "x", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_crossentropy_forward(strict_op *o)
{
    cm->crossentropy_forward(P(0, float *), P(1, float *), P(2, const float *), P(3, const int32_t *), o->i[0],
                             o->i[1]);
    return XDC_OK;
}
static void s_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                   int V)
{
    strict_op o = {.name = "crossentropy_forward", .fn = x_crossentropy_forward, .i = {N, V}};
    size_t NV = (size_t)N * V;
    strict_arg a[] = {{losses, "losses", F32(N), STRICT_W},
                      {probs, "probs", F32(NV), STRICT_W},
                      {logits, "logits", F32(NV), STRICT_R},
                      {targets, "targets", I32(N), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_crossentropy_backward(strict_op *o)
{
    cm->crossentropy_backward(P(0, float *), P(1, const float *), P(2, const int32_t *), o->f[0], o->i[0], o->i[1]);
    return XDC_OK;
}
static void s_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                    int V)
{
    strict_op o = {.name = "crossentropy_backward", .fn = x_crossentropy_backward, .i = {N, V}, .f = {dloss}};
    size_t NV = (size_t)N * V;
    strict_arg a[] = {{dlogits, "dlogits", F32(NV), STRICT_RW},
                      {probs, "probs", F32(NV), STRICT_R},
                      {targets, "targets", I32(N), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

/* ---- model: optimizer ---- */

static xdc_err_t x_sumsq(strict_op *o) { return cm->sumsq(P(0, const float *), o->z[0], P(1, double *)); }
static xdc_err_t s_sumsq(const float *x, size_t n, double *acc)
{
    strict_op o = {.name = "sumsq", .fn = x_sumsq, .z = {n}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R}, {acc, "acc", sizeof *acc, STRICT_RW | STRICT_HOST}};
    return strict_submit(&o, a, NARGS(a), true);
}

static xdc_err_t x_adamw(strict_op *o)
{
    cm->adamw(P(0, float *), P(1, const float *), P(2, float *), P(3, float *), o->z[0], o->f[0], o->f[1], o->f[2],
              o->f[3], o->f[4], o->f[5], o->i[0]);
    return XDC_OK;
}
static void s_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, float grad_scale, int t)
{
    strict_op o = {
        .name = "adamw", .fn = x_adamw, .z = {n}, .f = {lr, beta1, beta2, eps, weight_decay, grad_scale}, .i = {t}};
    strict_arg a[] = {{p, "p", F32(n), STRICT_RW},
                      {g, "g", F32(n), STRICT_R},
                      {m, "m", F32(n), STRICT_RW},
                      {v, "v", F32(n), STRICT_RW}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

/* ---- model: outer optimizer ---- */

static xdc_err_t x_sub(strict_op *o)
{
    cm->sub(P(0, float *), P(1, const float *), P(2, const float *), o->z[0]);
    return XDC_OK;
}
static void s_sub(float *out, const float *x, const float *y, size_t n)
{
    strict_op o = {.name = "sub", .fn = x_sub, .z = {n}};
    strict_arg a[] = {{out, "out", F32(n), STRICT_W}, {x, "a", F32(n), STRICT_R}, {y, "b", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_outer_nesterov(strict_op *o)
{
    cm->outer_nesterov(P(0, float *), P(1, float *), P(2, const float *), o->z[0], o->f[0], o->f[1]);
    return XDC_OK;
}
static void s_outer_nesterov(float *g, float *m, const float *d, size_t n, float lr, float mu)
{
    strict_op o = {.name = "outer_nesterov", .fn = x_outer_nesterov, .z = {n}, .f = {lr, mu}};
    strict_arg a[] = {{g, "g", F32(n), STRICT_RW}, {m, "m", F32(n), STRICT_RW}, {d, "d", F32(n), STRICT_R}};
    (void)strict_submit(&o, a, NARGS(a), false);
}

const struct xdc_model_ops xdc_model_strict_ops = {
    .name = "cpu-strict",
    .alloc = s_alloc,
    .free = s_free,
    .upload = s_upload,
    .download = s_download,
    .copy = s_copy,
    .zero = s_zero,
    .sync = s_sync,
    .set_threads = s_set_threads,
    .encoder_forward = s_encoder_forward,
    .encoder_backward = s_encoder_backward,
    .layernorm_forward = s_layernorm_forward,
    .layernorm_backward = s_layernorm_backward,
    .matmul_forward = s_matmul_forward,
    .matmul_backward = s_matmul_backward,
    .attention_forward = s_attention_forward,
    .attention_backward = s_attention_backward,
    .gelu_forward = s_gelu_forward,
    .gelu_backward = s_gelu_backward,
    .residual_forward = s_residual_forward,
    .accumulate = s_accumulate,
    .crossentropy_forward = s_crossentropy_forward,
    .crossentropy_backward = s_crossentropy_backward,
    .sumsq = s_sumsq,
    .adamw = s_adamw,
    .sub = s_sub,
    .outer_nesterov = s_outer_nesterov,
};

/* ---- quant ---- */
/* Argument checks that the CPU ops would make run here first, so a bad block size is XDC_ERR_INVALID
 * from the call (as on CUDA) instead of a failed stream. */

static bool block_ok(size_t block)
{
    return block >= XDC_QUANT_BLOCK_MIN && block <= XDC_QUANT_BLOCK_MAX && !(block & 1);
}
static size_t nblocks(size_t n, size_t block) { return (n + block - 1) / block; }

static xdc_err_t x_quantize_int8(strict_op *o)
{
    return cq->quantize_int8(P(0, const float *), P(1, float *), o->z[0], o->z[1], P(2, int8_t *), P(3, float *));
}
static xdc_err_t q_quantize_int8(const float *x, float *r, size_t n, size_t block, int8_t *q, float *scales)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    strict_op o = {.name = "quantize_int8", .fn = x_quantize_int8, .z = {n, block}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R},
                      {r, "r", F32(n), STRICT_RW | STRICT_OPTIONAL},
                      {q, "q", n, STRICT_W},
                      {scales, "scales", F32(nblocks(n, block)), STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_dequantize_int8(strict_op *o)
{
    return cq->dequantize_int8(P(0, const int8_t *), P(1, const float *), o->z[0], o->z[1], P(2, float *), o->b);
}
static xdc_err_t q_dequantize_int8(const int8_t *q, const float *scales, size_t n, size_t block, float *y, bool add)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    strict_op o = {.name = "dequantize_int8", .fn = x_dequantize_int8, .z = {n, block}, .b = add};
    strict_arg a[] = {{q, "q", n, STRICT_R},
                      {scales, "scales", F32(nblocks(n, block)), STRICT_R},
                      {y, "y", F32(n), add ? STRICT_RW : STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_quantize_int4(strict_op *o)
{
    return cq->quantize_int4(P(0, const float *), P(1, float *), o->z[0], o->z[1], P(2, uint8_t *), P(3, float *),
                             P(4, float *));
}
static xdc_err_t q_quantize_int4(const float *x, float *r, size_t n, size_t block, uint8_t *q, float *scales,
                                 float *mins)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    strict_op o = {.name = "quantize_int4", .fn = x_quantize_int4, .z = {n, block}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R},
                      {r, "r", F32(n), STRICT_RW | STRICT_OPTIONAL},
                      {q, "q", (n + 1) / 2, STRICT_W},
                      {scales, "scales", F32(nblocks(n, block)), STRICT_W},
                      {mins, "mins", F32(nblocks(n, block)), STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_dequantize_int4(strict_op *o)
{
    return cq->dequantize_int4(P(0, const uint8_t *), P(1, const float *), P(2, const float *), o->z[0], o->z[1],
                               P(3, float *), o->b);
}
static xdc_err_t q_dequantize_int4(const uint8_t *q, const float *scales, const float *mins, size_t n, size_t block,
                                   float *y, bool add)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    strict_op o = {.name = "dequantize_int4", .fn = x_dequantize_int4, .z = {n, block}, .b = add};
    strict_arg a[] = {{q, "q", (n + 1) / 2, STRICT_R},
                      {scales, "scales", F32(nblocks(n, block)), STRICT_R},
                      {mins, "mins", F32(nblocks(n, block)), STRICT_R},
                      {y, "y", F32(n), add ? STRICT_RW : STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_fp32_to_bf16(strict_op *o)
{
    return cq->fp32_to_bf16(P(0, const float *), P(1, float *), o->z[0], P(2, uint16_t *));
}
static xdc_err_t q_fp32_to_bf16(const float *x, float *r, size_t n, uint16_t *y)
{
    strict_op o = {.name = "fp32_to_bf16", .fn = x_fp32_to_bf16, .z = {n}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R},
                      {r, "r", F32(n), STRICT_RW | STRICT_OPTIONAL},
                      {y, "y", n * sizeof(uint16_t), STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_bf16_to_fp32(strict_op *o)
{
    return cq->bf16_to_fp32(P(0, const uint16_t *), o->z[0], P(1, float *));
}
static xdc_err_t q_bf16_to_fp32(const uint16_t *x, size_t n, float *y)
{
    strict_op o = {.name = "bf16_to_fp32", .fn = x_bf16_to_fp32, .z = {n}};
    strict_arg a[] = {{x, "x", n * sizeof(uint16_t), STRICT_R}, {y, "y", F32(n), STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static size_t q_topk_scratch_bytes(size_t n, size_t k) { return cq->topk_scratch_bytes(n, k); }

static xdc_err_t x_topk_select(strict_op *o)
{
    return cq->topk_select(P(0, const float *), P(1, float *), o->z[0], o->z[1], P(2, uint32_t *), P(3, float *),
                           P(4, void *));
}
static xdc_err_t q_topk_select(const float *x, float *r, size_t n, size_t k, uint32_t *idx, float *val, void *scratch)
{
    if (k > n || n > UINT32_MAX) return XDC_ERR_INVALID;
    strict_op o = {.name = "topk_select", .fn = x_topk_select, .z = {n, k}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R},
                      {r, "r", F32(n), STRICT_RW | STRICT_OPTIONAL},
                      {idx, "idx", k * sizeof(uint32_t), STRICT_W},
                      {val, "val", F32(k), STRICT_W},
                      {scratch, "scratch", cq->topk_scratch_bytes(n, k), STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_count_out_of_range(strict_op *o)
{
    return cq->count_out_of_range(P(0, const float *), o->z[0], o->f[0], P(1, size_t *));
}
/* count is device memory (as on CUDA): the op is queued like the others; download it to read it. */
static xdc_err_t q_count_out_of_range(const float *x, size_t n, float max_abs, size_t *count)
{
    strict_op o = {.name = "count_out_of_range", .fn = x_count_out_of_range, .z = {n}, .f = {max_abs}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R}, {count, "count", sizeof *count, STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_q_accumulate(strict_op *o) { return cq->accumulate(P(0, const float *), o->z[0], P(1, float *)); }
static xdc_err_t q_accumulate(const float *x, size_t n, float *y)
{
    strict_op o = {.name = "quant_accumulate", .fn = x_q_accumulate, .z = {n}};
    strict_arg a[] = {{x, "x", F32(n), STRICT_R}, {y, "y", F32(n), STRICT_RW}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_q_scale(strict_op *o) { return cq->scale(P(0, float *), o->z[0], o->f[0]); }
static xdc_err_t q_scale(float *y, size_t n, float a)
{
    strict_op o = {.name = "scale", .fn = x_q_scale, .z = {n}, .f = {a}};
    strict_arg arg[] = {{y, "y", F32(n), STRICT_RW}};
    return strict_submit(&o, arg, NARGS(arg), false);
}

static xdc_err_t x_q_scatter(strict_op *o)
{
    return cq->scatter(P(0, const uint32_t *), P(1, const float *), o->z[0], P(2, float *), o->z[1], o->b);
}
static xdc_err_t q_scatter(const uint32_t *idx, const float *val, size_t k, float *y, size_t n, bool add)
{
    strict_op o = {.name = "scatter", .fn = x_q_scatter, .z = {k, n}, .b = add};
    strict_arg a[] = {{idx, "idx", I32(k), STRICT_R}, {val, "val", F32(k), STRICT_R}, {y, "y", F32(n), STRICT_RW}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_byte_shuffle(strict_op *o)
{
    return cq->byte_shuffle(P(0, const uint8_t *), o->z[0], o->z[1], P(1, uint8_t *));
}
static xdc_err_t q_byte_shuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    if (elem < 1 || elem > 16) return XDC_ERR_INVALID;
    strict_op o = {.name = "byte_shuffle", .fn = x_byte_shuffle, .z = {n_bytes, elem}};
    strict_arg a[] = {{in, "in", n_bytes, STRICT_R}, {out, "out", n_bytes, STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

static xdc_err_t x_byte_unshuffle(strict_op *o)
{
    return cq->byte_unshuffle(P(0, const uint8_t *), o->z[0], o->z[1], P(1, uint8_t *));
}
static xdc_err_t q_byte_unshuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    if (elem < 1 || elem > 16) return XDC_ERR_INVALID;
    strict_op o = {.name = "byte_unshuffle", .fn = x_byte_unshuffle, .z = {n_bytes, elem}};
    strict_arg a[] = {{in, "in", n_bytes, STRICT_R}, {out, "out", n_bytes, STRICT_W}};
    return strict_submit(&o, a, NARGS(a), false);
}

const xdc_quant_ops xdc_quant_strict_ops = {
    .quantize_int8 = q_quantize_int8,
    .dequantize_int8 = q_dequantize_int8,
    .quantize_int4 = q_quantize_int4,
    .dequantize_int4 = q_dequantize_int4,
    .fp32_to_bf16 = q_fp32_to_bf16,
    .bf16_to_fp32 = q_bf16_to_fp32,
    .topk_scratch_bytes = q_topk_scratch_bytes,
    .topk_select = q_topk_select,
    .count_out_of_range = q_count_out_of_range,
    .accumulate = q_accumulate,
    .scale = q_scale,
    .scatter = q_scatter,
    .byte_shuffle = q_byte_shuffle,
    .byte_unshuffle = q_byte_unshuffle,
};
