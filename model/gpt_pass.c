/* gpt_pass.c — forward and backward of a GPT pipeline stage over one microbatch slot, written once
 * against the backend table (xdc_model_ops.h) so CPU and CUDA run the same sequence of ops. */
#include "model/gpt_priv.h"

static xdc_err_t check_slot(const xdc_gpt_stage *s, int slot)
{
    return slot >= 0 && slot < s->cfg.max_inflight ? XDC_OK : XDC_ERR_INVALID;
}

/* Zero device memory on the current (the stage's) stream; a failed enqueue is sticky on the stream on every
 * device (xdc_device.h) and comes back from the next stream_error / stream_sync of the pass. */
static void zero(const xdc_gpt_stage *s, void *p, size_t bytes) { (void)s->dev->memset(p, 0, bytes, NULL); }

/* One block: x (N,C) -> a->res3 (N,C). */
static void block_forward(const xdc_gpt_stage *s, const gpt_layer_params *p, gpt_layer_acts *a, const float *x)
{
    const xdc_model_ops *o = s->ops;
    int B = s->cfg.batch, T = s->cfg.seq_len, N = B * T, C = s->cfg.model.n_embd, NH = s->cfg.model.n_head;
    size_t NC = (size_t)N * C;
    float *proj = s->scratch.proj;
    o->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    o->matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    o->attention_forward(a->atty, a->att, a->qkv, B, T, C, NH);
    o->matmul_forward(proj, a->atty, p->attprojw, p->attprojb, N, C, C);
    o->residual_forward(a->res2, x, proj, NC);
    o->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
    o->matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    o->gelu_forward(a->fch_gelu, a->fch, NC * 4);
    o->matmul_forward(proj, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C);
    o->residual_forward(a->res3, a->res2, proj, NC);
}

/* On entry scratch.dres holds d(res3); on exit d(x). The residual adds need no op: every backward op
 * accumulates into dres, which already carries the skip path's gradient. */
