/* test_doctor.c — `xdc doctor` on one machine through the emulator's relays (a healthy 2-region topology
 * passes; a link slowed 4x and a stopped endpoint fail, named; --json carries the verdicts;
 * --write-topology loads back with the measured figures), the handshake expiry message, the timeout
 * hierarchy's scaling, and the topology writer's round trip. Verdicts are asserted, never timings. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "orchestrator/doctor/orch_doctor.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "topology/xdc_topology.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Two regions, 10 ms and 40 Mbit/s between them: a probe of 0.15 s moves 750 kB. `rates` (Gbit/s) are the
 * two directions' (us->eu, eu->us). */
static void write_topo(const char *path, double us_eu, double eu_us)
{
    char text[2048];
    snprintf(text, sizeof text,
             "name: doctor-test\n"
             "regions:\n"
             "  - {name: us, nodes: us1, gpus_per_node: 0, workers_per_node: 1,\n"
             "     gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}, wan_endpoint: 127.0.0.1:1}\n"
             "  - {name: eu, nodes: eu1, gpus_per_node: 0, workers_per_node: 1,\n"
             "     gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}, wan_endpoint: 127.0.0.1:2}\n"
             "links:\n"
             "  - {from: us, to: eu, symmetric: false, bandwidth_gbps: %g, rtt_ms: 10, streams: 2}\n"
             "  - {from: eu, to: us, symmetric: false, bandwidth_gbps: %g, rtt_ms: 10, streams: 2}\n",
             us_eu, eu_us);
    xdc_test_write_file(path, text);
}

#define DOCTOR_FLAGS "--probe-seconds 150ms --pings 3"

/* Run `xdc doctor --emulate -t TOPO EXTRA` with certificates in the test's folder; its exit code. */
static int run_doctor(const char *topo, const char *extra, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s doctor --emulate -t %s --certs %s/certs " DOCTOR_FLAGS " %s 2>/dev/null",
             xdc_test_bin(), topo, xdc_test_tmpdir(), extra);
    return xdc_test_run(cmd, out, cap);
}

/* The verdict of the JSON row (check, subject starting with `subject`), or NULL. */
static const char *json_verdict(json_t *root, const char *check, const char *subject)
{
    json_t *checks = json_object_get(root, "checks"), *c;
    size_t i;
    json_array_foreach(checks, i, c)
    {
        const char *ck = json_string_value(json_object_get(c, "check"));
        const char *sj = json_string_value(json_object_get(c, "subject"));
        if (ck && sj && strcmp(ck, check) == 0 && strncmp(sj, subject, strlen(subject)) == 0)
            return json_string_value(json_object_get(c, "verdict"));
    }
    return NULL;
}

static json_t *parse_json(const char *text)
{
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    XDC_ASSERT_MSG(root != NULL, "doctor --json does not parse: %s (line %d): %.300s", err.text, err.line, text);
    return root;
}

XDC_TEST_T(doctor_passes_on_a_healthy_emulated_topology, 60)
{
    static char out[65536];
    char topo[512];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    int rc = run_doctor(topo, "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "0 failed");
    XDC_ASSERT_STR_CONTAINS(out, "ready");
    XDC_ASSERT_STR_CONTAINS(out, "identity xdc://doctor/eu/0 as expected");
    const char *checks[] = {"reach", "mtu", "tls", "rtt", "clock", "bandwidth"};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n%-10s ", checks[i]);
        XDC_ASSERT_MSG(strstr(out, line) != NULL, "no %s row in:\n%s", checks[i], out);
    }
}

