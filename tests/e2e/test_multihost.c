/* test_multihost.c — the launch scripts run for real, as their headers tell a user: examples/launch/
 * slurm.sbatch submitted once per region to a one-node Slurm cluster brought up for the test
 * (tests/multihost/slurm.sh), and each region's agent started separately through examples/launch/ssh.sh
 * on a network host of its own (a namespace behind the netns WAN emulator, examples/launch/netns.sh).
 * Both runs end with the params hash of `xdc launch` of the same topology and run file. Root only:
 * skipped otherwise. */
#include "tests/xdc_test.h"
#include "tests/test_run_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"

static void need_root_and_corpus(const char *what)
{
    if (geteuid() != 0) xdc_test_skip("%s needs root", what);
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
}

/* The params_xxh64 of the `final ...` line in out, into hash[64]; fails the test when there is none. */
static void final_hash(const char *out, const char *who, char hash[64])
{
    const char *f = strstr(out, "final val_loss=");
    const char *h = f ? strstr(f, "params_xxh64=") : NULL;
    XDC_ASSERT_MSG(h != NULL, "%s printed no final line:\n%s", who, out);
    h += strlen("params_xxh64=");
    size_t n = strcspn(h, " \n");
    XDC_ASSERT(n > 0 && n < 64);
    snprintf(hash, 64, "%.*s", (int)n, h);
    XDC_ASSERT_MSG(strcmp(hash, "0") != 0, "%s reported no result (params_xxh64=0)", who);
}

/* `xdc launch` of topo and run on this machine (emulated WAN): the reference hash. */
static void launch_hash(const char *topo, const char *run, char hash[64])
{
    static char out[65536];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t %s -c %s --run-dir %s/launch", xdc_test_bin(), topo, run,
             xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "xdc launch exited %d:\n%s", rc, out);
    final_hash(out, "xdc launch", hash);
}

/* Run a rehearsal script to success (its output in out; exit 77, its answer when not root, skips) and
 * require the params hash of its run's final line to be `xdc launch`'s for the same files. */
static void run_and_compare(const char *cmd, const char *who, const char *topo, const char *run, char *out, size_t cap)
{
    char want[64], got[64];
    launch_hash(topo, run, want);
    int rc = xdc_test_run(cmd, out, cap);
    if (rc == 77) xdc_test_skip("%s", out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", who, rc, out);
    final_hash(out, who, got);
    printf("%s: params_xxh64 %s, xdc launch %s\n", who, got, want);
    XDC_ASSERT_MSG(strcmp(got, want) == 0, "%s ended with params_xxh64=%s, xdc launch with %s", who, got, want);
}

/* A run file the coordinator refuses (an unknown key), in the test's folder. */
static const char *write_refused_run(void)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/bad.yaml", xdc_test_tmpdir());
    xdc_test_write_file(path, "data: /nonexistent\nbogus_key: 1\n");
    return path;
}

/* Run a rehearsal script on write_refused_run()'s file: it must end with the coordinator's 78 and its
 * message (output in out). */
static void expect_refused(const char *cmd, const char *who, char *out, size_t cap)
{
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 78, "%s with a refused run file exited %d, expected the coordinator's 78:\n%s", who, rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "unknown key 'bogus_key'");
}

/* No munged, slurmctld or slurmd of the cluster in TMP/<work>/slurm/ is left (their command lines name
 * files in that folder). */
static void expect_no_daemons(const char *work)
{
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "pgrep -fc -- '[/]%s/%s/slurm/' || true", xdc_test_tmpdir() + 1, work);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 0, "%d Slurm or munge daemons of %s are left", atoi(out), work);
}

/* Per-node keys, under root (a rehearsal's folder: ca/ the CA host's, coordinator/ the coordinator's,
 * nodes/ID/REGION/ each region's node's): exactly 6 keys (the CA's, the coordinator's, two workers per
 * region; Slurm's munge key is not ours), each in its owner's folder only, and no RUN_DIR/certs (the shared-folder way: rundir is the run
 * folder, relative to root). */
