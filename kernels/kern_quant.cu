/* kern_quant.cu — the CUDA table of xdc_quant.h: the same ops and numeric contract as kern_quant_cpu.c
 * on device pointers, asynchronous on the calling thread's current stream (xdc_device_cuda_ops; never the
 * legacy default stream). Compiled and linked on the development VM; it has not run on a GPU. Blockwise quantizers run one CTA per quant
 * block; top-k is an exact radix select (three histogram passes over 11/11/10 key bits, counts in
 * device scratch) followed by an order-preserving compaction in 1024-element tiles. Arithmetic that
 * must match the CPU bit for bit uses explicit _rn intrinsics so nvcc cannot contract it into FMAs
 * (the CPU build compiles as ISO C, where gcc does not contract either). */
extern "C" {
#include "kernels/xdc_quant.h"
}
#include "kernels/kern_cuda_priv.h"

#define ST xdc_cuda_current_stream()

#include <cuda_runtime.h>
#include <stdint.h>

static_assert(sizeof(size_t) == sizeof(unsigned long long), "count_out_of_range counts in a 64-bit size_t");

#define QT_THREADS  256
#define QT_MAX_GRID 4096
#define QT_HIST     2048
#define QT_TILE     1024 /* top-k compaction tile: QT_THREADS threads x 4 consecutive elements */

/* After the launches of an op: a launch error, noted on the current stream (sticky) and returned. */
static xdc_err_t launched(void) { return xdc_cuda_launched("quant kernel"); }

/* An async runtime call of an op: a failure is noted on the current stream too (sticky), then returned. */
static xdc_err_t queued(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return XDC_OK;
    cudaGetLastError();
    xdc_cuda_note_error(XDC_ERR_CUDA, what);
    return XDC_ERR_CUDA;
}

static unsigned grid_for(size_t n)
{
    size_t g = (n + QT_THREADS - 1) / QT_THREADS;
    return (unsigned)(g < 1 ? 1 : g > QT_MAX_GRID ? QT_MAX_GRID : g);
}

static bool block_ok(size_t block)
{
    return block >= XDC_QUANT_BLOCK_MIN && block <= XDC_QUANT_BLOCK_MAX && !(block & 1);
}

__device__ __forceinline__ uint32_t abs_key(float x) { return __float_as_uint(x) & 0x7fffffffu; }
__device__ __forceinline__ int32_t ord_key(float x)
{
    int32_t i = __float_as_int(x);
    return i ^ ((i >> 31) & 0x7fffffff);
}
__device__ __forceinline__ float ord_unkey(int32_t k) { return __int_as_float(k ^ ((k >> 31) & 0x7fffffff)); }
/* Input with optional error-feedback residual (no "+ 0" without one: it would turn -0 into +0). */
__device__ __forceinline__ float ld(const float *x, const float *r, size_t i)
{
    return r ? __fadd_rn(x[i], r[i]) : x[i];
}

/* ---- int8 / int4 blockwise: one CTA per quant block -------------------------------------------------- */

__global__ void k_quant_int8(const float *x, float *r, size_t n, size_t block, int8_t *q, float *scales)
{
    size_t b0 = (size_t)blockIdx.x * block, m = n - b0 < block ? n - b0 : block;
    __shared__ uint32_t amax;
    if (threadIdx.x == 0) amax = 0;
    __syncthreads();
    uint32_t local = 0;
    for (size_t i = threadIdx.x; i < m; i += blockDim.x) local = max(local, abs_key(ld(x, r, b0 + i)));
    atomicMax(&amax, local);
    __syncthreads();
    float absmax = __uint_as_float(amax), inv = 0.0f, s = 0.0f;
    if (absmax >= XDC_QUANT_MIN_SPREAD) {
        inv = __fdiv_rn(127.0f, absmax);
        s = __fdiv_rn(absmax, 127.0f);
    }
    if (threadIdx.x == 0) scales[blockIdx.x] = s;
    for (size_t i = threadIdx.x; i < m; i += blockDim.x) {
        float y = ld(x, r, b0 + i);
        float v = __fmul_rn(y, inv);
        int t = (int)__fadd_rn(v, copysignf(0.5f, v));
        t = min(127, max(-127, t));
        q[b0 + i] = (int8_t)t;
        if (r) r[b0 + i] = __fsub_rn(y, __fmul_rn((float)t, s));
    }
}

