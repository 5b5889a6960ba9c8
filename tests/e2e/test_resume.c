/* test_resume.c — exact resume and checkpoint faults, end to end with `xdc launch` on the demo topology
 * (2 emulated regions x 2 workers, the tiny model, a few steps). A run of N steps with checkpoint_every K
 * leaves its newest complete checkpoint at step K (none is taken at the last step); `--resume` into the
 * same folder then trains steps K+1..N again from it and must end on the same parameters, bit for bit:
 * sync with int8 and top-k (error-feedback residuals), DiLoCo mid outer round and streaming with a
 * fragment due (outer state), and a `plan: auto` run that re-planned its codec. A checkpoint of another
 * layout is refused (exit 78, both values named); a checkpoint that cannot be written stops the run with
 * its path and errno, or with `checkpoint_failure: continue` is skipped, and the previous one stays. */
#include "tests/xdc_test.h"

#include "model/xdc_ckpt.h"
#include "orchestrator/launch/orch_manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"

static void need_corpus(void)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
}

/* TMP/<name>.yaml: the tiny model, 2 pipeline stages, 2 microbatches, `steps`, checkpoint_every `every`,
 * `body` for the mode and codec lines. */
static const char *write_run(const char *name, int steps, int every, const char *body)
{
    static char path[600];
    char cwd[400], text[2048];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmicrobatches: 2\nsteps: %d\ncheckpoint_every: %d\n"
             "threads: 1\nbucket_mb: 0.05\ntimeouts: {rendezvous: 30s, operation: 30s}\n%s",
             cwd, DATA, steps, every, body);
    xdc_test_write_file(path, text);
    return path;
}

/* `xdc launch` into TMP/<dir> with extra flags; `prefix` (or NULL) opens a `sh -c '` quote that the
 * command closes. Its exit code. */
static int launch(const char *prefix, const char *run, const char *dir, const char *flags, char *out, size_t cap)
{
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "%stimeout 120 %s launch -t %s -c %s --run-dir %s/%s %s%s", prefix ? prefix : "",
             xdc_test_bin(), TOPO, run, xdc_test_tmpdir(), dir, flags, prefix ? "'" : "");
    return xdc_test_run(cmd, out, cap);
}

/* The params_xxh64 of a finished run's final line into hash[64]. */
static void final_hash(const char *out, char hash[64])
{
    const char *f = strstr(out, "final val_loss=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    const char *k = strstr(f, "params_xxh64=");
    XDC_ASSERT(k != NULL);
    k += strlen("params_xxh64=");
    snprintf(hash, 64, "%.*s", (int)strcspn(k, " \n"), k);
}

static int exists(const char *dir, const char *rel)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/%s", xdc_test_tmpdir(), dir, rel);
    return access(path, F_OK) == 0;
}

/* How many of the run's worker logs say `text`. */
static int logs_saying(const char *dir, const char *text)
{
    char cmd[1400], out[256];
    snprintf(cmd, sizeof cmd, "grep -l -F '%s' %s/%s/logs/*.log | wc -l", text, xdc_test_tmpdir(), dir);
    xdc_test_run(cmd, out, sizeof out);
    return atoi(out);
}

