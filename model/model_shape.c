/* model_shape.c — the GPT's parameter, FLOP and activation counts (xdc_model_shape.h), following the
 * arena layout of model/gpt_stage.c. */
#include "model/xdc_model_shape.h"

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
    /* Kept for backward per token per layer (fp32): ln1, qkv, attention output, projection, residual,
     * ln2, fc, gelu, fc projection, residual (~18C) plus the pre-softmax and softmax rows (2 NH T). */
    out->act_bytes_per_token = 4.0 * (18 * C + 2.0 * heads * T);
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
