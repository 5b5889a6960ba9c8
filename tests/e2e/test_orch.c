/* test_orch.c — the runtime's modes end to end on one machine (`xdc launch`, 2 emulated regions x 2
 * pipeline stages): the delayed sync on cpu and cpu-strict, every mode on cpu-strict against cpu,
 * run-to-run determinism (the second run on an emulated device: emulate_layer_ms), the metrics snapshot,
 * DiLoCo / streaming (dense, sparse, keep-unsent) against sync, plan: auto and its re-plan, and agents started
 * elsewhere (the reference runs are in test_orch_reference.c, the failures in test_orch_failures.c). */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The delayed run with the int8 codec on 2 regions: every worker of both regions ends on one model, the
 * validation loss falls, and cpu-strict (device memory only through the backend, real events between the
 * compute and comm streams) ends on the cpu run's parameters. Bad values of the key, and resuming a
 * checkpoint with it, are named (exit 78). */
XDC_TEST_T(orch_sync_delay_two_regions_agree_on_cpu_and_strict, 300)
{
    e2e_need_corpus();
    static char out[65536];
    const char *run = e2e_write_run("delay8", "sync", 12, "int8", "eval_interval: 4\nsync: {delay_steps: 1}\n");
    char hash[2][64], h[8][17], dir[600];
    for (int d = 0; d < 2; d++) {
        char name[32];
        snprintf(name, sizeof name, "delay-%s", d ? "strict" : "cpu");
        e2e_launch_hash(run, name, d ? "--device cpu-strict" : "--device cpu", out, sizeof out, dir, sizeof dir,
                        hash[d]);
        int n = e2e_final_hashes(dir, h, 8);
        XDC_ASSERT_MSG(n == 2, "%s: %d workers logged their region's final parameters, expected 2", name, n);
        XDC_ASSERT_MSG(strcmp(h[0], h[1]) == 0, "%s: the regions end on %s and %s", name, h[0], h[1]);
        XDC_ASSERT_MSG(strncmp(h[0], hash[d], 16) == 0, "%s: logged %s, result %s", name, h[0], hash[d]);
        const char *v4 = strstr(out, "step     4  val_loss ");
        char last[32];
        e2e_final_field(out, "val_loss=", last, sizeof last);
        XDC_ASSERT_MSG(v4 != NULL, "%s: no validation at step 4", name);
        double first = atof(v4 + strlen("step     4  val_loss "));
        XDC_ASSERT_MSG(atof(last) < first - 0.1, "%s: val_loss %.4f at step 4, %s at the end", name, first, last);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) == 0, "cpu-strict ends at %s, cpu at %s", hash[1], hash[0]);
    static const char *const bad[][2] = {
        {"sync: {delay_steps: 2}\n", "delay_steps: 2 is out of range"},
        {"sync: {delay_steps: 1}\ncheckpoint_every: 2\n", "cannot be combined"},
    };
    for (int i = 0; i < 2; i++) {
        char name[32], where[64];
        snprintf(name, sizeof name, "delay-bad-%d", i);
        const char *path = e2e_write_run(name, "sync", 4, "int8", bad[i][0]);
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
        XDC_ASSERT_EQ(e2e_launch(path, dir, NULL, out, sizeof out), 78);
        snprintf(where, sizeof where, "%s.yaml:11:21:", name); /* the value's line:col */
        XDC_ASSERT_STR_CONTAINS(out, where);
        XDC_ASSERT_STR_CONTAINS(out, bad[i][1]);
    }
    const char *path = e2e_write_run("delay-diloco", "diloco", 4, "int8", "sync: {delay_steps: 1}\n");
    snprintf(dir, sizeof dir, "%s/delay-diloco", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(path, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "sync.delay_steps needs mode sync (this run's mode is diloco)");
    /* A checkpoint of an undelayed run, resumed with the delay: refused by the workers, the key named. */
    path = e2e_write_run("delay-ckpt", "sync", 4, "int8", "checkpoint_every: 2\n");
    snprintf(dir, sizeof dir, "%s/delay-ckpt", xdc_test_tmpdir());
    int rc = e2e_launch(path, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "undelayed run with checkpoints exited %d:\n%s", rc, out);
    path = e2e_write_run("delay-ckpt", "sync", 4, "int8", "sync: {delay_steps: 1}\n");
    XDC_ASSERT_EQ(e2e_launch(path, dir, "--resume", out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "resume: sync.delay_steps 1 in ");
}

XDC_TEST_T(orch_modes_on_cpu_strict_match_cpu, 300)
{
    e2e_need_corpus();
    /* Every launch mode on the device the host cannot touch (PROT_NONE memory, stream threads, real
     * events; docs/device.md) ends with the cpu run's parameters bit for bit: sync with pipelines, data-
     * parallel replicas (intra collectives on device buffers), a pipeline across regions (activation codec
     * on the device) with one stage per region and with two, DiLoCo and streaming, streaming with replicas. Buckets of 0.05 MiB, as in the other
     * launch tests: their edges fall inside 64 KiB blocks. */
    static const struct {
        const char *name, *topo, *mode, *codec, *extra;
        int steps, stages;
    } runs[] = {
        {"sync", TOPO, "sync", "none", "", 4, 2},
        {"dp", TOPO, "sync", "int8", "", 4, 1},
        {"span", "examples/topology/span-2region.yaml", "sync", "none", "span_regions: true\nactivation_codec: int8\n",
         3, 2},
        {"diloco", TOPO, "diloco", "int8", "diloco: {inner_steps: 3}\n", 6, 2},
        {"streaming", TOPO, "streaming", "int8", "diloco: {inner_steps: 3}\nstreaming: {fragments: 2}\n", 6, 2},
        {"stream-dp", TOPO, "streaming", "int8", "diloco: {inner_steps: 3}\nstreaming: {fragments: 2}\n", 6, 1},
        {"span-4", TOPO, "sync", "none", NULL, 3, 4},
    };
    static char out[65536], span4[1024];
    /* A pipeline of 4 stages over both regions' 2 workers each: its scalar chain (loss, gradient norm) has an
     * in-region neighbour at every stage, so those messages go through device memory (orch_pipe.c). */
    snprintf(span4, sizeof span4, "model: %s\nspan_regions: true\nactivation_codec: int8\n", e2e_write_tiny(4, 16));
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *run = e2e_write_run_pb(runs[i].name, runs[i].mode, runs[i].steps, runs[i].codec, runs[i].stages,
                                           0.05, runs[i].extra ? runs[i].extra : span4);
        char hash[2][64], dir[600], cmd[2048];
        for (int d = 0; d < 2; d++) {
            const char *dev = d ? "cpu-strict" : "cpu";
            snprintf(dir, sizeof dir, "%s/%s-%s", xdc_test_tmpdir(), runs[i].name, dev);
            snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s --device %s", xdc_test_bin(),
                     runs[i].topo, run, dir, dev);
            int rc = xdc_test_run(cmd, out, sizeof out);
            XDC_ASSERT_MSG(rc == 0, "%s on %s exited %d:\n%s", runs[i].name, dev, rc, out);
            e2e_final_field(out, "params_xxh64=", hash[d], sizeof hash[d]);
        }
        printf("%s: cpu %s, cpu-strict %s\n", runs[i].name, hash[0], hash[1]);
        XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) == 0, "%s: cpu-strict ends at params_xxh64=%s, cpu at %s", runs[i].name,
                       hash[1], hash[0]);
    }
    /* Checkpoints: a cpu run's checkpoint resumed on cpu-strict, and the strict run's own, both end where
     * the uninterrupted cpu run does (the resume starts from the last checkpoint, step 4). */
    const char *run = e2e_write_run_pb("ckpt", "sync", 6, "none", 2, 0.05, "checkpoint_every: 2\n");
    char want[64], got[64], dir[600], cmd[2048];
    const char *legs[3][2] = {{"cpu", ""}, {"cpu-strict", "--resume"}, {"cpu-strict", ""}};
    for (int l = 0; l < 3; l++) {
        snprintf(dir, sizeof dir, "%s/ckpt-%s", xdc_test_tmpdir(), l == 2 ? "strict" : "cpu");
        for (int again = 0; again < (l == 2 ? 2 : 1); again++) {
            snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s --device %s %s", xdc_test_bin(),
                     TOPO, run, dir, legs[l][0], again ? "--resume" : legs[l][1]);
            int rc = xdc_test_run(cmd, out, sizeof out);
            XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
            e2e_final_field(out, "params_xxh64=", l ? got : want, 64);
            if (l) XDC_ASSERT_MSG(strcmp(want, got) == 0, "%s ends at %s, the cpu run at %s", cmd, got, want);
        }
    }
    snprintf(cmd, sizeof cmd, "grep -l 'resumed from the checkpoint of step 4' %s/ckpt-*/logs/*.log | wc -l",
             xdc_test_tmpdir());
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 8, "expected 8 resumed workers' logs, got %s", out);
}

