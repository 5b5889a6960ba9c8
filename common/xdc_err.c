/* xdc_err.c — messages, names and exit codes generated from XDC_ERROR_TABLE; the diag buffer helpers. */
#include "common/xdc_err.h"
#include "common/xdc_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *msg;
    int exit_code;
} err_row;

static const err_row err_rows[] = {
#define XDC_ERR_ROW_(name, msg, ex) {"XDC_ERR_" #name, msg, ex},
    XDC_ERROR_TABLE(XDC_ERR_ROW_)
#undef XDC_ERR_ROW_
};

static const err_row *err_lookup(xdc_err_t err)
{
    int i = (int)err - (int)XDC_ERR_FIRST_ - 1;
    if (i < 0 || i >= (int)(sizeof err_rows / sizeof err_rows[0])) return NULL;
    return &err_rows[i];
}

const char *xdc_strerror(xdc_err_t err)
{
    if (err == XDC_OK) return "success";
    const err_row *r = err_lookup(err);
    return r ? r->msg : "unknown error";
}

const char *xdc_errname(xdc_err_t err)
{
    if (err == XDC_OK) return "XDC_OK";
    const err_row *r = err_lookup(err);
    return r ? r->name : "XDC_ERR_UNKNOWN";
}

int xdc_err_exit_code(xdc_err_t err)
{
    if (err == XDC_OK) return 0;
    const err_row *r = err_lookup(err);
    return r ? r->exit_code : 70;
}

void xdc_diag_set(xdc_diag *d, const char *fmt, ...)
{
    if (!d) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
}

void xdc_diag_prefix(xdc_diag *d, const char *fmt, ...)
{
    if (!d) return;
    char head[256], old[sizeof d->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, d->msg, sizeof old);
    if (old[0]) snprintf(d->msg, sizeof d->msg, "%s: %s", head, old);
    else snprintf(d->msg, sizeof d->msg, "%s", head);
}

void xdc_diag_clear(xdc_diag *d)
{
    if (d) d->msg[0] = '\0';
}

void xdc_err_trail(const char *file, int line, xdc_err_t err)
{
    if (xdc_log_enabled(XDC_LOG_DEBUG, XDC_SUB_ALL))
        xdc_log_write(XDC_LOG_DEBUG, XDC_SUB_COMMON, file, line, "-> %s", xdc_errname(err));
}
