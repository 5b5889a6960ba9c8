/* test_sim.c — the discrete-event simulator against closed forms: one stage without WAN is M x (fwd+bwd);
 * a P-stage pipeline of equal stages has the 1F1B bubble (P-1)/(M+P-1); an activation crossing B bytes
 * at bandwidth W and RTT R takes B/W + R/2, and so does a gradient bucket; buckets handed over during the
 * last backward hide the exchange behind it, and delayed averaging behind the next step; an in-region receive posted after the op before costs every
 * steady-state microbatch its transfer; a measured wire ratio prices the bytes of the codec it was
 * measured with; regions of 2 and 1 GPUs exchange over one lane; one measured compute time per stage is each stage's time; an 8-region x 1,024-GPU plan finishes with sane numbers;
 * the simulator and the planner's closed form agree on the demo configurations. (`xdc simulate` is
 * tested in test_plan.c.) */
#include "tests/xdc_test.h"

#include "tests/scheduler/test_plan_util.h"

#include "common/xdc_alloc.h"
#include "compression/xdc_codec.h"
#include "scheduler/sched_priv.h"
#include "scheduler/xdc_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* L equal layers with no embedding or head, so every stage of an even split costs the same. */
static void flat_model(int layers, xdc_model_shape *m)
{
    xdc_model_shape_gpt(layers, 8, 512, 128, 2, m);
    m->params -= m->embed_params + m->head_params;
    m->embed_params = m->head_params = 0;
    m->vocab = 0;
}

static xdc_plan plan_for(const xdc_topology *t, const xdc_model_shape *m, int stages, int mb, const char *codec,
                         int mode)
{
    xdc_batch_shape b = {1, 128, 0};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.calib.mfu = 0.5; /* what simulate() uses */
    o.all_regions = 1;
    o.stages = stages;
    o.microbatches = mb;
    o.mode = mode;
    o.bucket_mb = 1024; /* one bucket */
    if (codec) snprintf(o.codec, sizeof o.codec, "%s", codec);
    xdc_plan_set *s = NULL;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_plan_search(t, m, &b, &o, &s, &d);
    XDC_ASSERT_MSG(rc == XDC_OK, "plan: %s", d.msg);
    xdc_plan p = s->best;
    xdc_plan_set_destroy(s);
    return p;
}

static xdc_sim_result simulate(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan *p, int steps)
{
    xdc_sim_result r;
    xdc_diag d = {{0}};
    xdc_plan_calib c = {.mfu = 0.5, .compute_scale = 1.0};
    xdc_err_t rc = xdc_sim_run(t, m, p, &c, steps, &r, &d);
    XDC_ASSERT_MSG(rc == XDC_OK, "simulate: %s", d.msg);
    return r;
}

/* Seconds of one stage's forward + backward on one microbatch at simulate()'s 100 TFLOP/s x 0.5: its FLOPs at
 * the per-microbatch efficiency of a GPU region (tau / (tau + TOPO_PLAN_GPU_HALF_TOKENS)). */
static double mb_seconds(const xdc_plan *p, int stage)
{
    double tokens = (double)p->micro_batch * p->seq_len;
    return p->stage[stage].flops_mb / (100e12 * 0.5) * (1 + TOPO_PLAN_GPU_HALF_TOKENS / tokens);
}

#define ONE_REGION(workers)                                                                                        \
    "name: one\nregions:\n  - {name: a, nodes: a1, gpus_per_node: " #workers ", gpu: {model: x, bf16_tflops: 100," \
    " memory_gib: 80}, intra: {bandwidth_gbps: 1000000, latency_us: 0}}\n"

