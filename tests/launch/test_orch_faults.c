/* test_orch_faults.c — failures say what failed: whom the launcher blames (orch_failure_blame) from
 * reports, agent notes and connection silence; the outage schedule of the emulator's relays; folders
 * that cannot be made report their errno; region pace; the netns emulator's cleanup under signals. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "orchestrator/launch/orch_failure.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "orchestrator/worker/orch_worker.h"
#include "wan/emu/xdc_wan_emu.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAULTS_TOPO "examples/topology/demo-2region.yaml"

XDC_TEST(orch_failure_report_round_trips_and_classifies)
{
    char v[256];
    const char *text;
    orch_failure_format(XDC_ERR_TIMEOUT, "training failed: deadline exceeded: peer eu-west/1 silent", v, sizeof v);
    XDC_ASSERT_EQ(orch_failure_waited(v, &text), 1);
    XDC_ASSERT(strcmp(text, "training failed: deadline exceeded: peer eu-west/1 silent") == 0);
    orch_failure_format(XDC_ERR_IO, "checkpoint failed: No space left on device", v, sizeof v);
    XDC_ASSERT_EQ(orch_failure_waited(v, &text), 0);
    XDC_ASSERT(strcmp(text, "checkpoint failed: No space left on device") == 0);
    /* A name that only starts like a waited one is not one. */
    XDC_ASSERT_EQ(orch_failure_waited("XDC_ERR_TIMEOUTX text", &text), 0);
}

/* The SIGSTOP case: two members gave up waiting, the stopped one wrote nothing and its connection is
 * silent while a blocked one still answers keepalives. */
