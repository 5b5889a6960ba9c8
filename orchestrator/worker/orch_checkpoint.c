/* orch_checkpoint.c — run checkpoints: every worker saves its stage checkpoint (xdc_ckpt.h), the
 * error-feedback residuals of every sync of its mode and the mode's own state (DiLoCo and streaming: the
 * outer global parameters and momentum) under RUN/ckpt/step-NNNNNNNN/<region>-<rank>/ (with
 * `checkpoint_failure: continue` it posts whether it managed as ckpt/<R>/<rank>), and all workers meet at
 * a barrier; then global rank 0 writes the MANIFEST (orch_manifest.h) last, and only when every worker
 * wrote its files. A step folder without a MANIFEST is
 * incomplete and ignored, so a crash or a full disk in the middle of a checkpoint never leaves a resumable
 * torn state, and the previous complete checkpoint (its own folder) stays as it was.
 *
 * What a checkpoint holds is everything a resumed run needs to be bit-identical to an uninterrupted one:
 * parameters, AdamW moments and step, data position, EF residuals, outer state, and (in the MANIFEST) the
 * WAN codec and DiLoCo period a re-plan may have changed. Every mode checkpoints at any step: streaming
 * sends its fragment at the start of the next step (orch_mode_streaming.c), so none is in flight at a step
 * boundary. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "model/xdc_ckpt.h"
#include "orchestrator/launch/orch_manifest.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <stdio.h>
#include <string.h>

#define RESIDUALS_FILE "residuals.ckpt"

static void worker_dir(const orch_worker *w, int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt/step-%08lld/%s-%d", w->id->run_dir, (long long)step, w->id->region, w->id->lrank);
}

int orch_checkpoint_due(const orch_worker *w)
{
    int every = w->cfg->checkpoint_every;
    return every > 0 && w->prog.step % every == 0 && w->prog.step < w->cfg->train.steps;
}

/* The residuals of every sync of the mode, in creation order, as one state file. */
static xdc_err_t residuals_io(orch_worker *w, const char *dir, int save, xdc_diag *diag)
{
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += xdc_sync_residual_elems(syncs[i]);
    float *host = xdc_malloc((total ? total : 1) * sizeof(float)); /* (total) fp32, sync after sync */
    if (!host) return XDC_ERR_NOMEM;
    xdc_err_t rc = XDC_OK;
    if (!save) rc = xdc_ckpt_blob_load(dir, RESIDUALS_FILE, host, total * sizeof(float), diag);
    size_t off = 0;
    for (int i = 0; i < n && rc == XDC_OK; i++) {
        size_t k = xdc_sync_residual_elems(syncs[i]);
        rc = save ? xdc_sync_residual_get(syncs[i], host + off, k, diag)
                  : xdc_sync_residual_set(syncs[i], host + off, k, diag);
        off += k;
    }
    if (save && rc == XDC_OK) rc = xdc_ckpt_blob_save(dir, RESIDUALS_FILE, host, total * sizeof(float), diag);
    xdc_free(host);
    return rc;
}

/* The WAN codec in use, as the MANIFEST records it: with `plan: auto` the planner's word (what a re-plan
 * compares with), else the run's codec in canonical form. */
static void wan_codec_now(const orch_worker *w, char *out, size_t cap)
{
    if (w->cfg->plan_auto) snprintf(out, cap, "%s", w->planned->plan.codec);
    else xdc_codec_format(orch_member_codec(w->member), out, cap);
}

/* This worker's files of the checkpoint. */
static xdc_err_t save_files(orch_worker *w, const char *dir, xdc_diag *diag)
{
    XDC_CHECK(orch_mkdirs(dir, 0755, diag));
    xdc_ckpt_meta meta = {.stage = w->id->stage, .n_stages = w->id->n_stages, .step = w->prog.step};
    if (w->model.data) meta.data_pos = xdc_data_get_pos(w->model.data);
    XDC_CHECK(xdc_ckpt_save(dir, w->model.st, &meta, diag));
    XDC_CHECK(residuals_io(w, dir, 1, diag));
    return w->mode->checkpoint_io ? w->mode->checkpoint_io(w, w->mode_state, dir, 1, diag) : XDC_OK;
}

/* Global rank 0, after the barrier: 1 when every worker posted that it wrote this step's files; else the
 * first one that did not is named in `who`. */
static int all_written(orch_worker *w, char *who, size_t cap, xdc_diag *diag)
{
    for (int r = 0; r < w->id->n_regions; r++)
        for (int k = 0; k < w->id->lsize; k++) {
            char val[128];
            long long step = -1;
            char what[16] = "";
            if (rdzv_try_get(orch_member_rdzv(w->member), rdzv_key_ckpt(r, k).s, val, sizeof val, diag) != XDC_OK ||
                sscanf(val, "%lld %15s", &step, what) != 2 || step != w->prog.step || strcmp(what, "ok") != 0) {
                snprintf(who, cap, "%s/%d", w->topo->regions[r].name, k);
                return 0;
            }
        }
    return 1;
}

