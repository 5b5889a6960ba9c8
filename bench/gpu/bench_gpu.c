/* bench_gpu.c — one GPU's numbers for tests/gpu/run.sh, each next to a ceiling measured in the same run.
 * NOT RUN YET: written on a machine without a GPU (it builds there and refuses with exit 69).
 *
 *   bench_gpu model CONFIG.yaml [--steps S]   training steps of the whole model on the CUDA backend
 *       (forward, backward, grad norm, AdamW; random tokens), tokens/s, achieved TFLOP/s and MFU against
 *       the backend's own matmul (cuBLAS sgemm on TF32 tensor cores, as the model's) of the model's largest layer shape
 *       and of 8192^3, the better of the two kept as the peak.
 *   bench_gpu codec [--mib M]                 the CUDA quantize ops on device memory (int8 blockwise
 *       with error feedback, bf16 with error feedback, byte planes) in GB/s of bytes read plus bytes
 *       written (each op's minimum traffic: every input read once, every output written once; an op that
 *       passes over its input twice moves more than it is credited with), next to a device-to-device
 *       memcpy of the same fp32 buffer counted the same way (read + written = twice its size), the
 *       ceiling an elementwise op can reach.
 *
 * `--backend cpu` (after the mode's arguments) runs the same code on the CPU backend: a dry run of the
 * bench itself on a machine without a GPU (its numbers are not the point).
 *
 * Each mode's last line is key=value, e.g. `gpu_model tokens_per_s=... step_tflops=... peak_tflops=...
 * mfu=...`. FLOPs per step count the matmuls (as bench/model): forward 2·N·(12·L·C² + V·C) + 4·B·L·T²·C,
 * backward twice that. Times are device times between two timed events on the stream the work runs on
 * (xdc_device_ops.event_create_timed / event_elapsed: cudaEventElapsedTime on CUDA), the best of the
 * timed repetitions after warm-up; the host clock would add launch and synchronisation latency, which on a
 * GEMM of a few hundred microseconds is a large share. A step is timed from before its first op to after
 * its optimizer's last on the stage's stream, so host gaps inside the step (its forward's and backward's
 * own waits) count, as they do in training; MFU is computed from that time. */
#include "common/xdc_rng.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"
#include "model/xdc_gpt.h"
#include "model/xdc_model_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const xdc_kern_backend *be;
static xdc_event *ev_start, *ev_end; /* timed events (event_create_timed) */

static void die(int code, const char *what)
{
    fprintf(stderr, "bench_gpu: %s\n", what);
    exit(code);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (be->model->alloc(&p, bytes) != XDC_OK) die(71, "device allocation failed");
    return p;
}

static void fill_random(void *dev, size_t n_floats, uint64_t seed)
{
    float *h = malloc(n_floats * sizeof *h);
    if (!h) die(71, "out of memory");
    xdc_rng r;
    xdc_rng_seed(&r, seed);
    for (size_t i = 0; i < n_floats; i++) h[i] = xdc_rng_uniform(&r) - 0.5f;
    if (be->model->upload(dev, h, n_floats * sizeof *h) != XDC_OK) die(70, "upload failed");
    free(h);
}

/* Records the start (start = 1) or end event on stream s (NULL: the current one). */
static void mark(int start, xdc_stream *s)
{
    if (be->device->event_record(start ? ev_start : ev_end, s) != XDC_OK) die(70, "event record failed");
}

/* Device milliseconds between the last start and end marks (waits for the end). */
static double elapsed_ms(void)
{
    double ms = 0;
    if (be->device->event_elapsed(ev_start, ev_end, &ms) != XDC_OK) die(70, "event timing failed");
    return ms;
}

/* Best of `reps` of out (M,OC) = inp (M,C) · w^T (OC,C) through the backend, in TFLOP/s of device time. */
static double matmul_tflops(int M, int C, int OC, int reps)
{
    const xdc_model_ops *m = be->model;
    float *inp = dev_alloc((size_t)M * C * 4), *w = dev_alloc((size_t)OC * C * 4), *out = dev_alloc((size_t)M * OC * 4);
    fill_random(inp, (size_t)M * C, 1);
    fill_random(w, (size_t)OC * C, 2);
    double best = 0;
    for (int i = -2; i < reps; i++) {
        mark(1, NULL);
        m->matmul_forward(out, inp, w, NULL, M, C, OC);
        mark(0, NULL);
        if (m->sync() != XDC_OK) die(70, "matmul failed");
        double ms = elapsed_ms();
        double tf = ms > 0 ? 2.0 * M * (double)C * OC / ms / 1e9 : 0;
        if (i >= 0 && tf > best) best = tf;
    }
    m->free(inp), m->free(w), m->free(out);
    return best;
}