XDC_TEST(sim_one_stage_no_wan_is_m_times_fwd_bwd)
{
    xdc_topology *t = test_plan_parse_topo(ONE_REGION(1));
    xdc_model_shape m;
    flat_model(4, &m);
    xdc_plan p = plan_for(t, &m, 1, 6, NULL, XDC_PLAN_SYNC);
    xdc_sim_result r = simulate(t, &m, &p, 2);
    double per_mb = mb_seconds(&p, 0);
    XDC_ASSERT_NEAR(r.t_step, 6 * per_mb, 1e-9 * r.t_step + 1e-12);
    XDC_ASSERT_NEAR(r.t_compute, 6 * per_mb, 1e-9 * r.t_step + 1e-12);
    XDC_ASSERT_NEAR(r.utilisation, 1.0, 1e-9);
    XDC_ASSERT_EQ(r.gpus, 1);
    XDC_ASSERT(r.wan_bytes == 0);
    xdc_topology_destroy(t);
}

XDC_TEST(sim_pipeline_bubble_matches_1f1b)
{
    xdc_topology *t = test_plan_parse_topo(ONE_REGION(4));
    xdc_model_shape m;
    flat_model(8, &m);
    for (int M = 1; M <= 16; M *= 4) {
        xdc_plan p = plan_for(t, &m, 4, M, NULL, XDC_PLAN_SYNC);
        XDC_ASSERT_EQ(p.stages, 4);
        xdc_sim_result r = simulate(t, &m, &p, 1);
        double stage = mb_seconds(&p, 0), P = 4;
        /* (M + P - 1) slots of fwd+bwd; the bubble is (P-1)/(M+P-1) of the step (transfers ~0 here). */
        XDC_ASSERT_NEAR(r.t_step, (M + P - 1) * stage, 1e-4 * r.t_step);
        XDC_ASSERT_NEAR(r.t_bubble / r.t_step, (P - 1) / (M + P - 1), 1e-4);
        XDC_ASSERT_NEAR(r.utilisation, M / (M + P - 1), 1e-4);
        /* The planner's closed form says the same. */
        XDC_ASSERT_NEAR(p.t_step, r.t_step, 1e-4 * r.t_step);
    }
    xdc_topology_destroy(t);
}

#define TWO_REGIONS(link)                                                                           \
    "name: two\nregions:\n"                                                                         \
    "  - {name: a, nodes: a1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 100, memory_gib: 80}," \
    " intra: {bandwidth_gbps: 1000}}\n"                                                             \
    "  - {name: b, nodes: b1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 100, memory_gib: 80}," \
    " intra: {bandwidth_gbps: 1000}}\n"                                                             \
    "links:\n  - {from: a, to: b, " link "}\n"

XDC_TEST(sim_wan_transfer_takes_bytes_over_bandwidth_plus_half_rtt)
{
    /* A pipeline over two regions, one microbatch: the activation and its gradient each cross once, and
     * each crossing of B bytes takes B/W + R/2 (plus the per-message overhead, encode and decode). The
     * step then closes with the all-reduce of the gradient norm up the chain and back: 2 (R/2 + overhead). */
    xdc_topology *t = test_plan_parse_topo(TWO_REGIONS("bandwidth_gbps: 0.1, rtt_ms: 60"));
    xdc_model_shape m;
    flat_model(2, &m);
    xdc_plan p = plan_for(t, &m, 2, 1, "none", XDC_PLAN_PIPELINE);
    XDC_ASSERT_EQ(p.mode, XDC_PLAN_PIPELINE);
    xdc_sim_result r = simulate(t, &m, &p, 1);
    double act = 128.0 * m.boundary_bytes_per_token, crossing = act / (0.1e9 / 8) + 0.030;
    double compute = (p.stage[0].flops_mb + p.stage[1].flops_mb) / (100e12 * 0.5);
    double closing = 2 * (0.030 + 2e-4), comm = r.t_step - compute - closing;
    XDC_ASSERT_MSG(comm >= 2 * crossing && comm <= 2 * crossing * 1.02 + 1e-3,
                   "two crossings took %.6f s, 2 (B/W + R/2) = %.6f s", comm, 2 * crossing);
    XDC_ASSERT_NEAR(r.wan_bytes, 2 * act, 1);
    XDC_ASSERT_NEAR(p.t_step, r.t_step, 0.02 * r.t_step);
    xdc_topology_destroy(t);
}