static void block_backward(const xdc_gpt_stage *s, const gpt_layer_params *p, gpt_layer_params *g,
                           const gpt_layer_acts *a, const float *x)
{
    const xdc_model_ops *o = s->ops;
    const gpt_scratch *sc = &s->scratch;
    int B = s->cfg.batch, T = s->cfg.seq_len, N = B * T, C = s->cfg.model.n_embd, NH = s->cfg.model.n_head;
    size_t NC = (size_t)N * C, f = sizeof(float);
    zero(s, sc->dfch_gelu, NC * 4 * f);
    o->matmul_backward(sc->dfch_gelu, g->fcprojw, g->fcprojb, sc->dres, a->fch_gelu, p->fcprojw, N, 4 * C, C);
    zero(s, sc->dfch, NC * 4 * f);
    o->gelu_backward(sc->dfch, a->fch, sc->dfch_gelu, NC * 4);
    zero(s, sc->dln, NC * f);
    o->matmul_backward(sc->dln, g->fcw, g->fcb, sc->dfch, a->ln2, p->fcw, N, C, 4 * C);
    o->layernorm_backward(sc->dres, g->ln2w, g->ln2b, sc->dln, a->res2, p->ln2w, a->ln2_mean, a->ln2_rstd, N, C);
    zero(s, sc->datty, NC * f);
    o->matmul_backward(sc->datty, g->attprojw, g->attprojb, sc->dres, a->atty, p->attprojw, N, C, C);
    zero(s, sc->dqkv, NC * 3 * f);
    o->attention_backward(sc->dqkv, sc->datt, sc->datty, a->qkv, a->att, B, T, C, NH);
    zero(s, sc->dln, NC * f);
    o->matmul_backward(sc->dln, g->qkvw, g->qkvb, sc->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
    o->layernorm_backward(sc->dres, g->ln1w, g->ln1b, sc->dln, x, p->ln1w, a->ln1_mean, a->ln1_rstd, N, C);
}

static const float *block_input(const gpt_slot *sl, int l) { return l == 0 ? sl->x_in : sl->layers[l - 1].res3; }

static xdc_err_t forward(xdc_gpt_stage *s, int slot, const int32_t *tokens, const float *x_in, const int32_t *targets,
                         const float **y_out, float *loss)
{
    const xdc_model_ops *o = s->ops;
    const xdc_device_ops *dev = s->dev;
    gpt_slot *sl = &s->slots[slot];
    int B = s->cfg.batch, T = s->cfg.seq_len, N = B * T, C = s->cfg.model.n_embd, V = s->cfg.model.vocab_size;
    if (s->first) {
        XDC_REQUIRE(tokens != NULL, XDC_ERR_INVALID);
        for (int i = 0; i < N; i++) XDC_REQUIRE(tokens[i] >= 0 && tokens[i] < V, XDC_ERR_RANGE);
        XDC_CHECK(dev->copy_h2d(sl->tokens, tokens, (size_t)N * sizeof(int32_t), NULL));
        o->encoder_forward(sl->x_in, sl->tokens, s->params.wte, s->params.wpe, B, T, C);
    } else {
        XDC_REQUIRE(x_in != NULL, XDC_ERR_INVALID);
        XDC_CHECK(dev->copy_d2d(sl->x_in, x_in, (size_t)N * C * sizeof(float), NULL));
    }
    for (int l = 0; l < s->nl; l++) block_forward(s, &s->params.layers[l], &sl->layers[l], block_input(sl, l));
    const float *y = block_input(sl, s->nl);
    if (s->last) {
        XDC_REQUIRE(targets != NULL && loss != NULL, XDC_ERR_INVALID);
        for (int i = 0; i < N; i++) XDC_REQUIRE(targets[i] >= 0 && targets[i] < V, XDC_ERR_RANGE);
        XDC_CHECK(dev->copy_h2d(sl->targets, targets, (size_t)N * sizeof(int32_t), NULL));
        o->layernorm_forward(sl->lnf, sl->lnf_mean, sl->lnf_rstd, y, s->params.lnfw, s->params.lnfb, N, C);
        o->matmul_forward(s->scratch.logits, sl->lnf, s->params.lm_head, NULL, N, C, V);
        o->crossentropy_forward(sl->losses, sl->probs, s->scratch.logits, sl->targets, N, V);
        /* the mean in a fixed order on the host, so it does not depend on the backend's reduction */
        float *h = s->host_stage; /* (num_params) pinned host staging, used in chunks */
        int chunk = s->num_params < 4096 ? (int)s->num_params : 4096;
        double sum = 0.0;
        for (int i0 = 0; i0 < N; i0 += chunk) {
            int n = N - i0 < chunk ? N - i0 : chunk;
            XDC_CHECK(dev->copy_d2h(h, sl->losses + i0, (size_t)n * sizeof(float), NULL));
            XDC_CHECK(dev->stream_sync(NULL));
            for (int i = 0; i < n; i++) sum += h[i];
        }
        *loss = (float)(sum / N);
    } else if (y_out) {
        *y_out = y;
    }
    if (!sl->forwarded && ++s->slots_in_use > s->slots_peak) s->slots_peak = s->slots_in_use;
    sl->forwarded = true;
    return XDC_OK;
}

xdc_err_t xdc_gpt_stage_forward(xdc_gpt_stage *s, int slot, const int32_t *tokens, const float *x_in,
                                const int32_t *targets, const float **y_out, float *loss)
{
    XDC_CHECK(check_slot(s, slot));
    xdc_stream *prev = gpt_enter(s);
    xdc_err_t rc = forward(s, slot, tokens, x_in, targets, y_out, loss);
    /* tokens and targets are the caller's host memory: their copies must have run when this returns */
    xdc_err_t rc2 = s->dev->stream_sync(NULL);
    gpt_leave(s, prev);
    return rc != XDC_OK ? rc : rc2;
}

void xdc_gpt_stage_arm_grad_ready(xdc_gpt_stage *s, xdc_gpt_grad_ready_fn fn, void *ctx)
{
    s->ready_fn = fn;
    s->ready_ctx = ctx;
}

/* Tell an armed listener that gradients from `first` (a tensor of the gradient arena) onwards are final.
 * The kernels that produce them are queued on the stage's stream, which is current during the call: the
 * listener records its event there (xdc_sync_mark_ready), and whoever reads the gradients waits for that
 * event. The host does not wait for the kernels here. */
static xdc_err_t grads_ready_from(xdc_gpt_stage *s, const float *first)
{
    if (!s->ready_fn) return XDC_OK;
    XDC_CHECK(s->dev->stream_error(NULL, NULL));
    s->ready_fn(s->ready_ctx, (size_t)(first - s->grad_arena));
    /* The listener's event record is queued on this stream and a failed one is sticky here (and fails the
     * listener's round): backward stops at once instead of computing gradients nobody may read. */
    return s->dev->stream_error(NULL, NULL);
}

static xdc_err_t backward(xdc_gpt_stage *s, gpt_slot *sl, const float *dy, float loss_scale, const float **dx_out)
{
    const xdc_model_ops *o = s->ops;
    const gpt_scratch *sc = &s->scratch;
    int B = s->cfg.batch, T = s->cfg.seq_len, N = B * T, C = s->cfg.model.n_embd, V = s->cfg.model.vocab_size;
    size_t NC = (size_t)N * C, f = sizeof(float);
    if (s->last) {
        zero(s, sc->logits, (size_t)N * V * f);
        o->crossentropy_backward(sc->logits, sl->probs, sl->targets, loss_scale / (float)N, N, V);
        zero(s, sc->dln, NC * f);
        o->matmul_backward(sc->dln, s->grads.lm_head, NULL, sc->logits, sl->lnf, s->params.lm_head, N, C, V);
        zero(s, sc->dres, NC * f);
        o->layernorm_backward(sc->dres, s->grads.lnfw, s->grads.lnfb, sc->dln, block_input(sl, s->nl), s->params.lnfw,
                              sl->lnf_mean, sl->lnf_rstd, N, C);
        XDC_CHECK(grads_ready_from(s, s->grads.lnfw));
    } else {
        XDC_REQUIRE(dy != NULL, XDC_ERR_INVALID);
        XDC_CHECK(s->dev->copy_d2d(sc->dres, dy, NC * f, NULL));
    }
    for (int l = s->nl - 1; l >= 0; l--) {
        block_backward(s, &s->params.layers[l], &s->grads.layers[l], &sl->layers[l], block_input(sl, l));
        XDC_CHECK(grads_ready_from(s, s->grads.layers[l].ln1w));
    }
    if (s->first) {
        o->encoder_backward(s->grads.wte, s->grads.wpe, sc->dres, sl->tokens, B, T, C);
        XDC_CHECK(grads_ready_from(s, s->grad_arena));
    } else if (dx_out) {
        *dx_out = sc->dres;
    }
    sl->forwarded = false; /* the slot is free for the next microbatch */
    s->slots_in_use--;
    return XDC_OK;
}

xdc_err_t xdc_gpt_stage_backward(xdc_gpt_stage *s, int slot, const float *dy, float loss_scale, const float **dx_out)
{
    XDC_CHECK(check_slot(s, slot));
    gpt_slot *sl = &s->slots[slot];
    XDC_REQUIRE(sl->forwarded, XDC_ERR_INVALID);
    xdc_stream *prev = gpt_enter(s);
    xdc_err_t rc = backward(s, sl, dy, loss_scale, dx_out);
    s->ready_fn = NULL; /* armed for one backward */
    xdc_err_t rc2 = s->dev->stream_sync(NULL);
    gpt_leave(s, prev);
    return rc != XDC_OK ? rc : rc2;
}
