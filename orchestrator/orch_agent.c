/* orch_agent.c — `xdc agent`: what a per-region launch script runs on each node (`srun xdc agent ...`).
 * It works out which node of which region it is, starts one `xdc worker` per worker slot with the
 * environment contract of DESIGN.md, sends each worker's output to a per-rank log, and watches them:
 * when one fails, it names it, stops the others and exits non-zero, leaving a failure note in the run
 * folder for the launcher. */
#include "orchestrator/orch_proc.h"
#include "orchestrator/xdc_cli.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "topology/xdc_topology.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT_MAX_WORKERS 64
#define AGENT_GRACE_MS 5000 /* SIGTERM to SIGKILL */

static volatile sig_atomic_t g_stop_signal;
static void on_signal(int sig)
{
    if (sig != SIGALRM) g_stop_signal = sig;
}

/* Without SA_RESTART, so a signal (or the grace-period alarm) interrupts waitpid. */
static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
}

typedef struct {
    const char *topology, *config, *run_dir, *region, *coordinator, *run_id;
    int node;
    int emulate_wan, resume;
} agent_opts;

static int agent_usage(FILE *f)
{
    fprintf(f, "usage: xdc agent --topology FILE --config RUN.yaml --run-dir DIR [--region NAME] [--node N]\n"
               "                 [--coordinator HOST:PORT] [--run-id ID] [--emulate-wan] [--resume]\n"
               "  Starts this node's workers. Region, node index, coordinator and run id come from the flags,\n"
               "  else from XDC_REGION, XDC_NODE_RANK, XDC_COORDINATOR and XDC_RUN_ID, else from Slurm\n"
               "  (SLURM_NODEID) for the node index.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* Flag, else environment variable; logs where the value came from. */
static const char *pick(const char *flag, const char *var, const char *what)
{
    if (flag) {
        XDC_DEBUG(XDC_SUB_ORCH, "identity: %s=%s (from --flag)", what, flag);
        return flag;
    }
    const char *v = getenv(var);
    if (v && *v) XDC_INFO(XDC_SUB_ORCH, "identity: %s=%s (from %s)", what, v, var);
    return v && *v ? v : NULL;
}

static void write_failure(const char *run_dir, const char *region, int node, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/failed-%s-%d", run_dir, region, node);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", text);
        fclose(f);
    }
}