__global__ void k_dequant_int8(const int8_t *q, const float *scales, size_t n, size_t block, float *y, bool add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = __fmul_rn((float)q[i], scales[i / block]);
        y[i] = add ? __fadd_rn(y[i], v) : v;
    }
}

__device__ __forceinline__ int q4(float y, float lo, float inv)
{
    int a = (int)__fadd_rn(__fmul_rn(__fsub_rn(y, lo), inv), 0.5f);
    return a > 15 ? 15 : a;
}

__device__ __forceinline__ float dq4(int q, float lo, float s) { return __fadd_rn(lo, __fmul_rn((float)q, s)); }

__global__ void k_quant_int4(const float *x, float *r, size_t n, size_t block, uint8_t *q, float *scales, float *mins)
{
    size_t b0 = (size_t)blockIdx.x * block, m = n - b0 < block ? n - b0 : block;
    __shared__ int32_t kmin, kmax;
    if (threadIdx.x == 0) {
        kmin = INT32_MAX;
        kmax = INT32_MIN;
    }
    __syncthreads();
    int32_t lmin = INT32_MAX, lmax = INT32_MIN;
    for (size_t i = threadIdx.x; i < m; i += blockDim.x) {
        int32_t k = ord_key(ld(x, r, b0 + i));
        lmin = min(lmin, k);
        lmax = max(lmax, k);
    }
    atomicMin(&kmin, lmin);
    atomicMax(&kmax, lmax);
    __syncthreads();
    float lo = ord_unkey(kmin), hi = ord_unkey(kmax), spread = __fsub_rn(hi, lo), inv = 0.0f, s = 0.0f;
    if (spread >= XDC_QUANT_MIN_SPREAD) {
        inv = __fdiv_rn(15.0f, spread);
        s = __fdiv_rn(spread, 15.0f);
    }
    if (threadIdx.x == 0) {
        scales[blockIdx.x] = s;
        mins[blockIdx.x] = lo;
    }
    for (size_t p = threadIdx.x; 2 * p < m; p += blockDim.x) { /* one output byte per thread */
        size_t i = b0 + 2 * p;
        float y0 = ld(x, r, i);
        int a = q4(y0, lo, inv), b = 0;
        if (2 * p + 1 < m) {
            float y1 = ld(x, r, i + 1);
            b = q4(y1, lo, inv);
            if (r) r[i + 1] = __fsub_rn(y1, dq4(b, lo, s));
        }
        q[i / 2] = (uint8_t)(a | (b << 4));
        if (r) r[i] = __fsub_rn(y0, dq4(a, lo, s));
    }
}

__global__ void k_dequant_int4(const uint8_t *q, const float *scales, const float *mins, size_t n, size_t block,
                               float *y, bool add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (i & 1) ? q[i / 2] >> 4 : q[i / 2] & 15;
        float v = dq4(c, mins[i / block], scales[i / block]);
        y[i] = add ? __fadd_rn(y[i], v) : v;
    }
}

/* ---- bf16, range check, error feedback, accumulation, byte planes ------------------------------------ */

__device__ __forceinline__ uint16_t bf16_round(float v)
{
    uint32_t u = __float_as_uint(v);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void k_to_bf16(const float *x, float *r, size_t n, uint16_t *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = ld(x, r, i);
        uint16_t b = bf16_round(v);
        y[i] = b;
        if (r) r[i] = __fsub_rn(v, __uint_as_float((uint32_t)b << 16));
    }
}

__global__ void k_from_bf16(const uint16_t *x, size_t n, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

__global__ void k_count_above(const float *x, size_t n, uint32_t limit, unsigned long long *count)
{
    unsigned long long c = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c += abs_key(x[i]) > limit;
    for (int o = 16; o > 0; o /= 2) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

__global__ void k_ef_add(const float *x, const float *r, size_t n, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(x[i], r[i]);
}

__global__ void k_ef_clear(const uint32_t *idx, size_t k, float *r)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < k; i += (size_t)gridDim.x * blockDim.x)
        r[idx[i]] = 0.0f;
}

