/* test_elastic.c — elastic DiLoCo regions (docs/runtime.md, "Elastic regions"): the store host's quorum
 * decisions (orch_quorum) from arrivals, losses and the grace window; end to end on three emulated
 * regions, a region whose worker is killed or stopped past the grace window is dropped by name and the
 * other two finish on identical parameters (DiLoCo; streaming for a killed one), also when the region
 * lost is region 0 (the result then comes from the lowest region left, under `xdc launch` and `xdc
 * coordinator`); a killed region's agent started again rejoins under `xdc coordinator` (DiLoCo and
 * streaming); a stopped worker whose region was dropped leaves as it wakes and rejoins; too few regions
 * left is a named error (exit 69). Faults are driven by what the run logs, never by sleeping. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"
#include "tests/e2e/test_orch_util.h"

#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "topology/xdc_topology.h"

#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOPO3 "examples/topology/demo-3region.yaml"
#define DATA  "/usr/share/games/fortunes"

/* ---- the quorum decisions, against a real store ------------------------------------------------ */

typedef struct {
    xdc_wan_engine *eng;
    rdzv_server *srv;
    xdc_topology *t;
    orch_quorum q;
} quorum_fixture;

static void fixture_open(quorum_fixture *f, int min_regions, int64_t grace_ms)
{
    wan_test_node node;
    wan_test_issue("certs", RDZV_SERVER_REGION, 0, 30, -60, &node);
    f->eng = wan_test_engine(&node, 1, 10000);
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(TOPO3, &f->t, &errs));
    const char *expected[3] = {"us-east/east-node1:0", "eu-west/west-node1:0", "ap-south/south-node1:0"};
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(f->eng, "127.0.0.1", 0, expected, 3, &f->srv, &d));
    orch_quorum_init(&f->q, f->t, f->srv, min_regions, grace_ms, 0, 600000);
}

static void fixture_close(quorum_fixture *f)
{
    rdzv_server_destroy(f->srv);
    xdc_wan_engine_destroy(f->eng);
    xdc_topology_destroy(f->t);
}

static void arrive(quorum_fixture *f, int region, const char *round)
{
    char key[64];
    snprintf(key, sizeof key, "outer/%d/0", region);
    rdzv_server_set(f->srv, key, round);
}

/* The published decision of `round`, or "" when there is none yet. */
static const char *decision(quorum_fixture *f, const char *round)
{
    static char val[64];
    char key[64];
    snprintf(key, sizeof key, "quorum/%s", round);
    if (rdzv_server_get(f->srv, key, val, sizeof val) != 0) val[0] = '\0';
    return val;
}

XDC_TEST(elastic_quorum_waits_for_everyone_then_drops_the_lost_region)
{
    quorum_fixture f;
    fixture_open(&f, 2, 600000); /* a grace window no test run reaches: only arrivals and losses decide */
    char why[512] = "";
    arrive(&f, 0, "4");
    arrive(&f, 1, "4");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT_MSG(decision(&f, "4")[0] == '\0', "decided before ap-south arrived or the grace window ended");
    arrive(&f, 2, "4");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "4"), "111") == 0);
    /* A region lost between rounds is out of the next one at once, named. */
    arrive(&f, 0, "8");
    arrive(&f, 1, "8");
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 2, "its agent exited with status 69", why, sizeof why));
    XDC_ASSERT_STR_CONTAINS(f.q.dropped, "ap-south (its agent exited with status 69)");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "8"), "110") == 0);
    /* Its late arrival changes nothing, and the end is decided over the two left. */
    arrive(&f, 2, "8");
    arrive(&f, 0, RDZV_ROUND_END_NAME);
    arrive(&f, 1, RDZV_ROUND_END_NAME);
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, RDZV_ROUND_END_NAME), "110") == 0);
    /* One more loss leaves one region, below the minimum of two: a named error. */
    XDC_ASSERT_ERR(orch_quorum_lose(&f.q, 1, "worker killed", why, sizeof why), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(why, "region eu-west lost (worker killed): 1 of 3 regions left, below "
                                 "elastic.min_regions 2");
    fixture_close(&f);
}

/* A region out of the run whose workers all asked to rejoin is named joining ('j') in the next round decided,
 * each worker's nonce gets that round's step, and the region is waited for again from the round after. */
XDC_TEST(elastic_quorum_takes_a_region_that_asks_to_rejoin)
{
    quorum_fixture f;
    fixture_open(&f, 2, 600000);
    char why[512] = "", val[64];
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 2, "its agent exited with status 69", why, sizeof why));
    XDC_ASSERT(rdzv_server_get(f.srv, "left/2", val, sizeof val) == 0 && strcmp(val, "1") == 0);
    arrive(&f, 0, "8");
    arrive(&f, 1, "8");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "8"), "110") == 0);
    /* Its restarted worker asks while the others train: taken at the next round, not before. */
    arrive(&f, 2, RDZV_VAL_JOIN "n1");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT_MSG(rdzv_server_get(f.srv, "rejoin/n1", val, sizeof val) != 0, "taken back between rounds");
    arrive(&f, 0, "12");
    arrive(&f, 1, "12");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "12"), "11j") == 0);
    XDC_ASSERT(rdzv_server_get(f.srv, "rejoin/n1", val, sizeof val) == 0 && strcmp(val, "12") == 0);
    XDC_ASSERT_STR_CONTAINS(f.q.dropped, "then ap-south rejoined at the outer round at step 12");
    /* A member again: the next round waits for it. */
    arrive(&f, 0, "16");
    arrive(&f, 1, "16");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT_MSG(decision(&f, "16")[0] == '\0', "decided without the region that rejoined");
    arrive(&f, 2, "16");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "16"), "111") == 0);
    fixture_close(&f);
}

/* Two regions out of the run that both asked are taken back at one round; a joiner dropped again before it
 * became a member is not taken again on the request that round answered, only on its restart's new one. */
XDC_TEST(elastic_quorum_takes_two_regions_back_at_one_round)
{
    quorum_fixture f;
    fixture_open(&f, 1, 600000);
    char why[512] = "", val[64];
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 1, "its agent exited with status 69", why, sizeof why));
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 2, "its agent exited with status 69", why, sizeof why));
    arrive(&f, 1, RDZV_VAL_JOIN "w1");
    arrive(&f, 2, RDZV_VAL_JOIN "s1");
    arrive(&f, 0, "8");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "8"), "1jj") == 0);
    XDC_ASSERT(rdzv_server_get(f.srv, "rejoin/w1", val, sizeof val) == 0 && strcmp(val, "8") == 0);
    XDC_ASSERT(rdzv_server_get(f.srv, "rejoin/s1", val, sizeof val) == 0 && strcmp(val, "8") == 0);
    /* ap-south's joiner fails before its first round: its old request is not a new one. */
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 2, "its agent exited with status 65", why, sizeof why));
    arrive(&f, 0, "12");
    arrive(&f, 1, "12");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "12"), "110") == 0);
    arrive(&f, 2, RDZV_VAL_JOIN "s2");
    arrive(&f, 0, "16");
    arrive(&f, 1, "16");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "16"), "11j") == 0);
    fixture_close(&f);
}

/* Worker 0 of `region` summed the regions in `set` in the round at `step` (xchg/<region>/0). */
static void exchanged(quorum_fixture *f, int region, const char *step, const char *set)
{
    char key[64], val[64];
    snprintf(key, sizeof key, "xchg/%d/0", region);
    snprintf(val, sizeof val, "%s:%s", step, set);
    rdzv_server_set(f->srv, key, val);
}

/* The value of `key`, or "" when it is not set. */
static const char *key_value(quorum_fixture *f, const char *key)
{
    static char val[64];
    if (rdzv_server_get(f->srv, key, val, sizeof val) != 0) val[0] = '\0';
    return val;
}

/* DiLoCo's final sets: a round whose members all summed everyone ends with its quorum; a region lost during
 * the exchange is published in lost/<step> at once, and the final set is what every member still in the run
 * summed: eu-west got ap-south's shards, us-east did not, so neither counts them. */
XDC_TEST(elastic_quorum_final_set_is_what_every_member_summed)
{
    quorum_fixture f;
    fixture_open(&f, 2, 600000);
    char why[512] = "";
    for (int r = 0; r < 3; r++) arrive(&f, r, "4");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "4"), "111") == 0);
    for (int r = 0; r < 3; r++) exchanged(&f, r, "4", "111");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(key_value(&f, "final/4"), "111") == 0);
    for (int r = 0; r < 3; r++) arrive(&f, r, "8");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "8"), "111") == 0);
    exchanged(&f, 1, "8", "111");
    XDC_ASSERT_OK(orch_quorum_lose(&f.q, 2, "its agent exited with status 137", why, sizeof why));
    XDC_ASSERT(strcmp(key_value(&f, "lost/8"), "001") == 0);
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT_MSG(!key_value(&f, "final/8")[0], "final before us-east said what it summed");
    exchanged(&f, 0, "8", "110");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(key_value(&f, "final/8"), "110") == 0);
    /* The next round is the two left's. */
    arrive(&f, 0, "12");
    arrive(&f, 1, "12");
    XDC_ASSERT_OK(orch_quorum_tick(&f.q, why, sizeof why));
    XDC_ASSERT(strcmp(decision(&f, "12"), "110") == 0);
    fixture_close(&f);
}