XDC_TEST_T(doctor_fails_naming_the_link_slowed_4x, 60)
{
    static char out[65536], json[65536];
    char topo[512], slow[512], extra[700];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    snprintf(slow, sizeof slow, "%s/slow.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    write_topo(slow, 0.01, 0.04); /* the network: us->eu at a quarter of what the topology says */
    snprintf(extra, sizeof extra, "--emulate-links %s", slow);
    int rc = run_doctor(topo, extra, out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "exit %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "NOT ready");
    XDC_ASSERT_STR_CONTAINS(out, "bandwidth us->eu: more than 2x off");
    XDC_ASSERT_MSG(strstr(out, "bandwidth eu->us:") == NULL, "the healthy direction is blamed:\n%s", out);

    /* --json: the same verdicts. */
    snprintf(extra, sizeof extra, "--emulate-links %s --json", slow);
    XDC_ASSERT_EQ(run_doctor(topo, extra, json, sizeof json), 69);
    json_t *root = parse_json(json);
    XDC_ASSERT(json_is_false(json_object_get(root, "passed")));
    const char *v = json_verdict(root, "bandwidth", "us->eu");
    XDC_ASSERT(v && strcmp(v, "fail") == 0);
    v = json_verdict(root, "bandwidth", "eu->us");
    XDC_ASSERT_MSG(v && strcmp(v, "pass") == 0, "eu->us bandwidth %s:\n%s", v ? v : "missing", json);
    v = json_verdict(root, "tls", "eu at ");
    XDC_ASSERT(v && strcmp(v, "pass") == 0);
    json_decref(root);
}

XDC_TEST_T(doctor_fails_naming_a_stopped_endpoint, 60)
{
    static char out[65536];
    char topo[512];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    XDC_ASSERT_EQ(run_doctor(topo, "--stop eu --json", out, sizeof out), 69);
    json_t *root = parse_json(out);
    XDC_ASSERT(json_is_false(json_object_get(root, "passed")));
    const char *v = json_verdict(root, "reach", "eu at 127.0.0.1:");
    XDC_ASSERT(v && strcmp(v, "fail") == 0);
    XDC_ASSERT_STR_CONTAINS(out, "start `xdc doctor --serve` on eu's node");
    v = json_verdict(root, "bandwidth", "eu->us"); /* the stopped node's own links cannot be probed from here */
    XDC_ASSERT(v == NULL || strcmp(v, "pass") == 0);
    json_decref(root);
}

XDC_TEST_T(doctor_write_topology_loads_with_the_measured_figures, 60)
{
    static char out[65536];
    char topo[512], written[512], extra[700];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    snprintf(written, sizeof written, "%s/measured.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    snprintf(extra, sizeof extra, "--json --write-topology %s", written);
    int rc = run_doctor(topo, extra, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    json_t *root = parse_json(out);
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(written, &t, &errs));
    json_t *links = json_object_get(root, "links"), *l;
    size_t i;
    XDC_ASSERT_EQ((int)json_array_size(links), t->n_links);
    json_array_foreach(links, i, l)
    {
        XDC_ASSERT(json_is_true(json_object_get(l, "measured")));
        int from = xdc_topology_region_index(t, json_string_value(json_object_get(l, "from")));
        int to = xdc_topology_region_index(t, json_string_value(json_object_get(l, "to")));
        const xdc_link *k = xdc_topology_link(t, from, to);
        XDC_ASSERT(k != NULL);
        double rtt = json_real_value(json_object_get(l, "rtt_ms"));
        double bw = json_real_value(json_object_get(l, "bandwidth_gbps"));
        XDC_ASSERT(bw > 0);
        XDC_ASSERT_NEAR(k->rtt_ms, rtt, 1e-6 * rtt + 1e-9);
        XDC_ASSERT_NEAR(k->bandwidth_gbps, bw, 1e-6 * bw);
        XDC_ASSERT_EQ(k->mtu, (int)json_integer_value(json_object_get(l, "mtu")));
    }
    xdc_topology_destroy(t);
    json_decref(root);
    /* An existing file is never overwritten (it may be the topology itself). */
    XDC_ASSERT_EQ(run_doctor(topo, extra, out, sizeof out), 74);
}

/* A handshake that never completes (a socket that listens and never accepts) ends with the message
 * naming who was waited for, where, since when, and the key that sets the limit. */
XDC_TEST_T(doctor_handshake_expiry_names_who_where_and_since, 30)
{
    char topo[512], dir[512];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    wan_test_node us, eu;
    wan_test_issue("certs", "us", 0, 2, -60, &us);
    wan_test_issue("certs", "eu", 0, 2, -60, &eu);
    snprintf(dir, sizeof dir, "%s/certs", xdc_test_tmpdir());
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    XDC_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0 &&
               getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", ntohs(a.sin_port));
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(topo, &t, &errs));
    const char *eps[2] = {NULL, ep};
    orch_doctor_opts o = ORCH_DOCTOR_OPTS_INIT;
    o.topo = t;
    o.region = 0;
    o.certs_dir = dir;
    o.endpoints = eps;
    o.node_checks = 0;
    o.handshake_ms = 500;
    orch_doctor_report *rep = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_doctor_report_create(t, &rep));
    XDC_ASSERT_OK(orch_doctor_run(&o, rep, &d));
    XDC_ASSERT(!orch_doctor_report_passed(rep));
    const orch_doctor_row *row = orch_doctor_report_find(rep, "tls", ORCH_DOCTOR_FAIL);
    XDC_ASSERT(row != NULL);
    char want[200];
    snprintf(want, sizeof want, "TLS handshake: no answer from eu/0 (xdc doctor --serve) at %s within 500 ms", ep);
    XDC_ASSERT_STR_CONTAINS(row->detail, want);
    XDC_ASSERT_STR_CONTAINS(row->detail, "(waiting since ");
    XDC_ASSERT_STR_CONTAINS(row->detail, " UTC; timeouts.handshake in the run file)");
    XDC_ASSERT_STR_CONTAINS(row->subject, ep);
    XDC_ASSERT(row->fix[0] != 0);
    orch_doctor_report_destroy(rep);
    xdc_topology_destroy(t);
    close(fd);
}

XDC_TEST(timeouts_defaults_scale_with_the_topology_rtt)
{
    orch_run_config c;
    memset(&c, 0, sizeof c);
    orch_run_config_scale_timeouts(&c, NULL); /* no topology: the flat defaults */
    XDC_ASSERT_EQ(c.timeouts.handshake_ms, 15000);
    XDC_ASSERT_EQ(c.timeouts.rendezvous_ms, 60000);
    XDC_ASSERT_EQ(c.timeouts.operation_ms, 60000);
    XDC_ASSERT_EQ(c.timeouts.heartbeat_ms, 30000);
    const char *far = "name: far\nregions:\n"
                      "  - {name: a, nodes: a1, gpus_per_node: 0, workers_per_node: 1,\n"
                      "     gpu: {model: cpu, bf16_tflops: 1, memory_gib: 1}}\n"
                      "  - {name: b, nodes: b1, gpus_per_node: 0, workers_per_node: 1,\n"
                      "     gpu: {model: cpu, bf16_tflops: 1, memory_gib: 1}}\n"
                      "links:\n  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 1000}\n";
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_parse(far, strlen(far), "far.yaml", &t, &errs));
    memset(&c, 0, sizeof c);
    orch_run_config_scale_timeouts(&c, t); /* R = 1 s */
    XDC_ASSERT_EQ(c.timeouts.handshake_ms, 40000);
    XDC_ASSERT_EQ(c.timeouts.rendezvous_ms, 200000);
    XDC_ASSERT_EQ(c.timeouts.operation_ms, 200000);
    XDC_ASSERT_EQ(c.timeouts.heartbeat_ms, 100000);
    /* What the run file set stays; what depends on it follows it. */
    memset(&c, 0, sizeof c);
    c.timeouts.operation_ms = 10000;
    c.timeouts.rendezvous_ms = 5000;
    c.timeouts.set = ORCH_TIMEOUT_OPERATION | ORCH_TIMEOUT_RENDEZVOUS;
    orch_run_config_scale_timeouts(&c, t);
    XDC_ASSERT_EQ(c.timeouts.operation_ms, 10000);
    XDC_ASSERT_EQ(c.timeouts.rendezvous_ms, 5000);
    XDC_ASSERT_EQ(c.timeouts.heartbeat_ms, 5000);
    XDC_ASSERT_EQ(c.timeouts.handshake_ms, 5000); /* never longer than the rendezvous it is part of */
    xdc_topology_destroy(t);
}

