/* orch_agent.c — `xdc agent`: what a per-region launch script runs on each node (`srun xdc agent ...`).
 * It works out which node of which region it is, starts one `xdc worker` per worker slot with the
 * environment contract of DESIGN.md, sends each worker's output to a per-rank log, and watches them:
 * when one fails, it names it, stops the others and exits non-zero, leaving a failure note in the run
 * folder for the launcher. */
#include "orchestrator/control/orch_identity.h"
#include "orchestrator/control/orch_proc.h"
#include "orchestrator/cli/xdc_cli.h"

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
#define AGENT_GRACE_MS    5000 /* SIGTERM to SIGKILL */

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
    const char *topology, *config, *run_dir;
    int emulate_wan, resume;
} agent_opts;

static int agent_usage(FILE *f)
{
    fprintf(
        f, "usage: xdc agent --topology FILE --config RUN.yaml --run-dir DIR [--region NAME] [--node N] [--host NAME]\n"
           "                 [--coordinator HOST:PORT] [--run-id ID] [--emulate-wan] [--resume]\n"
           "  Starts this node's workers. Identity comes from the flags, then XDC_* variables, torchrun, Open MPI,\n"
           "  PMIx/PMI and Slurm (SLURM_NODEID, SLURM_JOB_NODELIST), then this host's place in the topology;\n"
           "  the log says which source gave each value.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
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
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"run-dir", required_argument, NULL, 'd'},
                                         {"region", required_argument, NULL, 'r'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"coordinator", required_argument, NULL, 'k'},
                                         {"run-id", required_argument, NULL, 'i'},
                                         {"emulate-wan", no_argument, NULL, 'e'},
                                         {"resume", no_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    agent_opts o = {0};
    orch_identity_flags fl;
    memset(&fl, 0, sizeof fl);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:r:n:H:k:i:eRh", opts, NULL)) != -1) {
        switch (c) {
        case 't': o.topology = optarg; break;
        case 'c': o.config = optarg; break;
        case 'd': o.run_dir = optarg; break;
        case 'r': fl.value[ORCH_ID_REGION] = optarg; break;
        case 'n': fl.value[ORCH_ID_NODE] = optarg; break;
        case 'H': fl.value[ORCH_ID_HOST] = optarg; break;
        case 'k': fl.value[ORCH_ID_COORDINATOR] = optarg; break;
        case 'i': fl.value[ORCH_ID_RUN_ID] = optarg; break;
        case 'e': o.emulate_wan = 1; break;
        case 'R': o.resume = 1; break;
        case 'h': return agent_usage(stdout);
        default: return agent_usage(stderr);
        }
    }
    if (!o.topology || !o.config || !o.run_dir || optind != argc) return agent_usage(stderr);

    xdc_topology *t;
    xdc_cfg_errors errs;
    if (xdc_topology_load(o.topology, &t, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_EX_CONFIG;
    }
    orch_identity id;
    xdc_diag d = {{0}};
    if (orch_identity_resolve(&fl, NULL, t, ORCH_ID_REQUIRE_AGENT, &id, &d) != XDC_OK) {
        fprintf(stderr, "xdc agent: %s\n", d.msg);
        xdc_topology_destroy(t);
        return XDC_EX_CONFIG;
    }
    xdc_log_set_identity(id.region, id.host, -1);
    char desc[1024];
    orch_identity_describe(&id, desc, sizeof desc);
    XDC_INFO(XDC_SUB_ORCH, "identity: %s", desc);
    int r = xdc_topology_region_index(t, id.region);
    const xdc_region *g = &t->regions[r];
    int wpn = g->workers_per_node;
    char master[256];
    int master_port;
    if (wpn > AGENT_MAX_WORKERS || orch_split_hostport(id.coordinator, master, sizeof master, &master_port) != 0) {
        fprintf(stderr, "xdc agent: %s\n",
                wpn > AGENT_MAX_WORKERS ? "more than 64 workers per node" : "the coordinator address is not host:port");
        xdc_topology_destroy(t);
        return XDC_EX_CONFIG;
    }

    char logdir[1024];
    mkdir(o.run_dir, 0755);
    snprintf(logdir, sizeof logdir, "%s/pids", o.run_dir);
    mkdir(logdir, 0755);
    snprintf(logdir, sizeof logdir, "%s/logs", o.run_dir);
    mkdir(logdir, 0755);
    install_handlers();

    pid_t pids[AGENT_MAX_WORKERS] = {0};
    char names[AGENT_MAX_WORKERS][160];
    int rc = XDC_EX_OK;
    for (int s = 0; s < wpn; s++) {
        int lrank = id.node * g->workers_per_node + s;
        char **envp = NULL;
        if (orch_identity_worker_env(&id, t, s, master, master_port, NULL, &envp, &d) != XDC_OK) {
            char text[600];
            snprintf(text, sizeof text, "worker environment of slot %d: %s", s, d.msg);
            fprintf(stderr, "xdc agent: %s\n", text);
            write_failure(o.run_dir, id.region, id.node, text);
            rc = XDC_EX_CONFIG;
            g_stop_signal = SIGTERM; /* stop the workers already started */
            break;
        }
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
        snprintf(logpath, sizeof logpath, "%s/%s-%s-%d.log", logdir, id.region, id.host, lrank);
        snprintf(names[s], sizeof names[s], "%s/%s:%d", id.region, id.host, lrank);
        /* Region 0's first rank prints the progress lines to the launcher's terminal. */
        int reporter = r == 0 && lrank == 0;
        xdc_err_t sr = orch_proc_spawn(wargv, envp, reporter ? NULL : logpath, logpath, &pids[s], &d);
        orch_identity_env_free(envp);
        if (sr != XDC_OK) {
            char text[600];
            snprintf(text, sizeof text, "cannot start worker %s: %s", names[s], d.msg);
            fprintf(stderr, "xdc agent: %s\n", text);
            write_failure(o.run_dir, id.region, id.node, text);
            rc = XDC_EX_UNAVAILABLE;
            g_stop_signal = SIGTERM; /* stop the workers already started */
            break;
        }
        XDC_DEBUG(XDC_SUB_ORCH, "worker %s started as pid %d (log %s)", names[s], (int)pids[s], logpath);
        char pidpath[1300];
        snprintf(pidpath, sizeof pidpath, "%s/pids/%s-%d.pid", o.run_dir, id.region, lrank);
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
                write_failure(o.run_dir, id.region, id.node, text);
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