XDC_TEST(elastic_quorum_drops_a_region_late_past_the_grace_window)
{
    quorum_fixture f;
    fixture_open(&f, 3, 1); /* every region needed; a 1 ms window */
    char why[512] = "";
    arrive(&f, 0, "4");
    arrive(&f, 2, "4");
    xdc_err_t rc = XDC_OK;
    /* Bounded: the window is 1 ms; the first tick opens it, a later one closes it. */
    for (int i = 0; i < 2000 && rc == XDC_OK && !decision(&f, "4")[0]; i++) {
        rc = orch_quorum_tick(&f.q, why, sizeof why);
        if (rc == XDC_OK) nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    XDC_ASSERT_ERR(rc, XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(why, "outer round at step 4: 2 of 3 regions (us-east, ap-south) arrived");
    XDC_ASSERT_STR_CONTAINS(why, "below elastic.min_regions 3; missing: eu-west");
    XDC_ASSERT_STR_CONTAINS(f.q.dropped, "eu-west (missed the outer round at step 4");
    XDC_ASSERT_MSG(decision(&f, "4")[0] == '\0', "a round below the minimum was published");
    fixture_close(&f);
}

/* ---- end to end --------------------------------------------------------------------------------- */

static void need_corpus(void)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
}

/* A run file of the tiny model in `mode` (diloco, diloco-overlap: diloco with overlap_steps 2, or streaming with
 * 2 fragments), one stage, `steps` steps of 4 inner steps, with `elastic` and `timeouts` (", handshake: 5s": more
 * of the timeouts map; "" none). The heartbeat is the operation's deadline: a region stopped inside an exchange
 * is dropped only after it (tests that want that path set their own), and a loaded machine that stretches a 6 s
 * stop does not drop it. */
static const char *write_run_timeouts(const char *name, const char *mode, int steps, const char *elastic,
                                      const char *timeouts)
{
    static char path[512];
    char cwd[400], text[1024];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    /* DiLoCo with diloco.overlap_steps 2; -nw: and nobody waits, ap-south 2x slower (2 inner steps of 4);
     * streaming-tww, diloco-tww: streaming or DiLoCo that trains while it waits */
    int overlap = strncmp(mode, "diloco-overlap", 14) == 0, nw = strcmp(mode, "diloco-overlap-nw") == 0,
        tww = strcmp(mode, "streaming-tww") == 0 || strcmp(mode, "diloco-tww") == 0;
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: %s\ndiloco: {inner_steps: 4%s%s%s}\n"
             "streaming: {fragments: 2}\npipeline_stages: 1\nmicrobatches: 1\nsteps: %d\ncodec: none\nthreads: 1\n"
             "elastic: %s\ntimeouts: {rendezvous: 30s, operation: 30s%s%s}\n",
             cwd, DATA,
             overlap || strcmp(mode, "diloco-tww") == 0 ? "diloco"
             : tww                                      ? "streaming"
                                                        : mode,
             overlap ? ", overlap_steps: 2" : "", nw ? ", nobody_waits: true, slowdown: [1, 1, 2]" : "",
             tww ? ", train_while_waiting: true" : "", steps, elastic,
             strstr(timeouts, "heartbeat:") ? "" : ", heartbeat: 30s", timeouts);
    xdc_test_write_file(path, text);
    return path;
}

/* The same with the default timeouts. */
static const char *write_run(const char *name, const char *mode, int steps, const char *elastic)
{
    return write_run_timeouts(name, mode, steps, elastic, "");
}

/* `xdc launch` on the three regions of topology `topo` (NULL: TOPO3) in the background, its output into `log`;
 * `restarts`: its --max-restarts (NULL: none). */
