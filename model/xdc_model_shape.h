/* xdc_model_shape.h — the GPT's shape as numbers, written down once: parameters of the embedding tables,
 * of one block and of the final norm + LM head (so of any stage), forward FLOPs per token, the bytes of
 * one microbatch's activation slot and of the backward scratch, boundary bytes per token and of a stage's
 * pipeline boundary buffers, and 1F1B's bound on the microbatches a stage holds at once. The model counts
 * its own parameters with it (xdc_gpt_config_num_params) and the planner and simulator (scheduler/) price
 * stages with it; tests/model/test_model.c and tests/scheduler/test_plan.c tie both to the parameter arenas real stages
 * allocate (model/gpt_stage.c). */
#ifndef XDC_MODEL_SHAPE_H
#define XDC_MODEL_SHAPE_H

#include "model/xdc_gpt.h"

/* Counts are doubles so that models beyond 2^32 parameters (the planner prices 175B ones) stay exact:
 * every count is an integer below 2^53. */
typedef struct xdc_model_shape {
    int layers, width, heads, vocab, context;
    double params;                   /* whole model, count */
    double embed_params;             /* on the first stage (token + position tables), count */
    double layer_params;             /* one block, count */
    double head_params;              /* on the last stage (final norm + LM head), count */
    double boundary_bytes_per_token; /* activation crossing a stage boundary, per token, bytes (fp32) */
    double bytes_per_param;          /* weights, bytes */
    double optim_bytes_per_param;    /* gradient + optimizer state, bytes */
} xdc_model_shape;

/* The shape of the project's GPT (model/xdc_gpt.h: untied head, 4C MLP, fp32 weights, AdamW). */
void xdc_model_shape_gpt(int layers, int heads, int width, int context, int vocab, xdc_model_shape *out);
void xdc_model_shape_of(const xdc_gpt_config *cfg, xdc_model_shape *out);

/* Parameters of the stage holding layers [lb, le): its blocks, plus the embeddings when lb == 0 and the
 * final norm and head when le == layers — what xdc_gpt_stage_num_params reports for that stage. */
double xdc_model_shape_stage_params(const xdc_model_shape *m, int lb, int le);
/* Forward FLOPs per token of layers [lb, le) at `seq_len` tokens per sequence: 2 per matrix weight, plus
 * causal attention scores and mixing (2 T C per layer on average), plus the LM head (2 V C) when
 * le == layers. Backward costs twice the forward. */
double xdc_model_shape_fwd_flops_per_token(const xdc_model_shape *m, int lb, int le, int seq_len);

/* Bytes of one activation slot of the stage [lb, le) — everything forward keeps for backward, for one
 * microbatch of `batch` sequences of `seq_len` tokens (N = batch·seq_len): per block ln1, qkv, attention
 * output, residual, ln2, fc, gelu, block output (16 N C floats), two layernorm means and rstds (4 N) and
 * the softmax rows (batch·NH·seq_len²); the stage input (N C); tokens (N int32) on the first stage;
 * targets (N int32), final layernorm (N C + 2 N), probabilities (N V) and losses (N) on the last. Each
 * tensor is rounded up to 64 bytes, as model/gpt_stage.c lays them out: this is exactly the size of one
 * slot of a real stage (xdc_gpt_stage_slot_bytes; tests/model/test_model.c checks both agree). */
double xdc_model_shape_slot_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len);
/* Bytes of the stage's backward scratch, one per stage whatever the slots (xdc_gpt_stage_scratch_bytes):
 * projection output, residual and layernorm gradients, attention (N C, N C, N C, N C, 3 N C, batch·NH·
 * seq_len²), the MLP's two gradients (2 · 4 N C), and the logits (N V) on the last stage. */
double xdc_model_shape_scratch_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len);
/* Bytes of the pipeline boundary buffers a runtime stage of layers [lb, le) keeps on the device
 * (orchestrator/worker/orch_worker.c): one microbatch (batch·seq_len·width fp32) each of the received input
 * and the sent input gradient when lb > 0, and of the received output gradient when le < layers. 1F1B
 * never has two microbatches in one of them (docs/runtime.md derives it), so the figure does not grow with
 * the microbatch count. */
double xdc_model_shape_boundary_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len);
/* 1F1B's memory bound: stage `stage` (0-based) of a `stages`-stage pipeline running `microbatches` per
 * step holds at most min(M, P − s) microbatches' activations at once — the warm-up forwards P − s − 1
 * plus the one in the steady phase's forward, each freed by its backward. The runtime creates a stage with
 * this many slots (orchestrator/worker/orch_worker.c) and the planner prices it (scheduler/). */
int xdc_model_shape_1f1b_inflight(int stages, int stage, int microbatches);
/* Megatron-LM's interleaved 1F1B (Narayanan et al. 2021), `chunks` (v) model chunks per stage: stage s
 * holds chunks s, s + P, ..., s + (v − 1)·P of the P·v-way layer split, and runs the M·v microbatch-chunks of
 * a step in this order (M a multiple of P). Forward number k (0-based) is of local chunk (k mod P·v) / P and
 * microbatch (k / (P·v))·P + k mod P; backward number k runs the chunks the other way round (chunk v − 1 −
 * that). k may be negative (Megatron's look-back at the pipeline's ends): taken modulo P·v. */
void xdc_model_shape_interleaved_op(int stages, int chunks, int k, int forward, int *chunk, int *microbatch);
/* Forwards before the first backward: (P − s − 1)·2 + (v − 1)·P, all M·v when M == P, at most M·v. */
int xdc_model_shape_interleaved_warmup(int stages, int stage, int chunks, int microbatches);
/* Stage s's schedule as steps, Megatron's forward_backward_pipelining_with_interleaving: a step runs forward
 * number `forward` and then backward number `backward` (-1: none), and ends with one group of transfers —
 * the forward's output to the next stage unless it is the model's last chunk, the backward's input gradient
 * to the previous unless it is the first, a receive of an input from the previous stage (recv_x) and of a
 * gradient from the next (recv_dy) for later steps. Step 0 only receives the first input; then the warm-up's
 * forwards, one forward and one backward per step, the remaining backwards. */
typedef struct xdc_ileave_step {
    int forward, backward;
    int recv_x, recv_dy;
} xdc_ileave_step;
int xdc_model_shape_interleaved_steps(int stages, int stage, int chunks, int microbatches);
void xdc_model_shape_interleaved_step(int stages, int stage, int chunks, int microbatches, int step,
                                      xdc_ileave_step *out);
/* The most microbatches local chunk `chunk` holds at once in that order (each chunk's slots, as
 * xdc_model_shape_1f1b_inflight is for one chunk; chunks == 1 gives exactly it). */
int xdc_model_shape_interleaved_inflight(int stages, int stage, int chunks, int microbatches, int chunk);

#endif /* XDC_MODEL_SHAPE_H */
