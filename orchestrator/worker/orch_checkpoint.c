/* orch_checkpoint.c — run checkpoints: every worker saves its stage checkpoint (xdc_ckpt.h) under
 * RUN/ckpt/step-NNNNNNNN/<region>-<rank>/, all workers meet at a barrier, then global rank 0 writes the
 * MANIFEST last (temp file, fsync, rename). A step folder without a MANIFEST is incomplete and ignored,
 * so a crash in the middle of a checkpoint never leaves a resumable torn state.
 *
 * Limits: the error-feedback residuals of lossy codecs are not saved (a resumed run restarts them from
 * zero; with codec `none` a resumed run is bit-identical to an uninterrupted one). DiLoCo checkpoints
 * are taken at outer-round boundaries only, where local and global parameters agree (the outer momentum
 * is saved as well); streaming mode does not checkpoint. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "model/xdc_ckpt.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void worker_dir(const orch_worker *w, int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt/step-%08lld/%s-%d", w->run_dir, (long long)step, w->region, w->lrank);
}

static xdc_err_t mkdirs(const char *path, xdc_diag *diag)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(tmp, 0755);
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && access(tmp, W_OK) != 0) {
        xdc_diag_set(diag, "cannot create checkpoint folder %s", tmp);
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

/* Outer momentum of DiLoCo next to the stage checkpoint: raw fp32 (n_params), checked by size. */
static xdc_err_t momentum_io(orch_worker *w, const char *dir, int save, xdc_diag *diag)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/outer-momentum.f32", dir);
    FILE *f = fopen(path, save ? "wb" : "rb");
    size_t n = 0;
    if (f) {
        n = save ? fwrite(w->outer_mom, sizeof(float), w->n_params, f)
                 : fread(w->outer_mom, sizeof(float), w->n_params, f);
        if (save && fflush(f) == 0) fsync(fileno(f));
        fclose(f);
    }
    if (n != w->n_params) {
        xdc_diag_set(diag, "%s: cannot %s %zu floats", path, save ? "write" : "read", w->n_params);
        return save ? XDC_ERR_IO : XDC_ERR_CORRUPT;
    }
    return XDC_OK;
}

int orch_checkpoint_due(const orch_worker *w)
{
    int every = w->cfg.checkpoint_every;
    if (every <= 0 || w->step % every != 0 || w->step >= w->cfg.train.steps) return 0;
    if (w->cfg.mode == ORCH_MODE_STREAMING) return 0;
    if (w->cfg.mode == ORCH_MODE_DILOCO && w->step % w->cfg.diloco_inner_steps != 0) return 0;
    return 1;
}

xdc_err_t orch_checkpoint_save(orch_worker *w, xdc_diag *diag)
{
    char dir[1024];
    worker_dir(w, w->step, dir, sizeof dir);
    XDC_CHECK(mkdirs(dir, diag));
    xdc_ckpt_meta meta = {.stage = w->stage, .n_stages = w->n_stages, .step = w->step};
    if (w->data) meta.data_pos = xdc_data_get_pos(w->data);
    XDC_CHECK(xdc_ckpt_save(dir, w->st, &meta, diag));
    if (w->cfg.mode == ORCH_MODE_DILOCO) XDC_CHECK(momentum_io(w, dir, 1, diag));
    /* One reusable barrier for every checkpoint: all workers checkpoint at the same steps. */
    XDC_CHECK(rdzv_barrier(w->rdzv, "checkpoint", w->gsize, w->cfg.op_timeout_ms, diag));
    if (w->grank != 0) return XDC_OK;
    char manifest[1100], tmp[1200];
    snprintf(manifest, sizeof manifest, "%s/ckpt/step-%08lld/MANIFEST", w->run_dir, (long long)w->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", manifest);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        xdc_diag_set(diag, "cannot write %s", tmp);
        return XDC_ERR_IO;
    }
    fprintf(f, "{\"step\": %lld, \"workers\": %d, \"mode\": \"%s\", \"run\": \"%s\"}\n", (long long)w->step, w->gsize,
            orch_mode_name(w->cfg.mode), w->run_id);
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    fclose(f);
    if (!ok || rename(tmp, manifest) != 0) {
        xdc_diag_set(diag, "cannot commit %s", manifest);
        return XDC_ERR_IO;
    }
    XDC_INFO(XDC_SUB_ORCH, "checkpoint of step %lld complete", (long long)w->step);
    return XDC_OK;
}

/* Newest step with a MANIFEST, or -1. */
static int64_t newest_complete(const char *run_dir)
{
    char base[1024];
    snprintf(base, sizeof base, "%s/ckpt", run_dir);
    DIR *d = opendir(base);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        if (sscanf(e->d_name, "step-%lld", &step) != 1) continue;
        char manifest[1400];
        snprintf(manifest, sizeof manifest, "%s/%s/MANIFEST", base, e->d_name);
        if (access(manifest, R_OK) == 0 && step > best) best = step;
    }
    closedir(d);
    return best;
}

xdc_err_t orch_checkpoint_resume(orch_worker *w, xdc_diag *diag)
{
    int64_t step = newest_complete(w->run_dir);
    if (step < 0) {
        XDC_INFO(XDC_SUB_ORCH, "resume: no complete checkpoint under %s/ckpt; starting from step 0", w->run_dir);
        return XDC_OK;
    }
    char dir[1024];
    worker_dir(w, step, dir, sizeof dir);
    xdc_ckpt_meta meta;
    XDC_CHECK(xdc_ckpt_load(dir, w->stage, w->st, &meta, diag));
    if (w->data) XDC_CHECK(xdc_data_set_pos(w->data, meta.data_pos));
    if (w->cfg.mode == ORCH_MODE_DILOCO) {
        XDC_CHECK(momentum_io(w, dir, 0, diag));
        memcpy(w->global_params, xdc_gpt_stage_params(w->st), w->n_params * sizeof(float));
    }
    w->step = meta.step;
    XDC_INFO(XDC_SUB_ORCH, "resumed from the checkpoint of step %lld (%s)", (long long)step, dir);
    return XDC_OK;
}
