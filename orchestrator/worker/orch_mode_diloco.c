/* orch_mode_diloco.c — DiLoCo: every step syncs gradients over the region's replicas only (no WAN);
 * every H steps the pseudo-gradient `global − local` of the whole stage goes across regions (codec +
 * error feedback) and an outer Nesterov step updates the global parameters: m = μm + Δ;
 * global −= η(Δ + μm); local = global. A run ends with a final outer round so all regions report one
 * model. A checkpoint (any step) carries the outer global parameters and momentum next to the stage
 * checkpoint. The outer loop (orchestrator/member/orch_outer.h) is shared with streaming mode and libxdc.
 * With diloco.overlap_steps = d the round due at step S begins at the start of step S+1 (as a streaming
 * fragment leaves) and is applied at the end of step S+d, the d inner steps between running while it is on
 * the wire; with d <= H and checkpoints at multiples of H, no round is in flight where a checkpoint is
 * taken, and the round's step follows from the step count, so a resumed run begins it again alike.
 *
 * Nobody waits (diloco.nobody_waits; docs/runtime.md): a round is still H steps of the run, but region r runs
 * an inner step only in h_r of them, spread over the round (xdc_plan_round_runs: a slow region is about as far
 * into the round as the others at every step, so an overlapped round is applied at about the same time
 * everywhere), h_r as the round's decider counted it (steps/<step>, published with the quorum decision that
 * opened the round; the first round's at the launch; kept in checkpoints); the other steps of the round are
 * slots it lets pass without computing, the time its slower steps took. The outer mean weighs each region's
 * pseudo-gradient by the tokens it processed in the round (xdc_sync_set_weights). Overlapped, a round is
 * weighed by the counts of the round it closes when it begins, and its decision brings the next round's
 * counts, which its first inner steps (on the wire with it) already follow.
 *
 * Train while waiting (diloco.train_while_waiting; docs/runtime.md): a member whose round is not decided after two
 * of its inner steps' time (a region late: slower, stopped, restarting) runs inner steps until the decision comes
 * (orch_elastic_arrive's busy), on the round's last step's learning rate; the decider counts them (ran/<step>) and
 * the outer mean weighs each region by the tokens it processed, those steps with the round's. Nothing waits idle
 * for a late region but the late region itself.
 * diloco.slowdown (orch_train_pass, any mode) gives tests and benches on one machine a slow region. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "model/xdc_ckpt.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "scheduler/xdc_plan.h"

typedef struct {
    xdc_sync *grad; /* replicas only; NULL with one replica */
    orch_outer outer;
    /* Nobody waits: (n_regions) the inner steps each region runs in the round under way (0: not in it), and
     * each one's weight in the round's outer mean (tokens processed over the fewest any member processed) */
    int steps[XDC_TOPO_MAX_REGIONS];
    float weight[XDC_TOPO_MAX_REGIONS];
    /* Counters for the run's report: inner steps run, rounds, and wall seconds of the inner steps and of the
     * rounds' boundaries (arrival, decision and exchange of the outer rounds) */
    long long inner_run, rounds;
    double inner_s, boundary_s;
} diloco_state;

#define STEPS_FILE "diloco-round-steps.ckpt" /* (n_regions) int32: the round's inner steps, nobody waits */

/* Once the decision of the outer round that ends the round under way at w->prog.step is read (w->elastic.weigh):
 * each region's weight, the tokens it processed (its inner steps in the round, those of its count the run's
 * end left it (xdc_plan_round_ran), plus those it ran while the round waited, or a region taken back those it
 * ran from its snapshot alone, times the tokens of its inner step: its replicas' microbatches, more in a region
 * of more replicas) over the fewest tokens of any region the decider gave steps, so equal work weighs 1 and the
 * mean is the plain one bit for bit. Every member computes it from the same decision, so all hold the same
 * weights; the quorum then gives the regions out of the round 0. */