XDC_TEST_T(orch_same_seed_same_parameters, 300)
{
    e2e_need_corpus();
    const char *run = e2e_write_run("det", "sync", 10, "int8", "metrics_port: 0\n");
    char dir[600], out[65536], h1[64], h2[64];
    e2e_launch_hash(run, "a", NULL, out, sizeof out, dir, sizeof dir, h1);
    /* The second run on an emulated device (each region's layers slowed to a fixed time) changes the time only. */
    run = e2e_write_run("det-emulated", "sync", 10, "int8", "metrics_port: 0\nemulate_layer_ms: [5, 10]\n");
    e2e_launch_hash(run, "b", NULL, out, sizeof out, dir, sizeof dir, h2);
    XDC_ASSERT_MSG(strcmp(h1, h2) == 0, "hashes differ: %s vs %s", h1, h2);
    char cmd[1024], got[64];
    snprintf(cmd, sizeof cmd, "grep -l 'at least 10 ms a microbatch, its backward 20' %s/logs/*.log | wc -l", dir);
    xdc_test_run(cmd, got, sizeof got);
    XDC_ASSERT_MSG(atoi(got) == 2, "expected eu-west's 2 workers to log their emulated layer time, got %s", got);
    char bytes[64];
    e2e_final_field(out, "wan_bytes=", bytes, sizeof bytes);
    XDC_ASSERT(atoll(bytes) > 0);

    /* Observability of the same run: a metrics snapshot per worker, and one merged trace with the
     * compute and WAN lanes of every rank (promtool's verdict on a snapshot is a test of its own). */
    char path[800];
    snprintf(path, sizeof path, "%s/metrics/eu-west-1.prom", dir);
    char *prom = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(prom != NULL, "no metrics snapshot at %s", path);
    XDC_ASSERT_STR_CONTAINS(prom, "xdc_step_total{region=\"eu-west\",host=\"west-node1\",rank=\"1\"} 10");
    XDC_ASSERT_STR_CONTAINS(
        prom, "xdc_wan_tx_bytes_total{region=\"eu-west\",host=\"west-node1\",rank=\"1\",peer=\"us-east\"}");
    free(prom);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    char *trace = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(trace != NULL, "no merged trace at %s", path);
    XDC_ASSERT_STR_CONTAINS(trace, "\"backward\"");
    XDC_ASSERT_STR_CONTAINS(trace, "wait for gradient sync");
    XDC_ASSERT_STR_CONTAINS(trace, "eu-west/west-node1:1");
    free(trace);
}

