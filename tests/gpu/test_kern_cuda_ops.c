/* test_kern_cuda_ops.c — every CUDA model op against the CPU reference on the same inputs, one op at a time,
 * with its figures printed for the GPU window (tests/gpu/run.sh, step cuda-tests): per op and output,
 * `op=NAME max_abs=... max_rel=... tol=...`.
 *
 * max_abs is the largest |cpu - device| over the output; max_rel the largest |cpu - device| / |cpu| over the
 * elements with |cpu| above 1e-3 of the output's largest magnitude (smaller ones carry the absolute error of
 * large sums); the check is max_abs <= tol · max|cpu|, tol by op: the GEMMs (TF32 inputs, unit roundoff
 * 2^-11, fp32 accumulation) 4e-3; the fp32 ops whose reductions run in another order on the GPU
 * (layernorm, softmax, attention, the encoder's scatter-add, sumsq) 1e-5; the elementwise ops with a
 * transcendental (GELU's tanh, AdamW's sqrt) 1e-6; the ops docs/device.md says round like the CPU (the
 * residual add, accumulate, sub, the outer Nesterov step) 0. Backward ops accumulate, so each starts from
 * the same non-zero gradient on both sides. Without a GPU the CUDA test skips; the cpu-strict twin runs the
 * same code here (every tolerance 0: it runs the CPU ops). */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

enum { B = 2, T = 64, CH = 128, NH = 4, V = 1000, N = B * T };

static const xdc_model_ops *C_ = &xdc_model_cpu_ops; /* the reference */
static const xdc_model_ops *G;                       /* the device under test */
static bool exact;                                   /* cpu-strict: every tolerance is 0 */
static xdc_rng rng;
static int n_checked;

/* n random floats (normal · scale) on the host, and their copy on the device. */
static float *host_rand(size_t n, float scale)
{
    float *h = xdc_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = xdc_rng_normal(&rng) * scale;
    return h;
}
static void *dev_of(const void *h, size_t bytes)
{
    void *d = NULL;
    XDC_ASSERT_OK(G->alloc(&d, bytes));
    XDC_ASSERT_OK(G->upload(d, h, bytes));
    return d;
}
/* wte (V,C) and wpe (T,C) in one allocation, wpe right after wte, as in the model's arena: the strict
 * device takes wte's extent (V is no argument) to end where wpe starts. *wpe_out points into it. */
static float *dev_of_pair(const float *wte, const float *wpe, float **wpe_out)
{
    size_t a = (size_t)V * CH * sizeof(float), b = (size_t)T * CH * sizeof(float);
    float *d = NULL;
    XDC_ASSERT_OK(G->alloc((void **)&d, a + b));
    XDC_ASSERT_OK(G->upload(d, wte, a));
    XDC_ASSERT_OK(G->upload(d + a / sizeof(float), wpe, b));
    *wpe_out = d + a / sizeof(float);
    return d;
}

/* Compares the CPU's `ref` (n) with the device's `dev` (n), prints the figures, fails past tol. */
static void check_part(const char *op, const float *ref, const float *dev, size_t n, double tol)
{
    float *got = xdc_malloc(n * sizeof(float));
    XDC_ASSERT_OK(G->download(got, dev, n * sizeof(float)));
    double amax = 0, max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(ref[i]));
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - got[i]);
        if (!(d <= max_abs)) max_abs = d, worst = i; /* NaN counts as worse than anything */
        if (fabs(ref[i]) > 1e-3 * amax && d / fabs(ref[i]) > max_rel) max_rel = d / fabs(ref[i]);
    }
    if (exact) tol = 0;
    printf("op=%s n=%zu max|cpu|=%.3g max_abs=%.3g max_rel=%.3g tol=%.3g*max|cpu|\n", op, n, amax, max_abs, max_rel,
           tol);
    XDC_ASSERT_MSG(max_abs <= tol * amax, "%s: max_abs %.3g > %.3g (element %zu: cpu %.9g, %s %.9g)", op, max_abs,
                   tol * amax, worst, ref[worst], G->name, got[worst]);
    XDC_ASSERT_MSG(amax > 0, "%s: the reference is all zero, the check would be vacuous", op);
    n_checked++;
    xdc_free(got);
}
/* The same, and frees dev (an allocation of its own). */
static void check(const char *op, const float *ref, float *dev, size_t n, double tol)
{
    check_part(op, ref, dev, n, tol);
    G->free(dev);
}

#define T_GEMM  4e-3
#define T_RED   1e-5
#define T_ELEM  1e-6
#define T_EXACT 0.0

