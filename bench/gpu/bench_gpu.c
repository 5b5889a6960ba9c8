/* bench_gpu.c — one GPU's numbers for tests/gpu/run.sh, each next to a ceiling measured in the same run.
 * NOT RUN YET: written on a machine without a GPU (it builds there and refuses with exit 69).
 *
 *   bench_gpu model CONFIG.yaml [--steps S]   training steps of the whole model on the CUDA backend
 *       (forward, backward, grad norm, AdamW; random tokens), tokens/s, achieved TFLOP/s and MFU against
 *       the backend's own matmul (cuBLAS sgemm on TF32 tensor cores, as the model's) of the model's largest layer shape
 *       and of 8192^3, the better of the two kept as the peak.
 *   bench_gpu ops CONFIG.yaml [--steps S]     the time per op family of one training step of CONFIG's shape
 *       (GEMMs, attention, layernorm, GELU, softmax + cross-entropy, embedding, residual adds, AdamW, the
 *       gradient norm's sumsq), forward and backward apart: the op sequence of one step (bench_ops below:
 *       every layer's ops with the model's shapes, on one layer's buffers reused by all layers, as the
 *       timing does not depend on the values) called op by op on the backend's table, each op between two
 *       timed events, nothing synchronised inside a step. Printed in ms per step and in % of the step, with
 *       the step's own device time (first event to last) next to the sum, and the GEMMs' TFLOP/s.
 *   bench_gpu gemm [--size S]                 the GEMM peak: the backend's matmul (TF32 on CUDA) forward on
 *       S^3 (default 8192) and backward (two GEMMs), and the GPT-2 124M layer shapes with S rows, each the
 *       best of its repetitions in device time. The kernels have no bf16 GEMM (docs/device.md,
 *       "Precision"), so there is no bf16 figure: the last line says so.
 *   bench_gpu codec [--mib M]                 the CUDA quantize ops on device memory (int8 blockwise
 *       with error feedback, bf16 with error feedback, int4, top-k, byte planes) in GB/s of bytes read plus
 *       bytes written (each op's minimum traffic: every input read once, every output written once; an op
 *       that passes over its input twice moves more than it is credited with), next to a device-to-device
 *       memcpy of the same fp32 buffer counted the same way (read + written = twice its size), the
 *       ceiling an elementwise op can reach.
 *
 * `--backend cpu` (after the mode's arguments) runs the same code on the CPU backend: a dry run of the
 * bench itself on a machine without a GPU (its numbers are not the point; tests/gpu/test_bench_gpu_cpu.c
 * runs every mode so, with tiny sizes).
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

/* Loads the model config at path (exits 78 with the config's errors). */
static xdc_train_config load_config(const char *path)
{
    xdc_train_config c;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, path);
    if (xdc_model_config_load(path, &c, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        exit(78);
    }
    return c;
}

/* FLOPs of the matmuls of one forward (GEMMs only: 2·N·(12·L·C² + V·C)) and of attention's two batched
 * products (4·B·L·T²·C); backward is twice each. */
static double gemm_flops_fwd(const xdc_train_config *c)
{
    double N = (double)c->batch_size * c->seq_len, C = c->model.n_embd, L = c->model.n_layer, V = c->model.vocab_size;
    return 2.0 * N * (12.0 * L * C * C + V * C);
}
static double attention_flops_fwd(const xdc_train_config *c)
{
    return 4.0 * c->batch_size * (double)c->model.n_layer * c->seq_len * (double)c->seq_len * c->model.n_embd;
}

