/* test_topology.c — topology files: hostlist expansion, every shipped example, each validation rule
 * with the line and column it must report, and the `xdc topo check` command's output and exit codes. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "topology/xdc_topology.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>

static void expect_hosts(const char *expr, const char *joined)
{
    char **h;
    int n;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_hostlist_expand(expr, 1000, &h, &n, &d) == XDC_OK, "%s: %s", expr, d.msg);
    char buf[1024] = "";
    for (int i = 0; i < n; i++) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? " " : "", h[i]);
    XDC_ASSERT_MSG(strcmp(buf, joined) == 0, "%s expanded to '%s', expected '%s'", expr, buf, joined);
    xdc_hostlist_free(h, n);
}

static void expect_hostlist_error(const char *expr, xdc_err_t want, const char *msg_part)
{
    char **h;
    int n;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_hostlist_expand(expr, 1000, &h, &n, &d), want);
    XDC_ASSERT_STR_CONTAINS(d.msg, msg_part);
}

XDC_TEST(topo_hostlist_expands_slurm_syntax)
{
    expect_hosts("a[01-03,7],b", "a01 a02 a03 a7 b");
    expect_hosts("gpu-use1-[001-003]", "gpu-use1-001 gpu-use1-002 gpu-use1-003");
    expect_hosts("r[1-2]-n[8-9]", "r1-n8 r1-n9 r2-n8 r2-n9");
    expect_hosts("node[9-11]", "node9 node10 node11");
    expect_hosts("x[0]", "x0");
    expect_hosts("plain", "plain");
    expect_hosts("a[1-2]b", "a1b a2b");
    expect_hostlist_error("a[3-1]", XDC_ERR_INVALID, "backwards");
    expect_hostlist_error("a[1-2", XDC_ERR_INVALID, "unclosed");
    expect_hostlist_error("a]", XDC_ERR_INVALID, "unmatched");
    expect_hostlist_error("a[x]", XDC_ERR_INVALID, "not a digit");
    expect_hostlist_error("a,,b", XDC_ERR_INVALID, "empty host");
    expect_hostlist_error("a[]", XDC_ERR_INVALID, "empty range");
    expect_hostlist_error("a[[1]]", XDC_ERR_INVALID, "nested");
    expect_hostlist_error("n[1-100000]", XDC_ERR_RANGE, "more than 1000 hosts");
    expect_hostlist_error("n[1-20]-[1-100]", XDC_ERR_RANGE, "more than 1000 hosts");
}

XDC_TEST(topo_every_example_parses)
{
    glob_t g;
    XDC_ASSERT(glob("examples/topology/*.yaml", 0, NULL, &g) == 0);
    XDC_ASSERT(g.gl_pathc >= 3);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        xdc_cfg_errors errs;
        xdc_topology *t;
        xdc_err_t rc = xdc_topology_load(g.gl_pathv[i], &t, &errs);
        if (rc != XDC_OK) xdc_cfg_errors_print(&errs, stderr);
        XDC_ASSERT_MSG(rc == XDC_OK, "%s does not parse: %s", g.gl_pathv[i], errs.count ? errs.items[0].msg : "");
        XDC_ASSERT(t->n_regions >= 2);
        XDC_ASSERT(xdc_topology_total_workers(t) >= 2);
        xdc_topology_destroy(t);
    }
    globfree(&g);
}

XDC_TEST(topo_defaults_symmetry_and_lookup)
{
    xdc_topology *t;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load("examples/topology/heterogeneous.yaml", &t, &errs));
    int c = xdc_topology_region_index(t, "us-central"), e = xdc_topology_region_index(t, "eu-north"),
        w = xdc_topology_region_index(t, "us-west");
    XDC_ASSERT(c == 0 && w == 1 && e == 2);
    XDC_ASSERT_EQ(t->regions[e].n_hosts, 4);
    XDC_ASSERT(strcmp(t->regions[e].hosts[3], "l40s-r2-n2") == 0);
    const xdc_link *fwd = xdc_topology_link(t, c, e), *back = xdc_topology_link(t, e, c);
    XDC_ASSERT(fwd && back);
    XDC_ASSERT_NEAR(fwd->bandwidth_gbps, 10, 0);
    XDC_ASSERT_NEAR(back->bandwidth_gbps, 5, 0); /* the explicit reverse wins over the mirror */
    const xdc_link *cw = xdc_topology_link(t, c, w), *wc = xdc_topology_link(t, w, c);
    XDC_ASSERT(cw && wc && wc->rtt_ms == cw->rtt_ms && wc->streams == 8);
    XDC_ASSERT(cw->mtu == 1500 && cw->tls && strcmp(cw->codec, "auto") == 0); /* defaults */
    XDC_ASSERT(xdc_topology_link(t, w, e) == NULL);
    XDC_ASSERT_EQ(t->regions[c].workers_per_node, 8);
    xdc_topology_destroy(t);
}

