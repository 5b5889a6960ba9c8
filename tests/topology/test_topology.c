/* test_topology.c — topology files: hostlist expansion, every shipped example, each validation rule
 * with the line and column it must report, `tls: false` refused, link codecs = compression's registry,
 * the `xdc topo check` command's output and exit codes, the routes of the cross-region exchange (who relays
 * which pair); and the config loader's node API underneath. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "compression/xdc_codec.h"
#include "config/xdc_config.h"
#include "topology/xdc_topology.h"

#include <glob.h>
#include <limits.h>
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
    {"tls off",
     "name: t\nregions:\n" REGION("a", "a1")
         REGION("b", "b1") "links:\n"
                           "  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 5, tls: false}\n",
     12, 57, "tls: false is not supported: WAN links are always TLS 1.3"},
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

#define TLS_LINK(tls) "  - from: a\n    to: b\n    bandwidth_gbps: 1\n    rtt_ms: 5\n    tls: " tls "\n"

XDC_TEST(topo_tls_false_is_refused_and_true_accepted)
{
    const char *ok = "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" TLS_LINK("true");
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_parse(ok, strlen(ok), "ok.yaml", &t, &errs));
    XDC_ASSERT(t->n_links == 2 && t->links[0].tls && t->links[1].tls);
    xdc_topology_destroy(t);

    /* `xdc topo check` and `xdc launch` both refuse the file with 78, naming the value's line:col. */
    char path[512], out[16384], cmd[2048], want[700];
    snprintf(path, sizeof path, "%s/plain-tcp.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path, "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" TLS_LINK("false"));
    snprintf(want, sizeof want, "%s:16:10: error: tls: false is not supported: WAN links are always TLS 1.3", path);
    snprintf(cmd, sizeof cmd, "%s topo check %s", xdc_test_bin(), path);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_STR_CONTAINS(out, "cross-datacenter traffic");
    snprintf(cmd, sizeof cmd, "%s launch -t %s -c examples/train/demo.yaml --run-dir %s/run", xdc_test_bin(), path,
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, want);
}

XDC_TEST(topo_link_codecs_are_the_codec_registry)
{
    /* topology/ may not depend on compression/ (docs/design.md), so it keeps its own word list; this
     * ties it to the registry: every registry name and `auto` is accepted, and the refusal lists exactly
     * those. */
    char expected[256] = "auto";
    for (size_t i = 0; i < xdc_codec_info_count(); i++) {
        const char *name = xdc_codec_info_at(i)->name;
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), ", %s", name);
        char y[1024];
        snprintf(y, sizeof y,
                 "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") "links:\n" LINK("a", "b") "    codec: %s\n",
                 name);
        xdc_topology *t = NULL;
        xdc_cfg_errors errs;
        xdc_err_t rc = xdc_topology_parse(y, strlen(y), "c.yaml", &t, &errs);
        XDC_ASSERT_MSG(rc == XDC_OK, "link codec %s refused: %s", name, errs.count ? errs.items[0].msg : "");
        XDC_ASSERT(strcmp(t->links[0].codec, name) == 0);
        xdc_topology_destroy(t);
    }
    const char *bad = "name: t\nregions:\n" REGION("a", "a1")
        REGION("b", "b1") "links:\n" LINK("a", "b") "    codec: lz4\n";
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_ERR(xdc_topology_parse(bad, strlen(bad), "c.yaml", &t, &errs), XDC_ERR_CONFIG);
    char want[300];
    snprintf(want, sizeof want, "codec: 'lz4' is not one of: %s", expected);
    XDC_ASSERT(errs.count == 1);
    XDC_ASSERT_MSG(strcmp(errs.items[0].msg, want) == 0, "'%s', expected '%s'", errs.items[0].msg, want);
}

