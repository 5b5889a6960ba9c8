/* test_ileave.c — interleaved 1F1B (pipeline_chunks, docs/runtime.md) end to end: an 8-layer tiny model
 * through one pipeline of 2 and of 4 stages in one region, at v = 1 and v = 2 chunks per stage, ends on the
 * parameters of the single-process reference of the P·v-way split (codec none), and the strict CPU device
 * under the intra backend's NCCL semantics ends on the cpu run's params_xxh64; pipelines of 2 and 4 stages
 * across 2 regions do the same; the run file's and the topology's misuses are named. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include "model/xdc_gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One region of `workers` CPU workers: one pipeline of that many stages, no data-parallel replica. */
static const char *one_region(int workers)
{
    static char path[600];
    char text[1024];
    snprintf(path, sizeof path, "%s/one-region-%d.yaml", xdc_test_tmpdir(), workers);
    snprintf(text, sizeof text,
             "name: one-region\nregions:\n  - name: us-east\n    nodes: east-node1\n    gpus_per_node: 0\n"
             "    workers_per_node: %d\n    gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}\n"
             "    intra: {bandwidth_gbps: 40, latency_us: 10}\n    wan_endpoint: 127.0.0.1:29400\n",
             workers);
    xdc_test_write_file(path, text);
    return path;
}

/* Where the pipelines run: one pipeline in one region; one over 2 regions (span_regions); 2 stages in each of
 * demo-2region's regions (a replica per region, gradients averaged over the WAN); 2 replicas of 2 stages in
 * one region (averaged over the intra communicator). */
enum { ONE, SPAN, REGIONS, REPLICAS };

/* `xdc launch` of P stages x v chunks, 3 steps of M = 4 microbatches, on `device` (with NCCL semantics for
 * cpu-strict), laid out as `layout` says. SPAN: span-2region.yaml for 2 stages (one in each region: every
 * chunk boundary, the wrap-around too, crosses the emulated WAN), demo-2region.yaml for 4 (2 in each: stages
 * 1-2 and the wrap-around 3-0 cross it, the others stay in a region), activations uncompressed. Its
 * parameters against the serial reference of P·v stages (cpu, codec none), its params_xxh64 and WAN bytes. */
static double run_chunks(int P, int v, const char *device, int layout, char hash[64])
{
    static char out[65536];
    static const char *const tag[] = {"", "-span", "-regions", "-replicas"};
    char extra[1024], name[64], dir[600], cmd[2048];
    const char *model = e2e_write_tiny(8, 10), *topo = layout == ONE        ? one_region(P)
                                                       : layout == REPLICAS ? one_region(2 * P)
                                                       : layout == SPAN && P == 2
                                                           ? "examples/topology/span-2region.yaml"
                                                           : TOPO;
    int span = layout == SPAN, R = layout == REGIONS ? 2 : 1, D = layout == REPLICAS ? 2 : 1;
    snprintf(name, sizeof name, "ileave-%d-%d-%s%s", P, v, device, tag[layout]);
    snprintf(extra, sizeof extra, "model: %s\nmicrobatches: 4\npipeline_chunks: %d\ndump_params: true\n%s", model, v,
             span ? "span_regions: true\nactivation_codec: none\n" : "");
    const char *run = e2e_write_run_pb(name, "sync", 3, "none", P, 0.05, extra);
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "%s timeout 240 %s launch -t %s -c %s --run-dir %s --device %s",
             strcmp(device, "cpu-strict") == 0 ? "XDC_INTRA_NCCL_SEMANTICS=1" : "", xdc_test_bin(), topo, run, dir,
             device);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", name, rc, out);
    char bytes[64];
    e2e_final_field(out, "params_xxh64=", hash, 64);
    e2e_final_field(out, "wan_bytes=", bytes, sizeof bytes);
    xdc_gpt_stage *st[E2E_MAX_STAGES];
    e2e_reference_run(3, 4, model, R, D, P * v, 0, NULL, st);
    double d = e2e_params_max_diff(dir, P * v, st);
    for (int s = 0; s < P * v; s++) xdc_gpt_stage_destroy(st[s]);
    printf("%s: params_xxh64=%s, max |run - reference of %d stages| = %.3g\n", name, hash, P * v, d);
    XDC_ASSERT_MSG(d <= 1e-6, "%s differs from the single-process reference by %.3g", name, d);
    return atof(bytes);
}

/* v = 1 and 2 at P stages match the reference; v = 2 on cpu-strict under NCCL semantics ends on cpu's hash. */
static void chunks_match(int P)
{
    char h1[64], h2[64], strict[64];
    run_chunks(P, 1, "cpu", ONE, h1);
    run_chunks(P, 2, "cpu", ONE, h2);
    run_chunks(P, 2, "cpu-strict", ONE, strict);
    XDC_ASSERT_MSG(strcmp(h2, strict) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, h2);
}