static pid_t start_launch(const char *run, const char *topo, const char *dir, const char *log, const char *restarts)
{
    pid_t p = fork();
    if (p == 0) {
        if (!freopen(log, "w", stdout)) _exit(127);
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "launch", "-t", topo ? topo : TOPO3, "-c", run, "--run-dir", dir,
              restarts ? "--max-restarts" : (char *)NULL, restarts, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* How many times `needle` occurs in file `path`. */
static int count_text(const char *path, const char *needle)
{
    char *text = xdc_test_read_file(path, NULL);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    free(text);
    return n;
}

/* Wait (bounded: tries x 50 ms) until `needle` occurs `n` times in file `path`; 1 when it does. */
static int wait_for_count(const char *path, const char *needle, int n, int tries)
{
    for (int i = 0; i < tries; i++) {
        if (count_text(path, needle) >= n) return 1;
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    return 0;
}

static int wait_for_text(const char *path, const char *needle) { return wait_for_count(path, needle, 1, 2400); }

static pid_t signal_worker(const char *dir, const char *region, int sig)
{
    char pidfile[800];
    snprintf(pidfile, sizeof pidfile, "%s/pids/%s-0.pid", dir, region);
    char *text = xdc_test_read_file(pidfile, NULL);
    XDC_ASSERT_MSG(text != NULL, "no pid file %s", pidfile);
    pid_t pid = (pid_t)atoi(text);
    free(text);
    XDC_ASSERT(pid > 0 && kill(pid, sig) == 0);
    return pid;
}

/* Stop `region`'s worker where it is not inside an outer round (inside an exchange it would be dropped only
 * after `timeouts.heartbeat` of silence, and the drop tests want the grace window's path: docs/runtime.md):
 * SIGSTOP it, and keep it stopped once the store host logs (in host_log), after the stop, that the next round
 * waits for it, which says it had not arrived there. No such line within
 * twice the 3 s grace window means it was stopped inside a round, which cannot end without it: continue
 * it, let the run pass a progress line (in progress_log), and try again. Returns its pid, stopped. */
static pid_t stop_outside_a_round(const char *dir, const char *region, const char *host_log, const char *progress_log)
{
    char late[128];
    snprintf(late, sizeof late, "waiting for %s for", region);
    for (int attempt = 0; attempt < 8; attempt++) {
        /* Count after the stop: a line logged before it may be for a round the worker then joined. */
        pid_t pid = signal_worker(dir, region, SIGSTOP);
        int before = count_text(host_log, late), steps = count_text(progress_log, "  loss ");
        if (wait_for_count(host_log, late, before + 1, 120)) return pid;
        kill(pid, SIGCONT);
        XDC_ASSERT_MSG(wait_for_count(progress_log, "  loss ", steps + 1, 2400), "the run stopped progressing");
    }
    XDC_FAIL("%s was never stopped outside an outer round in 8 attempts", region);
    return -1;
}

/* The params_xxh64 region `region`'s worker logged at the end, into hash[17]. */
static void region_hash(const char *dir, const char *region, char hash[17])
{
    char needle[128];
    snprintf(needle, sizeof needle, "final parameters of region %s: params_xxh64=", region);
    char *text = e2e_region_log(dir, region);
    const char *h = strstr(text, needle);
    XDC_ASSERT_MSG(h != NULL, "region %s logged no final parameters", region);
    snprintf(hash, 17, "%.16s", h + strlen(needle));
    free(text);
}

/* Wait for the launcher; its exit status. */
static int launch_exit(pid_t p)
{
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT_MSG(WIFEXITED(status), "launch ended with 0x%x", status);
    return WEXITSTATUS(status);
}

/* Regions a and b (the survivors, in region order) end on the same parameters, and the final line of `out`
 * reports them, for those two regions. */
static void expect_survivors(const char *dir, const char *out, const char *a, const char *b)
{
    char ha[17], hb[17], want[64];
    region_hash(dir, a, ha);
    region_hash(dir, b, hb);
    XDC_ASSERT_MSG(strcmp(ha, hb) == 0, "%s ends at %s, %s at %s", a, ha, b, hb);
    const char *final = out ? strstr(out, "\nfinal ") : NULL;
    XDC_ASSERT_MSG(final != NULL, "no final line in:\n%s", out ? out : "");
    snprintf(want, sizeof want, "params_xxh64=%s", ha);
    XDC_ASSERT_STR_CONTAINS(final, want);
    snprintf(want, sizeof want, " regions=%s,%s\n", a, b);
    XDC_ASSERT_STR_CONTAINS(final, want);
}

/* Elastic sync mode against the serial reference of the same membership history: region `victim` is in every
 * step's mean before the first step it is out of, C, and out from it on until it rejoins. The run's first rank
 * prints "step S  round S with 2 of 3 regions" at the first round decided without it; a region killed during the
 * exchange of round S - 1 may still be in that round's final set (every member got its shards) or not (the
 * members sum again without it, and say so): then C = S - 1. Taken back at round J (the host's "rejoins the run
 * at the outer round at step J"), it is in the means from step J + 1 on. Region 0's parameters (its dump) are
 * the reference's, bit for bit. */
static void expect_sync_reference(const char *dir, const char *out, const char *victim_name, int victim, int steps)
{
    const char *at = strstr(out, " with 2 of 3 regions (quorum ");
    XDC_ASSERT_MSG(at != NULL, "no round without region %d in:\n%s", victim, out);
    while (at > out && at[-1] != '\n') at--;
    long long s = -1, resum = -1;
    XDC_ASSERT_MSG(sscanf(at, "step %lld", &s) == 1 && s > 0 && s < steps, "no step in '%.80s'", at);
    char *log = e2e_region_log(dir, "us-east");
    const char *again = strstr(log, "summing again over the final set");
    while (again && again > log && strncmp(again, "outer round at step ", 20) != 0) again--;
    if (again && again > log) resum = atoll(again + 20);
    free(log);
    long long c = resum == s - 1 ? resum : s, j = steps;
    char back[160];
    snprintf(back, sizeof back, "region %s rejoins the run at the outer round at step ", victim_name);
    const char *b = strstr(out, back);
    if (b) j = atoll(b + strlen(back));
    uint8_t *present = malloc((size_t)steps * 3);
    XDC_ASSERT(present != NULL);
    for (int t = 0; t < steps; t++)
        for (int r = 0; r < 3; r++) present[t * 3 + r] = r != victim || t < c || t > j;
    xdc_gpt_stage *st[1];
    e2e_reference_run(steps, 1, TINY, 3, 1, 1, 0, present, st);
    double diff = e2e_params_max_diff(dir, 1, st);
    xdc_gpt_stage_destroy(st[0]);
    free(present);
    printf("region %d out from step %lld, back from %lld: max |run - reference| = %.3g\n", victim, c, j + 1, diff);
    XDC_ASSERT_MSG(diff == 0.0, "the run differs from the serial reference by %.3g", diff);
}

/* Lose region `victim` (its worker killed, or stopped past the grace window and then continued) after step
 * 20 of 100: the run finishes with exit 0, names the victim as dropped, and the other two end on the same
 * parameters, the ones the run's final line reports for the regions it names (region 0 lost: the result
 * comes from the lowest region left). */
static void lose_a_region(const char *name, const char *mode, int stop, int victim)
{
    static const char *const region[3] = {"us-east", "eu-west", "ap-south"};
    need_corpus();
    int sync = strcmp(mode, "sync") == 0; /* checked against the serial reference: its parameters dumped */
    const char *run = write_run(
        name, mode, 100, sync ? "{min_regions: 2, grace: 3s}\ndump_params: true" : "{min_regions: 2, grace: 3s}");
    char dir[600], log[700], text_buf[256];
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    pid_t p = start_launch(run, NULL, dir, log, NULL);
    XDC_ASSERT_MSG(wait_for_text(log, "step    20/"), "the run never reached step 20");
    /* Killed: wherever it is (in a round's exchange or between rounds), its agent's failure drops the region
     * at once. Stopped: between rounds, for the grace window's path. */
    pid_t pid = stop ? stop_outside_a_round(dir, region[victim], log, log)
                     : signal_worker(dir, region[victim], SIGKILL);
    if (stop) { /* continued once the others went on without it: it learns it was dropped and leaves */
        snprintf(text_buf, sizeof text_buf, "region %s dropped from the run: missed the outer round", region[victim]);
        XDC_ASSERT_MSG(wait_for_text(log, text_buf), "%s was not dropped after the grace window", region[victim]);
        kill(pid, SIGCONT);
    }
    int rc = launch_exit(p);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out ? out : "");
    char quorum[4] = "111";
    const char *survivor[2];
    quorum[victim] = '0';
    for (int r = 0, n = 0; r < 3; r++)
        if (r != victim) survivor[n++] = region[r];
    if (victim != 0) { /* region 0's rank 0 prints the progress lines */
        snprintf(text_buf, sizeof text_buf, "with 2 of 3 regions (quorum %s)", quorum);
        XDC_ASSERT_STR_CONTAINS(out, text_buf);
    }
    snprintf(text_buf, sizeof text_buf, "regions dropped: %s (", region[victim]);
    XDC_ASSERT_STR_CONTAINS(out, text_buf);
    XDC_ASSERT_STR_CONTAINS(out, "steps=100");
    expect_survivors(dir, out, survivor[0], survivor[1]);
    if (sync) expect_sync_reference(dir, out, region[victim], victim, 100);
    free(out);
    if (stop) {
        char wlog[800];
        snprintf(wlog, sizeof wlog, "%s/logs/ap-south-south-node1-0.log", dir);
        char *text = xdc_test_read_file(wlog, NULL);
        /* at its next round, or (stopped long enough for orch_train.c to notice) as it woke */
        XDC_ASSERT_STR_CONTAINS(text, "region ap-south was dropped from ");
        free(text);
        text = xdc_test_read_file(log, NULL); /* and its agent's end did not fail the run */
        XDC_ASSERT_STR_CONTAINS(text, "agent ap-south/south-node1 of region ap-south, out of the run, ended");
        free(text);
    }
}

XDC_TEST_T(elastic_diloco_goes_on_without_a_killed_region, 180) { lose_a_region("killed", "diloco", 0, 2); }

/* Elastic sync mode: every step is a round; ap-south killed, the survivors' mean is over the two regions left
 * (xdc_sync_set_weights) and they end on one model. */
XDC_TEST_T(elastic_sync_goes_on_without_a_killed_region, 180) { lose_a_region("sync-killed", "sync", 0, 2); }

XDC_TEST_T(elastic_diloco_drops_a_region_stopped_past_the_grace_window, 180)
{
    lose_a_region("stopped", "diloco", 1, 2);
}

/* Streaming: each fragment's round goes by quorum too (the fragments still in flight keep theirs). */
XDC_TEST_T(elastic_streaming_goes_on_without_a_killed_region, 180) { lose_a_region("streaming", "streaming", 0, 2); }

/* Region 0 (us-east) killed: its rank 0 would have posted the result; the lowest region left does. */
XDC_TEST_T(elastic_diloco_without_region_0_still_has_a_result, 180) { lose_a_region("region0", "diloco", 0, 0); }

XDC_TEST_T(elastic_diloco_below_min_regions_is_a_named_error, 180)
{
    need_corpus();
    const char *run = write_run("minimum", "diloco", 2000, "{min_regions: 3, grace: 3s}");
    char dir[600], log[700];
    snprintf(dir, sizeof dir, "%s/minimum", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/minimum.log", xdc_test_tmpdir());
    pid_t p = start_launch(run, NULL, dir, log, NULL);
    XDC_ASSERT_MSG(wait_for_text(log, "step    20/"), "the run never reached step 20");
    kill(stop_outside_a_round(dir, "ap-south", log, log), SIGKILL);
    int rc = launch_exit(p);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(rc == 69, "launch exited %d, expected 69 (unavailable):\n%s", rc, out ? out : "");
    /* Killed while the others waited for it: lost at once (or, on a slow machine, late past the window). */
    const char *f = out ? strstr(out, "run failed: ") : NULL;
    XDC_ASSERT_MSG(f != NULL, "no failure line in:\n%s", out ? out : "");
    XDC_ASSERT_STR_CONTAINS(f, "ap-south");
    XDC_ASSERT_STR_CONTAINS(f, "below elastic.min_regions 3");
    free(out);
}

/* Wait for `xdc launch` (process p, run folder dir, output in log) to end, print its story lines, and assert
 * it exited 0; its output, malloc'd. */
static char *launch_succeeded(pid_t p, const char *dir, const char *log)
{
    int rc = launch_exit(p);
    e2e_print_stories(dir, log, NULL, NULL);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d", rc);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT(out != NULL);
    return out;
}

/* A region lost while a round's exchange waits for its shards (docs/runtime.md, "Leaving during a round").
 * ap-south's links run at 0.2 Mbit/s, so its shards (the tiny model's 137k fp32 pseudo-gradients; streaming
 * with one fragment, its whole stage) take about 20 s to cross: us-east's
 * first round says, 5 s into its wait, that it is still waiting for ap-south's shard (the sync's "waiting for
 * ap-south/0"), and ap-south's worker is lost then, inside the exchange of a round whose quorum counted it
 * (streaming: while its fragment is on the wire, the others computing the next step): killed (its agent
 * fails: the host drops the region at once), or stopped (silent on the store past `timeouts.heartbeat`, 4 s
 * here: a live worker's engine answers the store's keepalives every 200 ms, but on a loaded 2-core machine a
 * busy one was once seen 3.4 s late: dropped for that, and continued once the others went on). The run finishes without it: lost/<step>
 * tells the members, each says what it summed, and the final set (the two left) is what both sum again
 * over, so both end on one model. */
static void lose_during_an_exchange(const char *name, const char *mode, int stop)
{
    need_corpus();
    char run[600], topo[600], dir[600], log[700], east[800], pattern[800];
    snprintf(run, sizeof run, "%s", write_run(name, mode, 40, "{min_regions: 2, grace: 20s}"));
    char *text = xdc_test_read_file(run, NULL);
    XDC_ASSERT(text != NULL);
    FILE *f = fopen(run, "w");
    XDC_ASSERT(f != NULL);
    const char *op = "heartbeat: 30s}", *at = strstr(text, op), *frag = strstr(text, "fragments: 2");
    XDC_ASSERT(at != NULL && frag != NULL && frag < at);
    /* one fragment: the whole pseudo-gradient, too large for the sockets' buffers to hold all of it */
    fprintf(f, "%.*sfragments: 1%.*sheartbeat: 4s}%s", (int)(frag - text), text,
            (int)(at - frag - strlen("fragments: 2")), frag + strlen("fragments: 2"), at + strlen(op));
    fclose(f);
    free(text);
    snprintf(topo, sizeof topo, "%s/%s-topology.yaml", xdc_test_tmpdir(), name);
    text = xdc_test_read_file(TOPO3, NULL);
    XDC_ASSERT(text != NULL);
    f = fopen(topo, "w");
    XDC_ASSERT(f != NULL);
    const char *fast = "to: ap-south, bandwidth_gbps: 1,", *hit;
    for (at = text; (hit = strstr(at, fast)); at = hit + strlen(fast)) /* ap-south's two links at 0.2 Mbit/s */
        fprintf(f, "%.*sto: ap-south, bandwidth_gbps: 0.0002,", (int)(hit - at), at);
    fputs(at, f);
    fclose(f);
    free(text);
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    pid_t p = start_launch(run, topo, dir, log, NULL);
    snprintf(pattern, sizeof pattern, "%s/logs/us-east-*-0.log", dir);
    glob_t g = {0};
    for (int i = 0; i < 2400 && g.gl_pathc == 0; i++) { /* the log appears when the agent starts the worker */
        globfree(&g);
        if (glob(pattern, 0, NULL, &g) != 0) nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(g.gl_pathc == 1, "not one log matches %s", pattern);
    snprintf(east, sizeof east, "%s", g.gl_pathv[0]);
    globfree(&g);
    XDC_ASSERT_MSG(wait_for_text(east, "waiting for ap-south/0 for"), "us-east never waited 5 s for ap-south's shard");
    pid_t victim = signal_worker(dir, "ap-south", stop ? SIGSTOP : SIGKILL);
    if (stop) {
        XDC_ASSERT_MSG(wait_for_text(log, "south-node1:0 silent for"), "ap-south was not dropped for its silence");
        kill(victim, SIGCONT);
    }
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south left during the exchange of the outer round at step");
    XDC_ASSERT_STR_CONTAINS(out, "steps=40");
    expect_survivors(dir, out, "us-east", "eu-west");
    free(out);
    char *wlog = e2e_region_log(dir, "us-east");
    XDC_ASSERT_STR_CONTAINS(wlog, "summing again over the final set 110");
    free(wlog);
}

XDC_TEST_T(elastic_diloco_region_killed_during_an_exchange_leaves_one_model, 180)
{
    lose_during_an_exchange("midx-kill", "diloco", 0);
}

XDC_TEST_T(elastic_diloco_region_silent_during_an_exchange_leaves_one_model, 180)
{
    lose_during_an_exchange("midx-stop", "diloco", 1);
}

/* The same with overlapped DiLoCo rounds (diloco.overlap_steps 2): the region dies while a round is on the
 * wire and the others take their next inner steps. */
XDC_TEST_T(elastic_diloco_overlapped_region_killed_during_an_exchange_leaves_one_model, 180)
{
    lose_during_an_exchange("ovx-kill", "diloco-overlap", 0);
}

XDC_TEST_T(elastic_streaming_region_killed_while_its_fragment_is_on_the_wire_leaves_one_model, 180)
{
    lose_during_an_exchange("sfrag-kill", "streaming", 0);
}

XDC_TEST_T(elastic_streaming_region_silent_while_its_fragment_is_on_the_wire_leaves_one_model, 180)
{
    lose_during_an_exchange("sfrag-stop", "streaming", 1);
}

/* `xdc launch` of a short run file (write_run's) to its end, with `flags` added; its exit status, its output
 * in out[cap]. */
static int launch_short(const char *name, const char *mode, int steps, const char *elastic, const char *flags,
                        char *out, size_t cap)
{
    need_corpus();
    const char *run = write_run(name, mode, steps, elastic);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "timeout 100 %s launch -t %s -c %s --run-dir %s/%s %s 2>&1", xdc_test_bin(), TOPO3, run,
             xdc_test_tmpdir(), name, flags);
    return xdc_test_run(cmd, out, cap);
}

XDC_TEST(elastic_min_regions_above_the_topology_is_a_config_error)
{
    char out[8192];
    int rc = launch_short("toomany", "diloco", 8, "{min_regions: 4}", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "launch exited %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "elastic.min_regions is 4 but topology " TOPO3 " has 3 regions");
}

/* `xdc coordinator` of run file `run` (run id `run_id`) in the background, its output into `log`; the address
 * it tells the agents to use into where[cap]. */
static pid_t start_coordinator(const char *run, const char *dir, const char *log, const char *run_id, char *where,
                               size_t cap)
{
    pid_t coord = fork();
    if (coord == 0) {
        if (!freopen(log, "w", stdout)) _exit(127);
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", TOPO3, "-c", run, "--run-dir", dir, "--host",
              "127.0.0.1", "--port", "0", "--run-id", run_id, (char *)NULL);
        _exit(127);
    }
    XDC_ASSERT_MSG(wait_for_text(log, "--coordinator "), "the coordinator did not start");
    char *text = xdc_test_read_file(log, NULL);
    const char *at = strstr(text, "--coordinator ") + strlen("--coordinator ");
    snprintf(where, cap, "%.*s", (int)strcspn(at, " \n"), at);
    free(text);
    return coord;
}

/* `xdc agent` (node 0) of each region in `regions` (space-separated), started by hand as launch
 * scripts would, in the background, their output into `log`. The shell's exit status: how many failed
 * (each agent waited for by pid: `wait -n` loses a job that ends while the shell handles another's end). */
static pid_t start_agents(const char *run, const char *dir, const char *where, const char *run_id, const char *regions,
                          const char *log)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; n=0; for r in %s; do "
             "timeout 120 %s agent -t %s -c %s --run-dir %s --region $r --node 0 --coordinator %s "
             "--run-id %s & p=\"$p $!\"; done; for j in $p; do wait $j || n=$((n+1)); done; exit $n",
             regions, xdc_test_bin(), TOPO3, run, dir, where, run_id);
    pid_t sh = fork();
    if (sh == 0) {
        if (!freopen(log, "w", stdout)) _exit(127);
        dup2(1, 2);
        execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return sh;
}

/* The three regions' final params_xxh64 agree, and the coordinator's summary (`out`) reports it. */
static void expect_one_model(const char *dir, const char *out, int n_regions)
{
    const char *regions[3] = {"us-east", "eu-west", "ap-south"};
    char first[17], h[17], want[64];
    region_hash(dir, regions[0], first);
    for (int r = 1; r < n_regions; r++) {
        region_hash(dir, regions[r], h);
        XDC_ASSERT_MSG(strcmp(first, h) == 0, "us-east ends at %s, %s at %s", first, regions[r], h);
    }
    snprintf(want, sizeof want, "params_xxh64=%s", first);
    XDC_ASSERT_STR_CONTAINS(out, want);
}

/* The multi-host path: `xdc coordinator` hosts the quorum, the agents are started by hand (as launch
 * scripts would). us-east's worker killed (region 0, whose rank 0 would end a run that is not elastic):
 * nobody reports it to the store, so it is dropped when it misses the grace window; its agent exits 69 on
 * its own, the other two finish on the same parameters, and the coordinator ends the run with their
 * result. */
XDC_TEST_T(elastic_coordinator_drops_a_region_that_misses_the_window, 180)
{
    need_corpus();
    const char *run = write_run("coord", "diloco", 100, "{min_regions: 2, grace: 3s}");
    char dir[600], log[700], agents[700], where[64];
    snprintf(dir, sizeof dir, "%s/coord", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    snprintf(agents, sizeof agents, "%s/agents.log", xdc_test_tmpdir());
    pid_t coord = start_coordinator(run, dir, log, "elastic-coord", where, sizeof where);
    pid_t sh = start_agents(run, dir, where, "elastic-coord", "us-east eu-west ap-south", agents);
    XDC_ASSERT_MSG(wait_for_text(agents, "step    20/"), "the run never reached step 20");
    kill(stop_outside_a_round(dir, "us-east", log, agents), SIGKILL);
    int failed = launch_exit(sh);
    int rc = launch_exit(coord);
    e2e_print_stories(dir, log, agents, NULL);
    XDC_ASSERT_MSG(failed == 1, "%d agents failed, expected us-east's alone", failed);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(rc == 0, "the coordinator exited %d:\n%s", rc, out ? out : "");
    XDC_ASSERT_STR_CONTAINS(out, "region us-east dropped from the run: missed the outer round at step");
    XDC_ASSERT_STR_CONTAINS(out, "regions dropped: us-east (missed");
    /* The killed worker's store connection lives on until its WAN deadline: not waited for. */
    XDC_ASSERT_MSG(!strstr(out, "still hold the store"), "the coordinator waited for members:\n%s", out);
    expect_survivors(dir, out, "eu-west", "ap-south");
    free(out);
}

/* The end of a 128-step run that took ap-south back (its output `out`, freed here): the host took it, the run
 * ends with all three regions on one model, and ap-south's worker checked the state it got: at the same data
 * batch and AdamW step count as the step it continues from (no batch behind, none twice: every member is at
 * that global batch), in one part from each of the two members (a slice of the state, or the means of the rounds
 * it missed when it rejoined from its snapshot). */
static void expect_rejoined(const char *dir, char *out)
{
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south rejoins the run at the outer round at step");
    XDC_ASSERT_STR_CONTAINS(out, "steps=128");
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    const char *took = strstr(wlog, "region ap-south took the state of round ");
    XDC_ASSERT_MSG(took != NULL, "ap-south took no state:\n%s", wlog);
    long long round, step, epoch, batch, adam_t;
    XDC_ASSERT_EQ(sscanf(took,
                         "region ap-south took the state of round %lld (step %lld, data epoch %lld batch %lld, "
                         "%lld AdamW steps)",
                         &round, &step, &epoch, &batch, &adam_t),
                  5);
    XDC_ASSERT_MSG(epoch == 0 && batch == step && adam_t == step,
                   "state of step %lld at epoch %lld batch %lld, %lld AdamW steps", step, epoch, batch, adam_t);
    /* each member served it: a slice of the state, or (warm: it found its snapshot) the rounds it missed */
    const char *how = strstr(took, "from the round's 2 member regions, ");
    XDC_ASSERT_MSG(
        how && (strncmp(how + 35, "a slice from each", 17) == 0 || strncmp(how + 35, "warm: 2 of them", 15) == 0),
        "ap-south's state not one part from each member:\n%s", took);
    XDC_ASSERT_STR_CONTAINS(took, "hashes checked");
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south rejoined at round");
    free(wlog);
}

/* The end of a 128-step run whose ap-south asked to rejoin at the run's last round (the coordinator's output
 * `out`, freed here): the host did not take it back there (it would train nothing more, and the end would wait
 * for its state), the end did not wait for it, its worker read the end's decision and left as not needed, and
 * the two members end on one model, the run's result. */
static void expect_left_out_at_the_last_round(const char *dir, char *out)
{
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south asks to rejoin at the run's last round (step 128): not taken back");
    XDC_ASSERT_MSG(!strstr(out, "region ap-south rejoins the run"), "ap-south was taken back:\n%s", out);
    expect_survivors(dir, out, "us-east", "eu-west");
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south asked to rejoin, but the run's end was decided first");
    XDC_ASSERT_MSG(!strstr(wlog, "took the state of round"), "ap-south took a state:\n%s", wlog);
    XDC_ASSERT_MSG(!strstr(wlog, "final parameters of region ap-south"), "ap-south reported a model:\n%s", wlog);
    free(wlog);
}

/* Rejoining (docs/runtime.md) in `mode`: ap-south's worker killed, the region dropped at the grace window; its
 * agent started again by hand a few rounds later, it rejoins at an outer round with the state the members send
 * it (hash-checked) and is a member from the next round on. All three regions end on the same parameters, the
 * run's. Files and the run id are named after `name`. `how` (the test hooks of orch_rejoin.c and orch_quorum.c,
 * faults fired by the run's own events):
 * - "absent": the first agent started again has XDC_TEST_REJOIN=absent@ap-south: its worker learns its round,
 *   then gives up before it dials (a joiner that never connects); the members wait for it until its region is
 *   dropped again (its failure report) or their handshake deadline (5 s here), name it and go on, and a
 *   second agent started by hand rejoins;
 * - "last": the coordinator has XDC_TEST_REJOIN_AT=128: the run's last round waits for the region's request
 *   and does not take it back (no round after would have it as a member); the run ends with the other two, and
 *   the restarted agent exits 0, its worker not needed;
 * - NULL: neither. */
static void take_a_region_back(const char *name, const char *mode, const char *how)
{
    need_corpus();
    /* A wider window than the other tests': on a loaded machine a member late past 3 s (seen once) would
     * leave too, and the run would not end with three regions. */
    const char *run = write_run_timeouts(name, mode, 128, "{min_regions: 2, grace: 5s}", ", handshake: 5s");
    int absent = how && strcmp(how, "absent") == 0, last = how && strcmp(how, "last") == 0;
    char dir[600], log[700], agents[700], again[700], where[64], run_id[64];
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    snprintf(agents, sizeof agents, "%s/%s-agents.log", xdc_test_tmpdir(), name);
    snprintf(again, sizeof again, "%s/%s-again.log", xdc_test_tmpdir(), name);
    snprintf(run_id, sizeof run_id, "elastic-%s", name);
    if (last) setenv("XDC_TEST_REJOIN_AT", "128", 1);
    pid_t coord = start_coordinator(run, dir, log, run_id, where, sizeof where);
    unsetenv("XDC_TEST_REJOIN_AT");
    pid_t sh = start_agents(run, dir, where, run_id, "us-east eu-west ap-south", agents);
    XDC_ASSERT_MSG(wait_for_text(agents, "step    20/"), "the run never reached step 20");
    kill(stop_outside_a_round(dir, "ap-south", log, agents), SIGKILL);
    XDC_ASSERT_MSG(wait_for_text(log, "region ap-south dropped from the run"), "ap-south was not dropped");
    /* Out for several rounds: two more progress lines (log_interval steps each) before its agent is back. */
    int lines = count_text(agents, "  loss ");
    XDC_ASSERT_MSG(wait_for_count(agents, "  loss ", lines + 2, 2400), "the run stopped without ap-south");
    if (absent) {
        setenv("XDC_TEST_REJOIN", "absent@ap-south", 1);
        pid_t gone = start_agents(run, dir, where, run_id, "ap-south", again);
        unsetenv("XDC_TEST_REJOIN");
        XDC_ASSERT_MSG(launch_exit(gone) == 1, "the agent whose worker gave up did not fail");
        char *wlog = e2e_region_log(dir, "ap-south");
        XDC_ASSERT_STR_CONTAINS(wlog, "rejoin: region ap-south gives up before it dials the round at step");
        free(wlog);
        XDC_ASSERT_MSG(wait_for_count(log, "region ap-south dropped from the run", 2, 2400),
                       "ap-south was not dropped again");
    }
    pid_t back = start_agents(run, dir, where, run_id, "ap-south", again);
    int failed = launch_exit(sh), failed_again = launch_exit(back);
    e2e_print_stories(dir, log, agents, again);
    char *alog = xdc_test_read_file(agents, NULL), *blog = xdc_test_read_file(again, NULL);
    XDC_ASSERT_MSG(failed == 1, "%d agents failed, expected ap-south's first alone:\n%s", failed, alog ? alog : "");
    XDC_ASSERT_MSG(failed_again == 0, "ap-south's last agent failed:\n%s", blog ? blog : "");
    free(alog);
    free(blog);
    int rc = launch_exit(coord);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(rc == 0, "the coordinator exited %d:\n%s", rc, out ? out : "");
    XDC_ASSERT_MSG(!strstr(out, "still hold the store"), "the coordinator waited for members:\n%s", out);
    if (absent) {
        char *elog = e2e_region_log(dir, "us-east");
        XDC_ASSERT_STR_CONTAINS(elog, "a rejoining region's rank 0 did not connect");
        free(elog);
    }
    if (last) expect_left_out_at_the_last_round(dir, out);
    else expect_rejoined(dir, out);
}

XDC_TEST_T(elastic_coordinator_takes_a_restarted_region_back, 180) { take_a_region_back("rejoin", "diloco", "absent"); }

/* A region back at the run's last round (the finish's) is not taken back: the end does not wait for it to
 * receive the final model (bench-chaos: 17 s of the survivors' time). In DiLoCo: the drop needs the worker
 * stopped outside an outer round, which streaming's round every step or two rarely gives under load (8
 * attempts missed in a full suite); the rule is the quorum's, the same in both modes. Streaming's take-back
 * at an earlier round: elastic_launch_restarts_a_killed_streaming_region_and_it_rejoins. */
XDC_TEST_T(elastic_leaves_a_region_out_at_the_last_round, 180) { take_a_region_back("lastback", "diloco", "last"); }

/* `xdc launch --max-restarts restarts` of `name`'s elastic run (128 steps of `mode`, `elastic`, a 5 s handshake)
 * over its emulated WAN, the environment's `key` set to `val` for it alone (key NULL: none), waited for until
 * step 20; dir[600] and log[700] receive the run's folder and its log. */
static pid_t launch_to_step_20_timeouts(const char *name, const char *mode, const char *elastic, const char *timeouts,
                                        const char *key, const char *val, const char *restarts, char *dir, char *log)
{
    need_corpus();
    const char *run = write_run_timeouts(name, mode, 128, elastic, timeouts);
    snprintf(dir, 600, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, 700, "%s/%s.log", xdc_test_tmpdir(), name);
    if (key) setenv(key, val, 1);
    pid_t p = start_launch(run, NULL, dir, log, restarts);
    if (key) unsetenv(key);
    XDC_ASSERT_MSG(wait_for_text(log, "step    20/"), "the run never reached step 20");
    return p;
}

/* Streaming that trains while it waits (diloco.train_while_waiting): ap-south's worker stops itself (SIGSTOP, the
 * test hook `stall`) once the exchange of its first fragment round at or after step 20 is posted, which the others
 * cannot end without it. It is not dropped at timeouts.heartbeat (2 s here) but waited for up to the grace window
 * (8 s), the others training while their exchange waits; the test continues it once the decider logs that it was
 * quiet half the window. The run ends with all three regions on one model, none dropped, and the others logged the
 * inner steps they ran while their exchange waited. */
XDC_TEST_T(elastic_streaming_waits_for_a_region_stopped_in_its_exchange_and_trains_meanwhile, 180)
{
    char dir[600], log[700];
    pid_t p = launch_to_step_20_timeouts("sxwait", "streaming-tww", "{min_regions: 2, grace: 8s}", ", heartbeat: 2s",
                                         "XDC_TEST_REJOIN", "stall@ap-south", NULL, dir, log);
    XDC_ASSERT_MSG(wait_for_text(log, "waiting on ap-south/south-node1:0, quiet for "),
                   "the decider never said it waited on ap-south's silent exchange");
    signal_worker(dir, "ap-south", SIGCONT);
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_MSG(!strstr(out, "dropped from the run"), "a region was dropped:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "steps=128");
    char h[8][17];
    int n = e2e_final_hashes(dir, h, 8);
    XDC_ASSERT_MSG(n == 3 && strcmp(h[0], h[1]) == 0 && strcmp(h[0], h[2]) == 0, "the regions end on %s, %s and %s",
                   h[0], n > 1 ? h[1] : "-", n > 2 ? h[2] : "-");
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "test hook XDC_TEST_REJOIN=stall@ap-south fires");
    free(wlog);
    wlog = e2e_region_log(dir, "us-east");
    const char *at = strstr(wlog, "inner steps run while it waited: us-east ");
    XDC_ASSERT_MSG(at && atoll(at + strlen("inner steps run while it waited: us-east ")) > 0,
                   "us-east ran no inner step while its exchange waited:\n%s", wlog);
    printf("us-east, while ap-south's exchange was stopped: %.60s\n", at);
    free(wlog);
}

/* The same with a 5 s WAN handshake. */
static pid_t launch_to_step_20(const char *name, const char *mode, const char *elastic, const char *key,
                               const char *val, const char *restarts, char *dir, char *log)
{
    return launch_to_step_20_timeouts(name, mode, elastic, ", handshake: 5s", key, val, restarts, dir, log);
}

/* `xdc launch --max-restarts` in `mode` over its emulated WAN: ap-south's worker killed after step 20, its
 * agent exits and the region leaves; the launcher starts its agent again, whose worker rejoins at an outer
 * round through the relay routes opened for it to dial the lower regions, with the hash-checked state of the
 * members. With `fault` (XDC_TEST_REJOIN=<fault>@<region>, orch_rejoin.c: fired once, in a member's process)
 * its first return fails, named, and a second restart brings it back:
 * - corrupt@us-east: us-east changes its slice after hashing it; the joiner names the part, the member and
 *   both hashes, and exits 65 (data error);
 * - miss@eu-west: eu-west closes the joiner's connection instead of sending its slice (a member that misses
 *   the joiner); the joiner names eu-west (its handshake or its slice, whichever the close cut) and exits.
 * The run ends with exit 0 and all three regions on the run's parameters. */
static void launch_takes_a_region_back(const char *name, const char *mode, const char *fault, const char *named)
{
    int sync = strcmp(mode, "sync") == 0; /* checked against the serial reference: its parameters dumped */
    char dir[600], log[700];
    pid_t p = launch_to_step_20(name, mode,
                                sync ? "{min_regions: 2, grace: 5s}\ndump_params: true" : "{min_regions: 2, grace: 5s}",
                                fault ? "XDC_TEST_REJOIN" : NULL, fault, fault ? "2" : "1", dir, log);
    signal_worker(dir, "ap-south", SIGKILL); /* in an exchange or not: its agent's failure drops it at once */
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, fault ? "starting region ap-south's agents again (restart 2 of --max-restarts 2)"
                                       : "starting region ap-south's agents again (restart 1 of --max-restarts 1)");
    if (fault) { /* the first joiner's worker failed, naming the member */
        char *wlog = e2e_region_log(dir, "ap-south");
        const char *failed = strstr(wlog, "xdc worker: training failed: ");
        XDC_ASSERT_MSG(failed != NULL, "ap-south's first joiner did not fail:\n%s", wlog);
        XDC_ASSERT_MSG(strstr(failed, named) && strstr(failed, named) < strchr(failed, '\n'),
                       "ap-south's first joiner failed without naming '%s':\n%s", named, failed);
        free(wlog);
    }
    if (sync) expect_sync_reference(dir, out, "ap-south", 2, 128);
    expect_rejoined(dir, out);
}

XDC_TEST_T(elastic_launch_restarts_a_killed_region_and_it_rejoins, 180)
{
    /* nosnap: the state's path, whose slice us-east corrupts (the warm path has its own tests below) */
    launch_takes_a_region_back("lrejoin", "diloco", "corrupt@us-east,nosnap@ap-south",
                               "rejoin: the outer momentum (parameters [0, ");
}

/* The same in DiLoCo with nobody waits and the round overlapped (2 steps of 4): the joiner takes the counts of the
 * round that took it back (steps/<that step>) and the state once that round is applied, 2 steps later. */
XDC_TEST_T(elastic_launch_restarts_a_killed_region_nobody_waits_overlapped, 180)
{
    launch_takes_a_region_back("lnwrejoin", "diloco-overlap-nw", NULL, NULL);
}

XDC_TEST_T(elastic_launch_restarts_a_killed_streaming_region_and_it_rejoins, 180)
{
    launch_takes_a_region_back("lsrejoin", "streaming", "miss@eu-west", "eu-west");
}

/* A run of `mode` started as launch_to_step_20 does (`name`, `elastic`, the test hook XDC_TEST_REJOIN=`fault`,
 * `restarts`), ap-south's worker killed after step 20: the run ends with exit 0, all three regions in the result
 * and on one model. Its output (the caller frees it); dir[600] receives the run's folder. */
static char *ap_south_killed_then_back(const char *name, const char *mode, const char *elastic, const char *fault,
                                       const char *restarts, char *dir)
{
    char log[700];
    pid_t p = launch_to_step_20(name, mode, elastic, "XDC_TEST_REJOIN", fault, restarts, dir, log);
    signal_worker(dir, "ap-south", SIGKILL);
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    return out;
}

/* A donor that dies mid-transfer (`kill-donor` in bench-chaos): ap-south's worker killed after step 20 and
 * restarted by `xdc launch --max-restarts 2` (`elastic.min_regions: 1`); at the round that takes it back,
 * eu-west's worker accepts its connection and dies before it sends its slice (XDC_TEST_REJOIN=vanish@eu-west,
 * orch_rejoin.c: fired by the run's own event). The joiner does not wait for that slice until the WAN deadline
 * (30 s here; the engine would wait for the dead process to reconnect): it sees eu-west counted out of the run
 * in the store and gives up at once, naming it; both regions are started again, rejoin, and all three end on
 * one model. */
XDC_TEST_T(elastic_launch_joiner_gives_up_on_a_donor_that_died, 180)
{
    char dir[600];
    char *out = ap_south_killed_then_back("lvanish", "diloco", "{min_regions: 1, grace: 5s}", "vanish@eu-west", "2",
                                          dir);
    XDC_ASSERT_STR_CONTAINS(out, "starting region eu-west's agents again (restart 1 of --max-restarts 2)");
    XDC_ASSERT_STR_CONTAINS(out, "starting region ap-south's agents again (restart 2 of --max-restarts 2)");
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "rejoin: no state from eu-west: its region left the run before its slice of the "
                                  "state came");
    free(wlog);
}

/* A donor stopped at the round that takes a joiner back (bench-chaos: a stall piled on a return): ap-south's worker
 * killed after step 20 and restarted; at that round eu-west's worker stops itself (SIGSTOP) before it takes the
 * joiner's connections (XDC_TEST_REJOIN=freeze@eu-west, orch_rejoin.c), so the joiner's WAN handshake to it hangs:
 * the stopped process's kernel took the connection. The run drops eu-west for its silence in the round's exchange
 * (timeouts.heartbeat 4 s); the joiner sees eu-west counted out and gives up its dial, named, instead of waiting
 * out timeouts.handshake (60 s here, so the test would also pass the slow way but for the line it asserts). Both
 * regions are started again (eu-west once continued), rejoin, and all three end on one model. */
XDC_TEST_T(elastic_launch_joiner_gives_up_its_handshake_to_a_stopped_donor, 180)
{
    char dir[600], log[700];
    pid_t p = launch_to_step_20_timeouts("lfreeze", "diloco", "{min_regions: 1, grace: 5s}",
                                         ", handshake: 60s, heartbeat: 4s", "XDC_TEST_REJOIN", "freeze@eu-west", "2",
                                         dir, log);
    signal_worker(dir, "ap-south", SIGKILL);
    XDC_ASSERT_MSG(wait_for_text(log, "region eu-west left during the exchange of the outer round at step"),
                   "eu-west, stopped at the round that took ap-south back, was not dropped");
    char joiner[800]; /* continued only once the joiner gave up: its handshake would complete then */
    snprintf(joiner, sizeof joiner, "%s/logs/ap-south-south-node1-0.log", dir);
    XDC_ASSERT_MSG(wait_for_text(joiner, " left the run during our WAN handshake ("),
                   "ap-south's joiner did not give up its handshake to the stopped eu-west");
    signal_worker(dir, "eu-west", SIGCONT);
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    free(out);
}

/* Nobody waits for a joiner's state (docs/runtime.md "Rejoining") in `mode`: ap-south's worker killed after step
 * 20 and restarted, ignoring its snapshot (nosnap@ap-south: a snapshot of the round before the one that takes it
 * back needs no bytes, nothing to hold); at the round that takes it back us-east sends its header at once but
 * holds its slice of the state until it finished two more DiLoCo periods (XDC_TEST_REJOIN=hold@us-east,
 * orch_rejoin.c: fired by the run's own event). Meanwhile the joiner takes part in the rounds with weight 0: the members name it in each
 * round ("still taking its state, weight 0", at least two rounds), its state lands, it replays the outer steps
 * of those rounds (in streaming each fragment's on its own range) and all three regions end on one model. The
 * hash is not the run's where the slice was not held: the round the joiner trains again from follows when its
 * state came. */
static void joiner_not_waited_for(const char *name, const char *mode)
{
    char dir[600];
    free(
        ap_south_killed_then_back(name, mode, "{min_regions: 2, grace: 5s}", "hold@us-east,nosnap@ap-south", "1", dir));
    char *east = e2e_region_log(dir, "us-east");
    int rounds = 0;
    for (const char *at = east; (at = strstr(at, "ap-south still taking its state, weight 0")) != NULL; at++) rounds++;
    XDC_ASSERT_MSG(rounds >= 2, "us-east went %d rounds without ap-south's weight while its slice was held:\n%s",
                   rounds, east);
    XDC_ASSERT_STR_CONTAINS(east, "test hook XDC_TEST_REJOIN=hold@us-east fires in region us-east");
    free(east);
    char *wlog = e2e_region_log(dir, "ap-south");
    const char *took = strstr(wlog, "region ap-south took the state of round ");
    XDC_ASSERT_MSG(took != NULL, "ap-south took no state:\n%s", wlog);
    int kept = 0;
    const char *meanwhile = strstr(took, "hashes checked) ");
    XDC_ASSERT_MSG(meanwhile && sscanf(strchr(meanwhile, ';') + 2, "%d rounds with weight 0", &kept) == 1 && kept >= 2,
                   "ap-south replayed %d rounds:\n%s", kept, took);
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south rejoined at round");
    free(wlog);
}

XDC_TEST_T(elastic_launch_does_not_wait_for_a_joiner_whose_state_is_held, 180)
{
    joiner_not_waited_for("lhold", "diloco");
}

XDC_TEST_T(elastic_launch_streaming_does_not_wait_for_a_joiner_whose_state_is_held, 180)
{
    joiner_not_waited_for("lshold", "streaming");
}

/* A streaming joiner trains from its snapshot while its state comes (docs/runtime.md "Rejoining"): as above, in
 * streaming that trains while it waits, with ap-south's own snapshot: us-east holds its slice (the means of the
 * rounds since that snapshot) for two more periods, and ap-south trains from the snapshot meanwhile instead of
 * letting the steps pass, its arrivals saying how many steps it ran. Its state lands, the rounds it kept are replayed
 * from the snapshot, its progress is carried onto the state (local = global + its progress from the snapshot), the
 * rounds after it average that progress in, and all three regions end on one model. */
XDC_TEST_T(elastic_launch_streaming_joiner_trains_from_its_snapshot_while_its_state_is_held, 180)
{
    char dir[600];
    free(
        ap_south_killed_then_back("lstrain", "streaming-tww", "{min_regions: 2, grace: 5s}", "hold@us-east", "1", dir));
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "it trains from its snapshot meanwhile, its progress carried onto the state");
    const char *took = strstr(wlog, "region ap-south took the state of round ");
    XDC_ASSERT_MSG(took != NULL, "ap-south took no state:\n%s", wlog);
    int ran = 0, kept = 0;
    const char *after = strstr(took, "AdamW moments and data position after ");
    XDC_ASSERT_MSG(after && sscanf(after, "AdamW moments and data position after %d inner steps", &ran) == 1 &&
                       ran >= 2,
                   "ap-south ran %d inner steps from its snapshot while its state came:\n%s", ran, took);
    XDC_ASSERT_STR_CONTAINS(took, "inner steps from its snapshot, their progress carried onto the state");
    const char *meanwhile = strstr(took, "hashes checked) ");
    XDC_ASSERT_MSG(meanwhile && sscanf(strchr(meanwhile, ';') + 2, "%d rounds with weight 0", &kept) == 1 && kept >= 2,
                   "ap-south replayed %d rounds:\n%s", kept, took);
    free(wlog);
}

