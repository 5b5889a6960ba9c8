/* orch_mode_sync.c — sync mode: every step's gradients are averaged over the region's replicas and
 * across regions (one gradient sync, started during the last microbatch's backward) before the optimizer
 * step, so every region holds the same model after every step. With span_regions there is one pipeline
 * through every region and each stage exists once: the sync then averages over the replicas only.
 *
 * sync.delay_steps 1 (docs/runtime.md, "Delayed averaging"): step t's gradients are averaged while step t+1
 * computes, and step t+1 ends by applying them: θ_{t+1} = θ_t − AdamW(avg g_{t−1}). The stage has two
 * gradient arenas; at the end of a step the round of the previous step's gradients (on the spare arena) is
 * waited for, the arenas swap, the new spare (this step's gradients) goes to the sync, and the optimizer
 * applies the current one (the average). Step 0 has nothing to apply; the finish waits for the last round
 * and applies it, so a run still takes `steps` optimizer steps, each at the learning rate of the step whose
 * gradients it applies, and every region ends on the same parameters.
 *
 * Elastic sync mode (`elastic:` in the run file, delay_steps 0; docs/runtime.md, "Elastic regions"): every step
 * is a round of the elastic protocol. Before its pass a worker takes the step's quorum into the gradient
 * sync's weights (1 for each region in it, 0 for the others: the mean over the regions present), a region
 * lost during the exchange is let go as in DiLoCo's rounds, and the optimizer applies the mean over the
 * round's final set, so the survivors stay on one model. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

typedef struct {
    xdc_sync *grad; /* replicas + regions */
    /* pipeline_chunks v > 1: the other chunks' gradients, [1, v) (w->model.chunk_sync; [0] is grad) */
    xdc_sync *chunk_grad[ORCH_MAX_CHUNKS];
    bool pending; /* delay_steps 1: the round of the last step's gradients (the spare arena) is in flight */
    /* Elastic: the hand-over to a rejoining region (orch_rejoin.c, which moves an outer round's state) sees the
     * live parameters as the global ones and zeros as the outer momentum: global, mom device (n_params) fp32,
     * allocated at the first hand-over (the joiner takes the parameters through global); NULL before. */
    orch_outer view;
} sync_state;

static xdc_err_t sync_setup(orch_worker *w, void **state, xdc_diag *diag)
{
    sync_state *st = xdc_calloc(1, sizeof *st);
    if (!st) return XDC_ERR_NOMEM;
    *state = st;
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 1, &sc);
    orch_sync_device_cfg(w, &sc); /* the stage's device and compute stream */
    orch_elastic_setup(w);
    XDC_CHECK(xdc_sync_create(orch_member_sync_engine(w->member), &sc, &st->grad, diag));
    w->model.chunk_sync[0] = st->grad;
    /* Interleaved 1F1B: a sync per chunk, each over its own arena on its own stream (orch_train.c begins
     * each at its chunk's last backward); unequal replicas are refused with chunks (orch_run_config.c). */
    for (int k = 1; k < w->model.chunks; k++) {
        sc.n_elems = xdc_gpt_stage_num_params(w->model.chunk[k]);
        sc.compute = xdc_gpt_stage_stream(w->model.chunk[k]);
        XDC_CHECK(xdc_sync_create(orch_member_sync_engine(w->member), &sc, &st->chunk_grad[k], diag));
        XDC_CHECK(orch_region_weights(w, st->chunk_grad[k], diag));
        w->model.chunk_sync[k] = st->chunk_grad[k];
    }
    return orch_replica_weights(w, st->grad, diag);
}

/* Delayed averaging: wait for the round in flight (the gradients of the step before) and make its averaged
 * arena the current one, which the update then applies; returns the arena left in *left (this step's
 * gradients, or nothing at the finish). */
static xdc_err_t take_pending(orch_worker *w, sync_state *st, float **left, xdc_diag *diag)
{
    XDC_CHECK(orch_train_wait_sync(w, st->grad, diag));
    st->pending = false;
    *left = xdc_gpt_stage_swap_grads(w->model.st);
    return XDC_OK;
}

/* The rejoin view's buffers, once (zero-filled: the outer momentum sync mode does not have). */
static xdc_err_t rejoin_view(orch_worker *w, sync_state *st)
{
    const xdc_device_ops *d = w->model.be->device;
    size_t bytes = w->model.n_params * sizeof(float);
    st->view.be = w->model.be; /* orch_outer_destroy frees the buffers on its device */
    st->view.n = w->model.n_params;
    st->view.local = xdc_gpt_stage_params(w->model.st);
    if (!st->view.global) XDC_CHECK(d->mem_alloc((void **)&st->view.global, bytes));
    if (!st->view.mom) XDC_CHECK(d->mem_alloc((void **)&st->view.mom, bytes));
    return XDC_OK;
}

/* After the update of the round that named regions joining: the step's state (the parameters, the AdamW
 * moments, the next step and the data position) to each of them. */
