/* orch_launch.c — `xdc launch`: one command for a whole run on this machine. It checks the topology and
 * run file, makes the run folder and its certificates (a cluster CA, one node certificate per worker),
 * hosts the rendezvous store, makes the topology's links real with one userspace relay per link and
 * worker pair when the WAN is emulated, starts one `xdc agent` per node, and waits. A failure anywhere
 * stops the run with the failed rank named; success ends with one summary line. */
#include "orchestrator/control/orch_proc.h"
#include "orchestrator/control/orch_rdzv.h"
#include "orchestrator/control/orch_run_config.h"
#include "orchestrator/obs/orch_trace.h"
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"

#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAUNCH_MAX_AGENTS 256
#define LAUNCH_MAX_RELAYS 1024

static volatile sig_atomic_t g_interrupted;
static void on_signal(int sig) { g_interrupted = sig; }

typedef struct {
    const char *topology, *config, *run_id, *log_format;
    char run_dir[512];
    int emulate;      /* -1: decide (yes when every region is on this host) */
    const char *host; /* rendezvous bind address */
    int port;         /* rendezvous port (0: any) */
    int coordinator;  /* `xdc coordinator`: host the store, start no agents */
    int resume;
    int64_t outage_start_ms, outage_ms;
    double degrade; /* emulated links run at this fraction of the topology's bandwidth */
} launch_opts;

typedef struct {
    launch_opts o;
    xdc_topology *t;
    orch_run_config cfg;
    xdc_wan_engine *eng;
    rdzv_server *rdzv;
    char coordinator[300];
    xdc_wan_relay *relays[LAUNCH_MAX_RELAYS]; /* one per pair of regions */
    char relay_done[LAUNCH_MAX_RELAYS];       /* per (pair, worker) route */
    int n_relays;
    uint64_t finish_at; /* coordinator: when to stop waiting for members to leave */
    pid_t agents[LAUNCH_MAX_AGENTS];
    char agent_names[LAUNCH_MAX_AGENTS][160];
    int n_agents;
} launch;