XDC_TEST_T(orch_metrics_snapshot_passes_promtool, 120)
{
    e2e_need_corpus();
    char out[8192];
    if (xdc_test_run("command -v promtool", out, sizeof out) != 0)
        xdc_test_skip("promtool not installed (Debian package prometheus; `make deps`)");
    const char *run = e2e_write_run("prom", "sync", 3, "int8", "metrics_port: 0\n");
    char dir[600], big[65536], h[64], path[800], cmd[1200];
    e2e_launch_hash(run, "prom", NULL, big, sizeof big, dir, sizeof dir, h);
    snprintf(path, sizeof path, "%s/metrics/us-east-0.prom", dir);
    XDC_ASSERT_MSG(access(path, R_OK) == 0, "no metrics snapshot at %s", path);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "promtool check metrics: %s", out);
}

XDC_TEST_T(orch_diloco_and_streaming_near_sync, 400)
{
    e2e_need_corpus();
    /* Margin (docs/runtime.md): DiLoCo with H=10 and streaming with 4 fragments end within 0.35 nats of
     * sync's validation loss after 100 steps of the tiny model. */
    const double margin = 0.35;
    char dir[600], out[65536], v[64];
    double loss[3];
    const char *modes[3] = {"sync", "diloco", "streaming"};
    for (int m = 0; m < 3; m++) {
        const char *run = e2e_write_run(modes[m], modes[m], 100, "int8",
                                        "diloco: {inner_steps: 10}\nstreaming: {fragments: 4}\n");
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), modes[m]);
        int rc = e2e_launch(run, dir, NULL, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "%s run exited %d:\n%s", modes[m], rc, out);
        e2e_final_field(out, "val_loss=", v, sizeof v);
        loss[m] = atof(v);
        printf("%s: val_loss %.4f\n", modes[m], loss[m]);
    }
    XDC_ASSERT_MSG(loss[0] < 3.0, "sync did not learn: %.3f", loss[0]);
    XDC_ASSERT_MSG(loss[1] <= loss[0] + margin, "diloco %.3f vs sync %.3f", loss[1], loss[0]);
    XDC_ASSERT_MSG(loss[2] <= loss[0] + margin, "streaming %.3f vs sync %.3f", loss[2], loss[0]);
}

