/* orch_agent.c — what a per-region launch script runs on each node (`srun xdc agent ...`). It works out
 * which node of which region it is, starts one `xdc worker` (or the --exec program) per worker slot with
 * the environment contract of DESIGN.md, sends each worker's output to a per-rank log, and watches them:
 * when one fails, it names it, stops the others and fails, leaving a failure note in the run folder for
 * the launcher. */
#include "orchestrator/launch/orch_agent.h"

#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/runcfg/orch_run_config.h"

#include "common/xdc_log.h"
#include "topology/xdc_topology.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT_MAX_WORKERS 64

typedef struct {
    const orch_agent_opts *o;
    xdc_topology *t;
    orch_identity id;
    orch_creds creds;        /* the folder, CA and CRL handed to every worker */
    int region;              /* index of id.region in the topology */
    orch_device override;    /* --device, else XDC_DEVICE, else ORCH_DEVICE_TOPOLOGY */
    const char *device_from; /* where the override came from */
    char master[256];
    int master_port;
    rdzv_target rdzv; /* etcd: passed to the workers as --rdzv (built-in: they find it at the coordinator) */
    char logdir[1024];
    orch_procs workers;
} agent;

static void note_path(const agent *a, char *path, size_t cap)
{
    snprintf(path, cap, "%s/failed-%s-%d", a->o->run_dir, a->id.region, a->id.node);
}

static void write_failure(const agent *a, const char *text)
{
    char path[1024];
    note_path(a, path, sizeof path);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", text);
        fclose(f);
    }
}

