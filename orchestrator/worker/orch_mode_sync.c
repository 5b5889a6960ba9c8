/* orch_mode_sync.c — sync mode: every step's gradients are averaged over the region's replicas and
 * across regions (one gradient sync, started during the last microbatch's backward) before the optimizer
 * step, so every region holds the same model after every step. With span_regions there is one pipeline
 * through every region and each stage exists once: the sync then averages over the replicas only. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"

typedef struct {
    xdc_sync *grad; /* replicas + regions */
} sync_state;

static xdc_err_t sync_setup(orch_worker *w, void **state, xdc_diag *diag)
{
    sync_state *st = xdc_calloc(1, sizeof *st);
    if (!st) return XDC_ERR_NOMEM;
    *state = st;
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 1, &sc);
    orch_sync_device_cfg(w, &sc); /* the stage's device and compute stream */
    return xdc_sync_create(w->comm.sync_eng, &sc, &st->grad, diag);
}

static xdc_err_t sync_step(orch_worker *w, void *state, float *loss, xdc_diag *diag)
{
    return orch_train_inner_step(w, ((sync_state *)state)->grad, loss, diag);
}

static xdc_err_t sync_finish(orch_worker *w, void *state, xdc_diag *diag)
{
    (void)w;
    (void)state;
    (void)diag;
    return XDC_OK; /* every step ended agreed */
}

static void sync_destroy(void *state)
{
    sync_state *st = state;
    if (!st) return;
    xdc_sync_destroy(st->grad);
    xdc_free(st);
}

static int sync_syncs(const void *state, xdc_sync **out, int cap)
{
    const sync_state *st = state;
    return st && st->grad && cap > 0 ? (out[0] = st->grad, 1) : 0;
}

static xdc_sync *sync_replan_sync(const void *state) { return ((const sync_state *)state)->grad; }

const orch_mode_ops orch_mode_sync_ops = {.name = "sync",
                                          .setup = sync_setup,
                                          .step = sync_step,
                                          .finish = sync_finish,
                                          .destroy = sync_destroy,
                                          .syncs = sync_syncs,
                                          .replan_sync = sync_replan_sync,
                                          .checkpoint_io = NULL};
