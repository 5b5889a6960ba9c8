/* topo_hostlist.c — Slurm hostlist expansion in C ("gpu-[001-016]", "a[1-2]-b[3,5]", "x,y"), so the
 * agent can read SLURM_JOB_NODELIST without scontrol. Zero padding follows the width of the lower bound
 * when it has a leading zero (Slurm's rule). Several bracket groups expand as a cartesian product. */
#include "topology/xdc_topology.h"

#include "common/xdc_alloc.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_MAX 255 /* bytes in one expanded name */

typedef struct {
    char **v;
    int n, cap;
    size_t max;
} host_vec;

static xdc_err_t vec_push(host_vec *hv, const char *name, xdc_diag *diag)
{
    if ((size_t)hv->n >= hv->max) {
        xdc_diag_set(diag, "hostlist expands to more than %zu hosts", hv->max);
        return XDC_ERR_RANGE;
    }
    if (hv->n == hv->cap) {
        int cap = hv->cap ? hv->cap * 2 : 16;
        char **nv = xdc_realloc(hv->v, (size_t)cap * sizeof *nv);
        if (!nv) return XDC_ERR_NOMEM;
        hv->v = nv;
        hv->cap = cap;
    }
    if (!(hv->v[hv->n] = xdc_strdup(name))) return XDC_ERR_NOMEM;
    hv->n++;
    return XDC_OK;
}

/* Expand one host term (no top-level commas): prefix '[' ranges ']' rest, recursively. `out` holds the
 * already-expanded prefix. */
static xdc_err_t expand_term(const char *term, char *out, size_t out_len, host_vec *hv, xdc_diag *diag)
{
    const char *lb = strchr(term, '[');
    if (!lb) {
        if (out_len + strlen(term) > HOST_MAX) {
            xdc_diag_set(diag, "host name longer than %d characters", HOST_MAX);
            return XDC_ERR_RANGE;
        }
        snprintf(out + out_len, HOST_MAX + 1 - out_len, "%s", term);
        if (!out[0]) {
            xdc_diag_set(diag, "empty host name");
            return XDC_ERR_INVALID;
        }
        return vec_push(hv, out, diag);
    }
    const char *rb = strchr(lb, ']');
    if (!rb) {
        xdc_diag_set(diag, "unclosed '[' in \"%s\"", term);
        return XDC_ERR_INVALID;
    }
    size_t plen = (size_t)(lb - term);
    if (out_len + plen > HOST_MAX) {
        xdc_diag_set(diag, "host name longer than %d characters", HOST_MAX);
        return XDC_ERR_RANGE;
    }
    memcpy(out + out_len, term, plen);
    size_t base = out_len + plen;
    if (rb == lb + 1) {
        xdc_diag_set(diag, "empty range '[]' in \"%s\"", term);
        return XDC_ERR_INVALID;
    }
    const char *p = lb + 1;
    while (p < rb) {
        const char *end = memchr(p, ',', (size_t)(rb - p));
        if (!end) end = rb;
        const char *dash = memchr(p, '-', (size_t)(end - p));
        const char *lo_end = dash ? dash : end;
        size_t width = (size_t)(lo_end - p);
        for (const char *q = p; q < end; q++)
            if (!isdigit((unsigned char)*q) && q != dash) {
                xdc_diag_set(diag, "'%c' in range \"%.*s\" is not a digit", *q, (int)(rb - lb + 1), lb);
                return XDC_ERR_INVALID;
            }
        if (width == 0 || (dash && dash + 1 == end) || width > 9 || (dash && end - dash - 1 > 9)) {
            xdc_diag_set(diag, "malformed range \"%.*s\"", (int)(rb - lb + 1), lb);
            return XDC_ERR_INVALID;
        }
        long lo = strtol(p, NULL, 10), hi = dash ? strtol(dash + 1, NULL, 10) : lo;
        if (hi < lo) {
            xdc_diag_set(diag, "range %ld-%ld runs backwards", lo, hi);
            return XDC_ERR_INVALID;
        }
        if ((size_t)(hi - lo) >= hv->max) {
            xdc_diag_set(diag, "hostlist expands to more than %zu hosts", hv->max);
            return XDC_ERR_RANGE;
        }
        int pad = p[0] == '0' && width > 1 ? (int)width : 0;
        for (long v = lo; v <= hi; v++) {
            char num[24];
            int nl = snprintf(num, sizeof num, "%0*ld", pad, v);
            if (base + (size_t)nl > HOST_MAX) {
                xdc_diag_set(diag, "host name longer than %d characters", HOST_MAX);
                return XDC_ERR_RANGE;
            }
            memcpy(out + base, num, (size_t)nl);
            XDC_CHECK(expand_term(rb + 1, out, base + (size_t)nl, hv, diag));
        }
        p = end + 1;
    }
    return XDC_OK;
}

xdc_err_t xdc_hostlist_expand(const char *expr, size_t max_hosts, char ***hosts, int *n_hosts, xdc_diag *diag)
{
    *hosts = NULL;
    *n_hosts = 0;
    host_vec hv = {NULL, 0, 0, max_hosts};
    size_t len = strlen(expr);
    char *copy = xdc_strdup(expr);
    if (!copy) return XDC_ERR_NOMEM;
    xdc_err_t rc = XDC_OK;
    char out[HOST_MAX + 1];
    /* Split at commas outside brackets. */
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i <= len && rc == XDC_OK; i++) {
        char c = copy[i];
        if (c == '[') {
            if (depth++) {
                xdc_diag_set(diag, "nested '[' in \"%s\"", expr);
                rc = XDC_ERR_INVALID;
            }
        } else if (c == ']') {
            if (--depth < 0) {
                xdc_diag_set(diag, "unmatched ']' in \"%s\"", expr);
                rc = XDC_ERR_INVALID;
            }
        } else if ((c == ',' && depth == 0) || c == '\0') {
            if (depth) {
                xdc_diag_set(diag, "unclosed '[' in \"%s\"", expr);
                rc = XDC_ERR_INVALID;
                break;
            }
            copy[i] = '\0';
            char *term = copy + start;
            if (!*term) {
                xdc_diag_set(diag, "empty host name in \"%s\"", expr);
                rc = XDC_ERR_INVALID;
                break;
            }
            rc = expand_term(term, out, 0, &hv, diag);
            start = i + 1;
        } else if (isspace((unsigned char)c)) {
            xdc_diag_set(diag, "whitespace inside host name in \"%s\"", expr);
            rc = XDC_ERR_INVALID;
        }
    }
    xdc_free(copy);
    if (rc != XDC_OK) {
        xdc_hostlist_free(hv.v, hv.n);
        return rc;
    }
    *hosts = hv.v;
    *n_hosts = hv.n;
    return XDC_OK;
}

void xdc_hostlist_free(char **hosts, int n_hosts)
{
    if (!hosts) return;
    for (int i = 0; i < n_hosts; i++) xdc_free(hosts[i]);
    xdc_free(hosts);
}
