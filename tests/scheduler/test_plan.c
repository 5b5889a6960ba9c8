/* test_plan.c — the planner on cases worked out by hand: a region twice as fast gets twice the layers, a
 * model too big for one region is cut at the cheapest link, unequal replicas get microbatches by speed, a slow link gets a stronger codec or a longer
 * period, a WAN-bound pair of regions gets sparse DiLoCo with keep_unsent (and `plan: auto` runs it) where a
 * fast link syncs every step, no candidate exceeds GPU memory, an impossible topology is refused with its reason, the search
 * is deterministic, the planner's parameter counts are what real stages allocate, its activation memory is
 * the high-water mark a real 1F1B run reaches on every stage, and `xdc plan` /
 * `xdc simulate` print, emit JSON, calibrate each stage and exit with sysexits codes. */
#include "tests/xdc_test.h"

#include "tests/scheduler/test_plan_util.h"

#include "common/xdc_alloc.h"
#include "kernels/xdc_model_ops.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "model/xdc_model_config.h"
#include "model/xdc_model_shape.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "orchestrator/worker/orch_worker.h"
#include "scheduler/xdc_plan.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Two regions of `gpus` GPUs each; the link is written out in full. */
static xdc_topology *two_regions(int gpus, double tflops_a, double tflops_b, double mem_gib, const char *link)
{
    char y[2048];
    snprintf(y, sizeof y,
             "name: two\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: %d, gpu: {model: x, bf16_tflops: %g, memory_gib: %g},"
             " intra: {bandwidth_gbps: 1000, latency_us: 2}}\n"
             "  - {name: b, nodes: b1, gpus_per_node: %d, gpu: {model: y, bf16_tflops: %g, memory_gib: %g},"
             " intra: {bandwidth_gbps: 1000, latency_us: 2}}\n"
             "links:\n  - {from: a, to: b, %s}\n",
             gpus, tflops_a, mem_gib, gpus, tflops_b, mem_gib, link);
    return test_plan_parse_topo(y);
}

static int stage_layers_in(const xdc_plan *p, int region)
{
    int n = 0;
    for (int i = 0; i < p->stages; i++)
        if (p->stage[i].region == region) n += p->stage[i].layer_end - p->stage[i].layer_begin;
    return n;
}

XDC_TEST(plan_faster_region_gets_twice_the_layers)
{
    /* 12 equal layers, one GPU per region, region a twice as fast; a pipeline over both balances at 8:4. */
    xdc_topology *t = two_regions(1, 200, 100, 80, "bandwidth_gbps: 100, rtt_ms: 2");
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 16, 1024, 128, 2, &m);
    xdc_batch_shape b = {4, 128, 4.0 * 128 * 16};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_PIPELINE;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best;
    XDC_ASSERT_EQ(p->mode, XDC_PLAN_PIPELINE);
    XDC_ASSERT_EQ(p->stages, 2);
    XDC_ASSERT_EQ(stage_layers_in(p, 0), 8);
    XDC_ASSERT_EQ(stage_layers_in(p, 1), 4);
    XDC_ASSERT_EQ(p->n_chain, 2);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

XDC_TEST(plan_model_too_big_for_one_region_cuts_at_cheapest_link)
{
    /* ~1.2B parameters need ~19 GiB of weights and optimizer state: one 16 GiB GPU cannot hold it, two can.
     * a-b is fast and cheap, every link to c slow and dear: the pipeline spans a and b only. */
    const char *y = "name: three\nregions:\n"
                    "  - {name: a, nodes: a1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 300, memory_gib: 16},"
                    " intra: {bandwidth_gbps: 1000}}\n"
                    "  - {name: b, nodes: b1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 300, memory_gib: 16},"
                    " intra: {bandwidth_gbps: 1000}}\n"
                    "  - {name: c, nodes: c1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 300, memory_gib: 16},"
                    " intra: {bandwidth_gbps: 1000}}\n"
                    "links:\n"
                    "  - {from: a, to: b, bandwidth_gbps: 100, rtt_ms: 4, cost_usd_per_gb: 0.01}\n"
                    "  - {from: a, to: c, bandwidth_gbps: 0.05, rtt_ms: 150, cost_usd_per_gb: 0.09}\n"
                    "  - {from: b, to: c, bandwidth_gbps: 0.05, rtt_ms: 150, cost_usd_per_gb: 0.09}\n";
    xdc_topology *t = test_plan_parse_topo(y);
    xdc_model_shape m;
    xdc_model_shape_gpt(24, 16, 2048, 512, 256, &m);
    xdc_batch_shape b = {1, 512, 512.0 * 8};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best;
    XDC_ASSERT_MSG(p->mode == XDC_PLAN_PIPELINE, "mode %s", xdc_plan_mode_name(p->mode));
    XDC_ASSERT_EQ(p->n_chain, 2);
    XDC_ASSERT((p->chain[0] == 0 && p->chain[1] == 1) || (p->chain[0] == 1 && p->chain[1] == 0));
    XDC_ASSERT_EQ(p->replicas[2], 0);
    XDC_ASSERT(p->cut_layer[0] > 0 && p->cut_layer[0] < 24);
    XDC_ASSERT(p->mem_gib_max <= 0.9 * 16);
    /* Every data-parallel structure was refused for memory, and the reason says so. */
    for (int i = 0; i < s->n_cands; i++) XDC_ASSERT(s->cands[i].mode == XDC_PLAN_PIPELINE);
    XDC_ASSERT(s->n_rejected > 0);
    XDC_ASSERT_STR_CONTAINS(s->reject_reason, "GiB");
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

static int lossiness(const xdc_plan *p) { return p->fidelity; }

XDC_TEST(plan_slow_link_gets_stronger_codec_or_longer_period)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);     /* ~85M parameters */
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 16 * 32}; /* ~1.2 s of compute per step */
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = -1;
    xdc_topology *fast = two_regions(8, 300, 300, 80, "bandwidth_gbps: 400, rtt_ms: 2");
    xdc_topology *slow = two_regions(8, 300, 300, 80, "bandwidth_gbps: 0.5, rtt_ms: 80");
    xdc_plan_set *sf = test_plan_search_ok(fast, &m, &b, &o), *ss = test_plan_search_ok(slow, &m, &b, &o);
    XDC_ASSERT_MSG(lossiness(&ss->best) > lossiness(&sf->best), "slow link fidelity %d (%s %s H=%d) vs fast %d",
                   ss->best.fidelity, xdc_plan_mode_name(ss->best.mode), ss->best.codec, ss->best.inner_steps,
                   sf->best.fidelity);
    XDC_ASSERT_EQ(sf->best.mode, XDC_PLAN_SYNC);
    XDC_ASSERT(ss->best.inner_steps > 0 || strcmp(ss->best.codec, "none") != 0);
    /* With the mode pinned to sync, the slow link still gets a lossier codec than the fast one. */
    o.mode = XDC_PLAN_SYNC;
    xdc_plan_set *ss2 = test_plan_search_ok(slow, &m, &b, &o), *sf2 = test_plan_search_ok(fast, &m, &b, &o);
    XDC_ASSERT(lossiness(&ss2->best) > lossiness(&sf2->best));
    /* Between DiLoCo periods alone, rounds blocking their step: the slow link takes the longer one (an
     * overlapped round hides behind the next step at any period here). */
    o.mode = XDC_PLAN_DILOCO;
    o.overlap = -1;
    snprintf(o.codec, sizeof o.codec, "int8");
    xdc_plan_set *ds = test_plan_search_ok(slow, &m, &b, &o), *df = test_plan_search_ok(fast, &m, &b, &o);
    XDC_ASSERT_MSG(ds->best.inner_steps > df->best.inner_steps, "H slow %d fast %d", ds->best.inner_steps,
                   df->best.inner_steps);
    xdc_plan_set_destroy(sf);
    xdc_plan_set_destroy(ss);
    xdc_plan_set_destroy(sf2);
    xdc_plan_set_destroy(ss2);
    xdc_plan_set_destroy(ds);
    xdc_plan_set_destroy(df);
    xdc_topology_destroy(fast);
    xdc_topology_destroy(slow);
}

/* The regime decides the mode: where flat fp32 sync would spend many times a step's compute on the WAN
 * the plan overlaps outer rounds with compute (streaming or DiLoCo) and, once even int8 outer rounds
 * cannot hide behind the period, sends sparse pseudo-gradients; where the WAN is cheap it syncs every
 * step. */
