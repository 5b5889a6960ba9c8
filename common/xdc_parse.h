/* xdc_parse.h — strict parsing of integers and HOST:PORT from command lines, environment variables,
 * config values and wire text: the whole string must be the value (no sign games, no trailing bytes,
 * no silent 0 for "abc"), inside the caller's range. Errors go into a diag without the name of the flag
 * or key, which the caller prefixes ("--port: 'abc' is not an integer in 0..65535"). */
#ifndef XDC_PARSE_H
#define XDC_PARSE_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

/* Base-10 integer in [lo, hi]: optional '-' for negative ranges, then digits only. XDC_ERR_INVALID
 * ("'abc' is not an integer in LO..HI") when text is NULL, empty, has any other byte, or lies outside
 * the range; *out is untouched then. */
xdc_err_t xdc_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out, xdc_diag *diag);
/* The same for an int. */
xdc_err_t xdc_parse_int(const char *text, int lo, int hi, int *out, xdc_diag *diag);
/* "HOST:PORT" (the last ':' splits; HOST non-empty, shorter than host_cap; PORT strictly 1..65535). */
xdc_err_t xdc_parse_host_port(const char *text, char *host, size_t host_cap, int *port, xdc_diag *diag);

#endif /* XDC_PARSE_H */