XDC_TEST(sim_gradient_exchange_takes_bytes_over_bandwidth_plus_half_rtt)
{
    /* Data-parallel over two regions, one bucket (ready when the backward ends): the other region's
     * shard lands B/W + R/2 after it was sent. */
    xdc_topology *t = test_plan_parse_topo(TWO_REGIONS("bandwidth_gbps: 0.1, rtt_ms: 60"));
    xdc_model_shape m;
    flat_model(2, &m);
    xdc_plan p = plan_for(t, &m, 1, 1, "none", XDC_PLAN_SYNC);
    xdc_sim_result r = simulate(t, &m, &p, 1);
    double bytes = 4 * m.params, wire_s = bytes / (0.1e9 / 8), half_rtt = 0.030;
    double comm = r.t_step - r.t_compute;
    /* Encoding and decoding the fp32 shard (~GB/s, 1 % of the wire time at 0.1 Gbit/s) add a little. */
    XDC_ASSERT_MSG(comm >= wire_s + half_rtt && comm <= (wire_s + half_rtt) * 1.02 + 1e-3,
                   "exchange took %.6f s, B/W + R/2 = %.6f s", comm, wire_s + half_rtt);
    XDC_ASSERT_NEAR(r.wan_bytes, 2 * bytes, 1);
    XDC_ASSERT_NEAR(p.wan_bytes, 2 * bytes, 1);
    XDC_ASSERT_NEAR(p.t_step, r.t_step, 0.02 * r.t_step);
    /* int8 puts ~1/4 of the bytes on the wire: the exchange shrinks accordingly. */
    xdc_plan q = plan_for(t, &m, 1, 1, "int8", XDC_PLAN_SYNC);
    xdc_sim_result r8 = simulate(t, &m, &q, 1);
    XDC_ASSERT_MSG(r8.t_step - r8.t_compute < 0.35 * comm, "int8 exchange %.4f s vs none %.4f s",
                   r8.t_step - r8.t_compute, comm);
    xdc_topology_destroy(t);
}

/* Regions of 2 and 1 GPUs: the bucket crosses over one lane (xdc_plan_lanes, the fewest replicas), so the
 * bigger region's one lane encodes the whole bucket after an all-reduce (twice a reduce-scatter) where an
 * equal layout's two ranks would encode half each; the wire carries the bucket once per region either way, and
 * the simulator and the planner's closed form agree. */
XDC_TEST(sim_unequal_regions_exchange_over_the_lanes)
{
    xdc_topology *t = test_plan_parse_topo(
        "name: two\nregions:\n"
        "  - {name: a, nodes: a1, gpus_per_node: 2, gpu: {model: x, bf16_tflops: 100, memory_gib: 80}, intra: "
        "{bandwidth_gbps: 100, latency_us: 5}}\n"
        "  - {name: b, nodes: b1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 100, memory_gib: 80}, intra: "
        "{bandwidth_gbps: 100, latency_us: 5}}\n"
        "links:\n  - {from: a, to: b, bandwidth_gbps: 0.1, rtt_ms: 60}\n");
    xdc_model_shape m;
    flat_model(2, &m);
    xdc_plan p = plan_for(t, &m, 1, 1, "none", XDC_PLAN_SYNC);
    XDC_ASSERT(p.replicas[0] == 2 && p.replicas[1] == 1);
    XDC_ASSERT_EQ(xdc_plan_lanes(t, &p), 1);
    topo_codec_info ci;
    XDC_ASSERT_OK(topo_codec_info_get("none", 0.1, &ci));
    topo_bucket_cost lane, equal;
    topo_bucket_cost_get(t, 0, 2, 1, 2, m.params, &ci, &lane);
    topo_bucket_cost_get(t, 0, 2, 2, 2, m.params, &ci, &equal);
    double coll = topo_intra_collective_s(t, 0, 2, 4 * m.params);
    XDC_ASSERT_NEAR(lane.wire, 2 * equal.wire, 1e-6 * lane.wire); /* one lane carries the whole bucket */
    XDC_ASSERT_NEAR(lane.t_a - 2 * coll, 2 * (equal.t_a - coll), 1e-9);
    xdc_sim_result r = simulate(t, &m, &p, 1);
    double bytes = 4 * m.params;
    XDC_ASSERT_NEAR(r.wan_bytes, 2 * bytes, 1);
    XDC_ASSERT_NEAR(p.wan_bytes, 2 * bytes, 1);
    XDC_ASSERT_NEAR(p.t_step, r.t_step, 0.02 * r.t_step);
    xdc_topology_destroy(t);
}