XDC_TEST(plan_wan_bound_goes_sparse_or_streaming_and_compute_bound_syncs)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);       /* ~85M parameters: 340 MB of fp32 gradient */
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 16 * 2};    /* ~0.08 s of compute per step */
    xdc_batch_shape big = {8, 1024, 8.0 * 1024 * 16 * 32}; /* ~1.2 s */
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_topology *fast = two_regions(8, 300, 300, 80, "bandwidth_gbps: 400, rtt_ms: 2");
    xdc_topology *wan = two_regions(8, 300, 300, 80, "bandwidth_gbps: 1, rtt_ms: 40");
    xdc_topology *thin = two_regions(8, 300, 300, 80, "bandwidth_gbps: 0.005, rtt_ms: 80");
    xdc_plan_set *sf = test_plan_search_ok(fast, &m, &big, &o), *sw = test_plan_search_ok(wan, &m, &b, &o),
                 *st = test_plan_search_ok(thin, &m, &b, &o);
    XDC_ASSERT_MSG(sf->best.mode == XDC_PLAN_SYNC, "compute-bound: %s %s", xdc_plan_mode_name(sf->best.mode),
                   sf->best.codec);
    XDC_ASSERT_MSG(sw->best.mode == XDC_PLAN_STREAMING || sw->best.mode == XDC_PLAN_DILOCO ||
                       strncmp(sw->best.codec, "sparse", 6) == 0,
                   "WAN-bound: %s %s H=%d", xdc_plan_mode_name(sw->best.mode), sw->best.codec, sw->best.inner_steps);
    XDC_ASSERT_MSG(strncmp(st->best.codec, "sparse", 6) == 0 && st->best.mode != XDC_PLAN_SYNC, "thin link: %s %s H=%d",
                   xdc_plan_mode_name(st->best.mode), st->best.codec, st->best.inner_steps);
    /* The WAN-bound plan hides its WAN time: within the tolerance of a step without any. */
    XDC_ASSERT_MSG(sw->best.t_wan_exposed <= 0.1 * sw->best.t_step, "WAN-bound plan exposes %g of %g s",
                   sw->best.t_wan_exposed, sw->best.t_step);
    xdc_plan_set_destroy(sf);
    xdc_plan_set_destroy(sw);
    xdc_plan_set_destroy(st);
    xdc_topology_destroy(fast);
    xdc_topology_destroy(wan);
    xdc_topology_destroy(thin);
}

/* bench-e2e's WAN-bound regime (bench/e2e/two-region.yaml: one worker per region, 10 Mbit/s; the 0.87M GPT of
 * bench/e2e/gpt1m.yaml) as `plan: auto` searches it: sparse DiLoCo that keeps the unsent part in the
 * parameters, with the density, last-round codec and outer lr bench-e2e measured best, its rounds hidden
 * within the tolerance and ~1/600 of flat's bytes; the same regions on a 10 Gbit/s link sync every step.
 * keep_unsent needs one replica per stage in each region, so the demo (two replicas) never gets it, and a
 * run file without it (-1) or one that pins it to another mode is respected. */
XDC_TEST(plan_wan_bound_keeps_unsent_sparse_and_compute_bound_syncs)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(4, 4, 128, 64, 256, &m);
    xdc_batch_shape b = {16, 64, 16.0 * 64 * 2}; /* plan: auto: microbatches 1 x batch x sequence x workers */
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.all_regions = 1;
    xdc_topology *wan = test_plan_load_topo("bench/e2e/two-region.yaml");
    xdc_plan_set *sw = test_plan_search_ok(wan, &m, &b, &o);
    const xdc_plan *p = &sw->best;
    XDC_ASSERT_MSG(p->mode == XDC_PLAN_DILOCO && p->keep_unsent, "WAN-bound: %s %s keep_unsent %d",
                   xdc_plan_mode_name(p->mode), p->codec, p->keep_unsent);
    XDC_ASSERT_MSG(strcmp(p->codec, "sparse:0.05:2") == 0, "codec %s", p->codec);
    XDC_ASSERT_MSG(strcmp(p->final_codec, "int4") == 0, "final codec %s", p->final_codec);
    XDC_ASSERT_NEAR(p->outer_lr, 1.5, 1e-12);
    XDC_ASSERT(p->t_wan_exposed <= 0.1 * p->t_step);
    double flat = 0; /* flat fp32 sync of the same layout, for the bytes */
    for (int i = 0; i < sw->n_cands; i++)
        if (sw->cands[i].mode == XDC_PLAN_SYNC && strcmp(sw->cands[i].codec, "none") == 0)
            flat = sw->cands[i].wan_bytes;
    XDC_ASSERT_MSG(flat > 100 * p->wan_bytes, "flat %g bytes per step, chosen %g", flat, p->wan_bytes);
    /* The streaming plan it beat hides its WAN as well, but loses on fidelity. */
    int streaming = 0;
    for (int i = 1; i < sw->n_cands && !streaming; i++)
        if (sw->cands[i].mode == XDC_PLAN_STREAMING) {
            streaming = 1;
            XDC_ASSERT(sw->cands[i].fidelity > p->fidelity);
        }
    XDC_ASSERT(streaming);
    /* A run file without keep_unsent (-1): no candidate has it. One that pins it to sync: refused. */
    o.keep_unsent = -1;
    xdc_plan_set *sn = test_plan_search_ok(wan, &m, &b, &o);
    for (int i = 0; i < sn->n_cands; i++) XDC_ASSERT(!sn->cands[i].keep_unsent);
    o.keep_unsent = 1;
    o.mode = XDC_PLAN_SYNC;
    xdc_plan_set *bad = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_plan_search(wan, &m, &b, &o, &bad, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "keep_unsent needs mode diloco");
    /* Compute-bound: the same regions on a fast link. */
    o = (xdc_plan_opts)XDC_PLAN_OPTS_INIT;
    o.all_regions = 1;
    xdc_topology *fast = test_plan_parse_topo(
        "name: fast\nregions:\n"
        "  - {name: east, nodes: e1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05,"
        " memory_gib: 4}}\n"
        "  - {name: west, nodes: w1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05,"
        " memory_gib: 4}}\n"
        "links:\n  - {from: east, to: west, bandwidth_gbps: 10, rtt_ms: 4}\n");
    xdc_plan_set *sf = test_plan_search_ok(fast, &m, &b, &o);
    XDC_ASSERT_MSG(sf->best.mode == XDC_PLAN_SYNC && !sf->best.keep_unsent, "compute-bound: %s %s",
                   xdc_plan_mode_name(sf->best.mode), sf->best.codec);
    /* Two replicas per region (the demo's 2 workers, one stage): the runtime cannot keep unsent parts. */
    xdc_model_shape tiny;
    xdc_topology *demo = test_plan_demo(&tiny);
    xdc_batch_shape bd = {16, 64, 16.0 * 64 * 4};
    o.stages = 1;
    xdc_plan_set *sd = test_plan_search_ok(demo, &tiny, &bd, &o);
    for (int i = 0; i < sd->n_cands; i++) XDC_ASSERT(!sd->cands[i].keep_unsent);
    xdc_plan_set_destroy(sw);
    xdc_plan_set_destroy(sn);
    xdc_plan_set_destroy(sf);
    xdc_plan_set_destroy(sd);
    xdc_topology_destroy(wan);
    xdc_topology_destroy(fast);
    xdc_topology_destroy(demo);
}

/* `plan: auto` on bench-e2e's WAN-bound topology: the run takes the plan's keep_unsent, last-round codec and
 * outer lr, and keeps an outer lr set by hand. */
XDC_TEST(plan_auto_runs_the_chosen_keep_unsent_settings)
{
    xdc_topology *t = test_plan_load_topo("bench/e2e/two-region.yaml");
    for (int k = 0; k < 2; k++) {
        orch_run_config c;
        orch_planned pl;
        int eval_seqs;
        test_plan_auto_run(k ? "auto1" : "auto0", k ? "diloco: {outer_lr: 0.9}\n" : "", t, &c, &pl, &eval_seqs);
        XDC_ASSERT_EQ(c.mode, ORCH_MODE_DILOCO);
        XDC_ASSERT(c.diloco.keep_unsent);
        XDC_ASSERT_MSG(strcmp(c.codec, "sparse:0.05:2") == 0, "codec %s", c.codec);
        XDC_ASSERT_MSG(strcmp(c.diloco.final_codec, "int4") == 0, "final codec %s", c.diloco.final_codec);
        XDC_ASSERT_NEAR(c.diloco.outer_lr, k ? 0.9 : 1.5, 1e-12);
        XDC_ASSERT_NEAR(c.diloco.outer_momentum, 0.5, 1e-12); /* the sparse default */
        XDC_ASSERT_EQ(c.diloco.inner_steps, pl.plan.inner_steps);
    }
    xdc_topology_destroy(t);
}

/* Data-parallel stages on the heterogeneous topology (H100, A100, L40S; the regions that sync together
 * run one partition on their slowest GPUs): the split balances the stages' compute instead of their layer counts, so the
 * stage that also holds the LM head (50257 x 768) takes fewer layers than the first, and its slowest
 * stage is no slower than a stage of the even split that holds the head. */
