/* test_wan_cli.c — `xdc certs`, `xdc wan listen|send` and `xdc wan-emu` as a user runs them: the pair
 * moves the bytes and `send` prints exactly one result line; bad input ends with a sysexits code and a
 * message naming the problem. */
#include "tests/xdc_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    XDC_ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    close(fd);
    return ntohs(a.sin_port);
}

static void make_pki(const char *dir)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "%s certs init --dir %s --run clirun && %s certs issue --dir %s --region us --rank 0 && "
             "%s certs issue --dir %s --region eu --rank 2 --days 5",
             xdc_test_bin(), dir, xdc_test_bin(), dir, xdc_test_bin(), dir);
    XDC_ASSERT_MSG(xdc_test_run(cmd, out, sizeof out) == 0, "certs: %s", out);
    XDC_ASSERT_STR_CONTAINS(out, "for eu/2");
}

XDC_TEST(wan_cli_listen_send_pair_prints_one_result_line)
{
    const char *t = xdc_test_tmpdir();
    make_pki(t);
    int port = free_port();
    char cmd[4096], out[8192];
    /* send starts at once: its streams redial with backoff until the listener is up (no sleeps). */
    snprintf(cmd, sizeof cmd,
             "%1$s wan listen --port %3$d --cert %2$s/us-0.pem --key %2$s/us-0.key --ca %2$s/ca.pem --once "
             ">%2$s/listen.out 2>&1 & "
             "%1$s wan send --to 127.0.0.1:%3$d --bytes 3M --msg-bytes 1M --streams 3 --expect us/0 "
             "--cert %2$s/eu-2.pem --key %2$s/eu-2.key --ca %2$s/ca.pem 2>%2$s/send.err; rc=$?; wait; exit $rc",
             xdc_test_bin(), t, port);
    int rc = xdc_test_run(cmd, out, sizeof out);
    char path[512];
    snprintf(path, sizeof path, "%s/send.err", t);
    char *err = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(rc == 0, "send exit %d: %s / %s", rc, out, err ? err : "");
    free(err);
    XDC_ASSERT(strncmp(out, "goodput_gbps=", 13) == 0);
    XDC_ASSERT_STR_CONTAINS(out, " bytes=3145728 ");
    XDC_ASSERT_STR_CONTAINS(out, " streams=3 ");
    XDC_ASSERT_STR_CONTAINS(out, " seconds=");
    XDC_ASSERT_EQ(strchr(out, '\n') - out, (long)strlen(out) - 1); /* exactly one line */
    snprintf(path, sizeof path, "%s/listen.out", t);
    char *lis = xdc_test_read_file(path, NULL);
    XDC_ASSERT_STR_CONTAINS(lis, "received bytes=3145728");
    XDC_ASSERT_STR_CONTAINS(lis, "from=eu/2");
    free(lis);
}

/* `--crl` on the pair: once the CA has revoked the sender's certificate, the listener refuses it, and the
 * sender's error names the refusal. */
XDC_TEST(wan_cli_listen_refuses_a_revoked_sender)
{
    const char *t = xdc_test_tmpdir();
    make_pki(t);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "%s certs revoke --dir %s --cert %s/eu-2.pem", xdc_test_bin(), t, t);
    XDC_ASSERT_MSG(xdc_test_run(cmd, out, sizeof out) == 0, "revoke: %s", out);
    int port = free_port();
    snprintf(cmd, sizeof cmd,
             "%1$s wan listen --port %3$d --cert %2$s/us-0.pem --key %2$s/us-0.key --ca %2$s/ca.pem "
             "--crl %2$s/crl.pem --once >%2$s/listen.out 2>&1 & lis=$!; "
             "timeout 60 %1$s wan send --to 127.0.0.1:%3$d --bytes 1M --expect us/0 "
             "--cert %2$s/eu-2.pem --key %2$s/eu-2.key --ca %2$s/ca.pem; rc=$?; kill $lis; wait; exit $rc",
             xdc_test_bin(), t, port);
    int rc = xdc_test_run(cmd, out, sizeof out);
    char path[512];
    snprintf(path, sizeof path, "%s/listen.out", t);
    char *lis = xdc_test_read_file(path, NULL);
    printf("send: exit %d: %s\nlisten: %s\n", rc, out, lis ? lis : "");
    XDC_ASSERT_MSG(rc != 0 && rc != 124, "send exit %d: %s", rc, out);
    XDC_ASSERT(strstr(lis ? lis : "", "received bytes=") == NULL);
    XDC_ASSERT_STR_CONTAINS(lis ? lis : "", "revoked");
    free(lis);
}

