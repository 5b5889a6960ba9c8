/* gpt_optim.c — the optimizer side of a GPT stage: gradient norm, clipping scale, AdamW over the stage's
 * own arena (weight decay on matrices and embeddings only) and the warmup + cosine learning-rate schedule. */
#include "model/gpt_priv.h"

#include <math.h>

xdc_err_t xdc_gpt_stage_grad_sumsq(xdc_gpt_stage *s, double *acc)
{
    xdc_stream *prev = gpt_enter(s);
    xdc_err_t rc = s->ops->sumsq(s->grad_arena, s->num_params, acc); /* synchronous */
    gpt_leave(s, prev);
    return rc;
}

float xdc_gpt_clip_scale(double sumsq, float max_norm)
{
    double norm = sqrt(sumsq);
    if (max_norm <= 0.0f || !(norm > max_norm)) return 1.0f;
    return (float)(max_norm / norm);
}

xdc_err_t xdc_gpt_stage_optimizer_step(xdc_gpt_stage *s, float lr, float grad_scale)
{
    const xdc_adamw_config *a = &s->cfg.adamw;
    xdc_stream *prev = gpt_enter(s);
    s->adam_t++;
    for (int i = 0; i < s->n_tensors; i++) {
        const gpt_tensor *t = &s->tensors[i];
        s->ops->adamw(s->param_arena + t->offset, s->grad_arena + t->offset, s->m_arena + t->offset,
                      s->v_arena + t->offset, t->count, lr, a->beta1, a->beta2, a->eps,
                      t->decay ? a->weight_decay : 0.0f, grad_scale, (int)s->adam_t);
    }
    xdc_err_t rc = s->dev->stream_sync(NULL);
    gpt_leave(s, prev);
    return rc;
}

float xdc_lr_at(const xdc_lr_schedule *sch, int step)
{
    if (step < sch->warmup) return sch->lr * (float)(step + 1) / (float)sch->warmup;
    float min_lr = sch->lr * sch->min_frac;
    if (step >= sch->total || sch->total <= sch->warmup) return min_lr;
    double progress = (double)(step - sch->warmup) / (double)(sch->total - sch->warmup);
    return min_lr + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (sch->lr - min_lr);
}