/* Two regions of one 0.2 TFLOP/s GPU each, linked at `gbps` with a 2 ms RTT. */
static xdc_topology *two_gpus_linked(double gbps)
{
    char text[600];
    snprintf(text, sizeof text,
             "name: two\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 0.2, memory_gib: 80}, intra: "
             "{bandwidth_gbps: 1000}}\n"
             "  - {name: b, nodes: b1, gpus_per_node: 1, gpu: {model: x, bf16_tflops: 0.2, memory_gib: 80}, intra: "
             "{bandwidth_gbps: 1000}}\n"
             "links:\n  - {from: a, to: b, bandwidth_gbps: %g, rtt_ms: 2}\n",
             gbps);
    return test_plan_parse_topo(text);
}

/* Exact sync of one stage per region without a codec, M microbatches, buckets of bucket_mb, at MFU 0.5. */
static xdc_plan_opts one_stage_sync(int microbatches, double bucket_mb)
{
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.calib.mfu = 0.5;
    o.all_regions = 1;
    o.stages = 1;
    o.microbatches = microbatches;
    o.mode = XDC_PLAN_SYNC;
    o.bucket_mb = bucket_mb;
    snprintf(o.codec, sizeof o.codec, "none");
    return o;
}

XDC_TEST(sim_buckets_overlap_the_last_backward)
{
    /* 16 layers at 0.1 TFLOP/s and a link that needs about as long as the backward for the gradients:
     * small buckets leave during the last backward and hide most of the exchange; one bucket cannot. */
    xdc_topology *t = two_gpus_linked(10);
    xdc_model_shape m;
    flat_model(16, &m);
    double step[2];
    for (int k = 0; k < 2; k++) {
        xdc_batch_shape b = {1, 128, 0};
        xdc_plan_opts o = one_stage_sync(1, k ? 2 : 1024);
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        xdc_sim_result r = simulate(t, &m, &s->best, 1);
        step[k] = r.t_step;
        XDC_ASSERT_NEAR(s->best.t_step, r.t_step, 0.05 * r.t_step);
        xdc_plan_set_destroy(s);
    }
    XDC_ASSERT_MSG(step[1] < 0.9 * step[0], "many buckets %.4f s, one bucket %.4f s", step[1], step[0]);
    xdc_topology_destroy(t);
}

XDC_TEST(sim_delayed_sync_hides_the_round_behind_the_next_step)
{
    /* The link of the test above at 3 Gbit/s, one bucket, 4 microbatches: the exchange takes about one
     * backward of one microbatch (at 128 tokens a microbatch runs at 128/(128+256) of the GPU's speed).
     * Undelayed, the whole round shows after the last backward; with delay_steps 1 it runs while the next
     * step computes and nothing shows. The planner's closed form (step = pass + max(0, round - pass) +
     * closing) agrees with the simulation in both. */
    xdc_topology *t = two_gpus_linked(3);
    xdc_model_shape m;
    flat_model(16, &m);
    xdc_sim_result r[2];
    for (int delay = 0; delay < 2; delay++) {
        xdc_batch_shape b = {1, 128, 0};
        xdc_plan_opts o = one_stage_sync(4, 1024);
        o.delay_steps = delay;
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        XDC_ASSERT_EQ(s->best.delay_steps, delay);
        r[delay] = simulate(t, &m, &s->best, 4);
        printf("delay %d: planned %.4f s (exposed WAN %.4f), simulated %.4f s (exposed %.4f)\n", delay, s->best.t_step,
               s->best.t_wan_exposed, r[delay].t_step, r[delay].t_comm_exposed);
        XDC_ASSERT_NEAR(s->best.t_step, r[delay].t_step, 0.05 * r[delay].t_step);
        if (delay) XDC_ASSERT(s->best.t_wan_exposed == 0);
        xdc_plan_set_destroy(s);
    }
    XDC_ASSERT_MSG(r[0].t_comm_exposed > 0.1 * r[0].t_step, "undelayed: %.4f s exposed of %.4f", r[0].t_comm_exposed,
                   r[0].t_step);
    XDC_ASSERT_MSG(r[1].t_comm_exposed < 0.01 * r[1].t_step, "delayed: %.4f s exposed of %.4f", r[1].t_comm_exposed,
                   r[1].t_step);
    xdc_topology_destroy(t);
}