static void layers(void)
{
    size_t NC = (size_t)N * CH;
    /* encoder */
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)xdc_rng_below(&rng, V);
    float *wte = host_rand((size_t)V * CH, 0.02f), *wpe = host_rand((size_t)T * CH, 0.01f), *out = xdc_malloc(NC * 4);
    int32_t *dtok = dev_of(tok, sizeof tok);
    float *dwpe_ = NULL, *dwte_ = dev_of_pair(wte, wpe, &dwpe_), *dout = dev_of(out, NC * 4);
    C_->encoder_forward(out, tok, wte, wpe, B, T, CH);
    G->encoder_forward(dout, dtok, dwte_, dwpe_, B, T, CH);
    check("encoder_forward", out, dout, NC, T_EXACT);
    float *gout = host_rand(NC, 1.0f), *dg = dev_of(gout, NC * 4);
    float *gwte = host_rand((size_t)V * CH, 0.1f), *gwpe = host_rand((size_t)T * CH, 0.1f);
    float *dgwpe = NULL, *dgwte = dev_of_pair(gwte, gwpe, &dgwpe);
    C_->encoder_backward(gwte, gwpe, gout, tok, B, T, CH);
    G->encoder_backward(dgwte, dgwpe, dg, dtok, B, T, CH);
    check_part("encoder_backward.dwte", gwte, dgwte, (size_t)V * CH, T_RED);
    check_part("encoder_backward.dwpe", gwpe, dgwpe, (size_t)T * CH, T_RED);
    G->free(dtok), G->free(dwte_), G->free(dgwte), G->free(dg);

    /* layernorm */
    float *inp = host_rand(NC, 1.0f), *w = host_rand(CH, 1.0f), *b = host_rand(CH, 0.1f);
    float *mean = xdc_malloc(N * 4), *rstd = xdc_malloc(N * 4);
    float *dinp_ = dev_of(inp, NC * 4), *dw_ = dev_of(w, CH * 4), *db_ = dev_of(b, CH * 4);
    float *dmean = dev_of(mean, N * 4), *drstd = dev_of(rstd, N * 4);
    dout = dev_of(out, NC * 4);
    C_->layernorm_forward(out, mean, rstd, inp, w, b, N, CH);
    G->layernorm_forward(dout, dmean, drstd, dinp_, dw_, db_, N, CH);
    check("layernorm_forward.out", out, dout, NC, T_RED);
    float *dmean2 = dev_of(mean, N * 4), *drstd2 = dev_of(rstd, N * 4); /* the CPU's, so backward is compared alone */
    check("layernorm_forward.mean", mean, dmean, N, T_RED);
    check("layernorm_forward.rstd", rstd, drstd, N, T_RED);
    float *gin = host_rand(NC, 0.1f), *gw = host_rand(CH, 0.1f), *gb = host_rand(CH, 0.1f);
    float *dgin = dev_of(gin, NC * 4), *dgw = dev_of(gw, CH * 4), *dgb = dev_of(gb, CH * 4);
    dg = dev_of(gout, NC * 4);
    C_->layernorm_backward(gin, gw, gb, gout, inp, w, mean, rstd, N, CH);
    G->layernorm_backward(dgin, dgw, dgb, dg, dinp_, dw_, dmean2, drstd2, N, CH);
    check("layernorm_backward.dinp", gin, dgin, NC, T_RED);
    check("layernorm_backward.dw", gw, dgw, CH, T_RED);
    check("layernorm_backward.db", gb, dgb, CH, T_RED);
    G->free(dw_), G->free(db_), G->free(dmean2), G->free(drstd2), G->free(dg);

    /* matmul: (N, CH) x (3CH, CH)^T + bias */
    int OC = 3 * CH;
    float *mw = host_rand((size_t)OC * CH, 0.05f), *mb = host_rand(OC, 0.1f), *mo = xdc_malloc((size_t)N * OC * 4);
    float *dmw = dev_of(mw, (size_t)OC * CH * 4), *dmb = dev_of(mb, OC * 4), *dmo = dev_of(mo, (size_t)N * OC * 4);
    C_->matmul_forward(mo, inp, mw, mb, N, CH, OC);
    G->matmul_forward(dmo, dinp_, dmw, dmb, N, CH, OC);
    check("matmul_forward", mo, dmo, (size_t)N * OC, T_GEMM);
    float *go = host_rand((size_t)N * OC, 1.0f), *gmi = host_rand(NC, 0.1f), *gmw = host_rand((size_t)OC * CH, 0.1f),
          *gmb = host_rand(OC, 0.1f);
    float *dgo = dev_of(go, (size_t)N * OC * 4), *dgmi = dev_of(gmi, NC * 4), *dgmw = dev_of(gmw, (size_t)OC * CH * 4),
          *dgmb = dev_of(gmb, OC * 4);
    C_->matmul_backward(gmi, gmw, gmb, go, inp, mw, N, CH, OC);
    G->matmul_backward(dgmi, dgmw, dgmb, dgo, dinp_, dmw, N, CH, OC);
    check("matmul_backward.dinp", gmi, dgmi, NC, T_GEMM);
    check("matmul_backward.dw", gmw, dgmw, (size_t)OC * CH, T_GEMM);
    check("matmul_backward.dbias", gmb, dgmb, OC, T_RED);
    G->free(dmw), G->free(dmb), G->free(dinp_);

    /* attention over qkv = the matmul's output (B, T, 3CH) */
    size_t natt = (size_t)B * NH * T * T;
    float *att = xdc_malloc(natt * 4), *ao = xdc_malloc(NC * 4);
    float *dqkv_in = dev_of(mo, (size_t)N * OC * 4), *datt = dev_of(att, natt * 4);
    dout = dev_of(ao, NC * 4);
    C_->attention_forward(ao, att, mo, B, T, CH, NH);
    G->attention_forward(dout, datt, dqkv_in, B, T, CH, NH);
    check("attention_forward.out", ao, dout, NC, T_RED);
    float *datt2 = dev_of(att, natt * 4);
    check("attention_forward.att", att, datt, natt, T_RED);
    float *gqkv = host_rand((size_t)N * OC, 0.1f), *scratch = xdc_malloc(natt * 4);
    float *dgqkv = dev_of(gqkv, (size_t)N * OC * 4), *dscratch = dev_of(scratch, natt * 4);
    dg = dev_of(gout, NC * 4);
    C_->attention_backward(gqkv, scratch, gout, mo, att, B, T, CH, NH);
    G->attention_backward(dgqkv, dscratch, dg, dqkv_in, datt2, B, T, CH, NH);
    check("attention_backward.dqkv", gqkv, dgqkv, (size_t)N * OC, T_RED);
    G->free(dqkv_in), G->free(datt2), G->free(dscratch), G->free(dg), G->free(dgo);

    /* GELU over the matmul's output, and its backward */
    size_t n = (size_t)N * OC;
    float *ge = xdc_malloc(n * 4), *dge = dev_of(ge, n * 4), *dmo2 = dev_of(mo, n * 4);
    C_->gelu_forward(ge, mo, n);
    G->gelu_forward(dge, dmo2, n);
    check("gelu_forward", ge, dge, n, T_ELEM);
    float *gge = host_rand(n, 0.1f), *dgge = dev_of(gge, n * 4);
    dgo = dev_of(go, n * 4);
    C_->gelu_backward(gge, mo, go, n);
    G->gelu_backward(dgge, dmo2, dgo, n);
    check("gelu_backward", gge, dgge, n, T_ELEM);
    G->free(dmo2), G->free(dgo);

    /* residual add and accumulate */
    float *ra = host_rand(n, 1.0f), *rb = host_rand(n, 1.0f), *ro = xdc_malloc(n * 4);
    float *dra = dev_of(ra, n * 4), *drb = dev_of(rb, n * 4), *dro = dev_of(ro, n * 4);
    C_->residual_forward(ro, ra, rb, n);
    G->residual_forward(dro, dra, drb, n);
    check("residual_forward", ro, dro, n, T_EXACT);
    C_->accumulate(ra, rb, n);
    G->accumulate(dra, drb, n);
    check("accumulate", ra, dra, n, T_EXACT);
    G->free(drb);

    xdc_free(wte), xdc_free(wpe), xdc_free(out), xdc_free(gout), xdc_free(gwte), xdc_free(gwpe), xdc_free(inp);
    xdc_free(w), xdc_free(b), xdc_free(mean), xdc_free(rstd), xdc_free(gin), xdc_free(gw), xdc_free(gb);
    xdc_free(mw), xdc_free(mb), xdc_free(mo), xdc_free(go), xdc_free(gmi), xdc_free(gmw), xdc_free(gmb);
    xdc_free(att), xdc_free(ao), xdc_free(gqkv), xdc_free(scratch), xdc_free(ge), xdc_free(gge), xdc_free(ra);
    xdc_free(rb), xdc_free(ro);
}