static int launch_usage(FILE *f)
{
    fprintf(f,
            "usage: xdc launch -t TOPOLOGY.yaml -c RUN.yaml [--run-dir DIR] [--run-id ID] "
            "[--emulate-wan|--no-emulate-wan]\n"
            "                  [--outage DURATION@START] [--resume] [--log-format text|json]\n"
            "       xdc coordinator -t TOPOLOGY.yaml -c RUN.yaml --run-dir DIR [--host ADDR] [--port P] [--run-id ID]\n"
            "  coordinator: host the rendezvous (default 0.0.0.0:29400) for agents started elsewhere (Slurm, ssh)\n"
            "  and wait for the run to end; the run folder must be shared with the nodes (certificates).\n"
            "  Runs every region of the topology on this machine: rendezvous, WAN emulator (default when all\n"
            "  regions are local), one agent per node, one worker per slot. Ends with\n"
            "  final val_loss=<x> params_xxh64=<hex> steps=<n> wan_bytes=<n> exposed_wan_pct=<x>\n"
            "  --outage 5s@10s  cut every emulated link for 5 s, 10 s after its relay opened\n"
            "  --degrade-links F  emulated links carry F x the topology's bandwidth (rehearse a degraded WAN)\n"
            "  --resume         continue from the newest complete checkpoint in the run folder\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

static int parse_outage(const char *text, launch_opts *o)
{
    char dur[64], start[64];
    const char *at = strchr(text, '@');
    if (!at || (size_t)(at - text) >= sizeof dur) return -1;
    snprintf(dur, sizeof dur, "%.*s", (int)(at - text), text);
    snprintf(start, sizeof start, "%s", at + 1);
    return xdc_parse_duration_ms(dur, &o->outage_ms) || xdc_parse_duration_ms(start, &o->outage_start_ms) ? -1 : 0;
}

/* Certificates: the CA, the coordinator's, one per worker (region, local rank). Reused on --resume. */
static xdc_err_t make_certs(launch *L, xdc_diag *diag)
{
    char dir[600], ca[700];
    snprintf(dir, sizeof dir, "%s/certs", L->o.run_dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    mkdir(dir, 0700);
    if (access(ca, F_OK) == 0) return XDC_OK;
    xdc_wan_cert_opts co = {.dir = dir, .run = L->o.run_id, .days = 30};
    XDC_CHECK(xdc_wan_cert_init_ca(&co, diag));
    co.region = RDZV_SERVER_REGION;
    co.rank = 0;
    XDC_CHECK(xdc_wan_cert_issue(&co, NULL, 0, NULL, 0, diag));
    for (int r = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
            co.region = L->t->regions[r].name;
            co.rank = k;
            XDC_CHECK(xdc_wan_cert_issue(&co, NULL, 0, NULL, 0, diag));
        }
    return XDC_OK;
}

static xdc_err_t start_rendezvous(launch *L, xdc_diag *diag)
{
    char cert[700], key[700], ca[700];
    snprintf(cert, sizeof cert, "%s/certs/%s-0.pem", L->o.run_dir, RDZV_SERVER_REGION);
    snprintf(key, sizeof key, "%s/certs/%s-0.key", L->o.run_dir, RDZV_SERVER_REGION);
    snprintf(ca, sizeof ca, "%s/certs/ca.pem", L->o.run_dir);
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    wc.cert_path = cert;
    wc.key_path = key;
    wc.ca_path = ca;
    wc.streams = 1;
    XDC_CHECK(xdc_wan_engine_create(&wc, &L->eng, diag));
    int total = xdc_topology_total_workers(L->t);
    char **names = xdc_calloc((size_t)total, sizeof *names);
    if (!names) return XDC_ERR_NOMEM;
    int n = 0;
    for (int r = 0; r < L->t->n_regions; r++) {
        const xdc_region *g = &L->t->regions[r];
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
            names[n] = xdc_malloc(RDZV_MEMBER_MAX);
            if (names[n])
                snprintf(names[n], RDZV_MEMBER_MAX, "%s/%s:%d", g->name, g->hosts[k / g->workers_per_node], k);
            n++;
        }
    }
    xdc_err_t rc = rdzv_server_create(L->eng, L->o.host, L->o.port, (const char *const *)names, total, &L->rdzv, diag);
    for (int i = 0; i < total; i++) xdc_free(names[i]);
    xdc_free(names);
    XDC_CHECK(rc);
    char me[256] = "127.0.0.1";
    if (strcmp(L->o.host, "0.0.0.0") == 0) gethostname(me, sizeof me);
    else snprintf(me, sizeof me, "%s", L->o.host);
    snprintf(L->coordinator, sizeof L->coordinator, "%s:%d", me, rdzv_server_port(L->rdzv));
    return XDC_OK;
}

/* Emulated WAN: one relay per pair of regions i < j (link i->j's model), with one route per worker of j
 * that someone in i dials: once worker (j, rank) has published its listening port, a route to it opens
 * and its port is published as relay/i/j/rank. All routes of a link share its rate, as on a real link. */
static void pump_relays(launch *L)
{
    int idx = 0, link = 0;
    for (int i = 0; i < L->t->n_regions; i++)
        for (int j = i + 1; j < L->t->n_regions; j++, link++)
            for (int k = 0; k < xdc_topology_region_workers(L->t, j); k++, idx++) {
                if (idx >= LAUNCH_MAX_RELAYS || link >= LAUNCH_MAX_RELAYS || L->relay_done[idx]) continue;
                char key[128], val[300];
                snprintf(key, sizeof key, "wan/%d/%d", j, k);
                if (rdzv_server_get(L->rdzv, key, val, sizeof val) != 0) continue;
                char host[256];
                int target;
                const xdc_link *l = xdc_topology_link(L->t, i, j);
                if (orch_split_hostport(val, host, sizeof host, &target) != 0 || !l) continue;
                xdc_diag d = {{0}};
                xdc_err_t rc;
                int port = 0;
                if (!L->relays[link]) {
                    xdc_wan_link_model m = {.rate_mbps = l->bandwidth_gbps * 1000.0 * L->o.degrade,
                                            .rtt_ms = l->rtt_ms,
                                            .jitter_ms = l->jitter_ms,
                                            .loss_pct = l->loss_pct,
                                            .seed = (uint64_t)link + 1};
                    rc = xdc_wan_relay_create("127.0.0.1", 0, host, target, &m, &L->relays[link], &d);
                    if (rc == XDC_OK) {
                        port = xdc_wan_relay_port(L->relays[link]);
                        if (L->o.outage_ms > 0)
                            xdc_wan_relay_schedule_outage(L->relays[link], L->o.outage_start_ms, L->o.outage_ms);
                        if (link >= L->n_relays) L->n_relays = link + 1;
                        XDC_DEBUG(XDC_SUB_ORCH, "emulated link %s -> %s (%g Mbit/s, %g ms RTT)", L->t->regions[i].name,
                                  L->t->regions[j].name, m.rate_mbps, m.rtt_ms);
                    }
                } else {
                    rc = xdc_wan_relay_add_route(L->relays[link], "127.0.0.1", 0, host, target, &port, &d);
                }
                if (rc != XDC_OK) {
                    XDC_WARN(XDC_SUB_ORCH, "relay for %s -> %s rank %d: %s", L->t->regions[i].name,
                             L->t->regions[j].name, k, d.msg);
                    continue;
                }
                L->relay_done[idx] = 1;
                snprintf(key, sizeof key, "relay/%d/%d/%d", i, j, k);
                snprintf(val, sizeof val, "127.0.0.1:%d", port);
                rdzv_server_set(L->rdzv, key, val);
            }
}

static xdc_err_t start_agents(launch *L, xdc_diag *diag)
{
    for (int r = 0; r < L->t->n_regions; r++)
        for (int n = 0; n < L->t->regions[r].n_hosts; n++) {
            if (L->n_agents == LAUNCH_MAX_AGENTS) {
                xdc_diag_set(diag, "more than %d nodes: launch the agents with your scheduler instead",
                             LAUNCH_MAX_AGENTS);
                return XDC_ERR_RANGE;
            }
            char node[16];
            snprintf(node, sizeof node, "%d", n);
            char *argv[20];
            int a = 0;
            argv[a++] = "agent";
            argv[a++] = "--topology";
            argv[a++] = (char *)L->o.topology;
            argv[a++] = "--config";
            argv[a++] = (char *)L->o.config;
            argv[a++] = "--run-dir";
            argv[a++] = L->o.run_dir;
            argv[a++] = "--region";
            argv[a++] = L->t->regions[r].name;
            argv[a++] = "--node";
            argv[a++] = node;
            argv[a++] = "--host";
            argv[a++] = L->t->regions[r].hosts[n];
            argv[a++] = "--coordinator";
            argv[a++] = L->coordinator;
            argv[a++] = "--run-id";
            argv[a++] = (char *)L->o.run_id;
            if (L->o.emulate) argv[a++] = "--emulate-wan";
            if (L->o.resume) argv[a++] = "--resume";
            argv[a] = NULL;
            snprintf(L->agent_names[L->n_agents], sizeof L->agent_names[0], "%s/%s", L->t->regions[r].name,
                     L->t->regions[r].hosts[n]);
            XDC_CHECK(orch_proc_spawn(argv, NULL, NULL, NULL, &L->agents[L->n_agents], diag));
            L->n_agents++;
        }
    return XDC_OK;
}

/* The failure note agent `i` left (the one whose exit we are reporting), else the first any agent left,
 * else "". */
static void read_failure(const launch *L, int i, char *out, size_t cap)
{
    out[0] = '\0';
    for (int pass = 0; pass < 2 && !out[0]; pass++) {
        int a = 0;
        for (int r = 0; r < L->t->n_regions && !out[0]; r++)
            for (int n = 0; n < L->t->regions[r].n_hosts && !out[0]; n++, a++) {
                if (pass == 0 && a != i) continue;
                char path[1024];
                snprintf(path, sizeof path, "%s/failed-%s-%d", L->o.run_dir, L->t->regions[r].name, n);
                FILE *f = fopen(path, "r");
                if (!f) continue;
                if (fgets(out, (int)cap, f)) out[strcspn(out, "\n")] = '\0';
                fclose(f);
            }
    }
}

/* The coordinator's end of a run: global rank 0 set "finished" after everyone passed the last barrier;
 * then give the members a moment (at most 10 s) to take their replies and leave before the store
 * closes under them. */
static int run_finished(launch *L)
{
    char val[16];
    if (rdzv_server_get(L->rdzv, "finished", val, sizeof val) != 0) return 0;
    if (!L->finish_at) L->finish_at = xdc_deadline_ms(10000);
    return rdzv_server_connections(L->rdzv) == 0 || xdc_deadline_passed(L->finish_at);
}

/* Wait for every agent (the coordinator: for every worker's report); on the first failure stop the
 * rest. Members that never join within the rendezvous timeout fail the run with their names. Returns
 * the run's exit code. */
static int supervise(launch *L)
{
    int alive = L->n_agents, rc = XDC_EX_OK;
    uint64_t kill_at = 0, next_nag = xdc_now_ns() + 10000 * XDC_NS_PER_MS;
    uint64_t join_deadline = xdc_deadline_ms(L->cfg.rendezvous_timeout_ms + 5000);
    int joined = 0;
    while (alive > 0 || (L->o.coordinator && rc == XDC_EX_OK)) {
        if (L->o.emulate) pump_relays(L);
        char missing[2048], key[256], why[1024];
        if (g_interrupted && rc == XDC_EX_OK) {
            fprintf(stderr, "xdc %s: interrupted; stopping\n", L->o.coordinator ? "coordinator" : "launch");
            rc = XDC_EX_TEMPFAIL;
        }
        if (!joined && rc == XDC_EX_OK) {
            joined = rdzv_server_missing(L->rdzv, -1, missing, sizeof missing) == 0;
            if (!joined && xdc_deadline_passed(join_deadline)) {
                fprintf(stderr, "xdc: run failed: members never joined the rendezvous: %s\n", missing);
                rc = XDC_EX_UNAVAILABLE;
            }
        }
        if (L->o.coordinator && rc == XDC_EX_OK) {
            if (rdzv_server_find(L->rdzv, "failed/", key, sizeof key, why, sizeof why) == 0) {
                fprintf(stderr, "xdc coordinator: run failed: %s: %s\n", key + 7, why);
                rc = XDC_EX_UNAVAILABLE;
            } else if (run_finished(L)) {
                break;
            }
        }
        if (rc != XDC_EX_OK && !kill_at) {
            for (int i = 0; i < L->n_agents; i++) orch_proc_signal(L->agents[i], SIGTERM);
            kill_at = xdc_deadline_ms(10000);
        }
        if (kill_at && xdc_deadline_passed(kill_at))
            for (int i = 0; i < L->n_agents; i++) orch_proc_signal(L->agents[i], SIGKILL);
        int status;
        pid_t p = alive > 0 ? waitpid(-1, &status, WNOHANG) : 0;
        if (p == 0) {
            if (L->o.coordinator && rc != XDC_EX_OK) break;
            struct timespec ts = {0, 20 * 1000000L}; /* supervisor tick: relays, signals, nagging */
            nanosleep(&ts, NULL);
            if (xdc_now_ns() > next_nag && rc == XDC_EX_OK) {
                if (rdzv_server_missing(L->rdzv, 30000, missing, sizeof missing) > 0)
                    XDC_INFO(XDC_SUB_ORCH, "waiting for: %s", missing);
                next_nag = xdc_now_ns() + 10000 * XDC_NS_PER_MS;
            }
            continue;
        }
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < L->n_agents; i++) {
            if (L->agents[i] != p) continue;
            L->agents[i] = 0;
            alive--;
            if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && rc == XDC_EX_OK) {
                char how[128];
                orch_proc_describe(status, how, sizeof how);
                read_failure(L, i, why, sizeof why);
                fprintf(stderr, "xdc launch: run failed: %s\n  (agent %s %s); stopping the other agents\n",
                        why[0] ? why : "an agent failed", L->agent_names[i], how);
                rc = WIFEXITED(status) && WEXITSTATUS(status) ? WEXITSTATUS(status) : XDC_EX_UNAVAILABLE;
            }
        }
    }
    return rc;
}

