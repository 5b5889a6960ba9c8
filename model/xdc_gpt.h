/* xdc_gpt.h — a GPT-2-style decoder split into pipeline stages, trained with AdamW.
 *
 * Model: token + position embeddings, L blocks (layernorm, causal multi-head self-attention, residual,
 * layernorm, MLP 4C with tanh-GELU, residual), final layernorm, an UNTIED LM head (V,C) and softmax
 * cross-entropy. The head is untied because the embeddings live on the first stage and the head on the
 * last: tying them would need a cross-stage all-reduce of the shared matrix every step.
 *
 * A stage owns a contiguous block range [layer_begin, layer_end); the first stage (layer_begin == 0)
 * also owns the embeddings, the last (layer_end == n_layer) the final layernorm, the head and the loss.
 * The unsplit model is simply the stage [0, n_layer).
 *
 * Parameter arena order (fp32, one allocation per stage; gradients and AdamW moments use the same order):
 *   wte (V,C), wpe (maxT,C)                                                  -- first stage
 *   for each layer l: ln1w (C), ln1b (C), qkvw (3C,C), qkvb (3C), attprojw (C,C), attprojb (C),
 *                     ln2w (C), ln2b (C), fcw (4C,C), fcb (4C), fcprojw (C,4C), fcprojb (C)
 *   lnfw (C), lnfb (C), lm_head (V,C)                                        -- last stage
 * Concatenating the arenas of stages 0, 1, ... gives exactly the unsplit arena, so params_xxh64 — XXH64
 * (seed 0) streamed over the arenas in stage order — is the same for a split and an unsplit run.
 * Initialisation draws each tensor from its own RNG stream (seed, global tensor index), so a stage's
 * initial parameters do not depend on how the model is split.
 *
 * Microbatches: a stage is created with `max_inflight` activation slots. forward(slot) stores in the slot
 * everything backward(slot) needs, and backward(slot) frees it. Under 1F1B stage s of P holds at most
 * min(M, P − s) microbatches at once (xdc_model_shape_1f1b_inflight), so it is created with that many
 * slots and microbatch mb uses slot mb % slots (xdc_gpt_stage_slot_of): in 1F1B order the slot's previous
 * microbatch, mb − slots, has finished its backward before mb's forward. Backward accumulates parameter gradients (+=) until zero_grad, so gradient accumulation over
 * microbatches is free. Pointers returned by forward/backward are backend memory (host on CPU, device on
 * CUDA).
 *
 * Memory and streams: every arena lives in the backend's device memory (xdc_device_ops.mem_alloc), host
 * staging in its pinned host memory, and every upload, download, copy and zeroing goes through the
 * device table. The stage owns a compute stream (xdc_gpt_stage_stream); each call below makes it the
 * calling thread's current stream while its ops are queued and restores the caller's afterwards.
 * forward, backward and optimizer_step return once their work ran (they synchronize the stream), so
 * pointers they hand out may be read by the next stage's work on any stream; the gradient-ready hook
 * does not synchronize: the listener orders its reads with an event it records on the stage's stream. */
#ifndef XDC_GPT_H
#define XDC_GPT_H

#include "common/xdc_hash.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct xdc_gpt_config {
    int n_layer;     /* L */
    int n_head;      /* NH; n_embd % n_head == 0 */
    int n_embd;      /* C */
    int max_seq_len; /* maxT: rows of the position table */
    int vocab_size;  /* V: 256 for bytes */
} xdc_gpt_config;

typedef struct xdc_adamw_config {
    float beta1, beta2, eps;
    float weight_decay; /* applied to matrices and embeddings, not to biases or layernorm gains */
} xdc_adamw_config;

typedef struct xdc_gpt_stage_config {
    xdc_gpt_config model;
    int layer_begin, layer_end; /* [begin, end) */
    int batch, seq_len;         /* microbatch shape B, T (T <= maxT) */
    int max_inflight;           /* activation slots (>= 1) */
    int grad_buffers;           /* gradient arenas: 2 for xdc_gpt_stage_swap_grads; 0 or 1: one */
    uint64_t seed;              /* parameter init */
    xdc_adamw_config adamw;
} xdc_gpt_stage_config;