/* The warm rejoin (docs/runtime.md "Rejoining") in `mode`: ap-south's worker dies right after writing its snapshot
 * of round 20 (XDC_TEST_REJOIN=die@ap-south: the run's own event) and `xdc launch --max-restarts 1` starts it
 * again; the host takes it back at round `at` (XDC_TEST_REJOIN_AT): 28 is two DiLoCo rounds (24, 28) or four
 * streaming fragment rounds (22, 24, 26, 28: 2 fragments, one every 2 steps) after its snapshot, 24 the DiLoCo round
 * right after it. `also`: more faults (of the restarted joiner, or of eu-west: then `elastic` lets us-east go on
 * alone and donate alone); `also_at`: other regions' rounds ("36:eu-west"; then ap-south is taken back at `at` alone,
 * NULL: every region). ap-south's log (and eu-west's after it when `also` names eu-west), and the run ends with all
 * three regions on one model. */
static char *back_from_snapshot(const char *name, const char *mode, const char *also, const char *elastic, int donors,
                                int at, const char *also_at)
{
    need_corpus();
    const char *run = write_run_timeouts(name, mode, 64, elastic, ", handshake: 5s");
    char dir[600], log[700], faults[128], want[200], round[128];
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    snprintf(faults, sizeof faults, "die@ap-south%s%s", also ? "," : "", also ? also : "");
    if (also_at) snprintf(round, sizeof round, "%d:ap-south,%s", at, also_at);
    else snprintf(round, sizeof round, "%d", at);
    setenv("XDC_TEST_REJOIN", faults, 1);
    setenv("XDC_TEST_REJOIN_AT", round, 1);
    pid_t p = start_launch(run, NULL, dir, log, "1");
    unsetenv("XDC_TEST_REJOIN");
    unsetenv("XDC_TEST_REJOIN_AT");
    char *out = launch_succeeded(p, dir, log);
    snprintf(want, sizeof want, "region ap-south rejoins the run at the outer round at step %d", at);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    int step = at + (strcmp(mode, "streaming") == 0); /* streaming: once the round's fragment landed */
    snprintf(want, sizeof want,
             "region ap-south took the state of round %d (step %d, data epoch 0 batch %d, %d AdamW steps) from the "
             "round's %d member regions, ",
             at, step, step, step, donors);
    XDC_ASSERT_STR_CONTAINS(wlog, want);
    if (also && strstr(also, "eu-west")) { /* eu-west's log too, after ap-south's */
        char *west = e2e_region_log(dir, "eu-west"), *both = malloc(strlen(wlog) + strlen(west) + 1);
        strcpy(both, wlog);
        strcat(both, west);
        free(west);
        free(wlog);
        return both;
    }
    return wlog;
}

