/* test_report.c — the step logs a launch writes (orchestrator/obs/orch_steplog.h) and `xdc report`:
 * a short 2-region run leaves one row per step in every worker's log with WAN bytes that only grow,
 * report draws three valid PNGs from it, and a missing or malformed run folder is named with exit 66/65. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "orchestrator/obs/orch_steplog.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"

static void assert_png(const char *path)
{
    static const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t len = 0;
    char *b = xdc_test_read_file(path, &len);
    XDC_ASSERT_MSG(b != NULL, "no %s", path);
    XDC_ASSERT_MSG(len > 100 && memcmp(b, magic, 8) == 0, "%s is not a PNG (%zu bytes)", path, len);
    xdc_free(b);
}

XDC_TEST_T(report_draws_pngs_from_a_launch, 240)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
    char out[16384], cmd[2400], cwd[400], run[600], dir[600], path[900], text[1024];
    if (xdc_test_run("command -v gnuplot", out, sizeof out) != 0)
        xdc_test_skip("gnuplot not installed (Debian package gnuplot-nox; `make deps`)");
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(run, sizeof run, "%s/run.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\npipeline_stages: 2\nmicrobatches: 2\n"
             "steps: 6\neval_interval: 3\ncodec: int8\nbucket_mb: 0.05\nthreads: 1\n"
             "timeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, DATA);
    xdc_test_write_file(run, text);
    snprintf(dir, sizeof dir, "%s/run-a", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 200 %s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s",
             xdc_test_bin(), run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "compute_util=");

    /* Every worker: six rows, validation at steps 3 and 6, WAN bytes never shrinking and not all zero. */
    const char *logs[4] = {"us-east-0", "us-east-1", "eu-west-0", "eu-west-1"};
    for (int w = 0; w < 4; w++) {
        snprintf(path, sizeof path, "%s/steps/%s.tsv", dir, logs[w]);
        orch_steplog_row *rows = NULL;
        size_t n = 0;
        xdc_diag d = {{0}};
        XDC_ASSERT_OK(orch_steplog_read(path, &rows, &n, &d));
        XDC_ASSERT_EQ(n, 6);
        for (size_t i = 0; i < n; i++) {
            XDC_ASSERT_EQ(rows[i].step, (int64_t)i + 1);
            XDC_ASSERT_MSG(isnan(rows[i].val_loss) == (i != 2 && i != 5), "%s row %zu: val_loss %g", path, i,
                           rows[i].val_loss);
            XDC_ASSERT(rows[i].compute_s > 0 && rows[i].step_s >= rows[i].compute_s);
            if (i) XDC_ASSERT(rows[i].wan_tx_bytes >= rows[i - 1].wan_tx_bytes);
        }
        XDC_ASSERT(rows[n - 1].wan_tx_bytes > 0);
        xdc_free(rows);
    }

    /* Two runs (the same one twice under another name) into one folder of plots. */
    char dir2[700], plots[700];
    snprintf(dir2, sizeof dir2, "%s/run-b", xdc_test_tmpdir());
    snprintf(plots, sizeof plots, "%s/plots", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "cp -r %s %s && mkdir -p %s", dir, dir2, plots);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s report -o %s %s %s", xdc_test_bin(), plots, dir, dir2);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s -> %d: %s", cmd, rc, out);
    const char *pngs[3] = {"loss_vs_time.png", "loss_vs_bytes.png", "step_time.png"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", plots, pngs[i]);
        assert_png(path);
    }

    /* Bad input: a missing folder, one without step logs (66), a malformed row (65), no run at all (64). */
    snprintf(cmd, sizeof cmd, "%s report -o %s %s/missing", xdc_test_bin(), plots, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 66);
    XDC_ASSERT_STR_CONTAINS(out, "missing");
    snprintf(cmd, sizeof cmd, "%s report -o %s %s", xdc_test_bin(), plots, plots);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 66);
    XDC_ASSERT_STR_CONTAINS(out, "no step logs");
    snprintf(path, sizeof path, "%s/steps/eu-west-1.tsv", dir2);
    xdc_test_write_file(path, ORCH_STEPLOG_HEADER "\n1\t0.5\t0.5\t0.4\t0\t0\t10\t-\n2\t1.0\tbad\n");
    snprintf(cmd, sizeof cmd, "%s report -o %s %s", xdc_test_bin(), plots, dir2);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 65);
    XDC_ASSERT_STR_CONTAINS(out, "eu-west-1.tsv:3:");
    snprintf(cmd, sizeof cmd, "%s report -o %s", xdc_test_bin(), plots);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
}