typedef struct xdc_gpt_stage xdc_gpt_stage;

/* Checks the shape (diag says what is wrong: XDC_ERR_INVALID), allocates parameters, gradients, moments
 * and activations once on the device of the backend whose model table is `ops` (xdc_kern_backend_get),
 * creates the stage's compute stream, and initialises the parameters. */
xdc_err_t xdc_gpt_stage_create(const xdc_model_ops *ops, const xdc_gpt_stage_config *cfg, xdc_gpt_stage **out,
                               xdc_diag *diag);
void xdc_gpt_stage_destroy(xdc_gpt_stage *s);

/* Activation slots (max_inflight), and the slot of microbatch `mb` in 1F1B order: mb % slots. */
int xdc_gpt_stage_slots(const xdc_gpt_stage *s);
int xdc_gpt_stage_slot_of(const xdc_gpt_stage *s, int mb);
/* Bytes of one slot's arena and of the backward scratch (what xdc_model_shape_slot_bytes and
 * xdc_model_shape_scratch_bytes count). */
size_t xdc_gpt_stage_slot_bytes(const xdc_gpt_stage *s);
size_t xdc_gpt_stage_scratch_bytes(const xdc_gpt_stage *s);
/* The activation high-water mark: the most slots that held a microbatch at once (a forward fills a free
 * slot, its backward frees it; a forward into a slot still held, as validation does, holds it still),
 * and that count times the slot bytes. reset_activation_peak restarts the mark from the slots held now. */
int xdc_gpt_stage_slots_peak(const xdc_gpt_stage *s);
size_t xdc_gpt_stage_activation_bytes(const xdc_gpt_stage *s);
void xdc_gpt_stage_reset_activation_peak(xdc_gpt_stage *s);

bool xdc_gpt_stage_is_first(const xdc_gpt_stage *s);
bool xdc_gpt_stage_is_last(const xdc_gpt_stage *s);
/* Parameters (and gradients) in this stage, in floats. */
size_t xdc_gpt_stage_num_params(const xdc_gpt_stage *s);
/* Flat fp32 arenas (num_params), backend memory: the gradient arena is what data-parallel replicas
 * all-reduce; the parameter arena is what DiLoCo-style outer steps read and write. */
float *xdc_gpt_stage_params(xdc_gpt_stage *s);
float *xdc_gpt_stage_grads(xdc_gpt_stage *s);
/* With grad_buffers 2: make the spare gradient arena the one zero_grad, backward, grad_sumsq and the
 * optimizer use from now on, and return the arena used so far, which the stage does not touch until the
 * next swap makes it current again (delayed averaging: a sync reads and writes it while the next step's
 * backward fills the other). No copy, no allocation. NULL with one arena. */
float *xdc_gpt_stage_swap_grads(xdc_gpt_stage *s);
/* The stage's compute stream (its model ops run there) and the backend that owns its memory. */
xdc_stream *xdc_gpt_stage_stream(const xdc_gpt_stage *s);
const xdc_kern_backend *xdc_gpt_stage_backend(const xdc_gpt_stage *s);
/* Number of parameters of the whole model described by `cfg`. */
size_t xdc_gpt_config_num_params(const xdc_gpt_config *cfg);

/* Forward one microbatch into `slot` (0..max_inflight-1).
 *   first stage: tokens (B,T) host int32 in [0,V); x_in ignored
 *   other stages: x_in (B,T,C) backend memory, copied into the slot
 *   last stage: targets (B,T) host int32; *loss = mean cross-entropy of the microbatch (nats)
 *   other stages: *y_out = output activation (B,T,C) in the slot, valid until the slot's next forward */
xdc_err_t xdc_gpt_stage_forward(xdc_gpt_stage *s, int slot, const int32_t *tokens, const float *x_in,
                                const int32_t *targets, const float **y_out, float *loss);
/* Backward of the microbatch in `slot`; gradients accumulate into the gradient arena.
 *   last stage: dy ignored; loss_scale = d(objective)/d(this microbatch's mean loss), e.g. 1/M
 *   other stages: dy (B,T,C) backend memory = gradient of the output activation; loss_scale ignored
 *   other than first: *dx_out = gradient of the input activation (B,T,C), valid until the next backward */
