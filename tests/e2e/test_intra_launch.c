/* test_intra_launch.c — the demo topology launched with the CPU intra backend in NCCL-semantics mode
 * (XDC_INTRA_NCCL_SEMANTICS=1, inherited by every worker): the 1F1B loop's transfers, grouped per
 * schedule step, must run where each communicator's operations run in start order as on NCCL, and give
 * the same parameters bit for bit as the CPU backend's own semantics. */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"

static void launch_hash(const char *run, const char *name, const char *env, char *out, size_t cap, char hash[64])
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s timeout 240 %s launch -t %s -c %s --run-dir %s/%s", env, xdc_test_bin(), TOPO, run,
             xdc_test_tmpdir(), name);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch %s exited %d:\n%s", name, rc, out);
    const char *f = strstr(out, "final val_loss=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    const char *k = strstr(f, "params_xxh64=");
    XDC_ASSERT_MSG(k != NULL, "no params_xxh64 in the final line");
    k += strlen("params_xxh64=");
    size_t n = strcspn(k, " \n");
    snprintf(hash, 64, "%.*s", (int)(n < 63 ? n : 63), k);
}

XDC_TEST_T(intra_cpu_nccl_semantics_demo_launch_matches_cpu_semantics, 300)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
    char cwd[400], run[512], text[1024];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    /* 2 regions x 2 stages in a region, 4 microbatches: warm-up, steady 1F1B and cool-down all send and
     * receive over the intra communicator; a short operation deadline so a deadlock fails fast */
    snprintf(run, sizeof run, "%s/run.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\npipeline_stages: 2\nmicrobatches: 4\n"
             "steps: 6\ncodec: none\nbucket_mb: 0.05\nthreads: 1\ntimeouts: {rendezvous: 30s, operation: 10s}\n",
             cwd, DATA);
    xdc_test_write_file(run, text);
    static char out[65536];
    char nccl[64], cpu[64];
    launch_hash(run, "nccl-semantics", "XDC_INTRA_NCCL_SEMANTICS=1", out, sizeof out, nccl);
    launch_hash(run, "cpu-semantics", "XDC_INTRA_NCCL_SEMANTICS=0", out, sizeof out, cpu);
    XDC_ASSERT_MSG(strcmp(nccl, cpu) == 0, "params_xxh64 %s under NCCL semantics, %s without", nccl, cpu);
}