XDC_TEST(config_nodes_map_get_and_positions)
{
    const char *y = "a: 1\nb:\n  - x\n  - {k: v, k2: [1, 2]}\nc: {d: e}\n";
    xdc_cfg_doc *doc = NULL;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, "n.yaml");
    XDC_ASSERT_OK(xdc_cfg_parse(y, strlen(y), &doc, &errs));
    const xdc_cfg_node *root = xdc_cfg_root(doc), *b = xdc_cfg_map_get(root, "b");
    XDC_ASSERT_EQ(xdc_cfg_node_kind(root), XDC_CFG_MAPPING);
    XDC_ASSERT(strcmp(xdc_cfg_scalar(xdc_cfg_map_get(root, "a")), "1") == 0);
    XDC_ASSERT(xdc_cfg_map_get(root, "zz") == NULL && xdc_cfg_map_get(b, "k") == NULL);
    XDC_ASSERT_EQ(xdc_cfg_node_kind(b), XDC_CFG_SEQUENCE);
    XDC_ASSERT_EQ(xdc_cfg_seq_len(b), 2);
    XDC_ASSERT(xdc_cfg_seq_item(b, 2) == NULL && xdc_cfg_seq_item(b, -1) == NULL);
    const xdc_cfg_node *m = xdc_cfg_seq_item(b, 1), *k2 = xdc_cfg_map_get(m, "k2");
    XDC_ASSERT(xdc_cfg_node_line(m) == 4 && xdc_cfg_node_col(m) == 5);
    XDC_ASSERT(xdc_cfg_node_line(k2) == 4 && xdc_cfg_node_col(k2) == 16);
    XDC_ASSERT(strcmp(xdc_cfg_scalar(xdc_cfg_seq_item(k2, 1)), "2") == 0);
    XDC_ASSERT(xdc_cfg_scalar(m) == NULL && xdc_cfg_seq_len(m) == 0);
    XDC_ASSERT(xdc_cfg_node_kind(NULL) == XDC_CFG_ABSENT && xdc_cfg_node_line(NULL) == 0);
    /* The field mapper over those nodes, and an error at a node. */
    typedef struct {
        int a;
        const xdc_cfg_node *b, *c;
    } top;
    static const xdc_cfg_field f[] = {
        {"a", XDC_CFG_INT, offsetof(top, a), 0, true, 0, 10, NULL},
        {"b", XDC_CFG_NODE, offsetof(top, b), 0, false, 0, 0, NULL},
        {"c", XDC_CFG_NODE, offsetof(top, c), 0, false, 0, 0, NULL},
    };
    top v = {0};
    XDC_ASSERT_EQ(xdc_cfg_map_fields(root, f, 3, &v, &errs), 0);
    XDC_ASSERT(v.a == 1 && v.b == b && xdc_cfg_node_kind(v.c) == XDC_CFG_MAPPING);
    XDC_ASSERT_EQ(xdc_cfg_map_fields(v.c, f, 3, &v, &errs), 2); /* unknown d, missing a */
    xdc_cfg_error_at(&errs, k2, "here");
    XDC_ASSERT(errs.count == 3 && errs.items[2].line == 4 && errs.items[2].col == 16);
    xdc_cfg_destroy(doc);
}

/* Nesting is capped at 64 levels before the document is built: 64 load, 65 are refused at the bracket
 * that opens level 65, and a 2 MB file of brackets is refused with exit 78 (at once: libyaml alone is
 * quadratic in depth, so the uncapped load ran for minutes). */
XDC_TEST(config_nesting_is_capped_at_64_levels)
{
    char ok[200], deep[200];
    for (int levels = 63; levels <= 64; levels++) {
        char *t = levels == 63 ? ok : deep;
        memcpy(t, "a:\n  ", 5);
        memset(t + 5, '[', (size_t)levels);
        t[5 + levels] = '1';
        memset(t + 6 + levels, ']', (size_t)levels);
        memcpy(t + 6 + 2 * levels, "\n", 2);
    }
    xdc_cfg_doc *doc = NULL;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, "n.yaml");
    XDC_ASSERT_OK(xdc_cfg_parse(ok, strlen(ok), &doc, &errs)); /* the mapping + 63 lists */
    xdc_cfg_destroy(doc);
    XDC_ASSERT_ERR(xdc_cfg_parse(deep, strlen(deep), &doc, &errs), XDC_ERR_CONFIG);
    XDC_ASSERT(doc == NULL && errs.count == 1 && errs.items[0].line == 2 && errs.items[0].col == 66);
    XDC_ASSERT_STR_CONTAINS(errs.items[0].msg, "nesting deeper than 64 levels");

    size_t half = 1u << 20;
    char *big = malloc(2 * half + 8);
    XDC_ASSERT(big != NULL);
    memcpy(big, "x: 1\ny: ", 8);
    memset(big + 8, '[', half);
    memset(big + 8 + half, ']', half - 8);
    big[2 * half] = '\n';
    big[2 * half + 1] = '\0';
    char path[512], out[4096], cmd[1200], want[600];
    snprintf(path, sizeof path, "%s/nested.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path, big);
    free(big);
    snprintf(cmd, sizeof cmd, "%s topo check %s", xdc_test_bin(), path);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    snprintf(want, sizeof want, "%s:2:67: error: nesting deeper than 64 levels", path);
    XDC_ASSERT_STR_CONTAINS(out, want);
}

/* An error inside the model file a run file (or `xdc plan -m`) names is reported under the model file's
 * name and line, not the run file's or the topology's. */