XDC_TEST(wan_cli_bad_input_exits_with_sysexits_codes)
{
    const char *t = xdc_test_tmpdir();
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "%s certs issue --dir %s --region us --rank 0", xdc_test_bin(), t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78); /* no CA in that folder: the CA host's setup */
    XDC_ASSERT_STR_CONTAINS(out, "ca.pem");
    make_pki(t);
    snprintf(cmd, sizeof cmd, "%s certs init --dir %s", xdc_test_bin(), t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "already exists");
    snprintf(cmd, sizeof cmd, "%s certs issue --dir %s --region us --rank -3", xdc_test_bin(), t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    snprintf(cmd, sizeof cmd,
             "%s wan send --to 127.0.0.1:9 --bytes lots --cert %s/eu-2.pem --key %s/eu-2.key --ca %s/ca.pem",
             xdc_test_bin(), t, t, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--bytes 'lots'");
    snprintf(cmd, sizeof cmd, "%s wan listen --port 0 --cert %s/missing.pem --key %s/eu-2.key --ca %s/ca.pem",
             xdc_test_bin(), t, t, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "missing.pem");
    snprintf(cmd, sizeof cmd, "%s wan-emu --topology /nonexistent.yaml", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "nonexistent.yaml");
    snprintf(cmd, sizeof cmd, "%s wan-emu --topology x.yaml --outage soon", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "DURATION@START");
}

/* Numbers on the command line are parsed whole: trailing bytes or words are refused with the flag named,
 * instead of atoi's silent prefix (--port abc listened on a random port, --expect eu/abc pinned eu/0). */
XDC_TEST(wan_cli_integer_flags_are_strict)
{
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"listen --port abc", "--port: 'abc' is not an integer in 0..65535"},
        {"listen --port 70000", "--port: '70000' is not an integer in 0..65535"},
        {"listen --port 1 --streams 3x", "--streams: '3x' is not an integer in 1..64"},
        {"send --bytes 1 --to 127.0.0.1:29501abc", "--to: '127.0.0.1:29501abc' is not HOST:PORT"},
        {"send --bytes 1 --to 127.0.0.1:9 --expect eu/abc", "--expect RANK: 'abc' is not an integer"},
        {"send --bytes 1 --to 127.0.0.1:9 --expect eu/-1", "--expect RANK: '-1' is not an integer"},
    };
    char cmd[1024], out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s wan %s --cert c.pem --key k.pem --ca ca.pem", xdc_test_bin(), cases[i].args);
        XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
        XDC_ASSERT_STR_CONTAINS(out, cases[i].want);
    }
    snprintf(cmd, sizeof cmd, "%s launch -t x.yaml -c y.yaml --port 29400x", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--port: '29400x' is not an integer");
}

XDC_TEST_SERIAL(wan_cli_wanemu_check_measures_topology_links, 60)
{
    const char *t = xdc_test_tmpdir();
    char topo[512];
    snprintf(topo, sizeof topo, "%s/t.yaml", t);
    xdc_test_write_file(topo, "name: t\n"
                              "regions:\n"
                              "  - {name: a, nodes: n1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, "
                              "bf16_tflops: 0.05, memory_gib: 4},\n"
                              "     intra: {bandwidth_gbps: 40, latency_us: 10}, wan_endpoint: 127.0.0.1:20000}\n"
                              "  - {name: b, nodes: n2, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, "
                              "bf16_tflops: 0.05, memory_gib: 4},\n"
                              "     intra: {bandwidth_gbps: 40, latency_us: 10}, wan_endpoint: 127.0.0.1:20100}\n"
                              "links:\n"
                              "  - {from: a, to: b, bandwidth_gbps: 0.05, rtt_ms: 20, streams: 1}\n");
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s wan-emu --topology %s --check --seconds 1", xdc_test_bin(), topo);
    /* The verdict is a measurement of rate and RTT against the clock: on a loaded machine it may say OFF
     * (exit 70) for a sound emulator, so the test holds it to what load cannot change. Each direction is
     * measured and printed; its minimum RTT is at least the emulated delay (load only adds to it); a rate
     * was measured. How close the rate comes is for `xdc wan-emu --check` on a quiet machine and bench/wan (iperf3 over the same emulated link). */
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0 || rc == 70, "exit %d: %s", rc, out);
    for (int d = 0; d < 2; d++) {
        const char *line = strstr(out, d ? "\nb->a" : "\na->b");
        XDC_ASSERT_MSG(line != NULL, "no %s line: %s", d ? "b->a" : "a->b", out);
        double rtt, jitter, min_rtt, rate, meas;
        char verdict[8];
        XDC_ASSERT_MSG(sscanf(line + 5, "%lf %lf %lf %lf %lf %7s", &rtt, &jitter, &min_rtt, &rate, &meas, verdict) == 6,
                       "unreadable line: %s", out);
        XDC_ASSERT_MSG(rtt == 20 && rate == 50, "configured figures: %s", out);
        XDC_ASSERT_MSG(min_rtt >= 0.9 * rtt - 0.5 && meas > 0, "measured figures: %s", out);
        XDC_ASSERT(!strcmp(verdict, "ok") || !strcmp(verdict, "OFF"));
    }
}