/* The sparse codec end to end through `xdc launch`: DiLoCo and streaming runs complete with a finite
 * validation loss and send under a tenth of the WAN bytes of the same DiLoCo run with int8. */
XDC_TEST_T(orch_sparse_codec_runs_diloco_and_streaming, 300)
{
    e2e_need_corpus();
    static char out[65536];
    static const char *const runs[][2] = {
        {"diloco", "int8"}, {"diloco", "sparse:0.02:2"}, {"streaming", "sparse:0.02:2"}};
    double bytes[3];
    for (int i = 0; i < 3; i++) {
        char name[32], dir[600], val[64];
        snprintf(name, sizeof name, "sparse-%d", i);
        const char *run = e2e_write_run(name, runs[i][0], 40, runs[i][1],
                                        "diloco: {inner_steps: 10}\nstreaming: {fragments: 4}\n");
        snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
        int rc = e2e_launch(run, dir, NULL, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "%s %s exited %d:\n%s", runs[i][0], runs[i][1], rc, out);
        e2e_final_field(out, "val_loss=", val, sizeof val);
        XDC_ASSERT_MSG(isfinite(atof(val)) && atof(val) > 0, "%s %s: val_loss %s", runs[i][0], runs[i][1], val);
        e2e_final_field(out, "wan_bytes=", val, sizeof val);
        bytes[i] = atof(val);
    }
    XDC_ASSERT_MSG(bytes[1] * 10 < bytes[0] && bytes[2] * 10 < bytes[0],
                   "WAN bytes int8 %g, sparse diloco %g, streaming %g", bytes[0], bytes[1], bytes[2]);
}

/* diloco.keep_unsent with a sparse codec and diloco.final_codec int8: the unsent part of each round stays in
 * each region's parameters, yet the last round (int8, so more bytes than the sparse run without the two
 * options) leaves both regions on one model; the run differs from the plain one. keep_unsent outside DiLoCo
 * or with replicas, and an unknown final codec, are refused at load, named (exit 78). */