XDC_TEST(orch_failure_blames_the_silent_member_not_the_first_to_give_up)
{
    orch_failure_member m[4] = {
        {.name = "us-east/a:0", .connected = 1, .silent_s = 0.2, .detail = "us-east/a:0 (last heard 1 s ago)"},
        {.name = "us-east/a:1",
         .report = "XDC_ERR_TIMEOUT training failed: peer eu-west/1 silent for 5001 ms",
         .connected = 1,
         .silent_s = 0.1},
        {.name = "eu-west/b:0", .report = "XDC_ERR_CLOSED training failed: the peer closed the connection"},
        {.name = "eu-west/b:1",
         .connected = 1,
         .silent_s = 5.3,
         .detail = "eu-west/b:1 (last heard 5.4 s ago: step 20)"},
    };
    char why[1024];
    xdc_err_t err;
    XDC_ASSERT_EQ(orch_failure_blame(m, 4, 2.5, why, sizeof why, &err), 3);
    XDC_ASSERT_ERR(err, XDC_ERR_TIMEOUT); /* stopped, maybe to come back: a temporary failure */
    XDC_ASSERT_STR_CONTAINS(why, "eu-west/b:1 stopped answering");
    XDC_ASSERT_STR_CONTAINS(why, "5.3 s");
    XDC_ASSERT_STR_CONTAINS(why, "2 members gave up waiting (first us-east/a:1: training failed: peer eu-west/1");
    /* Below the limit nobody is stalled: the first that gave up is named. */
    m[3].silent_s = 1.0;
    XDC_ASSERT_EQ(orch_failure_blame(m, 4, 2.5, why, sizeof why, &err), 1);
    XDC_ASSERT_ERR(err, XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(why, "us-east/a:1: training failed");
    /* A fault of its own comes first, silence or not. */
    m[3].silent_s = 9.0;
    m[0].report = "XDC_ERR_IO checkpoint failed: cannot create folder /r/ckpt: Read-only file system";
    XDC_ASSERT_EQ(orch_failure_blame(m, 4, 2.5, why, sizeof why, &err), 0);
    XDC_ASSERT_ERR(err, XDC_ERR_IO);
    XDC_ASSERT(strcmp(why, "us-east/a:0: checkpoint failed: cannot create folder /r/ckpt: Read-only file system") == 0);
}

XDC_TEST(orch_failure_blames_a_worker_its_agent_saw_die)
{
    orch_failure_member m[3] = {
        {.name = "us-east/a:0", .report = "XDC_ERR_CLOSED training failed: the peer closed the connection"},
        {.name = "eu-west/b:0", .connected = 1, .silent_s = 0.1},
        {.name = "eu-west/b:1", .note = "worker eu-west/b:1 (pid 42) killed by signal 9 (Killed)"},
    };
    char why[512];
    xdc_err_t err;
    XDC_ASSERT_EQ(orch_failure_blame(m, 3, 1.0, why, sizeof why, &err), 2);
    XDC_ASSERT_ERR(err, XDC_OK); /* its agent's status (the worker's) says how it ended */
    XDC_ASSERT(strcmp(why, "worker eu-west/b:1 (pid 42) killed by signal 9 (Killed)") == 0);
    /* A note about a worker that reported its own failure is that report's business. */
    m[2].report = "XDC_ERR_TIMEOUT training failed: intra all_reduce not complete";
    XDC_ASSERT_EQ(orch_failure_blame(m, 3, 1.0, why, sizeof why, &err), 0);
    /* Nothing known: nobody blamed. */
    orch_failure_member quiet[2] = {{.name = "a", .connected = 1}, {.name = "b", .connected = 1}};
    XDC_ASSERT_EQ(orch_failure_blame(quiet, 2, 1.0, why, sizeof why, &err), -1);
    XDC_ASSERT_ERR(err, XDC_OK);
    XDC_ASSERT(why[0] == '\0');
}

XDC_TEST(wan_emu_outage_schedule_parses_lists_and_repeats)
{
    xdc_wan_outage s[XDC_WAN_MAX_OUTAGES];
    int n = 0;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_outages_parse("3s@1s,12s@20s", s, &n, &d));
    XDC_ASSERT_OK(xdc_wan_outages_parse("500ms@40s", s, &n, &d)); /* a second flag adds, never replaces */
    XDC_ASSERT_EQ(n, 3);
    XDC_ASSERT_EQ(s[0].duration_ms, 3000);
    XDC_ASSERT_EQ(s[0].start_ms, 1000);
    XDC_ASSERT_EQ(s[1].duration_ms, 12000);
    XDC_ASSERT_EQ(s[1].start_ms, 20000);
    XDC_ASSERT_EQ(s[2].duration_ms, 500);
    XDC_ASSERT_EQ(s[2].start_ms, 40000);
    XDC_ASSERT_EQ(s[0].in_flight + s[1].in_flight + s[2].in_flight, 0);
    XDC_ASSERT_ERR(xdc_wan_outages_parse("1s@2s,3s", s, &n, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "'3s' is not DURATION@START");
    XDC_ASSERT_ERR(xdc_wan_outages_parse("1s@2s:busy", s, &n, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "'1s@2s:busy' is not DURATION@START[:in-flight]");
    XDC_ASSERT_EQ(n, 3); /* a refused schedule adds nothing */
    XDC_ASSERT_OK(xdc_wan_outages_parse("2s@1s:in-flight", s, &n, &d));
    XDC_ASSERT(n == 4 && s[3].in_flight && s[3].duration_ms == 2000 && s[3].start_ms == 1000);
    while (n < XDC_WAN_MAX_OUTAGES) XDC_ASSERT_OK(xdc_wan_outages_parse("1s@1s", s, &n, &d));
    XDC_ASSERT_ERR(xdc_wan_outages_parse("1s@1s", s, &n, &d), XDC_ERR_RANGE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "more than 16 outages");

    /* The relay keeps every outage it is given, up to its capacity. */
    xdc_wan_link_model m = {0};
    xdc_wan_relay *r;
    XDC_ASSERT_OK(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", 9, &m, &r, &d));
    for (int i = 0; i < XDC_WAN_MAX_OUTAGES; i++)
        XDC_ASSERT_OK(xdc_wan_relay_schedule_outage(r, &(xdc_wan_outage){.start_ms = 3600000 - i, .duration_ms = 10}));
    XDC_ASSERT_ERR(xdc_wan_relay_schedule_outage(r, &(xdc_wan_outage){.start_ms = 1, .duration_ms = 10}),
                   XDC_ERR_RANGE);
    xdc_wan_relay_destroy(r);
}

XDC_TEST(orch_mkdirs_names_the_folder_and_errno)
{
    char file[600], dir[700];
    xdc_diag d = {{0}};
    snprintf(file, sizeof file, "%s/plain-file", xdc_test_tmpdir());
    xdc_test_write_file(file, "x");
    snprintf(dir, sizeof dir, "%s/a/b", file);
    XDC_ASSERT_ERR(orch_mkdirs(dir, 0755, &d), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "Not a directory");
    XDC_ASSERT_STR_CONTAINS(d.msg, file);
    snprintf(dir, sizeof dir, "%s/x/y/z", xdc_test_tmpdir());
    XDC_ASSERT_OK(orch_mkdirs(dir, 0755, &d));
    XDC_ASSERT_OK(orch_mkdirs(dir, 0755, &d)); /* there already: fine */
    XDC_ASSERT(access(dir, W_OK) == 0);
}

/* A region's slowdown is its compute per step over the median of the others'; unknown stays 0. */
XDC_TEST(orch_pace_names_the_region_slower_than_the_others)
{
    double pace2[2] = {0.015, 0.045}, slow2[2];
    orch_pace_slowdowns(pace2, 2, slow2);
    XDC_ASSERT_NEAR(slow2[0], 1.0 / 3.0, 1e-12);
    XDC_ASSERT_NEAR(slow2[1], 3.0, 1e-12);
    /* Three regions: each against the median of the other two; one region not heard from yet. */
    double pace4[4] = {0.010, 0.012, 0.050, 0}, slow4[4];
    orch_pace_slowdowns(pace4, 4, slow4);
    XDC_ASSERT_NEAR(slow4[0], 0.010 / 0.031, 1e-12);
    XDC_ASSERT_NEAR(slow4[1], 0.012 / 0.030, 1e-12);
    XDC_ASSERT_NEAR(slow4[2], 0.050 / 0.011, 1e-12);
    XDC_ASSERT(slow4[3] == 0);
    double alone[1] = {0.02}, slow1[1];
    orch_pace_slowdowns(alone, 1, slow1);
    XDC_ASSERT(slow1[0] == 0); /* nobody to compare with */
}

/* `xdc wan-emu --netns` removes its namespaces however many stop signals arrive, also during the
 * cleanup (a thread started before main blocked them used to take one and end the process there). */
XDC_TEST_SERIAL(wan_emu_netns_cleanup_survives_repeated_signals, 60)
{
    if (geteuid() != 0) xdc_test_skip("netns mode needs root (CAP_NET_ADMIN)");
    char prefix[32], log[600], cmd[256], out[4096];
    snprintf(prefix, sizeof prefix, "xdcs%d", (int)getpid());
    snprintf(log, sizeof log, "%s/wanemu.log", xdc_test_tmpdir());
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "wan-emu", "--topology", FAULTS_TOPO, "--netns", prefix, (char *)NULL);
        _exit(127);
    }
    XDC_ASSERT(p > 0);
    int up = 0, status = 0;
    pid_t done = 0;
    for (int i = 0; i < 600 && !up && !done; i++) {
        char *text = xdc_test_read_file(log, NULL);
        up = text && strstr(text, "namespaces up");
        if (!up && text && strstr(text, "unavailable")) {
            free(text);
            waitpid(p, &status, 0);
            xdc_test_skip("netns mode unavailable here");
        }
        free(text);
        if (!up) {
            done = waitpid(p, &status, WNOHANG);
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        }
    }
    XDC_ASSERT_MSG(up && !done, "wan-emu --netns did not come up (see %s)", log);
    /* A signal on every poll until it is gone: some land while it removes the namespaces. */
    for (int i = 0; i < 20000 && done == 0; i++) {
        kill(p, SIGTERM);
        done = waitpid(p, &status, WNOHANG);
        if (!done) nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(done == p, "wan-emu did not stop");
    snprintf(cmd, sizeof cmd, "ip netns list | grep -c '^%s' || true", prefix);
    xdc_test_run(cmd, out, sizeof out);
    int left = atoi(out);
    if (left) {
        snprintf(cmd, sizeof cmd, "for n in $(ip netns list | awk '/^%s/ {print $1}'); do ip netns del $n; done",
                 prefix);
        xdc_test_run(cmd, out, sizeof out);
    }
    XDC_ASSERT_MSG(WIFEXITED(status), "wan-emu was ended by signal %d during its cleanup", WTERMSIG(status));
    XDC_ASSERT_MSG(left == 0, "%d namespaces %s-* left behind", left, prefix);
}

/* The wait loop of the sync and the rendezvous: its own timeout (XDC_ERR_AGAIN, the request still
 * posted, waited on again) is told apart from a request the peer's deadline failed (XDC_ERR_TIMEOUT,
 * released: waiting on it again was the exit-64 bug, and another thread may hold it by then). */
XDC_TEST(wan_wait_tells_its_own_timeout_from_a_failed_request)
{
    wan_test_pair tp;
    /* 3 s: long enough that the two 20 ms polls below end before it even on a loaded machine */
    wan_test_pair_open(&tp, 2, 3000, NULL, NULL);
    uint8_t rx[64];
    xdc_wan_request *r;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(tp.cli, XDC_WAN_BULK, rx, sizeof rx, &r));
    XDC_ASSERT_ERR(xdc_wan_wait(r, 20, NULL, NULL, &d), XDC_ERR_AGAIN); /* nothing sent: still pending */
    XDC_ASSERT_ERR(xdc_wan_wait(r, 20, NULL, NULL, &d), XDC_ERR_AGAIN); /* and still valid */
    xdc_wan_engine_destroy(tp.srv_eng); /* the peer goes away: its deadline fails the receive */
    tp.srv_eng = NULL;
    xdc_err_t rc;
    int polls = 0;
    while ((rc = xdc_wan_wait(r, 50, NULL, NULL, &d)) == XDC_ERR_AGAIN && polls < 400) polls++;
    XDC_ASSERT_ERR(rc, XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "peer us/0");
    XDC_ASSERT_ERR(xdc_wan_wait(r, 20, NULL, NULL, &d), XDC_ERR_INVALID); /* released with its result */
    wan_test_pair_close(&tp);
}