/* A minimal valid two-region file that each case below breaks in one place. */
#define REGION(name, nodes)                                            \
    "  - name: " name "\n    nodes: " nodes "\n    gpus_per_node: 8\n" \
    "    gpu: {model: H100, bf16_tflops: 989, memory_gib: 80}\n"
#define LINK(from, to) "  - from: " from "\n    to: " to "\n    bandwidth_gbps: 10\n    rtt_ms: 50\n"

typedef struct {
    const char *what;
    const char *text;
    int line, col;
    const char *msg;
} bad_case;

static const bad_case bad_cases[] = {
    {"unknown key",
     "name: t\nregions:\n" REGION("a", "a1") "    colour: blue\n" REGION("b", "b1") "links:\n" LINK("a", "b"), 7, 5,
     "unknown key 'colour'"},
    {"duplicate region", "name: t\nregions:\n" REGION("a", "a1") REGION("a", "b1") "links:\n" LINK("a", "a"), 7, 11,
     "duplicate region 'a'"},
    {"link to unknown region", "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" LINK("a", "c"), 13,
     9, "link to unknown region 'c'"},
    {"disconnected graph",
     "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") REGION("c", "c1") "links:\n" LINK("a", "b"), 11, 5,
     "region 'c' is not connected"},
    {"duplicate host", "name: t\nregions:\n" REGION("a", "n[1-3]") REGION("b", "n[3-4]") "links:\n" LINK("a", "b"), 8,
     12, "host 'n3' is in both region 'a' and region 'b'"},
    {"negative bandwidth",
     "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n"
                                                               "  - {from: a, to: b, bandwidth_gbps: -1, rtt_ms: 5}\n",
     12, 38, "bandwidth_gbps: -1 is out of range"},
    {"loss of 100%",
     "name: t\nregions:\n" REGION("a", "a1")
         REGION("b", "b1") "links:\n"
                           "  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 5, loss_pct: 100}\n",
     12, 62, "loss_pct: 100 is out of range"},
    {"not a number",
     "name: t\nregions:\n" REGION("a", "a1")
         REGION("b", "b1") "links:\n"
                           "  - {from: a, to: b, bandwidth_gbps: fast, rtt_ms: 5}\n",
     12, 38, "expected a number, found 'fast'"},
    {"missing key", "name: t\nregions:\n  - name: a\n    nodes: a1\n    gpus_per_node: 1\n", 3, 5,
     "missing required key 'gpu'"},
    {"bad codec",
     "name: t\nregions:\n" REGION("a", "a1")
         REGION("b", "b1") "links:\n"
                           "  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 5, codec: gzip}\n",
     12, 59, "'gzip' is not one of"},
    {"bad hostlist", "name: t\nregions:\n" REGION("a", "a[2-1]") REGION("b", "b1") "links:\n" LINK("a", "b"), 4, 12,
     "runs backwards"},
    {"self link", "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" LINK("a", "a") LINK("a", "b"),
     12, 5, "to itself"},
    {"duplicate link",
     "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" LINK("a", "b") LINK("a", "b"), 16, 5,
     "duplicate link a -> b"},
    {"yaml syntax", "name: t\nregions: [\n", 3, 1, "YAML syntax"},
    {"cpu region without workers",
     "name: t\nregions:\n  - name: a\n    nodes: a1\n    gpus_per_node: 0\n"
     "    gpu: {model: cpu, bf16_tflops: 1, memory_gib: 1}\n",
     3, 5, "workers_per_node is required"},
};

