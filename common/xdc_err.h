/* xdc_err.h — the project-wide error codes, generated from one table so the enum, the values, the messages
 * and the names cannot drift, and the check/propagate macros that leave a "-> rc" trail at debug
 * level (NCCL style). Every fallible function returns xdc_err_t; results travel through out params. */
#ifndef XDC_ERR_H
#define XDC_ERR_H

#include <stddef.h>

/* X(name, value, message). Codes are negative, XDC_OK is 0. Each value is written out and never reused, so a
 * row inserted anywhere cannot renumber the others (values travel between processes and into logs); a new
 * code takes the next unused value. The sysexits code a command ends with is chosen in one place,
 * orchestrator/cli/cli_exit.c. The table is kept in columns. */
// clang-format off
#define XDC_ERROR_TABLE(X)                                      \
    X(INVALID,      -999, "invalid argument")                   \
    X(NOMEM,        -998, "out of memory")                      \
    X(IO,           -997, "I/O error")                          \
    X(CONFIG,       -996, "invalid configuration")              \
    X(PROTO,        -995, "protocol error")                     \
    X(CORRUPT,      -994, "data corrupt (checksum or format)")  \
    X(RANGE,        -993, "value out of range")                 \
    X(TIMEOUT,      -992, "deadline exceeded")                  \
    X(AGAIN,        -991, "operation in progress")              \
    X(CLOSED,       -990, "connection closed")                  \
    X(UNAVAILABLE,  -989, "resource or peer unavailable")       \
    X(PEER_LOST,    -988, "peer failed")                        \
    X(TLS,          -987, "TLS failure")                        \
    X(AUTH,         -986, "peer authentication refused")        \
    X(UNSUPPORTED,  -985, "not supported in this build")        \
    X(CUDA,         -984, "CUDA error")                         \
    X(NCCL,         -983, "NCCL error")                         \
    X(INTERNAL,     -982, "internal error")                     \
    X(INTERRUPTED,  -981, "interrupted by a signal")
// clang-format on

typedef enum {
    XDC_OK = 0,
#define XDC_ERR_ENUM_(name, value, msg) XDC_ERR_##name = (value),
    XDC_ERROR_TABLE(XDC_ERR_ENUM_)
#undef XDC_ERR_ENUM_
} xdc_err_t;

/* Message for a code; never NULL, also for unknown values. */
const char *xdc_strerror(xdc_err_t err);
/* Short symbolic name ("XDC_ERR_TIMEOUT"). */
const char *xdc_errname(xdc_err_t err);

/* Error detail for a caller: which file:line:col, which peer. Lives in the caller's buffer, never in a
 * process-wide global. All helpers accept a NULL diag. */
typedef struct xdc_diag {
    char msg[512];
} xdc_diag;

void xdc_diag_set(xdc_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepend context: "ctx: <previous message>". */
void xdc_diag_prefix(xdc_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void xdc_diag_clear(xdc_diag *d);

/* Trail hook used by the macros below: logs "file:line -> ERRNAME" at debug level. */
void xdc_err_trail(const char *file, int line, xdc_err_t err);

#define XDC_CHECK(call)                                 \
    do {                                                \
        xdc_err_t xdc_rc_ = (call);                     \
        if (xdc_rc_ != XDC_OK) {                        \
            xdc_err_trail(__FILE__, __LINE__, xdc_rc_); \
            return xdc_rc_;                             \
        }                                               \
    } while (0)

/* Propagate into `rc` and jump to a cleanup label. */
#define XDC_CHECK_GOTO(call, rc, label)              \
    do {                                             \
        (rc) = (call);                               \
        if ((rc) != XDC_OK) {                        \
            xdc_err_trail(__FILE__, __LINE__, (rc)); \
            goto label;                              \
        }                                            \
    } while (0)

/* Fail with `err` when `cond` is false. */
#define XDC_REQUIRE(cond, err)                        \
    do {                                              \
        if (!(cond)) {                                \
            xdc_err_trail(__FILE__, __LINE__, (err)); \
            return (err);                             \
        }                                             \
    } while (0)

#endif /* XDC_ERR_H */