/* Merge the per-rank traces into RUN/trace.json (one timeline for Perfetto); "" when there are none. */
static void merge_traces(const launch *L, char *out, size_t cap)
{
    char pattern[700];
    glob_t g;
    out[0] = '\0';
    snprintf(pattern, sizeof pattern, "%s/traces/trace-*.json", L->o.run_dir);
    if (glob(pattern, 0, NULL, &g) != 0) return;
    snprintf(out, cap, "%s/trace.json", L->o.run_dir);
    xdc_diag d = {{0}};
    if (orch_trace_merge(out, (const char *const *)g.gl_pathv, (int)g.gl_pathc, &d) != XDC_OK) {
        XDC_WARN(XDC_SUB_ORCH, "trace merge: %s", d.msg);
        out[0] = '\0';
    }
    globfree(&g);
}

static void print_summary(launch *L, double wall)
{
    char trace[800];
    merge_traces(L, trace, sizeof trace);
    char res[512];
    double vl = 0, tok_s = 0;
    char hash[32] = "0";
    long long steps = 0;
    if (rdzv_server_get(L->rdzv, "result", res, sizeof res) == 0)
        sscanf(res, "%lf %31s %lld %lf", &vl, hash, &steps, &tok_s);
    unsigned long long tx_all = 0, raw_all = 0;
    double exposed_pct = 0;
    for (int r = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
            char key[64], val[512];
            snprintf(key, sizeof key, "stats/%d/%d", r, k);
            if (rdzv_server_get(L->rdzv, key, val, sizeof val) != 0) continue;
            unsigned long long tx, raw;
            double t_step, t_comp, t_intra, t_wan;
            if (sscanf(val, "%llu %llu %lf %lf %lf %lf", &tx, &raw, &t_step, &t_comp, &t_intra, &t_wan) != 6) continue;
            tx_all += tx;
            raw_all += raw;
            if (r == 0 && k == 0 && t_step > 0) exposed_pct = 100.0 * t_wan / t_step;
        }
    printf("\nrun %s (%s mode) finished in %.1f s: %.0f tokens/s, WAN %.2f MB sent for %.2f MB of fp32 (x%.1f), "
           "exposed WAN %.1f%% of step time\n  logs: %s/logs/   trace (Perfetto): %s\n",
           L->o.run_id, orch_mode_name(L->cfg.mode), wall, tok_s, (double)tx_all / 1e6, (double)raw_all / 1e6,
           tx_all ? (double)raw_all / (double)tx_all : 0.0, exposed_pct, L->o.run_dir, trace[0] ? trace : "(none)");
    printf("final val_loss=%.4f params_xxh64=%s steps=%lld wan_bytes=%llu exposed_wan_pct=%.1f\n", vl, hash, steps,
           tx_all, exposed_pct);
    fflush(stdout);
}