static void expect_keys_only_with_their_owners(const char *root, const char *rundir)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s/%s && find . -path ./munge -prune -o -name '*.key' -print | sort | while read -r f; do "
             "  d=$(basename \"$(dirname \"$f\")\"); k=$(basename \"$f\" .key); "
             "  case $d:$k in ca:ca | coordinator:coordinator-0 | us-east:us-east-[0-9]* | eu-west:eu-west-[0-9]*) "
             "    echo \"ok $f\" ;; *) echo \"MISPLACED $f\" ;; esac; done; "
             "if [ -e %s/certs ]; then echo 'IN RUN FOLDER certs/'; fi",
             xdc_test_tmpdir(), root, rundir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    int keys = 0;
    for (const char *c = out; (c = strstr(c, "ok ./")) != NULL; c++) keys++;
    XDC_ASSERT_MSG(keys == 6 && !strstr(out, "MISPLACED") && !strstr(out, "IN RUN FOLDER"),
                   "keys in %s (6 expected, each with its owner only):\n%s", root, out);
    XDC_ASSERT_STR_CONTAINS(out, "ok ./ca/ca.key");
    XDC_ASSERT_STR_CONTAINS(out, "/us-east/us-east-1.key");
    XDC_ASSERT_STR_CONTAINS(out, "/eu-west/eu-west-1.key");
}

XDC_TEST_SERIAL(multihost_slurm_sbatch_matches_launch, 300)
{
    need_root_and_corpus("a Slurm cluster (munged, slurmctld, slurmd)");
    const char *topo = "examples/topology/demo-2region.yaml", *run = test_write_tiny_run("run", 8);
    static char out[65536];
    char cmd[2048];
    /* The script stops its daemons on SIGTERM; timeout sends it before the harness would kill the test. */
    snprintf(cmd, sizeof cmd, "timeout 200 bash tests/multihost/slurm.sh %s %s %s %s/slurm", xdc_test_bin(), topo, run,
             xdc_test_tmpdir());
    run_and_compare(cmd, "tests/multihost/slurm.sh", topo, run, out, sizeof out);
    /* one job per region, each completed with exit 0:0 */
    XDC_ASSERT_STR_CONTAINS(out, "region us-east: job");
    XDC_ASSERT_STR_CONTAINS(out, "region eu-west: job");
    XDC_ASSERT_MSG(strstr(out, "COMPLETED exit 0:0") && strstr(strstr(out, "COMPLETED exit 0:0") + 1, "COMPLETED"),
                   "two completed jobs expected:\n%s", out);
    /* each agent took its identity from the documented variables and Slurm's */
    const char *regions[2] = {"us-east", "eu-west"};
    for (int i = 0; i < 2; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/slurm/slurm/job-%s.out", xdc_test_tmpdir(), regions[i]);
        char *job = xdc_test_read_file(path, NULL);
        XDC_ASSERT_MSG(job != NULL, "no job output %s", path);
        XDC_ASSERT_STR_CONTAINS(job, "(XDC_REGION)");
        XDC_ASSERT_STR_CONTAINS(job, "node=0/1 (SLURM_NODEID, SLURM_NNODES)");
        XDC_ASSERT_STR_CONTAINS(job, "(XDC_COORDINATOR)");
        /* its keys came from its own folder, made on its node and signed by the CA host */
        char mine[64];
        snprintf(mine, sizeof mine, "/%s (from --cert-dir)", regions[i]);
        XDC_ASSERT_STR_CONTAINS(job, mine);
        XDC_ASSERT_STR_CONTAINS(job, "enroll.sh: signed");
        free(job);
    }
    expect_keys_only_with_their_owners("slurm/slurm", "run-dir");
    expect_no_daemons("slurm");
    /* A run the coordinator refuses: its error, and the cluster is stopped all the same. */
    snprintf(cmd, sizeof cmd, "timeout 100 bash tests/multihost/slurm.sh %s %s %s %s/slurm-bad", xdc_test_bin(), topo,
             write_refused_run(), xdc_test_tmpdir());
    expect_refused(cmd, "slurm.sh", out, sizeof out);
    expect_no_daemons("slurm-bad");
}