int xdc_cmd_agent(int argc, char **argv)
{
    static const struct option opts[] = {
        {"topology", required_argument, NULL, 't'}, {"config", required_argument, NULL, 'c'},
        {"run-dir", required_argument, NULL, 'd'},  {"region", required_argument, NULL, 'r'},
        {"node", required_argument, NULL, 'n'},     {"coordinator", required_argument, NULL, 'k'},
        {"run-id", required_argument, NULL, 'i'},   {"emulate-wan", no_argument, NULL, 'e'},
        {"resume", no_argument, NULL, 'R'},         {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    agent_opts o = {.node = -1};
    const char *node_flag = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:r:n:k:i:eRh", opts, NULL)) != -1) {
        switch (c) {
        case 't': o.topology = optarg; break;
        case 'c': o.config = optarg; break;
        case 'd': o.run_dir = optarg; break;
        case 'r': o.region = optarg; break;
        case 'n': node_flag = optarg; break;
        case 'k': o.coordinator = optarg; break;
        case 'i': o.run_id = optarg; break;
        case 'e': o.emulate_wan = 1; break;
        case 'R': o.resume = 1; break;
        case 'h': return agent_usage(stdout);
        default: return agent_usage(stderr);
        }
    }
    if (!o.topology || !o.config || !o.run_dir || optind != argc) return agent_usage(stderr);
    o.region = pick(o.region, "XDC_REGION", "region");
    o.coordinator = pick(o.coordinator, "XDC_COORDINATOR", "coordinator");
    o.run_id = pick(o.run_id, "XDC_RUN_ID", "run id");
    const char *node_text = pick(node_flag, "XDC_NODE_RANK", "node");
    if (!node_text) node_text = pick(NULL, "SLURM_NODEID", "node");
    if (!o.region || !o.coordinator || !o.run_id || !node_text) {
        fprintf(stderr, "xdc agent: missing identity: need region (--region/XDC_REGION), node (--node/XDC_NODE_RANK/"
                        "SLURM_NODEID), coordinator (--coordinator/XDC_COORDINATOR) and run id (--run-id/XDC_RUN_ID)\n");
        return XDC_EX_USAGE;
    }
    o.node = atoi(node_text);

    xdc_topology *t;
    xdc_cfg_errors errs;
    if (xdc_topology_load(o.topology, &t, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_EX_CONFIG;
    }
    int r = xdc_topology_region_index(t, o.region);
    if (r < 0 || o.node < 0 || o.node >= t->regions[r].n_hosts) {
        fprintf(stderr, "xdc agent: region '%s' node %d is not in %s\n", o.region, o.node, o.topology);
        xdc_topology_destroy(t);
        return XDC_EX_CONFIG;
    }
    const xdc_region *g = &t->regions[r];
    const char *host = g->hosts[o.node];
    xdc_log_set_identity(o.region, host, -1);
    int wpn = g->workers_per_node, region_world = xdc_topology_region_workers(t, r), base = 0;
    for (int q = 0; q < r; q++) base += xdc_topology_region_workers(t, q);
    if (wpn > AGENT_MAX_WORKERS) wpn = AGENT_MAX_WORKERS;

    char logdir[1024];
    snprintf(logdir, sizeof logdir, "%s/logs", o.run_dir);
    mkdir(o.run_dir, 0755);
    mkdir(logdir, 0755);
    snprintf(logdir, sizeof logdir, "%s/pids", o.run_dir);
    mkdir(logdir, 0755);
    snprintf(logdir, sizeof logdir, "%s/logs", o.run_dir);
    install_handlers();

    pid_t pids[AGENT_MAX_WORKERS] = {0};
    char names[AGENT_MAX_WORKERS][160];
    /* Environment strings live for the whole agent: putenv in the child keeps pointers to them. */
    static char envbuf[AGENT_MAX_WORKERS][16][300];
    int rc = XDC_EX_OK;
    for (int s = 0; s < wpn; s++) {
        int lrank = o.node * wpn + s;
        char(*e)[300] = envbuf[s];
        int k = 0;
        snprintf(e[k++], 300, "RANK=%d", lrank);
        snprintf(e[k++], 300, "WORLD_SIZE=%d", region_world);
        snprintf(e[k++], 300, "LOCAL_RANK=%d", s);
        snprintf(e[k++], 300, "LOCAL_WORLD_SIZE=%d", wpn);
        const char *colon = strrchr(o.coordinator, ':');
        snprintf(e[k++], 300, "MASTER_ADDR=%.*s", colon ? (int)(colon - o.coordinator) : 0, o.coordinator);
        snprintf(e[k++], 300, "MASTER_PORT=%s", colon ? colon + 1 : "");
        snprintf(e[k++], 300, "XDC_RUN_ID=%s", o.run_id);
        snprintf(e[k++], 300, "XDC_REGION=%s", o.region);
        snprintf(e[k++], 300, "XDC_REGION_INDEX=%d", r);
        snprintf(e[k++], 300, "XDC_NUM_REGIONS=%d", t->n_regions);
        snprintf(e[k++], 300, "XDC_GLOBAL_RANK=%d", base + lrank);
        snprintf(e[k++], 300, "XDC_GLOBAL_WORLD_SIZE=%d", xdc_topology_total_workers(t));
        snprintf(e[k++], 300, "XDC_COORDINATOR=%s", o.coordinator);
        snprintf(e[k++], 300, "XDC_NODE=%s", host);
        char *envp[17];
        for (int i = 0; i < k; i++) envp[i] = e[i];
        envp[k] = NULL;
        char *wargv[12];
        int a = 0;
        wargv[a++] = "worker";
        wargv[a++] = "--topology";
        wargv[a++] = (char *)o.topology;
        wargv[a++] = "--config";
        wargv[a++] = (char *)o.config;
        wargv[a++] = "--run-dir";
        wargv[a++] = (char *)o.run_dir;
        if (o.emulate_wan) wargv[a++] = "--emulate-wan";
        if (o.resume) wargv[a++] = "--resume";
        wargv[a] = NULL;
        char logpath[1300];
        snprintf(logpath, sizeof logpath, "%s/%s-%s-%d.log", logdir, o.region, host, lrank);
        snprintf(names[s], sizeof names[s], "%s/%s:%d", o.region, host, lrank);
        /* Region 0's first rank prints the progress lines to the launcher's terminal. */
        int reporter = r == 0 && lrank == 0;
        xdc_diag d = {{0}};
        if (orch_proc_spawn(wargv, envp, reporter ? NULL : logpath, logpath, &pids[s], &d) != XDC_OK) {
            fprintf(stderr, "xdc agent: cannot start worker %s: %s\n", names[s], d.msg);
            rc = XDC_EX_UNAVAILABLE;
            break;
        }
        XDC_DEBUG(XDC_SUB_ORCH, "worker %s started as pid %d (log %s)", names[s], (int)pids[s], logpath);
        char pidpath[1300];
        snprintf(pidpath, sizeof pidpath, "%s/pids/%s-%d.pid", o.run_dir, o.region, lrank);
        FILE *pf = fopen(pidpath, "w");
        if (pf) {
            fprintf(pf, "%d\n", (int)pids[s]);
            fclose(pf);
        }
    }

    int alive = 0;
    for (int s = 0; s < wpn; s++) alive += pids[s] > 0;
    uint64_t kill_deadline = 0;
    while (alive > 0) {
        if (g_stop_signal && !kill_deadline) {
            for (int s = 0; s < wpn; s++) orch_proc_signal(pids[s], SIGTERM);
            kill_deadline = xdc_deadline_ms(AGENT_GRACE_MS);
            if (rc == XDC_EX_OK) rc = XDC_EX_TEMPFAIL;
        }
        if (kill_deadline && xdc_deadline_passed(kill_deadline))
            for (int s = 0; s < wpn; s++) orch_proc_signal(pids[s], SIGKILL);
        if (kill_deadline) alarm(1); /* wake waitpid to enforce the grace period */
        int status;
        pid_t p = waitpid(-1, &status, 0);
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int s = 0; s < wpn; s++) {
            if (pids[s] != p) continue;
            pids[s] = 0;
            alive--;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
            if (!g_stop_signal) {
                char how[128], text[400];
                orch_proc_describe(status, how, sizeof how);
                snprintf(text, sizeof text, "worker %s (pid %d) %s", names[s], (int)p, how);
                XDC_ERROR(XDC_SUB_ORCH, "%s; stopping this node's other workers", text);
                write_failure(o.run_dir, o.region, o.node, text);
                rc = WIFEXITED(status) ? WEXITSTATUS(status) : XDC_EX_UNAVAILABLE;
                g_stop_signal = SIGTERM;
            }
            break;
        }
    }
    alarm(0);
    xdc_topology_destroy(t);
    return rc;
}
