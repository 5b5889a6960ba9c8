/* xdc_err.c — messages and names generated from XDC_ERROR_TABLE; the diag buffer helpers. */
#include "common/xdc_err.h"
#include "common/xdc_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A switch over the table: a value written twice fails to compile (duplicate case value). */
const char *xdc_strerror(xdc_err_t err)
{
    switch (err) {
    case XDC_OK: return "success";
#define XDC_ERR_MSG_(name, value, msg) \
    case XDC_ERR_##name: return msg;
        XDC_ERROR_TABLE(XDC_ERR_MSG_)
#undef XDC_ERR_MSG_
    }
    return "unknown error";
}

const char *xdc_errname(xdc_err_t err)
{
    switch (err) {
    case XDC_OK: return "XDC_OK";
#define XDC_ERR_NAME_(name, value, msg) \
    case XDC_ERR_##name: return "XDC_ERR_" #name;
        XDC_ERROR_TABLE(XDC_ERR_NAME_)
#undef XDC_ERR_NAME_
    }
    return "XDC_ERR_UNKNOWN";
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
