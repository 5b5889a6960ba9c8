/* test_nobody_waits.c — DiLoCo's "nobody waits" under `xdc launch` (2 emulated regions, eu-west made 3x slower
 * by diloco.slowdown): the fast region runs the whole period of inner steps, the slow one what the budget buys
 * (the decider's counts) spread over the round, both end every round on one model, and a resume from a
 * checkpoint taken while the slow region was half way through its count ends on the uninterrupted run's
 * parameters, as does the run on cpu-strict. The waits at the rounds'
 * boundaries (in inner steps) are printed beside those of the same run where everybody waits, not asserted:
 * they are timings. The same with the round overlapped with the next inner step. And `plan: auto` on the slowed
 * pair chooses nobody waits, which the run takes. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include "scheduler/xdc_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The inner steps region `region` ran and its wait per round at the boundaries (in its inner steps), from its
 * first stage's log of the run in `dir`. */
static void counters(const char *dir, const char *region, long long *steps, double *wait)
{
    char cmd[1024], out[512];
    snprintf(cmd, sizeof cmd, "cat %s/logs/*.log | grep -m1 'region %s ran '", dir, region);
    xdc_test_run(cmd, out, sizeof out);
    const char *p = strstr(out, " ran "), *q = strstr(out, "waited ");
    XDC_ASSERT_MSG(p && q, "%s: no counters of region %s in its logs: %s", dir, region, out);
    *steps = atoll(p + 5);
    *wait = atof(q + 7);
}

/* Launch `run` into TMP/<name> (its folder into dir[600], its params hash into hash): both regions end on that
 * one model, us-east ran want_fast inner steps and eu-west want_slow; their waits per round into *fast_wait and
 * *slow_wait. */
static void launch_counted(const char *run, const char *name, long long want_fast, long long want_slow, char *out,
                           size_t cap, char *dir, char *hash, double *fast_wait, double *slow_wait)
{
    char h[8][17];
    e2e_launch_hash(run, name, NULL, out, cap, dir, 600, hash);
    int n = e2e_final_hashes(dir, h, 8);
    XDC_ASSERT_MSG(n == 2 && strcmp(h[0], h[1]) == 0 && strncmp(h[0], hash, 16) == 0,
                   "the regions end on %s and %s, the result is %s", h[0], n > 1 ? h[1] : "-", hash);
    long long fast, slow;
    counters(dir, "us-east", &fast, fast_wait);
    counters(dir, "eu-west", &slow, slow_wait);
    XDC_ASSERT_MSG(fast == want_fast && slow == want_slow,
                   "inner steps: us-east %lld (want %lld), eu-west %lld (want %lld)", fast, want_fast, slow, want_slow);
}

/* `run` resumed from its folder `dir` ends on `hash`, its 4 workers resumed from the checkpoint of step `step`. */
static void resumes_from(const char *run, const char *dir, const char *hash, int step, char *out, size_t cap)
{
    e2e_resume_ends_on(run, dir, hash, out, cap);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "grep -l 'resumed from the checkpoint of step %d' %s/logs/*.log | wc -l", step, dir);
    xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(atoi(out) == 4, "expected 4 workers resumed from step %d, got %s", step, out);
}

XDC_TEST_T(diloco_nobody_waits_slow_region_holds_no_one, 240)
{
    e2e_need_corpus();
    static char out[65536];
    const char *pace = "diloco: {inner_steps: 6, nobody_waits: true, slowdown: [1, 3]}\ncheckpoint_every: 7\n";
    const char *run = e2e_write_run("nobody-waits", "diloco", 12, "int8", pace);
    char hash[64], dir[600];
    /* 2 rounds of 6 steps: us-east runs all 6 of each, eu-west (3x slower) the 2 that its budget buys. */
    long long fast = 12, slow = 4;
    double fast_wait, slow_wait;
    launch_counted(run, "nobody-waits", fast, slow, out, sizeof out, dir, hash, &fast_wait, &slow_wait);
    /* eu-west's 2 steps of each round are spread over it (the k-th at the round's step k·6/2), not its first 2: it
     * is as far into the round, in wall time, as us-east at every step, where an overlapped round is applied. */
    char cmd[1024], at[128];
    snprintf(cmd, sizeof cmd, "awk 'NR > 1 && $4 > 0 { printf \"%%s \", $1 }' %s/steps/eu-west-0.tsv", dir);
    xdc_test_run(cmd, at, sizeof at);
    XDC_ASSERT_MSG(strcmp(at, "1 4 7 10 ") == 0, "eu-west computed at steps '%s', want '1 4 7 10 '", at);
    char util[32];
    e2e_final_field(out, "compute_util_min=", util, sizeof util);
    /* Resumed from the checkpoint of step 7 (eu-west had run 1 of its 2 steps of that round): the same model. */
    resumes_from(run, dir, hash, 7, out, sizeof out);
    /* On cpu-strict (device memory only through the backend, the weighted sum's ops on the comm stream): the cpu
     * run's parameters. */
    char strict[64];
    e2e_launch_hash(run, "nobody-waits-strict", "--device cpu-strict", out, sizeof out, dir, sizeof dir, strict);
    XDC_ASSERT_MSG(strcmp(strict, hash) == 0, "cpu-strict ends at %s, cpu at %s", strict, hash);
    /* The same slow region with everybody waiting, for the printout. */
    const char *all = e2e_write_run("all-wait", "diloco", 12, "int8", "diloco: {inner_steps: 6, slowdown: [1, 3]}\n");
    char base[64], base_util[32];
    e2e_launch_hash(all, "all-wait", NULL, out, sizeof out, dir, sizeof dir, base);
    e2e_final_field(out, "compute_util_min=", base_util, sizeof base_util);
    long long bf, bs;
    double bf_wait, bs_wait;
    counters(dir, "us-east", &bf, &bf_wait);
    counters(dir, "eu-west", &bs, &bs_wait);
    XDC_ASSERT_MSG(bf == 12 && bs == 12, "everybody waiting: inner steps %lld and %lld, want 12 each", bf, bs);
    printf("nobody waits: us-east %lld inner steps (waited %.2f steps/round), eu-west %lld (%.2f), "
           "compute_util_min %s; everybody waits: us-east waited %.2f steps/round, compute_util_min %s\n",
           fast, fast_wait, slow, slow_wait, util, bf_wait, base_util);
}

