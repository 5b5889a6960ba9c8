/* test_rdzv.c — the rendezvous store on its own: members join over mutual TLS, a get waits for a later
 * set, a reusable barrier runs many generations, a member whose certificate names another region is
 * refused, and a barrier that times out names the member missing (tests/e2e/test_hostile_rdzv.c tries the
 * attacks). Then the supervise loop around it
 * (orchestrator/launch/orch_proc.c): SIGTERM to an agent and to a coordinator (each after a SIGPIPE it
 * must ignore), SIGINT to a launcher, each ending with exit 75 and no worker left behind. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_time.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/rdzv/orch_rdzv.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MEMBERS 3
#define ROUNDS  40

typedef struct {
    xdc_wan_engine *eng;
    int port, idx;
    xdc_err_t rc;
    char why[512];
} member_ctx;

static void *member_main(void *arg)
{
    member_ctx *m = arg;
    rdzv_client *c = NULL;
    xdc_diag d = {{0}};
    char name[64], val[64], key[32];
    snprintf(name, sizeof name, "us/node:%d", m->idx);
    m->rc = rdzv_client_create(m->eng, "127.0.0.1", m->port, name, 10000, &c, &d);
    for (int round = 0; round < ROUNDS && m->rc == XDC_OK; round++) {
        /* Member 0 publishes after everyone is waiting for it; the others read it. */
        snprintf(key, sizeof key, "k/%d", round);
        m->rc = rdzv_barrier(c, "round", MEMBERS, 10000, &d);
        if (m->rc != XDC_OK) break;
        if (m->idx == 0) {
            snprintf(val, sizeof val, "v%d", round);
            m->rc = rdzv_set(c, key, val, &d);
        } else {
            m->rc = rdzv_get(c, key, 10000, val, sizeof val, &d);
            if (m->rc == XDC_OK && (val[0] != 'v' || atoi(val + 1) != round)) {
                snprintf(m->why, sizeof m->why, "round %d read '%s'", round, val);
                m->rc = XDC_ERR_CORRUPT;
            }
        }
    }
    if (m->rc != XDC_OK && !m->why[0]) snprintf(m->why, sizeof m->why, "%s", d.msg);
    rdzv_client_destroy(c);
    return NULL;
}

XDC_TEST_T(rdzv_members_get_set_and_reuse_a_barrier, 120)
{
    const char *dir = "certs"; /* under the test's folder */
    wan_test_node srv_node, node[MEMBERS];
    wan_test_issue(dir, RDZV_SERVER_REGION, 0, 30, -60, &srv_node);
    for (int i = 0; i < MEMBERS; i++) wan_test_issue(dir, "us", i, 30, -60, &node[i]);
    xdc_wan_engine *srv_eng = wan_test_engine(&srv_node, 1, 10000);
    const char *expected[MEMBERS] = {"us/node:0", "us/node:1", "us/node:2"};
    rdzv_server *srv;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(srv_eng, "127.0.0.1", 0, expected, MEMBERS, &srv, &d));
    XDC_ASSERT_OK(rdzv_server_grant(srv, "k/", "us/node:0", &d));
    member_ctx m[MEMBERS];
    pthread_t th[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) {
        m[i] = (member_ctx){.eng = wan_test_engine(&node[i], 1, 10000), .port = rdzv_server_port(srv), .idx = i};
        pthread_create(&th[i], NULL, member_main, &m[i]);
    }
    for (int i = 0; i < MEMBERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < MEMBERS; i++)
        XDC_ASSERT_MSG(m[i].rc == XDC_OK, "member %d: %s: %s", i, xdc_errname(m[i].rc), m[i].why);
    char val[64], missing[512];
    XDC_ASSERT(rdzv_server_get(srv, "k/39", val, sizeof val) == 0 && strcmp(val, "v39") == 0);
    XDC_ASSERT(rdzv_server_get(srv, "nope", val, sizeof val) == -1);
    XDC_ASSERT_EQ(rdzv_server_missing(srv, -1, missing, sizeof missing), 0);

    /* A member claiming another region than its certificate's is refused; a lone barrier names who is
     * missing when it times out. */
    rdzv_client *c;
    XDC_ASSERT_ERR(rdzv_client_create(m[0].eng, "127.0.0.1", rdzv_server_port(srv), "eu/node:0", 5000, &c, &d),
                   XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "the name's region and rank are not the certificate's");
    XDC_ASSERT_OK(rdzv_client_create(m[1].eng, "127.0.0.1", rdzv_server_port(srv), "us/node:1", 5000, &c, &d));
    XDC_ASSERT_ERR(rdzv_barrier(c, "lonely", MEMBERS, 300, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "missing: us/node:0");
    XDC_ASSERT_ERR(rdzv_try_get(c, "absent", val, sizeof val, &d), XDC_ERR_AGAIN);
    /* Its heartbeat's status, as the host reads it at once (rdzv_server_status): the host takes it from the
     * connection's thread, so it is looked for a bounded while. Member 2, gone, sent no step. */
    XDC_ASSERT_OK(rdzv_heartbeat(c, "step 7", &d));
    for (int i = 0; i < 500 && rdzv_server_status(srv, 1, val, sizeof val) != 0; i++) poll(NULL, 0, 10);
    XDC_ASSERT_MSG(rdzv_server_status(srv, 1, val, sizeof val) == 0 && strcmp(val, "step 7") == 0,
                   "member 1's status: '%s'", val);
    XDC_ASSERT(rdzv_server_status(srv, 2, val, sizeof val) != 0 || strncmp(val, "step", 4) != 0);
    XDC_ASSERT_EQ(rdzv_server_status(srv, MEMBERS, val, sizeof val), -1);
    rdzv_client_destroy(c);
    rdzv_server_destroy(srv);
    for (int i = 0; i < MEMBERS; i++) xdc_wan_engine_destroy(m[i].eng);
    xdc_wan_engine_destroy(srv_eng);
}

