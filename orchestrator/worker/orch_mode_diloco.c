/* orch_mode_diloco.c — DiLoCo: every step syncs gradients over the region's replicas only (no WAN);
 * every H steps the pseudo-gradient `global − local` of the whole stage goes across regions (codec +
 * error feedback) and an outer Nesterov step updates the global parameters: m = μm + Δ;
 * global −= η(Δ + μm); local = global. A run ends with a final outer round so all regions report one
 * model. Checkpoints are taken at outer-round boundaries only, with the outer momentum next to the
 * stage checkpoint. The outer loop (orch_outer_*) is shared with streaming mode. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static double now_s(void) { return (double)xdc_now_ns() / 1e9; }

xdc_err_t orch_outer_setup(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag)
{
    size_t n = w->model.n_params;
    o->global = xdc_malloc(n * sizeof(float));
    o->mom = xdc_calloc(n, sizeof(float));
    o->pseudo = xdc_malloc(n * sizeof(float));
    if (!o->global || !o->mom || !o->pseudo) return XDC_ERR_NOMEM;
    memcpy(o->global, xdc_gpt_stage_params(w->model.st), n * sizeof(float));
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 1, &sc);
    sc.dp = dp;
    sc.name = "pseudo-gradients";
    return xdc_sync_create(w->comm.sync_eng, &sc, &o->sync, diag);
}

void orch_outer_destroy(orch_outer *o)
{
    xdc_sync_destroy(o->sync);
    xdc_free(o->global);
    xdc_free(o->mom);
    xdc_free(o->pseudo);
    memset(o, 0, sizeof *o);
}

void orch_outer_update(orch_worker *w, orch_outer *o, size_t lo, size_t hi)
{
    float lr = (float)w->cfg.outer_lr, mu = (float)w->cfg.outer_momentum;
    for (size_t i = lo; i < hi; i++) {
        o->mom[i] = mu * o->mom[i] + o->pseudo[i];
        o->global[i] -= lr * (o->pseudo[i] + mu * o->mom[i]);
    }
}

xdc_err_t orch_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag)
{
    float *p = xdc_gpt_stage_params(w->model.st);
    for (size_t i = 0; i < w->model.n_params; i++) o->pseudo[i] = o->global[i] - p[i];
    XDC_CHECK(xdc_sync_begin(o->sync, o->pseudo));
    double t0 = now_s();
    xdc_err_t rc = xdc_sync_end(o->sync, diag);
    w->prog.t_wan_exposed += now_s() - t0;
    XDC_CHECK(rc);
    orch_outer_update(w, o, 0, w->model.n_params);
    memcpy(p, o->global, w->model.n_params * sizeof(float));
    return XDC_OK;
}

typedef struct {
    xdc_sync *grad; /* replicas only */
    orch_outer outer;
} diloco_state;

static xdc_err_t diloco_setup(orch_worker *w, void **state, xdc_diag *diag)
{
    diloco_state *st = xdc_calloc(1, sizeof *st);
    if (!st) return XDC_ERR_NOMEM;
    *state = st;
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 0, &sc); /* inner steps: the region's replicas, no WAN */
    XDC_CHECK(xdc_sync_create(w->comm.sync_eng, &sc, &st->grad, diag));
    return orch_outer_setup(w, &st->outer, sc.dp, diag);
}

static xdc_err_t diloco_step(orch_worker *w, void *state, float *loss, xdc_diag *diag)
{
    diloco_state *st = state;
    XDC_CHECK(orch_train_inner_step(w, st->grad, loss, diag));
    if (w->prog.step % w->cfg.diloco_inner_steps == 0) XDC_CHECK(orch_outer_round(w, &st->outer, diag));
    return XDC_OK;
}

static xdc_err_t diloco_finish(orch_worker *w, void *state, xdc_diag *diag)
{
    diloco_state *st = state;
    return w->prog.step % w->cfg.diloco_inner_steps != 0 ? orch_outer_round(w, &st->outer, diag) : XDC_OK;
}

static void diloco_destroy(void *state)
{
    diloco_state *st = state;
    if (!st) return;
    xdc_sync_destroy(st->grad);
    orch_outer_destroy(&st->outer);
    xdc_free(st);
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

static int diloco_checkpoint_ok(const orch_worker *w) { return w->prog.step % w->cfg.diloco_inner_steps == 0; }

/* The outer momentum next to the stage checkpoint: raw fp32 (n_params), checked by size. On load the
 * global parameters become the checkpoint's (taken at an outer-round boundary, where local = global). */
static xdc_err_t diloco_checkpoint_io(orch_worker *w, void *state, const char *dir, int save, xdc_diag *diag)
{
    diloco_state *st = state;
    char path[1200];
    snprintf(path, sizeof path, "%s/outer-momentum.f32", dir);
    FILE *f = fopen(path, save ? "wb" : "rb");
    size_t n = 0, want = w->model.n_params;
    if (f) {
        n = save ? fwrite(st->outer.mom, sizeof(float), want, f) : fread(st->outer.mom, sizeof(float), want, f);
        if (save && fflush(f) == 0) fsync(fileno(f));
        fclose(f);
    }
    if (n != want) {
        xdc_diag_set(diag, "%s: cannot %s %zu floats", path, save ? "write" : "read", want);
        return save ? XDC_ERR_IO : XDC_ERR_CORRUPT;
    }
    if (!save) memcpy(st->outer.global, xdc_gpt_stage_params(w->model.st), want * sizeof(float));
    return XDC_OK;
}

const orch_mode_ops orch_mode_diloco_ops = {.name = "diloco",
                                            .setup = diloco_setup,
                                            .step = diloco_step,
                                            .finish = diloco_finish,
                                            .destroy = diloco_destroy,
                                            .syncs = diloco_syncs,
                                            .replan_sync = diloco_replan_sync,
                                            .checkpoint_ok = diloco_checkpoint_ok,
                                            .checkpoint_io = diloco_checkpoint_io};
