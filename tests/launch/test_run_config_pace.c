/* test_run_config_pace.c — the run file's keys of DiLoCo's "nobody waits": diloco.nobody_waits and
 * diloco.slowdown load (slowdown in any mode), the slowdown list is matched against the topology's regions, and
 * each misuse is named (a factor out of range with its line and column, the wrong mode); the `elastic:` key that
 * makes sync mode go by quorum; microbatches_per_replica, per region or for all, and its misuse;
 * emulate_layer_ms, one value for every region or one per region; diloco.overlap (eager or delayed), which
 * needs overlapped rounds; diloco.train_while_waiting, which needs DiLoCo's rounds at once or streaming; and the
 * stages a topology's regions can hold (pipeline_stages, span_regions). */
#include "tests/xdc_test.h"

#include "orchestrator/runcfg/orch_run_config.h"
#include "topology/xdc_topology.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Load a run file of the tiny model with `extra`; its errors in errs. */
static xdc_err_t load(const char *name, const char *extra, orch_run_config *c, xdc_cfg_errors *errs)
{
    char cwd[512], path[1024], text[2048];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    snprintf(text, sizeof text, "model: %s/examples/models/tiny.yaml\ndata: /usr/share/games/fortunes\n%s", cwd, extra);
    xdc_test_write_file(path, text);
    return orch_run_config_load(path, c, errs);
}

/* The first error's text contains `want`. */
static void names(const xdc_cfg_errors *errs, const char *want)
{
    XDC_ASSERT_MSG(errs->count > 0, "no error, expected one naming '%s'", want);
    XDC_ASSERT_STR_CONTAINS(errs->items[0].msg, want);
}