XDC_TEST(plan_data_parallel_split_is_uneven_where_the_stages_cost_differ)
{
    xdc_topology *t = test_plan_load_topo("examples/topology/heterogeneous.yaml");
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 50257, &m);
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 16 * 112};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.stages = 4;
    o.mode = XDC_PLAN_SYNC;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best;
    XDC_ASSERT_EQ(p->stages, 4);
    int layers = 0;
    double slowest = 0;
    for (int i = 0; i < 4; i++) {
        int n = p->stage[i].layer_end - p->stage[i].layer_begin;
        XDC_ASSERT(n >= 1 && p->stage[i].layer_begin == layers);
        layers += n;
        slowest = p->stage[i].flops_mb > slowest ? p->stage[i].flops_mb : slowest;
    }
    XDC_ASSERT_EQ(layers, 12);
    int last = p->stage[3].layer_end - p->stage[3].layer_begin, first = p->stage[0].layer_end - p->stage[0].layer_begin;
    XDC_ASSERT_MSG(last < first, "last stage %d layers, first %d", last, first);
    /* The even split's last stage: three layers and the head. Same shape, its stage cost from the plan's
     * own numbers: the last stage's cost minus its layers plus three of the first stage's layers. */
    double per_layer = p->stage[0].flops_mb / first; /* stage 0: layers and the embedding lookup (no FLOPs) */
    XDC_ASSERT_MSG(slowest <= p->stage[3].flops_mb + (3 - last) * per_layer * 1.0001,
                   "slowest stage %g, even split's last %g", slowest, p->stage[3].flops_mb + (3 - last) * per_layer);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

/* Unequal replicas (docs/planner.md): on heterogeneous.yaml, a sync plan over the H100 and A100 regions gives
 * the H100 replicas about 989 / 312 times the A100 replicas' microbatches, the same microbatches per step in
 * all, and a shorter pipeline phase than M for every replica; equally fast regions keep M for all. */
XDC_TEST(plan_unequal_replicas_get_microbatches_by_speed)
{
    xdc_topology *t = test_plan_load_topo("examples/topology/heterogeneous.yaml");
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 50257, &m);
    xdc_batch_shape b = {4, 1024, 67108864.0};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_SYNC;
    o.stages = 1;
    o.micro_batch = 4;
    snprintf(o.codec, sizeof o.codec, "int8");
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best;
    XDC_ASSERT_MSG(p->replicas[0] > 0 && p->replicas[1] > 0, "replicas %d, %d", p->replicas[0], p->replicas[1]);
    int placed = 0, equal = 0;
    for (int r = 0; r < t->n_regions; r++)
        placed += p->replicas[r] * p->replica_mb[r], equal += p->replicas[r] * p->microbatches;
    XDC_ASSERT_EQ(placed, equal);
    double ratio = (double)p->replica_mb[0] / p->replica_mb[1];
    XDC_ASSERT_MSG(fabs(ratio / (989.0 / 312.0) - 1) < 0.05, "us-central %d, us-west %d microbatches per replica",
                   p->replica_mb[0], p->replica_mb[1]);
    XDC_ASSERT_MSG(p->t_compute + p->t_bubble < 0.5 * p->split_pipe, "split phase %g, equal %g",
                   p->t_compute + p->t_bubble, p->split_pipe);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
    t = two_regions(8, 300, 300, 80, "bandwidth_gbps: 100, rtt_ms: 10");
    s = test_plan_search_ok(t, &m, &b, &o);
    for (int r = 0; r < t->n_regions; r++) XDC_ASSERT_EQ(s->best.replica_mb[r], 0);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
    /* `plan: auto` runs the split: one count per replica, region by region (microbatches_per_replica). */
    t = two_regions(2, 900, 300, 80, "bandwidth_gbps: 100, rtt_ms: 10");
    static orch_run_config c;
    orch_planned pl;
    int eval_seqs;
    test_plan_auto_run("unequal", "mode: sync\npipeline_stages: 1\nmicrobatches: 8\nbatch_size: 1\ncodec: none\n", t,
                       &c, &pl, &eval_seqs);
    XDC_ASSERT_EQ(c.n_replica_mb, 4);
    XDC_ASSERT_MSG(c.replica_mb[0] == c.replica_mb[1] && c.replica_mb[2] == c.replica_mb[3] &&
                       c.replica_mb[0] > 2 * c.replica_mb[2] && c.replica_mb[0] + c.replica_mb[2] == 16,
                   "counts %d %d %d %d", c.replica_mb[0], c.replica_mb[1], c.replica_mb[2], c.replica_mb[3]);
    xdc_topology_destroy(t);
}

/* The microbatch size (docs/planner.md, "Per-microbatch cost"): with the tokens per step fixed, a deep
 * pipeline on a fast link trades the 1F1B bubble against the per-microbatch cost, so it picks more than one
 * microbatch and fewer than the most, and beats both ends; one stage has no bubble, so the largest b; a
 * pinned b stays. */
XDC_TEST(plan_picks_microbatches_between_bubble_and_per_microbatch_cost)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);    /* ~85M parameters */
    xdc_batch_shape b = {1, 1024, 1024.0 * 8 * 16 * 4}; /* 128 sequences per replica of 4 stages */
    xdc_topology *t = two_regions(8, 300, 300, 80, "bandwidth_gbps: 400, rtt_ms: 2");
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.stages = 4;
    o.mode = XDC_PLAN_SYNC;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &s->best;
    int S = 128;
    XDC_ASSERT_EQ(p->microbatches * p->micro_batch, S);
    XDC_ASSERT_NEAR(p->tokens, b.global_batch_tokens, 1e-9 * p->tokens);
    XDC_ASSERT_MSG(p->microbatches > 1 && p->microbatches < S, "M = %d of b = %d", p->microbatches, p->micro_batch);
    XDC_ASSERT_EQ(p->mb_tried, 8); /* the divisors of 128 */
    XDC_ASSERT_EQ(p->mb_pick[1].microbatches, 1);
    XDC_ASSERT_EQ(p->mb_pick[2].microbatches, S);
    XDC_ASSERT(p->mb_pick[0].fits && p->mb_pick[1].fits && p->mb_pick[2].fits);
    /* Either end, pinned, is slower per step: the bubble at one microbatch, the per-microbatch cost at 128. */
    double ends[2];
    for (int k = 0; k < 2; k++) {
        xdc_plan_opts pin = o;
        pin.micro_batch = k ? 1 : S;
        xdc_plan_set *e = test_plan_search_ok(t, &m, &b, &pin);
        XDC_ASSERT_EQ(e->best.micro_batch, pin.micro_batch);
        XDC_ASSERT_EQ(e->best.mb_tried, 0);
        XDC_ASSERT_NEAR(e->best.tokens, p->tokens, 1e-9 * p->tokens);
        ends[k] = e->best.t_step;
        XDC_ASSERT_MSG(e->best.t_step > p->t_step, "b = %d: %g s per step, chosen b = %d: %g s", pin.micro_batch,
                       e->best.t_step, p->micro_batch, p->t_step);
        xdc_plan_set_destroy(e);
    }
    XDC_ASSERT(p->mb_pick[1].t_bubble > p->mb_pick[0].t_bubble);   /* one microbatch: the larger bubble */
    XDC_ASSERT(p->mb_pick[2].t_mb_cost > p->mb_pick[0].t_mb_cost); /* the most: the larger per-microbatch cost */
    XDC_ASSERT(ends[0] > 0 && ends[1] > 0);
    /* One stage per replica: 8 sequences per replica in one microbatch. */
    xdc_batch_shape b1 = {1, 1024, 1024.0 * 8 * 16};
    o.stages = 1;
    xdc_plan_set *s1 = test_plan_search_ok(t, &m, &b1, &o);
    XDC_ASSERT_MSG(s1->best.microbatches == 1 && s1->best.micro_batch == 8, "P = 1: M = %d of b = %d",
                   s1->best.microbatches, s1->best.micro_batch);
    /* Pinned: b = 2 stays, the same tokens cut into 4 microbatches. */
    o.micro_batch = 2;
    xdc_plan_set *s2 = test_plan_search_ok(t, &m, &b1, &o);
    XDC_ASSERT_EQ(s2->best.micro_batch, 2);
    XDC_ASSERT_EQ(s2->best.microbatches, 4);
    xdc_plan_set_destroy(s);
    xdc_plan_set_destroy(s1);
    xdc_plan_set_destroy(s2);
    xdc_topology_destroy(t);
}

/* `plan: auto` runs the planner's microbatch size (one stage per replica on bench-e2e's pair: all of a
 * replica's sequences in one microbatch, the evaluation keeping its sequences) unless the run file sets
 * batch_size. */
XDC_TEST(plan_auto_runs_the_chosen_microbatch_size_unless_pinned)
{
    xdc_topology *t = test_plan_load_topo("bench/e2e/two-region.yaml");
    for (int k = 0; k < 2; k++) {
        orch_run_config c;
        orch_planned pl;
        int eval_seqs;
        test_plan_auto_run(k ? "mb1" : "mb0", k ? "microbatches: 4\nbatch_size: 4\n" : "microbatches: 4\n", t, &c, &pl,
                           &eval_seqs);
        /* gpt1m: 16 sequences per microbatch; the file's 4 microbatches make 64 per worker (pinned: 4 x 4). */
        XDC_ASSERT_EQ(c.train.batch_size, k ? 4 : 64);
        XDC_ASSERT_EQ(c.train.microbatches, k ? 4 : 1);
        XDC_ASSERT_EQ(pl.plan.micro_batch, c.train.batch_size);
        XDC_ASSERT_EQ(c.train.eval_batches * c.train.batch_size, eval_seqs);
    }
    xdc_topology_destroy(t);
}