__global__ void k_accumulate(const float *x, size_t n, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

/* One thread per byte of the planes layout; `forward` picks shuffle or unshuffle. */
__global__ void k_planes(const uint8_t *in, size_t ne, size_t elem, uint8_t *out, bool forward)
{
    size_t total = ne * elem;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total; j += (size_t)gridDim.x * blockDim.x) {
        size_t p = j / ne, i = j % ne;
        if (forward) out[j] = in[i * elem + p];
        else out[i * elem + p] = in[j];
    }
}

/* ---- top-k ------------------------------------------------------------------------------------------ */

struct topk_state {
    uint32_t prefix, mask;
    unsigned long long want; /* after the last pass: how many entries equal to the threshold to take */
};

struct topk_scratch {
    uint32_t hist[QT_HIST];
    topk_state st;
    /* then, per tile: gt count, eq count, output offset, ties taken (4 x tiles u32) */
};

static size_t tiles_for(size_t n) { return (n + QT_TILE - 1) / QT_TILE; }

__global__ void k_topk_init(topk_state *st, size_t k)
{
    st->prefix = 0;
    st->mask = 0;
    st->want = k;
}

__global__ void k_topk_hist(const float *x, size_t n, const topk_state *st, int shift, uint32_t width, uint32_t *hist)
{
    __shared__ uint32_t h[QT_HIST];
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) h[i] = 0;
    __syncthreads();
    uint32_t prefix = st->prefix, mask = st->mask;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t key = abs_key(x[i]);
        if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & (width - 1)], 1u);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x)
        if (h[i]) atomicAdd(&hist[i], h[i]);
}

__global__ void k_topk_pick(const uint32_t *hist, int shift, uint32_t width, topk_state *st)
{
    unsigned long long want = st->want;
    uint32_t d = width;
    while (d > 0) {
        d--;
        if (hist[d] >= want) break;
        want -= hist[d];
    }
    st->want = want;
    st->prefix |= d << shift;
    st->mask |= (width - 1) << shift;
}

__global__ void k_topk_tile_count(const float *x, size_t n, const topk_state *st, uint32_t *tile_gt, uint32_t *tile_eq)
{
    __shared__ uint32_t gt, eq;
    if (threadIdx.x == 0) gt = eq = 0;
    __syncthreads();
    uint32_t t = st->prefix, lg = 0, le = 0;
    size_t base = (size_t)blockIdx.x * QT_TILE + threadIdx.x * 4;
    for (size_t i = base; i < base + 4 && i < n; i++) {
        uint32_t key = abs_key(x[i]);
        lg += key > t;
        le += key == t;
    }
    atomicAdd(&gt, lg);
    atomicAdd(&eq, le);
    __syncthreads();
    if (threadIdx.x == 0) {
        tile_gt[blockIdx.x] = gt;
        tile_eq[blockIdx.x] = eq;
    }
}

/* Sequential over tiles: output offsets and how many ties each tile contributes (lowest index first). */
__global__ void k_topk_tile_scan(size_t tiles, const topk_state *st, const uint32_t *tile_gt, const uint32_t *tile_eq,
                                 uint32_t *tile_off, uint32_t *tile_ties)
{
    unsigned long long ties = st->want;
    uint32_t off = 0;
    for (size_t b = 0; b < tiles; b++) {
        uint32_t take = tile_eq[b] < ties ? tile_eq[b] : (uint32_t)ties;
        ties -= take;
        tile_ties[b] = take;
        tile_off[b] = off;
        off += tile_gt[b] + take;
    }
}

/* Exclusive prefix sum over the CTA (QT_THREADS values), Hillis-Steele in shared memory. */
__device__ uint32_t cta_exclusive_scan(uint32_t v, uint32_t *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = 1; o < QT_THREADS; o *= 2) {
        uint32_t add = threadIdx.x >= o ? sh[threadIdx.x - o] : 0;
        __syncthreads();
        sh[threadIdx.x] += add;
        __syncthreads();
    }
    uint32_t incl = sh[threadIdx.x];
    __syncthreads();
    return incl - v;
}

