/* orch_outer.c — the outer loop DiLoCo and streaming share (orch_outer.h), on a member: the outer state on
 * the member's device, the pseudo-gradient and the outer Nesterov step, the round's exchange, at once or
 * overlapped with the next inner steps. The worker's modes and libxdc's xdc_outer_* run the same rounds;
 * the worker's elastic rounds come in through the hooks (orchestrator/worker/orch_worker_outer.c). */
#include "orchestrator/member/orch_outer.h"

#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"

#include <string.h>

/* The outer state lives on the member's device (or the one the caller set in o->be: libxdc's device tags)
 * and its arithmetic runs there: the backend's model ops
 * (sub, outer_nesterov, residual_forward) queued on o->stream (the stage's compute stream), so it is ordered
 * after the optimizer step and before the next forward with no host wait, and each sync's ready event
 * (recorded on that stream) captures it. Only a checkpoint's copy crosses to the host. */
static const xdc_device_ops *dev_of(const orch_outer *o) { return o->be->device; }

/* The model ops queue on the calling thread's current stream: enter makes it o->stream and returns the
 * caller's; leave restores it and reports o->stream's sticky error (the ops return nothing; a failed launch
 * or a cpu-strict refusal shows here). */
static xdc_err_t enter(const orch_outer *o, xdc_stream **prev)
{
    XDC_CHECK(dev_of(o)->get_stream(prev));
    return dev_of(o)->set_stream(o->stream);
}
static xdc_err_t leave(const orch_outer *o, xdc_stream *prev)
{
    xdc_err_t rc = dev_of(o)->set_stream(prev);
    xdc_err_t rs = dev_of(o)->stream_error(o->stream, NULL);
    return rs != XDC_OK ? rs : rc;
}

xdc_err_t orch_outer_open(orch_member *m, orch_outer *o, const xdc_sync_cfg *sc, xdc_diag *diag)
{
    const orch_run_config *cfg = orch_member_config(m);
    if (!o->be) o->be = orch_member_backend(m);
    o->lr = (float)cfg->diloco.outer_lr;
    o->momentum = (float)cfg->diloco.outer_momentum;
    o->codec = sc->codec;
    xdc_sync_cfg c = *sc;
    c.n_elems = o->n;
    c.backend = o->be;
    c.compute = o->stream;
    xdc_sync *sync = NULL;
    XDC_CHECK(xdc_sync_create(orch_member_sync_engine(m), &c, &sync, diag));
    return orch_outer_init(o, sync);
}

xdc_err_t orch_outer_init(orch_outer *o, xdc_sync *sync)
{
    o->sync = sync;
    o->begun_at = -1;
    size_t bytes = o->n * sizeof(float);
    const xdc_device_ops *dev = dev_of(o);
    XDC_CHECK(dev->mem_alloc((void **)&o->global, bytes));
    XDC_CHECK(dev->mem_alloc((void **)&o->mom, bytes)); /* zero-filled */
    XDC_CHECK(dev->mem_alloc((void **)&o->pseudo, bytes));
    XDC_CHECK(dev->host_alloc((void **)&o->host, bytes));
    XDC_CHECK(dev->copy_d2d(o->global, o->local, bytes, o->stream));
    return dev->stream_sync(o->stream);
}

void orch_outer_destroy(orch_outer *o)
{
    xdc_sync_destroy(o->sync);
    if (o->be) {
        const xdc_device_ops *dev = dev_of(o);
        dev->mem_free(o->global);
        dev->mem_free(o->mom);
        dev->mem_free(o->pseudo);
        dev->mem_free(o->snapshot);
        dev->mem_free(o->own);
        dev->host_free(o->own_bytes);
        dev->host_free(o->host);
    }
    xdc_codec_destroy(o->own_codec);
    memset(o, 0, sizeof *o);
}

/* The outer Nesterov step of g and m on [lo, hi) from d (hi − lo; the plain mean's step when `mean`), on o->stream. */
static xdc_err_t nesterov(const orch_outer *o, float *g, float *m, const float *d, size_t lo, size_t hi, bool mean)
{
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(o, &prev));
    o->be->model->outer_nesterov(g + lo, m + lo, d, hi - lo, mean ? 1.0f : o->lr, mean ? 0.0f : o->momentum);
    return leave(o, prev);
}

/* ĉ into o->own: what o->codec carries of Δ (o->pseudo), encoded and decoded by a context of its own with no
 * residual (a function of Δ alone, so a resumed run estimates alike), on o->stream. */
