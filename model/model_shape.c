/* model_shape.c — the GPT's parameter, FLOP and activation counts (xdc_model_shape.h), following the
 * arena layout of model/gpt_stage.c. */
#include "model/xdc_model_shape.h"

#include <math.h>
#include <string.h>

void xdc_model_shape_gpt(int layers, int heads, int width, int context, int vocab, xdc_model_shape *out)
{
    double C = width, V = vocab, T = context;
    memset(out, 0, sizeof *out);
    out->layers = layers;
    out->width = width;
    out->heads = heads;
    out->vocab = vocab;
    out->context = context;
    /* The arena of model/xdc_gpt.h: wte (V,C) + wpe (maxT,C); per layer ln1 2C, qkv 3C^2 + 3C, attention
     * projection C^2 + C, ln2 2C, fc 4C^2 + 4C, fc projection 4C^2 + C = 12C^2 + 13C; lnf 2C + untied
     * head (V,C). */
    out->embed_params = V * C + T * C;
    out->layer_params = 12 * C * C + 13 * C;
    out->head_params = 2 * C + V * C;
    out->params = out->embed_params + layers * out->layer_params + out->head_params;
    out->boundary_bytes_per_token = 4.0 * C;
    out->bytes_per_param = 4;        /* fp32 master weights */
    out->optim_bytes_per_param = 12; /* fp32 gradient + AdamW m and v */
}

void xdc_model_shape_of(const xdc_gpt_config *cfg, xdc_model_shape *out)
{
    xdc_model_shape_gpt(cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->max_seq_len, cfg->vocab_size, out);
}

/* Declared in xdc_gpt.h; counted here so that the model and the planner share one formula. */
size_t xdc_gpt_config_num_params(const xdc_gpt_config *cfg)
{
    xdc_model_shape m;
    xdc_model_shape_of(cfg, &m);
    return (size_t)m.params;
}

double xdc_model_shape_stage_params(const xdc_model_shape *m, int lb, int le)
{
    return (le - lb) * m->layer_params + (lb == 0 ? m->embed_params : 0) + (le == m->layers ? m->head_params : 0);
}

double xdc_model_shape_fwd_flops_per_token(const xdc_model_shape *m, int lb, int le, int seq_len)
{
    double per_layer = 2 * m->layer_params + 2.0 * seq_len * m->width;
    return (le - lb) * per_layer + (le == m->layers ? 2.0 * m->vocab * m->width : 0);
}

/* One tensor of `bytes` in a stage arena: model/gpt_stage.c rounds every tensor up to 64 bytes. */
static double arena_piece(double bytes) { return ceil(bytes / 64) * 64; }

double xdc_model_shape_slot_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len)
{
    double B = batch, T = seq_len, N = B * T, C = m->width, V = m->vocab, NH = m->heads, f = 4;
    double nc = arena_piece(N * C * f), n = arena_piece(N * f);
    /* ln1, atty, res2, ln2, res3 (N C); qkv (3 N C); fch, fch_gelu (4 N C); two means and rstds; att */
    double layer = 5 * nc + arena_piece(3 * N * C * f) + 2 * arena_piece(4 * N * C * f) + 4 * n +
                   arena_piece(B * NH * T * T * f);
    double bytes = nc + (le - lb) * layer;    /* x_in and the blocks */
    if (lb == 0) bytes += arena_piece(N * 4); /* tokens */
    /* targets, lnf, lnf_mean, lnf_rstd, losses, probs */
    if (le == m->layers) bytes += arena_piece(N * 4) + nc + 3 * n + arena_piece(N * V * f);
    return bytes;
}

double xdc_model_shape_scratch_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len)
{
    (void)lb;
    double B = batch, T = seq_len, N = B * T, C = m->width, V = m->vocab, NH = m->heads, f = 4;
    double nc = arena_piece(N * C * f);
    /* proj, dres, dln, datty; dqkv; datt; dfch, dfch_gelu; logits on the last stage */
    double bytes = 4 * nc + arena_piece(3 * N * C * f) + arena_piece(B * NH * T * T * f) +
                   2 * arena_piece(4 * N * C * f);
    if (le == m->layers) bytes += arena_piece(N * V * f);
    return bytes;
}