XDC_TEST(plan_replan_for_measured_goodput_keeps_the_partition)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 16 * 32};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_topology *t = two_regions(8, 300, 300, 80, "bandwidth_gbps: 400, rtt_ms: 2");
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    xdc_plan slow, same;
    xdc_diag d = {{0}};
    /* The link turns out to deliver 0.3 Gbit/s: a lossier codec or a period, same stages and replicas. */
    XDC_ASSERT_OK(xdc_plan_replan_wan(t, &m, &b, &o, &s->best, 0.3, &slow, &d));
    XDC_ASSERT(slow.fidelity > s->best.fidelity);
    XDC_ASSERT_EQ(slow.stages, s->best.stages);
    XDC_ASSERT(memcmp(slow.replicas, s->best.replicas, sizeof slow.replicas) == 0);
    XDC_ASSERT(slow.wan_bytes < s->best.wan_bytes);
    /* Measured as planned: nothing changes. */
    XDC_ASSERT_OK(xdc_plan_replan_wan(t, &m, &b, &o, &s->best, 400, &same, &d));
    XDC_ASSERT_EQ(same.fidelity, s->best.fidelity);
    XDC_ASSERT_STR_CONTAINS(same.codec, s->best.codec);
    XDC_ASSERT_ERR(xdc_plan_replan_wan(t, &m, &b, &o, &s->best, 0, &same, &d), XDC_ERR_INVALID);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

XDC_TEST(plan_slow_link_of_three_gets_the_stronger_link_codec)
{
    /* Three fully linked regions in sync mode: a-b is fast, every link to c slow. */
    xdc_topology *t = test_plan_parse_topo("name: three\nregions:\n"
                                           "  - {name: a, nodes: a1, gpus_per_node: 8, gpu: {model: x, bf16_tflops: "
                                           "300, memory_gib: 80}, intra: {bandwidth_gbps: 1000}}\n"
                                           "  - {name: b, nodes: b1, gpus_per_node: 8, gpu: {model: x, bf16_tflops: "
                                           "300, memory_gib: 80}, intra: {bandwidth_gbps: 1000}}\n"
                                           "  - {name: c, nodes: c1, gpus_per_node: 8, gpu: {model: x, bf16_tflops: "
                                           "300, memory_gib: 80}, intra: {bandwidth_gbps: 1000}}\n"
                                           "links:\n"
                                           "  - {from: a, to: b, bandwidth_gbps: 400, rtt_ms: 2}\n"
                                           "  - {from: a, to: c, bandwidth_gbps: 2, rtt_ms: 60}\n"
                                           "  - {from: b, to: c, bandwidth_gbps: 2, rtt_ms: 60}\n");
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 24 * 32};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_SYNC;
    o.all_regions = 1;
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    char fast[16], slow[16], none[16];
    double fs, ss, ns;
    xdc_plan_link_codec(t, &m, &s->best, &o.calib, 0, 1, 0.1, fast, &fs);
    xdc_plan_link_codec(t, &m, &s->best, &o.calib, 0, 2, 0.1, slow, &ss);
    XDC_ASSERT_MSG(strcmp(fast, "none") == 0, "fast link codec %s", fast);
    XDC_ASSERT_MSG(strcmp(slow, "none") != 0 && strcmp(slow, "bf16") != 0, "slow link codec %s", slow);
    XDC_ASSERT(ss > fs);
    /* A link the plan does not use gets no codec. */
    o.all_regions = 0;
    o.mode = -1;
    xdc_plan_link_codec(t, &m, &(xdc_plan){.mode = XDC_PLAN_SYNC, .stages = 1, .replicas = {8}}, &o.calib, 0, 2, 0.1,
                        none, &ns);
    XDC_ASSERT_EQ(none[0], 0);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

static void check_memory(const xdc_topology *t, const xdc_plan_set *s)
{
    for (int i = 0; i < s->n_cands; i++) {
        const xdc_plan *p = &s->cands[i];
        for (int k = 0; k < p->stages; k++) {
            const xdc_plan_stage *st = &p->stage[k];
            for (int r = 0; r < t->n_regions; r++) {
                int holds = st->region >= 0 ? st->region == r : p->replicas[r] > 0;
                if (holds)
                    XDC_ASSERT_MSG(st->mem_gib <= 0.9 * t->regions[r].gpu_memory_gib + 1e-9,
                                   "candidate %d stage %d needs %.2f GiB in %s (%g GiB)", i, k, st->mem_gib,
                                   t->regions[r].name, t->regions[r].gpu_memory_gib);
            }
        }
    }
}

XDC_TEST(plan_never_exceeds_gpu_memory)
{
    static const char *const files[] = {"examples/topology/demo-2region.yaml", "examples/topology/heterogeneous.yaml",
                                        "examples/topology/three-region.yaml"};
    static const int shapes[][5] = {
        {2, 4, 64, 64, 256}, {6, 6, 384, 256, 256}, {32, 32, 4096, 2048, 32000}, {80, 64, 8192, 2048, 32000}};
    int planned = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        xdc_cfg_errors errs;
        xdc_topology *t;
        XDC_ASSERT_OK(xdc_topology_load(files[f], &t, &errs));
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            xdc_model_shape m;
            xdc_model_shape_gpt(shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], shapes[k][4], &m);
            xdc_batch_shape b = {4, shapes[k][3] < 512 ? shapes[k][3] : 512, 4.0 * 512 * 64};
            xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
            xdc_plan_set *s = NULL;
            xdc_diag d = {{0}};
            xdc_err_t rc = xdc_plan_search(t, &m, &b, &o, &s, &d);
            XDC_ASSERT_MSG(rc == XDC_OK || rc == XDC_ERR_UNAVAILABLE, "%s: %s", files[f], d.msg);
            if (rc == XDC_OK) {
                check_memory(t, s);
                planned++;
            }
            xdc_plan_set_destroy(s);
        }
        xdc_topology_destroy(t);
    }
    XDC_ASSERT(planned >= 6);
}