static xdc_err_t own_contribution(orch_outer *o, xdc_diag *diag)
{
    const xdc_device_ops *dev = dev_of(o);
    size_t bytes = o->n * sizeof(float);
    if (!o->own_codec) {
        xdc_codec_cfg cc = o->codec;
        cc.n_elems = o->n;
        cc.error_feedback = false;
        cc.zstd_level = 0; /* the wire's size is not the estimate's concern */
        cc.backend = o->be;
        if (cc.chunk_elems > o->n) cc.chunk_elems = o->n;
        XDC_CHECK(xdc_codec_create(&cc, &o->own_codec, diag));
        o->own_cap = xdc_codec_bound(o->own_codec, o->n);
        XDC_CHECK(dev->mem_alloc((void **)&o->own, bytes));
        XDC_CHECK(dev->host_alloc((void **)&o->own_bytes, o->own_cap));
    }
    xdc_stream *prev = NULL;
    size_t len = 0;
    XDC_CHECK(enter(o, &prev));
    xdc_err_t rc = xdc_codec_encode(o->own_codec, o->pseudo, o->n, o->own_bytes, o->own_cap, &len, diag);
    if (rc == XDC_OK) rc = xdc_codec_decode(o->own_codec, o->own_bytes, len, o->own, o->n, XDC_CODEC_WRITE, diag);
    xdc_err_t rl = leave(o, prev);
    return rc != XDC_OK ? rc : rl;
}

/* The eager estimate (ORCH_OUTER_EAGER) into s and local over the whole state, Δ in o->pseudo, `share` this
 * region's of the mean: the round with this region's contribution the only one in the mean. */
static xdc_err_t eager(orch_outer *o, float share, xdc_diag *diag)
{
    const xdc_device_ops *dev = dev_of(o);
    const xdc_model_ops *ops = o->be->model;
    size_t n = o->n, bytes = n * sizeof(float);
    XDC_CHECK(own_contribution(o, diag));
    /* local's values are in Δ now: it holds Δ − ĉ, then the momentum's copy; s the global parameters' */
    XDC_CHECK(dev->copy_d2d(o->snapshot, o->global, bytes, o->stream));
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(o, &prev));
    if (o->keep_unsent && !o->mean) { /* s = global − (Δ − ĉ): what apply takes from local as the residual */
        ops->sub(o->local, o->pseudo, o->own, n);
        ops->sub(o->snapshot, o->snapshot, o->local, n);
    }
    xdc_err_t rc = o->be->quant->scale(o->own, n, share); /* ĉ's part of the mean: ĉ·w_r/Σw */
    XDC_CHECK(leave(o, prev));
    XDC_CHECK(rc);
    XDC_CHECK(dev->copy_d2d(o->local, o->mom, bytes, o->stream));
    XDC_CHECK(nesterov(o, o->snapshot, o->local, o->own, 0, n, o->mean));
    return dev->copy_d2d(o->local, o->snapshot, bytes, o->stream);
}

xdc_err_t orch_outer_begin(orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, int64_t step, orch_outer_overlap how,
                           xdc_diag *diag)
{
    if (o->begun_at >= 0) {
        xdc_diag_set(diag, "an outer round (step %lld) is still in flight", (long long)o->begun_at);
        return XDC_ERR_INVALID;
    }
    if (how == ORCH_OUTER_EAGER && (lo != 0 || hi != o->n)) {
        xdc_diag_set(diag, "an eager outer round spans the whole state ([%zu, %zu) of %zu given)", lo, hi, o->n);
        return XDC_ERR_INVALID;
    }
    const xdc_device_ops *dev = dev_of(o);
    size_t n = hi - lo, bytes = n * sizeof(float);
    if (how != ORCH_OUTER_AT_ONCE && !o->snapshot)
        XDC_CHECK(dev->mem_alloc((void **)&o->snapshot, o->n * sizeof(float)));
    /* The snapshot after the quorum: inner steps a member ran while the round waited for its decision (train while
     * waiting) are in this round's pseudo-gradient, not in the progress apply keeps on top of global′ as well. */
    if (o->hooks.quorum) XDC_CHECK(o->hooks.quorum(o->hooks.ctx, sync, step, diag));
    if (how == ORCH_OUTER_DELAYED) XDC_CHECK(dev->copy_d2d(o->snapshot + lo, o->local + lo, bytes, o->stream));
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(o, &prev));
    if (o->bystander) o->be->model->zero(o->pseudo + lo, bytes); /* in the exchange, contributing nothing */
    else o->be->model->sub(o->pseudo + lo, o->global + lo, o->local + lo, n); /* after the snapshot: one stream */
    XDC_CHECK(leave(o, prev));
    if (how == ORCH_OUTER_EAGER) XDC_CHECK(eager(o, xdc_sync_share(sync), diag)); /* after the quorum's weights */
    XDC_CHECK(xdc_sync_begin(sync, o->pseudo + lo));
    xdc_sync_mark_ready(sync, 0); /* on the wire now, while the caller steps on */
    if (o->hooks.opened) o->hooks.opened(o->hooks.ctx, sync, step);
    o->begun_at = step;
    o->overlap = how;
    return XDC_OK;
}