static void weigh_round(orch_worker *w)
{
    diloco_state *st = w->mode_state;
    const orch_elastic_member *m = &w->elastic.m;
    int period = w->cfg->diloco.inner_steps;
    long long slots = w->prog.step - (w->prog.step - 1) / period * period; /* steps of the round, the last cut */
    double tokens_per_mb = (double)w->model.B * w->model.T, fewest = 0;
    double tokens[XDC_TOPO_MAX_REGIONS];
    for (int r = 0; r < w->id->n_regions; r++) {
        long long h = xdc_plan_round_ran(st->steps[r], period, slots);
        if (h < 1) h = 1;
        if (orch_elastic_took_early(m, r)) h = 0; /* taken back: its steps from its snapshot, all in extra[r] */
        tokens[r] = (double)(h + (m->ran ? m->extra[r] : 0)) * tokens_per_mb * w->model.region_mb[r];
        if (st->steps[r] > 0 && (fewest == 0 || tokens[r] < fewest)) fewest = tokens[r]; /* the round's regions */
    }
    for (int r = 0; r < w->id->n_regions; r++) st->weight[r] = (float)(tokens[r] / fewest);
    w->elastic.weight = st->weight;
}

static int nobody_waits(const orch_worker *w) { return w->cfg->diloco.nobody_waits && w->elastic.on; }

static xdc_err_t diloco_setup(orch_worker *w, void **state, xdc_diag *diag)
{
    diloco_state *st = xdc_calloc(1, sizeof *st);
    if (!st) return XDC_ERR_NOMEM;
    *state = st;
    xdc_sync_cfg sc;
    XDC_CHECK(orch_replicas_sync(w, &sc, &st->grad, diag)); /* inner steps: the region's replicas, no WAN */
    if (w->cfg->diloco.keep_unsent && sc.dp) {
        xdc_diag_set(diag,
                     "diloco.keep_unsent needs one replica per stage in each region (this region has %d): a "
                     "replica's codec keeps only its shard's residual",
                     xdc_intra_size(sc.dp));
        return XDC_ERR_CONFIG;
    }
    st->outer.keep_unsent = w->cfg->diloco.keep_unsent;
    XDC_CHECK(orch_outer_setup(w, &st->outer, sc.dp, diag));
    for (int r = 0; r < w->id->n_regions; r++) st->steps[r] = w->cfg->diloco.inner_steps;
    if (nobody_waits(w) || w->elastic.m.ran) w->elastic.weigh = weigh_round; /* in the round's quorum hook */
    orch_train_while_waiting(w, st->grad);
    /* A resumed run takes the round's counts from its checkpoint instead; steps/0 is there either way. */
    return nobody_waits(w) ? orch_elastic_steps(&w->elastic.m, 0, st->steps, diag) : XDC_OK;
}

/* The overlapped round in flight is applied: local = global' + the progress since it began. */
static xdc_err_t apply(orch_worker *w, diloco_state *st, xdc_diag *diag)
{
    return orch_worker_outer_apply(w, &st->outer, st->outer.sync, 0, st->outer.n, diag);
}

/* The run's last outer round, in diloco.final_codec when set: a denser codec there carries what the rounds
 * before left unsent (in the codec's residual, or with keep_unsent in the parameters) into the one model
 * every region ends on. With keep_unsent that model is the mean of the regions' parameters (η = 1, μ = 0):
 * they hold their unsent parts, and a Nesterov step on top of them overshoots (bench-e2e's sparse row:
 * final validation loss 2.3407 against 2.4122 with its outer lr 1.0 and momentum 0.5). */
static xdc_err_t last_round(orch_worker *w, diloco_state *st, xdc_diag *diag)
{
    if (st->outer.begun_at >= 0) XDC_CHECK(apply(w, st, diag)); /* a run shorter than the round's d steps */
    if (w->cfg->diloco.final_codec[0]) {
        XDC_INFO(XDC_SUB_ORCH, "last outer round (step %lld) in codec %s%s", (long long)w->prog.step,
                 w->cfg->diloco.final_codec,
                 w->cfg->diloco.keep_unsent ? ", to the mean of the regions' parameters" : "");
        XDC_CHECK(orch_train_switch_wan(w, w->cfg->diloco.final_codec, 0, diag));
    }
    if (w->cfg->diloco.overlap_steps)
        XDC_INFO(XDC_SUB_ORCH, "overlapped outer rounds: %llu inner steps ran while a round was on the wire",
                 (unsigned long long)st->outer.steps_in_flight);
    st->outer.mean = w->cfg->diloco.keep_unsent;
    return orch_worker_outer_round(w, &st->outer, diag);
}

