/* xdc_err.h — the project-wide error codes, generated from one table so the enum, the message and the
 * sysexits mapping cannot drift, and the check/propagate macros that leave a "-> rc" trail at debug
 * level (NCCL style). Every fallible function returns xdc_err_t; results travel through out params. */
#ifndef XDC_ERR_H
#define XDC_ERR_H

#include <stddef.h>

/* X(name, message, sysexits code). Codes are negative, XDC_OK is 0. The table is kept in columns. */
// clang-format off
#define XDC_ERROR_TABLE(X)                                                       \
    X(INVALID,      "invalid argument",                         64 /* EX_USAGE */)    \
    X(NOMEM,        "out of memory",                            71 /* EX_OSERR */)    \
    X(IO,           "I/O error",                                74 /* EX_IOERR */)    \
    X(CONFIG,       "invalid configuration",                    78 /* EX_CONFIG */)   \
    X(PROTO,        "protocol error",                           76 /* EX_PROTOCOL */) \
    X(CORRUPT,      "data corrupt (checksum or format)",        65 /* EX_DATAERR */)  \
    X(RANGE,        "value out of range",                       65 /* EX_DATAERR */)  \
    X(TIMEOUT,      "deadline exceeded",                        75 /* EX_TEMPFAIL */) \
    X(AGAIN,        "operation in progress",                    75 /* EX_TEMPFAIL */) \
    X(CLOSED,       "connection closed",                        69 /* EX_UNAVAILABLE */) \
    X(UNAVAILABLE,  "resource or peer unavailable",             69 /* EX_UNAVAILABLE */) \
    X(PEER_LOST,    "peer failed",                              69 /* EX_UNAVAILABLE */) \
    X(TLS,          "TLS failure",                              69 /* EX_UNAVAILABLE */) \
    X(AUTH,         "peer authentication refused",              77 /* EX_NOPERM */)   \
    X(UNSUPPORTED,  "not supported in this build",              69 /* EX_UNAVAILABLE */) \
    X(CUDA,         "CUDA error",                               70 /* EX_SOFTWARE */) \
    X(NCCL,         "NCCL error",                               70 /* EX_SOFTWARE */) \
    X(INTERNAL,     "internal error",                           70 /* EX_SOFTWARE */)
// clang-format on

typedef enum {
    XDC_OK = 0,
#define XDC_ERR_ENUM_(name, msg, ex) XDC_ERR_##name,
    XDC_ERR_FIRST_ = -1000,
    XDC_ERROR_TABLE(XDC_ERR_ENUM_)
#undef XDC_ERR_ENUM_
        XDC_ERR_LAST_
} xdc_err_t;

/* Message for a code; never NULL, also for unknown values. */
const char *xdc_strerror(xdc_err_t err);
/* Short symbolic name ("XDC_ERR_TIMEOUT"). */
const char *xdc_errname(xdc_err_t err);
/* The sysexits(3) exit code a command should end with for this error (0 for XDC_OK). */
int xdc_err_exit_code(xdc_err_t err);

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