static xdc_err_t give(orch_worker *w, sync_state *st)
{
    int joining = 0;
    for (int r = 0; r < w->id->n_regions; r++) joining |= w->elastic.m.joining[r];
    if (!joining) return XDC_OK;
    XDC_CHECK(rejoin_view(w, st));
    const xdc_device_ops *d = w->model.be->device;
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(d->copy_d2d(st->view.global, st->view.local, st->view.n * sizeof(float), s));
    XDC_CHECK(d->stream_sync(s));
    return orch_rejoin_give(w, &st->view);
}

/* One step as a round of the elastic protocol: its quorum, the pass with the exchange open (a member region lost
 * during it is no longer waited for), the round ended on its final set, then the update, and the hand-over to
 * regions the round took back (members from the next step on). */
static xdc_err_t elastic_step(orch_worker *w, sync_state *st, float *loss, xdc_diag *diag)
{
    int64_t step = w->prog.step;
    XDC_CHECK(orch_elastic_quorum(w, st->grad, step, diag));
    orch_elastic_open(w, st->grad, step); /* the pass begins the round; its wait polls for lost regions */
    XDC_CHECK(orch_train_pass(w, st->grad, loss, diag));
    XDC_CHECK(orch_elastic_end(w, st->grad, step, diag));
    XDC_CHECK(orch_train_update(w, loss, step, diag));
    w->prog.step++;
    orch_rejoin_member(w, step);
    return give(w, st);
}

/* A restarted worker of a region that left: the state of the step after the round that takes it back (lag 1),
 * parameters through the view's global. */
static xdc_err_t sync_rejoin(orch_worker *w, void *state, xdc_diag *diag)
{
    sync_state *st = state;
    XDC_CHECK(rejoin_view(w, st));
    return orch_rejoin_take(w, &st->view, 1, NULL, diag);
}

static xdc_err_t sync_step(orch_worker *w, void *state, float *loss, xdc_diag *diag)
{
    sync_state *st = state;
    if (w->elastic.on) return elastic_step(w, st, loss, diag); /* orch_quorum_elastic: never delayed */
    if (!w->cfg->sync.delay_steps) return orch_train_inner_step(w, st->grad, loss, diag);
    XDC_CHECK(orch_train_pass(w, NULL, loss, diag)); /* this step's gradients, into the current arena */
    int had_pending = st->pending;
    float *mine;
    if (had_pending) XDC_CHECK(take_pending(w, st, &mine, diag));
    else mine = xdc_gpt_stage_swap_grads(w->model.st); /* step 0: nothing to apply yet */
    /* This step's round starts before the update, which reads only the other arena. The backward that wrote
     * `mine` is queued on the compute stream: mark_ready's events order the comm stream's reads after it,
     * and the next step's backward writes the other arena. */
    XDC_CHECK(xdc_sync_begin(st->grad, mine));
    xdc_sync_mark_ready(st->grad, 0);
    st->pending = true;
    if (had_pending) XDC_CHECK(orch_train_update(w, loss, w->prog.step - 1, diag));
    else XDC_CHECK(orch_pipe_allreduce_sum(w, loss, 1, diag)); /* the loss still sums over the stages */
    w->prog.step++;
    return XDC_OK;
}

static xdc_err_t sync_finish(orch_worker *w, void *state, xdc_diag *diag)
{
    sync_state *st = state;
    if (!st->pending) return XDC_OK; /* every step ended agreed */
    float loss = 0, *left;           /* no step's loss to report */
    uint64_t t0 = xdc_now_ns();
    xdc_err_t rc = take_pending(w, st, &left, diag);
    if (rc == XDC_OK) rc = orch_train_update(w, &loss, w->prog.step - 1, diag);
    /* The last step's tail: its wait counts as exposed WAN, so its time counts as step time too. */
    w->prog.t_step += (double)(xdc_now_ns() - t0) / 1e9;
    return rc;
}

static void sync_destroy(void *state)
{
    sync_state *st = state;
    if (!st) return;
    xdc_sync_destroy(st->grad);
    for (int k = 1; k < ORCH_MAX_CHUNKS; k++) xdc_sync_destroy(st->chunk_grad[k]);
    orch_outer_destroy(&st->view); /* its buffers, if a hand-over made them */
    xdc_free(st);
}

static int sync_syncs(const void *state, xdc_sync **out, int cap)
{
    const sync_state *st = state;
    int n = st && st->grad && cap > 0 ? (out[0] = st->grad, 1) : 0;
    for (int k = 1; st && k < ORCH_MAX_CHUNKS && n < cap; k++)
        if (st->chunk_grad[k]) out[n++] = st->chunk_grad[k];
    return n;
}

static xdc_sync *sync_replan_sync(const void *state) { return ((const sync_state *)state)->grad; }

const orch_mode_ops orch_mode_sync_ops = {.name = "sync",
                                          .setup = sync_setup,
                                          .step = sync_step,
                                          .finish = sync_finish,
                                          .destroy = sync_destroy,
                                          .syncs = sync_syncs,
                                          .replan_sync = sync_replan_sync,
                                          .checkpoint_io = NULL,
                                          .rejoin = sync_rejoin};