XDC_TEST(sim_inregion_receive_is_posted_after_the_op_before)
{
    /* Two equal stages in one region, transfers of d seconds. The runtime posts a stage's receive only when
     * its op before ends (forward + receive dy, backward + receive the next x), so every steady-state
     * microbatch pays d on the busiest stage: (M + 1)(c + d) per step, where an early send alone would give
     * (M + 1) c + 2 d. The gradient-norm all-reduce between the two stages closes the step: 2 hand-offs. */
    xdc_topology *t = test_plan_parse_topo(
        "name: one\nregions:\n  - {name: a, nodes: a1, gpus_per_node: 2, gpu: {model: "
        "x, bf16_tflops: 100, memory_gib: 80}, intra: {bandwidth_gbps: 1000000, "
        "latency_us: 100}}\n");
    xdc_model_shape m;
    flat_model(8, &m);
    for (int M = 1; M <= 8; M *= 2) {
        xdc_plan p = plan_for(t, &m, 2, M, NULL, XDC_PLAN_SYNC);
        XDC_ASSERT_EQ(p.stages, 2);
        xdc_sim_result r = simulate(t, &m, &p, 1);
        double c = mb_seconds(&p, 0), d = 100e-6 + 128.0 * m.boundary_bytes_per_token / 1.25e14;
        double pipe = r.t_step - 2 * (100e-6 + 8 / 1.25e14);
        XDC_ASSERT_NEAR(p.stage[1].flops_mb, p.stage[0].flops_mb, 1e-9 * p.stage[0].flops_mb);
        XDC_ASSERT_MSG(fabs(pipe - (M + 1) * (c + d)) <= 1e-6 * r.t_step, "M=%d: pipeline %.6f s, (M+1)(c+d) = %.6f s",
                       M, pipe, (M + 1) * (c + d));
        XDC_ASSERT_NEAR(pipe - ((M + 1) * c + 2 * d), (M - 1) * d, 1e-6 * r.t_step);
        XDC_ASSERT_NEAR(p.t_step, r.t_step, 1e-6 * r.t_step); /* the planner's closed form agrees */
    }
    xdc_topology_destroy(t);
}

XDC_TEST(sim_measured_wire_ratio_replaces_the_codec_table)
{
    /* How far zstd shrinks int8 depends on the gradients: a ratio measured in a run (calib.wire_ratio)
     * prices the bytes of the codec it was measured with, and only that codec. */
    xdc_topology *t = test_plan_parse_topo(TWO_REGIONS("bandwidth_gbps: 0.1, rtt_ms: 60"));
    xdc_model_shape m;
    flat_model(2, &m);
    double bytes = 4 * m.params, wan[3], step[3];
    const char *measured_with[3] = {"", "int8", "int4"};
    for (int k = 0; k < 3; k++) {
        xdc_batch_shape b = {1, 128, 0};
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.calib.mfu = 0.5;
        o.calib.wire_ratio = k ? 0.3 : 0;
        snprintf(o.calib.ratio_codec, sizeof o.calib.ratio_codec, "%s", measured_with[k]);
        o.all_regions = 1;
        o.stages = 1;
        o.microbatches = 1;
        o.mode = XDC_PLAN_SYNC;
        o.bucket_mb = 1024;
        snprintf(o.codec, sizeof o.codec, "int8");
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        xdc_sim_result r;
        XDC_ASSERT_OK(xdc_sim_run(t, &m, &s->best, &o.calib, 1, &r, &d));
        XDC_ASSERT_NEAR(s->best.wan_bytes, r.wan_bytes, 1);
        wan[k] = r.wan_bytes;
        step[k] = r.t_step;
        xdc_plan_set_destroy(s);
    }
    xdc_codec_estimate table;
    XDC_ASSERT_OK(xdc_codec_estimate_for("int8", 0.1, &table, NULL));
    XDC_ASSERT_NEAR(wan[0], 2 * bytes * table.ratio, 1);
    XDC_ASSERT_NEAR(wan[1], 2 * bytes * 0.3, 1);
    XDC_ASSERT_NEAR(wan[2], wan[0], 1); /* measured with another codec: the table's */
    /* The extra bytes cross the 0.1 Gbit/s link: the step grows by their time. */
    XDC_ASSERT_NEAR(step[1] - step[0], bytes * (0.3 - table.ratio) / (0.1e9 / 8), 0.02 * (step[1] - step[0]));
    xdc_topology_destroy(t);
}

