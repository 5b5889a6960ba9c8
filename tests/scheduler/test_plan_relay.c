/* test_plan_relay.c — the planner and the simulator on link graphs that are not full meshes: three equal
 * regions in a star (b and c linked only to the hub a) train together, their exchange relayed through a. Each
 * region still receives every other region's shard once (the hub forwards the copy it received), so the plan's
 * and the simulator's WAN bytes equal those of the full mesh, with the relayed pair's bytes billed on the
 * links they cross; the relay's extra hop costs time, and the simulator agrees with the planner within 10 %.
 * And `xdc plan --explain` on heterogeneous.yaml names the relayed pair and, when it leaves regions out, the
 * fastest plan with every region in numbers. */
#include "tests/xdc_test.h"

#include "tests/scheduler/test_plan_util.h"

#include "model/xdc_model_shape.h"
#include "scheduler/xdc_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define REGION3(n)                                                                                          \
    "  - {name: " n ", nodes: " n "1, gpus_per_node: 8, gpu: {model: x, bf16_tflops: 300, memory_gib: 80}," \
    " intra: {bandwidth_gbps: 1000}}\n"

/* Three equal regions; a-b and a-c at 400 Gbit/s ($0.01/GB from a, $0.02 towards a), plus b-c (`bc`: its
 * link line, "" for the star). */
static xdc_topology *three(const char *bc)
{
    char y[2048];
    snprintf(y, sizeof y,
             "name: star\nregions:\n" REGION3("a") REGION3("b")
                 REGION3("c") "links:\n"
                              "  - {from: a, to: b, bandwidth_gbps: 400, rtt_ms: 2, cost_usd_per_gb: 0.01}\n"
                              "  - {from: b, to: a, bandwidth_gbps: 400, rtt_ms: 2, cost_usd_per_gb: 0.02}\n"
                              "  - {from: a, to: c, bandwidth_gbps: 400, rtt_ms: 2, cost_usd_per_gb: 0.01}\n"
                              "  - {from: c, to: a, bandwidth_gbps: 400, rtt_ms: 2, cost_usd_per_gb: 0.02}\n%s",
             bc);
    return test_plan_parse_topo(y);
}

XDC_TEST(plan_star_trains_every_region_through_the_hub)
{
    xdc_model_shape m;
    xdc_model_shape_gpt(12, 12, 768, 1024, 256, &m);
    xdc_batch_shape b = {8, 1024, 8.0 * 1024 * 24 * 4}; /* compute-bound enough that every region pays */
    xdc_plan_opts o = XDC_PLAN_OPTS_INIT;
    o.mode = XDC_PLAN_SYNC;
    snprintf(o.codec, sizeof o.codec, "int8");
    o.stages = 1;
    xdc_topology *star = three(""),
                 *mesh = three("  - {from: b, to: c, bandwidth_gbps: 400, rtt_ms: 2, cost_usd_per_gb: 0.01}\n");
    xdc_plan_set *s = NULL, *f = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_plan_search(star, &m, &b, &o, &s, &d) == XDC_OK, "star: %s", d.msg);
    const xdc_plan *p = &s->best;
    o.bucket_mb = p->bucket_mb; /* the same layout on the mesh: the two differ only in the links */
    o.microbatches = p->microbatches;
    XDC_ASSERT_MSG(xdc_plan_search(mesh, &m, &b, &o, &f, &d) == XDC_OK, "mesh: %s", d.msg);
    for (int r = 0; r < 3; r++) XDC_ASSERT_MSG(p->replicas[r] == 8, "region %d runs %d replicas", r, p->replicas[r]);
    XDC_ASSERT_MSG(memcmp(f->best.replicas, p->replicas, sizeof p->replicas) == 0 &&
                       strcmp(f->best.codec, p->codec) == 0 && f->best.bucket_mb == p->bucket_mb,
                   "the mesh chose %s %g MiB M=%d, the star %s %g MiB M=%d", f->best.codec, f->best.bucket_mb,
                   f->best.microbatches, p->codec, p->bucket_mb, p->microbatches);
    /* Six transfers of one shard each way, as in the mesh; b's and c's shards to each other are billed on
     * a's links towards the leaves ($0.01) where the mesh bills the b-c link ($0.01 as well): equal bytes,
     * equal egress; the relayed pair's last hop makes the star no faster. */
    XDC_ASSERT_NEAR(p->wan_bytes, f->best.wan_bytes, 1);
    XDC_ASSERT_NEAR(p->egress_usd, f->best.egress_usd, 1e-12);
    XDC_ASSERT_MSG(p->t_step >= f->best.t_step, "star %.6f s faster than the mesh %.6f s", p->t_step, f->best.t_step);
    xdc_sim_result r;
    XDC_ASSERT_OK(xdc_sim_run(star, &m, p, &o.calib, 3, &r, &d));
    XDC_ASSERT_NEAR(r.wan_bytes, p->wan_bytes, 1);
    XDC_ASSERT_MSG(fabs(r.t_step / p->t_step - 1) < 0.10, "simulated %.6f s, planned %.6f s", r.t_step, p->t_step);
    xdc_plan_set_destroy(s);
    xdc_plan_set_destroy(f);
    xdc_topology_destroy(star);
    xdc_topology_destroy(mesh);
}

XDC_TEST(plan_explain_names_the_relay_and_the_every_region_plan)
{
    char cmd[1024];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd,
             "%s plan --explain -t examples/topology/heterogeneous.yaml -m examples/models/small10m.yaml",
             xdc_test_bin());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "relayed (no direct link): us-west <-> eu-north through us-central");
    /* Nobody waits lets the A100s of us-west add their inner steps without holding the H100s; eu-north's thin
     * intra fabric would still hold every round: said in numbers. */
    XDC_ASSERT_STR_CONTAINS(out, "regions: the chosen plan leaves out eu-north (16 of 112 workers idle)");
    XDC_ASSERT_STR_CONTAINS(out, "inner steps per round of 250: us-central=250 us-west=78");
    XDC_ASSERT_STR_CONTAINS(out, "against every region running H, the round waiting for the slowest");
    XDC_ASSERT_STR_CONTAINS(out, "eu-north 183 x 0.00348 s = 0.638 s"); /* why eu-north stays out */
    XDC_ASSERT_STR_CONTAINS(out, "the fastest plan with every region: ");
    XDC_ASSERT_STR_CONTAINS(out, "time per token against the chosen plan");
    XDC_ASSERT(strstr(out, "no direct link for the gradient sync") == NULL);
}