XDC_TEST(topology_write_round_trips)
{
    char src[512], path[512];
    xdc_topology *a = NULL, *b = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(xdc_test_src("examples/topology/three-region.yaml", src, sizeof src), &a, &errs));
    snprintf(path, sizeof path, "%s/copy.yaml", xdc_test_tmpdir());
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_topology_write(a, "a copy\nof three-region", path, &d));
    XDC_ASSERT_ERR(xdc_topology_write(a, NULL, path, &d), XDC_ERR_IO); /* never over an existing file */
    XDC_ASSERT_STR_CONTAINS(d.msg, path);
    XDC_ASSERT_OK(xdc_topology_load(path, &b, &errs));
    XDC_ASSERT_EQ(a->n_regions, b->n_regions);
    XDC_ASSERT_EQ(a->n_links, b->n_links);
    for (int r = 0; r < a->n_regions; r++) {
        XDC_ASSERT(strcmp(a->regions[r].name, b->regions[r].name) == 0);
        XDC_ASSERT_EQ(a->regions[r].n_hosts, b->regions[r].n_hosts);
        XDC_ASSERT_EQ(a->regions[r].workers_per_node, b->regions[r].workers_per_node);
        XDC_ASSERT(strcmp(a->regions[r].wan_endpoint, b->regions[r].wan_endpoint) == 0);
    }
    for (int i = 0; i < a->n_links; i++) {
        const xdc_link *x = &a->links[i], *y = xdc_topology_link(b, x->from, x->to);
        XDC_ASSERT(y != NULL);
        XDC_ASSERT_NEAR(x->bandwidth_gbps, y->bandwidth_gbps, 1e-9);
        XDC_ASSERT_NEAR(x->rtt_ms, y->rtt_ms, 1e-9);
        XDC_ASSERT_NEAR(x->loss_pct, y->loss_pct, 1e-9);
        XDC_ASSERT_EQ(x->mtu, y->mtu);
        XDC_ASSERT_EQ(x->streams, y->streams);
        XDC_ASSERT(strcmp(x->codec, y->codec) == 0);
    }
    xdc_topology_destroy(a);
    xdc_topology_destroy(b);
}

