/* xdc_parse.c — the one strict integer and HOST:PORT parser of the tree (see xdc_parse.h). Digits are
 * accumulated by hand instead of through strtol, which accepts leading spaces, '+', and stops quietly
 * at the first non-digit. */
#include "common/xdc_parse.h"

#include <string.h>

xdc_err_t xdc_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out, xdc_diag *diag)
{
    const char *p = text ? text : "";
    int neg = *p == '-';
    p += neg;
    uint64_t mag = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int ok = *p != '\0';
    for (; ok && *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        ok = d <= 9 && mag <= (limit - d) / 10;
        mag = mag * 10 + d;
    }
    int64_t v = 0;
    if (ok) v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    if (!ok || v < lo || v > hi) {
        xdc_diag_set(diag, "'%s' is not an integer in %lld..%lld", text ? text : "", (long long)lo, (long long)hi);
        return XDC_ERR_INVALID;
    }
    *out = v;
    return XDC_OK;
}

xdc_err_t xdc_parse_int(const char *text, int lo, int hi, int *out, xdc_diag *diag)
{
    int64_t v;
    XDC_CHECK(xdc_parse_i64(text, lo, hi, &v, diag));
    *out = (int)v;
    return XDC_OK;
}

xdc_err_t xdc_parse_host_port(const char *text, char *host, size_t host_cap, int *port, xdc_diag *diag)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (!colon || colon == text || (size_t)(colon - text) >= host_cap) {
        xdc_diag_set(diag, "'%s' is not HOST:PORT", text ? text : "");
        return XDC_ERR_INVALID;
    }
    if (xdc_parse_int(colon + 1, 1, 65535, port, NULL) != XDC_OK) {
        xdc_diag_set(diag, "'%s' is not HOST:PORT with a port in 1..65535", text);
        return XDC_ERR_INVALID;
    }
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    return XDC_OK;
}