/* One inner step, timed for the run's report. */
static xdc_err_t inner_step(orch_worker *w, diloco_state *st, float *loss, xdc_diag *diag)
{
    double t0 = (double)xdc_now_ns() / 1e9;
    XDC_CHECK(orch_train_inner_step(w, st->grad, loss, diag));
    st->inner_run++;
    st->inner_s += (double)xdc_now_ns() / 1e9 - t0;
    return XDC_OK;
}

/* The outer round at w->prog.step, timed as the wait at the round's boundary (and the inner steps run in it while it
 * waited for its decision, train while waiting). */
static xdc_err_t outer_round(orch_worker *w, diloco_state *st, int last, xdc_diag *diag)
{
    double t0 = (double)xdc_now_ns() / 1e9;
    xdc_err_t rc = last ? last_round(w, st, diag) : orch_worker_outer_round(w, &st->outer, diag);
    st->boundary_s += (double)xdc_now_ns() / 1e9 - t0;
    st->rounds++;
    return rc;
}

static xdc_err_t diloco_step(orch_worker *w, void *state, float *loss, xdc_diag *diag)
{
    diloco_state *st = state;
    int H = w->cfg->diloco.inner_steps, d = w->cfg->diloco.overlap_steps;
    if (d && w->prog.step > 0 && w->prog.step % H == 0) { /* the round due after the last step leaves now */
        /* Nobody waits: weighed by the counts of the round it closes; its decision brings the next round's. */
        double t0 = (double)xdc_now_ns() / 1e9;
        XDC_CHECK(orch_outer_begin(&st->outer, st->outer.sync, 0, st->outer.n, w->prog.step,
                                   w->cfg->diloco.eager ? ORCH_OUTER_EAGER : ORCH_OUTER_DELAYED, diag));
        if (nobody_waits(w)) XDC_CHECK(orch_elastic_steps(&w->elastic.m, (long long)w->prog.step, st->steps, diag));
        st->boundary_s += (double)xdc_now_ns() / 1e9 - t0;
        st->rounds++;
    }
    /* Nobody waits: a step of the round not among its count's, the region lets pass (its loss stays the last). */
    if (xdc_plan_round_runs(st->steps[w->id->region_idx], H, (int)(w->prog.step % H))) {
        XDC_CHECK(inner_step(w, st, loss, diag));
    } else {
        *loss = (float)w->prog.last_loss;
        w->prog.step++;
    }
    orch_outer_stepped(&st->outer);
    if (st->outer.begun_at >= 0 && w->prog.step == st->outer.begun_at + d) {
        double t0 = (double)xdc_now_ns() / 1e9;
        XDC_CHECK(apply(w, st, diag));
        st->boundary_s += (double)xdc_now_ns() / 1e9 - t0;
    }
    if (w->prog.step % H != 0) return XDC_OK;
    if (w->prog.step == w->cfg->train.steps) return outer_round(w, st, 1, diag);
    if (d) return XDC_OK;
    XDC_CHECK(outer_round(w, st, 0, diag)); /* with keep_unsent, local = global - residual */
    return nobody_waits(w) ? orch_elastic_steps(&w->elastic.m, (long long)w->prog.step, st->steps, diag) : XDC_OK;
}

