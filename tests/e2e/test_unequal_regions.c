/* test_unequal_regions.c — regions of different worker counts under `xdc launch` (the same stages everywhere, a
 * different number of replicas; xdc_sync_cfg.lanes): every region takes part and ends on one params_xxh64.
 * In sync mode with the exact codec, us-east's two replicas and eu-west's one end bit for bit where one region
 * of three replicas does: us-east's mean (g0 + g1) · 0.5 weighed by its 2 microbatches-per-step share is g0 + g1
 * exactly, plus g2, times 1/3, the very sum and scale of the one region's reduce-scatter; likewise with
 * microbatches_per_replica [3, 1, 2] (weights 3, 1 in us-east, 2 in eu-west). Two pipeline stages on that pair
 * are refused by name (eu-west's one worker cannot hold both). DiLoCo and streaming with int8
 * over three regions of 1, 2 and 1 workers, and sync mode over 3 and 2 replicas (two lanes, each broadcasting
 * its shard), end on one hash everywhere; the last, resumed from a checkpoint, ends on the uninterrupted
 * run's. `plan: auto` on the 2 + 1 pair plans both regions, with one slowed 3x
 * DiLoCo with nobody waits, and the launch runs each plan. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A topology in the test's folder: one CPU region per entry of `workers` (us-east, eu-west, ap-south), every
 * pair linked. */
static const char *topology(const char *name, const int *workers, int n)
{
    static const char *const region[3] = {"us-east", "eu-west", "ap-south"}, *const node[3] = {"east", "west", "south"};
    static char path[600];
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text, "name: %s\nregions:\n", name);
    for (int r = 0; r < n; r++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "  - name: %s\n    nodes: %s-node1\n    gpus_per_node: 0\n    workers_per_node: %d\n"
                                "    gpu: {model: cpu, bf16_tflops: 0.05, memory_gib: 4}\n"
                                "    intra: {bandwidth_gbps: 40, latency_us: 10}\n",
                                region[r], node[r], workers[r]);
    len += (size_t)snprintf(text + len, sizeof text - len, "links:%s\n", n > 1 ? "" : " []");
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            len += (size_t)snprintf(text + len, sizeof text - len,
                                    "  - {from: %s, to: %s, bandwidth_gbps: 1, rtt_ms: 2, cost_usd_per_gb: 0.02}\n",
                                    region[a], region[b]);
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    xdc_test_write_file(path, text);
    return path;
}

/* `xdc launch` of `run` on `topo` into TMP/<name>: every one of the `regions` regions logs the run's final
 * params hash, which goes into hash. Returns the launch's output (a static buffer). */
static const char *launch_one_hash(const char *topo, const char *run, const char *name, int regions, char hash[64])
{
    static char out[65536];
    char cmd[2048], dir[600], h[4][17];
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), topo, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", name, rc, out);
    e2e_final_field(out, "params_xxh64=", hash, 64);
    int n = e2e_final_hashes(dir, h, 4);
    XDC_ASSERT_MSG(n == regions, "%s: %d of %d regions logged their final parameters", name, n, regions);
    for (int r = 0; r < n; r++)
        XDC_ASSERT_MSG(strncmp(h[r], hash, 16) == 0, "%s: a region ends at %s, the run at %s", name, h[r], hash);
    return out;
}

XDC_TEST_T(unequal_regions_sync_equals_one_region_of_all_replicas, 120)
{
    e2e_need_corpus();
    const int pair[2] = {2, 1}, one[1] = {3};
    char het[600], path[600], het_hash[64], one_hash[64];
    snprintf(het, sizeof het, "%s", topology("het21", pair, 2));
    snprintf(path, sizeof path, "%s", topology("one3", one, 1));
    launch_one_hash(het, e2e_write_run_p("uneq-sync", "sync", 4, "none", 1, ""), "uneq-sync-het", 2, het_hash);
    launch_one_hash(path, e2e_write_run_p("uneq-sync", "sync", 4, "none", 1, ""), "uneq-sync-one", 1, one_hash);
    XDC_ASSERT_MSG(strcmp(het_hash, one_hash) == 0, "2 + 1 replicas end at %s, one region of 3 at %s", het_hash,
                   one_hash);
    const char *mb = "microbatches_per_replica: [3, 1, 2]\n";
    launch_one_hash(het, e2e_write_run_p("uneq-mb", "sync", 4, "none", 1, mb), "uneq-mb-het", 2, het_hash);
    launch_one_hash(path, e2e_write_run_p("uneq-mb", "sync", 4, "none", 1, mb), "uneq-mb-one", 1, one_hash);
    XDC_ASSERT_MSG(strcmp(het_hash, one_hash) == 0, "unequal replicas: 2 + 1 end at %s, one region of 3 at %s",
                   het_hash, one_hash);
    /* Two stages: us-east's 2 workers make one replica, eu-west's 1 cannot hold both stages. Refused by name, by the
     * launcher before it starts anything (each worker checks it too, and the first to exit used to end the launch
     * before eu-west's could say why). */
    static char out[65536];
    char cmd[2048], dir[700];
    snprintf(dir, sizeof dir, "%s/uneq-stages", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 60 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), het,
             e2e_write_run_p("uneq-stages", "sync", 4, "none", 2, ""), dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "region eu-west has 1 workers, which the 2 pipeline stages must divide: every region "
                                 "runs the same stages");
    XDC_ASSERT_MSG(access(dir, F_OK) != 0, "the refused launch made its run folder %s", dir);
}