XDC_TEST_T(orch_diloco_keep_unsent_ends_on_one_model, 300)
{
    e2e_need_corpus();
    static char out[65536];
    static const char *const extra[2] = {"diloco: {inner_steps: 10}\n",
                                         "diloco: {inner_steps: 10, keep_unsent: true, final_codec: int8}\n"};
    char hash[2][64], h[8][17], dir[600], bytes[2][64];
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "keep-%d", i);
        e2e_launch_hash(e2e_write_run(name, "diloco", 40, "sparse:0.02:2", extra[i]), name, NULL, out, sizeof out, dir,
                        sizeof dir, hash[i]);
        e2e_final_field(out, "wan_bytes=", bytes[i], sizeof bytes[i]);
        int n = e2e_final_hashes(dir, h, 8);
        XDC_ASSERT_MSG(n >= 2, "%s: %d workers logged final parameters", name, n);
        for (int k = 1; k < n; k++) XDC_ASSERT_MSG(strcmp(h[k], h[0]) == 0, "%s: %s against %s", name, h[k], h[0]);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) != 0, "keep_unsent changed nothing (%s)", hash[0]);
    XDC_ASSERT_MSG(atof(bytes[1]) > atof(bytes[0]), "final int8 round: %s bytes, all sparse %s", bytes[1], bytes[0]);
    const char *bad = e2e_write_run("keep-streaming", "streaming", 20, "sparse:0.02:2",
                                    "diloco: {keep_unsent: true}\n");
    snprintf(dir, sizeof dir, "%s/keep-streaming", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.keep_unsent needs mode diloco");
    bad = e2e_write_run_p("keep-replicas", "diloco", 20, "sparse:0.02:2", 1, "diloco: {keep_unsent: true}\n");
    snprintf(dir, sizeof dir, "%s/keep-replicas", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(bad, dir, NULL, out, sizeof out), 78); /* 2 workers, 1 stage: 2 replicas per region */
    XDC_ASSERT_STR_CONTAINS(out, "needs one replica per stage in each region, but region");
    bad = e2e_write_run("final-bad", "diloco", 20, "int8", "diloco: {final_codec: int9}\n");
    snprintf(dir, sizeof dir, "%s/final-bad", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.final_codec:");
}

/* diloco.overlap_steps 3 with the sparse codec, keep_unsent and an int8 last round: each round is applied 3
 * inner steps after it left, those steps counted in every worker's log (the loop ran while the round was on
 * the wire), and every worker still ends on one model, another than the serial schedule's; so with
 * diloco.overlap: eager, on a model of its own (its inner steps began elsewhere). overlap_steps above
 * inner_steps, or in streaming, is refused (exit 78). */
XDC_TEST_T(orch_diloco_overlapped_rounds_end_on_one_model, 300)
{
    e2e_need_corpus();
    static char out[65536];
    static const char *const extra[3] = {
        "diloco: {inner_steps: 10, keep_unsent: true, final_codec: int8}\n",
        "diloco: {inner_steps: 10, keep_unsent: true, final_codec: int8, overlap_steps: 3}\n",
        "diloco: {inner_steps: 10, keep_unsent: true, final_codec: int8, overlap_steps: 3, overlap: eager}\n"};
    char hash[3][64], h[8][17], dir[600];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "overlap-%d", i);
        e2e_launch_hash(e2e_write_run(name, "diloco", 35, "sparse:0.02:2", extra[i]), name, NULL, out, sizeof out, dir,
                        sizeof dir, hash[i]);
        int n = e2e_final_hashes(dir, h, 8);
        XDC_ASSERT_MSG(n >= 2, "%s: %d workers logged final parameters", name, n);
        for (int k = 1; k < n; k++) XDC_ASSERT_MSG(strcmp(h[k], h[0]) == 0, "%s: %s against %s", name, h[k], h[0]);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) != 0, "overlap changed nothing (%s)", hash[0]);
    XDC_ASSERT_MSG(strcmp(hash[2], hash[0]) != 0 && strcmp(hash[2], hash[1]) != 0,
                   "eager ended on the serial or the delayed model (%s)", hash[2]);
    /* rounds at 10, 20, 30 applied at 13, 23, 33: 9 inner steps in flight on every worker (the eager run's) */
    char logs[700];
    snprintf(logs, sizeof logs, "grep -h 'overlapped outer rounds' %s/logs/*.log", dir);
    char got[4096];
    XDC_ASSERT_EQ(xdc_test_run(logs, got, sizeof got), 0);
    XDC_ASSERT_STR_CONTAINS(got, "overlapped outer rounds: 9 inner steps ran while a round was on the wire");
    const char *bad = e2e_write_run("overlap-long", "diloco", 20, "int8",
                                    "diloco: {inner_steps: 5, overlap_steps: 6}\n");
    snprintf(dir, sizeof dir, "%s/overlap-long", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.overlap_steps 6 needs at most diloco.inner_steps (5)");
    bad = e2e_write_run("overlap-streaming", "streaming", 20, "int8", "diloco: {overlap_steps: 1}\n");
    snprintf(dir, sizeof dir, "%s/overlap-streaming", xdc_test_tmpdir());
    XDC_ASSERT_EQ(e2e_launch(bad, dir, NULL, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "diloco.overlap_steps needs mode diloco");
}

/* A `plan: auto` sync run re-planning every 3 steps on the demo topology's link (0.1 Gbit/s planned), `link` the
 * launch's flags for what carries it, planned with the topology's compute model (a probe's would move the codec
 * with the machine's load); the launcher's output in out, its run folder in dir[600]. */
static void replan_run(const char *link, char *out, size_t cap, char *dir)
{
    e2e_need_corpus();
    char text[1024], cwd[400], path[600], cmd[2048];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/replan.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\nplan: auto\nmicrobatches: 2\nsteps: 15\n"
             "replan_every: 3\nplan_compute: topology\ntimeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, DATA);
    xdc_test_write_file(path, text);
    snprintf(dir, 600, "%s/run", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s %s", xdc_test_bin(), TOPO, path, dir,
             link);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "plan: sync");
    XDC_ASSERT_STR_CONTAINS(out, "final val_loss=");
}