XDC_TEST(run_config_nobody_waits_and_slowdown_load_and_name_misuse)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(load("pace", "mode: diloco\ndiloco: {nobody_waits: true, slowdown: [1, 2.5]}\n", &c, &errs));
    XDC_ASSERT(c.diloco.nobody_waits);
    double s[3];
    XDC_ASSERT_OK(orch_run_config_slowdown(&c, 2, s, &d));
    XDC_ASSERT_MSG(s[0] == 1.0 && s[1] == 2.5, "slowdown %g, %g", s[0], s[1]);
    XDC_ASSERT_ERR(orch_run_config_slowdown(&c, 3, s, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "diloco.slowdown in ");
    XDC_ASSERT_STR_CONTAINS(d.msg, "has 2 entries; the topology has 3 regions");
    /* Without the key every region has slowdown 1. */
    XDC_ASSERT_OK(load("plain", "mode: diloco\n", &c, &errs));
    XDC_ASSERT_OK(orch_run_config_slowdown(&c, 3, s, &d));
    XDC_ASSERT_MSG(s[0] == 1.0 && s[1] == 1.0 && s[2] == 1.0, "slowdown %g, %g, %g", s[0], s[1], s[2]);
    /* Any mode: a bench's sync and streaming rows slow the same region. */
    XDC_ASSERT_OK(load("sync-slow", "mode: sync\ndiloco: {slowdown: [1, 1, 2]}\n", &c, &errs));
    XDC_ASSERT_OK(orch_run_config_slowdown(&c, 3, s, &d));
    XDC_ASSERT_MSG(s[0] == 1.0 && s[1] == 1.0 && s[2] == 2.0, "slowdown %g, %g, %g", s[0], s[1], s[2]);
    XDC_ASSERT_ERR(load("fast", "mode: diloco\ndiloco:\n  slowdown: [1, 0.5]\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "diloco.slowdown[1]: a number in [1, 1000] expected");
    XDC_ASSERT_MSG(errs.items[0].line == 5 && errs.items[0].col == 17, "named at %d:%d, not 5:17", errs.items[0].line,
                   errs.items[0].col);
    XDC_ASSERT_ERR(load("word", "mode: diloco\ndiloco: {slowdown: slow}\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "diloco.slowdown: a list of 1 to 256 numbers");
    XDC_ASSERT_ERR(load("sync", "mode: sync\ndiloco: {nobody_waits: true}\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "diloco.nobody_waits needs mode diloco (this run's mode is sync)");
    /* plan: auto keeps nobody waits to the planner's period (a re-plan keeps the period: xdc_plan_replan_wan) */
    XDC_ASSERT_OK(load("auto", "mode: diloco\nplan: auto\ndiloco: {nobody_waits: true}\n", &c, &errs));
}

XDC_TEST(run_config_train_while_waiting_needs_diloco_rounds_at_once_or_streaming)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(load("tww", "mode: diloco\ndiloco: {train_while_waiting: true, nobody_waits: true}\n", &c, &errs));
    XDC_ASSERT(c.diloco.train_while_waiting);
    XDC_ASSERT_OK(load("tww-off", "mode: diloco\n", &c, &errs));
    XDC_ASSERT(!c.diloco.train_while_waiting);
    XDC_ASSERT_OK(load("tww-stream", "mode: streaming\ndiloco: {train_while_waiting: true}\n", &c, &errs));
    XDC_ASSERT(c.diloco.train_while_waiting);
    XDC_ASSERT_ERR(load("tww-sync", "mode: sync\ndiloco: {train_while_waiting: true}\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "diloco.train_while_waiting needs mode diloco with its rounds at once (no diloco.overlap_steps) or "
                 "streaming");
    names(&errs, "(this run: mode sync, overlap_steps 0)");
    XDC_ASSERT_ERR(
        load("tww-overlap", "mode: diloco\ndiloco: {train_while_waiting: true, overlap_steps: 1}\n", &c, &errs),
        XDC_ERR_CONFIG);
    names(&errs, "(this run: mode diloco, overlap_steps 1)");
    XDC_ASSERT_ERR(load("tww-auto", "mode: diloco\nplan: auto\ndiloco: {train_while_waiting: true}\n", &c, &errs),
                   XDC_ERR_CONFIG);
    names(&errs, "plan: auto)");
}

/* `elastic:` in a sync-mode run file, any settings, makes its steps rounds of the elastic protocol across
 * regions; without it, or with delayed averaging, sync mode is all or nothing. */
XDC_TEST(run_config_overlap_eager_needs_overlapped_rounds)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(load("delayed", "mode: diloco\ndiloco: {overlap_steps: 2}\n", &c, &errs));
    XDC_ASSERT(!c.diloco.eager);
    XDC_ASSERT_OK(load("eager", "mode: diloco\ndiloco: {overlap_steps: 2, overlap: eager}\n", &c, &errs));
    XDC_ASSERT(c.diloco.eager);
    XDC_ASSERT_ERR(load("streaming", "mode: streaming\ndiloco: {overlap: eager}\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "diloco.overlap: eager needs DiLoCo's overlapped rounds");
    XDC_ASSERT_ERR(load("blocking", "mode: diloco\ndiloco: {overlap: eager}\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "(this run's mode is diloco, overlap_steps 0)");
    XDC_ASSERT_ERR(load("word", "mode: diloco\ndiloco: {overlap_steps: 1, overlap: early}\n", &c, &errs),
                   XDC_ERR_CONFIG);
    names(&errs, "overlap");
}

XDC_TEST(run_config_elastic_key_makes_sync_mode_elastic)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(load("esync", "mode: sync\nelastic: {}\n", &c, &errs));
    XDC_ASSERT(c.elastic.set && orch_quorum_elastic(&c, 3) && !orch_quorum_elastic(&c, 1));
    XDC_ASSERT_OK(load("ssync", "mode: sync\n", &c, &errs));
    XDC_ASSERT(!c.elastic.set && !orch_quorum_elastic(&c, 3));
    XDC_ASSERT_OK(load("dsync", "mode: sync\nelastic: {min_regions: 2}\nsync: {delay_steps: 1}\n", &c, &errs));
    XDC_ASSERT(c.elastic.set && !orch_quorum_elastic(&c, 3));
    XDC_ASSERT_OK(load("ediloco", "mode: diloco\n", &c, &errs)); /* DiLoCo goes by quorum without the key */
    XDC_ASSERT(orch_quorum_elastic(&c, 3));
}

XDC_TEST(run_config_microbatches_per_replica_per_region_or_all)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    xdc_diag d = {{0}};
    int m;
    XDC_ASSERT_OK(load("mbr", "microbatches_per_replica: [3, 1]\n", &c, &errs));
    const int two[3] = {2, 2, 2}, uneven[2] = {1, 3};
    XDC_ASSERT_OK(orch_run_config_replica_mb(&c, two, 2, 1, 0, &m, &d)); /* every region's list */
    XDC_ASSERT_EQ(m, 3);
    XDC_ASSERT_OK(load("mbr4", "microbatches_per_replica: [3, 1, 2, 5]\n", &c, &errs));
    XDC_ASSERT_OK(orch_run_config_replica_mb(&c, two, 2, 1, 1, &m, &d)); /* region by region */
    XDC_ASSERT_EQ(m, 5);
    XDC_ASSERT_OK(orch_run_config_replica_mb(&c, uneven, 2, 1, 2, &m, &d)); /* regions of 1 and 3 replicas */
    XDC_ASSERT_EQ(m, 5);
    XDC_ASSERT_ERR(orch_run_config_replica_mb(&c, two, 3, 0, 0, &m, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "has 4 entries; the run has 2 replicas per region");
    XDC_ASSERT_OK(load("mbr", "microbatches_per_replica: [3, 1]\n", &c, &errs)); /* a list per region: which? */
    XDC_ASSERT_ERR(orch_run_config_replica_mb(&c, uneven, 2, 1, 0, &m, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "regions differ in replicas, so one entry for each of its 4 replicas");
    XDC_ASSERT_ERR(load("mbr0", "microbatches_per_replica: [3, 0]\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "microbatches_per_replica[1]: an integer in [1, 1024] expected");
    XDC_ASSERT_ERR(load("mbrd", "mode: diloco\nmicrobatches_per_replica: [3, 1]\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "microbatches_per_replica needs mode sync");
}

XDC_TEST(run_config_emulate_layer_ms_for_all_or_per_region)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    xdc_diag d = {{0}};
    double ms;
    XDC_ASSERT_OK(load("lms0", "mode: sync\n", &c, &errs)); /* without the key: real compute only */
    XDC_ASSERT_OK(orch_run_config_layer_ms(&c, 3, 2, &ms, &d));
    XDC_ASSERT_MSG(ms == 0, "layer_ms %g", ms);
    XDC_ASSERT_OK(load("lms1", "emulate_layer_ms: [20]\n", &c, &errs)); /* every region */
    XDC_ASSERT_OK(orch_run_config_layer_ms(&c, 3, 2, &ms, &d));
    XDC_ASSERT_MSG(ms == 20, "layer_ms %g", ms);
    XDC_ASSERT_OK(load("lms2", "mode: diloco\nemulate_layer_ms: [10, 25.5]\n", &c, &errs)); /* any mode */
    XDC_ASSERT_OK(orch_run_config_layer_ms(&c, 2, 1, &ms, &d));
    XDC_ASSERT_MSG(ms == 25.5, "layer_ms %g", ms);
    XDC_ASSERT_ERR(orch_run_config_layer_ms(&c, 3, 0, &ms, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "emulate_layer_ms in ");
    XDC_ASSERT_STR_CONTAINS(d.msg, "has 2 entries; the topology has 3 regions");
    XDC_ASSERT_ERR(load("lmsn", "emulate_layer_ms: [10, -1]\n", &c, &errs), XDC_ERR_CONFIG);
    names(&errs, "emulate_layer_ms[1]: a number in [0, 60000] expected");
}

/* Regions of 2 and 1 workers: one stage fits both, two do not fit eu-west (named); span_regions needs one stage per
 * worker of the topology (3), not 2. */
XDC_TEST(run_config_layout_names_the_region_that_cannot_hold_the_stages)
{
    static orch_run_config c;
    xdc_cfg_errors errs;
    xdc_diag d = {{0}};
    char path[1024];
    snprintf(path, sizeof path, "%s/het21.yaml", xdc_test_tmpdir());
    static const char region[] = "gpus_per_node: 0, gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}, "
                                 "intra: {bandwidth_gbps: 40, latency_us: 10}";
    char text[1024];
    snprintf(text, sizeof text,
             "name: het21\nregions:\n  - {name: us-east, nodes: e1, workers_per_node: 2, %s}\n"
             "  - {name: eu-west, nodes: w1, workers_per_node: 1, %s}\n"
             "links:\n  - {from: us-east, to: eu-west, bandwidth_gbps: 1, rtt_ms: 2, cost_usd_per_gb: 0.02}\n",
             region, region);
    xdc_test_write_file(path, text);
    xdc_topology *t = NULL;
    XDC_ASSERT_OK(xdc_topology_load(path, &t, &errs));
    XDC_ASSERT_OK(load("one-stage", "pipeline_stages: 1\n", &c, &errs));
    XDC_ASSERT_OK(orch_run_config_check_layout(&c, t, &d));
    XDC_ASSERT_OK(load("two-stages", "pipeline_stages: 2\n", &c, &errs));
    XDC_ASSERT_ERR(orch_run_config_check_layout(&c, t, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "region eu-west has 1 workers, which the 2 pipeline stages must divide");
    XDC_ASSERT_OK(load("span", "pipeline_stages: 2\nspan_regions: true\n", &c, &errs));
    XDC_ASSERT_ERR(orch_run_config_check_layout(&c, t, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "pipeline_stages (2) must equal the workers of all regions (3) and not exceed the "
                                   "model's 2 layers");
    xdc_topology_destroy(t);
}
