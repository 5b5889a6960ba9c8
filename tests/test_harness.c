/* test_harness.c — the test runner itself: a name filter that selects nothing is a failure, not an
 * empty pass (a mistyped `make test T=...` in CI must not go green). */
#include "tests/xdc_test.h"

#include <limits.h>
#include <stdio.h>
#include <unistd.h>

XDC_TEST(harness_runner_fails_when_the_filter_matches_nothing)
{
    char self[PATH_MAX], cmd[PATH_MAX + 64], out[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    XDC_ASSERT(n > 0);
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "'%s' no_test_is_named_like_this 2>&1", self);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc != 0, "the runner exited 0 on a filter that matches nothing:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "no test matches the filter");
    XDC_ASSERT_STR_CONTAINS(out, "0 passed, 0 failed");
    /* and a filter that matches runs exactly what it names */
    snprintf(cmd, sizeof cmd, "'%s' -l harness_runner_fails_when 2>&1", self);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "harness_runner_fails_when_the_filter_matches_nothing\ttests/test_harness.c");
}