/* docs/runtime.md's multi-host example in small: etcd as the rendezvous, `xdc coordinator --rdzv` clearing
 * the prefix and reporting, us-east under Slurm (slurm.sbatch with XDC_RDZV) and eu-west through ssh.sh
 * (its rendezvous argument the etcd URL), every node with its own keys; same hash as `xdc launch`. */
XDC_TEST_SERIAL(multihost_slurm_and_ssh_with_etcd_match_launch, 300)
{
    need_root_and_corpus("a Slurm cluster (munged, slurmctld, slurmd)");
    if (system("command -v etcd >/dev/null 2>&1") != 0)
        xdc_test_skip("no etcd binary (Debian etcd-server; `make deps` installs it)");
    const char *topo = "examples/topology/demo-2region.yaml", *run = test_write_tiny_run("run", 8);
    static char out[65536];
    char cmd[2048], path[700];
    snprintf(cmd, sizeof cmd, "timeout 200 bash tests/multihost/slurm.sh %s %s %s %s/mixed etcd", xdc_test_bin(), topo,
             run, xdc_test_tmpdir());
    run_and_compare(cmd, "tests/multihost/slurm.sh (etcd)", topo, run, out, sizeof out);
    XDC_ASSERT_STR_CONTAINS(out, "region us-east: job");
    XDC_ASSERT_STR_CONTAINS(out, "COMPLETED exit 0:0");
    XDC_ASSERT_STR_CONTAINS(out, "regions eu-west: ssh.sh");
    XDC_ASSERT_STR_CONTAINS(out, "ssh.sh exit 0");
    snprintf(path, sizeof path, "%s/mixed/slurm/coordinator.log", xdc_test_tmpdir());
    char *text = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(text && strstr(text, "rendezvous at etcd://127.0.0.1:"), "the coordinator did not use etcd:\n%s",
                   text ? text : "");
    free(text);
    snprintf(path, sizeof path, "%s/mixed/slurm/job-us-east.out", xdc_test_tmpdir());
    text = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(text && strstr(text, "node=0/1 (SLURM_NODEID, SLURM_NNODES)") &&
                       strstr(text, "/us-east (from --cert-dir)"),
                   "us-east's agent:\n%s", text ? text : "");
    free(text);
    snprintf(path, sizeof path, "%s/mixed/slurm/ssh.out", xdc_test_tmpdir());
    text = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(text && strstr(text, "host=west-node1 (--host)") && strstr(text, "/eu-west (from --cert-dir)"),
                   "eu-west's agent:\n%s", text ? text : "");
    free(text);
    expect_keys_only_with_their_owners("mixed/slurm", "run-dir");
    expect_no_daemons("mixed");
}

/* No namespace is left of the netns.sh run whose output (it names its prefix: "namespaces xdcmhN-*") is
 * text. */
static void expect_no_namespaces(const char *text)
{
    const char *ns = text ? strstr(text, "namespaces xdcmh") : NULL;
    XDC_ASSERT_MSG(ns != NULL, "no namespace prefix in:\n%s", text ? text : "");
    char prefix[64], cmd[256], out[256];
    ns += strlen("namespaces ");
    snprintf(prefix, sizeof prefix, "%.*s", (int)strcspn(ns, "*"), ns);
    snprintf(cmd, sizeof cmd, "ip netns list | grep -c '^%s' || true", prefix);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 0, "namespaces %s* left behind", prefix);
}

