/* orch_mode_streaming.c — streaming DiLoCo: inner steps as DiLoCo's (replicas only); the parameters are
 * cut into F fragments, and fragment f leaves at steps where step mod H = f·H/F, its transfer (a job on
 * the comm thread) overlapping the next inner step, and lands one step later: fragment = new global +
 * the local progress made while it was on the wire. One fragment is in flight at a time. On the comm
 * thread's queue the fragment's round is always posted before the next step's gradient round, on every
 * replica and region alike, so the two share the thread without waiting on each other: the gradient
 * round runs once the fragment's exchange is done. A run ends with a final outer round over the whole
 * stage. A fragment is sent at the start of the step after the one it is due at, so none is in flight
 * between steps: a checkpoint holds the outer state and nothing on the wire. For the same reason a region
 * that rejoins (orch_rejoin.c) is handed the outer state once the fragment of the round that took it back
 * landed, at the end of that step: global parameters and momentum are then all there is, the same on every
 * member. Streaming is not re-planned.
 *
 * Train while waiting (diloco.train_while_waiting; docs/runtime.md) as in DiLoCo: a member whose fragment's round is
 * not decided after two of its inner steps' time runs inner steps until the decision comes, before the fragment's
 * snapshot and pseudo-gradient are taken (orch_outer_begin), so those steps are in the fragment's pseudo-gradient
 * (and in the other fragments' next ones) once. The fragments' mean stays the plain one: a fragment's pseudo-gradient
 * holds the steps run in the waits of every fragment's round since its own last one, which no one round's counts
 * say. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"

typedef struct {
    xdc_sync *grad;   /* replicas only; NULL with one replica */
    orch_outer outer; /* pseudo-gradients of the whole stage: the final agreement */
    xdc_sync **frag;  /* (n_frag) one per fragment */
    int n_frag;
    int inflight; /* the fragment on the wire (an overlapped round of `outer`), or -1 */
} streaming_state;

/* Fragment f of this stage's parameters is [lo, hi). */
static void fragment_range(const orch_worker *w, int f, size_t *lo, size_t *hi)
{
    *lo = w->model.n_params * (size_t)f / (size_t)w->cfg->streaming.fragments;
    *hi = w->model.n_params * (size_t)(f + 1) / (size_t)w->cfg->streaming.fragments;
}

static xdc_err_t streaming_setup(orch_worker *w, void **state, xdc_diag *diag)
{
    streaming_state *st = xdc_calloc(1, sizeof *st);
    if (!st) return XDC_ERR_NOMEM;
    *state = st;
    st->inflight = -1;
    xdc_sync_cfg sc;
    XDC_CHECK(orch_replicas_sync(w, &sc, &st->grad, diag)); /* inner steps: the region's replicas, no WAN */
    xdc_intra_comm *dp = sc.dp;
    if (dp) {
        /* The fragment syncs get a replicas' communicator of their own, so their collectives never share
         * one with the gradient sync's. */
        XDC_CHECK(xdc_intra_split(orch_member_dp(w->member), 0, w->id->replica, &w->comm.dp_wan, diag));
        dp = w->comm.dp_wan;
    }
    XDC_CHECK(orch_outer_setup(w, &st->outer, dp, diag));
    orch_train_while_waiting(w, st->grad);
    int F = w->cfg->streaming.fragments;
    if ((size_t)F > w->model.n_params) {
        xdc_diag_set(diag, "streaming.fragments (%d) exceeds this stage's %zu parameters", F, w->model.n_params);
        return XDC_ERR_CONFIG;
    }
    st->frag = xdc_calloc((size_t)F, sizeof *st->frag);
    if (!st->frag) return XDC_ERR_NOMEM;
    st->n_frag = F;
    orch_worker_sync_cfg(w, 1, &sc);
    orch_sync_device_cfg(w, &sc);
    sc.dp = dp;
    sc.name = "fragment";
    for (int f = 0; f < F; f++) {
        size_t lo, hi;
        fragment_range(w, f, &lo, &hi);
        sc.n_elems = hi - lo;
        XDC_CHECK(xdc_sync_create(orch_member_sync_engine(w->member), &sc, &st->frag[f], diag));
        XDC_CHECK(orch_region_weights(w, st->frag[f], diag));
    }
    return XDC_OK;
}

/* The fragment in flight lands (orch_outer_apply of its overlapped round): new global value plus the
 * local progress made meanwhile; then, to a region the round took back, the outer state. */
static xdc_err_t land(orch_worker *w, streaming_state *st, xdc_diag *diag)
{
    if (st->inflight < 0) return orch_rejoin_give(w, &st->outer);
    int f = st->inflight;
    size_t lo, hi;
    fragment_range(w, f, &lo, &hi);
    st->inflight = -1;
    return orch_worker_outer_apply(w, &st->outer, st->frag[f], lo, hi, diag);
}