static void launch_close(launch *L)
{
    for (int i = 0; i < L->n_relays; i++) xdc_wan_relay_destroy(L->relays[i]);
    rdzv_server_destroy(L->rdzv);
    xdc_wan_engine_destroy(L->eng);
    xdc_topology_destroy(L->t);
}

static int run_launch(int argc, char **argv, int coordinator)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"run-dir", required_argument, NULL, 'd'},
                                         {"run-id", required_argument, NULL, 'i'},
                                         {"emulate-wan", no_argument, NULL, 'e'},
                                         {"no-emulate-wan", no_argument, NULL, 'E'},
                                         {"outage", required_argument, NULL, 'o'},
                                         {"resume", no_argument, NULL, 'r'},
                                         {"log-format", required_argument, NULL, 'l'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"degrade-links", required_argument, NULL, 'g'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static launch L;
    memset(&L, 0, sizeof L);
    L.o.emulate = -1;
    L.o.coordinator = coordinator;
    L.o.host = coordinator ? "0.0.0.0" : "127.0.0.1";
    L.o.port = coordinator ? 29400 : 0;
    L.o.degrade = 1.0;
    const char *run_dir = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:i:eEo:rl:H:p:g:h", opts, NULL)) != -1) {
        switch (c) {
        case 't': L.o.topology = optarg; break;
        case 'c': L.o.config = optarg; break;
        case 'd': run_dir = optarg; break;
        case 'i': L.o.run_id = optarg; break;
        case 'e': L.o.emulate = 1; break;
        case 'E': L.o.emulate = 0; break;
        case 'r': L.o.resume = 1; break;
        case 'l': L.o.log_format = optarg; break;
        case 'H': L.o.host = optarg; break;
        case 'g': {
            char *end;
            L.o.degrade = strtod(optarg, &end);
            if (*end || !(L.o.degrade > 0 && L.o.degrade <= 1)) {
                fprintf(stderr, "xdc launch: --degrade-links wants a fraction in (0, 1], got '%s'\n", optarg);
                return XDC_EX_USAGE;
            }
            break;
        }
        case 'p':
            L.o.port = atoi(optarg);
            if (L.o.port < 0 || L.o.port > 65535) return launch_usage(stderr);
            break;
        case 'o':
            if (parse_outage(optarg, &L.o) != 0) {
                fprintf(stderr, "xdc launch: --outage wants DURATION@START such as 5s@10s, got '%s'\n", optarg);
                return XDC_EX_USAGE;
            }
            break;
        case 'h': return launch_usage(stdout);
        default: return launch_usage(stderr);
        }
    }
    if (!L.o.topology || !L.o.config || optind != argc || (coordinator && !run_dir)) return launch_usage(stderr);
    if (L.o.log_format) {
        if (strcmp(L.o.log_format, "json") != 0 && strcmp(L.o.log_format, "text") != 0) {
            fprintf(stderr, "xdc launch: --log-format must be text or json\n");
            return XDC_EX_USAGE;
        }
        setenv("XDC_LOG_FORMAT", L.o.log_format, 1); /* inherited by agents and workers */
        xdc_log_set_format(strcmp(L.o.log_format, "json") == 0 ? XDC_LOG_JSON : XDC_LOG_TEXT);
    }
    xdc_cfg_errors errs;
    if (xdc_topology_load(L.o.topology, &L.t, &errs) != XDC_OK ||
        orch_run_config_load(L.o.config, &L.cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        launch_close(&L);
        return XDC_EX_CONFIG;
    }
    orch_planned plan;
    xdc_diag pd = {{0}};
    xdc_err_t prc = L.cfg.plan_auto ? orch_plan_apply(&L.cfg, L.t, &plan, &pd) : XDC_OK;
    if (prc != XDC_OK) {
        fprintf(stderr, "xdc %s: %s\n", coordinator ? "coordinator" : "launch", pd.msg);
        launch_close(&L);
        return xdc_cli_exit_code(prc);
    }
    if (L.cfg.plan_auto) {
        char line[512];
        orch_plan_describe(&L.cfg, &plan.plan, line, sizeof line);
        printf("%s\n", line);
    }
    static char run_id[64];
    if (!L.o.run_id) {
        snprintf(run_id, sizeof run_id, "run-%llu-%d", (unsigned long long)(xdc_wall_ns() / 1000000000ull),
                 (int)getpid());
        L.o.run_id = run_id;
    }
    snprintf(L.o.run_dir, sizeof L.o.run_dir, "%s", run_dir ? run_dir : "runs");
    mkdir(L.o.run_dir, 0755);
    if (!run_dir) {
        size_t n = strlen(L.o.run_dir);
        snprintf(L.o.run_dir + n, sizeof L.o.run_dir - n, "/%s", L.o.run_id);
        mkdir(L.o.run_dir, 0755);
    }
    if (L.o.emulate < 0) L.o.emulate = !coordinator && L.t->n_regions > 1; /* every region is on this host */
    if (!coordinator) setenv("XDC_ADVERTISE_HOST", "127.0.0.1", 1);        /* node names are labels here */
    xdc_log_set_identity("launch", "local", -1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    double t0 = (double)xdc_now_ns() / 1e9;
    xdc_diag d = {{0}};
    const char *what = "certificates";
    xdc_err_t rc = make_certs(&L, &d);
    if (rc == XDC_OK) what = "rendezvous", rc = start_rendezvous(&L, &d);
    if (rc == XDC_OK) {
        printf("xdc launch: run %s, %d regions, %d workers, %s mode, %s WAN; rendezvous at %s; run folder %s\n",
               L.o.run_id, L.t->n_regions, xdc_topology_total_workers(L.t), orch_mode_name(L.cfg.mode),
               L.o.emulate ? "emulated" : "real", L.coordinator, L.o.run_dir);
        if (coordinator)
            printf("start one agent per node with:\n  xdc agent --topology %s --config %s --run-dir %s --coordinator %s"
                   " --run-id %s --region REGION --node N%s\n",
                   L.o.topology, L.o.config, L.o.run_dir, L.coordinator, L.o.run_id,
                   L.o.emulate ? " --emulate-wan" : "");
        fflush(stdout);
        what = "agents";
        if (!coordinator) rc = start_agents(&L, &d);
    }
    if (rc != XDC_OK) {
        fprintf(stderr, "xdc launch: %s: %s: %s\n", what, xdc_strerror(rc), d.msg);
        for (int i = 0; i < L.n_agents; i++) orch_proc_signal(L.agents[i], SIGKILL);
        launch_close(&L);
        return xdc_cli_exit_code(rc);
    }
    int ex = supervise(&L);
    if (ex == XDC_EX_OK) print_summary(&L, (double)xdc_now_ns() / 1e9 - t0);
    launch_close(&L);
    return ex;
}

int xdc_cmd_launch(int argc, char **argv) { return run_launch(argc, argv, 0); }

int xdc_cmd_coordinator(int argc, char **argv) { return run_launch(argc, argv, 1); }