XDC_TEST(plan_rejects_impossible_topology_with_reason)
{
    xdc_topology *t = test_plan_load_topo("examples/topology/demo-2region.yaml");
    xdc_model_shape m;
    xdc_model_shape_gpt(96, 96, 12288, 2048, 50257, &m); /* ~175B parameters on four 4 GiB CPU workers */
    xdc_batch_shape b = {1, 2048, 2048.0 * 8};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_plan_set *s = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_plan_search(t, &m, &b, &o, &s, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT(s == NULL);
    XDC_ASSERT_STR_CONTAINS(d.msg, "no plan fits");
    XDC_ASSERT_STR_CONTAINS(d.msg, "GiB per GPU");
    /* A stage count the model cannot have: the constraint is named. */
    xdc_model_shape_gpt(2, 4, 64, 64, 256, &m);
    o.stages = 3;
    XDC_ASSERT_ERR(xdc_plan_search(t, &m, &b, &o, &s, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "constraints");
    xdc_topology_destroy(t);
}

XDC_TEST(plan_search_is_deterministic)
{
    xdc_topology *t = test_plan_load_topo("examples/topology/heterogeneous.yaml");
    xdc_model_shape m;
    xdc_model_shape_gpt(24, 16, 2048, 1024, 32000, &m);
    xdc_batch_shape b = {4, 1024, 4.0 * 1024 * 256};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_plan_set *a = test_plan_search_ok(t, &m, &b, &o), *c = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(a->n_cands, c->n_cands);
    XDC_ASSERT(memcmp(&a->best, &c->best, sizeof a->best) == 0);
    XDC_ASSERT(a->best.t_step > 0 && a->best.t_step >= a->best.t_compute);
    XDC_ASSERT_NEAR(a->best.t_step, a->best.t_compute + a->best.t_bubble + a->best.t_intra + a->best.t_wan_exposed,
                    1e-9 + 1e-9 * a->best.t_step);
    /* Runners-up are in pick order and each says why it lost. */
    for (int i = 1; i < a->n_cands && i < 20; i++) XDC_ASSERT(a->cands[i].why[0] != '\0');
    char *json = NULL;
    XDC_ASSERT_OK(xdc_plan_to_json(t, &m, &o, a, 3, &json));
    XDC_ASSERT_STR_CONTAINS(json, "\"runners_up\"");
    XDC_ASSERT_STR_CONTAINS(json, "\"exposed_wan\"");
    XDC_ASSERT_STR_CONTAINS(json, "\"link_codecs\"");
    xdc_free(json);
    xdc_plan_set_destroy(a);
    xdc_plan_set_destroy(c);
    xdc_topology_destroy(t);
}

extern const xdc_model_ops xdc_model_cpu_ops;

/* Every stage of plan p, built for real: its arena holds exactly the parameters the planner priced. */
static double check_stages_against_model(const xdc_plan *p, const xdc_gpt_config *g)
{
    double sum = 0;
    for (int i = 0; i < p->stages; i++) {
        xdc_gpt_stage_config sc = {.model = *g,
                                   .layer_begin = p->stage[i].layer_begin,
                                   .layer_end = p->stage[i].layer_end,
                                   .batch = 1,
                                   .seq_len = 1,
                                   .max_inflight = 1,
                                   .seed = 1};
        xdc_gpt_stage *st = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_gpt_stage_create(&xdc_model_cpu_ops, &sc, &st, &d) == XDC_OK, "stage %d: %s", i, d.msg);
        XDC_ASSERT_MSG((double)xdc_gpt_stage_num_params(st) == p->stage[i].params,
                       "stage %d (layers %d..%d): the model allocates %zu parameters, the planner counts %.0f", i,
                       sc.layer_begin, sc.layer_end, xdc_gpt_stage_num_params(st), p->stage[i].params);
        sum += (double)xdc_gpt_stage_num_params(st);
        xdc_gpt_stage_destroy(st);
    }
    return sum;
}

XDC_TEST(plan_stage_params_are_what_the_model_allocates)
{
    /* 5 layers, so both an uneven cross-region pipeline and a 3-stage data-parallel split have stages with
     * and without the embeddings and the head. */
    xdc_gpt_config g = {.n_layer = 5, .n_head = 2, .n_embd = 8, .max_seq_len = 8, .vocab_size = 16};
    xdc_model_shape m;
    xdc_model_shape_of(&g, &m);
    XDC_ASSERT_EQ((size_t)m.params, xdc_gpt_config_num_params(&g));
    xdc_batch_shape b = {1, 8, 8.0 * 6};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_PIPELINE;
    xdc_topology *t = two_regions(1, 300, 100, 80, "bandwidth_gbps: 100, rtt_ms: 2");
    xdc_plan_set *s = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(s->best.stages, 2);
    XDC_ASSERT(s->best.stage[0].layer_end - s->best.stage[0].layer_begin !=
               s->best.stage[1].layer_end - s->best.stage[1].layer_begin);
    XDC_ASSERT_EQ(check_stages_against_model(&s->best, &g), m.params);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);

    t = two_regions(3, 100, 100, 80, "bandwidth_gbps: 100, rtt_ms: 2");
    o = (xdc_plan_opts)XDC_PLAN_OPTS_INIT;
    o.stages = 3;
    s = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(s->best.stages, 3);
    XDC_ASSERT_EQ(check_stages_against_model(&s->best, &g), m.params);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

/* One step of the runtime's 1F1B schedule (orchestrator/worker/orch_train.c: warm-up min(P − s − 1, M)
 * forwards, then forward/backward pairs, then the remaining backwards) over stages st[0..P) in one
 * process: each stage runs its next op as soon as its input is there (the forward of the stage before,
 * the backward of the stage after), each microbatch mb in slot xdc_gpt_stage_slot_of(mb). The boundary
 * activations and gradients are copied out per microbatch, as the runtime's transfers do. Returns the
 * mean loss. */
static float run_1f1b_step(xdc_gpt_stage **st, int P, int M, int B, int T, int C, int V, int step)
{
    size_t n = (size_t)B * T, nc = n * C;
    float *act = xdc_calloc((size_t)P * M * nc, 4), *grad = xdc_calloc((size_t)P * M * nc, 4);
    int32_t *tok = xdc_malloc((size_t)M * n * 4), *tgt = xdc_malloc((size_t)M * n * 4);
    XDC_ASSERT(act && grad && tok && tgt);
    for (int mb = 0; mb < M; mb++) {
        xdc_rng r;
        xdc_rng_seed(&r, 7000 + (uint64_t)step * M + (uint64_t)mb);
        for (size_t i = 0; i < n; i++)
            tok[mb * n + i] = (int32_t)xdc_rng_below(&r, (uint64_t)V),
                         tgt[mb * n + i] = (int32_t)xdc_rng_below(&r, (uint64_t)V);
    }
    int fwd[XDC_PLAN_MAX_STAGES] = {0}, bwd[XDC_PLAN_MAX_STAGES] = {0}, next[XDC_PLAN_MAX_STAGES] = {0};
    float loss_sum = 0;
    for (int s = 0; s < P; s++) xdc_gpt_stage_zero_grad(st[s]);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < P; s++) {
            /* op k of stage s: forward while k < warm, then F/B alternating, then backwards */
            int warm = P - s - 1 < M ? P - s - 1 : M, k = next[s];
            if (k >= 2 * M) continue;
            int is_fwd = k < warm || (k < 2 * M - warm && (k - warm) % 2 == 0);
            if (is_fwd) {
                int mb = fwd[s];
                if (s > 0 && fwd[s - 1] <= mb) continue; /* input not there yet */
                const float *y = NULL;
                float loss = 0;
                XDC_ASSERT_OK(xdc_gpt_stage_forward(st[s], xdc_gpt_stage_slot_of(st[s], mb), tok + mb * n,
                                                    s > 0 ? act + ((size_t)(s - 1) * M + mb) * nc : NULL, tgt + mb * n,
                                                    s < P - 1 ? &y : NULL, &loss));
                if (s < P - 1) memcpy(act + ((size_t)s * M + mb) * nc, y, nc * 4);
                else loss_sum += loss;
                fwd[s]++;
            } else {
                int mb = bwd[s];
                if (s < P - 1 && bwd[s + 1] <= mb) continue;
                const float *dx = NULL;
                XDC_ASSERT_OK(xdc_gpt_stage_backward(st[s], xdc_gpt_stage_slot_of(st[s], mb),
                                                     s < P - 1 ? grad + ((size_t)(s + 1) * M + mb) * nc : NULL,
                                                     1.0f / (float)M, s > 0 ? &dx : NULL));
                if (s > 0) memcpy(grad + ((size_t)s * M + mb) * nc, dx, nc * 4);
                bwd[s]++;
            }
            next[s]++;
            progress = 1;
        }
    }
    for (int s = 0; s < P; s++) XDC_ASSERT_MSG(fwd[s] == M && bwd[s] == M, "stage %d stalled", s);
    double sumsq = 0;
    for (int s = 0; s < P; s++) XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[s], &sumsq));
    for (int s = 0; s < P; s++)
        XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[s], 1e-3f, xdc_gpt_clip_scale(sumsq, 1.0f)));
    xdc_free(act);
    xdc_free(grad);
    xdc_free(tok);
    xdc_free(tgt);
    return loss_sum / (float)M;
}

/* The tiny model's shape (examples/models/tiny.yaml) with 4 layers, so that 4 stages hold one each. */
static void tiny_4_layers(xdc_train_config *c, xdc_model_shape *m)
{
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_model_config_load("examples/models/tiny.yaml", c, &errs));
    c->model.n_layer = 4;
    xdc_model_shape_of(&c->model, m);
}

/* Stage `st` of plan p as the worker creates it, with `slots` activation slots. */
static xdc_gpt_stage_config tiny_stage(const xdc_train_config *c, const xdc_plan_stage *st, int slots)
{
    return (xdc_gpt_stage_config){.model = c->model,
                                  .layer_begin = st->layer_begin,
                                  .layer_end = st->layer_end,
                                  .batch = c->batch_size,
                                  .seq_len = c->seq_len,
                                  .max_inflight = slots,
                                  .seed = (uint64_t)c->seed,
                                  .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
}

/* One region `a` of `gpus` GPUs of `tflops` bf16 TFLOP/s each on a fast intra network: the pipeline tests' place. */
static xdc_topology *one_region(int gpus, double tflops)
{
    char text[400];
    snprintf(text, sizeof text,
             "name: one\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: %d, gpu: {model: x, bf16_tflops: %g, memory_gib: 80},"
             " intra: {bandwidth_gbps: 1000, latency_us: 2}}\n",
             gpus, tflops);
    return test_plan_parse_topo(text);
}

XDC_TEST(plan_activation_memory_is_the_1f1b_high_water_mark)
{
    /* The tiny shape with 4 layers, 8 microbatches per step on one region of 4 GPUs. */
    xdc_train_config c;
    xdc_model_shape m;
    tiny_4_layers(&c, &m);
    const int P = 4, M = 8;
    xdc_topology *t = one_region(4, 100);
    xdc_batch_shape b = {c.batch_size, c.seq_len, (double)M * c.batch_size * c.seq_len};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.stages = P;
    xdc_plan_set *set = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &set->best;
    XDC_ASSERT_EQ(p->stages, P);
    XDC_ASSERT_EQ(p->microbatches, M);

    /* Two copies of the pipeline: one with the 1F1B bound's slots, one with a slot per microbatch (the
     * runtime before the bound). Same losses and parameters bit for bit: only the slots differ. */
    xdc_gpt_stage *st[4], *all[4];
    for (int s = 0; s < P; s++) {
        xdc_gpt_stage_config sc = tiny_stage(&c, &p->stage[s], xdc_model_shape_1f1b_inflight(P, s, M));
        XDC_ASSERT_OK(xdc_gpt_stage_create(&xdc_model_cpu_ops, &sc, &st[s], NULL));
        sc.max_inflight = M;
        XDC_ASSERT_OK(xdc_gpt_stage_create(&xdc_model_cpu_ops, &sc, &all[s], NULL));
    }
    xdc_model_cpu_ops.set_threads(1);
    for (int step = 0; step < 2; step++) {
        float a = run_1f1b_step(st, P, M, c.batch_size, c.seq_len, c.model.n_embd, c.model.vocab_size, step);
        float b2 = run_1f1b_step(all, P, M, c.batch_size, c.seq_len, c.model.n_embd, c.model.vocab_size, step);
        XDC_ASSERT_MSG(a == b2, "step %d: loss %.9g with the bound's slots, %.9g with one per microbatch", step, a, b2);
    }
    uint64_t h1, h2;
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(st, P, &h1));
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(all, P, &h2));
    XDC_ASSERT_MSG(h1 == h2, "params %016llx vs %016llx", (unsigned long long)h1, (unsigned long long)h2);

    for (int s = 0; s < P; s++) {
        size_t measured = xdc_gpt_stage_activation_bytes(st[s]);
        fprintf(stderr, "stage %d: layers [%d,%d) in flight %d (measured %d): planner %.0f bytes, measured %zu\n", s,
                p->stage[s].layer_begin, p->stage[s].layer_end, p->stage[s].inflight, xdc_gpt_stage_slots_peak(st[s]),
                p->stage[s].act_bytes, measured);
        XDC_ASSERT_EQ(p->stage[s].inflight, P - s);
        XDC_ASSERT_EQ(xdc_gpt_stage_slots_peak(st[s]), P - s);
        XDC_ASSERT_MSG((double)measured == p->stage[s].act_bytes, "stage %d: measured %zu bytes, planner %.0f", s,
                       measured, p->stage[s].act_bytes);
        /* with a slot per microbatch the schedule still holds no more than the bound */
        XDC_ASSERT_EQ(xdc_gpt_stage_activation_bytes(all[s]), measured);
        xdc_gpt_stage_destroy(st[s]);
        xdc_gpt_stage_destroy(all[s]);
    }
    xdc_plan_set_destroy(set);
    xdc_topology_destroy(t);
}