/* Nobody waits with the round overlapped (diloco.overlap_steps 1): each round is weighed by the counts of the
 * round it closes and its decision brings the next round's, which the inner step on the wire with it follows. 18
 * steps of 6: us-east runs 18 inner steps, eu-west (3x slower) 6; both end on one model; and a resume from the
 * checkpoint of step 12 (no round in flight there) ends on the uninterrupted run's parameters. */
XDC_TEST_T(diloco_nobody_waits_overlapped_rounds_end_on_one_model, 240)
{
    e2e_need_corpus();
    static char out[65536];
    const char *opts =
        "diloco: {inner_steps: 6, nobody_waits: true, overlap_steps: 1, slowdown: [1, 3]}\ncheckpoint_every: 12\n";
    const char *run = e2e_write_run("nobody-waits-overlap", "diloco", 18, "int8", opts);
    char hash[64], dir[600], cmd[1024];
    double fast_wait, slow_wait;
    launch_counted(run, "nobody-waits-overlap", 18, 6, out, sizeof out, dir, hash, &fast_wait, &slow_wait);
    snprintf(cmd, sizeof cmd, "cat %s/logs/*.log | grep -c 'overlapped outer rounds: 2 inner steps ran'", dir);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 4, "expected 4 workers to log 2 inner steps under a round in flight, got %s", out);
    resumes_from(run, dir, hash, 12, out, sizeof out);
}

/* `plan: auto` with eu-west slowed 3x and no mode, period or nobody_waits in the file: the planner chooses DiLoCo
 * with nobody waits (bf16, H = 10 on the demo link: us-east 10 inner steps a round, eu-west 3, what
 * xdc_plan_round_steps gives at pace 3), the launch runs it with the decider counting those same steps, and every
 * region ends on one model. The topology's compute model (plan_compute: topology): a probe's would move H with the
 * machine's load. */
XDC_TEST_T(plan_auto_chooses_nobody_waits_and_the_run_takes_it, 180)
{
    e2e_need_corpus();
    static char out[65536];
    char run[600], cwd[512], hash[64], dir[600], h[8][17];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(run, sizeof run, "%s/auto-pace.yaml", xdc_test_tmpdir());
    FILE *f = fopen(run, "w");
    XDC_ASSERT(f != NULL);
    fprintf(f,
            "model: %s/%s\ndata: %s\nplan: auto\nplan_compute: topology\nmicrobatches: 2\nsteps: 20\ndiloco: "
            "{slowdown: [1, 3]}\n",
            cwd, TINY, DATA);
    fclose(f);
    e2e_launch_hash(run, "auto-pace", NULL, out, sizeof out, dir, sizeof dir, hash);
    XDC_ASSERT_STR_CONTAINS(out, "nobody waits (each region's inner steps by its pace)");
    int n = e2e_final_hashes(dir, h, 8);
    XDC_ASSERT_MSG(n == 2 && strcmp(h[0], h[1]) == 0, "the regions end on %s and %s", h[0], n > 1 ? h[1] : "-");
    long long fast, slow;
    double fast_wait, slow_wait;
    counters(dir, "us-east", &fast, &fast_wait);
    counters(dir, "eu-west", &slow, &slow_wait);
    XDC_ASSERT_MSG(fast == 20 && slow == 2 * xdc_plan_round_steps(10, 3.0),
                   "inner steps: us-east %lld (want 20), eu-west %lld (want %d)", fast, slow,
                   2 * xdc_plan_round_steps(10, 3.0));
}