static int bench_model(const char *path, int steps)
{
    xdc_train_config c = load_config(path);
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
    double N = (double)c.batch_size * c.seq_len;
    double flops = 3.0 * (gemm_flops_fwd(&c) + attention_flops_fwd(&c));
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

/* ---- ops: one step's op sequence, op by op between timed events -------------------------------------- */

enum { F_GEMM, F_ATTENTION, F_LAYERNORM, F_GELU, F_SOFTMAX_CE, F_ENCODER, F_RESIDUAL, F_ADAMW, F_SUMSQ, N_FAMILIES };
static const char *const family_name[N_FAMILIES] = {"gemm",    "attention", "layernorm", "gelu", "softmax_ce",
                                                    "encoder", "residual",  "adamw",     "sumsq"};
#define MAX_OPS 2048 /* ops of one step: 2 + 10·L forward, 4 + 10·L backward, 2 optimizer (L <= 100) */

/* One step's timed ops: events[2i] and events[2i+1] around op i, its family and direction (0 forward, 1
 * backward and optimizer). Read after the step, so nothing inside the step waits for the device. */
static xdc_event *op_ev[2 * MAX_OPS];
static int op_family[MAX_OPS], op_dir[MAX_OPS], n_ops;

static void op_begin(void)
{
    if (n_ops >= MAX_OPS) die(70, "more ops in a step than MAX_OPS");
    if (be->device->event_record(op_ev[2 * n_ops], NULL) != XDC_OK) die(70, "event record failed");
}
static void op_end(int family, int dir)
{
    if (be->device->event_record(op_ev[2 * n_ops + 1], NULL) != XDC_OK) die(70, "event record failed");
    op_family[n_ops] = family, op_dir[n_ops] = dir, n_ops++;
}
/* Queues `call` (one model op) between op i's two events. */
#define OP(family, dir, call) (op_begin(), (call), op_end((family), (dir)))

typedef struct {
    int B, T, C, NH, V, L;
    size_t N, n_params;
    /* one layer's parameters and gradients (every layer uses them) */
    float *ln_w, *ln_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *fc_w, *fc_b, *fcp_w, *fcp_b, *wte, *wpe;
    float *d_ln_w, *d_ln_b, *d_qkv_w, *d_qkv_b, *d_proj_w, *d_proj_b, *d_fc_w, *d_fc_b, *d_fcp_w, *d_fcp_b, *d_wte,
        *d_wpe;
    /* one layer's activations and their gradients */
    float *x, *ln, *mean, *rstd, *qkv, *att, *atty, *proj, *x2, *fc, *gelu, *fcp, *logits, *probs, *losses;
    float *dx, *dln, *dqkv, *datt, *datty, *dx2, *dfc, *dgelu, *dlogits;
    /* the optimizer's arrays over every parameter: p, g, m, v (n_params) */
    float *p, *g, *m, *v;
    int32_t *tok, *tgt;
} step_bufs;

/* One training step of the model's shape, op by op (the order of model/gpt_pass.c; values do not matter). */
static void step_ops(step_bufs *b)
{
    const xdc_model_ops *m = be->model;
    int B = b->B, T = b->T, C = b->C, NH = b->NH, V = b->V, N = (int)b->N;
    size_t NC = b->N * (size_t)C;
    OP(F_ENCODER, 0, m->encoder_forward(b->x, b->tok, b->wte, b->wpe, B, T, C));
    for (int l = 0; l < b->L; l++) {
        OP(F_LAYERNORM, 0, m->layernorm_forward(b->ln, b->mean, b->rstd, b->x, b->ln_w, b->ln_b, N, C));
        OP(F_GEMM, 0, m->matmul_forward(b->qkv, b->ln, b->qkv_w, b->qkv_b, N, C, 3 * C));
        OP(F_ATTENTION, 0, m->attention_forward(b->atty, b->att, b->qkv, B, T, C, NH));
        OP(F_GEMM, 0, m->matmul_forward(b->proj, b->atty, b->proj_w, b->proj_b, N, C, C));
        OP(F_RESIDUAL, 0, m->residual_forward(b->x2, b->x, b->proj, NC));
        OP(F_LAYERNORM, 0, m->layernorm_forward(b->ln, b->mean, b->rstd, b->x2, b->ln_w, b->ln_b, N, C));
        OP(F_GEMM, 0, m->matmul_forward(b->fc, b->ln, b->fc_w, b->fc_b, N, C, 4 * C));
        OP(F_GELU, 0, m->gelu_forward(b->gelu, b->fc, 4 * NC));
        OP(F_GEMM, 0, m->matmul_forward(b->fcp, b->gelu, b->fcp_w, b->fcp_b, N, 4 * C, C));
        OP(F_RESIDUAL, 0, m->residual_forward(b->x, b->x2, b->fcp, NC));
    }
    OP(F_LAYERNORM, 0, m->layernorm_forward(b->ln, b->mean, b->rstd, b->x, b->ln_w, b->ln_b, N, C));
    OP(F_GEMM, 0, m->matmul_forward(b->logits, b->ln, b->wte, NULL, N, C, V));
    OP(F_SOFTMAX_CE, 0, m->crossentropy_forward(b->losses, b->probs, b->logits, b->tgt, N, V));
    OP(F_SOFTMAX_CE, 1, m->crossentropy_backward(b->dlogits, b->probs, b->tgt, 1.0f / (float)N, N, V));
    OP(F_GEMM, 1, m->matmul_backward(b->dln, b->d_wte, NULL, b->dlogits, b->ln, b->wte, N, C, V));
    OP(F_LAYERNORM, 1,
       m->layernorm_backward(b->dx, b->d_ln_w, b->d_ln_b, b->dln, b->x, b->ln_w, b->mean, b->rstd, N, C));
    for (int l = b->L - 1; l >= 0; l--) {
        OP(F_RESIDUAL, 1, m->accumulate(b->dx2, b->dx, NC));
        OP(F_GEMM, 1, m->matmul_backward(b->dgelu, b->d_fcp_w, b->d_fcp_b, b->dx, b->gelu, b->fcp_w, N, 4 * C, C));
        OP(F_GELU, 1, m->gelu_backward(b->dfc, b->fc, b->dgelu, 4 * NC));
        OP(F_GEMM, 1, m->matmul_backward(b->dln, b->d_fc_w, b->d_fc_b, b->dfc, b->ln, b->fc_w, N, C, 4 * C));
        OP(F_LAYERNORM, 1,
           m->layernorm_backward(b->dx2, b->d_ln_w, b->d_ln_b, b->dln, b->x2, b->ln_w, b->mean, b->rstd, N, C));
        OP(F_RESIDUAL, 1, m->accumulate(b->dx, b->dx2, NC));
        OP(F_GEMM, 1, m->matmul_backward(b->datty, b->d_proj_w, b->d_proj_b, b->dx2, b->atty, b->proj_w, N, C, C));
        OP(F_ATTENTION, 1, m->attention_backward(b->dqkv, b->datt, b->datty, b->qkv, b->att, B, T, C, NH));
        OP(F_GEMM, 1, m->matmul_backward(b->dln, b->d_qkv_w, b->d_qkv_b, b->dqkv, b->ln, b->qkv_w, N, C, 3 * C));
        OP(F_LAYERNORM, 1,
           m->layernorm_backward(b->dx, b->d_ln_w, b->d_ln_b, b->dln, b->x, b->ln_w, b->mean, b->rstd, N, C));
    }
    OP(F_ENCODER, 1, m->encoder_backward(b->d_wte, b->d_wpe, b->dx, b->tok, B, T, C));
    double sumsq = 0;
    op_begin();
    if (m->sumsq(b->g, b->n_params, &sumsq) != XDC_OK) die(70, "sumsq failed");
    op_end(F_SUMSQ, 1);
    OP(F_ADAMW, 1, m->adamw(b->p, b->g, b->m, b->v, b->n_params, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1));
}

static int bench_ops(const char *path, int steps)
{
    xdc_train_config c = load_config(path);
    step_bufs b = {.B = c.batch_size,
                   .T = c.seq_len,
                   .C = c.model.n_embd,
                   .NH = c.model.n_head,
                   .V = c.model.vocab_size,
                   .L = c.model.n_layer,
                   .N = (size_t)c.batch_size * c.seq_len};
    if (2 + 10 * b.L + 4 + 10 * b.L + 2 > MAX_OPS) die(64, "too many layers for MAX_OPS");
    size_t C = (size_t)b.C, N = b.N, V = (size_t)b.V, maxT = (size_t)c.model.max_seq_len;
    size_t att = (size_t)b.B * b.NH * b.T * b.T;
    b.n_params = V * C + maxT * C + (size_t)b.L * (12 * C * C + 13 * C) + 2 * C;
    /* (pointer, fp32 count) of every buffer, allocated and filled in one loop */
    struct {
        float **p;
        size_t n;
    } all[] = {{&b.ln_w, C},           {&b.ln_b, C},          {&b.qkv_w, 3 * C * C},
               {&b.qkv_b, 3 * C},      {&b.proj_w, C * C},    {&b.proj_b, C},
               {&b.fc_w, 4 * C * C},   {&b.fc_b, 4 * C},      {&b.fcp_w, 4 * C * C},
               {&b.fcp_b, C},          {&b.wte, V * C},       {&b.wpe, maxT * C},
               {&b.d_ln_w, C},         {&b.d_ln_b, C},        {&b.d_qkv_w, 3 * C * C},
               {&b.d_qkv_b, 3 * C},    {&b.d_proj_w, C * C},  {&b.d_proj_b, C},
               {&b.d_fc_w, 4 * C * C}, {&b.d_fc_b, 4 * C},    {&b.d_fcp_w, 4 * C * C},
               {&b.d_fcp_b, C},        {&b.d_wte, V * C},     {&b.d_wpe, maxT * C},
               {&b.x, N * C},          {&b.ln, N * C},        {&b.mean, N},
               {&b.rstd, N},           {&b.qkv, 3 * N * C},   {&b.att, att},
               {&b.atty, N * C},       {&b.proj, N * C},      {&b.x2, N * C},
               {&b.fc, 4 * N * C},     {&b.gelu, 4 * N * C},  {&b.fcp, N * C},
               {&b.logits, N * V},     {&b.probs, N * V},     {&b.losses, N},
               {&b.dx, N * C},         {&b.dln, N * C},       {&b.dqkv, 3 * N * C},
               {&b.datt, att},         {&b.datty, N * C},     {&b.dx2, N * C},
               {&b.dfc, 4 * N * C},    {&b.dgelu, 4 * N * C}, {&b.dlogits, N * V},
               {&b.p, b.n_params},     {&b.g, b.n_params},    {&b.m, b.n_params},
               {&b.v, b.n_params}};
    size_t n_all = sizeof all / sizeof all[0], bytes = 0;
    for (size_t i = 0; i < n_all; i++) {
        *all[i].p = dev_alloc(all[i].n * 4); /* zero-filled; the small ones random (the logits stay zero:
                                                 filling 3 x 412M floats on the host would cost seconds) */
        if (all[i].n <= ((size_t)1 << 24)) fill_random(*all[i].p, all[i].n, 10 + i);
        bytes += all[i].n * 4;
    }
    b.tok = dev_alloc(N * 4), b.tgt = dev_alloc(N * 4);
    int32_t *ht = malloc(N * 4);
    if (!ht) die(71, "out of memory");
    xdc_rng r;
    xdc_rng_seed(&r, 4);
    for (size_t i = 0; i < N; i++) ht[i] = (int32_t)xdc_rng_below(&r, V);
    if (be->model->upload(b.tok, ht, N * 4) != XDC_OK || be->model->upload(b.tgt, ht, N * 4) != XDC_OK)
        die(70, "upload failed");
    free(ht);
    for (int i = 0; i < 2 * MAX_OPS; i++)
        if (be->device->event_create_timed(&op_ev[i]) != XDC_OK) die(70, "cannot create timed events");

    double fam[N_FAMILIES][2] = {{0}}, sum_ms = 0, step_ms = 0;
    for (int s = -1; s < steps; s++) { /* one warm-up step */
        n_ops = 0;
        step_ops(&b);
        if (be->model->sync() != XDC_OK) die(70, "a step's op failed");
        double first_to_last = 0;
        if (be->device->event_elapsed(op_ev[0], op_ev[2 * n_ops - 1], &first_to_last) != XDC_OK)
            die(70, "event timing failed");
        if (s < 0) continue;
        step_ms += first_to_last / steps;
        for (int i = 0; i < n_ops; i++) {
            double ms = 0;
            if (be->device->event_elapsed(op_ev[2 * i], op_ev[2 * i + 1], &ms) != XDC_OK)
                die(70, "event timing failed");
            fam[op_family[i]][op_dir[i]] += ms / steps;
            sum_ms += ms / steps;
        }
    }
    printf(
        "gpu_ops config=%s B=%d T=%d L=%d C=%d V=%d params=%zu ops_per_step=%d steps=%d device_mib=%.0f backend=%s\n",
        path, b.B, b.T, b.L, b.C, b.V, b.n_params, n_ops, steps, (double)bytes / 1048576.0, be->name);
    printf("gpu_ops family       fwd_ms    bwd_ms    total_ms  share   (mean per step, device time per op)\n");
    for (int f = 0; f < N_FAMILIES; f++) {
        double t = fam[f][0] + fam[f][1];
        printf("gpu_op %-12s %9.3f %9.3f %9.3f %6.1f%%\n", family_name[f], fam[f][0], fam[f][1], t,
               sum_ms > 0 ? 100.0 * t / sum_ms : 0.0);
    }
    double gf = 3.0 * gemm_flops_fwd(&c), gemm_ms = fam[F_GEMM][0] + fam[F_GEMM][1];
    printf("gpu_ops ops_sum_ms=%.3f step_ms=%.3f gaps_ms=%.3f gemm_tflops=%.2f attention_share=%.3f\n", sum_ms, step_ms,
           step_ms - sum_ms, gemm_ms > 0 ? gf / gemm_ms / 1e9 : 0.0,
           sum_ms > 0 ? (fam[F_ATTENTION][0] + fam[F_ATTENTION][1]) / sum_ms : 0.0);
    for (size_t i = 0; i < n_all; i++) be->model->free(*all[i].p);
    be->model->free(b.tok), be->model->free(b.tgt);
    for (int i = 0; i < 2 * MAX_OPS; i++) be->device->event_destroy(op_ev[i]);
    return 0;
}

/* ---- gemm: the backend's matmul peak -------------------------------------------------------------------- */

/* Best of `reps` of dinp (M,K) += dout (M,N)·w (N,K), dw (N,K) += dout^T·inp: the backward's two GEMMs, in
 * TFLOP/s of device time. */
static double matmul_backward_tflops(int M, int K, int N, int reps)
{
    const xdc_model_ops *m = be->model;
    float *inp = dev_alloc((size_t)M * K * 4), *w = dev_alloc((size_t)N * K * 4), *dout = dev_alloc((size_t)M * N * 4),
          *dinp = dev_alloc((size_t)M * K * 4), *dw = dev_alloc((size_t)N * K * 4);
    fill_random(inp, (size_t)M * K, 5);
    fill_random(w, (size_t)N * K, 6);
    fill_random(dout, (size_t)M * N, 7);
    double best = 0;
    for (int i = -2; i < reps; i++) {
        mark(1, NULL);
        m->matmul_backward(dinp, dw, NULL, dout, inp, w, M, K, N);
        mark(0, NULL);
        if (m->sync() != XDC_OK) die(70, "matmul backward failed");
        double ms = elapsed_ms();
        double tf = ms > 0 ? 4.0 * M * (double)K * N / ms / 1e9 : 0;
        if (i >= 0 && tf > best) best = tf;
    }
    m->free(inp), m->free(w), m->free(dout), m->free(dinp), m->free(dw);
    return best;
}

static int bench_gemm(int S)
{
    const char *prec = be->kind == XDC_BACKEND_CUDA ? "tf32" : "fp32";
    int reps = be->kind == XDC_BACKEND_CUDA ? 10 : 2;
    double fwd = matmul_tflops(S, S, S, reps), bwd = matmul_backward_tflops(S, S, S, reps), best = fwd;
    printf("gpu_gemm %s forward M=K=N=%d tflops=%.1f\n", prec, S, fwd);
    printf("gpu_gemm %s backward (dinp + dw) M=K=N=%d tflops=%.1f\n", prec, S, bwd);
    if (bwd > best) best = bwd;
    /* GPT-2 124M's layers (C = 768, V = 50257) with S token rows: qkv, attention projection, MLP up, MLP down,
     * the LM head. */
    static const struct {
        const char *name;
        int K, N;
    } shapes[] = {
        {"qkv", 768, 2304}, {"attproj", 768, 768}, {"fc", 768, 3072}, {"fcproj", 3072, 768}, {"lmhead", 768, 50257}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int K = shapes[i].K, N = shapes[i].N;
        if (be->kind != XDC_BACKEND_CUDA) K = K / 64 + 1, N = N / 64 + 1; /* the CPU dry run: small */
        double t = matmul_tflops(S, K, N, reps);
        printf("gpu_gemm %s gpt2 %s M=%d K=%d N=%d tflops=%.1f\n", prec, shapes[i].name, S, K, N, t);
        if (t > best) best = t;
    }
    printf("gpu_gemm peak_%s_tflops=%.1f bf16=none (the kernels have no bf16 GEMM: docs/device.md, Precision)\n", prec,
           best);
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
    uint8_t *planes = dev_alloc(bytes), *q4 = dev_alloc(n / 2 + 1);
    float *mins = dev_alloc((n / block + 1) * 4);
    size_t k = n / 100; /* top-k at 1% (the codec's topk:0.01) */
    uint32_t *idx = dev_alloc(k * 4);
    float *val = dev_alloc(k * 4);
    void *scratch = dev_alloc(q->topk_scratch_bytes(n, k) + 1);
    fill_random(x, n, 3);
    /* Bytes each op reads plus writes (fp32 4 B, int8 1 B, bf16 2 B, one fp32 scale per block). */
    size_t nb = (n + block - 1) / block * 4;
    size_t memcpy_bytes = 2 * bytes;            /* x read, copy written */
    size_t int8_bytes = 3 * bytes + n + nb;     /* x, r read; r, q, scales written */
    size_t dequant_bytes = n + nb + 2 * bytes;  /* q, scales, y read; y written */
    size_t bf16_bytes = 3 * bytes + 2 * n;      /* x, r read; r, y written */
    size_t shuffle_bytes = 2 * bytes;           /* in read, planes written */
    size_t int4_bytes = bytes + n / 2 + 2 * nb; /* x read; q, scales, mins written */
    size_t topk_bytes = 3 * bytes + 8 * k;      /* x, r read; r, idx, val written */
    double memcpy_gbs, int8_gbs, dequant_gbs, bf16_gbs, shuffle_gbs, int4_gbs, topk_gbs;
    TIMED(memcpy, 10, memcpy_bytes, copy_op(copy, x, bytes));
    TIMED(int8, 10, int8_bytes, q->quantize_int8(x, res, n, block, q8, scales));
    TIMED(dequant, 10, dequant_bytes, q->dequantize_int8(q8, scales, n, block, copy, true));
    TIMED(bf16, 10, bf16_bytes, q->fp32_to_bf16(x, res, n, b16));
    TIMED(shuffle, 10, shuffle_bytes, q->byte_shuffle((const uint8_t *)x, bytes, 4, planes));
    TIMED(int4, 10, int4_bytes, q->quantize_int4(x, NULL, n, block, q4, scales, mins));
    TIMED(topk, 3, topk_bytes, q->topk_select(x, res, n, k, idx, val, scratch));
    printf("gpu_codec n=%zu (%zu MiB fp32) block=%zu topk_k=%zu; GB/s of bytes read + written, device (event) time\n",
           n, mib, block, k);
    printf("gpu_codec int4_gbs=%.1f topk_ef_gbs=%.1f (top-k: ms per MiB of fp32 %.4f)\n", int4_gbs, topk_gbs,
           topk_gbs > 0 ? (double)topk_bytes / topk_gbs / 1e6 / (double)mib : 0.0);
    printf("gpu_codec memcpy_gbs=%.1f int8_ef_gbs=%.1f int8_decode_add_gbs=%.1f bf16_ef_gbs=%.1f "
           "byte_planes_gbs=%.1f int8_vs_memcpy=%.3f\n",
           memcpy_gbs, int8_gbs, dequant_gbs, bf16_gbs, shuffle_gbs, int8_gbs / memcpy_gbs);
    void *all[] = {x, res, scales, copy, q8, b16, planes, q4, mins, idx, val, scratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->model->free(all[i]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int with_config = strcmp(mode, "model") == 0 || strcmp(mode, "ops") == 0;
    if ((!with_config && strcmp(mode, "codec") != 0 && strcmp(mode, "gemm") != 0) || (with_config && argc < 3)) {
        fprintf(stderr, "usage: bench_gpu model CONFIG.yaml [--steps S] | bench_gpu ops CONFIG.yaml [--steps S] | "
                        "bench_gpu gemm [--size S] | bench_gpu codec [--mib M]   (each: [--backend cpu|cuda])\n");
        return 64;
    }
    int steps = 10, size = 8192;
    size_t mib = 256;
    xdc_backend_kind kind = XDC_BACKEND_CUDA;
    for (int i = with_config ? 3 : 2; i < argc; i += 2) {
        if (i + 1 >= argc) die(64, "an option without its value");
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--mib") == 0) mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--size") == 0) size = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--backend") == 0) {
            if (xdc_backend_parse(argv[i + 1], &kind) != XDC_OK) die(64, "--backend wants cpu or cuda");
        } else die(64, "unknown option (usage: bench_gpu without arguments)");
    }
    xdc_diag d = {{0}};
    if (xdc_kern_backend_get(kind, &be, &d) != XDC_OK) {
        fprintf(stderr, "bench_gpu: no %s backend: %s\n", xdc_backend_name(kind), d.msg);
        return 69;
    }
    if (steps < 1 || mib < 1 || size < 16) die(64, "--steps and --mib want positive numbers, --size at least 16");
    if (be->device->event_create_timed(&ev_start) != XDC_OK || be->device->event_create_timed(&ev_end) != XDC_OK)
        die(70, "cannot create timed events");
    if (strcmp(mode, "model") == 0) return bench_model(argv[2], steps);
    if (strcmp(mode, "ops") == 0) return bench_ops(argv[2], steps);
    if (strcmp(mode, "gemm") == 0) return bench_gemm(size);
    return bench_codec(mib);
}