XDC_TEST_SERIAL(multihost_netns_agents_match_launch, 240)
{
    need_root_and_corpus("network namespaces");
    const char *topo = "examples/topology/multihost-2region.yaml", *run = test_write_tiny_run("run", 8);
    static char out[65536];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "XDC=%s timeout 200 bash examples/launch/netns.sh run %s %s %s/netns", xdc_test_bin(),
             topo, run, xdc_test_tmpdir());
    run_and_compare(cmd, "examples/launch/netns.sh", topo, run, out, sizeof out);
    /* the coordinator listened on its own host's address, and every agent came through ssh.sh */
    XDC_ASSERT_STR_CONTAINS(out, "rendezvous at 10.77.0.3:29400");
    /* each agent was started on its own host, by ssh.sh */
    char path[700];
    snprintf(path, sizeof path, "%s/netns/agents.log", xdc_test_tmpdir());
    char *agents = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(agents != NULL, "no %s", path);
    XDC_ASSERT_STR_CONTAINS(agents, "host=10.77.0.1 (--host)");
    XDC_ASSERT_STR_CONTAINS(agents, "host=10.77.0.2 (--host)");
    /* each with the keys its own host made (nodes/ID/REGION), signed on the coordinator's host */
    XDC_ASSERT_STR_CONTAINS(agents, "/us-east (from --cert-dir)");
    XDC_ASSERT_STR_CONTAINS(agents, "/eu-west (from --cert-dir)");
    free(agents);
    expect_keys_only_with_their_owners("netns", ".");
    expect_no_namespaces(out);
}

/* netns.sh stopped mid-run (SIGTERM, as Ctrl-C or a CI timeout would) and a run that fails at once (a
 * run file the coordinator refuses): either way every agent, worker and namespace of the run is gone. */
XDC_TEST_SERIAL(multihost_netns_failure_and_stop_remove_everything, 180)
{
    need_root_and_corpus("network namespaces");
    const char *topo = "examples/topology/multihost-2region.yaml";
    char cmd[2048], out[16384], dir[600], log[700];
    snprintf(cmd, sizeof cmd, "XDC=%s timeout 100 bash examples/launch/netns.sh run %s %s %s/bad", xdc_test_bin(), topo,
             write_refused_run(), xdc_test_tmpdir());
    expect_refused(cmd, "netns.sh", out, sizeof out);
    expect_no_namespaces(out);

    /* A long run (300 steps), stopped once its agents are up. */
    const char *run = test_write_tiny_run("long", 300);
    snprintf(dir, sizeof dir, "%s/stop", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/stop.log", xdc_test_tmpdir());
    setenv("XDC", xdc_test_bin(), 1);
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execlp("bash", "bash", "examples/launch/netns.sh", "run", topo, run, dir, (char *)NULL);
        _exit(127);
    }
    XDC_ASSERT(p > 0);
    char agents[700];
    snprintf(agents, sizeof agents, "%s/agents.log", dir);
    int up = 0, status = 0;
    pid_t done = 0;
    for (int i = 0; i < 1200 && !up && !done; i++) { /* at most 60 s */
        char *a = xdc_test_read_file(agents, NULL);
        up = a && strstr(a, "[us-east/10.77.0.1] info  device") && strstr(a, "[eu-west/10.77.0.2] info  device");
        free(a);
        if (!up) {
            done = waitpid(p, &status, WNOHANG);
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        }
    }
    if (!done) kill(p, SIGTERM);
    if (!done) waitpid(p, &status, 0);
    char *logtext = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(up && !done, "the agents did not come up:\n%s", logtext ? logtext : "");
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 75, "netns.sh ended with status 0x%x after SIGTERM",
                   status);
    expect_no_namespaces(logtext);
    free(logtext);
    /* no process of the run is left: agents and workers name the run folder on their command line */
    snprintf(cmd, sizeof cmd, "pgrep -fc -- '[-]-run-dir %s' || true", dir);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(atoi(out) == 0, "%d processes of the stopped run are left", atoi(out));
}

/* What the scripts and commands above rely on, without root: `xdc topo check --hosts` lists every node;
 * `wan-emu --coordinator` needs --netns; slurm.sbatch and ssh.sh refuse a missing environment or missing
 * certificates with the fix named; netns.sh refuses node names that are not its hosts' addresses. */
