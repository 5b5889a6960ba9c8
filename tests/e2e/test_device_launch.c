/* test_device_launch.c — which device a region's workers run on, end to end through `xdc launch|agent|
 * worker` on this machine (docs/runtime.md "Devices"; the rule itself: tests/launch/test_device_select.c):
 * `--device cpu` changes nothing, CUDA on a node without enough GPUs and the registry's refusal of
 * cpu-strict stop before training with exit 69, a bad word is a usage error (64). Written for a machine
 * without a GPU; where CUDA devices are visible the GPU-less expectations skip (tests/gpu/run.sh runs the
 * CUDA side). */
#include "tests/xdc_test.h"
#include "tests/test_run_util.h"

#include "kernels/xdc_kernels.h"

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

/* `[ENV] xdc launch -t TOPO -c RUN --run-dir TMP/NAME FLAGS`; its exit code, output in out. */
static int launch(const char *env, const char *topo, const char *run, const char *name, const char *flags, char *out,
                  size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s timeout 240 %s launch -t %s -c %s --run-dir %s/%s %s", env ? env : "", xdc_test_bin(),
             topo, run, xdc_test_tmpdir(), name, flags ? flags : "");
    return xdc_test_run(cmd, out, cap);
}

static void params_hash(const char *out, char *hash, size_t cap)
{
    const char *f = strstr(out, "params_xxh64=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    f += strlen("params_xxh64=");
    snprintf(hash, cap, "%.*s", (int)strcspn(f, " \n"), f);
}

/* Nothing trained: no worker logged a step. */
static void assert_no_training(const char *name)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "cat %s/%s/logs/*.log 2>/dev/null | grep -c 'stage .* of replica' || true",
             xdc_test_tmpdir(), name);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 0, "workers started training: %s", out);
}