double xdc_model_shape_boundary_bytes(const xdc_model_shape *m, int lb, int le, int batch, int seq_len)
{
    double one = (double)batch * seq_len * m->boundary_bytes_per_token; /* (B*T*C) fp32 */
    return ((lb > 0 ? 2 : 0) + (le < m->layers ? 1 : 0)) * one;         /* x_in and dx_out; dy_in */
}

int xdc_model_shape_1f1b_inflight(int stages, int stage, int microbatches)
{
    int k = stages - stage;
    return k < microbatches ? k : microbatches;
}

void xdc_model_shape_interleaved_op(int stages, int chunks, int k, int forward, int *chunk, int *microbatch)
{
    int group = stages * chunks, in_group = ((k % group) + group) % group;
    *chunk = forward ? in_group / stages : chunks - 1 - in_group / stages;
    *microbatch = (k - in_group) / group * stages + in_group % stages;
}

int xdc_model_shape_interleaved_warmup(int stages, int stage, int chunks, int microbatches)
{
    int total = microbatches * chunks, warm = (stages - stage - 1) * 2 + (chunks - 1) * stages;
    return microbatches == stages || warm > total ? total : warm;
}

/* The chunk of forward or backward number k. */
static int chunk_of(int stages, int chunks, int k, int forward)
{
    int c, mb;
    xdc_model_shape_interleaved_op(stages, chunks, k, forward, &c, &mb);
    return c;
}

int xdc_model_shape_interleaved_steps(int stages, int stage, int chunks, int microbatches)
{
    int total = microbatches * chunks, warm = xdc_model_shape_interleaved_warmup(stages, stage, chunks, microbatches);
    return 1 + total + warm + (warm == total); /* the first receive, warm-up + steady, the cool-down */
}

void xdc_model_shape_interleaved_step(int stages, int stage, int chunks, int microbatches, int step,
                                      xdc_ileave_step *out)
{
    int P = stages, v = chunks, total = microbatches * chunks;
    int warm = xdc_model_shape_interleaved_warmup(stages, stage, chunks, microbatches), rest = total - warm;
    bool first = stage == 0, last = stage == P - 1;
    *out = (xdc_ileave_step){.forward = -1, .backward = -1};
    if (step == 0) {
        out->recv_x = !first; /* chunk 0's input of the first microbatch */
        return;
    }
    int k = step - 1;
    if (k < warm) {
        out->forward = k;
        out->recv_x = !(first && chunk_of(P, v, k + 1, 1) == 0) && k != total - 1;
        out->recv_dy = k == warm - 1 && rest > 0 && !last;
        return;
    }
    if ((k -= warm) < rest) {
        /* The first stage runs P − 1 forwards ahead of the last: its next input is the one that stage sends
         * now, for a later chunk (and the last stage's next gradient likewise). */
        out->forward = warm + k;
        out->backward = k;
        out->recv_x = (!first || chunk_of(P, v, warm + k - (P - 1), 1) != v - 1) && k != rest - 1;
        out->recv_dy = !last || chunk_of(P, v, k - (P - 1), 0) != 0;
        return;
    }
    k -= rest;
    if (rest == 0 && k-- == 0) {
        out->recv_dy = !last; /* all warm-up (M = P): the first gradient */
        return;
    }
    out->backward = rest + k;
    out->recv_dy = !(last && chunk_of(P, v, rest + k + 1, 0) == v - 1) && rest + k != total - 1;
}

int xdc_model_shape_interleaved_inflight(int stages, int stage, int chunks, int microbatches, int chunk)
{
    if (chunks == 1) return xdc_model_shape_1f1b_inflight(stages, stage, microbatches);
    /* Walk the steps: each forward of the chunk adds a microbatch, each backward frees one. */
    int held = 0, peak = 0, n = xdc_model_shape_interleaved_steps(stages, stage, chunks, microbatches), c, mb;
    for (int i = 0; i < n; i++) {
        xdc_ileave_step st;
        xdc_model_shape_interleaved_step(stages, stage, chunks, microbatches, i, &st);
        if (st.forward >= 0) {
            xdc_model_shape_interleaved_op(stages, chunks, st.forward, 1, &c, &mb);
            if (c == chunk && ++held > peak) peak = held;
        }
        if (st.backward >= 0) {
            xdc_model_shape_interleaved_op(stages, chunks, st.backward, 0, &c, &mb);
            held -= c == chunk;
        }
    }
    return peak;
}