XDC_TEST(topo_each_rule_reports_line_and_column)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        xdc_topology *t = NULL;
        xdc_cfg_errors errs;
        xdc_err_t rc = xdc_topology_parse(c->text, strlen(c->text), "bad.yaml", &t, &errs);
        XDC_ASSERT_MSG(rc == XDC_ERR_CONFIG && t == NULL, "%s: accepted", c->what);
        XDC_ASSERT_MSG(errs.count >= 1, "%s: no error recorded", c->what);
        int found = 0;
        for (int k = 0; k < errs.count; k++)
            if (strstr(errs.items[k].msg, c->msg)) {
                found = 1;
                XDC_ASSERT_MSG(errs.items[k].line == c->line && errs.items[k].col == c->col,
                               "%s: reported at %d:%d, expected %d:%d (%s)", c->what, errs.items[k].line,
                               errs.items[k].col, c->line, c->col, errs.items[k].msg);
            }
        if (!found) xdc_cfg_errors_print(&errs, stderr);
        XDC_ASSERT_MSG(found, "%s: no error containing '%s' (first: %s)", c->what, c->msg, errs.items[0].msg);
    }
}

XDC_TEST(topo_check_command_summary_json_and_exit_78)
{
    char out[16384], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s topo check examples/topology/demo-2region.yaml", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "2 regions, 2 nodes, 4 workers");
    XDC_ASSERT_STR_CONTAINS(out, "0.1/40");
    snprintf(cmd, sizeof cmd, "%s topo check --json examples/topology/three-region.yaml", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "\"name\": \"three-region-h100\"");
    XDC_ASSERT_STR_CONTAINS(out, "\"gpu-apne1-016\"");

    char path[512];
    snprintf(path, sizeof path, "%s/broken.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path,
                        "name: t\nregions:\n" REGION("a", "a1")
                            REGION("b", "b1") "links:\n"
                                              "  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 5, loss_pct: 150}\n");
    snprintf(cmd, sizeof cmd, "%s topo check %s", xdc_test_bin(), path);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    char want[600];
    snprintf(want, sizeof want, "%s:12:62: error: loss_pct: 150 is out of range", path);
    XDC_ASSERT_STR_CONTAINS(out, want);

    snprintf(cmd, sizeof cmd, "%s topo check %s/missing.yaml", xdc_test_bin(), xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "cannot open");
    snprintf(cmd, sizeof cmd, "%s topo frobnicate", xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
}

XDC_TEST(topo_alloc_failures_are_clean)
{
    /* Walk the allocation failure points of a full load: each must fail cleanly (no crash; leaks are
     * caught by the sanitizer build). */
    size_t len;
    char *text = xdc_test_read_file("examples/topology/heterogeneous.yaml", &len);
    XDC_ASSERT(text != NULL);
    xdc_topology *t;
    xdc_alloc_fail_at(0);
    XDC_ASSERT_OK(xdc_topology_parse(text, len, "h.yaml", &t, NULL));
    xdc_topology_destroy(t);
    long total = xdc_alloc_count();
    XDC_ASSERT(total > 10);
    for (long n = 1; n <= total; n++) {
        xdc_alloc_fail_at(n);
        xdc_err_t rc = xdc_topology_parse(text, len, "h.yaml", &t, NULL);
        xdc_alloc_fail_at(0);
        if (rc == XDC_OK) xdc_topology_destroy(t);
        XDC_ASSERT_MSG(rc != XDC_OK || t != NULL, "allocation %ld: success without a topology", n);
    }
    free(text);
}