static int bench_model(const char *path, int steps)
{
    xdc_train_config c;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, path);
    if (xdc_model_config_load(path, &c, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return 78;
    }
    xdc_gpt_stage_config sc = {.model = c.model,
                               .layer_begin = 0,
                               .layer_end = c.model.n_layer,
                               .batch = c.batch_size,
                               .seq_len = c.seq_len,
                               .max_inflight = 1,
                               .seed = 1,
                               .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    xdc_gpt_stage *s = NULL;
    xdc_diag d = {{0}};
    if (xdc_gpt_stage_create(be->model, &sc, &s, &d) != XDC_OK) {
        fprintf(stderr, "bench_gpu: %s: %s\n", path, d.msg);
        return 70;
    }
    size_t n = (size_t)c.batch_size * c.seq_len;
    int32_t *tok = malloc(n * 4), *tgt = malloc(n * 4);
    if (!tok || !tgt) die(71, "out of memory");
    xdc_rng r;
    xdc_rng_seed(&r, 2);
    for (size_t i = 0; i < n; i++)
        tok[i] = (int32_t)xdc_rng_below(&r, (uint64_t)c.model.vocab_size),
        tgt[i] = (int32_t)xdc_rng_below(&r, (uint64_t)c.model.vocab_size);
    double best_ms = 1e300, all_ms = 0;
    float loss = 0;
    xdc_stream *st = xdc_gpt_stage_stream(s);
    for (int i = -2; i < steps; i++) { /* two warm-up steps */
        double sumsq = 0;
        mark(1, st);
        xdc_gpt_stage_zero_grad(s);
        if (xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss) != XDC_OK ||
            xdc_gpt_stage_backward(s, 0, NULL, 1.0f, NULL) != XDC_OK || xdc_gpt_stage_grad_sumsq(s, &sumsq) != XDC_OK ||
            xdc_gpt_stage_optimizer_step(s, 1e-4f, xdc_gpt_clip_scale(sumsq, 1.0f)) != XDC_OK ||
            be->model->sync() != XDC_OK)
            die(70, "training step failed");
        mark(0, st);
        double ms = elapsed_ms();
        if (i < 0) continue;
        all_ms += ms;
        if (ms < best_ms) best_ms = ms;
    }
    double B = c.batch_size, T = c.seq_len, N = B * T, C = c.model.n_embd, L = c.model.n_layer, V = c.model.vocab_size;
    double flops = 3.0 * (2.0 * N * (12.0 * L * C * C + V * C) + 4.0 * B * L * T * T * C);
    double secs = best_ms / 1e3, step_tf = flops / secs / 1e12;
    double layer_tf = matmul_tflops((int)n, c.model.n_embd, 4 * c.model.n_embd, 20);
    double big_tf = be->kind == XDC_BACKEND_CUDA ? matmul_tflops(8192, 8192, 8192, 10) : 0;
    double peak = layer_tf > big_tf ? layer_tf : big_tf;
    printf("gpu_model config=%s params=%zu B=%d T=%d steps=%d best_step_ms=%.2f mean_step_ms=%.2f loss=%.3f\n", path,
           xdc_gpt_stage_num_params(s), c.batch_size, c.seq_len, steps, secs * 1e3, all_ms / steps, loss);
    printf("gpu_model matmul_tflops layer(M=%zu,K=%d,N=%d)=%.1f 8192^3=%.1f\n", n, c.model.n_embd, 4 * c.model.n_embd,
           layer_tf, big_tf);
    printf("gpu_model tokens_per_s=%.0f step_tflops=%.2f peak_tflops=%.2f mfu=%.3f\n", N / secs, step_tf, peak,
           step_tf / peak);
    free(tok), free(tgt);
    xdc_gpt_stage_destroy(s);
    return 0;
}

/* label##_gbs = the best of `reps` (after one warm-up) of `bytes` (read + written) over the device time
 * of `call` on the current stream, in GB/s. */