__global__ void k_topk_emit(const float *x, size_t n, const topk_state *st, const uint32_t *tile_off,
                            const uint32_t *tile_ties, uint32_t *idx, float *val)
{
    __shared__ uint32_t sh[QT_THREADS];
    uint32_t t = st->prefix;
    size_t base = (size_t)blockIdx.x * QT_TILE + threadIdx.x * 4;
    uint32_t keys[4], neq = 0;
    for (int j = 0; j < 4; j++) {
        keys[j] = base + j < n ? abs_key(x[base + j]) : 0;
        neq += base + j < n && keys[j] == t;
    }
    uint32_t eq_rank = cta_exclusive_scan(neq, sh), ties = tile_ties[blockIdx.x];
    bool sel[4];
    uint32_t nsel = 0;
    for (int j = 0; j < 4; j++) {
        bool in = base + j < n;
        bool is_eq = in && keys[j] == t;
        sel[j] = in && (keys[j] > t || (is_eq && eq_rank < ties));
        eq_rank += is_eq;
        nsel += sel[j];
    }
    uint32_t pos = tile_off[blockIdx.x] + cta_exclusive_scan(nsel, sh);
    for (int j = 0; j < 4; j++)
        if (sel[j]) {
            idx[pos] = (uint32_t)(base + j);
            val[pos] = x[base + j];
            pos++;
        }
}

/* ---- host wrappers ---------------------------------------------------------------------------------- */

static xdc_err_t cuda_quantize_int8(const float *x, float *r, size_t n, size_t block, int8_t *q, float *scales)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    if (n == 0) return XDC_OK;
    k_quant_int8<<<(unsigned)((n + block - 1) / block), QT_THREADS, 0, ST>>>(x, r, n, block, q, scales);
    return launched();
}

static xdc_err_t cuda_dequantize_int8(const int8_t *q, const float *scales, size_t n, size_t block, float *y, bool add)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    if (n == 0) return XDC_OK;
    k_dequant_int8<<<grid_for(n), QT_THREADS, 0, ST>>>(q, scales, n, block, y, add);
    return launched();
}

static xdc_err_t cuda_quantize_int4(const float *x, float *r, size_t n, size_t block, uint8_t *q, float *scales,
                                    float *mins)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    if (n == 0) return XDC_OK;
    k_quant_int4<<<(unsigned)((n + block - 1) / block), QT_THREADS, 0, ST>>>(x, r, n, block, q, scales, mins);
    return launched();
}

static xdc_err_t cuda_dequantize_int4(const uint8_t *q, const float *scales, const float *mins, size_t n, size_t block,
                                      float *y, bool add)
{
    if (!block_ok(block)) return XDC_ERR_INVALID;
    if (n == 0) return XDC_OK;
    k_dequant_int4<<<grid_for(n), QT_THREADS, 0, ST>>>(q, scales, mins, n, block, y, add);
    return launched();
}

static xdc_err_t cuda_fp32_to_bf16(const float *x, float *r, size_t n, uint16_t *y)
{
    if (n == 0) return XDC_OK;
    k_to_bf16<<<grid_for(n), QT_THREADS, 0, ST>>>(x, r, n, y);
    return launched();
}

static xdc_err_t cuda_bf16_to_fp32(const uint16_t *x, size_t n, float *y)
{
    if (n == 0) return XDC_OK;
    k_from_bf16<<<grid_for(n), QT_THREADS, 0, ST>>>(x, n, y);
    return launched();
}

static size_t cuda_topk_scratch_bytes(size_t n, size_t k)
{
    (void)k;
    return sizeof(topk_scratch) + 4 * tiles_for(n) * sizeof(uint32_t);
}

