/* test_quant_cuda.c — the device quant tables checked against the CPU reference on the same inputs: CUDA
 * (skips without a visible GPU) and cpu-strict (asynchronous, on memory the host cannot touch). Quantized
 * codes, top-k indices, counts and byte planes must match exactly; residuals and decoded floats within
 * 1e-9 on CUDA, bit for bit on cpu-strict. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"

/* Device memory through the backend's own memory ops, so this file needs no CUDA headers. */
static const xdc_model_ops *M;

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    XDC_ASSERT_OK(M->alloc(&d, bytes ? bytes : 1));
    if (host) XDC_ASSERT_OK(M->upload(d, host, bytes));
    return d;
}

static void *host_copy(const void *dev, size_t bytes)
{
    void *h = xdc_malloc(bytes ? bytes : 1);
    XDC_ASSERT_OK(M->download(h, dev, bytes));
    return h;
}

static const char *dev_name;
static bool exact; /* cpu-strict runs the CPU ops: every tolerance is 0 */

static void assert_near_all(const float *a, const float *b, size_t n, float tol, const char *what)
{
    if (exact) tol = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol)) XDC_FAIL("%s[%zu]: cpu %g, %s %g", what, i, a[i], dev_name, b[i]);
    XDC_ASSERT(1);
}