XDC_TEST_T(orch_device_cpu_flag_matches_the_default, 300)
{
    need_corpus();
    const char *run = test_write_tiny_run("cpu", 6);
    static char out[65536];
    char h1[64], h2[64];
    int rc = launch("env -u XDC_DEVICE", TOPO, run, "default", NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "default launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "devices: us-east cpu (shared-memory intra), eu-west cpu (shared-memory intra)");
    params_hash(out, h1, sizeof h1);
    rc = launch(NULL, TOPO, run, "flag", "--device cpu", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "--device cpu exited %d:\n%s", rc, out);
    params_hash(out, h2, sizeof h2);
    XDC_ASSERT_MSG(strcmp(h1, h2) == 0, "--device cpu changed the parameters: %s vs %s", h1, h2);
    /* Every worker names its device once, at start. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cat %s/flag/logs/*.log | grep -c 'device cpu (shared-memory intra) (from --device)'",
             xdc_test_tmpdir());
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 4, "expected 4 worker device lines, got %s", out);
}

XDC_TEST_T(orch_device_cuda_without_gpus_stops_before_training, 120)
{
    need_corpus();
    if (xdc_kern_cuda_device_count() >= 2) xdc_test_skip("CUDA devices visible here (tests/gpu/run.sh runs CUDA)");
    static char out[65536];
    char want[64];
    snprintf(want, sizeof want, "found %d visible CUDA devices", xdc_kern_cuda_device_count());
    const char *run = test_write_tiny_run("cuda", 4);
    int rc = launch(NULL, TOPO, run, "cuda", "--device cuda", out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "--device cuda exited %d, expected 69:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "run failed: node ");
    XDC_ASSERT_STR_CONTAINS(out, "device cuda expected 2 GPUs");
    XDC_ASSERT_STR_CONTAINS(out, want);
    assert_no_training("cuda");

    /* The same through the environment. */
    rc = launch("XDC_DEVICE=cuda", TOPO, run, "cuda-env", NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "XDC_DEVICE=cuda exited %d, expected 69:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "device cuda expected 2 GPUs");

    /* A topology that says 2 GPUs per node, on this machine. */
    rc = launch("env -u XDC_DEVICE", test_write_gpu_topology(2), run, "gpus2", NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "gpus_per_node: 2 exited %d, expected 69:\n%s", rc, out);
    /* Both regions' agents check at once; the run names whichever failed first. */
    XDC_ASSERT_MSG(strstr(out, "node us-east/east-node1: device cuda") ||
                       strstr(out, "node eu-west/west-node1: device cuda"),
                   "no node named in:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "expected 2 GPUs (gpus_per_node: 2 in the topology)");
    XDC_ASSERT_STR_CONTAINS(out, want);
    assert_no_training("gpus2");
    /* ... which --device cpu runs on the CPU. */
    rc = launch(NULL, test_write_gpu_topology(2), run, "gpus2-cpu", "--device cpu", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "gpus_per_node: 2 with --device cpu exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "devices: us-east cpu (shared-memory intra), eu-west cpu (shared-memory intra)");
}

XDC_TEST_T(orch_device_worker_checks_its_node_too, 60)
{
    /* A worker started by hand (no agent in front) makes the same check before any set-up. */
    if (xdc_kern_cuda_device_count() >= 2) xdc_test_skip("CUDA devices visible here (tests/gpu/run.sh runs CUDA)");
    char cmd[2048], out[8192], src[256];
    snprintf(cmd, sizeof cmd,
             "env -u XDC_DEVICE RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
             "MASTER_PORT=1 XDC_RUN_ID=r XDC_REGION=eu-west XDC_REGION_INDEX=1 XDC_NUM_REGIONS=2 XDC_GLOBAL_RANK=3 "
             "XDC_GLOBAL_WORLD_SIZE=4 XDC_COORDINATOR=127.0.0.1:1 XDC_NODE_RANK=0 XDC_NUM_NODES=1 XDC_HOST=west-node1 "
             "timeout 60 %s worker --topology %s --config %s --run-dir %s",
             xdc_test_bin(), test_write_gpu_topology(2), xdc_test_src("examples/train/demo.yaml", src, sizeof src),
             xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 69, "worker exited %d, expected 69:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "node eu-west/west-node1: device cuda expected 2 GPUs");
}

XDC_TEST_T(orch_device_bad_word_is_a_usage_error, 60)
{
    char cmd[2048], out[4096];
    const char *bin = xdc_test_bin(), *run = test_write_tiny_run("bad", 2);
    snprintf(cmd, sizeof cmd, "%s launch -t %s -c %s --run-dir %s/bad --device bogus", bin, TOPO, run,
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--device 'bogus' is not a device");
    snprintf(cmd, sizeof cmd, "XDC_DEVICE=bogus %s launch -t %s -c %s --run-dir %s/bad2", bin, TOPO, run,
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "XDC_DEVICE='bogus' is not a device");
    snprintf(cmd, sizeof cmd, "XDC_DEVICE=bogus %s launch -t %s -c %s --run-dir %s/bad3 --device", bin, TOPO, run,
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64); /* --device without its word */
    snprintf(cmd, sizeof cmd, "%s agent -t %s -c %s -d %s --device gpu", bin, TOPO, run, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "xdc agent: --device 'gpu' is not a device");
    snprintf(cmd, sizeof cmd, "XDC_DEVICE=Cuda %s worker -t %s -c %s -d %s", bin, TOPO, run, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "xdc worker: XDC_DEVICE='Cuda' is not a device");
}

XDC_TEST_T(orch_device_cpu_strict_follows_the_registry, 300)
{
    need_corpus();
    const xdc_kern_backend *be = NULL;
    xdc_diag why = {{0}};
    xdc_err_t reg = xdc_kern_backend_get(XDC_BACKEND_CPU_STRICT, &be, &why);
    static char out[65536];
    const char *run = test_write_tiny_run("strict", 4);
    int rc = launch(NULL, TOPO, run, "strict", "--device cpu-strict", out, sizeof out);
    if (reg == XDC_OK) {
        /* The registry gives the strict device: the run trains on it, to the cpu run's parameters. */
        XDC_ASSERT_MSG(rc == 0, "--device cpu-strict exited %d:\n%s", rc, out);
        XDC_ASSERT_STR_CONTAINS(out, "cpu-strict (shared-memory intra)");
        char strict[64], cpu[64];
        params_hash(out, strict, sizeof strict);
        rc = launch(NULL, TOPO, run, "strict-cpu", "--device cpu", out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "--device cpu exited %d:\n%s", rc, out);
        params_hash(out, cpu, sizeof cpu);
        XDC_ASSERT_MSG(strcmp(strict, cpu) == 0, "cpu-strict ends at params_xxh64=%s, cpu at %s", strict, cpu);
    } else {
        /* It refuses: exit 69 before training, its message passed through with the device named. */
        XDC_ASSERT_MSG(rc == 69, "--device cpu-strict exited %d, expected 69 (registry: %s):\n%s", rc, why.msg, out);
        XDC_ASSERT_STR_CONTAINS(out, "device cpu-strict");
        XDC_ASSERT_STR_CONTAINS(out, why.msg);
        assert_no_training("strict");
    }
}