xdc_err_t xdc_gpt_stage_backward(xdc_gpt_stage *s, int slot, const float *dy, float loss_scale, const float **dx_out);
void xdc_gpt_stage_zero_grad(xdc_gpt_stage *s);

/* Gradient readiness, for overlapping the gradient sync with the last microbatch's backward: armed
 * before a backward, `fn(ctx, from)` is called during that backward each time the gradients of the
 * arena range [from, num_params) are complete (head and final layernorm, then each block from the last,
 * then the embeddings with from = 0). The arming lasts for that one backward call. `fn` runs on the
 * calling thread with the stage's stream current; the kernels that produced the range are queued on it
 * but may not have run: the listener records an event on that stream and waits for it before reading. */
typedef void (*xdc_gpt_grad_ready_fn)(void *ctx, size_t from);
void xdc_gpt_stage_arm_grad_ready(xdc_gpt_stage *s, xdc_gpt_grad_ready_fn fn, void *ctx);

/* *acc += sum of squared gradients of this stage (double; calling stages in order equals the unsplit sum
 * on CPU). */
xdc_err_t xdc_gpt_stage_grad_sumsq(xdc_gpt_stage *s, double *acc);
/* One AdamW step on the stage's own arena and moments; gradients are multiplied by grad_scale first
 * (clipping, 1/replicas). Advances the stage's step counter. */
xdc_err_t xdc_gpt_stage_optimizer_step(xdc_gpt_stage *s, float lr, float grad_scale);
/* The scale that clips a gradient of global squared norm `sumsq` to `max_norm` (1 when within, or when
 * max_norm <= 0). */
float xdc_gpt_clip_scale(double sumsq, float max_norm);

/* Learning rate at 0-based `step`: linear warmup from lr/warmup to lr over `warmup` steps, then cosine
 * decay to lr*min_frac at `total` steps (and flat after). */
typedef struct xdc_lr_schedule {
    float lr, min_frac;
    int warmup, total;
} xdc_lr_schedule;
float xdc_lr_at(const xdc_lr_schedule *sch, int step);

/* Optimizer state for checkpoints, host buffers of num_params floats each; *adam_t = steps taken. */
xdc_err_t xdc_gpt_stage_state_get(xdc_gpt_stage *s, float *params, float *m, float *v, int64_t *adam_t);
xdc_err_t xdc_gpt_stage_state_set(xdc_gpt_stage *s, const float *params, const float *m, const float *v,
                                  int64_t adam_t);
/* The AdamW moments of parameters [lo, hi) (arena order) into / from host buffers of hi - lo floats each, and
 * the optimizer steps taken: the inner optimizer state a rejoining region takes from the members, a slice from
 * each (orchestrator/worker/orch_rejoin.c). set takes adam_t as the stage's step count. */
xdc_err_t xdc_gpt_stage_moments_get(xdc_gpt_stage *s, size_t lo, size_t hi, float *m, float *v, int64_t *adam_t);
xdc_err_t xdc_gpt_stage_moments_set(xdc_gpt_stage *s, size_t lo, size_t hi, const float *m, const float *v,
                                    int64_t adam_t);
/* Stream this stage's parameter arena into `h` (see the arena order above). */
xdc_err_t xdc_gpt_stage_hash_update(xdc_gpt_stage *s, xdc_hash_state *h);
/* params_xxh64 over stages[0..n) in order. */
xdc_err_t xdc_gpt_params_xxh64(xdc_gpt_stage *const *stages, int n, uint64_t *out);

/* The compute probe: the median of `passes` (1..16) timings of one training step of the whole model `cfg` (forward +
 * backward on a microbatch of batch x seq_len random tokens, the gradient norm and the AdamW step) on the backend
 * whose model table is `ops` (its current thread count), after one untimed step; *seconds per step. The planner
 * turns it into FLOP/s of the passes (xdc_plan_probe_flops), so the optimizer's time is priced with them. */
xdc_err_t xdc_gpt_probe(const xdc_model_ops *ops, const xdc_gpt_config *cfg, int batch, int seq_len, int passes,
                        double *seconds, xdc_diag *diag);

#endif /* XDC_GPT_H */