/* Both donors send the means of the rounds it missed before the one that took it back at `at` (4 bytes a parameter
 * each: DiLoCo's round 24, whose exchange at 28 it takes part in; streaming's two fragment rounds, its hand-over
 * after round 24) instead of their slices of the state (12: bf16 moments), the joiner replays them from its
 * snapshot, and its parameters end as the members'. */
static void back_from_snapshot_takes_only_the_rounds_it_missed(const char *name, const char *mode, int at,
                                                               const char *snap, const char *warm_line)
{
    char *wlog = back_from_snapshot(name, mode, NULL, "{min_regions: 2, grace: 5s}", 2, at, NULL);
    XDC_ASSERT_STR_CONTAINS(wlog, snap);
    char want[64];
    snprintf(want, sizeof want, "region ap-south took the state of round %d", at);
    const char *took = strstr(wlog, want);
    double mb = 0, state = 0;
    const char *warm = strstr(took, warm_line);
    XDC_ASSERT_MSG(warm &&
                       sscanf(strstr(warm, "0 the state (") + 13, "%lf MB in all, the state %lf MB", &mb, &state) == 2,
                   "ap-south did not take the warm path:\n%s", took);
    XDC_ASSERT_MSG(mb > 0 && mb < state * 0.7, "the rounds' means were %.3f MB, the state %.3f MB", mb, state);
    free(wlog);
}