xdc_err_t orch_checkpoint_save(orch_worker *w, xdc_diag *diag)
{
    char dir[1024];
    worker_dir(w, w->prog.step, dir, sizeof dir);
    xdc_diag d = {{0}};
    xdc_err_t rc = save_files(w, dir, &d);
    if (rc != XDC_OK && (rc != XDC_ERR_IO || !w->cfg->checkpoint_continue)) {
        *diag = d;
        xdc_diag_prefix(diag, "checkpoint of step %lld", (long long)w->prog.step);
        return rc;
    }
    if (rc != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH,
                 "checkpoint of step %lld not written: %s (checkpoint_failure: continue: the run goes on "
                 "without it)",
                 (long long)w->prog.step, d.msg);
    /* With `stop`, a worker that failed never reaches the barrier, so passing it means everyone wrote; with
     * `continue` each posts its outcome first (rank 0 then reads one key per worker). */
    if (w->cfg->checkpoint_continue) {
        char val[64];
        snprintf(val, sizeof val, "%lld %s", (long long)w->prog.step, rc == XDC_OK ? "ok" : "failed");
        XDC_CHECK(rdzv_set(orch_member_rdzv(w->member), rdzv_key_ckpt(w->id->region_idx, w->id->lrank).s, val, diag));
    }
    /* One reusable barrier for every checkpoint: all workers checkpoint at the same steps. */
    XDC_CHECK(rdzv_barrier(orch_member_rdzv(w->member), RDZV_BARRIER_CHECKPOINT, w->id->gsize,
                           w->cfg->timeouts.operation_ms, diag));
    if (w->id->grank != 0) return XDC_OK;
    char who[XDC_NAME_MAX + 16];
    if (w->cfg->checkpoint_continue && !all_written(w, who, sizeof who, diag)) {
        XDC_WARN(XDC_SUB_ORCH,
                 "checkpoint of step %lld incomplete: %s did not write its files; no MANIFEST, the "
                 "newest complete checkpoint stays the one before",
                 (long long)w->prog.step, who);
        return XDC_OK;
    }
    orch_manifest m;
    XDC_CHECK(orch_manifest_expect(w->cfg, w->topo, &m, diag));
    m.step = w->prog.step;
    snprintf(m.run, sizeof m.run, "%s", w->id->run_id);
    wan_codec_now(w, m.wan_codec, sizeof m.wan_codec);
    m.period = w->cfg->diloco.inner_steps;
    rc = orch_manifest_write(w->id->run_dir, &m, diag);
    if (rc == XDC_ERR_IO && w->cfg->checkpoint_continue) {
        XDC_WARN(XDC_SUB_ORCH, "checkpoint of step %lld not committed: %s (checkpoint_failure: continue)",
                 (long long)w->prog.step, diag->msg);
        return XDC_OK;
    }
    XDC_CHECK(rc);
    XDC_INFO(XDC_SUB_ORCH, "checkpoint of step %lld complete", (long long)w->prog.step);
    return XDC_OK;
}

xdc_err_t orch_checkpoint_resume(orch_worker *w, xdc_diag *diag)
{
    int64_t step = orch_manifest_newest(w->id->run_dir);
    if (step < 0) {
        XDC_INFO(XDC_SUB_ORCH, "resume: no complete checkpoint under %s/ckpt; starting from step 0", w->id->run_dir);
        return XDC_OK;
    }
    if (w->cfg->sync.delay_steps) { /* run_config refuses checkpoints with it, not a checkpoint of an earlier run */
        xdc_diag_set(diag,
                     "resume: sync.delay_steps %d in %s: the checkpoint of step %lld under %s/ckpt holds no gradient "
                     "average in flight, which a delayed run would apply next; resume with sync.delay_steps 0",
                     w->cfg->sync.delay_steps, w->cfg->path, (long long)step, w->id->run_dir);
        return XDC_ERR_CONFIG;
    }
    orch_manifest found, want;
    XDC_CHECK(orch_manifest_read(w->id->run_dir, step, &found, diag));
    XDC_CHECK(orch_manifest_expect(w->cfg, w->topo, &want, diag));
    XDC_CHECK(orch_manifest_check(w->id->run_dir, &found, &want, diag));
    char dir[1024];
    worker_dir(w, step, dir, sizeof dir);
    xdc_ckpt_meta meta;
    XDC_CHECK(xdc_ckpt_load(dir, w->id->stage, w->cfg->train.steps, w->model.st, &meta, diag));
    if (meta.step != step) {
        xdc_diag_set(diag, "%s: field step is %lld, but the checkpoint lies in the folder of step %lld", dir,
                     (long long)meta.step, (long long)step);
        return XDC_ERR_CORRUPT;
    }
    if (w->model.data && xdc_data_set_pos(w->model.data, meta.data_pos) != XDC_OK) {
        xdc_diag_set(diag, "%s: field data_batch is %llu; the data has %llu batches per epoch", dir,
                     (unsigned long long)meta.data_pos.batch,
                     (unsigned long long)xdc_data_batches_per_epoch(w->model.data));
        return XDC_ERR_CORRUPT;
    }
    /* The codec and period a re-plan chose before the checkpoint, before the residuals (their size is the
     * codec's). */
    char now[32];
    wan_codec_now(w, now, sizeof now);
    if (strcmp(now, found.wan_codec) != 0 || found.period != w->cfg->diloco.inner_steps) {
        XDC_CHECK(orch_train_switch_wan(w, found.wan_codec, found.period, diag));
        XDC_INFO(XDC_SUB_ORCH, "resume: the checkpoint ran codec %s, period %d (re-planned)", found.wan_codec,
                 found.period);
    }
    XDC_CHECK(residuals_io(w, dir, 0, diag));
    if (w->mode->checkpoint_io) XDC_CHECK(w->mode->checkpoint_io(w, w->mode_state, dir, 0, diag));
    w->prog.step = meta.step;
    XDC_INFO(XDC_SUB_ORCH, "resumed from the checkpoint of step %lld (%s)", (long long)step, dir);
    return XDC_OK;
}