/* Topology, identity, the run folder's pids/ and logs/. */
static xdc_err_t agent_setup(agent *a, xdc_diag *diag)
{
    xdc_cfg_errors errs;
    if (xdc_topology_load(a->o->topology, &a->t, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        a->t = NULL;
        return XDC_ERR_CONFIG;
    }
    /* The store: --rdzv, XDC_RDZV, and only without a coordinator address the run file (the workers read
     * the run file themselves; a run file they refuse is their failure to report). With etcd, etcd's
     * address stands for the coordinator. An etcd URL without a prefix is resolved again by each worker. */
    orch_identity_flags idf = a->o->id;
    int no_coordinator = !idf.value[ORCH_ID_COORDINATOR] && !getenv("XDC_COORDINATOR");
    static orch_run_config cfg; /* large; one agent per process */
    if (no_coordinator && orch_run_config_load(a->o->config, &cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_ERR_CONFIG;
    }
    XDC_CHECK(rdzv_target_resolve(a->o->rdzv.rdzv, no_coordinator ? cfg.rdzv : NULL, idf.value[ORCH_ID_RUN_ID],
                                  &a->rdzv, diag));
    char etcd_hostport[300];
    if (a->rdzv.kind == RDZV_ETCD && no_coordinator) {
        snprintf(etcd_hostport, sizeof etcd_hostport, "%s:%d", a->rdzv.host, a->rdzv.port);
        idf.value[ORCH_ID_COORDINATOR] = etcd_hostport;
    }
    if (orch_identity_resolve(&idf, NULL, a->t, ORCH_ID_REQUIRE_AGENT, &a->id, diag) != XDC_OK) return XDC_ERR_CONFIG;
    xdc_log_set_identity(a->id.region, a->id.host, -1);
    char desc[1024];
    orch_identity_describe(&a->id, desc, sizeof desc);
    XDC_INFO(XDC_SUB_ORCH, "identity: %s", desc);
    a->region = xdc_topology_region_index(a->t, a->id.region);
    if (a->t->regions[a->region].workers_per_node > AGENT_MAX_WORKERS) {
        xdc_diag_set(diag, "more than %d workers per node", AGENT_MAX_WORKERS);
        return XDC_ERR_CONFIG;
    }
    if (orch_split_hostport(a->id.coordinator, a->master, sizeof a->master, &a->master_port) != 0) {
        xdc_diag_set(diag, "the coordinator address is not host:port");
        return XDC_ERR_CONFIG;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/pids", a->o->run_dir);
    snprintf(a->logdir, sizeof a->logdir, "%s/logs", a->o->run_dir);
    XDC_CHECK(orch_mkdirs(a->o->run_dir, 0755, diag));
    XDC_CHECK(orch_mkdirs(dir, 0755, diag));
    XDC_CHECK(orch_mkdirs(a->logdir, 0755, diag));
    /* A note from an earlier attempt in this folder (before --resume) is not this attempt's failure. */
    note_path(a, dir, sizeof dir);
    if (unlink(dir) != 0 && errno != ENOENT) {
        xdc_diag_set(diag, "cannot remove the earlier failure note %s: %s", dir, strerror(errno));
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

/* Every worker's key and certificate, the CA and the CRL before any worker starts: a missing one is named
 * once, here, instead of by each worker. */
static xdc_err_t agent_creds(agent *a, xdc_diag *diag)
{
    XDC_CHECK(orch_creds_resolve(&a->o->creds, a->o->run_dir, &a->creds, diag));
    int wpn = a->t->regions[a->region].workers_per_node;
    for (int s = 0; s < wpn; s++)
        XDC_CHECK(orch_creds_member(&a->creds, a->id.run_id, a->id.region, a->id.node * wpn + s, diag));
    XDC_INFO(XDC_SUB_ORCH, "credentials: folder %s (from %s), CA %s, %s%s", a->creds.dir, a->creds.dir_from,
             a->creds.ca, a->creds.crl[0] ? "CRL " : "no CRL", a->creds.crl);
    return XDC_OK;
}

/* The node's device (orch_device.h), checked before any worker starts. */
static xdc_err_t agent_device(agent *a, xdc_diag *diag)
{
    XDC_CHECK(orch_device_override(a->o->device, &a->override, &a->device_from, diag));
    orch_device d = orch_device_of_region(a->override, a->t, a->region);
    XDC_CHECK(orch_device_check_node(d, a->device_from, a->t, a->region, a->id.host, a->o->probe, diag));
    char desc[64];
    orch_device_describe(d, -1, desc, sizeof desc);
    XDC_INFO(XDC_SUB_ORCH, "device %s for %d workers (from %s)", desc, a->t->regions[a->region].workers_per_node,
             a->device_from);
    return XDC_OK;
}

static void write_pidfile(const agent *a, int lrank, pid_t pid)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/pids/%s-%d.pid", a->o->run_dir, a->id.region, lrank);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
}

/* With --exec: what `xdc worker` gets as flags, as the environment libxdc reads (docs/api.md), into
 * buf/env (NULL-terminated). */
#define EXEC_ENV_MAX (5 + ORCH_CREDS_ENV)
static void exec_env(const agent *a, char (*buf)[ORCH_CREDS_ENV_LEN], const char **env)
{
    int n = 0;
    const char *rdzv = a->o->rdzv.rdzv ? a->o->rdzv.rdzv : getenv("XDC_RDZV");
    const char *const pairs[][2] = {{"XDC_TOPOLOGY", a->o->topology},
                                    {"XDC_CONFIG", a->o->config},
                                    {"XDC_RUN_DIR", a->o->run_dir},
                                    {"XDC_EMULATE_WAN", a->o->emulate_wan ? "1" : "0"},
                                    {"XDC_RDZV", rdzv}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i][1]) {
            snprintf(buf[n], ORCH_CREDS_ENV_LEN, "%s=%s", pairs[i][0], pairs[i][1]);
            env[n] = buf[n];
            n++;
        }
    n += orch_creds_env(&a->creds, buf + n, env + n);
    env[n] = NULL;
}

/* Worker slot s: its environment, its log, its pid file. */
static xdc_err_t start_worker(agent *a, int s, xdc_diag *diag)
{
    int lrank = a->id.node * a->t->regions[a->region].workers_per_node + s;
    char **envp = NULL;
    static char exec_buf[EXEC_ENV_MAX][ORCH_CREDS_ENV_LEN];
    const char *exec_vars[EXEC_ENV_MAX + 1];
    if (a->o->exec_argv) exec_env(a, exec_buf, exec_vars);
    if (orch_identity_worker_env(&a->id, a->t, s, a->master, a->master_port, a->o->exec_argv ? exec_vars : NULL, &envp,
                                 diag) != XDC_OK) {
        xdc_diag_prefix(diag, "worker environment of slot %d", s);
        return XDC_ERR_CONFIG;
    }
    char *argv[14 + ORCH_CREDS_ARGV + RDZV_FLAGS_ARGV];
    int n = 0;
    argv[n++] = "worker";
    argv[n++] = "--topology";
    argv[n++] = (char *)a->o->topology;
    argv[n++] = "--config";
    argv[n++] = (char *)a->o->config;
    argv[n++] = "--run-dir";
    argv[n++] = (char *)a->o->run_dir;
    if (a->o->emulate_wan) argv[n++] = "--emulate-wan";
    if (a->o->resume) argv[n++] = "--resume";
    n += orch_creds_argv(&a->creds, argv + n);
    if (a->override != ORCH_DEVICE_TOPOLOGY) { /* the agent's choice, whatever the workers' environment says */
        argv[n++] = "--device";
        argv[n++] = (char *)orch_device_name(a->override);
    }
    /* The agent's store for the workers: a worker's environment is the contract only, without XDC_RDZV. */
    rdzv_flags_argv(&a->o->rdzv, a->o->rdzv.rdzv ? NULL : getenv("XDC_RDZV"), argv, &n);
    argv[n] = NULL;
    char logpath[1300], name[ORCH_PROC_NAME_MAX];
    snprintf(logpath, sizeof logpath, "%s/%s-%s-%d.log", a->logdir, a->id.region, a->id.host, lrank);
    snprintf(name, sizeof name, "%s/%s:%d", a->id.region, a->id.host, lrank);
    /* Region 0's first rank prints the progress lines to the launcher's terminal. */
    int reporter = a->region == 0 && lrank == 0;
    const char *program = a->o->exec_argv ? a->o->exec_argv[0] : NULL;
    xdc_err_t rc = orch_procs_spawn(&a->workers, name, program, a->o->exec_argv ? a->o->exec_argv : argv, envp,
                                    reporter ? NULL : logpath, logpath, diag);
    orch_identity_env_free(envp);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "cannot start worker %s", name);
        return XDC_ERR_UNAVAILABLE;
    }
    pid_t pid = a->workers.pid[a->workers.n - 1];
    XDC_DEBUG(XDC_SUB_ORCH, "worker %s started as pid %d (log %s)", name, (int)pid, logpath);
    write_pidfile(a, lrank, pid);
    return XDC_OK;
}

static int worker_failed(void *ctx, const orch_procs *g, int i, pid_t pid, int status)
{
    char how[128], text[400];
    orch_proc_describe(status, how, sizeof how);
    snprintf(text, sizeof text, "worker %s (pid %d) %s", g->name[i], (int)pid, how);
    XDC_ERROR(XDC_SUB_ORCH, "%s; stopping this node's other workers", text);
    write_failure(ctx, text);
    return 0; /* a node's workers are one pipeline: the others cannot go on */
}

xdc_err_t orch_agent_run(const orch_agent_opts *o, int *worker_exit, xdc_diag *diag)
{
    static agent a; /* the children's names are large; one agent per process */
    memset(&a, 0, sizeof a);
    a.o = o;
    *worker_exit = 0;
    orch_procs_init(&a.workers, 1);
    xdc_err_t rc = agent_setup(&a, diag);
    if (rc == XDC_OK && ((rc = agent_creds(&a, diag)) != XDC_OK || (rc = agent_device(&a, diag)) != XDC_OK)) {
        write_failure(&a, diag ? diag->msg : xdc_strerror(rc));
    } else if (rc == XDC_OK) {
        orch_proc_catch_stop_signals();
        for (int s = 0; s < a.t->regions[a.region].workers_per_node && rc == XDC_OK; s++)
            rc = start_worker(&a, s, diag);
        if (rc != XDC_OK) {
            write_failure(&a, diag ? diag->msg : xdc_strerror(rc));
            orch_procs_stop(&a.workers); /* the workers already started */
        }
        orch_supervisor sup = {.ctx = &a, .failed = worker_failed};
        int ex = 0;
        xdc_err_t src = orch_procs_supervise(&a.workers, &sup, &ex);
        if (rc == XDC_OK) rc = src, *worker_exit = ex;
    }
    orch_procs_close(&a.workers);
    xdc_topology_destroy(a.t);
    return rc;
}