XDC_TEST_T(orch_plan_auto_and_replan_on_a_degraded_link, 300)
{
    /* The emulated link carries 5 % of what the topology promises, so the first re-plan check finds
     * the link far slower than planned and switches to a stronger codec, in every region at the same
     * step (or the run would not finish). */
    char out[65536], dir[600];
    replan_run("--degrade-links 0.05", out, sizeof out, dir);
    XDC_ASSERT_STR_CONTAINS(out, "re-plan: goodput");
}

XDC_TEST_T(orch_plan_auto_keeps_its_plan_on_a_healthy_link, 300)
{
    /* A link at least as fast as planned: loopback, not the emulator, against the plan's 0.1 Gbit/s. Each region
     * waits for the other's compute every step; goodput counts only the time a message's bytes were arriving (from
     * the receive's post, a step's bytes over its wait would read about a hundredth of the plan). Region 0's rank 0
     * checks at steps 3, 6, 9 and 12, each check measures the link over its window, and none may re-plan. Not the
     * emulated link at its planned rate: its relay, a thread of the launcher, paces each message in 1 ms ticks, and
     * on a loaded 2-core machine the hosts stretched 30 KB messages' arrival to 0.019 Gbit/s (load 14: a re-plan),
     * their pace, not the link's, which this run's measure must not depend on. */
    char out[65536], dir[600], cmd[800], checks[4096];
    replan_run("--no-emulate-wan", out, sizeof out, dir);
    XDC_ASSERT_MSG(strstr(out, "re-plan") == NULL, "a healthy link re-planned:\n%s", out);
    snprintf(cmd, sizeof cmd, "grep -h 're-plan check at step' %s/logs/*.log", dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, checks, sizeof checks), 0);
    int n = 0;
    for (const char *at = checks; (at = strstr(at, "re-plan check at step ")) != NULL; at++, n++) {
        int step = 0;
        double gbps = 0, planned = 0, ratio = 0;
        XDC_ASSERT_MSG(sscanf(at, "re-plan check at step %d: slowest link moved %lf Gbit/s of %lf planned (x%lf)",
                              &step, &gbps, &planned, &ratio) == 4,
                       "a check line not as expected:\n%s", checks);
        XDC_ASSERT_MSG(step == 3 * (n + 1) && planned == 0.1 && ratio >= 0.5,
                       "check %d: step %d, %.4f Gbit/s of %.4f planned (x%.2f):\n%s", n, step, gbps, planned, ratio,
                       checks);
    }
    XDC_ASSERT_MSG(n == 4, "%d re-plan checks, expected 4 (steps 3, 6, 9, 12):\n%s", n, checks);
    /* The planner picked the microbatches: the run file's 2 of tiny's 16 sequences per worker make 2 x 16 x 4
     * sequences per step, cut for the P stages per replica it chose (4 / P replicas: 32 P sequences each) into
     * M microbatches of b; one stage has no bubble to shrink, so one microbatch. */
    const char *plan = strstr(out, "plan: sync, ");
    int P = 0, M = 0, b = 0;
    XDC_ASSERT(plan && sscanf(plan, "plan: sync, %d stage", &P) == 1);
    const char *mb = strstr(plan, " microbatches of ");
    XDC_ASSERT(mb != NULL);
    while (mb > plan && mb[-1] >= '0' && mb[-1] <= '9') mb--;
    XDC_ASSERT(sscanf(mb, "%d microbatches of %d sequences", &M, &b) == 2);
    XDC_ASSERT_MSG(M * b == 32 * P, "%d stages per replica, %d microbatches of %d sequences", P, M, b);
    if (P == 1) XDC_ASSERT_EQ(M, 1);
}