void orch_outer_stepped(orch_outer *o)
{
    if (o->begun_at >= 0) o->steps_in_flight++;
}

xdc_err_t orch_outer_step(orch_outer *o, const float *d, size_t lo, size_t hi, bool mean)
{
    return nesterov(o, o->global, o->mom, d, lo, hi, mean);
}

xdc_err_t orch_outer_rebase(orch_outer *o, const float *base)
{
    XDC_CHECK(dev_of(o)->copy_h2d(o->pseudo, base, o->n * sizeof(float), o->stream));
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(o, &prev));
    o->be->model->sub(o->pseudo, o->local, o->pseudo, o->n);
    o->be->model->residual_forward(o->local, o->global, o->pseudo, o->n);
    XDC_CHECK(leave(o, prev));
    return dev_of(o)->stream_sync(o->stream);
}

xdc_err_t orch_outer_apply(orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, xdc_diag *diag)
{
    if (o->begun_at < 0) {
        xdc_diag_set(diag, "no outer round in flight to apply");
        return XDC_ERR_INVALID;
    }
    int64_t step = o->begun_at;
    o->begun_at = -1;
    XDC_CHECK(o->hooks.end ? o->hooks.end(o->hooks.ctx, sync, step, diag) : xdc_sync_end(sync, diag));
    if (o->bystander) return XDC_OK; /* the mean is in o->pseudo: the caller keeps it */
    const xdc_model_ops *ops = o->be->model;
    size_t n = hi - lo;
    XDC_CHECK(orch_outer_step(o, o->pseudo + lo, lo, hi, o->mean));
    if (o->overlap != ORCH_OUTER_AT_ONCE) { /* snapshot = the progress since the round began; local = global' + it */
        xdc_stream *prev = NULL;
        XDC_CHECK(enter(o, &prev));
        ops->sub(o->snapshot + lo, o->local + lo, o->snapshot + lo, n);
        ops->residual_forward(o->local + lo, o->global + lo, o->snapshot + lo, n);
        XDC_CHECK(leave(o, prev));
    }
    if (o->overlap == ORCH_OUTER_AT_ONCE)
        XDC_CHECK(dev_of(o)->copy_d2d(o->local + lo, o->global + lo, n * sizeof(float), o->stream));
    XDC_CHECK(dev_of(o)->stream_sync(o->stream)); /* once per round: a failure shows at the round that caused it */
    /* keep_unsent: local −= residual, so the next inner steps start from where this region got to less what
     * the round carried, and its next pseudo-gradient holds the unsent part again (not after a mean round,
     * the last: every region ends on the one global model). */
    if (o->keep_unsent && !o->mean) XDC_CHECK(xdc_sync_residual_take(sync, o->local + lo, diag));
    return XDC_OK;
}

xdc_err_t orch_outer_round(orch_outer *o, int64_t step, xdc_diag *diag)
{
    XDC_CHECK(orch_outer_begin(o, o->sync, 0, o->n, step, ORCH_OUTER_AT_ONCE, diag));
    return orch_outer_apply(o, o->sync, 0, o->n, diag);
}

xdc_err_t orch_outer_get(orch_outer *o, orch_outer_part part, float *host)
{
    XDC_CHECK(
        dev_of(o)->copy_d2h(host, part == ORCH_OUTER_GLOBAL ? o->global : o->mom, o->n * sizeof(float), o->stream));
    return dev_of(o)->stream_sync(o->stream);
}

xdc_err_t orch_outer_set(orch_outer *o, orch_outer_part part, const float *host)
{
    XDC_CHECK(
        dev_of(o)->copy_h2d(part == ORCH_OUTER_GLOBAL ? o->global : o->mom, host, o->n * sizeof(float), o->stream));
    return dev_of(o)->stream_sync(o->stream);
}