/* ---- the supervise loop, through the real commands ---------------------------------------------- */

#define SUP_DATA "/usr/share/games/fortunes"
#define SUP_TOPO "examples/topology/demo-2region.yaml"

static void sup_sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

/* A long sync run of the tiny model; members wait up to 60 s for each other. */
static const char *sup_run_file(void)
{
    static char path[512];
    char cwd[400], text[1024];
    if (access(SUP_DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes)", SUP_DATA);
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/long.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\npipeline_stages: 2\nmicrobatches: 2\n"
             "steps: 100000\ncodec: none\nthreads: 1\ntimeouts: {rendezvous: 60s, operation: 60s}\n",
             cwd, SUP_DATA);
    xdc_test_write_file(path, text);
    return path;
}

/* fork + exec `xdc ARGS...` with its output in `log`. */
static pid_t sup_start(const char *log, const char *const *args)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        char *argv[32];
        int n = 0;
        argv[n++] = (char *)xdc_test_bin();
        while (args[n - 1] && n < 31) argv[n] = (char *)args[n - 1], n++;
        argv[n] = NULL;
        execv(xdc_test_bin(), argv);
        _exit(127);
    }
    return p;
}

/* The pid in DIR/pids/NAME.pid, waiting for it (bounded). */
static pid_t sup_worker_pid(const char *dir, const char *name)
{
    char path[800];
    snprintf(path, sizeof path, "%s/pids/%s.pid", dir, name);
    for (int t = 0; t < 1200; t++) {
        char *text = xdc_test_read_file(path, NULL);
        pid_t pid = text ? (pid_t)atoi(text) : 0;
        free(text);
        if (pid > 0) return pid;
        sup_sleep_ms(25);
    }
    XDC_FAIL("worker %s never started (no %s)", name, path);
    return 0;
}

