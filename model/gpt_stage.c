/* gpt_stage.c — a GPT pipeline stage's memory: the arena layout (documented in xdc_gpt.h), typed views,
 * split-independent initialisation, optimizer state transfer and the parameter hash. Forward and backward
 * are in gpt_pass.c, AdamW and the schedule in gpt_optim.c. */
#include "model/gpt_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"

#include <math.h>
#include <string.h>

/* Hands out consecutive pieces of an arena, each rounded up to 64 bytes (so every piece starts 64-byte
 * aligned and an arena is the sum of its rounded pieces: xdc_model_shape_slot_bytes counts the same way);
 * with base == NULL it only measures. */
typedef struct bump {
    char *base;
    size_t off; /* bytes */
} bump;

static void *bump_take(bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->off : NULL;
    b->off += (bytes + 63) & ~(size_t)63;
    return p;
}

/* Walks the parameter list in arena order; records tensor descriptors when `tensors` is set. */
typedef struct param_walk {
    float *base;
    size_t off; /* floats */
    gpt_tensor *tensors;
    int n;
} param_walk;

static float *take(param_walk *w, size_t count, int global_index, float std, float value, bool decay)
{
    if (w->tensors) w->tensors[w->n] = (gpt_tensor){w->off, count, global_index, std, value, decay};
    w->n++;
    float *p = w->base ? w->base + w->off : NULL;
    w->off += count;
    return p;
}

static void walk_params(const xdc_gpt_stage_config *cfg, param_walk *w, gpt_params *p)
{
    const xdc_gpt_config *m = &cfg->model;
    size_t C = (size_t)m->n_embd, V = (size_t)m->vocab_size, L = (size_t)m->n_layer;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    int head_index = 2 + (int)L * GPT_LAYER_TENSORS;
    gpt_params dummy = {0};
    if (!p) p = &dummy;
    if (cfg->layer_begin == 0) {
        p->wte = take(w, V * C, 0, std, 0.0f, true);
        p->wpe = take(w, (size_t)m->max_seq_len * C, 1, 0.01f, 0.0f, true);
    }
    for (int l = cfg->layer_begin; l < cfg->layer_end; l++) {
        gpt_layer_params lp;
        int g = 2 + l * GPT_LAYER_TENSORS;
        lp.ln1w = take(w, C, g + 0, 0.0f, 1.0f, false);
        lp.ln1b = take(w, C, g + 1, 0.0f, 0.0f, false);
        lp.qkvw = take(w, 3 * C * C, g + 2, std, 0.0f, true);
        lp.qkvb = take(w, 3 * C, g + 3, 0.0f, 0.0f, false);
        lp.attprojw = take(w, C * C, g + 4, proj_std, 0.0f, true);
        lp.attprojb = take(w, C, g + 5, 0.0f, 0.0f, false);
        lp.ln2w = take(w, C, g + 6, 0.0f, 1.0f, false);
        lp.ln2b = take(w, C, g + 7, 0.0f, 0.0f, false);
        lp.fcw = take(w, 4 * C * C, g + 8, std, 0.0f, true);
        lp.fcb = take(w, 4 * C, g + 9, 0.0f, 0.0f, false);
        lp.fcprojw = take(w, 4 * C * C, g + 10, proj_std, 0.0f, true);
        lp.fcprojb = take(w, C, g + 11, 0.0f, 0.0f, false);
        if (p->layers) p->layers[l - cfg->layer_begin] = lp;
    }
    if (cfg->layer_end == m->n_layer) {
        p->lnfw = take(w, C, head_index + 0, 0.0f, 1.0f, false);
        p->lnfb = take(w, C, head_index + 1, 0.0f, 0.0f, false);
        p->lm_head = take(w, V * C, head_index + 2, std, 0.0f, true);
    }
}