/* Interleaved 1F1B (opts.chunks, the run file's pipeline_chunks): 2 stages x 2 chunks of the 4-layer tiny model,
 * M = 4. The plan runs v = 2 with the bubble (P − 1)/(M·v) (here below half of v = 1's), and each stage's
 * activation memory is what its chunks hold when the stage walks the interleaved order on real chunk stages
 * created with the runtime's slots (xdc_model_shape_interleaved_inflight per chunk, orch_worker.c); a microbatch
 * count that is no multiple of P is planned without chunks. */
XDC_TEST(plan_interleaved_bubble_and_memory_are_the_runtimes)
{
    xdc_train_config c;
    xdc_model_shape m;
    tiny_4_layers(&c, &m);
    const int P = 2, M = 4, v = 2;
    xdc_topology *t = one_region(2, 0.05);
    xdc_batch_shape b = {c.batch_size, c.seq_len, (double)M * c.batch_size * c.seq_len};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.stages = P;
    o.micro_batch = c.batch_size;
    xdc_plan_set *one = test_plan_search_ok(t, &m, &b, &o);
    o.chunks = v;
    xdc_plan_set *set = test_plan_search_ok(t, &m, &b, &o);
    const xdc_plan *p = &set->best;
    XDC_ASSERT_EQ(p->chunks, v);
    XDC_ASSERT_EQ(one->best.chunks, 1);
    xdc_sim_result r;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_sim_run(t, &m, p, NULL, 1, &r, &d), XDC_ERR_INVALID); /* it models 1F1B without chunks */
    XDC_ASSERT_STR_CONTAINS(d.msg, "pipeline_chunks 2 (interleaved 1F1B) is not simulated");
    double share = p->t_bubble / p->t_compute, share1 = one->best.t_bubble / one->best.t_compute;
    fprintf(stderr, "bubble share v=1 %.4f, v=2 %.4f; (P-1)/(M*v) = %.4f\n", share1, share, (double)(P - 1) / (M * v));
    XDC_ASSERT_MSG(share < 0.6 * share1 && share < 1.1 * (P - 1) / (double)(M * v),
                   "bubble share %.4f at v=2, %.4f at v=1", share, share1);
    for (int s = 0; s < P; s++) {
        xdc_gpt_stage *ch[2];
        int slots = 0;
        for (int k = 0; k < v; k++) {
            xdc_plan_stage part = {0};
            orch_stage_layers(m.layers, P * v, s + k * P, &part.layer_begin, &part.layer_end);
            xdc_gpt_stage_config sc = tiny_stage(&c, &part, xdc_model_shape_interleaved_inflight(P, s, v, M, k));
            XDC_ASSERT_OK(xdc_gpt_stage_create(&xdc_model_cpu_ops, &sc, &ch[k], NULL));
            slots += sc.max_inflight;
        }
        XDC_ASSERT_EQ(p->stage[s].inflight, slots);
        /* The stage's order (orch_train.c's ileave_pass): warm-up forwards, forward + backward, backwards. */
        size_t n = (size_t)c.batch_size * c.seq_len;
        float *x = xdc_calloc(n * (size_t)c.model.n_embd, 4);
        int32_t *tok = xdc_calloc(n, 4);
        XDC_ASSERT(x && tok);
        int total = M * v, warm = xdc_model_shape_interleaved_warmup(P, s, v, M), f = 0, bw = 0;
        for (int op = 0; op < 2 * total; op++) {
            /* the warm-up's forwards, then a forward whenever the backwards have caught up with it */
            int fwd = f < total && (f < warm || f - warm == bw), k, mb;
            xdc_model_shape_interleaved_op(P, v, fwd ? f++ : bw++, fwd, &k, &mb);
            const float *out = NULL;
            float loss;
            int slot = xdc_gpt_stage_slot_of(ch[k], mb);
            if (fwd)
                XDC_ASSERT_OK(
                    xdc_gpt_stage_forward(ch[k], slot, tok, x, tok, xdc_gpt_stage_is_last(ch[k]) ? NULL : &out, &loss));
            else
                XDC_ASSERT_OK(
                    xdc_gpt_stage_backward(ch[k], slot, x, 1.0f / M, xdc_gpt_stage_is_first(ch[k]) ? NULL : &out));
        }
        double measured = 0;
        for (int k = 0; k < v; k++) {
            measured += (double)xdc_gpt_stage_activation_bytes(ch[k]);
            XDC_ASSERT_EQ(xdc_gpt_stage_slots_peak(ch[k]), xdc_model_shape_interleaved_inflight(P, s, v, M, k));
            xdc_gpt_stage_destroy(ch[k]);
        }
        fprintf(stderr, "stage %d: %d slots, planner %.0f activation bytes, measured %.0f\n", s, slots,
                p->stage[s].act_bytes, measured);
        XDC_ASSERT_MSG(measured == p->stage[s].act_bytes, "stage %d: measured %.0f bytes, planner %.0f", s, measured,
                       p->stage[s].act_bytes);
        xdc_free(x);
        xdc_free(tok);
    }
    xdc_plan_set_destroy(set);
    b.global_batch_tokens = 3.0 * c.batch_size * c.seq_len; /* M = 3: no multiple of P */
    set = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(set->best.chunks, 1);
    xdc_plan_set_destroy(set);
    xdc_plan_set_destroy(one);
    xdc_topology_destroy(t);

    /* The pipeline across 2 regions, one stage each: every chunk boundary crosses the WAN, the wrap-around
     * too, 2v − 1 = 3 activations per microbatch each way for v = 1's one; a half-size bubble. */
    t = two_regions(1, 0.05, 0.05, 80, "bandwidth_gbps: 10, rtt_ms: 10");
    b.global_batch_tokens = (double)M * c.batch_size * c.seq_len;
    o.mode = XDC_PLAN_PIPELINE;
    o.chunks = 1;
    one = test_plan_search_ok(t, &m, &b, &o);
    o.chunks = v;
    set = test_plan_search_ok(t, &m, &b, &o);
    fprintf(stderr, "across regions: WAN %.0f vs %.0f bytes, bubble %.4f vs %.4f s, exposed WAN %.4f vs %.4f s\n",
            set->best.wan_bytes, one->best.wan_bytes, set->best.t_bubble, one->best.t_bubble, set->best.t_wan_exposed,
            one->best.t_wan_exposed);
    XDC_ASSERT_EQ(set->best.chunks, v);
    XDC_ASSERT_EQ(one->best.chunks, 1);
    XDC_ASSERT_MSG(fabs(set->best.wan_bytes - 3 * one->best.wan_bytes) < 1e-6 * one->best.wan_bytes,
                   "%.0f WAN bytes at v=2, %.0f at v=1", set->best.wan_bytes, one->best.wan_bytes);
    XDC_ASSERT(set->best.t_bubble < one->best.t_bubble && set->best.t_wan_exposed > one->best.t_wan_exposed);
    xdc_plan_set_destroy(set);
    xdc_plan_set_destroy(one);
    xdc_topology_destroy(t);
    /* 8 layers in 4 stages, 2 in each region: the cut once per chunk, the wrap-around (its own link) v − 1
     * times: again 3 times v = 1's bytes; the plan's cut is before the second region's first stage's first
     * chunk. */
    t = two_regions(2, 0.05, 0.05, 80, "bandwidth_gbps: 10, rtt_ms: 10");
    c.model.n_layer = 8; /* a layer for each of the 4 x 2 chunks */
    xdc_model_shape_of(&c.model, &m);
    o.stages = 4;
    snprintf(o.codec, sizeof o.codec, "bf16");
    o.chunks = 1;
    one = test_plan_search_ok(t, &m, &b, &o);
    o.chunks = v;
    set = test_plan_search_ok(t, &m, &b, &o);
    XDC_ASSERT_EQ(set->best.chunks, v);
    XDC_ASSERT_EQ(set->best.cut_layer[0], set->best.stage[2].layer_begin);
    XDC_ASSERT_MSG(fabs(set->best.wan_bytes - 3 * one->best.wan_bytes) < 1e-6 * one->best.wan_bytes,
                   "4 stages: %.0f WAN bytes at v=2, %.0f at v=1", set->best.wan_bytes, one->best.wan_bytes);
    xdc_plan_set_destroy(set);
    xdc_plan_set_destroy(one);
    xdc_topology_destroy(t);
}