/* The node's own checks: the built-in coordinator answers with its identity (pass), a port held by a
 * listener fails naming it and its owner, GPUs are skipped without a device probe, and an etcd://
 * rendezvous where nothing listens fails naming etcd's address (rdzv_ping; tests/e2e/test_rdzv_etcd.c runs
 * it against a live etcd). */
XDC_TEST_T(doctor_node_checks_rendezvous_and_ports, 30)
{
    char topo[512], dir[512];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    wan_test_node us, coord;
    wan_test_issue("certs", "us", 0, 2, -60, &us);
    wan_test_issue("certs", "coordinator", 0, 2, -60, &coord);
    snprintf(dir, sizeof dir, "%s/certs", xdc_test_tmpdir());
    xdc_wan_engine *eng = wan_test_engine(&coord, 1, 10000);
    const char *members[] = {"us/us1:0", "eu/eu1:0"};
    rdzv_server *srv = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(eng, "127.0.0.1", 0, members, 2, &srv, &d));
    char rdzv[64];
    snprintf(rdzv, sizeof rdzv, "127.0.0.1:%d", rdzv_server_port(srv));
    int held = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    XDC_ASSERT(held >= 0 && bind(held, (struct sockaddr *)&a, sizeof a) == 0 && listen(held, 1) == 0 &&
               getsockname(held, (struct sockaddr *)&a, &len) == 0);
    int ports[1] = {ntohs(a.sin_port)};
    const char *owners[1] = {"metrics of global rank 0"};
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(topo, &t, &errs));
    orch_doctor_opts o = ORCH_DOCTOR_OPTS_INIT;
    o.topo = t;
    o.certs_dir = dir;
    o.handshake_ms = 5000;
    o.ports = ports;
    o.port_owners = owners;
    o.n_ports = 1;
    o.rdzv = rdzv;
    const char *eps[2] = {NULL, "127.0.0.1:1"}; /* the link fails fast (refused): only the node rows matter */
    o.endpoints = eps;
    orch_doctor_report *rep = NULL;
    XDC_ASSERT_OK(orch_doctor_report_create(t, &rep));
    XDC_ASSERT_OK(orch_doctor_run(&o, rep, &d));
    XDC_ASSERT(orch_doctor_report_find(rep, "rendezvous", ORCH_DOCTOR_PASS) != NULL);
    XDC_ASSERT(orch_doctor_report_find(rep, "gpus", ORCH_DOCTOR_SKIP) != NULL);
    const orch_doctor_row *row = orch_doctor_report_find(rep, "ports", ORCH_DOCTOR_FAIL);
    XDC_ASSERT(row != NULL);
    char want[96];
    snprintf(want, sizeof want, "port %d (metrics of global rank 0) cannot be bound", ports[0]);
    XDC_ASSERT_STR_CONTAINS(row->detail, want);
    orch_doctor_report_destroy(rep);

    o.rdzv = "etcd://127.0.0.1:1/run";
    o.handshake_ms = 1000;
    XDC_ASSERT_OK(orch_doctor_report_create(t, &rep));
    XDC_ASSERT_OK(orch_doctor_run(&o, rep, &d));
    row = orch_doctor_report_find(rep, "rendezvous", ORCH_DOCTOR_FAIL);
    XDC_ASSERT(row != NULL);
    XDC_ASSERT_STR_CONTAINS(row->detail, "127.0.0.1:1");
    XDC_ASSERT_STR_CONTAINS(row->fix, "start etcd");
    orch_doctor_report_destroy(rep);
    close(held);
    xdc_topology_destroy(t);
    rdzv_server_destroy(srv);
    xdc_wan_engine_destroy(eng);
}