static void loss_and_optimizer(void)
{
    /* softmax cross-entropy */
    size_t nv = (size_t)N * V;
    int32_t tgt[N];
    for (int i = 0; i < N; i++) tgt[i] = (int32_t)xdc_rng_below(&rng, V);
    float *logits = host_rand(nv, 2.0f), *probs = xdc_malloc(nv * 4), *losses = xdc_malloc(N * 4);
    int32_t *dtgt = dev_of(tgt, sizeof tgt);
    float *dlogits = dev_of(logits, nv * 4), *dprobs = dev_of(probs, nv * 4), *dlosses = dev_of(losses, N * 4);
    C_->crossentropy_forward(losses, probs, logits, tgt, N, V);
    G->crossentropy_forward(dlosses, dprobs, dlogits, dtgt, N, V);
    check("crossentropy_forward.losses", losses, dlosses, N, T_RED);
    float *dprobs2 = dev_of(probs, nv * 4); /* the CPU's */
    check("crossentropy_forward.probs", probs, dprobs, nv, T_RED);
    float *gl = host_rand(nv, 1e-3f), *dgl = dev_of(gl, nv * 4);
    C_->crossentropy_backward(gl, probs, tgt, 1.0f / N, N, V);
    G->crossentropy_backward(dgl, dprobs2, dtgt, 1.0f / N, N, V);
    check("crossentropy_backward", gl, dgl, nv, T_ELEM);
    G->free(dtgt), G->free(dlogits), G->free(dprobs2);

    /* sumsq (a double: compared as one value) */
    double sc = 0, sg = 0;
    XDC_ASSERT_OK(C_->sumsq(logits, nv, &sc));
    float *dx = dev_of(logits, nv * 4);
    XDC_ASSERT_OK(G->sumsq(dx, nv, &sg));
    double tol = exact ? 0 : T_RED;
    printf("op=sumsq n=%zu cpu=%.17g %s=%.17g max_abs=%.3g max_rel=%.3g tol=%.3g*cpu\n", nv, sc, G->name, sg,
           fabs(sc - sg), fabs(sc - sg) / sc, tol);
    XDC_ASSERT_MSG(fabs(sc - sg) <= tol * sc, "sumsq: cpu %.17g, %s %.17g", sc, G->name, sg);
    G->free(dx);

    /* AdamW, the outer step, sub */
    size_t n = 100003;
    float *p = host_rand(n, 0.1f), *g = host_rand(n, 1e-2f), *m = host_rand(n, 1e-3f), *v = host_rand(n, 1e-3f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i]; /* a second moment is not negative */
    float *dp = dev_of(p, n * 4), *dg = dev_of(g, n * 4), *dm = dev_of(m, n * 4), *dv = dev_of(v, n * 4);
    C_->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    G->adamw(dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    check("adamw.m", m, dm, n, T_ELEM);
    check("adamw.v", v, dv, n, T_ELEM);
    check("adamw.p", p, dp, n, T_ELEM);
    float *a = host_rand(n, 1.0f), *b = host_rand(n, 1.0f), *o = xdc_malloc(n * 4), *mom = host_rand(n, 1e-2f);
    float *da = dev_of(a, n * 4), *db = dev_of(b, n * 4), *dout = dev_of(o, n * 4), *dmom = dev_of(mom, n * 4);
    C_->sub(o, a, b, n);
    G->sub(dout, da, db, n);
    float *dout2 = dev_of(o, n * 4);
    check("sub", o, dout, n, T_EXACT);
    C_->outer_nesterov(a, mom, o, n, 0.7f, 0.9f);
    G->outer_nesterov(da, dmom, dout2, n, 0.7f, 0.9f);
    check("outer_nesterov.g", a, da, n, T_EXACT);
    check("outer_nesterov.m", mom, dmom, n, T_EXACT);
    G->free(db), G->free(dout2), G->free(dg);
    xdc_free(logits), xdc_free(probs), xdc_free(losses), xdc_free(gl), xdc_free(p), xdc_free(g), xdc_free(m);
    xdc_free(v), xdc_free(a), xdc_free(b), xdc_free(o), xdc_free(mom);
}

static void every_op_matches_cpu(xdc_backend_kind kind)
{
    if (kind == XDC_BACKEND_CUDA && xdc_kern_cuda_device_count() <= 0)
        xdc_test_skip("no GPU: no CUDA device visible (or no CUDA in this build)");
    const xdc_kern_backend *be = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(kind, &be, NULL));
    G = be->model;
    exact = kind == XDC_BACKEND_CPU_STRICT;
    xdc_rng_seed(&rng, 2024);
    n_checked = 0;
    layers();
    loss_and_optimizer();
    XDC_ASSERT_OK(G->sync());
    printf("ops on %s: %d outputs within tolerance of the cpu (+ sumsq)\n", be->name, n_checked);
    XDC_ASSERT_EQ(n_checked, 29);
}

XDC_TEST(kern_cuda_every_op_near_cpu_with_figures) { every_op_matches_cpu(XDC_BACKEND_CUDA); }

XDC_TEST(kern_strict_every_op_equals_cpu_with_figures) { every_op_matches_cpu(XDC_BACKEND_CPU_STRICT); }
