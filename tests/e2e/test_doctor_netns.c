/* test_doctor_netns.c — `xdc doctor` on the multi-host namespace set-up (tests/multihost/doctor-netns.sh):
 * each region's node on a network host of its own behind the netns WAN emulator, with its own key, runs
 * `xdc doctor --serve` on its wan_endpoint, and `xdc doctor` from us-east's host passes; with the
 * us-east -> eu-west link slowed to a quarter (the emulator's tbf rate changed) it fails naming that
 * link's bandwidth and nothing else; with eu-west's server stopped it fails naming that endpoint. Root
 * only: skipped otherwise. */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The doctor output of phase `name` in the script's output (from its `== name exit RC` line to the next
 * `== ` or the end), copied into buf; its exit code. Fails the test when the phase is missing. */
static int phase(const char *out, const char *name, char *buf, size_t cap)
{
    char head[64];
    snprintf(head, sizeof head, "== %s exit ", name);
    const char *p = strstr(out, head);
    XDC_ASSERT_MSG(p != NULL, "no phase '%s' in:\n%s", name, out);
    int rc = -1;
    XDC_ASSERT(sscanf(p + strlen(head), "%d", &rc) == 1);
    const char *end = strstr(p + strlen(head), "\n== ");
    size_t n = end ? (size_t)(end - p) : strlen(p);
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return rc;
}

XDC_TEST_SERIAL(multihost_doctor_on_namespaces_passes_then_names_the_fault, 60)
{
    if (geteuid() != 0) xdc_test_skip("network namespaces need root");
    static char out[65536], part[16384];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 50 bash tests/multihost/doctor-netns.sh %s %s/dr", xdc_test_bin(),
             xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    if (rc == 77) xdc_test_skip("%s", out);
    XDC_ASSERT_MSG(rc == 0, "doctor-netns.sh exited %d:\n%s", rc, out);

    /* healthy: every link check passes over the namespaces, with the served identity */
    rc = phase(out, "healthy", part, sizeof part);
    XDC_ASSERT_MSG(rc == 0, "doctor on the healthy namespaces exited %d:\n%s", rc, part);
    XDC_ASSERT_STR_CONTAINS(part, "0 failed");
    XDC_ASSERT_STR_CONTAINS(part, "identity xdc://doctor-netns/eu-west/0 as expected");
    const char *rows[] = {"reach      eu-west at 10.77.0.2:29400", "tls        eu-west at 10.77.0.2:29400",
                          "rtt        us-east->eu-west", "bandwidth  us-east->eu-west"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *r = strstr(part, rows[i]);
        char line[256];
        snprintf(line, sizeof line, "%.*s", r ? (int)strcspn(r, "\n") : 0, r ? r : "");
        XDC_ASSERT_MSG(strstr(line, " pass ") != NULL, "row '%s' did not pass:\n%s", rows[i], part);
    }

    /* slowed 4x: the bandwidth of that link, and only it */
    rc = phase(out, "slowed", part, sizeof part);
    XDC_ASSERT_MSG(rc == 69, "doctor with the link slowed 4x exited %d:\n%s", rc, part);
    XDC_ASSERT_STR_CONTAINS(part, "bandwidth us-east->eu-west: more than 2x off");
    XDC_ASSERT_STR_CONTAINS(part, "1 failed");
    XDC_ASSERT_STR_CONTAINS(part, "NOT ready");

    /* stopped: the far endpoint named, with what to do */
    rc = phase(out, "stopped", part, sizeof part);
    XDC_ASSERT_MSG(rc == 69, "doctor with eu-west's server stopped exited %d:\n%s", rc, part);
    XDC_ASSERT_STR_CONTAINS(part, "reach eu-west at 10.77.0.2:29400: start `xdc doctor --serve` on eu-west's node");

    /* no namespace of the run is left */
    const char *ns = strstr(out, "namespaces xdcdr");
    XDC_ASSERT_MSG(ns != NULL, "no namespace prefix in:\n%s", out);
    char prefix[64], left[256];
    snprintf(prefix, sizeof prefix, "%.*s", (int)strcspn(ns + 11, "*"), ns + 11);
    snprintf(cmd, sizeof cmd, "ip netns list | grep -c '^%s' || true", prefix);
    xdc_test_run(cmd, left, sizeof left);
    XDC_ASSERT_MSG(left[0] == '0', "namespaces %s* left behind", prefix);
}
