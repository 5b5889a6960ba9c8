/* test_plan_probe_launch.c — `plan: auto` under `xdc launch` plans with a compute probe taken on this machine
 * (docs/planner.md, "Compute speed"): the launch says what it measured and that the plan was calibrated with it,
 * records the figure in the run folder, and a resumed launch plans with that figure again instead of measuring.
 * What is asserted is the lines and the figure, never a time. */
#include "tests/e2e/test_orch_util.h"
#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

XDC_TEST_T(plan_auto_launch_calibrates_with_its_probe, 120)
{
    e2e_need_corpus();
    static char out[65536];
    char cwd[512], run[600], dir[600], path[700], figure[128] = "", want[200];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(run, sizeof run, "%s/probe.yaml", xdc_test_tmpdir());
    FILE *f = fopen(run, "w");
    XDC_ASSERT(f != NULL);
    fprintf(f, "model: %s/%s\ndata: %s\nplan: auto\nmicrobatches: 2\nsteps: 2\nthreads: 1\n", cwd, TINY, DATA);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    int rc = e2e_launch(run, dir, NULL, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(
        out, "xdc launch: compute probe: a training step of 16x64 tokens (forward, backward, AdamW) in ");
    XDC_ASSERT_STR_CONTAINS(out, "compute calibrated on this machine: ");
    XDC_ASSERT_STR_CONTAINS(out, "4 workers share ");
    /* The figure every process planned with, as the launcher set it, is the run folder's. */
    snprintf(path, sizeof path, "%s/plan-probe", dir);
    f = fopen(path, "r");
    XDC_ASSERT_MSG(f != NULL, "no %s", path);
    XDC_ASSERT(fgets(figure, sizeof figure, f) != NULL);
    fclose(f);
    figure[strcspn(figure, "\n")] = '\0';
    snprintf(want, sizeof want, "(XDC_PLAN_PROBE=\"%s\")", figure);
    XDC_ASSERT_STR_CONTAINS(out, want);
    /* Resumed: the same figure, read back, not measured again. */
    rc = e2e_launch(run, dir, "--resume", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "resume exited %d:\n%s", rc, out);
    snprintf(want, sizeof want, "compute probe: the run's own figure from %s (%s)", path, figure);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_MSG(strstr(out, "compute probe: a training step") == NULL, "a resumed run measured again:\n%s", out);
}