XDC_TEST_SERIAL(multihost_scripts_refuse_what_they_cannot_run, 60)
{
    char cmd[2048], out[16384];
    const char *x = xdc_test_bin();
    snprintf(cmd, sizeof cmd, "%s topo check --hosts examples/topology/three-region.yaml", x);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT(strncmp(out, "us-east 0 gpu-use1-001\n", 23) == 0);
    XDC_ASSERT_STR_CONTAINS(out, "\nap-northeast 15 gpu-apne1-016\n");
    int lines = 0;
    for (const char *c = out; *c; c++) lines += *c == '\n';
    XDC_ASSERT_EQ(lines, 48);
    snprintf(cmd, sizeof cmd, "%s topo check --hosts --json examples/topology/three-region.yaml", x);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);

    snprintf(cmd, sizeof cmd, "%s wan-emu --topology examples/topology/demo-2region.yaml --coordinator", x);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--coordinator adds a namespace: it needs --netns PREFIX");

    /* slurm.sbatch: the documented variables first, then the signing command of the per-node keys */
    snprintf(cmd, sizeof cmd, "env -u XDC_REGION bash examples/launch/slurm.sbatch t.yaml r.yaml %s/run",
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "XDC_REGION is not set");
    snprintf(cmd, sizeof cmd,
             "XDC_REGION=us-east XDC_COORDINATOR=h:1 XDC_RUN_ID=r bash examples/launch/slurm.sbatch t.yaml r.yaml "
             "%s/run",
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "XDC_SIGN is not set: the command that signs key requests on the CA host");

    /* ssh.sh: no signing command, then an unknown region (nothing is started either time) */
    snprintf(cmd, sizeof cmd,
             "XDC=%s XDC_SSH=false bash examples/launch/ssh.sh examples/topology/demo-2region.yaml r.yaml %s/run h:1 "
             "r eu-west",
             x, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "XDC_SIGN is not set");
    snprintf(cmd, sizeof cmd,
             "XDC=%s XDC_SSH=false XDC_SIGN=false bash examples/launch/ssh.sh examples/topology/demo-2region.yaml "
             "r.yaml %s/run h:1 r mars",
             x, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "has no region 'mars'");
    /* a host that cannot make its keys: named, and no agent started */
    snprintf(cmd, sizeof cmd,
             "XDC=%s XDC_SSH=false XDC_SIGN=false bash examples/launch/ssh.sh examples/topology/demo-2region.yaml "
             "r.yaml %s/run h:1 r eu-west",
             x, xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 65);
    XDC_ASSERT_STR_CONTAINS(out, "west-node1 could not make its keys (enroll.sh request)");

    /* enroll.sh: the CA host refuses a request sent under another rank's name, and signs nothing without a CA */
    const char *t = xdc_test_tmpdir();
    snprintf(cmd, sizeof cmd,
             "export XDC=%1$s; e=examples/launch/enroll.sh; set -e; bash $e init %2$s/ca r %2$s/coord 2>/dev/null; "
             "bash $e request examples/topology/demo-2region.yaml %2$s/node r us-east 0 2>/dev/null | "
             "sed 's/^us-east-0 /us-east-1 /' | bash $e sign %2$s/ca",
             x, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 65);
    XDC_ASSERT_STR_CONTAINS(out, "the request sent as us-east-1 is for another identity");
    snprintf(cmd, sizeof cmd, "XDC=%s bash examples/launch/enroll.sh sign %s/none </dev/null", x, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 66);
    XDC_ASSERT_STR_CONTAINS(out, "none/ca.pem: make the CA first (enroll.sh init)");
    /* the node's folder has its own keys only: the CA's key and the coordinator's are elsewhere */
    snprintf(cmd, sizeof cmd, "ls %s/node", t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "us-east-0.key");
    XDC_ASSERT_MSG(!strstr(out, "ca.key") && !strstr(out, "coordinator"), "node folder holds: %s", out);

    /* netns.sh: demo-2region's node names are labels, not the namespaces' addresses */
    snprintf(cmd, sizeof cmd,
             "XDC=%s bash examples/launch/netns.sh run examples/topology/demo-2region.yaml r.yaml %s/n", x,
             xdc_test_tmpdir());
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "region us-east node 0 is 'east-node1'");
}