/* One measured compute time per stage (xdc_plan_calibrate_compute with n = P): each stage runs the time it
 * was given per step, where one value for stage 0 derives the others by FLOP ratio. */
XDC_TEST(sim_per_stage_calibration_gives_each_stage_its_measured_time)
{
    xdc_model_shape m;
    xdc_topology *t = test_plan_demo(&m); /* the tiny GPT: stage 1 holds the LM head, ~1.3x stage 0's FLOPs */
    xdc_batch_shape b = {16, 64, 0};
    static const double cases[][2] = {{0.04, 0.04}, {0.06, 0.02}, {0.03, 0.05}};
    for (int k = 0; k < 4; k++) {
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.stages = 2;
        o.microbatches = 4;
        o.mode = XDC_PLAN_SYNC;
        o.all_regions = 1;
        o.bucket_mb = 0.25;
        snprintf(o.codec, sizeof o.codec, "int8");
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        double ratio = s->best.stage[1].flops_mb / s->best.stage[0].flops_mb;
        XDC_ASSERT(ratio > 1.1);
        int n = k < 3 ? 2 : 1;
        const double *want = k < 3 ? cases[k] : (const double[]){0.04, 0.04 * ratio};
        XDC_ASSERT_OK(xdc_plan_calibrate_compute(t, &s->best, want, n, &o.calib));
        xdc_plan_set_destroy(s);
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        xdc_sim_result r;
        XDC_ASSERT_OK(xdc_sim_run(t, &m, &s->best, &o.calib, 3, &r, &d));
        /* The busiest worker's compute per step is the larger of the two stages', in the simulator and in the
         * planner's closed form; with one value, stage 1 follows by FLOP ratio. */
        double busiest = want[0] > want[1] ? want[0] : want[1];
        XDC_ASSERT_MSG(fabs(r.t_compute - busiest) <= 1e-9, "case %d: simulated busiest %.6f s, want %.6f s", k,
                       r.t_compute, busiest);
        XDC_ASSERT_NEAR(s->best.t_compute, busiest, 1e-9);
        /* Each stage's op times: the simulated utilisation is the two stages' compute over two workers' steps. */
        XDC_ASSERT_NEAR(r.utilisation * r.t_step * 2, want[0] + want[1], 1e-6);
        xdc_plan_set_destroy(s);
    }
    /* A count that is neither 1 nor the plan's stages, or a value that is not positive: refused, calib kept. */
    xdc_plan p;
    {
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.stages = 2;
        o.microbatches = 4;
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        p = s->best;
        xdc_plan_set_destroy(s);
    }
    xdc_plan_calib c = {.mfu = 0.4, .compute_scale = 2.0}, before = c;
    static const double three[] = {0.1, 0.1, 0.1}, zero[] = {0.1, 0};
    XDC_ASSERT_ERR(xdc_plan_calibrate_compute(t, &p, three, 3, &c), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_plan_calibrate_compute(t, &p, zero, 2, &c), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_plan_calibrate_compute(t, &p, three, 0, &c), XDC_ERR_INVALID);
    XDC_ASSERT(memcmp(&c, &before, sizeof c) == 0);
    xdc_topology_destroy(t);
}

