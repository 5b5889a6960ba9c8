/* test_harness.c — the test runner itself: a name filter that selects nothing is a failure, not an
 * empty pass (a mistyped `make test T=...` in CI must not go green); a test's tier is its folder and
 * --tier selects by it; a serial test runs alone, whatever -j says. */
#include "tests/xdc_test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The runner binary this test runs in. */
static void self_path(char *self, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", self, cap - 1);
    XDC_ASSERT(n > 0);
    self[n] = '\0';
}

XDC_TEST(harness_runner_fails_when_the_filter_matches_nothing)
{
    char self[PATH_MAX], cmd[PATH_MAX + 64], out[4096];
    self_path(self, sizeof self);
    snprintf(cmd, sizeof cmd, "'%s' no_test_is_named_like_this 2>&1", self);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc != 0, "the runner exited 0 on a filter that matches nothing:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "no test matches the filter");
    XDC_ASSERT_STR_CONTAINS(out, "0 passed, 0 failed");
    /* and a filter that matches runs exactly what it names */
    snprintf(cmd, sizeof cmd, "'%s' -l harness_runner_fails_when 2>&1", self);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out,
                            "harness_runner_fails_when_the_filter_matches_nothing\ttests/harness/test_harness.c\tunit");
}

/* -l names each test's file and tier (tests/e2e/ is the end-to-end tier, any other folder unit) and
 * marks the serial ones; --tier lists or runs one tier only; a tier that does not exist is a usage error. */
XDC_TEST(harness_tier_is_the_folder_and_selects)
{
    char self[PATH_MAX], cmd[PATH_MAX + 64];
    static char out[1 << 16];
    self_path(self, sizeof self);
    snprintf(cmd, sizeof cmd, "'%s' -l --tier e2e 2>&1", self);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "orch_same_seed_same_parameters\ttests/e2e/test_orch.c\te2e\n");
    XDC_ASSERT_STR_CONTAINS(out, "\te2e\tserial\n"); /* the namespace, Slurm and etcd tests */
    XDC_ASSERT_MSG(!strstr(out, "\tunit"), "--tier e2e lists a unit test:\n%.2000s", out);
    snprintf(cmd, sizeof cmd, "'%s' -l --tier unit 2>&1", self);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "codec_parse_format_and_errors\ttests/compression/test_codec.c\tunit\n");
    XDC_ASSERT_MSG(!strstr(out, "\te2e"), "--tier unit lists an end-to-end test:\n%.2000s", out);
    snprintf(cmd, sizeof cmd, "'%s' --tier slow 2>&1", self);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--tier: 'slow' is not unit or e2e");
}

/* Fixtures for the test below (each, run alone, just has its folder): one parallel test, then three
 * serial ones. */
XDC_TEST(harness_sched_fixture_parallel) { XDC_ASSERT(xdc_test_tmpdir()[0] == '/'); }
XDC_TEST_SERIAL(harness_sched_fixture_serial_a, 30) { XDC_ASSERT(xdc_test_tmpdir()[0] == '/'); }
XDC_TEST_SERIAL(harness_sched_fixture_serial_b, 30) { XDC_ASSERT(xdc_test_tmpdir()[0] == '/'); }
XDC_TEST_SERIAL(harness_sched_fixture_serial_c, 30) { XDC_ASSERT(xdc_test_tmpdir()[0] == '/'); }

/* With -j 4 the runner would start all four fixtures before reaping any; the schedule it logs
 * (XDC_TEST_SCHED_LOG) must show every serial test started with nothing running and nothing started
 * while it ran. */
XDC_TEST(harness_runs_each_serial_test_alone)
{
    char self[PATH_MAX], cmd[2 * PATH_MAX], out[4096], log[PATH_MAX];
    self_path(self, sizeof self);
    snprintf(log, sizeof log, "%s/sched.log", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "XDC_TEST_SCHED_LOG='%s' '%s' -j 4 harness_sched_fixture_ 2>&1", log, self);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "the fixtures exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "4 passed, 0 failed, 0 skipped");
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(text != NULL, "no schedule log at %s", log);
    int running = 0, serial_running = 0, starts = 0, beside = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int serial = strstr(line, "_serial_") != NULL;
        if (strncmp(line, "start ", 6) == 0) {
            beside += serial_running || (serial && running);
            running++, starts++, serial_running += serial;
        } else if (strncmp(line, "end ", 4) == 0) {
            running--, serial_running -= serial;
        }
    }
    free(text);
    XDC_ASSERT_EQ(starts, 4);
    XDC_ASSERT_MSG(beside == 0, "%d starts beside a serial test", beside);
}

/* A fixture that fails with a 4000-byte message, as an assertion quoting a launch's output does, when
 * XDC_TEST_HARNESS_FAIL is set (run by the test below); otherwise it passes. */
XDC_TEST(harness_fail_fixture_long_message)
{
    XDC_ASSERT(xdc_test_tmpdir()[0] == '/');
    if (!getenv("XDC_TEST_HARNESS_FAIL")) return;
    static char text[4001];
    memset(text, 'x', sizeof text - 1);
    memcpy(text + sizeof text - 1 - 9, "the-cause", 9);
    XDC_FAIL("long output:\n%s", text);
}

/* The verdict of a failure keeps its message's first bytes, but the tail the runner prints comes from the
 * test's log, which holds the whole message: its end, where a failure's cause usually is, is shown. */
XDC_TEST(harness_failure_shows_the_end_of_a_long_message)
{
    char self[PATH_MAX], cmd[2 * PATH_MAX];
    static char out[1 << 15];
    self_path(self, sizeof self);
    snprintf(cmd, sizeof cmd, "XDC_TEST_HARNESS_FAIL=1 '%s' harness_fail_fixture_long_message 2>&1", self);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc != 0, "the failing fixture passed:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "0 passed, 1 failed");
    XDC_ASSERT_STR_CONTAINS(out, "xxxxthe-cause");
}