/* A pipeline cut across a 150 ms round trip: each stage's activation memory in the plan is what the
 * worker's stage holds, the slots it is created with (orch_worker.c: xdc_model_shape_1f1b_inflight of its
 * stage) times one slot, upstream of the cut too; the round trip the slots cannot cover is time (a
 * longer period than the same chain with a fast link), not memory. */
XDC_TEST(plan_cross_region_memory_is_what_the_runtime_holds)
{
    xdc_train_config c;
    xdc_model_shape m;
    tiny_4_layers(&c, &m);
    const int P = 4, M = 8;
    xdc_batch_shape b = {c.batch_size, c.seq_len, (double)M * c.batch_size * c.seq_len};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_PIPELINE;
    o.stages = P;
    o.micro_batch = c.batch_size;
    double t_pipe[2];
    for (int slow = 0; slow < 2; slow++) {
        xdc_topology *t = two_regions(2, 100, 100, 80,
                                      slow ? "bandwidth_gbps: 10, rtt_ms: 150" : "bandwidth_gbps: 10, rtt_ms: 0.1");
        xdc_plan_set *set = test_plan_search_ok(t, &m, &b, &o);
        const xdc_plan *p = &set->best;
        XDC_ASSERT_EQ(p->mode, XDC_PLAN_PIPELINE);
        XDC_ASSERT_EQ(p->stages, P);
        XDC_ASSERT_EQ(p->microbatches, M);
        XDC_ASSERT(p->stage[1].region != p->stage[2].region);
        t_pipe[slow] = p->t_compute + p->t_bubble + p->t_wan_exposed;
        for (int s = 0; s < P; s++) {
            xdc_gpt_stage_config sc = tiny_stage(&c, &p->stage[s], xdc_model_shape_1f1b_inflight(P, s, M));
            xdc_gpt_stage *st;
            XDC_ASSERT_OK(xdc_gpt_stage_create(&xdc_model_cpu_ops, &sc, &st, NULL));
            double held = (double)xdc_gpt_stage_slots(st) * (double)xdc_gpt_stage_slot_bytes(st);
            fprintf(stderr,
                    "rtt %s stage %d (region %d): planner %d in flight, %.0f bytes; runtime %d slots, %.0f bytes\n",
                    slow ? "150 ms" : "0.1 ms", s, p->stage[s].region, p->stage[s].inflight, p->stage[s].act_bytes,
                    xdc_gpt_stage_slots(st), held);
            XDC_ASSERT_EQ(p->stage[s].inflight, xdc_gpt_stage_slots(st));
            XDC_ASSERT_MSG(p->stage[s].act_bytes == held, "stage %d: planner %.0f bytes, runtime %.0f", s,
                           p->stage[s].act_bytes, held);
            xdc_gpt_stage_destroy(st);
        }
        xdc_plan_set_destroy(set);
        xdc_topology_destroy(t);
    }
    XDC_ASSERT_MSG(t_pipe[1] > t_pipe[0] + 0.15, "the 150 ms round trip costs %.3f s of pipeline time",
                   t_pipe[1] - t_pipe[0]);
}

/* Device memory the worker asks for through counting_alloc (the CPU device's, counted). */
static size_t g_counted;
static const xdc_device_ops *g_cpu_dev;

static xdc_err_t counting_alloc(void **out, size_t bytes)
{
    xdc_err_t rc = g_cpu_dev->mem_alloc(out, bytes);
    if (rc == XDC_OK) g_counted += bytes;
    return rc;
}

/* Delayed averaging keeps a second fp32 gradient arena per stage (the worker creates the stage with
 * grad_buffers 2): the planner's memory per GPU of the same sync plan grows by exactly 4 bytes per
 * parameter of its largest stage. */
XDC_TEST(plan_delayed_sync_counts_the_second_gradient_arena)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 16 * 32};
    xdc_topology *t = two_regions(8, 300, 300, 80, "bandwidth_gbps: 400, rtt_ms: 2");
    xdc_plan_set *set[2];
    for (int delay = 0; delay < 2; delay++) {
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.mode = XDC_PLAN_SYNC;
        o.stages = 2;
        o.micro_batch = 8;
        o.delay_steps = delay;
        set[delay] = test_plan_search_ok(t, &m, &b, &o);
        XDC_ASSERT_EQ(set[delay]->best.delay_steps, delay);
    }
    const xdc_plan *p0 = &set[0]->best, *p1 = &set[1]->best;
    XDC_ASSERT_EQ(p0->stages, p1->stages);
    for (int i = 0; i < p0->stages; i++) {
        double params = xdc_model_shape_stage_params(&m, p0->stage[i].layer_begin, p0->stage[i].layer_end);
        XDC_ASSERT_EQ(p0->stage[i].layer_begin, p1->stage[i].layer_begin);
        XDC_ASSERT_NEAR(p1->stage[i].mem_gib - p0->stage[i].mem_gib, params * 4 / (1024.0 * 1024 * 1024), 1e-9);
    }
    xdc_plan_set_destroy(set[0]);
    xdc_plan_set_destroy(set[1]);
    xdc_topology_destroy(t);
}

XDC_TEST(plan_boundary_buffers_are_what_the_worker_allocates)
{
    /* 4 stages of the tiny shape (4 layers) on one region of 4 GPUs, 8 and then 16 microbatches per step:
     * each stage's pipeline boundary buffers in the plan are the bytes the worker's allocation asks the
     * device for (orch_model_alloc_boundary, counted), and neither grows with the microbatch count. */
    xdc_train_config c;
    xdc_model_shape m;
    tiny_4_layers(&c, &m);
    const int P = 4;
    xdc_topology *t = one_region(4, 100);
    const xdc_kern_backend *cpu;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU, &cpu, NULL));
    g_cpu_dev = cpu->device;
    xdc_device_ops dev = *cpu->device;
    dev.mem_alloc = counting_alloc;
    xdc_kern_backend counting = *cpu;
    counting.device = &dev;
    double one = (double)c.batch_size * c.seq_len * c.model.n_embd * sizeof(float), first[4] = {0};
    for (int M = 8; M <= 16; M *= 2) {
        xdc_batch_shape b = {c.batch_size, c.seq_len, (double)M * c.batch_size * c.seq_len};
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.stages = P;
        o.micro_batch = c.batch_size; /* the worker's microbatch, so M is the global batch's count */
        xdc_plan_set *set = test_plan_search_ok(t, &m, &b, &o);
        const xdc_plan *p = &set->best;
        XDC_ASSERT_EQ(p->stages, P);
        XDC_ASSERT_EQ(p->microbatches, M);
        for (int s = 0; s < P; s++) {
            xdc_gpt_stage_config sc = tiny_stage(&c, &p->stage[s], p->stage[s].inflight);
            orch_model om = {.be = &counting, .B = c.batch_size, .T = c.seq_len, .C = c.model.n_embd, .M = M};
            XDC_ASSERT_OK(xdc_gpt_stage_create(cpu->model, &sc, &om.st, NULL));
            size_t reported = 0;
            g_counted = 0;
            XDC_ASSERT_OK(orch_model_alloc_boundary(&om, &reported));
            fprintf(stderr, "M %d stage %d: planner %.0f bytes, worker allocated %zu (reported %zu)\n", M, s,
                    p->stage[s].boundary_bytes, g_counted, reported);
            XDC_ASSERT_MSG((double)g_counted == p->stage[s].boundary_bytes,
                           "M %d stage %d: allocated %zu, planner %.0f", M, s, g_counted, p->stage[s].boundary_bytes);
            XDC_ASSERT_EQ(reported, g_counted);
            /* x_in and dx_out except on the first stage, dy_in except on the last: one microbatch each */
            XDC_ASSERT_EQ(p->stage[s].boundary_bytes, one * ((s > 0 ? 2 : 0) + (s < P - 1 ? 1 : 0)));
            if (M == 8) first[s] = p->stage[s].boundary_bytes;
            else XDC_ASSERT_EQ(p->stage[s].boundary_bytes, first[s]);
            const void *bufs[] = {om.x_in, om.dy_in, om.dx_out};
            for (int i = 0; i < 3; i++) cpu->device->mem_free((void *)bufs[i]);
            xdc_gpt_stage_destroy(om.st);
        }
        xdc_plan_set_destroy(set);
    }
    xdc_topology_destroy(t);
}