static void layout_slot(const xdc_gpt_stage *s, bump *b, gpt_slot *sl)
{
    const xdc_gpt_config *m = &s->cfg.model;
    size_t B = (size_t)s->cfg.batch, T = (size_t)s->cfg.seq_len, N = B * T, C = (size_t)m->n_embd;
    size_t V = (size_t)m->vocab_size, NH = (size_t)m->n_head, f = sizeof(float);
    sl->tokens = s->first ? bump_take(b, N * sizeof(int32_t)) : NULL;
    sl->targets = s->last ? bump_take(b, N * sizeof(int32_t)) : NULL;
    sl->x_in = bump_take(b, N * C * f);
    for (int l = 0; l < s->nl; l++) {
        gpt_layer_acts a;
        a.ln1 = bump_take(b, N * C * f);
        a.ln1_mean = bump_take(b, N * f);
        a.ln1_rstd = bump_take(b, N * f);
        a.qkv = bump_take(b, N * 3 * C * f);
        a.atty = bump_take(b, N * C * f);
        a.att = bump_take(b, B * NH * T * T * f);
        a.res2 = bump_take(b, N * C * f);
        a.ln2 = bump_take(b, N * C * f);
        a.ln2_mean = bump_take(b, N * f);
        a.ln2_rstd = bump_take(b, N * f);
        a.fch = bump_take(b, N * 4 * C * f);
        a.fch_gelu = bump_take(b, N * 4 * C * f);
        a.res3 = bump_take(b, N * C * f);
        if (sl->layers) sl->layers[l] = a;
    }
    if (s->last) {
        sl->lnf = bump_take(b, N * C * f);
        sl->lnf_mean = bump_take(b, N * f);
        sl->lnf_rstd = bump_take(b, N * f);
        sl->probs = bump_take(b, N * V * f);
        sl->losses = bump_take(b, N * f);
    }
}

static void layout_scratch(const xdc_gpt_stage *s, bump *b, gpt_scratch *sc)
{
    const xdc_gpt_config *m = &s->cfg.model;
    size_t B = (size_t)s->cfg.batch, T = (size_t)s->cfg.seq_len, N = B * T, C = (size_t)m->n_embd;
    size_t V = (size_t)m->vocab_size, NH = (size_t)m->n_head, f = sizeof(float);
    sc->proj = bump_take(b, N * C * f);
    sc->logits = s->last ? bump_take(b, N * V * f) : NULL;
    sc->dres = bump_take(b, N * C * f);
    sc->dln = bump_take(b, N * C * f);
    sc->datty = bump_take(b, N * C * f);
    sc->dqkv = bump_take(b, N * 3 * C * f);
    sc->datt = bump_take(b, B * NH * T * T * f);
    sc->dfch = bump_take(b, N * 4 * C * f);
    sc->dfch_gelu = bump_take(b, N * 4 * C * f);
}

static xdc_err_t check_config(const xdc_gpt_stage_config *c, xdc_diag *diag)
{
    const xdc_gpt_config *m = &c->model;
    const char *why = NULL;
    if (m->n_layer < 1 || m->n_head < 1 || m->n_embd < 1 || m->vocab_size < 2 || m->max_seq_len < 1)
        why = "n_layer, n_head, n_embd, max_seq_len must be >= 1 and vocab_size >= 2";
    else if (m->n_embd % m->n_head != 0) why = "n_embd must be a multiple of n_head";
    else if (c->layer_begin < 0 || c->layer_end > m->n_layer || c->layer_begin >= c->layer_end)
        why = "layer range must be a non-empty part of [0, n_layer)";
    else if (c->batch < 1 || c->seq_len < 1 || c->seq_len > m->max_seq_len)
        why = "batch must be >= 1 and seq_len within [1, max_seq_len]";
    else if (c->max_inflight < 1) why = "max_inflight must be >= 1";
    else if (c->grad_buffers < 0 || c->grad_buffers > 2) why = "grad_buffers must be 0, 1 or 2";
    if (!why) return XDC_OK;
    xdc_diag_set(diag, "gpt stage: %s (L=%d NH=%d C=%d maxT=%d V=%d layers [%d,%d) B=%d T=%d inflight=%d)", why,
                 m->n_layer, m->n_head, m->n_embd, m->max_seq_len, m->vocab_size, c->layer_begin, c->layer_end,
                 c->batch, c->seq_len, c->max_inflight);
    return XDC_ERR_INVALID;
}