/* Send the fragment due at this step, if any, to the regions in this step's quorum. */
static xdc_err_t launch(orch_worker *w, streaming_state *st, xdc_diag *diag)
{
    int H = w->cfg->diloco.inner_steps, F = st->n_frag;
    for (int f = 0; f < F; f++) {
        if (w->prog.step % H != (int64_t)f * H / F) continue;
        size_t lo, hi;
        fragment_range(w, f, &lo, &hi);
        XDC_CHECK(orch_outer_begin(&st->outer, st->frag[f], lo, hi, w->prog.step, ORCH_OUTER_DELAYED, diag));
        st->inflight = f;
        break; /* one fragment in flight at a time: F <= H keeps them staggered */
    }
    return XDC_OK;
}

/* The fragment due after step w->prog.step leaves at the start of the next step (or of the finish), not
 * at the end of this one: the same operations in the same order on the stage's stream and the comm
 * thread, but no fragment is in flight between steps, where checkpoints are taken. */
static xdc_err_t streaming_step(orch_worker *w, void *state, float *loss, xdc_diag *diag)
{
    streaming_state *st = state;
    if (w->prog.step > 0) XDC_CHECK(launch(w, st, diag));
    XDC_CHECK(orch_train_inner_step(w, st->grad, loss, diag));
    orch_outer_stepped(&st->outer);
    return land(w, st, diag);
}

/* The final round over the whole stage. A fragment due at the last step is not sent on its own first: the
 * whole-stage round carries its pseudo-gradient once (sending it too would step its momentum twice), and the
 * round's step stays one round's, so an elastic run's quorum and final set at that step are this round's. */
static xdc_err_t streaming_finish(orch_worker *w, void *state, xdc_diag *diag)
{
    XDC_CHECK(orch_worker_outer_round(w, &((streaming_state *)state)->outer, diag));
    if (w->elastic.m.ran) /* DiLoCo's words (diloco_finish) */
        XDC_INFO(XDC_SUB_ORCH,
                 "region %s ran %lld inner steps (and %lld while rounds waited for their decision, %.1f s, and %lld "
                 "while exchanges waited for a member, %.1f s) in %lld steps of the run",
                 w->id->region, (long long)w->prog.step, w->elastic.waiting_run - w->elastic.exchange_run,
                 w->elastic.waiting_s - w->elastic.exchange_s, w->elastic.exchange_run, w->elastic.exchange_s,
                 (long long)w->prog.step);
    return XDC_OK;
}

/* The state is handed over a step after the round that takes the joiner back (streaming_step). */
static xdc_err_t streaming_rejoin(orch_worker *w, void *state, xdc_diag *diag)
{
    return orch_rejoin_take(w, &((streaming_state *)state)->outer, 1, NULL, diag);
}

static void streaming_destroy(void *state)
{
    streaming_state *st = state;
    if (!st) return;
    xdc_sync_destroy(st->grad);
    orch_outer_destroy(&st->outer);
    for (int f = 0; st->frag && f < st->n_frag; f++) xdc_sync_destroy(st->frag[f]);
    xdc_free(st->frag);
    xdc_free(st);
}

static int streaming_syncs(const void *state, xdc_sync **out, int cap)
{
    const streaming_state *st = state;
    int n = 0;
    if (!st) return 0;
    if (st->grad && n < cap) out[n++] = st->grad;
    if (st->outer.sync && n < cap) out[n++] = st->outer.sync;
    for (int f = 0; st->frag && f < st->n_frag && n < cap; f++)
        if (st->frag[f]) out[n++] = st->frag[f];
    return n;
}

static xdc_sync *streaming_replan_sync(const void *state)
{
    (void)state;
    return NULL;
}

/* No fragment is in flight between steps (launch waits for the next step), so the outer state is all. */
static xdc_err_t streaming_checkpoint_io(orch_worker *w, void *state, const char *dir, int save, xdc_diag *diag)
{
    (void)w;
    return orch_outer_checkpoint_io(&((streaming_state *)state)->outer, dir, save, diag);
}

const orch_mode_ops orch_mode_streaming_ops = {.name = "streaming",
                                               .setup = streaming_setup,
                                               .step = streaming_step,
                                               .finish = streaming_finish,
                                               .destroy = streaming_destroy,
                                               .syncs = streaming_syncs,
                                               .replan_sync = streaming_replan_sync,
                                               .checkpoint_io = streaming_checkpoint_io,
                                               .rejoin = streaming_rejoin};
