/* orch_manifest.c — the checkpoint MANIFEST (orch_manifest.h): what layout took a checkpoint, the run-wide
 * state a resume restores, and the refusal of a checkpoint of another layout. */
#include "orchestrator/launch/orch_manifest.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_parse.h"
#include "compression/xdc_codec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void manifest_path(const char *run_dir, int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt/step-%08lld/MANIFEST", run_dir, (long long)step);
}

xdc_err_t orch_manifest_expect(const orch_run_config *c, const xdc_topology *t, orch_manifest *out, xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    out->workers = xdc_topology_total_workers(t);
    snprintf(out->mode, sizeof out->mode, "%s", orch_mode_name(c->mode));
    snprintf(out->codec, sizeof out->codec, "%s", c->codec);
    if (strcmp(c->codec, "link") != 0) { /* canonical: "int8" and "int8:128" are one codec */
        xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
        XDC_CHECK(xdc_codec_parse(c->codec, &cc, diag));
        xdc_codec_format(&cc, out->codec, sizeof out->codec);
    }
    char *json = NULL;
    XDC_CHECK(xdc_topology_to_json(t, &json));
    snprintf(out->topology, sizeof out->topology, "%016llx", (unsigned long long)xdc_xxh64(json, strlen(json), 0));
    xdc_free(json);
    return XDC_OK;
}

xdc_err_t orch_manifest_write(const char *run_dir, const orch_manifest *m, xdc_diag *diag)
{
    char path[1100], tmp[1200];
    manifest_path(run_dir, m->step, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    json_t *o = json_pack("{sI si ss ss ss ss ss si}", "step", (json_int_t)m->step, "workers", m->workers, "mode",
                          m->mode, "codec", m->codec, "topology", m->topology, "run", m->run, "wan_codec", m->wan_codec,
                          "period", m->period);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) return XDC_ERR_NOMEM;
    /* Created afresh, never through a link planted at the temp name (a stale one is removed first). */
    xdc_err_t rc = XDC_ERR_IO;
    int fd = -1;
    if (unlink(tmp) != 0 && errno != ENOENT) {
        xdc_diag_set(diag, "cannot remove a stale %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t len = strlen(text);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
        xdc_diag_set(diag, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        fd = -1;
        xdc_diag_set(diag, "cannot commit %s: %s", path, strerror(errno));
        goto out;
    }
    fd = -1;
    rc = XDC_OK;
out:
    if (fd >= 0) close(fd);
    if (rc != XDC_OK) unlink(tmp);
    free(text);
    return rc;
}

int64_t orch_manifest_newest(const char *run_dir)
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
        manifest_path(run_dir, step, manifest, sizeof manifest);
        if (access(manifest, R_OK) == 0 && step > best) best = step;
    }
    closedir(d);
    return best;
}

/* String field `key` of `o` into out[cap]; 0 when missing, not a string or too long. */
static int get_str(json_t *o, const char *key, char *out, size_t cap)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) >= cap) return 0;
    snprintf(out, cap, "%s", json_string_value(v));
    return 1;
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) return 0;
    *out = json_integer_value(v);
    return 1;
}

xdc_err_t orch_manifest_read(const char *run_dir, int64_t step, orch_manifest *out, xdc_diag *diag)
{
    char path[1100];
    manifest_path(run_dir, step, path, sizeof path);
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) {
        int missing = access(path, R_OK) != 0;
        xdc_diag_set(diag, "%s: %s", path, missing ? strerror(errno) : jerr.text);
        return missing ? XDC_ERR_IO : XDC_ERR_CORRUPT;
    }
    int64_t st = 0, workers = 0, period = 0;
    const char *bad = !get_int(o, "step", 0, INT64_MAX, &st)                            ? "step"
                      : !get_int(o, "workers", 1, 1 << 20, &workers)                    ? "workers"
                      : !get_str(o, "mode", out->mode, sizeof out->mode)                ? "mode"
                      : !get_str(o, "codec", out->codec, sizeof out->codec)             ? "codec"
                      : !get_str(o, "topology", out->topology, sizeof out->topology)    ? "topology"
                      : !get_str(o, "run", out->run, sizeof out->run)                   ? "run"
                      : !get_str(o, "wan_codec", out->wan_codec, sizeof out->wan_codec) ? "wan_codec"
                      : !get_int(o, "period", 0, 1 << 30, &period)                      ? "period"
                                                                                        : NULL;
    json_decref(o);
    if (!bad && st != step) bad = "step";
    if (bad) {
        xdc_diag_set(diag, "%s: field %s is missing or out of range (a MANIFEST of step %lld)", path, bad,
                     (long long)step);
        return XDC_ERR_CORRUPT;
    }
    out->step = st;
    out->workers = (int)workers;
    out->period = (int)period;
    return XDC_OK;
}

xdc_err_t orch_manifest_check(const char *run_dir, const orch_manifest *found, const orch_manifest *want,
                              xdc_diag *diag)
{
    char path[1100], a[32], b[32];
    manifest_path(run_dir, found->step, path, sizeof path);
    const char *field = NULL, *was = a, *now = b;
    if (found->workers != want->workers) {
        field = "workers";
        snprintf(a, sizeof a, "%d", found->workers);
        snprintf(b, sizeof b, "%d", want->workers);
    } else if (strcmp(found->mode, want->mode) != 0) {
        field = "mode", was = found->mode, now = want->mode;
    } else if (strcmp(found->codec, want->codec) != 0) {
        field = "codec", was = found->codec, now = want->codec;
    } else if (strcmp(found->topology, want->topology) != 0) {
        field = "topology hash", was = found->topology, now = want->topology;
    }
    if (!field) return XDC_OK;
    xdc_diag_set(diag,
                 "--resume: %s: the checkpoint was taken with %s %s, this run has %s %s; resume it with the "
                 "run file and topology it was taken with",
                 path, field, was, field, now);
    return XDC_ERR_CONFIG;
}