static xdc_err_t cuda_topk_select(const float *x, float *r, size_t n, size_t k, uint32_t *idx, float *val,
                                  void *scratch)
{
    if (k > n || n > UINT32_MAX) return XDC_ERR_INVALID;
    if (r && n) { /* error feedback: select from r = x + r, then zero what was sent */
        k_ef_add<<<grid_for(n), QT_THREADS, 0, ST>>>(x, r, n, r);
        x = r;
    }
    if (k == 0) return launched();
    topk_scratch *s = (topk_scratch *)scratch;
    size_t tiles = tiles_for(n);
    uint32_t *tile_gt = (uint32_t *)(s + 1), *tile_eq = tile_gt + tiles, *tile_off = tile_eq + tiles,
             *tile_ties = tile_off + tiles;
    static const int shift[3] = {21, 10, 0};
    static const uint32_t width[3] = {2048, 2048, 1024};
    k_topk_init<<<1, 1, 0, ST>>>(&s->st, k);
    for (int p = 0; p < 3; p++) {
        XDC_CHECK(queued(cudaMemsetAsync(s->hist, 0, width[p] * sizeof(uint32_t), ST), "cudaMemsetAsync"));
        k_topk_hist<<<grid_for(n), QT_THREADS, 0, ST>>>(x, n, &s->st, shift[p], width[p], s->hist);
        k_topk_pick<<<1, 1, 0, ST>>>(s->hist, shift[p], width[p], &s->st);
    }
    k_topk_tile_count<<<(unsigned)tiles, QT_THREADS, 0, ST>>>(x, n, &s->st, tile_gt, tile_eq);
    k_topk_tile_scan<<<1, 1, 0, ST>>>(tiles, &s->st, tile_gt, tile_eq, tile_off, tile_ties);
    k_topk_emit<<<(unsigned)tiles, QT_THREADS, 0, ST>>>(x, n, &s->st, tile_off, tile_ties, idx, val);
    if (r) k_ef_clear<<<grid_for(k), QT_THREADS, 0, ST>>>(idx, k, r);
    return launched();
}

static xdc_err_t cuda_count_out_of_range(const float *x, size_t n, float max_abs, size_t *count)
{
    XDC_CHECK(queued(cudaMemsetAsync(count, 0, sizeof *count, ST), "cudaMemsetAsync"));
    if (n == 0) return XDC_OK;
    uint32_t limit;
    memcpy(&limit, &max_abs, 4);
    k_count_above<<<grid_for(n), QT_THREADS, 0, ST>>>(x, n, limit & 0x7fffffffu, (unsigned long long *)count);
    return launched();
}

static xdc_err_t cuda_accumulate(const float *x, size_t n, float *y)
{
    if (n == 0) return XDC_OK;
    k_accumulate<<<grid_for(n), QT_THREADS, 0, ST>>>(x, n, y);
    return launched();
}

__global__ void k_scale(float *y, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fmul_rn(y[i], a);
}

static xdc_err_t cuda_scale(float *y, size_t n, float a)
{
    if (n == 0) return XDC_OK;
    k_scale<<<grid_for(n), QT_THREADS, 0, ST>>>(y, n, a);
    return launched();
}

/* One thread per pair; the indices are distinct (strictly ascending), so no two threads add to one y. */
__global__ void k_scatter(const uint32_t *idx, const float *val, size_t k, float *y, size_t n, bool add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < k; i += (size_t)gridDim.x * blockDim.x)
        if (idx[i] < n) y[idx[i]] = add ? __fadd_rn(y[idx[i]], val[i]) : val[i];
}

static xdc_err_t cuda_scatter(const uint32_t *idx, const float *val, size_t k, float *y, size_t n, bool add)
{
    if (k == 0) return XDC_OK;
    k_scatter<<<grid_for(k), QT_THREADS, 0, ST>>>(idx, val, k, y, n, add);
    return launched();
}

static xdc_err_t planes(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out, bool forward)
{
    if (elem < 1 || elem > 16) return XDC_ERR_INVALID;
    size_t ne = n_bytes / elem, tail = n_bytes - ne * elem;
    if (ne) k_planes<<<grid_for(ne * elem), QT_THREADS, 0, ST>>>(in, ne, elem, out, forward);
    if (tail)
        XDC_CHECK(queued(cudaMemcpyAsync(out + ne * elem, in + ne * elem, tail, cudaMemcpyDeviceToDevice, ST),
                         "cudaMemcpyAsync"));
    return launched();
}

static xdc_err_t cuda_byte_shuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    return planes(in, n_bytes, elem, out, true);
}

static xdc_err_t cuda_byte_unshuffle(const uint8_t *in, size_t n_bytes, size_t elem, uint8_t *out)
{
    return planes(in, n_bytes, elem, out, false);
}

extern "C" const xdc_quant_ops xdc_quant_cuda_ops = {
    cuda_quantize_int8,      cuda_dequantize_int8, cuda_quantize_int4,
    cuda_dequantize_int4,    cuda_fp32_to_bf16,    cuda_bf16_to_fp32,
    cuda_topk_scratch_bytes, cuda_topk_select,     cuda_count_out_of_range,
    cuda_accumulate,         cuda_scale,           cuda_scatter,
    cuda_byte_shuffle,       cuda_byte_unshuffle,
};
