/* xdc_test.h — the test harness API. Each XDC_TEST registers itself; the runner (xdc_test_main.c) forks
 * every test into its own process group with a timeout and reads its verdict from a pipe. A test that
 * makes no assertion is reported as failed: it does not exist. */
#ifndef XDC_TEST_H
#define XDC_TEST_H

#include "common/xdc_err.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*xdc_test_fn)(void);

/* A test's tier is its file's folder: tests/e2e/ holds the end-to-end tests (they start `xdc launch`,
 * `xdc train`, agents, coordinators, etcd, Slurm or network namespaces, or take minutes); every other
 * folder holds unit tests (one process, seconds, safe to run beside each other: `make check`). */
typedef enum { XDC_TIER_UNIT, XDC_TIER_E2E } xdc_test_tier;

/* A serial test holds something the machine has one of (a fixed port, a namespace set, a Slurm cluster,
 * a loopback port picked before its server binds it, one that another test's port 0 could take): the
 * runner runs it alone, never beside another test. */
#define XDC_TEST_SERIAL_FLAG 1u

void xdc_test_register(const char *name, xdc_test_fn fn, int timeout_s, const char *file, unsigned flags);

#define XDC_TEST_REGISTER_(name, timeout_s, flags)                      \
    static void name(void);                                             \
    __attribute__((constructor)) static void name##_register(void)      \
    {                                                                   \
        xdc_test_register(#name, name, (timeout_s), __FILE__, (flags)); \
    }                                                                   \
    static void name(void)
/* Define a test with a timeout in seconds (XDC_TEST uses 60 s); XDC_TEST_SERIAL: one the runner runs
 * alone. */
#define XDC_TEST_T(name, timeout_s)      XDC_TEST_REGISTER_(name, timeout_s, 0u)
#define XDC_TEST_SERIAL(name, timeout_s) XDC_TEST_REGISTER_(name, timeout_s, XDC_TEST_SERIAL_FLAG)
#define XDC_TEST(name)                   XDC_TEST_T(name, 60)

_Noreturn void xdc_test_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* End the test as skipped, saying why ("no GPU", "no CAP_NET_ADMIN"). */
_Noreturn void xdc_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void xdc_test_count_assertion(void);

#define XDC_FAIL(...) xdc_test_fail_at(__FILE__, __LINE__, __VA_ARGS__)

#define XDC_ASSERT(cond)                                      \
    do {                                                      \
        xdc_test_count_assertion();                           \
        if (!(cond)) XDC_FAIL("assertion failed: %s", #cond); \
    } while (0)

#define XDC_ASSERT_MSG(cond, ...)           \
    do {                                    \
        xdc_test_count_assertion();         \
        if (!(cond)) XDC_FAIL(__VA_ARGS__); \
    } while (0)

#define XDC_ASSERT_EQ(a, b)                                                   \
    do {                                                                      \
        long long xa_ = (long long)(a), xb_ = (long long)(b);                 \
        xdc_test_count_assertion();                                           \
        if (xa_ != xb_) XDC_FAIL("%s == %s: %lld != %lld", #a, #b, xa_, xb_); \
    } while (0)

#define XDC_ASSERT_NEAR(a, b, tol)                                                                          \
    do {                                                                                                    \
        double xa_ = (double)(a), xb_ = (double)(b), xt_ = (double)(tol);                                   \
        xdc_test_count_assertion();                                                                         \
        if (!(fabs(xa_ - xb_) <= xt_)) XDC_FAIL("%s ~ %s: %.9g vs %.9g (tol %.3g)", #a, #b, xa_, xb_, xt_); \
    } while (0)

#define XDC_ASSERT_OK(call)                                                                       \
    do {                                                                                          \
        xdc_err_t xe_ = (call);                                                                   \
        xdc_test_count_assertion();                                                               \
        if (xe_ != XDC_OK) XDC_FAIL("%s -> %s (%s)", #call, xdc_errname(xe_), xdc_strerror(xe_)); \
    } while (0)

#define XDC_ASSERT_ERR(call, expected)                                                                            \
    do {                                                                                                          \
        xdc_err_t xe_ = (call);                                                                                   \
        xdc_test_count_assertion();                                                                               \
        if (xe_ != (expected)) XDC_FAIL("%s -> %s, expected %s", #call, xdc_errname(xe_), xdc_errname(expected)); \
    } while (0)

#define XDC_ASSERT_STR_CONTAINS(hay, needle)                                                          \
    do {                                                                                              \
        const char *xh_ = (hay), *xn_ = (needle);                                                     \
        xdc_test_count_assertion();                                                                   \
        if (!xh_ || !strstr(xh_, xn_)) XDC_FAIL("expected \"%s\" in: %s", xn_, xh_ ? xh_ : "(null)"); \
    } while (0)

/* A fresh directory for this test, removed by the runner when the test ends. */
const char *xdc_test_tmpdir(void);
/* Path of a file in the source tree (tests run from the repository root). */
const char *xdc_test_src(const char *rel, char *buf, size_t cap);
/* Path to the xdc binary under test. */
const char *xdc_test_bin(void);
/* Run a shell command, capture stdout+stderr (truncated to cap) and return its exit status (or 128+sig). */
int xdc_test_run(const char *cmd, char *out, size_t cap);
/* Read a whole file into a malloc'd NUL-terminated buffer; NULL on failure. */
char *xdc_test_read_file(const char *path, size_t *len);
void xdc_test_write_file(const char *path, const char *text);

#endif /* XDC_TEST_H */