/* Each tensor from its own stream so that the values do not depend on the split. */
static xdc_err_t init_params(xdc_gpt_stage *s)
{
    for (int i = 0; i < s->n_tensors; i++) {
        const gpt_tensor *t = &s->tensors[i];
        float *h = s->host_stage + t->offset;
        if (t->init_std > 0.0f) {
            xdc_rng r;
            xdc_rng_seed(&r, s->cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)t->global_index);
            for (size_t k = 0; k < t->count; k++) h[k] = xdc_rng_normal(&r) * t->init_std;
        } else {
            for (size_t k = 0; k < t->count; k++) h[k] = t->init_value;
        }
    }
    XDC_CHECK(s->dev->copy_h2d(s->param_arena, s->host_stage, s->num_params * sizeof(float), s->stream));
    return s->dev->stream_sync(s->stream);
}

/* The backend whose model table is `ops` (stages are created from the model table; the device table of
 * the same backend holds their memory and streams). */
static const xdc_kern_backend *backend_of(const xdc_model_ops *ops)
{
    static const xdc_backend_kind kinds[] = {XDC_BACKEND_CPU, XDC_BACKEND_CPU_STRICT, XDC_BACKEND_CUDA};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const xdc_kern_backend *be = NULL;
        if (xdc_kern_backend_get(kinds[i], &be, NULL) == XDC_OK && be->model == ops) return be;
    }
    return NULL;
}

