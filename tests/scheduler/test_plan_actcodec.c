/* test_plan_actcodec.c — the planner's activation codec for a pipeline cut across regions: chosen from
 * none, bf16, int8 and the low-rank codec by the link's rate against the activation bytes per step (the
 * plan, and each link's advisory codec), with the low-rank codec's estimated wire bytes equal to what
 * its encoder writes. */
#include "tests/xdc_test.h"
#include "tests/scheduler/test_plan_util.h"

#include "common/xdc_rng.h"
#include "compression/xdc_lowrank.h"

#include <stdio.h>
#include <string.h>

/* Two CPU regions of one worker each (as examples/topology/span-2region.yaml) joined by `gbps`. */
static xdc_topology *span(double gbps)
{
    char y[1024];
    snprintf(y, sizeof y,
             "name: span\nregions:\n"
             "  - {name: a, nodes: a1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "  - {name: b, nodes: b1, gpus_per_node: 0, workers_per_node: 1, gpu: {model: cpu, bf16_tflops: 0.05, "
             "memory_gib: 4}}\n"
             "links:\n  - {from: a, to: b, bandwidth_gbps: %g, rtt_ms: 1}\n",
             gbps);
    return test_plan_parse_topo(y);
}

XDC_TEST(plan_activation_codec_follows_the_link_rate)
{
    xdc_model_shape m;
    xdc_topology_destroy(test_plan_demo(&m));
    xdc_batch_shape b = {16, 64, 2.0 * 16 * 64};
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_PIPELINE;
    o.stages = 2;
    o.micro_batch = 16;
    /* 2 microbatches of 16x64 tokens at C = 64: 0.25 MiB of fp32 each way per microbatch. From fast to
     * slow, the plan's codec only gets lossier: none at 10 Gbit/s, lowrank at 2 Mbit/s. */
    const double gbps[] = {10, 0.2, 0.02, 0.002};
    const char *want_link[] = {"none", NULL, NULL, "lowrank"};
    int last_fidelity = -1;
    for (int i = 0; i < 4; i++) {
        xdc_topology *t = span(gbps[i]);
        xdc_plan_set *s = NULL;
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_plan_search(t, &m, &b, &o, &s, &d) == XDC_OK, "%s", d.msg);
        const xdc_plan *p = &s->best;
        char link[16];
        double sec;
        xdc_plan_link_codec(t, &m, p, &o.calib, 0, 1, o.tolerance, link, &sec);
        printf("%g Gbit/s: plan codec %s (%.3f MB WAN per step, step %.3f s), link codec %s (%.4f s per round)\n",
               gbps[i], p->codec, p->wan_bytes / 1e6, p->t_step, link, sec);
        XDC_ASSERT_EQ(p->mode, XDC_PLAN_PIPELINE);
        if (want_link[i]) XDC_ASSERT_MSG(strcmp(link, want_link[i]) == 0, "%g Gbit/s: link codec %s", gbps[i], link);
        XDC_ASSERT_MSG(p->fidelity >= last_fidelity, "%g Gbit/s: %s, more faithful than on a faster link", gbps[i],
                       p->codec);
        last_fidelity = p->fidelity;
        if (i == 0) XDC_ASSERT_MSG(strcmp(p->codec, "lowrank") != 0, "a 10 Gbit/s link got %s", p->codec);
        if (i == 3) XDC_ASSERT_MSG(strcmp(p->codec, "lowrank") == 0, "a 2 Mbit/s link got %s", p->codec);
        xdc_plan_set_destroy(s);
        xdc_topology_destroy(t);
    }
}

/* The planner's estimate of plain lowrank's bytes (xdc_lowrank_estimate) against the encoder: two
 * activations and two gradients of the tiny model's 1024 rows (one refresh cycle). */
XDC_TEST(lowrank_estimate_is_what_the_encoder_sends)
{
    enum { ROWS = 1024, COLS = 64 };
    static float x[ROWS * COLS];
    static uint8_t wire[1 << 18];
    xdc_rng r;
    xdc_rng_seed(&r, 3);
    for (int i = 0; i < ROWS * COLS; i++) x[i] = xdc_rng_normal(&r);
    xdc_lowrank_cfg f = {.cols = COLS, .rows = ROWS}, g = f;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_lowrank_parse("lowrank", &f, &g, &d));
    xdc_lowrank *act, *grad;
    XDC_ASSERT_OK(xdc_lowrank_create(&f, &act, &d));
    XDC_ASSERT_OK(xdc_lowrank_create(&g, &grad, &d));
    size_t sent = 0, len;
    for (int m = 0; m < 2; m++) {
        XDC_ASSERT_OK(xdc_lowrank_encode(act, x, ROWS, wire, sizeof wire, &len, &d));
        sent += len;
        XDC_ASSERT_OK(xdc_lowrank_encode(grad, x, ROWS, wire, sizeof wire, &len, &d));
        sent += len;
    }
    double ratio, flops;
    XDC_ASSERT_OK(xdc_lowrank_estimate("lowrank", COLS, ROWS, &ratio, &flops, &d));
    double fp32 = 4.0 * ROWS * COLS * sizeof(float);
    printf("sent %zu bytes for 2 activations and 2 gradients, estimate %.0f (ratio %.4f of fp32), %.3g flops\n", sent,
           ratio * fp32, ratio, flops);
    XDC_ASSERT_MSG(ratio * fp32 == (double)sent, "estimate %.1f bytes, sent %zu", ratio * fp32, sent);
    XDC_ASSERT(flops > 0);
    XDC_ASSERT_ERR(xdc_lowrank_estimate("lowrank:65", COLS, ROWS, &ratio, &flops, &d), XDC_ERR_CONFIG);
    xdc_lowrank_destroy(act);
    xdc_lowrank_destroy(grad);
}