XDC_TEST_T(sim_8_regions_x_1024_gpus_completes, 120)
{
    xdc_topology *t = test_plan_load_topo("examples/topology/large-8x1024.yaml");
    XDC_ASSERT_EQ(xdc_topology_total_workers(t), 8192);
    xdc_model_shape m;
    xdc_model_shape_gpt(32, 32, 4096, 2048, 32000, &m); /* ~6.7B */
    xdc_batch_shape b = {1, 2048, 2048.0 * 8192 * 2};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_plan_set *s = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
    xdc_sim_result r = simulate(t, &m, &s->best, 1);
    XDC_ASSERT_EQ(r.gpus, 8192);
    XDC_ASSERT(r.events > 8192);
    XDC_ASSERT(r.t_step > 0 && r.t_step >= r.t_compute);
    XDC_ASSERT(r.utilisation > 0 && r.utilisation <= 1.0 + 1e-9);
    XDC_ASSERT_MSG(fabs(r.t_step - s->best.t_step) <= 0.5 * s->best.t_step, "sim %.4f vs planner %.4f", r.t_step,
                   s->best.t_step);
    xdc_plan_set_destroy(s);
    xdc_topology_destroy(t);
}

XDC_TEST(sim_agrees_with_planner_on_demo_configs)
{
    xdc_model_shape m;
    xdc_topology *t = test_plan_demo(&m);
    static const int modes[] = {XDC_PLAN_SYNC, XDC_PLAN_DILOCO, XDC_PLAN_STREAMING};
    for (int k = 0; k < 3; k++) {
        xdc_batch_shape b = {16, 64, 0};
        xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
        o.stages = 2;
        o.microbatches = 4;
        o.mode = modes[k];
        o.inner_steps = k ? 4 : 0;
        o.fragments = k == 2 ? 2 : 0;
        o.bucket_mb = 0.25;
        snprintf(o.codec, sizeof o.codec, "int8");
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        xdc_sim_result r = simulate(t, &m, &s->best, 8);
        XDC_ASSERT_MSG(fabs(r.t_step - s->best.t_step) <= 0.25 * s->best.t_step, "%s: sim %.4f vs planner %.4f",
                       xdc_plan_mode_name(s->best.mode), r.t_step, s->best.t_step);
        xdc_plan_set_destroy(s);
    }
    xdc_topology_destroy(t);
}

XDC_TEST(sim_and_plan_fail_cleanly_at_every_allocation)
{
    xdc_model_shape m;
    xdc_topology *t = test_plan_demo(&m);
    xdc_batch_shape b = {16, 64, 16.0 * 64 * 8};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    xdc_plan_set *s = NULL;
    xdc_diag d = {{0}};
    xdc_alloc_fail_at(0);
    XDC_ASSERT_OK(xdc_plan_search(t, &m, &b, &o, &s, &d));
    long allocs = xdc_alloc_count();
    xdc_plan p = s->best;
    xdc_plan_set_destroy(s);
    XDC_ASSERT(allocs >= 3);
    for (long i = 1; i <= allocs; i++) {
        xdc_alloc_fail_at(i);
        XDC_ASSERT_ERR(xdc_plan_search(t, &m, &b, &o, &s, &d), XDC_ERR_NOMEM);
        XDC_ASSERT(s == NULL);
    }
    xdc_sim_result r;
    xdc_alloc_fail_at(0);
    XDC_ASSERT_OK(xdc_sim_run(t, &m, &p, NULL, 2, &r, &d));
    allocs = xdc_alloc_count();
    XDC_ASSERT(allocs >= 5);
    for (long i = 1; i <= allocs; i++) {
        xdc_alloc_fail_at(i);
        XDC_ASSERT_ERR(xdc_sim_run(t, &m, &p, NULL, 2, &r, &d), XDC_ERR_NOMEM);
    }
    xdc_alloc_fail_at(0);
    xdc_topology_destroy(t);
}