XDC_TEST_T(ileave_two_stages_match_single_process, 300)
{
    e2e_need_corpus();
    chunks_match(2);
}

XDC_TEST_T(ileave_four_stages_match_single_process, 300)
{
    e2e_need_corpus();
    chunks_match(4);
}

/* Pipelines across regions match the reference at v = 1 and 2. 2 stages, one in each region: with v = 2 the
 * activations and their gradients cross the WAN 2v − 1 = 3 times each way per microbatch, v = 1 once. 4 stages,
 * 2 in each region: at v = 2 the boundary 1-2 twice and the wrap-around 3-0 (a WAN link of its own) once, 3
 * times v = 1's one crossing too; cpu-strict under NCCL semantics ends on the cpu hash. */
XDC_TEST_T(ileave_across_regions_matches_single_process, 300)
{
    e2e_need_corpus();
    char h1[64], h2[64], strict[64];
    for (int P = 2; P <= 4; P += 2) {
        double b1 = run_chunks(P, 1, "cpu", SPAN, h1), b2 = run_chunks(P, 2, "cpu", SPAN, h2);
        printf("%d stages, WAN bytes: v=1 %.0f, v=2 %.0f (x%.3f)\n", P, b1, b2, b2 / b1);
        XDC_ASSERT_MSG(b2 > 2.9 * b1 && b2 < 3.1 * b1, "v=2 moved %.0f WAN bytes, v=1 %.0f: not 3 crossings for 1", b2,
                       b1);
    }
    run_chunks(4, 2, "cpu-strict", SPAN, strict);
    XDC_ASSERT_MSG(strcmp(h2, strict) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, h2);
}

/* Data-parallel replicas of an interleaved pipeline: each chunk's gradients averaged by a sync of their own,
 * across 2 regions (codec none) and over 2 replicas in a region, match the reference of R regions x D replicas
 * x 4 virtual stages; the in-region one on cpu-strict under NCCL semantics ends on the cpu hash. */
XDC_TEST_T(ileave_replicas_match_single_process, 300)
{
    e2e_need_corpus();
    char h[64], strict[64];
    run_chunks(2, 2, "cpu", REGIONS, h);
    run_chunks(2, 2, "cpu", REPLICAS, h);
    run_chunks(2, 2, "cpu-strict", REPLICAS, strict);
    XDC_ASSERT_MSG(strcmp(h, strict) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, h);
}

/* A failed launch into `dir`: its workers' logs name `want`. */
static void logs_name(const char *dir, const char *want)
{
    static char out[65536];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cat %s/logs/*.log", dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, want);
}

/* What the interleaved schedule refuses, by name: a microbatch count that is no multiple of the stages (run
 * file), a pipeline across regions whose wrap-around has no WAN link (topology). */
XDC_TEST_T(ileave_refusals_are_named, 120)
{
    e2e_need_corpus();
    static char out[65536];
    char extra[1024], dir[600], cmd[2048];
    snprintf(extra, sizeof extra, "model: %s\nmicrobatches: 3\npipeline_chunks: 2\n", e2e_write_tiny(8, 10));
    const char *run = e2e_write_run_pb("ileave-m3", "sync", 1, "none", 2, 0.05, extra);
    snprintf(dir, sizeof dir, "%s/ileave-m3", xdc_test_tmpdir());
    XDC_ASSERT(e2e_launch(run, dir, NULL, out, sizeof out) != 0);
    XDC_ASSERT_STR_CONTAINS(out, "pipeline_chunks 2 needs microbatches (3) a multiple of pipeline_stages (2)");
    /* 3 stages over demo-3region's 3 x 1 workers: the wrap-around's link would end on the last stage, which
     * accepts its previous stage's already */
    snprintf(extra, sizeof extra,
             "model: %s\nmicrobatches: 3\npipeline_chunks: 2\nspan_regions: true\nactivation_codec: none\n",
             e2e_write_tiny(8, 10));
    run = e2e_write_run_pb("ileave-span", "sync", 1, "none", 3, 0.05, extra);
    snprintf(dir, sizeof dir, "%s/ileave-span", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t examples/topology/demo-3region.yaml -c %s --run-dir %s",
             xdc_test_bin(), run, dir);
    XDC_ASSERT(xdc_test_run(cmd, out, sizeof out) != 0);
    logs_name(dir, "pipeline_chunks 2 across regions needs a WAN link for the chunks' wrap-around from the last stage "
                   "(region ap-south) to the first (region us-east)");
}
