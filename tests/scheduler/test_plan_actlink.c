/* test_plan_actlink.c — the activation codec of each pipeline cut across regions: a topology link's
 * activation_codec (parsed, its misuse named with the link, exit 78), the resolution sender and receiver share
 * (orch_run_config_act_codec: the link's, either direction's, else the plan's for the cut, else the run file's),
 * and plan: auto's choice per cut by each link's rate. */
#include "tests/xdc_test.h"
#include "tests/scheduler/test_plan_util.h"

#include "compression/xdc_lowrank.h"

#include <stdio.h>
#include <string.h>

static void same(const char *got, const char *want)
{
    XDC_ASSERT_MSG(strcmp(got, want) == 0, "'%s', expected '%s'", got, want);
}

/* Three CPU regions of one worker each in a chain a - b - c; `ab` and `bc` are extra keys of each link. */
static const char *chain(char *y, size_t cap, double bc_gbps, const char *ab, const char *bc)
{
    snprintf(y, cap,
             "name: chain\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "  - {name: b, nodes: b1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "  - {name: c, nodes: c1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "links:\n  - {from: a, to: b, bandwidth_gbps: 10, rtt_ms: 1%s}\n"
             "  - {from: b, to: c, bandwidth_gbps: %g, rtt_ms: 1%s}\n",
             ab, bc_gbps, bc);
    return y;
}

XDC_TEST(actlink_link_activation_codec_parses_and_names_misuse)
{
    char y[2048];
    const char *good[] = {"none", "bf16", "int8", "int8:64", "lowrank", "lowrank:8:int4:2/16"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, ", activation_codec: '%s'", good[i]);
        xdc_topology *t = test_plan_parse_topo(chain(y, sizeof y, 1, key, ""));
        same(xdc_topology_link(t, 0, 1)->act_codec, good[i]);
        same(xdc_topology_link(t, 1, 0)->act_codec, good[i]); /* the mirrored direction too */
        same(xdc_topology_link(t, 1, 2)->act_codec, "");
        xdc_topology_destroy(t);
    }
    const char *bad[] = {"int4", "bf16:2", "topk", "lowrankish", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, ", activation_codec: '%s'", bad[i]);
        chain(y, sizeof y, 1, "", key);
        xdc_topology *t = NULL;
        xdc_cfg_errors errs;
        xdc_err_t rc = xdc_topology_parse(y, strlen(y), "c.yaml", &t, &errs);
        if (!bad[i][0]) { /* empty: the run file's, as without the key */
            XDC_ASSERT_OK(rc);
            xdc_topology_destroy(t);
            continue;
        }
        XDC_ASSERT_ERR(rc, XDC_ERR_CONFIG);
        XDC_ASSERT(errs.count == 1);
        char want[128];
        snprintf(want, sizeof want, "link b -> c: activation_codec '%s' is not one of", bad[i]);
        XDC_ASSERT_STR_CONTAINS(errs.items[0].msg, want);
        XDC_ASSERT_MSG(errs.items[0].line == 8, "named at line %d, not 8", errs.items[0].line);
    }
    /* xdc topo check: exit 78 */
    char path[600], cmd[1400], out[4096];
    snprintf(path, sizeof path, "%s/bad-act.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path, chain(y, sizeof y, 1, ", activation_codec: int4", ""));
    snprintf(cmd, sizeof cmd, "%s topo check %s", xdc_test_bin(), path);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "link a -> b: activation_codec 'int4'");
}

XDC_TEST(actlink_each_cut_resolves_to_its_links_codec)
{
    static orch_run_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.activation_codec, sizeof c.activation_codec, "bf16");
    char y[2048];
    xdc_topology *t = test_plan_parse_topo(chain(y, sizeof y, 1, ", activation_codec: int8", ""));
    const char *codec;
    xdc_diag d = {{0}};
    /* Both sides of a cut, either order of its regions: the link's; a link without the key: the run file's. */
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 0, 1, &codec, &d));
    same(codec, "int8");
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 1, 0, &codec, &d));
    same(codec, "int8");
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 2, 1, &codec, &d));
    same(codec, "bf16");
    /* The plan's codec for a cut comes before the run file's, after the link's set by hand. */
    c.act_cut[0].a = 1, c.act_cut[0].b = 2;
    snprintf(c.act_cut[0].codec, sizeof c.act_cut[0].codec, "lowrank");
    c.act_cut[1].a = 0, c.act_cut[1].b = 1;
    snprintf(c.act_cut[1].codec, sizeof c.act_cut[1].codec, "none");
    c.n_act_cut = 2;
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 2, 1, &codec, &d));
    same(codec, "lowrank");
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 0, 1, &codec, &d));
    same(codec, "int8");
    xdc_topology_destroy(t);
    /* Directions written apart that disagree: one cut, one codec, both links named. */
    snprintf(y, sizeof y,
             "name: two\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "  - {name: b, nodes: b1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "links:\n  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 1, symmetric: false, activation_codec: int8}\n"
             "  - {from: b, to: a, bandwidth_gbps: 1, rtt_ms: 1, symmetric: false, activation_codec: bf16}\n");
    t = test_plan_parse_topo(y);
    XDC_ASSERT_ERR(orch_run_config_act_codec(&c, t, 0, 1, &codec, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "links a -> b and b -> a: activation_codec int8 and bf16 differ");
    xdc_topology_destroy(t);
}

/* plan: auto over the chain with a 10 Gbit/s and a 2 Mbit/s link: each cut takes the weakest codec its own link
 * carries within the tolerance, so the two cuts differ, and the fast one is not compressed to the slow one's. */
XDC_TEST(actlink_plan_auto_takes_each_cuts_codec)
{
    static orch_run_config c;
    static orch_planned pl;
    char y[2048];
    xdc_topology *t = test_plan_parse_topo(chain(y, sizeof y, 0.002, "", ""));
    test_plan_auto_run("actlink-auto", "span_regions: true\nmode: sync\n", t, &c, &pl, NULL);
    XDC_ASSERT_EQ(pl.plan.mode, XDC_PLAN_PIPELINE);
    const char *ab, *bc;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 0, 1, &ab, &d));
    XDC_ASSERT_OK(orch_run_config_act_codec(&c, t, 1, 2, &bc, &d));
    printf("plan codec %s; cut a - b: %s, cut b - c: %s\n", pl.plan.codec, ab, bc);
    XDC_ASSERT_MSG(xdc_lowrank_named(bc), "the 2 Mbit/s cut got %s", bc);
    XDC_ASSERT_MSG(!xdc_lowrank_named(ab), "the 10 Gbit/s cut got %s", ab);
    xdc_topology_destroy(t);
}