/* Run `body` for 8 steps with a checkpoint at step 5, then --resume from it: both end on one hash. */
static void resume_matches(const char *body, const char *flags)
{
    need_corpus();
    const char *run = write_run("run", 8, 5, body);
    static char out[65536];
    char whole[64], resumed[64];
    int rc = launch(NULL, run, "r", flags, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    final_hash(out, whole);
    XDC_ASSERT_MSG(exists("r", "ckpt/step-00000005/MANIFEST"), "no complete checkpoint of step 5");
    char resume_flags[256];
    snprintf(resume_flags, sizeof resume_flags, "%s --resume", flags);
    rc = launch(NULL, run, "r", resume_flags, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "resume exited %d:\n%s", rc, out);
    final_hash(out, resumed);
    XDC_ASSERT_MSG(logs_saying("r", "resumed from the checkpoint of step 5") == 4,
                   "not every worker resumed at step 5");
    XDC_ASSERT_MSG(strcmp(whole, resumed) == 0, "resumed run ends at %s, uninterrupted at %s", resumed, whole);
}

XDC_TEST_T(resume_sync_int8_matches_uninterrupted, 240)
{
    resume_matches("mode: sync\ncodec: int8\n", "");
    /* The residuals travel: int8 keeps one per bucket shard, so the file holds more than its header. */
    char path[1200];
    snprintf(path, sizeof path, "%s/r/ckpt/step-00000005/us-east-0/residuals.ckpt", xdc_test_tmpdir());
    size_t len = 0;
    free(xdc_test_read_file(path, &len));
    XDC_ASSERT_MSG(len > 128, "%s holds %zu bytes", path, len);
}

XDC_TEST_T(resume_sync_topk_matches_uninterrupted, 240) { resume_matches("mode: sync\ncodec: topk:0.05\n", ""); }

XDC_TEST_T(resume_diloco_mid_outer_round_matches_uninterrupted, 240)
{
    /* H = 3: step 5 lies inside an outer round, where local and global parameters differ. */
    resume_matches("mode: diloco\ncodec: int8\ndiloco: {inner_steps: 3}\n", "");
}

XDC_TEST_T(resume_diloco_keep_unsent_matches_uninterrupted, 240)
{
    /* keep_unsent (one replica per stage: 2 workers, 2 stages per region): after the round of step 3 each
     * region's parameters hold its unsent part (global - residual)
     * and the codec's residual is 0; the checkpoint of step 5 must carry both as they are. */
    resume_matches("mode: diloco\npipeline_stages: 2\ncodec: sparse:0.05:2\ndiloco: {inner_steps: 3, keep_unsent: "
                   "true, final_codec: int8}\n",
                   "");
}

XDC_TEST_T(resume_streaming_matches_uninterrupted, 240)
{
    /* F = H = 3: a fragment is due after every step, the one of step 5 included. */
    resume_matches("mode: streaming\ncodec: int8\ndiloco: {inner_steps: 3}\nstreaming: {fragments: 3}\n", "");
}

XDC_TEST_T(resume_after_a_replan_matches_uninterrupted, 240)
{
    /* plan: auto on a link at 5 % of its bandwidth: the check at step 4 re-plans the codec (int8 -> a
     * stronger one); the checkpoint of step 5 must bring it back, residuals and all. The only check is
     * before the checkpoint: a later one would decide again from this run's measured goodput, which on a
     * loaded machine can differ between the two runs; the topology's compute model, for the same reason. */
    resume_matches("mode: sync\nplan: auto\nreplan_every: 4\nplan_compute: topology\n", "--degrade-links 0.05");
    XDC_ASSERT_MSG(logs_saying("r", "re-planned") == 4, "no worker restored a re-planned codec on resume");
}

XDC_TEST_T(resume_refuses_a_checkpoint_of_another_layout, 240)
{
    need_corpus();
    static char out[65536];
    int rc = launch(NULL, write_run("sync", 6, 4, "mode: sync\ncodec: int8\n"), "r", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    /* Each misfit is refused before anything starts, with the MANIFEST, the field and both values named. */
    rc = launch(NULL, write_run("diloco", 6, 4, "mode: diloco\ncodec: int8\n"), "r", "--resume", out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "another mode: exit %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "step-00000004/MANIFEST: the checkpoint was taken with mode sync, this run has mode "
                                 "diloco");
    rc = launch(NULL, write_run("topk", 6, 4, "mode: sync\ncodec: topk:0.05\n"), "r", "--resume", out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "another codec: exit %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "taken with codec int8:128, this run has codec topk:0.05");
    /* More workers: the demo topology with 4 workers per node. */
    char topo[600], cmd[3000];
    snprintf(topo, sizeof topo, "%s/wide.yaml", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "sed 's/workers_per_node: 2/workers_per_node: 4/' %s > %s", TOPO, topo);
    XDC_ASSERT(xdc_test_run(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "timeout 60 %s launch -t %s -c %s/sync.yaml --run-dir %s/r --resume", xdc_test_bin(),
             topo, xdc_test_tmpdir(), xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "more workers: exit %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "taken with workers 4, this run has workers 8");
    /* The same layout over another link: the topology hash differs. */
    snprintf(cmd, sizeof cmd, "sed 's/rtt_ms: 40/rtt_ms: 41/' %s > %s", TOPO, topo);
    XDC_ASSERT(xdc_test_run(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "timeout 60 %s launch -t %s -c %s/sync.yaml --run-dir %s/r --resume", xdc_test_bin(),
             topo, xdc_test_tmpdir(), xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "another topology: exit %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "taken with topology hash");
}

/* A shell prefix that runs the launch in a mount namespace of its own with a tmpfs (`opts`) mounted over
 * TMP/<dir>/<sub>, which is created first; skips where mount namespaces are not available. */
static void with_mount(const char *dir, const char *sub, const char *opts, char *prefix, size_t cap)
{
    char cmd[1400], out[256];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/%s/%s && unshare -m true 2>/dev/null", xdc_test_tmpdir(), dir, sub);
    if (xdc_test_run(cmd, out, sizeof out) != 0) xdc_test_skip("no mount namespaces here (unshare -m needs root)");
    snprintf(prefix, cap, "unshare -m sh -c 'mount -t tmpfs -o %s tmpfs %s/%s/%s && exec ", opts, xdc_test_tmpdir(),
             dir, sub);
}

XDC_TEST_T(checkpoint_disk_full_stops_and_keeps_the_previous_one, 240)
{
    need_corpus();
    const char *run = write_run("full", 10, 4, "mode: sync\ncodec: int8\n");
    static char out[65536];
    char prefix[1400], whole[64], resumed[64];
    int rc = launch(NULL, run, "whole", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    final_hash(out, whole);
    /* Step 8's folder is a 64 KiB file system: the stage files do not fit (ENOSPC). */
    with_mount("r", "ckpt/step-00000008", "size=64k", prefix, sizeof prefix);
    rc = launch(prefix, run, "r", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 74, "disk full: exit %d, expected 74:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "checkpoint of step 8: ");
    XDC_ASSERT_STR_CONTAINS(out, "/r/ckpt/step-00000008/");
    XDC_ASSERT_STR_CONTAINS(out, "No space left on device");
    XDC_ASSERT(exists("r", "ckpt/step-00000004/MANIFEST") && !exists("r", "ckpt/step-00000008/MANIFEST"));
    /* The previous checkpoint is whole: a resume from it ends where the uninterrupted run does. */
    rc = launch(NULL, run, "r", "--resume", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "resume exited %d:\n%s", rc, out);
    final_hash(out, resumed);
    XDC_ASSERT_MSG(logs_saying("r", "resumed from the checkpoint of step 4") == 4, "the resume did not start at 4");
    XDC_ASSERT_MSG(strcmp(whole, resumed) == 0, "resumed run ends at %s, uninterrupted at %s", resumed, whole);
}

XDC_TEST_T(checkpoint_failure_continue_goes_on_without_it, 240)
{
    need_corpus();
    const char *run = write_run("cont", 10, 4, "mode: sync\ncodec: int8\ncheckpoint_failure: continue\n");
    static char out[65536];
    char prefix[1400];
    /* One worker's folder of step 8 is read-only (EROFS); the others write theirs. */
    with_mount("r", "ckpt/step-00000008/eu-west-1", "ro", prefix, sizeof prefix);
    int rc = launch(prefix, run, "r", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "final val_loss=");
    XDC_ASSERT_MSG(logs_saying("r", "checkpoint of step 8 not written: ") == 1, "no warning from the failed worker");
    XDC_ASSERT_MSG(logs_saying("r", "step-00000008/eu-west-1/stage-0.ckpt") == 1 &&
                       logs_saying("r", "Read-only file system") == 1,
                   "the warning does not name the path and errno");
    XDC_ASSERT_MSG(logs_saying("r", "checkpoint of step 8 incomplete: eu-west/1 did not write its files") == 1,
                   "rank 0 did not name the worker that failed");
    /* No MANIFEST for the torn step (the other workers' files are there); the one before stays. */
    XDC_ASSERT(exists("r", "ckpt/step-00000004/MANIFEST") && !exists("r", "ckpt/step-00000008/MANIFEST"));
    XDC_ASSERT(exists("r", "ckpt/step-00000008/us-east-0/stage-0.ckpt"));
}

/* The MANIFEST round-trips, a misfit is named with both values, and a file that does not parse is
 * refused naming the field. */
XDC_TEST(manifest_round_trips_and_names_a_misfit)
{
    char run[600], path[800], cmd[1400], out[256];
    snprintf(run, sizeof run, "%s/run", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s/ckpt/step-00000007", run);
    XDC_ASSERT(xdc_test_run(cmd, out, sizeof out) == 0);
    orch_manifest m = {.step = 7,
                       .workers = 4,
                       .mode = "diloco",
                       .codec = "int8:128",
                       .topology = "0123456789abcdef",
                       .run = "r1",
                       .wan_codec = "topk:0.01",
                       .period = 10},
                  got;
    XDC_ASSERT(orch_manifest_newest(run) == -1);
    XDC_ASSERT_OK(orch_manifest_write(run, &m, NULL));
    XDC_ASSERT(orch_manifest_newest(run) == 7);
    XDC_ASSERT_OK(orch_manifest_read(run, 7, &got, NULL));
    XDC_ASSERT(got.step == 7 && got.workers == 4 && got.period == 10);
    XDC_ASSERT(strcmp(got.wan_codec, "topk:0.01") == 0 && strcmp(got.topology, m.topology) == 0);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_manifest_check(run, &got, &m, &d));
    orch_manifest want = m;
    want.workers = 6;
    XDC_ASSERT_ERR(orch_manifest_check(run, &got, &want, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "step-00000007/MANIFEST: the checkpoint was taken with workers 4, this run has "
                                   "workers 6");
    snprintf(path, sizeof path, "%s/ckpt/step-00000007/MANIFEST", run);
    xdc_test_write_file(path, "{\"step\": 7, \"workers\": \"four\"}");
    XDC_ASSERT_ERR(orch_manifest_read(run, 7, &got, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "field workers is missing or out of range");
}

/* A state file (residuals, outer state) round-trips; another size is a config misfit, a flipped byte is
 * corrupt, each with the file named. */
XDC_TEST(ckpt_state_file_round_trips_and_refuses_misfits)
{
    const char *dir = xdc_test_tmpdir();
    float v[1000], back[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i * 0.25f - 3.0f;
    XDC_ASSERT_OK(xdc_ckpt_blob_save(dir, "state.ckpt", v, sizeof v, NULL));
    XDC_ASSERT_OK(xdc_ckpt_blob_load(dir, "state.ckpt", back, sizeof back, NULL));
    XDC_ASSERT(memcmp(v, back, sizeof v) == 0);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_ckpt_blob_load(dir, "state.ckpt", back, 999 * sizeof(float), &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "state.ckpt: holds 4000 bytes; this run needs 3996");
    char path[700];
    snprintf(path, sizeof path, "%s/state.ckpt", dir);
    size_t len = 0;
    char *bytes = xdc_test_read_file(path, &len);
    XDC_ASSERT(bytes && len > 130);
    bytes[len - 1] ^= 0x40;
    FILE *f = fopen(path, "wb");
    XDC_ASSERT(f && fwrite(bytes, 1, len, f) == len);
    fclose(f);
    free(bytes);
    XDC_ASSERT_ERR(xdc_ckpt_blob_load(dir, "state.ckpt", back, sizeof back, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "state.ckpt: checksum mismatch");
    /* An empty state (an exact codec keeps no residual) is a file of its own too. */
    XDC_ASSERT_OK(xdc_ckpt_blob_save(dir, "empty.ckpt", v, 0, NULL));
    XDC_ASSERT_OK(xdc_ckpt_blob_load(dir, "empty.ckpt", back, 0, NULL));
}
