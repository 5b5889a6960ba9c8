/* orch_outer.c — the outer loop DiLoCo and streaming share (orch_outer.h, orch_worker.h): the outer state
 * on the stage's device, the pseudo-gradient and the outer Nesterov step, the round's exchange, and the
 * worker's side of elastic rounds (its arrival and the store host's decision through
 * orchestrator/elastic/orch_elastic_member.h, regions lost during an exchange). libxdc's xdc_outer_round runs
 * the same round over a user's parameters. */
#include "orchestrator/worker/orch_outer.h"
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_ckpt.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <string.h>

static double now_s(void) { return (double)xdc_now_ns() / 1e9; }

/* The outer state lives on the stage's device and its arithmetic runs there: the backend's model ops
 * (sub, outer_nesterov, residual_forward) queued on the stage's compute stream, so it is ordered after the
 * optimizer step and before the next forward with no host wait, and each sync's ready event (recorded on
 * that stream) captures it. Only a checkpoint's copy crosses to the host. */
static const xdc_device_ops *dev_of(const orch_worker *w) { return w->model.be->device; }
static const xdc_model_ops *ops_of(const orch_worker *w) { return w->model.be->model; }
static xdc_stream *stream_of(const orch_worker *w) { return xdc_gpt_stage_stream(w->model.st); }
static xdc_err_t wait_copies(const orch_worker *w) { return dev_of(w)->stream_sync(stream_of(w)); }

/* The model ops queue on the calling thread's current stream: enter makes it `s` and returns the caller's;
 * leave restores it and reports s's sticky error (the ops return nothing; a failed launch or a cpu-strict
 * refusal shows here). */
static xdc_err_t enter(const orch_worker *w, xdc_stream *s, xdc_stream **prev)
{
    XDC_CHECK(dev_of(w)->get_stream(prev));
    return dev_of(w)->set_stream(s);
}
static xdc_err_t leave(const orch_worker *w, xdc_stream *s, xdc_stream *prev)
{
    xdc_err_t rc = dev_of(w)->set_stream(prev);
    xdc_err_t rs = dev_of(w)->stream_error(s, NULL);
    return rs != XDC_OK ? rs : rc;
}
xdc_err_t orch_outer_enter(const orch_worker *w, xdc_stream **prev) { return enter(w, stream_of(w), prev); }
xdc_err_t orch_outer_leave(const orch_worker *w, xdc_stream *prev) { return leave(w, stream_of(w), prev); }

void orch_sync_device_cfg(orch_worker *w, xdc_sync_cfg *sc)
{
    sc->backend = w->model.be;
    sc->compute = stream_of(w); /* the buffers are written and read by work on the stage's stream */
}

xdc_err_t orch_outer_open(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag)
{
    size_t bytes = o->n * sizeof(float);
    const xdc_device_ops *dev = dev_of(w);
    XDC_CHECK(dev->mem_alloc((void **)&o->global, bytes));
    XDC_CHECK(dev->mem_alloc((void **)&o->mom, bytes)); /* zero-filled */
    XDC_CHECK(dev->mem_alloc((void **)&o->pseudo, bytes));
    XDC_CHECK(dev->host_alloc((void **)&o->host, bytes));
    XDC_CHECK(dev->copy_d2d(o->global, o->local, bytes, o->stream));
    XDC_CHECK(dev->stream_sync(o->stream));
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 1, &sc);
    sc.n_elems = o->n;
    sc.backend = w->model.be;
    sc.compute = o->stream;
    sc.dp = dp;
    sc.name = "pseudo-gradients";
    return xdc_sync_create(orch_member_sync_engine(w->member), &sc, &o->sync, diag);
}

xdc_err_t orch_outer_setup(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag)
{
    o->local = xdc_gpt_stage_params(w->model.st);
    o->n = w->model.n_params;
    o->stream = stream_of(w);
    orch_elastic_setup(w);
    return orch_outer_open(w, o, dp, diag);
}

void orch_outer_destroy(orch_worker *w, orch_outer *o)
{
    xdc_sync_destroy(o->sync);
    const xdc_device_ops *dev = dev_of(w);
    dev->mem_free(o->global);
    dev->mem_free(o->mom);
    dev->mem_free(o->pseudo);
    dev->host_free(o->host);
    memset(o, 0, sizeof *o);
}

xdc_err_t orch_outer_update(orch_worker *w, orch_outer *o, size_t lo, size_t hi)
{
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(w, o->stream, &prev));
    ops_of(w)->outer_nesterov(o->global + lo, o->mom + lo, o->pseudo + lo, hi - lo,
                              o->mean ? 1.0f : (float)w->cfg->diloco.outer_lr,
                              o->mean ? 0.0f : (float)w->cfg->diloco.outer_momentum);
    return leave(w, o->stream, prev);
}

xdc_err_t orch_outer_pseudo(orch_worker *w, orch_outer *o, size_t lo, size_t hi)
{
    xdc_stream *prev = NULL;
    XDC_CHECK(enter(w, o->stream, &prev));
    ops_of(w)->sub(o->pseudo + lo, o->global + lo, o->local + lo, hi - lo);
    return leave(w, o->stream, prev);
}