/* Wait (bounded by `limit_ms`) for `p` to end; its exit status, or -1 if it did not exit normally. */
static int sup_wait_exit(pid_t p, int limit_ms, int *took_ms)
{
    int status = 0, waited = 0;
    while (waitpid(p, &status, WNOHANG) == 0) {
        if (waited >= limit_ms) {
            kill(p, SIGKILL);
            waitpid(p, &status, 0);
            XDC_FAIL("pid %d still running %d ms after the signal", (int)p, limit_ms);
        }
        sup_sleep_ms(10);
        waited += 10;
    }
    *took_ms = waited;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* An agent whose workers wait at the rendezvous for a region that never comes: SIGTERM stops them
 * within the grace, the agent exits 75 and leaves none; the coordinator exits 75 on SIGTERM too. */
XDC_TEST_T(orch_sigterm_stops_an_agent_and_a_coordinator_with_75, 120)
{
    const char *run = sup_run_file();
    char dir[600], clog[700], alog[700];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(clog, sizeof clog, "%s/coord.log", xdc_test_tmpdir());
    snprintf(alog, sizeof alog, "%s/agent.log", xdc_test_tmpdir());
    const char *cargs[] = {"coordinator", "-t",        SUP_TOPO, "-c", run,        "--run-dir", dir,
                           "--host",      "127.0.0.1", "--port", "0",  "--run-id", "sig-test",  NULL};
    pid_t coord = sup_start(clog, cargs);
    char *addr = NULL;
    for (int i = 0; i < 400 && !addr; i++) {
        char *text = xdc_test_read_file(clog, NULL);
        char *at = text ? strstr(text, "--coordinator ") : NULL;
        if (at) addr = strndup(at + 14, strcspn(at + 14, " \n"));
        free(text);
        if (!addr) sup_sleep_ms(25);
    }
    XDC_ASSERT_MSG(addr != NULL, "the coordinator did not start");
    const char *aargs[] = {"agent",  "-t", SUP_TOPO,        "-c", run,        "--run-dir", dir, "--region", "us-east",
                           "--node", "0",  "--coordinator", addr, "--run-id", "sig-test",  NULL};
    pid_t agent = sup_start(alog, aargs);
    pid_t w0 = sup_worker_pid(dir, "us-east-0"), w1 = sup_worker_pid(dir, "us-east-1");
    sup_sleep_ms(300);
    /* SIGPIPE is ignored: were it not, it would end the process before the SIGTERM behind it. */
    XDC_ASSERT(kill(agent, SIGPIPE) == 0);
    XDC_ASSERT(kill(agent, SIGTERM) == 0);
    int took;
    int ex = sup_wait_exit(agent, 8000, &took);
    XDC_ASSERT_MSG(ex == 75, "agent exited %d after SIGTERM, expected 75", ex);
    XDC_ASSERT_MSG(kill(w0, 0) != 0 && kill(w1, 0) != 0, "a worker outlived its agent");
    printf("agent stopped %d ms after SIGTERM\n", took);
    XDC_ASSERT(kill(coord, SIGPIPE) == 0);
    XDC_ASSERT(kill(coord, SIGTERM) == 0);
    ex = sup_wait_exit(coord, 8000, &took);
    XDC_ASSERT_MSG(ex == 75, "coordinator exited %d after SIGTERM, expected 75", ex);
    char *text = xdc_test_read_file(clog, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "xdc coordinator: interrupted; stopping");
    free(text);
    free(addr);
    /* Without --host the coordinator does not pick an address for the operator. */
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "%s coordinator -t %s -c %s --run-dir %s --run-id sig-test", xdc_test_bin(), SUP_TOPO,
             run, dir);
    ex = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(ex == 64, "coordinator without --host exited %d:\n%s", ex, out);
    XDC_ASSERT_STR_CONTAINS(out, "--host is required");
}

/* Ctrl-C on `xdc launch` mid-run: every agent and worker stops, the launcher exits 75. */
XDC_TEST_T(orch_sigint_stops_a_launch_with_75_and_no_workers_left, 120)
{
    const char *run = sup_run_file();
    char dir[600], log[700];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/launch.log", xdc_test_tmpdir());
    const char *args[] = {"launch", "-t", SUP_TOPO, "-c", run, "--run-dir", dir, NULL};
    pid_t launcher = sup_start(log, args);
    const char *names[4] = {"us-east-0", "us-east-1", "eu-west-0", "eu-west-1"};
    pid_t w[4];
    for (int i = 0; i < 4; i++) w[i] = sup_worker_pid(dir, names[i]);
    sup_sleep_ms(300);
    XDC_ASSERT(kill(launcher, SIGINT) == 0);
    int took;
    int ex = sup_wait_exit(launcher, 15000, &took);
    XDC_ASSERT_MSG(ex == 75, "launch exited %d after SIGINT, expected 75", ex);
    for (int i = 0; i < 4; i++) XDC_ASSERT_MSG(kill(w[i], 0) != 0, "worker %s outlived the launcher", names[i]);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "xdc launch: interrupted; stopping");
    free(text);
    printf("launch stopped %d ms after SIGINT\n", took);
}

/* A worker that fails ends its agent with the worker's own exit status (78 here: a run file it refuses),
 * and the agent's failure note names it. */