static xdc_err_t diloco_finish(orch_worker *w, void *state, xdc_diag *diag)
{
    diloco_state *st = state;
    if (w->prog.step % w->cfg->diloco.inner_steps != 0) XDC_CHECK(outer_round(w, st, 1, diag));
    /* The compute a region did against the rounds' waits, in its own inner steps: with nobody waiting, a fast
     * region runs the whole period and waits about one slow step at a boundary (docs/runtime.md). */
    double per_step = st->inner_run ? st->inner_s / (double)st->inner_run : 0;
    char waiting[96] = "";
    if (w->elastic.m.ran)
        snprintf(waiting, sizeof waiting, " (and %lld while rounds waited for their decision)", w->elastic.waiting_run);
    XDC_INFO(XDC_SUB_ORCH,
             "region %s ran %lld inner steps%s in %lld steps of the run (%lld outer rounds); waited %.2f inner steps "
             "per round at the boundaries",
             w->id->region, st->inner_run, waiting, (long long)w->prog.step, st->rounds,
             per_step > 0 && st->rounds ? (st->boundary_s - w->elastic.waiting_s) / (double)st->rounds / per_step
                                        : 0.0);
    return XDC_OK;
}

static void diloco_destroy(void *state)
{
    diloco_state *st = state;
    if (!st) return;
    xdc_sync_destroy(st->grad);
    orch_outer_destroy(&st->outer);
    xdc_free(st);
}

/* A joiner's inner step from its snapshot while it asks (orch_rejoin_take; ctx: the worker). */
static xdc_err_t early_step(void *ctx, xdc_diag *diag)
{
    orch_worker *w = ctx;
    float loss;
    return inner_step(w, w->mode_state, &loss, diag);
}

static xdc_err_t diloco_rejoin(orch_worker *w, void *state, xdc_diag *diag)
{
    diloco_state *st = state;
    /* handed over once the round is applied: at once, or diloco.overlap_steps later */
    XDC_CHECK(orch_rejoin_take(w, &st->outer, w->cfg->diloco.overlap_steps, early_step, diag));
    int needed = w->elastic.rejoin_round != RDZV_ROUND_END; /* else the run ended first: no round to run */
    /* The round that took it back is the joiner's first (weight 0: a zero pseudo-gradient, global = local): its
     * mean lands here as on every member, and with its state in it trains from this round on. */
    if (needed && w->elastic.m.joins_in_round) XDC_CHECK(outer_round(w, st, 0, diag));
    /* the counts of the round that took it back (steps/<its step>), whose steps it joins, overlapped or not */
    return nobody_waits(w) && needed ? orch_elastic_steps(&w->elastic.m, w->elastic.rejoin_round, st->steps, diag)
                                     : XDC_OK;
}

static int diloco_syncs(const void *state, xdc_sync **out, int cap)
{
    const diloco_state *st = state;
    int n = 0;
    if (st && st->grad && n < cap) out[n++] = st->grad;
    if (st && st->outer.sync && n < cap) out[n++] = st->outer.sync;
    return n;
}

static xdc_sync *diloco_replan_sync(const void *state) { return ((const diloco_state *)state)->outer.sync; }

static xdc_err_t diloco_checkpoint_io(orch_worker *w, void *state, const char *dir, int save, xdc_diag *diag)
{
    diloco_state *st = state;
    XDC_CHECK(orch_outer_checkpoint_io(&st->outer, dir, save, diag));
    if (!nobody_waits(w)) return XDC_OK;
    /* The round under way's counts: the resumed run lets the same steps pass as the uninterrupted one. */
    int32_t h[XDC_TOPO_MAX_REGIONS];
    size_t bytes = (size_t)w->id->n_regions * sizeof h[0];
    for (int r = 0; save && r < w->id->n_regions; r++) h[r] = st->steps[r];
    if (save) return xdc_ckpt_blob_save(dir, STEPS_FILE, h, bytes, diag);
    XDC_CHECK(xdc_ckpt_blob_load(dir, STEPS_FILE, h, bytes, diag));
    for (int r = 0; r < w->id->n_regions; r++) st->steps[r] = h[r] < 0 ? 0 : h[r];
    return XDC_OK;
}

const orch_mode_ops orch_mode_diloco_ops = {.name = "diloco",
                                            .setup = diloco_setup,
                                            .step = diloco_step,
                                            .finish = diloco_finish,
                                            .destroy = diloco_destroy,
                                            .syncs = diloco_syncs,
                                            .replan_sync = diloco_replan_sync,
                                            .checkpoint_io = diloco_checkpoint_io,
                                            .rejoin = diloco_rejoin};