XDC_TEST_T(elastic_launch_region_back_from_its_snapshot_takes_only_the_rounds_it_missed, 180)
{
    back_from_snapshot_takes_only_the_rounds_it_missed("lwarm", "diloco", 28,
                                                       "its snapshot of round 20 (step 20, hash ",
                                                       "warm: 2 of them the means of the 1 rounds since its snapshot");
}

/* Taken back at the round right after its snapshot (24, XDC_TEST_REJOIN_AT): the donors' kept rounds lead from its
 * snapshot's hash to their global parameters at that round's start in 0 rounds, so they send no bytes; ap-south
 * takes part in round 24's exchange with weight 0, applies its mean to its snapshot with the members' outer step,
 * trains from step 24 and is a member (weighted) from round 28. All three end on one model. */
XDC_TEST_T(elastic_launch_region_back_at_the_round_after_its_snapshot_trains_from_that_round, 180)
{
    char *wlog = back_from_snapshot("lwarm0", "diloco", NULL, "{min_regions: 2, grace: 5s}", 2, 24, NULL);
    XDC_ASSERT_STR_CONTAINS(wlog, "rejoins at round 24: it takes part with weight 0 from this round's exchange");
    const char *took = strstr(wlog, "region ap-south took the state of round 24");
    XDC_ASSERT_STR_CONTAINS(took, "warm: 2 of them the means of the 0 rounds since its snapshot, replayed from it");
    XDC_ASSERT_STR_CONTAINS(took, "(0.0 MB in all, the state ");
    XDC_ASSERT_STR_CONTAINS(took, "1 rounds with weight 0 from that round on, their outer steps replayed; it trains "
                                  "from step 24, a member from the next round");
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south rejoined at round 28 (");
    free(wlog);
}

/* With train_while_waiting (DiLoCo): ap-south's restarted worker trains from its snapshot of round 20 while it asks;
 * taken back at round 24 (XDC_TEST_REJOIN_AT), the round after its snapshot, which its members began from the same
 * global parameters, the decider counts the steps it posted (at least the first: the request says it begins it)
 * and every member weighs its pseudo-gradient by them instead of 0; it keeps its own AdamW moments and data
 * position, trains from step 24, and all three regions end on one model. */
XDC_TEST_T(elastic_launch_diloco_region_back_trains_from_its_snapshot_while_it_asks, 180)
{
    need_corpus();
    const char *run = write_run_timeouts("learly", "diloco-tww", 64, "{min_regions: 2, grace: 5s}", ", handshake: 5s");
    char dir[600], log[700];
    snprintf(dir, sizeof dir, "%s/learly", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/learly.log", xdc_test_tmpdir());
    setenv("XDC_TEST_REJOIN", "die@ap-south", 1);
    setenv("XDC_TEST_REJOIN_AT", "24", 1);
    pid_t p = start_launch(run, NULL, dir, log, "1");
    unsetenv("XDC_TEST_REJOIN");
    unsetenv("XDC_TEST_REJOIN_AT");
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south rejoins the run at the outer round at step 24");
    static const char counted[] = "the outer round at step 24 takes region ap-south back with the ";
    const char *at = strstr(out, counted);
    int n = 0, ran = 0, seen = 0;
    XDC_ASSERT_MSG(at && sscanf(at + strlen(counted), "%d inner steps it ran from its snapshot of round 20", &n) == 1,
                   "the decider did not count ap-south's steps:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    free(out);
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south trains from its snapshot of round 20 while it asks to rejoin");
    static const char back[] = "region ap-south rejoins at round 24 with the ";
    at = strstr(wlog, back);
    XDC_ASSERT_MSG(
        at && sscanf(at + strlen(back), "%d inner steps it ran from its snapshot (%d counted)", &ran, &seen) == 2,
        "ap-south did not rejoin with its steps:\n%s", wlog);
    printf("ap-south ran %d inner steps from its snapshot while it asked; round 24 counted %d\n", ran, n);
    XDC_ASSERT_MSG(n >= 1 && seen == n && ran >= n && ran <= 4, /* at most what it posted, at most the period */
                   "the decider counted %d, ap-south read %d and ran %d", n, seen, ran);
    const char *took = strstr(wlog, "region ap-south took the state of round 24");
    XDC_ASSERT_MSG(took, "ap-south took no state:\n%s", wlog);
    XDC_ASSERT_STR_CONTAINS(took, "warm: 2 of them the means of the 0 rounds since its snapshot");
    XDC_ASSERT_STR_CONTAINS(took, "its own AdamW moments and data position");
    free(wlog);
    char *east = e2e_region_log(dir, "us-east");
    XDC_ASSERT_STR_CONTAINS(east, "round 24: ap-south taken back at this round, in its exchange with the inner steps "
                                  "it ran from its snapshot");
    free(east);
}

/* The same in streaming: the snapshot is of fragment 0's round 20, taken once it landed (step 21); taken back at
 * round 24, each donor sends the two fragment rounds' means (22, 24) over its part of their fragments (each
 * parameter once: 4 bytes a parameter), the joiner replays them in order, each on its fragment's range, and its
 * parameters end as the members'. */
XDC_TEST_T(elastic_launch_streaming_region_back_from_its_snapshot_takes_only_the_rounds_it_missed, 180)
{
    back_from_snapshot_takes_only_the_rounds_it_missed("lswarm", "streaming", 24,
                                                       "its snapshot of round 20 (step 21, hash ",
                                                       "warm: 2 of them the means of the 2 rounds since its snapshot");
}

/* Taken back at round 36 (XDC_TEST_REJOIN_AT), three DiLoCo rounds after its snapshot of round 20 (24, 28, 32: past
 * the one round whose means the members keep): each donor finds the snapshot's round and hash among the rounds it
 * kept the hash of and sends the global parameters and momentum of its slice alone, coded (the test topology's
 * 1 Gbit/s links are slow enough for zstd); ap-south keeps its snapshot's AdamW moments, takes fewer bytes than
 * the global parameters and momentum as they are (themselves 2/3 of the state), replays round 36's mean, and all
 * three regions end on one model (back_from_snapshot). */
XDC_TEST_T(elastic_launch_region_back_past_the_kept_rounds_takes_parameters_and_momentum_alone, 180)
{
    char *wlog = back_from_snapshot("lpast", "diloco", NULL, "{min_regions: 2, grace: 5s}", 2, 36, NULL);
    const char *took = strstr(wlog, "region ap-south took the state of round 36");
    static const char how[] = "a slice from each (global parameters and outer momentum, its own AdamW moments from "
                              "its snapshot, ";
    const char *at = took ? strstr(took, how) : NULL;
    double mb = 0, raw = 0, state = 0;
    XDC_ASSERT_MSG(at && sscanf(at + strlen(how), "%lf MB, coded from %lf, the state %lf MB", &mb, &raw, &state) == 3,
                   "ap-south did not take the global parameters and momentum alone:\n%s", took ? took : wlog);
    XDC_ASSERT_MSG(mb > 0 && mb < raw && raw < state * 0.7, "%.3f MB coded from %.3f, the state %.3f MB", mb, raw,
                   state);
    XDC_ASSERT_STR_CONTAINS(took, "not warm: its snapshot's round is older than the rounds this member keeps");
    free(wlog);
}

/* A donor that rejoined itself still knows the rounds before its return: eu-west's and ap-south's workers both die
 * right after their snapshots of round 20 (XDC_TEST_REJOIN=die@...), us-east goes on alone, eu-west is taken back at
 * round 36 and ap-south at 44 (XDC_TEST_REJOIN_AT=36:eu-west,44:ap-south). eu-west's restarted worker took back the
 * round hashes its snapshot carries, so at 44 it finds ap-south's round 20 among them as us-east does, and both send
 * the global parameters and momentum alone (before, eu-west knew only the rounds since its return and sent its
 * slice of the whole state, the AdamW moments too). All three end on one model. */
XDC_TEST_T(elastic_launch_rejoined_donor_knows_the_rounds_before_its_return, 180)
{
    char *logs = back_from_snapshot("lknown", "diloco", "die@eu-west", "{min_regions: 1, grace: 5s}", 2, 44,
                                    "36:eu-west");
    XDC_ASSERT_STR_CONTAINS(logs, "region eu-west rejoins at round 36: ");
    XDC_ASSERT_STR_CONTAINS(logs, "region ap-south took the state of round 44 (step 44, data epoch 0 batch 44, 44 "
                                  "AdamW steps) from the round's 2 member regions, a slice from each (global "
                                  "parameters and outer momentum, its own AdamW moments from its snapshot, ");
    const char *gave = strstr(logs, "round 44: sending region ap-south rank 0 parameters [");
    XDC_ASSERT_MSG(gave != NULL, "eu-west sent ap-south nothing at round 44:\n%s", logs);
    const char *eol = strchr(gave, '\n'), *alone = strstr(gave, "global parameters and momentum alone");
    XDC_ASSERT_MSG(alone && (!eol || alone < eol),
                   "eu-west did not send ap-south its global parameters and momentum alone: %.300s", gave);
    free(logs);
}

/* A snapshot that is not the members' model (stale: valid, hashed again after one parameter changed), or a file
 * cut by a crash (torn: its checksum fails): the donors, or the joiner itself, refuse it, the joiner takes the
 * whole state and says why, and every region still ends on one model. */
XDC_TEST_T(elastic_launch_region_with_a_stale_or_torn_snapshot_takes_the_whole_state, 240)
{
    char *wlog = back_from_snapshot("lstale", "diloco", "stale@ap-south", "{min_regions: 2, grace: 5s}", 2, 28, NULL);
    XDC_ASSERT_STR_CONTAINS(wlog, "a slice from each (global parameters, outer momentum and AdamW moments as bf16, ");
    XDC_ASSERT_STR_CONTAINS(wlog, "not warm: its snapshot's global parameters differ from this member's at that round");
    free(wlog);
    wlog = back_from_snapshot("ltorn", "diloco", "torn@ap-south", "{min_regions: 2, grace: 5s}", 2, 28, NULL);
    XDC_ASSERT_STR_CONTAINS(wlog, "no snapshot to rejoin from (");
    XDC_ASSERT_STR_CONTAINS(wlog, "checksum mismatch");
    XDC_ASSERT_STR_CONTAINS(wlog, "not warm: it found no valid snapshot of its own");
    free(wlog);
}

/* The same refusal in streaming: a stale snapshot's hash is on no donor's chain of fragment rounds. */
XDC_TEST_T(elastic_launch_streaming_region_with_a_stale_snapshot_takes_the_whole_state, 180)
{
    char *wlog = back_from_snapshot("lsstale", "streaming", "stale@ap-south", "{min_regions: 2, grace: 5s}", 2, 28,
                                    NULL);
    XDC_ASSERT_STR_CONTAINS(wlog, "a slice from each (global parameters, outer momentum and AdamW moments as bf16, ");
    XDC_ASSERT_STR_CONTAINS(wlog, "not warm: its snapshot's global parameters differ from this member's at that round");
    free(wlog);
}

/* Two joiners of one round, one with a snapshot and one without: eu-west and ap-south both die after their
 * snapshots of round 20, us-east goes on alone and takes both back at round 28; ap-south's restart ignores its
 * snapshot (nosnap). us-east stages both payloads once: eu-west takes round 24's means, ap-south the state,
 * and all three end on one model. */
XDC_TEST_T(elastic_launch_two_joiners_one_warm_one_not_each_take_their_own, 180)
{
    char *logs = back_from_snapshot("lmixed", "diloco", "die@eu-west,nosnap@ap-south", "{min_regions: 1, grace: 5s}", 1,
                                    28, NULL);
    XDC_ASSERT_STR_CONTAINS(logs, "region ap-south took the state of round 28 (step 28, data epoch 0 batch 28, 28 "
                                  "AdamW steps) from the round's 1 member regions, a slice from each (");
    XDC_ASSERT_STR_CONTAINS(logs, "not warm: it found no valid snapshot of its own");
    XDC_ASSERT_STR_CONTAINS(logs, "region eu-west took the state of round 28 (step 28, data epoch 0 batch 28, 28 "
                                  "AdamW steps) from the round's 1 member regions, warm: 1 of them the means of the "
                                  "1 rounds since its snapshot");
    free(logs);
}

/* Elastic sync mode: the round that takes ap-south back is a step; after its update the members hand the joiner
 * the live parameters, the AdamW moments and the data position of the next step, and it averages from there on. */
XDC_TEST_T(elastic_launch_restarts_a_killed_sync_region_and_it_rejoins, 180)
{
    launch_takes_a_region_back("lsyrejoin", "sync", NULL, NULL);
}

/* Two regions back at one round: `xdc launch --max-restarts 1` with `elastic.min_regions: 1`, eu-west's and
 * ap-south's workers killed after step 20; us-east goes on alone, and with XDC_TEST_REJOIN_AT=64 (the host
 * takes regions back at that round only, waiting there until both asked) both restarted regions are taken
 * back at round 64: each takes the whole state from us-east, and ap-south dials eu-west (the higher joiner
 * dials the lower, through a relay route the launcher opened again to eu-west's new process). All three end
 * on one model. */
XDC_TEST_T(elastic_launch_takes_two_regions_back_at_one_round, 180)
{
    char dir[600], log[700];
    pid_t p = launch_to_step_20("ltwo", "diloco", "{min_regions: 1, grace: 5s}", "XDC_TEST_REJOIN_AT", "64", "1", dir,
                                log);
    signal_worker(dir, "eu-west", SIGKILL);
    signal_worker(dir, "ap-south", SIGKILL);
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, "region eu-west rejoins the run at the outer round at step 64");
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south rejoins the run at the outer round at step 64");
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_one_model(dir, out, 3);
    free(out);
    static const char *const back[2] = {"eu-west", "ap-south"};
    for (int i = 0; i < 2; i++) {
        char *wlog = e2e_region_log(dir, back[i]), want[200];
        snprintf(want, sizeof want,
                 "region %s took the state of round 64 (step 64, data epoch 0 batch 64, 64 AdamW steps) from the "
                 "round's 1 member regions",
                 back[i]);
        XDC_ASSERT_STR_CONTAINS(wlog, want);
        free(wlog);
    }
}

/* A stopped worker learns its drop as it wakes (docs/runtime.md "Leaving"): ap-south's worker stopped outside an
 * outer round after step 20 under `xdc launch --max-restarts 1`, kept stopped past the launcher's line that drops it
 * and until the others logged three more progress lines (at least 20 steps: many times a step of its own), then
 * continued. It finds the clock far past its inner steps, reads its region's left/<region> count and exits 69 at the
 * end of that inner step, saying it noticed on waking, not at its next outer round; its agent is started again,
 * the region rejoins, and all three regions end on one model. */
XDC_TEST_T(elastic_launch_stopped_worker_leaves_as_it_wakes_and_rejoins, 180)
{
    char dir[600], log[700];
    pid_t p = launch_to_step_20("lwake", "diloco", "{min_regions: 2, grace: 3s}", NULL, NULL, "1", dir, log);
    pid_t pid = stop_outside_a_round(dir, "ap-south", log, log);
    XDC_ASSERT_MSG(wait_for_text(log, "region ap-south dropped from the run: missed the outer round"),
                   "ap-south was not dropped after the grace window");
    int lines = count_text(log, "  loss ");
    XDC_ASSERT_MSG(wait_for_count(log, "  loss ", lines + 3, 2400), "the run stopped progressing");
    kill(pid, SIGCONT);
    char *out = launch_succeeded(p, dir, log);
    char *wlog = e2e_region_log(dir, "ap-south");
    XDC_ASSERT_STR_CONTAINS(wlog, "region ap-south was dropped from the run (it missed the 3.0 s grace window or lost "
                                  "a worker), so it leaves the run; restarting its agents brings it back at a later "
                                  "outer round; noticed on waking, ");
    XDC_ASSERT_MSG(!strstr(wlog, "was dropped from round"), "ap-south's worker ran on to its next outer round:\n%s",
                   wlog);
    free(wlog);
    expect_rejoined(dir, out);
}

/* A straggler at the end: ap-south's worker stopped (SIGSTOP) outside a round after step 20, dropped at the
 * grace window, and never continued. Once the end is decided the launcher stops the agents of the region out
 * of the run (its stopped worker gets SIGKILL after the agent's grace) instead of waiting for them, and the
 * run ends with exit 0 on the two others. Without --max-restarts: the first agent of a region is stopped too. */
XDC_TEST_T(elastic_launch_stops_the_agents_of_a_region_out_at_the_end, 120)
{
    need_corpus();
    const char *run = write_run_timeouts("lstop", "diloco", 128, "{min_regions: 2, grace: 3s}", "");
    char dir[600], log[700];
    snprintf(dir, sizeof dir, "%s/lstop", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/lstop.log", xdc_test_tmpdir());
    pid_t p = start_launch(run, NULL, dir, log, NULL);
    XDC_ASSERT_MSG(wait_for_text(log, "step    20/"), "the run never reached step 20");
    stop_outside_a_round(dir, "ap-south", log, log);
    char *out = launch_succeeded(p, dir, log);
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south dropped from the run: missed the outer round at step ");
    XDC_ASSERT_STR_CONTAINS(out, "the run ended with region ap-south out of it: stopping its agents");
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west\n");
    free(out);
}

/* Sync mode with delayed averaging keeps its all-or-nothing rule (a round is open across every step boundary),
 * and says so when the run file asks for elastic rounds. */
XDC_TEST_T(elastic_settings_in_sync_mode_are_named_as_ignored, 120)
{
    char out[16384];
    int rc = launch_short("sync", "sync", 2, "{min_regions: 2}\nsync: {delay_steps: 1}", "", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "elastic settings ignored: sync mode over 3 regions keeps every region in every "
                                 "round");
}

/* --max-restarts: a number of restarts, `xdc launch`'s alone (the coordinator starts no agents), and named
 * as ignored where no outer round could take a region back. */
XDC_TEST_T(elastic_max_restarts_is_checked_and_named_where_it_does_nothing, 120)
{
    char out[16384], cmd[1200];
    need_corpus();
    int rc = launch_short("restarts-bad", "diloco", 2, "{min_regions: 2}", "--max-restarts -1", out, sizeof out);
    XDC_ASSERT_MSG(rc == 64, "launch exited %d, expected 64:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "xdc launch: --max-restarts:");
    snprintf(cmd, sizeof cmd, "%s coordinator -t %s -c %s --run-dir %s/coord --host 127.0.0.1 --max-restarts 1 2>&1",
             xdc_test_bin(), TOPO3, write_run("restarts-coord", "diloco", 2, "{}"), xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 64, "coordinator exited %d, expected 64:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "the coordinator starts no agents");
    /* sync with delayed averaging: all or nothing, whatever its elastic settings */
    rc = launch_short("restarts-sync", "sync", 2, "{}\nsync: {delay_steps: 1}", "--max-restarts 1", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "--max-restarts 1 ignored: sync mode over 3 regions has no outer round to rejoin at");
}
