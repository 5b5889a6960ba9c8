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
#include "common/xdc_parse.h"
#include "model/xdc_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void worker_dir(const orch_worker *w, int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt/step-%08lld/%s-%d", w->id.run_dir, (long long)step, w->id.region, w->id.lrank);
}

static xdc_err_t mkdirs(const char *path, xdc_diag *diag)
{
    xdc_err_t rc = orch_mkdirs(path, 0755, diag);
    if (rc != XDC_OK) xdc_diag_prefix(diag, "checkpoint");
    return rc;
}

int orch_checkpoint_due(const orch_worker *w)
{
    int every = w->cfg.checkpoint_every;
    if (every <= 0 || w->prog.step % every != 0 || w->prog.step >= w->cfg.train.steps) return 0;
    return w->mode->checkpoint_ok(w); /* DiLoCo: outer-round boundaries only; streaming: never */
}

xdc_err_t orch_checkpoint_save(orch_worker *w, xdc_diag *diag)
{
    char dir[1024];
    worker_dir(w, w->prog.step, dir, sizeof dir);
    XDC_CHECK(mkdirs(dir, diag));
    xdc_ckpt_meta meta = {.stage = w->id.stage, .n_stages = w->id.n_stages, .step = w->prog.step};
    if (w->model.data) meta.data_pos = xdc_data_get_pos(w->model.data);
    XDC_CHECK(xdc_ckpt_save(dir, w->model.st, &meta, diag));
    if (w->mode->checkpoint_io) XDC_CHECK(w->mode->checkpoint_io(w, w->mode_state, dir, 1, diag));
    /* One reusable barrier for every checkpoint: all workers checkpoint at the same steps. */
    XDC_CHECK(rdzv_barrier(w->comm.rdzv, "checkpoint", w->id.gsize, w->cfg.op_timeout_ms, diag));
    if (w->id.grank != 0) return XDC_OK;
    char manifest[1100], tmp[1200];
    snprintf(manifest, sizeof manifest, "%s/ckpt/step-%08lld/MANIFEST", w->id.run_dir, (long long)w->prog.step);
    snprintf(tmp, sizeof tmp, "%s.tmp", manifest);
    /* Created afresh, never through a link planted at the temp name (a stale one is removed first). */
    if (unlink(tmp) != 0 && errno != ENOENT) {
        xdc_diag_set(diag, "cannot remove a stale %s: %s", tmp, strerror(errno));
        return XDC_ERR_IO;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        xdc_diag_set(diag, "cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        return XDC_ERR_IO;
    }
    fprintf(f, "{\"step\": %lld, \"workers\": %d, \"mode\": \"%s\", \"run\": \"%s\"}\n", (long long)w->prog.step,
            w->id.gsize, orch_mode_name(w->cfg.mode), w->id.run_id);
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    fclose(f);
    if (!ok || rename(tmp, manifest) != 0) {
        xdc_diag_set(diag, "cannot commit %s", manifest);
        return XDC_ERR_IO;
    }
    XDC_INFO(XDC_SUB_ORCH, "checkpoint of step %lld complete", (long long)w->prog.step);
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
        int64_t step;
        if (strncmp(e->d_name, "step-", 5) != 0 || xdc_parse_i64(e->d_name + 5, 0, INT64_MAX, &step, NULL) != XDC_OK)
            continue;
        char manifest[1400];
        snprintf(manifest, sizeof manifest, "%s/%s/MANIFEST", base, e->d_name);
        if (access(manifest, R_OK) == 0 && step > best) best = step;
    }
    closedir(d);
    return best;
}

xdc_err_t orch_checkpoint_resume(orch_worker *w, xdc_diag *diag)
{
    int64_t step = newest_complete(w->id.run_dir);
    if (step < 0) {
        XDC_INFO(XDC_SUB_ORCH, "resume: no complete checkpoint under %s/ckpt; starting from step 0", w->id.run_dir);
        return XDC_OK;
    }
    char dir[1024];
    worker_dir(w, step, dir, sizeof dir);
    xdc_ckpt_meta meta;
    XDC_CHECK(xdc_ckpt_load(dir, w->id.stage, w->cfg.train.steps, w->model.st, &meta, diag));
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
    if (w->mode->checkpoint_io) XDC_CHECK(w->mode->checkpoint_io(w, w->mode_state, dir, 0, diag));
    w->prog.step = meta.step;
    XDC_INFO(XDC_SUB_ORCH, "resumed from the checkpoint of step %lld (%s)", (long long)step, dir);
    return XDC_OK;
}
