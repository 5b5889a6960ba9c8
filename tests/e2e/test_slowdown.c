/* test_slowdown.c — the run file's `diloco.slowdown` in a mode other than DiLoCo: sync mode over 2 emulated regions
 * with eu-west 3x slower loads, runs and ends on the parameters of the same run at full speed (the slowdown is
 * a sleep in each training pass, never a change to what is computed). How much longer eu-west's passes took is
 * printed, not asserted: it is a timing. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A region's compute seconds over the run, from its first worker's step log in `dir` (column 4). */
static double compute_s(const char *dir, const char *region)
{
    char cmd[1024], out[128];
    snprintf(cmd, sizeof cmd, "awk 'FNR > 1 { s += $4 } END { printf \"%%.4f\", s }' %s/steps/%s-0.tsv", dir, region);
    xdc_test_run(cmd, out, sizeof out);
    return atof(out);
}

XDC_TEST_T(slowdown_in_sync_mode_changes_time_not_parameters, 120)
{
    e2e_need_corpus();
    static char out[65536];
    char slow_hash[64], plain_hash[64], dir[600];
    const char *slow = e2e_write_run_p("sync-slow", "sync", 4, "int8", 1, "diloco: {slowdown: [1, 3]}\n");
    e2e_launch_hash(slow, "sync-slow", NULL, out, sizeof out, dir, sizeof dir, slow_hash);
    double east = compute_s(dir, "us-east"), west = compute_s(dir, "eu-west");
    const char *plain = e2e_write_run_p("sync-plain", "sync", 4, "int8", 1, "");
    e2e_launch_hash(plain, "sync-plain", NULL, out, sizeof out, dir, sizeof dir, plain_hash);
    XDC_ASSERT_MSG(strcmp(slow_hash, plain_hash) == 0, "slowed run ends on %s, the full-speed one on %s", slow_hash,
                   plain_hash);
    printf("sync mode, eu-west slowed x3: compute us-east %.3f s, eu-west %.3f s over 4 steps\n", east, west);
}