XDC_TEST_T(orch_streaming_with_replicas_completes, 240)
{
    e2e_need_corpus();
    /* One stage, two replicas per region: fragment syncs overlap the next inner step's gradient sync on
     * the replicas, each on its own communicator (otherwise replicas would interleave collectives in
     * different orders and the run would fail or hang). */
    char out[65536], v[64];
    const char *run = e2e_write_run_p("stream-dp", "streaming", 40, "int8", 1,
                                      "diloco: {inner_steps: 8}\nstreaming: {fragments: 4}\n");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    int rc = e2e_launch(run, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    e2e_final_field(out, "val_loss=", v, sizeof v);
    XDC_ASSERT_MSG(atof(v) > 0 && atof(v) < 4.5, "val_loss %s", v);
}

XDC_TEST_T(orch_coordinator_runs_agents_started_elsewhere, 240)
{
    e2e_need_corpus();
    /* The multi-host path on one machine: `xdc coordinator`, then one `xdc agent` per node as a launch
     * script would start them; the coordinator ends the run with its summary once everyone is done. */
    const char *run = e2e_write_run("coord", "sync", 8, "int8", NULL);
    char dir[600], log[700], cmd[2048], out[16384];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    pid_t p;
    char *coord = e2e_start_coordinator(run, dir, log, "coord-test", &p);
    /* Both nodes' agents at once, as two launch scripts would; direct WAN (no emulator) on loopback. */
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; "
             "timeout 120 %1$s agent -t %2$s -c %3$s --run-dir %4$s --region us-east --node 0 --coordinator %5$s "
             "--run-id coord-test & p=$!; "
             "timeout 120 %1$s agent -t %2$s -c %3$s --run-dir %4$s --region eu-west --node 0 --coordinator %5$s "
             "--run-id coord-test; "
             "a=$?; wait $p; b=$?; exit $((a + b))",
             xdc_test_bin(), TOPO, run, dir, coord);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "agents exited %d:\n%s", rc, out);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "coordinator exited with status 0x%x", status);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "final val_loss=");
    XDC_ASSERT(strstr(text, "params_xxh64=0 ") == NULL);
    free(text);
    free(coord);
}