static void device_matches_cpu(const xdc_kern_backend *gpu)
{
    const xdc_quant_ops *C = &xdc_quant_cpu_ops, *G = gpu->quant;
    dev_name = gpu->name;
    exact = gpu->kind == XDC_BACKEND_CPU_STRICT;
    M = gpu->model;
    size_t n = 300001, block = 128, nb = (n + block - 1) / block, k = 3000;
    xdc_rng rng;
    xdc_rng_seed(&rng, 77);
    float *x = xdc_malloc(n * 4), *r = xdc_malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        x[i] = xdc_rng_normal(&rng) * 1e-3f * (i % 97 == 0 ? 40.0f : 1.0f);
        r[i] = xdc_rng_normal(&rng) * 1e-5f;
    }
    float *dx = dev_copy(x, n * 4), *dr = dev_copy(r, n * 4);

    /* int8 with error feedback */
    int8_t *q = xdc_malloc(n);
    float *s = xdc_malloc(nb * 4), *mins = xdc_malloc(nb * 4), *y = xdc_malloc(n * 4);
    float *r_cpu = xdc_malloc(n * 4);
    memcpy(r_cpu, r, n * 4);
    int8_t *dq = dev_copy(NULL, n);
    float *ds = dev_copy(NULL, nb * 4), *dmins = dev_copy(NULL, nb * 4), *dy = dev_copy(NULL, n * 4);
    XDC_ASSERT_OK(C->quantize_int8(x, r_cpu, n, block, q, s));
    XDC_ASSERT_OK(G->quantize_int8(dx, dr, n, block, dq, ds));
    XDC_ASSERT_OK(G->dequantize_int8(dq, ds, n, block, dy, false));
    int8_t *gq = host_copy(dq, n);
    XDC_ASSERT(memcmp(q, gq, n) == 0);
    float *gr = host_copy(dr, n * 4), *gy = host_copy(dy, n * 4);
    XDC_ASSERT_OK(C->dequantize_int8(q, s, n, block, y, false));
    assert_near_all(y, gy, n, 1e-9f, "int8 decoded");
    XDC_ASSERT_OK(G->dequantize_int8(dq, ds, n, block, dy, true)); /* accumulating form: 2 * decoded */
    xdc_free(gy);
    gy = host_copy(dy, n * 4);
    for (size_t i = 0; i < n; i++) y[i] += y[i];
    assert_near_all(y, gy, n, 0.0f, "int8 accumulated");
    XDC_ASSERT_OK(G->scale(dy, n, 1.0f / 3.0f)); /* a cross-region average's 1/R: one rounded multiply */
    XDC_ASSERT_OK(C->scale(y, n, 1.0f / 3.0f));
    xdc_free(gy);
    gy = host_copy(dy, n * 4);
    assert_near_all(y, gy, n, 0.0f, "scaled");
    assert_near_all(r_cpu, gr, n, 1e-9f, "int8 residual");

    /* int4 without error feedback */
    uint8_t *q4 = xdc_malloc((n + 1) / 2), *dq4 = dev_copy(NULL, (n + 1) / 2);
    XDC_ASSERT_OK(C->quantize_int4(x, NULL, n, block, q4, s, mins));
    XDC_ASSERT_OK(G->quantize_int4(dx, NULL, n, block, dq4, ds, dmins));
    uint8_t *gq4 = host_copy(dq4, (n + 1) / 2);
    XDC_ASSERT(memcmp(q4, gq4, (n + 1) / 2) == 0);

    /* bf16 */
    uint16_t *h = xdc_malloc(n * 2), *dh = dev_copy(NULL, n * 2);
    XDC_ASSERT_OK(C->fp32_to_bf16(x, NULL, n, h));
    XDC_ASSERT_OK(G->fp32_to_bf16(dx, NULL, n, dh));
    uint16_t *gh = host_copy(dh, n * 2);
    XDC_ASSERT(memcmp(h, gh, n * 2) == 0);

    /* top-k */
    uint32_t *idx = xdc_malloc(k * 4), *didx = dev_copy(NULL, k * 4);
    float *val = xdc_malloc(k * 4), *dval = dev_copy(NULL, k * 4);
    void *scratch = xdc_malloc(C->topk_scratch_bytes(n, k)), *dscratch = dev_copy(NULL, G->topk_scratch_bytes(n, k));
    XDC_ASSERT_OK(C->topk_select(x, NULL, n, k, idx, val, scratch));
    XDC_ASSERT_OK(G->topk_select(dx, NULL, n, k, didx, dval, dscratch));
    uint32_t *gidx = host_copy(didx, k * 4);
    XDC_ASSERT(memcmp(idx, gidx, k * 4) == 0);
    /* top-k with error feedback: same selection from x + r, same residual left behind */
    memcpy(r_cpu, r, n * 4);
    XDC_ASSERT_OK(M->upload(dr, r, n * 4));
    XDC_ASSERT_OK(C->topk_select(x, r_cpu, n, k, idx, val, scratch));
    XDC_ASSERT_OK(G->topk_select(dx, dr, n, k, didx, dval, dscratch));
    xdc_free(gidx), xdc_free(gr);
    gidx = host_copy(didx, k * 4);
    gr = host_copy(dr, n * 4);
    XDC_ASSERT(memcmp(idx, gidx, k * 4) == 0);
    assert_near_all(r_cpu, gr, n, 0.0f, "top-k residual");
    /* top-k decode: the pairs scattered into y, added and written */
    XDC_ASSERT_OK(M->upload(dval, val, k * 4));
    XDC_ASSERT_OK(C->scatter(idx, val, k, y, n, true));
    XDC_ASSERT_OK(G->scatter(didx, dval, k, dy, n, true));
    xdc_free(gy);
    gy = host_copy(dy, n * 4);
    assert_near_all(y, gy, n, 0.0f, "top-k scattered and added");
    XDC_ASSERT_OK(C->scatter(idx, val, k, y, n, false));
    XDC_ASSERT_OK(G->scatter(didx, dval, k, dy, n, false));
    xdc_free(gy);
    gy = host_copy(dy, n * 4);
    assert_near_all(y, gy, n, 0.0f, "top-k scattered");
    XDC_ASSERT(gy[idx[0]] == val[0]);

    /* range count and byte planes */
    x[5] = NAN, x[6] = 3e30f;
    XDC_ASSERT_OK(M->upload(dx, x, n * 4));
    size_t *dcount = dev_copy(NULL, sizeof(size_t)), count = 0;
    XDC_ASSERT_OK(G->count_out_of_range(dx, n, XDC_QUANT_MAX_ABS, dcount));
    XDC_ASSERT_OK(M->download(&count, dcount, sizeof count));
    XDC_ASSERT_EQ(count, 2);
    uint8_t *planes = xdc_malloc(n * 4 + 3), *dplanes = dev_copy(NULL, n * 4 + 3), *dback = dev_copy(NULL, n * 4 + 3);
    XDC_ASSERT_OK(C->byte_shuffle((const uint8_t *)x, n * 4 - 1, 4, planes));
    XDC_ASSERT_OK(G->byte_shuffle((const uint8_t *)dx, n * 4 - 1, 4, dplanes));
    XDC_ASSERT_OK(G->byte_unshuffle(dplanes, n * 4 - 1, 4, dback));
    uint8_t *gplanes = host_copy(dplanes, n * 4 - 1), *gback = host_copy(dback, n * 4 - 1);
    XDC_ASSERT(memcmp(planes, gplanes, n * 4 - 1) == 0);
    XDC_ASSERT(memcmp(x, gback, n * 4 - 1) == 0);

    void *dev[] = {dx, dr, dq, ds, dmins, dy, dq4, dh, didx, dval, dscratch, dcount, dplanes, dback};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) M->free(dev[i]);
    xdc_free(x), xdc_free(r), xdc_free(q), xdc_free(s), xdc_free(mins), xdc_free(y), xdc_free(r_cpu), xdc_free(gq);
    xdc_free(gr), xdc_free(gy), xdc_free(q4), xdc_free(gq4), xdc_free(h), xdc_free(gh), xdc_free(idx), xdc_free(val);
    xdc_free(scratch), xdc_free(gidx), xdc_free(planes), xdc_free(gplanes), xdc_free(gback);
}

XDC_TEST(quant_cuda_matches_cpu_reference)
{
    if (xdc_kern_cuda_device_count() <= 0) xdc_test_skip("no GPU: no CUDA device visible (or no CUDA in this build)");
    const xdc_kern_backend *gpu = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CUDA, &gpu, NULL));
    device_matches_cpu(gpu);
}

XDC_TEST(quant_strict_matches_cpu_bit_for_bit)
{
    const xdc_kern_backend *dev = NULL;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &dev, NULL));
    device_matches_cpu(dev);
    XDC_ASSERT_OK(dev->device->stream_sync(NULL));
}