XDC_TEST_T(unequal_regions_diloco_streaming_and_two_lanes_end_on_one_model, 180)
{
    e2e_need_corpus();
    const int three[3] = {1, 2, 1}, wide[2] = {3, 2};
    char path[600], hash[64];
    snprintf(path, sizeof path, "%s", topology("het121", three, 3));
    launch_one_hash(path, e2e_write_run_p("uneq-diloco", "diloco", 6, "int8", 1, "diloco: {inner_steps: 3}\n"),
                    "uneq-diloco", 3, hash);
    launch_one_hash(path, e2e_write_run_p("uneq-stream", "streaming", 6, "int8", 1, ""), "uneq-stream", 3, hash);
    /* Two lanes, and a resume from step 5 of 8 (each lane's error-feedback residual in its checkpoint, none in
     * us-east's third replica) ends where the uninterrupted run does. */
    char topo[600], resumed[64], cmd[2048];
    snprintf(topo, sizeof topo, "%s", topology("het32", wide, 2));
    const char *run = e2e_write_run_p("uneq-lanes", "sync", 8, "int8", 1, "checkpoint_every: 5\n");
    launch_one_hash(topo, run, "uneq-lanes", 2, hash);
    static char out[65536];
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t %s -c %s --run-dir %s/uneq-lanes --resume", xdc_test_bin(),
             topo, run, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/uneq-lanes/logs/us-east-east-node1-2.log", xdc_test_tmpdir()); /* not a lane */
    char *log = xdc_test_read_file(cmd, NULL);
    XDC_ASSERT_MSG(log && strstr(log, "resumed from the checkpoint of step 5"), "%s: no resume from step 5", cmd);
    free(log);
    e2e_final_field(out, "params_xxh64=", resumed, sizeof resumed);
    XDC_ASSERT_MSG(strcmp(resumed, hash) == 0, "the resumed run ends at %s, the uninterrupted one at %s", resumed,
                   hash);
}

XDC_TEST_T(unequal_regions_plan_auto_uses_both_and_runs, 180)
{
    e2e_need_corpus();
    static char out[65536];
    const int pair[2] = {2, 1};
    char topo[600], cmd[2048], run[600], cwd[512], hash[64];
    snprintf(topo, sizeof topo, "%s", topology("het21-plan", pair, 2));
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(cmd, sizeof cmd, "%s plan -t %s -m %s/%s", xdc_test_bin(), topo, cwd, TINY);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "replicas per region: us-east=2 eu-west=1");
    XDC_ASSERT_STR_CONTAINS(out, "WAN lanes per stage: 1 (the fewest replicas of a region");
    const char *slow[2] = {"", "diloco: {slowdown: [1, 3]}\n"};
    for (int k = 0; k < 2; k++) {
        snprintf(run, sizeof run, "%s/uneq-auto%d.yaml", xdc_test_tmpdir(), k);
        FILE *f = fopen(run, "w");
        XDC_ASSERT(f != NULL);
        fprintf(f, "model: %s/%s\ndata: %s\nplan: auto\nmicrobatches: 2\nsteps: %d\n%s", cwd, TINY, DATA, k ? 20 : 4,
                slow[k]);
        fclose(f);
        const char *got = launch_one_hash(topo, run, k ? "uneq-auto-slow" : "uneq-auto", 2, hash);
        XDC_ASSERT_STR_CONTAINS(got, k ? "plan: diloco" : "plan: sync");
        if (k) XDC_ASSERT_STR_CONTAINS(got, "nobody waits (each region's inner steps by its pace)");
    }
}
