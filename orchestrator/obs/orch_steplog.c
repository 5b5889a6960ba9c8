/* orch_steplog.c — write and read RUN/steps/<region>-<rank>.tsv (format in orch_steplog.h). */
#include "orchestrator/obs/orch_steplog.h"

#include "common/xdc_alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct orch_steplog {
    FILE *f;
    char path[512];
};

xdc_err_t orch_steplog_open(const char *path, orch_steplog **out, xdc_diag *diag)
{
    orch_steplog *l = xdc_calloc(1, sizeof *l);
    if (!l) return XDC_ERR_NOMEM;
    snprintf(l->path, sizeof l->path, "%s", path);
    l->f = fopen(path, "w");
    if (!l->f) {
        xdc_diag_set(diag, "step log %s: %s", path, strerror(errno));
        xdc_free(l);
        return XDC_ERR_IO;
    }
    fprintf(l->f, "%s\n", ORCH_STEPLOG_HEADER);
    *out = l;
    return XDC_OK;
}

void orch_steplog_append(orch_steplog *l, const orch_steplog_row *r)
{
    if (!l) return;
    fprintf(l->f, "%" PRId64 "\t%.4f\t%.6f\t%.6f\t%.6f\t%.6f\t%" PRIu64 "\t", r->step, r->elapsed_s, r->step_s,
            r->compute_s, r->intra_s, r->wan_exposed_s, r->wan_tx_bytes);
    if (isnan(r->val_loss)) fputs("-\n", l->f);
    else fprintf(l->f, "%.4f\n", r->val_loss);
}

xdc_err_t orch_steplog_close(orch_steplog *l, xdc_diag *diag)
{
    if (!l) return XDC_OK;
    int bad = ferror(l->f) != 0;
    bad |= fclose(l->f) != 0;
    if (bad) xdc_diag_set(diag, "step log %s: write failed", l->path);
    xdc_free(l);
    return bad ? XDC_ERR_IO : XDC_OK;
}

/* One data line (NUL-terminated, no newline); 0 when it has the eight fields with sane values. */
static int parse_row(const char *line, orch_steplog_row *r)
{
    char val[32];
    int used = 0;
    if (sscanf(line, "%" SCNd64 "\t%lf\t%lf\t%lf\t%lf\t%lf\t%" SCNu64 "\t%31s%n", &r->step, &r->elapsed_s, &r->step_s,
               &r->compute_s, &r->intra_s, &r->wan_exposed_s, &r->wan_tx_bytes, val, &used) != 8)
        return -1;
    if (line[used] != '\0') return -1;
    if (strcmp(val, "-") == 0) r->val_loss = NAN;
    else {
        char *end;
        r->val_loss = strtod(val, &end);
        if (*end || !isfinite(r->val_loss)) return -1;
    }
    double t[5] = {r->elapsed_s, r->step_s, r->compute_s, r->intra_s, r->wan_exposed_s};
    for (int i = 0; i < 5; i++)
        if (!isfinite(t[i]) || t[i] < 0) return -1;
    return r->step >= 0 ? 0 : -1;
}

xdc_err_t orch_steplog_parse(const char *text, size_t len, const char *name, orch_steplog_row **rows, size_t *n,
                             xdc_diag *diag)
{
    *rows = NULL;
    *n = 0;
    xdc_err_t rc = XDC_OK;
    size_t cap = 0, lineno = 0, pos = 0;
    char line[ORCH_STEPLOG_LINE_MAX];
    while (rc == XDC_OK && pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        lineno++;
        /* a line longer than any row, or with a NUL inside, is not one */
        int fits = ll < sizeof line && memchr(text + pos, '\0', ll) == NULL;
        if (fits) memcpy(line, text + pos, ll);
        line[fits ? ll : 0] = '\0';
        pos += ll + 1;
        if (lineno == 1) {
            if (!fits || strcmp(line, ORCH_STEPLOG_HEADER) != 0) {
                xdc_diag_set(diag, "%s:1: not a step log (expected the header \"%s\")", name, ORCH_STEPLOG_HEADER);
                rc = XDC_ERR_CORRUPT;
            }
            continue;
        }
        if (*n == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            orch_steplog_row *grown = xdc_realloc(*rows, ncap * sizeof **rows);
            if (!grown) {
                rc = XDC_ERR_NOMEM;
                break;
            }
            *rows = grown;
            cap = ncap;
        }
        if (!fits || parse_row(line, &(*rows)[*n]) != 0) {
            xdc_diag_set(diag, "%s:%zu: not a step-log row (8 tab-separated fields, times >= 0)", name, lineno);
            rc = XDC_ERR_CORRUPT;
            break;
        }
        (*n)++;
    }
    if (rc == XDC_OK && lineno == 0) {
        xdc_diag_set(diag, "%s: empty, not a step log", name);
        rc = XDC_ERR_CORRUPT;
    }
    if (rc != XDC_OK) {
        xdc_free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

xdc_err_t orch_steplog_read(const char *path, orch_steplog_row **rows, size_t *n, xdc_diag *diag)
{
    *rows = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        xdc_diag_set(diag, "%s: %s", path, strerror(errno));
        return XDC_ERR_IO;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    xdc_err_t rc = XDC_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= ORCH_STEPLOG_FILE_MAX) {
                xdc_diag_set(diag, "%s: larger than %d MiB, not a step log", path, ORCH_STEPLOG_FILE_MAX >> 20);
                rc = XDC_ERR_CORRUPT;
                break;
            }
            char *grown = xdc_realloc(text, cap = cap ? 2 * cap : 1 << 16);
            if (!grown) {
                rc = XDC_ERR_NOMEM;
                break;
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (rc == XDC_OK && ferror(f)) {
        xdc_diag_set(diag, "%s: read failed", path);
        rc = XDC_ERR_IO;
    }
    fclose(f);
    if (rc == XDC_OK) rc = orch_steplog_parse(text, len, path, rows, n, diag);
    xdc_free(text);
    return rc;
}