xdc_err_t xdc_gpt_stage_create(const xdc_model_ops *ops, const xdc_gpt_stage_config *cfg, xdc_gpt_stage **out,
                               xdc_diag *diag)
{
    XDC_CHECK(check_config(cfg, diag));
    const xdc_kern_backend *be = backend_of(ops);
    if (!be) {
        xdc_diag_set(diag, "gpt stage: model table %s belongs to no available backend", ops ? ops->name : "(null)");
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc = XDC_ERR_NOMEM;
    xdc_gpt_stage *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    s->be = be;
    s->ops = ops;
    s->dev = be->device;
    const xdc_device_ops *dev = s->dev;
    s->cfg = *cfg;
    s->nl = cfg->layer_end - cfg->layer_begin;
    s->first = cfg->layer_begin == 0;
    s->last = cfg->layer_end == cfg->model.n_layer;

    param_walk w = {0};
    walk_params(cfg, &w, NULL);
    s->num_params = w.off;
    s->n_tensors = w.n;
    s->tensors = xdc_calloc((size_t)w.n, sizeof *s->tensors);
    s->params.layers = xdc_calloc((size_t)s->nl, sizeof(gpt_layer_params));
    s->grads.layers = xdc_calloc((size_t)s->nl, sizeof(gpt_layer_params));
    s->slots = xdc_calloc((size_t)cfg->max_inflight, sizeof *s->slots);
    if (!s->tensors || !s->params.layers || !s->grads.layers || !s->slots) goto fail;

    size_t pbytes = s->num_params * sizeof(float);
    XDC_CHECK_GOTO(dev->stream_create(&s->stream), rc, fail);
    XDC_CHECK_GOTO(dev->host_alloc((void **)&s->host_stage, pbytes), rc, fail);
    XDC_CHECK_GOTO(dev->mem_alloc((void **)&s->param_arena, pbytes), rc, fail);
    XDC_CHECK_GOTO(dev->mem_alloc((void **)&s->grad_arena, pbytes), rc, fail);
    if (cfg->grad_buffers == 2) XDC_CHECK_GOTO(dev->mem_alloc((void **)&s->grad_spare, pbytes), rc, fail);
    XDC_CHECK_GOTO(dev->mem_alloc((void **)&s->m_arena, pbytes), rc, fail);
    XDC_CHECK_GOTO(dev->mem_alloc((void **)&s->v_arena, pbytes), rc, fail);
    param_walk wp = {.base = s->param_arena, .tensors = s->tensors};
    walk_params(cfg, &wp, &s->params);
    param_walk wg = {.base = s->grad_arena};
    walk_params(cfg, &wg, &s->grads);

    for (int i = 0; i < cfg->max_inflight; i++) {
        gpt_slot *sl = &s->slots[i];
        sl->layers = xdc_calloc((size_t)s->nl, sizeof(gpt_layer_acts));
        if (!sl->layers) goto fail;
        bump b = {0};
        layout_slot(s, &b, sl);
        s->slot_bytes = b.off;
        XDC_CHECK_GOTO(dev->mem_alloc(&sl->arena, b.off), rc, fail);
        b = (bump){.base = sl->arena};
        layout_slot(s, &b, sl);
    }
    bump b = {0};
    layout_scratch(s, &b, &s->scratch);
    s->scratch_bytes = b.off;
    XDC_CHECK_GOTO(dev->mem_alloc(&s->scratch.arena, b.off), rc, fail);
    b = (bump){.base = s->scratch.arena};
    layout_scratch(s, &b, &s->scratch);

    XDC_CHECK_GOTO(init_params(s), rc, fail);
    *out = s;
    return XDC_OK;
fail:
    xdc_diag_set(diag, "gpt stage: %s while setting up %zu parameters and their activations on %s", xdc_strerror(rc),
                 s->num_params, ops->name);
    xdc_gpt_stage_destroy(s);
    return rc;
}

void xdc_gpt_stage_destroy(xdc_gpt_stage *s)
{
    if (!s) return;
    const xdc_device_ops *dev = s->dev;
    if (s->stream) (void)dev->stream_sync(s->stream); /* nothing queued may still use the memory */
    if (s->slots)
        for (int i = 0; i < s->cfg.max_inflight; i++) {
            dev->mem_free(s->slots[i].arena);
            xdc_free(s->slots[i].layers);
        }
    dev->mem_free(s->scratch.arena);
    dev->mem_free(s->param_arena);
    dev->mem_free(s->grad_arena);
    dev->mem_free(s->grad_spare);
    dev->mem_free(s->m_arena);
    dev->mem_free(s->v_arena);
    dev->host_free(s->host_stage);
    dev->stream_destroy(s->stream);
    xdc_free(s->slots);
    xdc_free(s->tensors);
    xdc_free(s->params.layers);
    xdc_free(s->grads.layers);
    xdc_free(s);
}

int xdc_gpt_stage_slots(const xdc_gpt_stage *s) { return s->cfg.max_inflight; }
int xdc_gpt_stage_slot_of(const xdc_gpt_stage *s, int mb) { return mb % s->cfg.max_inflight; }
size_t xdc_gpt_stage_slot_bytes(const xdc_gpt_stage *s) { return s->slot_bytes; }
size_t xdc_gpt_stage_scratch_bytes(const xdc_gpt_stage *s) { return s->scratch_bytes; }
int xdc_gpt_stage_slots_peak(const xdc_gpt_stage *s) { return s->slots_peak; }
size_t xdc_gpt_stage_activation_bytes(const xdc_gpt_stage *s) { return (size_t)s->slots_peak * s->slot_bytes; }
void xdc_gpt_stage_reset_activation_peak(xdc_gpt_stage *s) { s->slots_peak = s->slots_in_use; }

bool xdc_gpt_stage_is_first(const xdc_gpt_stage *s) { return s->first; }
bool xdc_gpt_stage_is_last(const xdc_gpt_stage *s) { return s->last; }
size_t xdc_gpt_stage_num_params(const xdc_gpt_stage *s) { return s->num_params; }
float *xdc_gpt_stage_params(xdc_gpt_stage *s) { return s->param_arena; }
float *xdc_gpt_stage_grads(xdc_gpt_stage *s) { return s->grad_arena; }

float *xdc_gpt_stage_swap_grads(xdc_gpt_stage *s)
{
    if (!s->grad_spare) return NULL;
    float *left = s->grad_arena;
    s->grad_arena = s->grad_spare;
    s->grad_spare = left;
    param_walk wg = {.base = s->grad_arena}; /* the typed views backward writes through */
    walk_params(&s->cfg, &wg, &s->grads);
    return left;
}

xdc_stream *xdc_gpt_stage_stream(const xdc_gpt_stage *s) { return s->stream; }
const xdc_kern_backend *xdc_gpt_stage_backend(const xdc_gpt_stage *s) { return s->be; }

void xdc_gpt_stage_zero_grad(xdc_gpt_stage *s)
{
    /* A failed enqueue is sticky on the stage's stream on every device (xdc_device.h): the next pass's
     * stream_error or stream_sync reports it, before any gradient is handed on. */
    (void)s->dev->memset(s->grad_arena, 0, s->num_params * sizeof(float), s->stream);
}

xdc_err_t xdc_gpt_stage_moments_get(xdc_gpt_stage *s, size_t lo, size_t hi, float *m, float *v, int64_t *adam_t)
{
    XDC_REQUIRE(lo <= hi && hi <= s->num_params, XDC_ERR_INVALID);
    size_t bytes = (hi - lo) * sizeof(float);
    XDC_CHECK(s->dev->copy_d2h(m, s->m_arena + lo, bytes, s->stream));
    XDC_CHECK(s->dev->copy_d2h(v, s->v_arena + lo, bytes, s->stream));
    XDC_CHECK(s->dev->stream_sync(s->stream));
    *adam_t = s->adam_t;
    return XDC_OK;
}

xdc_err_t xdc_gpt_stage_moments_set(xdc_gpt_stage *s, size_t lo, size_t hi, const float *m, const float *v,
                                    int64_t adam_t)
{
    XDC_REQUIRE(lo <= hi && hi <= s->num_params && adam_t >= 0, XDC_ERR_INVALID);
    size_t bytes = (hi - lo) * sizeof(float);
    XDC_CHECK(s->dev->copy_h2d(s->m_arena + lo, m, bytes, s->stream));
    XDC_CHECK(s->dev->copy_h2d(s->v_arena + lo, v, bytes, s->stream));
    XDC_CHECK(s->dev->stream_sync(s->stream)); /* the host buffers may change once this returns */
    s->adam_t = adam_t;
    return XDC_OK;
}

xdc_err_t xdc_gpt_stage_state_get(xdc_gpt_stage *s, float *params, float *m, float *v, int64_t *adam_t)
{
    XDC_CHECK(s->dev->copy_d2h(params, s->param_arena, s->num_params * sizeof(float), s->stream));
    return xdc_gpt_stage_moments_get(s, 0, s->num_params, m, v, adam_t); /* on the same stream, then synced */
}

xdc_err_t xdc_gpt_stage_state_set(xdc_gpt_stage *s, const float *params, const float *m, const float *v, int64_t adam_t)
{
    XDC_REQUIRE(adam_t >= 0, XDC_ERR_INVALID);
    XDC_CHECK(s->dev->copy_h2d(s->param_arena, params, s->num_params * sizeof(float), s->stream));
    return xdc_gpt_stage_moments_set(s, 0, s->num_params, m, v, adam_t);
}

xdc_err_t xdc_gpt_stage_hash_update(xdc_gpt_stage *s, xdc_hash_state *h)
{
    XDC_CHECK(s->dev->copy_d2h(s->host_stage, s->param_arena, s->num_params * sizeof(float), s->stream));
    XDC_CHECK(s->dev->stream_sync(s->stream));
    xdc_hash64_update(h, s->host_stage, s->num_params * sizeof(float));
    return XDC_OK;
}

xdc_err_t xdc_gpt_params_xxh64(xdc_gpt_stage *const *stages, int n, uint64_t *out)
{
    xdc_hash_state *h = xdc_hash64_create(0);
    if (!h) return XDC_ERR_NOMEM;
    xdc_err_t rc = XDC_OK;
    for (int i = 0; i < n && rc == XDC_OK; i++) rc = xdc_gpt_stage_hash_update(stages[i], h);
    if (rc == XDC_OK) *out = xdc_hash64_digest(h);
    xdc_hash64_destroy(h);
    return rc;
}