XDC_TEST_T(orch_agent_ends_with_its_failed_workers_exit_status, 60)
{
    char cwd[400], run[600], text[1024], dir[700], cmd[2048], out[8192];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(run, sizeof run, "%s/bad.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text, "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\nsteps: -5\n", cwd,
             SUP_DATA);
    xdc_test_write_file(run, text);
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    /* The node's own credentials (the agent checks them before it starts a worker). */
    snprintf(cmd, sizeof cmd,
             "x=%1$s; d=%2$s/certs; mkdir -p $d && $x certs init --dir $d --run bad-test >/dev/null && "
             "$x certs issue --dir $d --region us-east --rank 0 >/dev/null && "
             "$x certs issue --dir $d --region us-east --rank 1 >/dev/null && "
             "timeout 30 $x agent -t %3$s -c %4$s --run-dir %2$s --region us-east --node 0 --host east-node1 "
             "--coordinator 127.0.0.1:1 --run-id bad-test",
             xdc_test_bin(), dir, SUP_TOPO, run);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "agent exited %d, expected its worker's 78:\n%s", rc, out);
    snprintf(run, sizeof run, "%s/failed-us-east-0", dir);
    char *note = xdc_test_read_file(run, NULL);
    XDC_ASSERT_MSG(note != NULL, "no failure note at %s", run);
    XDC_ASSERT_STR_CONTAINS(note, "worker us-east/east-node1:");
    XDC_ASSERT_STR_CONTAINS(note, "exited with status 78");
    free(note);
}

/* ---- the supervise loop on its own, with children forked here --------------------------------- */

/* A child in its own process group that exits with `code` after `ms` (code < 0: ignores SIGTERM and
 * never exits), added to `g` as orch_procs_spawn would (with a pidfd when `pidfd` is set). */
static void sup_adopt(orch_procs *g, const char *name, int code, int ms, int pidfd)
{
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0);
        if (code < 0) {
            signal(SIGTERM, SIG_IGN);
            for (;;) pause();
        }
        sup_sleep_ms(ms);
        _exit(code);
    }
    XDC_ASSERT(p > 0);
    setpgid(p, p);
    int i = g->n++;
    g->pid[i] = p;
    g->pidfd[i] = pidfd ? (int)syscall(SYS_pidfd_open, p, 0) : -1;
    snprintf(g->name[i], sizeof g->name[i], "%s", name);
    g->alive++;
}

typedef struct {
    int failures;
    char first[ORCH_PROC_NAME_MAX];
} sup_seen;

static int sup_failed(void *ctx, const orch_procs *g, int i, pid_t pid, int status)
{
    sup_seen *seen = ctx;
    (void)pid;
    (void)status;
    if (!seen->failures++) snprintf(seen->first, sizeof seen->first, "%s", g->name[i]);
    return 0;
}

/* Children that exit 0 end the run well; the first failure names its child, passes its status on and
 * stops the rest: one that ignores SIGTERM is killed once the grace has passed, and nobody is left. */
XDC_TEST(orch_procs_supervise_passes_on_a_failure_and_kills_after_the_grace)
{
    orch_procs g;
    sup_seen seen = {0};
    orch_supervisor sup = {.ctx = &seen, .failed = sup_failed};
    int child_exit = -1;
    orch_procs_init(&g, 1);
    XDC_ASSERT_EQ(g.grace_ms, ORCH_PROC_GRACE_MS);
    sup_adopt(&g, "ok-a", 0, 20, 1);
    sup_adopt(&g, "ok-b", 0, 40, 0);
    XDC_ASSERT_OK(orch_procs_supervise(&g, &sup, &child_exit));
    XDC_ASSERT_EQ(child_exit, 0);
    XDC_ASSERT_EQ(seen.failures, 0);
    orch_procs_close(&g);

    orch_procs_init(&g, 2);
    XDC_ASSERT_EQ(g.grace_ms, 2 * ORCH_PROC_GRACE_MS);
    g.grace_ms = 300; /* the test's own grace, to keep it short */
    sup_adopt(&g, "stubborn", -1, 0, 1);
    sup_adopt(&g, "fails", 3, 50, 0);
    sup_adopt(&g, "later", 4, 3000, 1);
    pid_t stubborn = g.pid[0], later = g.pid[2];
    uint64_t t0 = xdc_now_ns();
    XDC_ASSERT_ERR(orch_procs_supervise(&g, &sup, &child_exit), XDC_ERR_PEER_LOST);
    double took_ms = (double)(xdc_now_ns() - t0) / 1e6;
    XDC_ASSERT_EQ(child_exit, 3);
    XDC_ASSERT_EQ(seen.failures, 1);
    XDC_ASSERT_STR_CONTAINS(seen.first, "fails");
    XDC_ASSERT_EQ(g.alive, 0);
    XDC_ASSERT_MSG(took_ms >= 300 && took_ms < 2500, "supervise took %.0f ms (grace 300 ms)", took_ms);
    XDC_ASSERT(kill(stubborn, 0) != 0 && kill(later, 0) != 0);
    orch_procs_close(&g);
}