XDC_TEST(config_model_file_errors_name_the_model_file)
{
    const char *t = xdc_test_tmpdir();
    char model[512], run[512], cmd[2048], out[8192], want[700];
    snprintf(model, sizeof model, "%s/bad-model.yaml", t);
    snprintf(run, sizeof run, "%s/run.yaml", t);
    xdc_test_write_file(model, "model:\n  layers: 2\n  bogus: 1\n");
    char text[700];
    snprintf(text, sizeof text, "model: %s\ndata: /usr/share/games/fortunes\nsteps: 3\n", model);
    xdc_test_write_file(run, text);
    snprintf(want, sizeof want, "%s:3:3: error: unknown key 'bogus'", model);
    snprintf(cmd, sizeof cmd, "%s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/r", xdc_test_bin(),
             run, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT(strstr(out, "run.yaml:3:3") == NULL);
    snprintf(cmd, sizeof cmd, "%s plan -t examples/topology/demo-2region.yaml -m %s", xdc_test_bin(), model);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, want);
}

/* Worker k serves metrics on metrics_port + k, so the range must fit the worker count: 65534 with the
 * demo's 4 workers would need ports up to 65537 and is refused with 78, naming the run file and key. */
XDC_TEST_T(config_metrics_port_range_fits_the_workers, 120)
{
    const char *t = xdc_test_tmpdir();
    char run[512], cmd[2048], out[16384], log[600], text[700], src[512], model[PATH_MAX];
    snprintf(run, sizeof run, "%s/run.yaml", t);
    XDC_ASSERT(realpath(xdc_test_src("examples/models/tiny.yaml", src, sizeof src), model) != NULL);
    snprintf(text, sizeof text, "model: %s\ndata: /usr/share/games/fortunes\nsteps: 3\nmetrics_port: 65534\n", model);
    xdc_test_write_file(run, text);
    snprintf(cmd, sizeof cmd, "%s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/r", xdc_test_bin(),
             run, t);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "launch exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "cat %s/r/logs/*.log", t);
    xdc_test_run(cmd, out, sizeof out);
    snprintf(log, sizeof log, "%s: metrics_port 65534: its 4 workers would serve ports 65534..65537, beyond 65535",
             run);
    XDC_ASSERT_STR_CONTAINS(out, log);
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

/* The routes of the cross-region exchange (xdc_topology_routes): who relays which pair. */
XDC_TEST(topo_routes_relay_through_the_hub_and_the_wider_link)
{
    xdc_topology *t;
    xdc_cfg_errors errs;
    int route[16];
    /* The star of heterogeneous.yaml: us-west (1) and eu-north (2) reach each other through us-central (0). */
    XDC_ASSERT_OK(xdc_topology_load("examples/topology/heterogeneous.yaml", &t, &errs));
    XDC_ASSERT_OK(xdc_topology_routes(t, NULL, route));
    XDC_ASSERT(route[1 * 3 + 2] == 0 && route[2 * 3 + 1] == 0); /* relayed by the hub */
    XDC_ASSERT(route[0 * 3 + 1] == 0 && route[0 * 3 + 2] == 0 && route[1 * 3 + 0] == 1 && route[2 * 3 + 0] == 2);
    XDC_ASSERT(route[0] == -1 && route[4] == -1 && route[8] == -1);
    XDC_ASSERT_EQ(xdc_topology_route_hops(t, route, 1, 2), 2);
    XDC_ASSERT_EQ(xdc_topology_route_hops(t, route, 0, 2), 1);
    xdc_topology_destroy(t);
    /* A partial mesh a-b (10), a-c (100), b-d (1), c-d (5): a and d are two hops apart through b or c, and
     * each gets the other's data over the wider last link (c: 100 and 5 against b's 10 and 1); so are b and c,
     * through a or d, and a's links are the wider (c gets b's over a-c, b gets c's over a-b). */
    const char *y = "name: t\nregions:\n" REGION("a", "a1") REGION("b", "b1") REGION("c", "c1")
        REGION("d", "d1") "links:\n"
                          "  - {from: a, to: b, bandwidth_gbps: 10, rtt_ms: 5}\n"
                          "  - {from: a, to: c, bandwidth_gbps: 100, rtt_ms: 5}\n"
                          "  - {from: b, to: d, bandwidth_gbps: 1, rtt_ms: 5}\n"
                          "  - {from: c, to: d, bandwidth_gbps: 5, rtt_ms: 5}\n";
    XDC_ASSERT_OK(xdc_topology_parse(y, strlen(y), "mesh.yaml", &t, &errs));
    XDC_ASSERT_OK(xdc_topology_routes(t, NULL, route));
    enum { A, B, C, D };
    XDC_ASSERT_MSG(route[A * 4 + D] == C && route[D * 4 + A] == C, "a <-> d relayed by %d and %d, not c",
                   route[A * 4 + D], route[D * 4 + A]);
    XDC_ASSERT(route[B * 4 + C] == A && route[C * 4 + B] == A);
    XDC_ASSERT(route[B * 4 + D] == B && route[A * 4 + B] == A);
    XDC_ASSERT_EQ(xdc_topology_route_hops(t, route, B, C), 2);
    xdc_topology_destroy(t);
}