XDC_TEST_T(doctor_cli_usage_and_config_errors, 30)
{
    static char out[8192];
    char topo[512], cmd[1400];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    const struct {
        const char *args;
        int exit;
        const char *says;
    } cases[] = {
        {"", 64, "-t TOPO and --certs DIR are required"},
        {"-t %s --certs d", 64, "which region is this node?"},
        {"-t %s --certs d --region mars", 64, "no region 'mars' in the topology"},
        {"-t %s --certs d --region us --stop eu", 64, "--stop and --emulate-links need --emulate"},
        {"-t %s --certs d --region us --serve --emulate", 64, "exclude each other"},
        {"-t %s --certs d --region us --port 70000", 64, "--port"},
        {"-t %s --certs d --region us --endpoint eu", 64, "REGION=HOST:PORT"},
        {"-t %s.missing --certs d --region us", 78, "topo.yaml.missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[700];
        snprintf(args, sizeof args, cases[i].args, topo);
        snprintf(cmd, sizeof cmd, "%s doctor %s", xdc_test_bin(), args);
        int rc = xdc_test_run(cmd, out, sizeof out);
        XDC_ASSERT_MSG(rc == cases[i].exit, "xdc doctor %s: exit %d, expected %d: %s", args, rc, cases[i].exit, out);
        XDC_ASSERT_MSG(strstr(out, cases[i].says) != NULL, "xdc doctor %s: '%s' not in: %s", args, cases[i].says, out);
    }
}

/* `xdc doctor --serve` as a region's node runs it, and `xdc doctor` from the other region dialling it
 * directly (no relay): reach and TLS pass with the served identity. The server says its port on stderr
 * once it listens: that line is the synchronisation. */
XDC_TEST_T(doctor_serve_answers_a_remote_doctor, 30)
{
    static char out[65536];
    char topo[512], certs[512], cmd[1400];
    snprintf(topo, sizeof topo, "%s/topo.yaml", xdc_test_tmpdir());
    write_topo(topo, 0.04, 0.04);
    wan_test_node us, eu;
    wan_test_issue("certs", "us", 0, 2, -60, &us);
    wan_test_issue("certs", "eu", 0, 2, -60, &eu);
    snprintf(certs, sizeof certs, "%s/certs", xdc_test_tmpdir());
    int fds[2];
    XDC_ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    XDC_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        execl(xdc_test_bin(), "xdc", "doctor", "--serve", "-t", topo, "--certs", certs, "--region", "eu", "--listen",
              "127.0.0.1:0", "--duration", "25s", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    int port = 0;
    while (port == 0 && fgets(line, sizeof line, f)) { /* ends at EOF if the server dies */
        const char *p = strstr(line, "answering probes on port ");
        if (p) port = atoi(p + strlen("answering probes on port "));
    }
    XDC_ASSERT_MSG(port > 0, "the server never said its port");
    snprintf(cmd, sizeof cmd,
             "%s doctor -t %s --certs %s --region us --endpoint eu=127.0.0.1:%d --json " DOCTOR_FLAGS " 2>/dev/null",
             xdc_test_bin(), topo, certs, port);
    int rc = xdc_test_run(cmd, out, sizeof out);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    fclose(f);
    XDC_ASSERT_MSG(rc == 0 || rc == 69, "exit %d: %s", rc, out);
    json_t *root = parse_json(out);
    const char *v = json_verdict(root, "reach", "eu at 127.0.0.1:");
    XDC_ASSERT(v && strcmp(v, "pass") == 0);
    v = json_verdict(root, "tls", "eu at 127.0.0.1:");
    XDC_ASSERT(v && strcmp(v, "pass") == 0);
    XDC_ASSERT_STR_CONTAINS(out, "identity xdc://testrun/eu/0 as expected");
    json_decref(root);
}