#define TIMED(label, reps, bytes, call)                                                  \
    do {                                                                                 \
        double best_ = 0;                                                                \
        for (int i_ = -1; i_ < (reps); i_++) {                                           \
            mark(1, NULL);                                                               \
            xdc_err_t rc_ = (call);                                                      \
            mark(0, NULL);                                                               \
            if (rc_ != XDC_OK || be->model->sync() != XDC_OK) die(70, #label " failed"); \
            double ms_ = elapsed_ms();                                                   \
            double g_ = ms_ > 0 ? (double)(bytes) / ms_ / 1e6 : 0;                       \
            if (i_ >= 0 && g_ > best_) best_ = g_;                                       \
        }                                                                                \
        label##_gbs = best_;                                                             \
    } while (0)

static xdc_err_t copy_op(void *dst, const void *src, size_t bytes)
{
    be->model->copy(dst, src, bytes);
    return XDC_OK;
}

static int bench_codec(size_t mib)
{
    size_t n = mib * 1048576 / 4, block = 256, bytes = n * 4;
    const xdc_quant_ops *q = be->quant;
    float *x = dev_alloc(bytes), *res = dev_alloc(bytes), *scales = dev_alloc((n / block + 1) * 4),
          *copy = dev_alloc(bytes);
    int8_t *q8 = dev_alloc(n);
    uint16_t *b16 = dev_alloc(n * 2);
    uint8_t *planes = dev_alloc(bytes);
    fill_random(x, n, 3);
    /* Bytes each op reads plus writes (fp32 4 B, int8 1 B, bf16 2 B, one fp32 scale per block). */
    size_t nb = (n + block - 1) / block * 4;
    size_t memcpy_bytes = 2 * bytes;           /* x read, copy written */
    size_t int8_bytes = 3 * bytes + n + nb;    /* x, r read; r, q, scales written */
    size_t dequant_bytes = n + nb + 2 * bytes; /* q, scales, y read; y written */
    size_t bf16_bytes = 3 * bytes + 2 * n;     /* x, r read; r, y written */
    size_t shuffle_bytes = 2 * bytes;          /* in read, planes written */
    double memcpy_gbs, int8_gbs, dequant_gbs, bf16_gbs, shuffle_gbs;
    TIMED(memcpy, 10, memcpy_bytes, copy_op(copy, x, bytes));
    TIMED(int8, 10, int8_bytes, q->quantize_int8(x, res, n, block, q8, scales));
    TIMED(dequant, 10, dequant_bytes, q->dequantize_int8(q8, scales, n, block, copy, true));
    TIMED(bf16, 10, bf16_bytes, q->fp32_to_bf16(x, res, n, b16));
    TIMED(shuffle, 10, shuffle_bytes, q->byte_shuffle((const uint8_t *)x, bytes, 4, planes));
    printf("gpu_codec n=%zu (%zu MiB fp32) block=%zu; GB/s of bytes read + written, device (event) time\n", n, mib,
           block);
    printf("gpu_codec memcpy_gbs=%.1f int8_ef_gbs=%.1f int8_decode_add_gbs=%.1f bf16_ef_gbs=%.1f "
           "byte_planes_gbs=%.1f int8_vs_memcpy=%.3f\n",
           memcpy_gbs, int8_gbs, dequant_gbs, bf16_gbs, shuffle_gbs, int8_gbs / memcpy_gbs);
    void *all[] = {x, res, scales, copy, q8, b16, planes};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->model->free(all[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "model") != 0 && strcmp(argv[1], "codec") != 0) ||
        (strcmp(argv[1], "model") == 0 && argc < 3)) {
        fprintf(stderr, "usage: bench_gpu model CONFIG.yaml [--steps S] | bench_gpu codec [--mib M]\n");
        return 64;
    }
    int steps = 10;
    size_t mib = 256;
    xdc_backend_kind kind = XDC_BACKEND_CUDA;
    for (int i = strcmp(argv[1], "model") == 0 ? 3 : 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--mib") == 0) mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--backend") == 0 && xdc_backend_parse(argv[i + 1], &kind) != XDC_OK)
            die(64, "--backend wants cpu or cuda");
    }
    xdc_diag d = {{0}};
    if (xdc_kern_backend_get(kind, &be, &d) != XDC_OK) {
        fprintf(stderr, "bench_gpu: no %s backend: %s\n", xdc_backend_name(kind), d.msg);
        return 69;
    }
    if (steps < 1 || mib < 1) die(64, "--steps and --mib want positive numbers");
    if (be->device->event_create_timed(&ev_start) != XDC_OK || be->device->event_create_timed(&ev_end) != XDC_OK)
        die(70, "cannot create timed events");
    return strcmp(argv[1], "model") == 0 ? bench_model(argv[2], steps) : bench_codec(mib);
}