/* Run `xdc ARGS`; returns its exit code with stdout + stderr in out. */
static int run_xdc(const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s", xdc_test_bin(), args);
    return xdc_test_run(cmd, out, cap);
}

#define DEMO "-t examples/topology/demo-2region.yaml -m examples/models/tiny.yaml"

XDC_TEST(plan_cli_prints_json_and_exit_codes)
{
    static char out[65536];
    XDC_ASSERT_EQ(run_xdc("plan " DEMO " --explain", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "predicted step");
    XDC_ASSERT_STR_CONTAINS(out, "runners-up");
    XDC_ASSERT_STR_CONTAINS(out, "how the plan was chosen");
    /* --explain names the regime (the demo link makes flat sync WAN-bound) and why the choice fits it. */
    XDC_ASSERT_STR_CONTAINS(out, "regime: flat fp32 sync of this layout");
    XDC_ASSERT_STR_CONTAINS(out, "WAN-bound");
    XDC_ASSERT_STR_CONTAINS(out, "chosen: streaming");
    XDC_ASSERT_STR_CONTAINS(out, "less than flat");
    XDC_ASSERT_EQ(run_xdc("plan " DEMO " --json", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "\"plan\"");
    XDC_ASSERT_STR_CONTAINS(out, "\"egress_usd_per_step\"");
    XDC_ASSERT_EQ(run_xdc("plan -t examples/topology/no-such.yaml -m examples/models/tiny.yaml", out, sizeof out), 78);
    XDC_ASSERT_EQ(run_xdc("plan " DEMO " --stages 3", out, sizeof out), 69);
    XDC_ASSERT_STR_CONTAINS(out, "no plan");
    XDC_ASSERT_EQ(run_xdc("plan -t examples/topology/demo-2region.yaml", out, sizeof out), 64);
    /* bench-e2e's WAN-bound pair: keep_unsent sparse DiLoCo, and --explain shows what it was weighed against. */
    XDC_ASSERT_EQ(run_xdc("plan -t bench/e2e/two-region.yaml -m bench/e2e/gpt1m.yaml --explain", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "chosen: diloco, codec sparse:0.05:2");
    XDC_ASSERT_STR_CONTAINS(out, "keep_unsent: what a round does not send stays in each region's parameters");
    XDC_ASSERT_STR_CONTAINS(out, "compared, the best of each kind:");
    XDC_ASSERT_STR_CONTAINS(out, "    streaming             codec bf16");
    XDC_ASSERT_STR_CONTAINS(out, "    diloco + keep_unsent  codec sparse:0.05:2");
    /* ... and which microbatch size won: one stage, all 16 sequences in one microbatch. */
    XDC_ASSERT_STR_CONTAINS(out, "microbatches: M = 1 of b = 16 sequences per replica");
    XDC_ASSERT_STR_CONTAINS(out, "one stage: no bubble for more microbatches to shrink");
    /* A deep pipeline on the heterogeneous topology: a size between the ends, and the split's reason. */
    XDC_ASSERT_EQ(run_xdc("plan -t examples/topology/heterogeneous.yaml -m examples/models/small10m.yaml --stages 4 "
                          "--mode sync --explain",
                          out, sizeof out),
                  0);
    XDC_ASSERT_STR_CONTAINS(out, "the fewest: M = 1 of b = 56");
    XDC_ASSERT_STR_CONTAINS(out, "the most microbatches: M = 56 of b = 1");
    XDC_ASSERT_STR_CONTAINS(out, "between the two: fewer leave a larger bubble");
    XDC_ASSERT_STR_CONTAINS(out, "layer split: 2 2 1 1 layers per stage: uneven");
    XDC_ASSERT_EQ(run_xdc("plan " DEMO " --micro-batch 0", out, sizeof out), 64);
    XDC_ASSERT_EQ(run_xdc("plan -t bench/e2e/two-region.yaml -m bench/e2e/gpt1m.yaml --json", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "\"keep_unsent\": true");
    XDC_ASSERT_STR_CONTAINS(out, "\"final_codec\": \"int4\"");
}

XDC_TEST(sim_cli_prints_step_and_exit_codes)
{
    static char out[16384];
    XDC_ASSERT_EQ(run_xdc("simulate " DEMO " --steps 2", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "simulated step");
    XDC_ASSERT_STR_CONTAINS(out, "sim_step_s=");
    XDC_ASSERT_EQ(run_xdc("simulate " DEMO " --json", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "\"utilisation\"");
    /* A run file: its configuration is simulated (two stages per replica, as in the demo). */
    XDC_ASSERT_EQ(
        run_xdc("simulate -t examples/topology/demo-2region.yaml -c examples/train/demo.yaml", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "2 stages per replica");
    XDC_ASSERT_EQ(run_xdc("simulate -t examples/topology/demo-2region.yaml", out, sizeof out), 64);
    /* A measured wire ratio belongs to a run's codec: it needs the run file. */
    XDC_ASSERT_EQ(run_xdc("simulate " DEMO " --calibrate-ratio 0.3", out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--calibrate-ratio needs -c");
    XDC_ASSERT_EQ(run_xdc("simulate -t examples/topology/demo-2region.yaml -c examples/train/demo.yaml "
                          "--calibrate-ratio 3 --json",
                          out, sizeof out),
                  64);
    XDC_ASSERT_EQ(run_xdc("simulate -t examples/topology/demo-2region.yaml -c examples/train/demo.yaml "
                          "--calibrate-ratio 0.3 --calibrate-p2p 0.001 --json",
                          out, sizeof out),
                  0);
    XDC_ASSERT_STR_CONTAINS(out, "\"step_s\"");
}

/* --calibrate-compute with one value per stage: each stage's measured compute; a bad list is a usage error
 * (64) that names the flag. */
XDC_TEST(sim_cli_calibrates_each_stage)
{
    static char out[16384];
#define SIM_DEMO_RUN "simulate -t examples/topology/demo-2region.yaml -c examples/train/demo.yaml "
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0.06,0.02", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "stage 0's compute set to the measured 0.0600 s per step");
    XDC_ASSERT_STR_CONTAINS(out, "stage 1's compute set to the measured 0.0200 s per step");
    XDC_ASSERT_STR_CONTAINS(out, "compute 0.0600 +"); /* the busiest stage is the one given 0.06 s */
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0.04,x", out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--calibrate-compute: '0.04,x': each value must be a positive number of seconds");
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0.04,-0.01", out, sizeof out), 64);
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0.04,", out, sizeof out), 64);
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0", out, sizeof out), 64);
    XDC_ASSERT_EQ(run_xdc(SIM_DEMO_RUN "--calibrate-compute 0.01,0.02,0.03", out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "has 3 values, one per stage, but examples/train/demo.yaml runs 2 stages");
    /* Without a run file the list pins the stages. */
    XDC_ASSERT_EQ(run_xdc("simulate " DEMO " --calibrate-compute 0.05,0.04", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "2 stages per replica");
    XDC_ASSERT_STR_CONTAINS(out, "compute 0.0500 +");
#undef SIM_DEMO_RUN
}

XDC_TEST(plan_codec_link_is_the_lossiest_codec_a_link_names)
{
    /* `codec: link` resolves once, for the planner and the runtime alike: the lossiest codec of any link
     * (the first link is bf16 here; a later one says topk), "auto" as int8. */
    static const char *yaml =
        "name: t\nregions:\n"
        "  - {name: a, nodes: a1, gpus_per_node: 1, gpu: {model: G, bf16_tflops: 10, memory_gib: 10}}\n"
        "  - {name: b, nodes: b1, gpus_per_node: 1, gpu: {model: G, bf16_tflops: 10, memory_gib: 10}}\n"
        "links:\n"
        "  - {from: a, to: b, bandwidth_gbps: 1, rtt_ms: 50, codec: %s}\n"
        "  - {from: b, to: a, bandwidth_gbps: 1, rtt_ms: 50, codec: %s}\n";
    static const char *cases[][3] = {
        {"bf16", "topk", "topk"}, {"auto", "bf16", "int8"}, {"none", "none", "none"}, {"int4", "int8", "int4"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, yaml, cases[i][0], cases[i][1]);
        xdc_topology *t = NULL;
        xdc_cfg_errors errs;
        xdc_err_t rc = xdc_topology_parse(text, strlen(text), "t.yaml", &t, &errs);
        if (rc != XDC_OK) xdc_cfg_errors_print(&errs, stderr);
        XDC_ASSERT_OK(rc);
        const char *got = xdc_plan_codec_of_links(t);
        XDC_ASSERT_MSG(strcmp(got, cases[i][2]) == 0, "links %s, %s: got %s, want %s", cases[i][0], cases[i][1], got,
                       cases[i][2]);
        xdc_topology_destroy(t);
    }
}