void orch_outer_opened(orch_worker *w, xdc_sync *sync, int64_t step)
{
    if (!w->elastic.on) return;
    w->elastic.open = sync;
    orch_elastic_opened(&w->elastic.m, (long long)step);
}

/* The exchange of an elastic round (orchestrator/elastic/orch_elastic_member.h; docs/runtime.md, "Leaving
 * during a round"), open on `sync` since orch_outer_opened: wait for it as orch_elastic_wait does; after it,
 * settle the round on its final set, summing again over it unless it is the set the round began with (then
 * every bucket of every member used it). */
static xdc_err_t elastic_exchange(orch_worker *w, xdc_sync *sync, long long step, xdc_diag *diag)
{
    uint8_t got[XDC_TOPO_MAX_REGIONS], final[XDC_TOPO_MAX_REGIONS];
    int resum;
    xdc_err_t rc = orch_elastic_wait(w, sync, diag);
    w->elastic.open = NULL;
    XDC_CHECK(rc);
    xdc_sync_received(sync, got);
    XDC_CHECK(orch_elastic_settle(&w->elastic.m, step, got, final, &resum, diag));
    return resum ? xdc_sync_resum(sync, final, diag) : XDC_OK;
}

xdc_err_t orch_outer_end(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    double t0 = now_s();
    xdc_err_t rc = w->elastic.on ? elastic_exchange(w, sync, (long long)step, diag) : xdc_sync_end(sync, diag);
    w->prog.t_wan_exposed += now_s() - t0;
    return rc;
}

xdc_err_t orch_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag)
{
    size_t n = o->n;
    XDC_CHECK(orch_outer_quorum(w, o->sync, diag));
    XDC_CHECK(orch_outer_pseudo(w, o, 0, n));
    XDC_CHECK(xdc_sync_begin(o->sync, o->pseudo)); /* ending it marks it ready on the stage's stream */
    orch_outer_opened(w, o->sync, w->prog.step);
    XDC_CHECK(orch_outer_end(w, o->sync, w->prog.step, diag));
    XDC_CHECK(orch_outer_update(w, o, 0, n));
    XDC_CHECK(dev_of(w)->copy_d2d(o->local, o->global, n * sizeof(float), o->stream));
    XDC_CHECK(dev_of(w)->stream_sync(o->stream)); /* once per round: a failure shows at the round that caused it */
    orch_rejoin_member(w, w->prog.step);
    return orch_rejoin_give(w, o);
}

/* Who takes part in round `round` (a step, or RDZV_ROUND_END; orchestrator/elastic/orch_quorum.h): the store
 * host's decision (orch_elastic_arrive). The run's first rank says when the number of regions changes. */
xdc_err_t orch_elastic_agree(orch_worker *w, long long round, xdc_diag *diag)
{
    orch_elastic_member *m = &w->elastic.m;
    int before = m->n_live;
    XDC_CHECK(orch_elastic_arrive(m, round, diag));
    if (m->n_live != before && w->id->grank == 0) {
        printf("step %5lld  round %s with %d of %d regions (quorum %s)\n", (long long)w->prog.step,
               rdzv_val_round(round).s, m->n_live, w->id->n_regions, m->quorum);
        fflush(stdout);
    }
    return XDC_OK;
}

xdc_err_t orch_outer_quorum(orch_worker *w, xdc_sync *sync, xdc_diag *diag)
{
    if (!w->elastic.on) return XDC_OK;
    XDC_CHECK(orch_elastic_agree(w, (long long)w->prog.step, diag));
    float weight[XDC_TOPO_MAX_REGIONS];
    for (int r = 0; r < w->id->n_regions; r++)
        weight[r] = !w->elastic.m.live[r] ? 0.0f : w->elastic.weight ? w->elastic.weight[r] : 1.0f;
    return xdc_sync_set_weights(sync, weight, diag);
}

xdc_err_t orch_outer_checkpoint_io(orch_worker *w, orch_outer *o, const char *dir, int save, xdc_diag *diag)
{
    float *dev[2] = {o->global, o->mom};
    const char *name[2] = {"outer-global.ckpt", "outer-momentum.ckpt"};
    size_t bytes = w->model.n_params * sizeof(float);
    for (int i = 0; i < 2; i++) { /* through the pinned staging, one buffer after the other */
        if (save) {
            XDC_CHECK(dev_of(w)->copy_d2h(o->host, dev[i], bytes, stream_of(w)));
            XDC_CHECK(wait_copies(w));
            XDC_CHECK(xdc_ckpt_blob_save(dir, name[i], o->host, bytes, diag));
        } else {
            XDC_CHECK(xdc_ckpt_blob_load(dir, name[i], o->host, bytes, diag));
            XDC_CHECK(dev_of(w)->copy_h2d(dev[i], o->host, bytes, stream_of(w)));
            XDC_CHECK(wait_copies(w));
        }
    }
    return XDC_OK;
}
