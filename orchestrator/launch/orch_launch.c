/* orch_launch.c — `xdc launch`: one command for a whole run on this machine. It checks the topology and
 * run file, makes the run folder and its certificates (a cluster CA, one node certificate per worker),
 * hosts the rendezvous store, makes the topology's links real with one userspace relay per link and
 * worker pair when the WAN is emulated, starts one `xdc agent` per node, and waits. A failure anywhere
 * stops the run with the failed rank named; success ends with one summary line. */
#include "orchestrator/launch/orch_launch.h"
#include "orchestrator/launch/orch_manifest.h"

#include "orchestrator/launch/orch_device.h"
#include "orchestrator/launch/orch_failure.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/elastic/orch_decider.h"
#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "orchestrator/obs/orch_trace.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "topology/xdc_topology.h"
#include "wan/emu/xdc_wan_emu.h"
#include "wan/xdc_wan.h"
#include "wan/xdc_wan_certs.h"

#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LAUNCH_MAX_AGENTS  ORCH_PROCS_MAX
#define LAUNCH_MAX_RELAYS  1024
#define LAUNCH_TICK_MS     20    /* rendezvous checks and relay routes between child events */
#define LAUNCH_NAG_MS      10000 /* log who is missing this often */
#define LAUNCH_LEAVE_MS    10000 /* coordinator: how long members may take to leave after "finished" */
#define LAUNCH_FINISHED_MS 250   /* coordinator: how often it asks the store whether the run finished (etcd reads) */

typedef struct {
    orch_launch_opts o; /* run_dir and run_id point into the fields below */
    char run_dir[512], run_id[256];
    xdc_topology *t;
    orch_run_config cfg;
    xdc_wan_engine *eng;
    rdzv_server *rdzv;
    rdzv_target store;                        /* which store: the built-in one hosted here, or etcd */
    char coordinator[300];                    /* host:port of the store (etcd's with etcd) */
    xdc_wan_relay *relays[LAUNCH_MAX_RELAYS]; /* one per pair of regions */
    /* per (pair i < j, worker of j) route i dials j: the address of j's worker it leads to ("": not open);
     * opened again, in elastic runs, once that worker is another process (j restarted: checked while j is
     * out of the run, as its new worker publishes its address before it asks to rejoin) */
    char relay_to[LAUNCH_MAX_RELAYS][64];
    /* per (pair i < j, worker of i) route a rejoining j dials i: the address of i's worker it leads to ("":
     * not open); opened again to a restarted worker of i (i rejoining at the same round as j) */
    char relay_back_to[LAUNCH_MAX_RELAYS][64];
    int n_relays;
    uint64_t finish_at;     /* coordinator: when to stop waiting for members to leave */
    uint64_t next_finished; /* coordinator: when to ask the store whether the run finished again (xdc_now_ns) */
    uint64_t join_deadline; /* members that have not joined by then fail the run */
    uint64_t next_nag;
    int joined;
    orch_device device; /* the override for every region (ORCH_DEVICE_TOPOLOGY: none) */
    orch_creds creds;   /* the rendezvous's credentials (coordinator/0); their folder, CA, CRL go to agents */
    int run_id_given;   /* --run-id was given: the certificates must name it (else theirs is taken) */
    orch_procs agents;
    int agent_region[LAUNCH_MAX_AGENTS];       /* the region of each agent slot (restarts add slots) */
    int restarts[XDC_TOPO_MAX_REGIONS];        /* --max-restarts: each region's agents started again so far */
    uint8_t restart_due[XDC_TOPO_MAX_REGIONS]; /* out of the run: start its agents again once all ended */
    /* Started again: the routes into its workers still to follow them (pump_relays). A launch that does not
     * decide sees the region out only through the holder's state, which may show it dropped and taken back
     * in one update: the restart itself says its routes must move. */
    int reroute_left[XDC_TOPO_MAX_REGIONS];
    uint8_t released[XDC_TOPO_MAX_REGIONS]; /* its agents were stopped: the run ended with it out */
    xdc_err_t blamed;                       /* the error of the member blamed for the failure; XDC_OK: none */
    int elastic; /* orch_quorum_elastic: outer rounds go by quorum, a lost region is not the run's end */
    orch_quorum quorum;
    orch_decider decider; /* whether this process decides the quorum's rounds now */
    orch_chaos *chaos;    /* --chaos: the fault injector, ticked with the run; NULL: none */
    orch_chaos_world chaos_world;
} launch;

void orch_link_model(const xdc_link *l, uint64_t seed, xdc_wan_link_model *m)
{
    *m = (xdc_wan_link_model){.rate_mbps = l->bandwidth_gbps * 1000.0,
                              .rtt_ms = l->rtt_ms,
                              .jitter_ms = l->jitter_ms,
                              .loss_pct = l->loss_pct,
                              .seed = seed};
}

void orch_launch_opts_default(orch_launch_opts *o, int coordinator)
{
    memset(o, 0, sizeof *o);
    o->emulate = -1;
    o->coordinator = coordinator;
    o->host = coordinator ? NULL : "127.0.0.1"; /* a coordinator listens where --host says, never by default */
    o->port = coordinator ? 29400 : 0;
    o->degrade = 1.0;
}

/* Certificates: the CA, the coordinator's, one per worker (region, local rank), unless the credentials
 * were given (then every node brings its own). Reused on --resume. */
static xdc_err_t make_certs(launch *L, xdc_diag *diag)
{
    if (orch_creds_given(&L->o.creds)) return XDC_OK;
    char dir[600], ca[700];
    snprintf(dir, sizeof dir, "%s/certs", L->run_dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    XDC_CHECK(orch_mkdirs(dir, 0700, diag));
    if (access(ca, F_OK) == 0) return XDC_OK;
    xdc_wan_cert_opts co = {.dir = dir, .run = L->run_id, .days = 30};
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

/* The built-in store's transport: a WAN engine with the coordinator's certificate. */
static xdc_err_t open_store_engine(launch *L, xdc_diag *diag)
{
    XDC_CHECK(orch_creds_member(&L->creds, L->run_id, RDZV_SERVER_REGION, 0, diag));
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    orch_creds_apply(&L->creds, &wc);
    wc.streams = 1;
    XDC_CHECK(xdc_wan_engine_create(&wc, &L->eng, diag));
    const char *run = xdc_wan_engine_identity(L->eng)->run;
    if (strcmp(run, L->run_id) != 0 && !L->run_id_given) {
        /* --resume in a folder whose certificates an earlier launch made: the run is theirs. */
        XDC_INFO(XDC_SUB_ORCH, "run id %s, from %s", run, L->creds.cert);
        snprintf(L->run_id, sizeof L->run_id, "%s", run);
    } else if (strcmp(run, L->run_id) != 0) {
        xdc_diag_set(diag, "%s names run '%s', but this run is '%s' (give --run-id %s)", L->creds.cert, run, L->run_id,
                     run);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

/* The store (built-in: hosted here on L->eng; etcd: the run's prefix, emptied), its members and the
 * run-wide keys' writers. */
static xdc_err_t start_rendezvous(launch *L, xdc_diag *diag)
{
    XDC_CHECK(rdzv_target_resolve(L->o.rdzv.rdzv, L->cfg.rdzv, L->run_id, &L->store, diag));
    rdzv_flags_tls(&L->o.rdzv, &L->store);
    L->store.attach = L->o.standby;
    XDC_CHECK(orch_creds_resolve(&L->o.creds, L->run_dir, &L->creds, diag)); /* for the agents too */
    if (L->store.kind == RDZV_BUILTIN) {
        snprintf(L->store.host, sizeof L->store.host, "%s", L->o.host);
        L->store.port = L->o.port;
        XDC_CHECK(open_store_engine(L, diag));
    }
    int total = xdc_topology_total_workers(L->t);
    char **names = xdc_calloc((size_t)total, sizeof *names);
    if (!names) return XDC_ERR_NOMEM;
    int n = 0;
    xdc_err_t rc = XDC_OK;
    for (int r = 0; r < L->t->n_regions; r++) {
        const xdc_region *g = &L->t->regions[r];
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
            names[n] = xdc_malloc(RDZV_MEMBER_MAX);
            if (names[n])
                snprintf(names[n], RDZV_MEMBER_MAX, "%s/%s:%d", g->name, g->hosts[k / g->workers_per_node], k);
            else rc = XDC_ERR_NOMEM;
            n++;
        }
    }
    if (rc == XDC_OK)
        rc = rdzv_server_open(&L->store, L->eng, (const char *const *)names, total, L->cfg.timeouts.rendezvous_ms,
                              &L->rdzv, diag);
    /* The run-wide keys and who writes them (orch_train.c): global rank 0 ends the run and re-plans; the
     * result comes from the last stage of region 0's first replica, or with span from the last worker; in an
     * elastic run from that of the lowest region left at the end, so each region's may write it. */
    int result_rank = L->cfg.span_regions ? total - 1 : L->cfg.pipeline_stages - 1;
    if (rc == XDC_OK && (result_rank < 0 || result_rank >= total)) {
        xdc_diag_set(diag, "rendezvous: %d pipeline stages for %d workers", L->cfg.pipeline_stages, total);
        rc = XDC_ERR_CONFIG;
    }
    L->elastic = orch_quorum_elastic(&L->cfg, L->t->n_regions);
    if (rc == XDC_OK) { /* before any member joins: what each may write, from the run's shape */
        rdzv_run_shape shape;
        rdzv_quota q;
        orch_run_config_rdzv_shape(&L->cfg, L->t->n_regions, &shape);
        rdzv_quota_for_run(&q, &shape);
        rdzv_server_quota(L->rdzv, &q);
        XDC_DEBUG(XDC_SUB_ORCH, "rendezvous: member quota %d rejoin bootstraps, %d keys under a granted prefix",
                  q.keys[RDZV_KEY_REJOIN], q.keys[RDZV_KEY_PREFIX]);
    }
    if (rc == XDC_OK) rc = rdzv_server_grant(L->rdzv, RDZV_KEY_FINISHED, names[0], diag);
    if (rc == XDC_OK) rc = rdzv_server_grant(L->rdzv, RDZV_PREFIX_REPLAN, names[0], diag);
    for (int r = 0; rc == XDC_OK && r < (L->elastic ? L->t->n_regions : 1); r++)
        rc = rdzv_server_grant(L->rdzv, RDZV_KEY_RESULT, names[xdc_topology_first_worker(L->t, r) + result_rank], diag);
    for (int i = 0; i < total; i++) xdc_free(names[i]);
    xdc_free(names);
    XDC_CHECK(rc);
    char me[256] = "127.0.0.1";
    if (L->store.kind == RDZV_ETCD) snprintf(me, sizeof me, "%s", L->store.host);
    else if (strcmp(L->o.host, "0.0.0.0") == 0) gethostname(me, sizeof me);
    else snprintf(me, sizeof me, "%s", L->o.host);
    snprintf(L->coordinator, sizeof L->coordinator, "%s:%d", me, rdzv_server_port(L->rdzv));
    if (L->elastic) {
        orch_quorum_init(&L->quorum, L->t, L->rdzv, orch_quorum_min(&L->cfg, L->t->n_regions), L->cfg.elastic.grace_ms,
                         L->cfg.timeouts.operation_ms, orch_quorum_exchange_silent_ms(&L->cfg));
        orch_quorum_spread(&L->quorum, L->cfg.elastic.grace_min_ms);
        L->quorum.last_round = orch_quorum_last_round(&L->cfg);
        L->quorum.joins_in_round = orch_quorum_joins_in_round(&L->cfg);
        L->quorum.ran = L->cfg.diloco.train_while_waiting;
    }
    if (L->elastic && L->cfg.diloco.nobody_waits) { /* the decider counts each round's inner steps */
        double pace[XDC_TOPO_MAX_REGIONS];
        XDC_CHECK(orch_run_config_pace(&L->cfg, L->t, pace, diag));
        orch_quorum_pace(&L->quorum, L->cfg.diloco.inner_steps, pace);
    }
    orch_decider_init(&L->decider, &L->quorum, L->o.decider_ttl_s);
    return XDC_OK;
}

/* Emulated WAN: one relay per pair of regions i < j (link i->j's model), with one route per worker of j
 * that someone in i dials: once worker (j, rank) has published its listening port, a route to it opens
 * and its port is published as relay/i/j/rank. All routes of a link share its rate, as on a real link.
 * A region j that left an elastic run gets routes the other way too, relay/j/i/rank to each worker of each
 * lower region i: its restarted workers rejoin by dialing every member (orch_rejoin.c), while members
 * only ever dial higher regions. They share the link's relay, so the joiner's traffic to i is paced with
 * i's traffic to j (the topology's links are symmetric in rate); such a route follows worker (i, rank) to
 * a new process (regions that left both, rejoining at one round: j dials i). `to_addr` (cap 64; NULL: not
 * kept): the address the route leads to. */
static int open_route(launch *L, int link, int from, int to, int rank, char *to_addr)
{
    char val[300], host[256];
    int target, port = 0, lo = from < to ? from : to, hi = from < to ? to : from;
    const xdc_link *l = xdc_topology_link(L->t, lo, hi);
    if (rdzv_server_get(L->rdzv, rdzv_key_wan(to, rank).s, val, sizeof val) != 0 || !l ||
        orch_split_hostport(val, host, sizeof host, &target) != 0)
        return 0;
    xdc_diag d = {{0}};
    xdc_err_t rc;
    if (!L->relays[link]) {
        xdc_wan_link_model m;
        orch_link_model(l, (uint64_t)link + 1, &m);
        m.rate_mbps *= L->o.degrade;
        rc = xdc_wan_relay_create("127.0.0.1", 0, host, target, &m, &L->relays[link], &d);
        if (rc == XDC_OK) {
            port = xdc_wan_relay_port(L->relays[link]);
            for (int o = 0; o < L->o.n_outages; o++) /* at most the relay's capacity: never refused */
                xdc_wan_relay_schedule_outage(L->relays[link], &L->o.outages[o]);
            if (link >= L->n_relays) L->n_relays = link + 1;
            XDC_DEBUG(XDC_SUB_ORCH, "emulated link %s -> %s (%g Mbit/s, %g ms RTT)", L->t->regions[lo].name,
                      L->t->regions[hi].name, m.rate_mbps, m.rtt_ms);
        }
    } else {
        rc = xdc_wan_relay_add_route(L->relays[link], "127.0.0.1", 0, host, target, &port, &d);
    }
    if (rc != XDC_OK) {
        XDC_WARN(XDC_SUB_ORCH, "relay for %s -> %s rank %d: %s", L->t->regions[from].name, L->t->regions[to].name, rank,
                 d.msg);
        return 0;
    }
    if (to_addr) snprintf(to_addr, 64, "%s", val);
    snprintf(val, sizeof val, "127.0.0.1:%d", port);
    rdzv_server_set(L->rdzv, rdzv_key_relay(from, to, rank).s, val);
    return 1;
}

/* A route to worker (i, rank) leads to `to_addr`, and that worker's address is another by now. */
static int route_stale(const launch *L, int i, int rank, const char *to_addr)
{
    char val[300];
    return rdzv_server_get(L->rdzv, rdzv_key_wan(i, rank).s, val, sizeof val) == 0 && strcmp(val, to_addr) != 0;
}

static void pump_relays(launch *L)
{
    int fwd = 0, back = 0, link = 0;
    for (int i = 0; i < L->t->n_regions; i++)
        for (int j = i + 1; j < L->t->n_regions && link < LAUNCH_MAX_RELAYS; j++, link++) {
            int out = L->elastic && (!L->quorum.live[j] || L->reroute_left[j] > 0);
            for (int k = 0; k < xdc_topology_region_workers(L->t, j); k++, fwd++) {
                if (fwd >= LAUNCH_MAX_RELAYS) continue;
                if (!L->relay_to[fwd][0]) {
                    open_route(L, link, i, j, k, L->relay_to[fwd]);
                } else if (out && route_stale(L, j, k, L->relay_to[fwd])) {
                    open_route(L, link, i, j, k, L->relay_to[fwd]);
                    if (L->reroute_left[j] > 0) L->reroute_left[j]--;
                }
            }
            for (int k = 0; k < xdc_topology_region_workers(L->t, i); k++, back++)
                if (back < LAUNCH_MAX_RELAYS && out && L->relays[link] && route_stale(L, i, k, L->relay_back_to[back]))
                    open_route(L, link, j, i, k, L->relay_back_to[back]);
        }
}

/* Node n of region r: `xdc agent` with the run's files and this node's identity, in the next agent slot. */
static xdc_err_t start_agent(launch *L, int r, int n, xdc_diag *diag)
{
    if (L->agents.n == LAUNCH_MAX_AGENTS) {
        xdc_diag_set(diag, "more than %d agents (nodes and restarts): launch the agents with your scheduler instead",
                     LAUNCH_MAX_AGENTS);
        return XDC_ERR_RANGE;
    }
    L->agent_region[L->agents.n] = r;
    xdc_region *g = &L->t->regions[r];
    char node[16], name[ORCH_PROC_NAME_MAX];
    snprintf(node, sizeof node, "%d", n);
    int n_exec = 0;
    while (L->o.exec_argv && L->o.exec_argv[n_exec]) n_exec++;
    char **argv = xdc_calloc(17 + 4 + ORCH_CREDS_ARGV + RDZV_FLAGS_ARGV + 2 + (size_t)n_exec + 1, sizeof *argv);
    if (!argv) return XDC_ERR_NOMEM;
    char *const head[17] = {"agent",
                            "--topology",
                            (char *)L->o.topology,
                            "--config",
                            (char *)L->o.config,
                            "--run-dir",
                            L->run_dir,
                            "--region",
                            g->name,
                            "--node",
                            node,
                            "--host",
                            g->hosts[n],
                            "--coordinator",
                            L->coordinator,
                            "--run-id",
                            L->run_id};
    memcpy(argv, head, sizeof head); /* the rest NULL: room for the optional flags below and the end */
    int a = 17;
    a += orch_creds_argv(&L->creds, argv + a);
    if (L->o.emulate) argv[a++] = "--emulate-wan";
    if (L->o.resume) argv[a++] = "--resume";
    if (L->device != ORCH_DEVICE_TOPOLOGY) {
        argv[a++] = "--device";
        argv[a++] = (char *)orch_device_name(L->device);
    }
    /* With etcd the URL as resolved here, its prefix made explicit, so every process uses this run's keys. */
    rdzv_flags_argv(&L->o.rdzv, L->store.kind == RDZV_ETCD ? L->store.url : NULL, argv, &a);
    if (n_exec) {
        argv[a++] = "--exec";
        argv[a++] = "--";
        memcpy(argv + a, L->o.exec_argv, (size_t)n_exec * sizeof *argv);
    }
    /* Its workers' claim to their names in an etcd store: a restarted one revokes its predecessor's lease. */
    char gen[48], *env[] = {gen, NULL};
    snprintf(gen, sizeof gen, "XDC_RDZV_GENERATION=%d", L->restarts[r]);
    snprintf(name, sizeof name, "%s/%s", g->name, g->hosts[n]);
    xdc_err_t rc = orch_procs_spawn(&L->agents, name, NULL, argv, env, NULL, NULL, diag);
    xdc_free(argv);
    return rc;
}

static xdc_err_t start_agents(launch *L, xdc_diag *diag)
{
    for (int r = 0; r < L->t->n_regions; r++)
        for (int n = 0; n < L->t->regions[r].n_hosts; n++) XDC_CHECK(start_agent(L, r, n, diag));
    return XDC_OK;
}

/* The note the agent of region r, node n left in the run folder, into out[cap] ("" when none). */
static void read_note(const launch *L, int r, int n, char *out, size_t cap)
{
    char path[1024];
    out[0] = '\0';
    snprintf(path, sizeof path, "%s/failed-%s-%d", L->run_dir, L->t->regions[r].name, n);
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(out, (int)cap, f)) out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* Who caused the failure and why (orch_failure.h), from every member's report and connection and the
 * agents' notes; with no member to blame, the note of agent `agent` (-1: any), else "". Returns the
 * error the run ends with (XDC_OK: no member to blame). */
static xdc_err_t blame(launch *L, int agent, char *why, size_t cap)
{
    xdc_err_t err = XDC_OK;
    int total = xdc_topology_total_workers(L->t), n_agents = 0; /* one per node, ours or (coordinator) not */
    for (int r = 0; r < L->t->n_regions; r++) n_agents += L->t->regions[r].n_hosts;
    orch_failure_member *m = xdc_calloc((size_t)total, sizeof *m);
    rdzv_member_state *st = xdc_calloc((size_t)total, sizeof *st);
    char(*report)[RDZV_VALUE_MAX] = xdc_calloc((size_t)total, sizeof *report);
    char(*note)[1024] = xdc_calloc((size_t)(n_agents > 0 ? n_agents : 1), sizeof *note);
    why[0] = '\0';
    if (!m || !st || !report || !note) {
        snprintf(why, cap, "(no memory to find the cause)");
        goto done;
    }
    for (int r = 0, a = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < L->t->regions[r].n_hosts; k++, a++) read_note(L, r, k, note[a], sizeof note[a]);
    for (int i = 0; i < total; i++) {
        rdzv_server_member(L->rdzv, i, &st[i]);
        m[i] = (orch_failure_member){
            .name = st[i].name,
            .report = rdzv_server_get(L->rdzv, rdzv_key_failed(st[i].name).s, report[i], sizeof report[i]) == 0
                          ? report[i]
                          : NULL,
            .connected = st[i].connected,
            .silent_s = st[i].silent_s,
            .detail = st[i].detail};
        char prefix[RDZV_MEMBER_MAX + 16];
        snprintf(prefix, sizeof prefix, "worker %s (", st[i].name);
        for (int a = 0; a < n_agents && !m[i].note; a++)
            if (strncmp(note[a], prefix, strlen(prefix)) == 0) m[i].note = note[a];
    }
    /* A member blocked in a wait answers keepalives; one silent for the heartbeat timeout is not. */
    double limit = (double)L->cfg.timeouts.heartbeat_ms / 1000.0;
    if (orch_failure_blame(m, total, limit < 1.0 ? 1.0 : limit, why, cap, &err) < 0)
        for (int a = 0; a < n_agents && !why[0]; a++)
            if (agent < 0 || a == agent) snprintf(why, cap, "%s", note[a]);
done:
    xdc_free(m);
    xdc_free(st);
    xdc_free(report);
    xdc_free(note);
    return err;
}

/* How many members of regions still in the run hold their connection to the store; their names into
 * who[cap]. Members of regions that left are not counted: a killed process's connection lives on in the
 * store until the WAN deadline (its engine may yet reconnect), and a rejoined region's member has a new one;
 * except a restarted one still asking to rejoin, which leaves once it read the end's decision. */
static int members_connected(launch *L, char *who, size_t cap)
{
    int n = 0;
    size_t len = 0;
    who[0] = '\0';
    for (int r = 0, i = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++, i++) {
            rdzv_member_state st;
            if (L->elastic && !L->quorum.live[r] && !orch_quorum_asks(&L->quorum, r, k)) continue;
            if (rdzv_server_member(L->rdzv, i, &st) != 0 || !st.connected) continue;
            if (len < cap) len += (size_t)snprintf(who + len, cap - len, "%s%s", n ? ", " : "", st.name);
            n++;
        }
    return n;
}

/* The coordinator's end of a run: global rank 0 set "finished" after everyone passed the last barrier (an
 * elastic run: the end's quorum round was decided here and the result posted after it); then give the
 * members a moment (at most LAUNCH_LEAVE_MS) to take their replies and leave before the store closes under
 * them. */
static int run_finished(launch *L)
{
    char val[RDZV_VALUE_MAX], who[1024];
    if (L->elastic ? rdzv_server_get(L->rdzv, rdzv_key_quorum(RDZV_ROUND_END).s, val, sizeof val) != 0 ||
                         rdzv_server_get(L->rdzv, RDZV_KEY_RESULT, val, sizeof val) != 0
                   : rdzv_server_get(L->rdzv, RDZV_KEY_FINISHED, val, sizeof val) != 0)
        return 0;
    xdc_diag d = {{0}};
    if (!L->finish_at && L->elastic && !L->decider.held && /* the summary's regions dropped: the decider's */
        rdzv_server_get(L->rdzv, RDZV_KEY_DECIDER_STATE, val, sizeof val) == 0 &&
        orch_decider_load(&L->quorum, val, &d) != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH, "%s", d.msg);
    if (!L->finish_at) L->finish_at = xdc_deadline_ms(LAUNCH_LEAVE_MS);
    int n = members_connected(L, who, sizeof who);
    if (n && xdc_deadline_passed(L->finish_at))
        XDC_WARN(XDC_SUB_ORCH, "the run finished %d s ago but %d members still hold the store: %s; closing it",
                 LAUNCH_LEAVE_MS / 1000, n, who);
    return !n || xdc_deadline_passed(L->finish_at);
}

/* The decider of an elastic run: a region still in the run one of whose members reported a failure
 * (failed/<member>: the member itself, or a launch that saw its agent end while another process decided)
 * leaves it at once. Error (why[cap]) when too few regions are left. */
static xdc_err_t lose_reported(launch *L, char *why, size_t cap)
{
    for (int r = 0, i = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++, i++) {
            rdzv_member_state st;
            char report[RDZV_VALUE_MAX];
            if (!L->quorum.live[r] || rdzv_server_member(L->rdzv, i, &st) != 0) continue;
            if (rdzv_server_get(L->rdzv, rdzv_key_failed(st.name).s, report, sizeof report) != 0 || !report[0])
                continue; /* "": rejoined */
            char reason[RDZV_VALUE_MAX + RDZV_MEMBER_MAX];
            const char *text;
            (void)orch_failure_waited(report, &text);
            snprintf(reason, sizeof reason, "%s: %s", st.name, text);
            XDC_CHECK(orch_quorum_lose(&L->quorum, r, reason, why, cap));
        }
    return XDC_OK;
}

/* --max-restarts: start the agents of each region that is due again once every earlier agent of it ended
 * (its workers then learnt it left and exited); they rejoin at an outer round (orch_rejoin.c). Once the
 * run's end round is decided nobody can rejoin and a region out of the run has nothing left to give: its
 * agents still running are stopped (SIGTERM, SIGKILL after their grace), restarted ones instead of waiting
 * out their rejoin deadline, first ones instead of waiting for a worker that was stopped (SIGSTOP) or is in
 * a wait of the round it was dropped from. */
static xdc_err_t restart_regions(launch *L)
{
    int ended = L->elastic && L->quorum.decided == LLONG_MAX;
    for (int r = 0; r < L->t->n_regions; r++) {
        int alive = 0;
        for (int i = 0; i < L->agents.n; i++) alive += L->agent_region[i] == r && L->agents.pid[i] != 0;
        if (ended && !L->quorum.live[r] && alive && !L->released[r]) {
            XDC_WARN(XDC_SUB_ORCH, "the run ended with region %s out of it: stopping its agents",
                     L->t->regions[r].name);
            for (int i = 0; i < L->agents.n; i++)
                if (L->agent_region[i] == r && L->agents.pid[i] != 0) orch_proc_signal(L->agents.pid[i], SIGTERM);
            L->released[r] = 1;
        }
        if (ended) L->restart_due[r] = 0;
        if (!L->restart_due[r] || alive) continue;
        L->restart_due[r] = 0;
        L->restarts[r]++;
        L->reroute_left[r] = r * xdc_topology_region_workers(L->t, r); /* a route from each lower region */
        XDC_WARN(XDC_SUB_ORCH,
                 "starting region %s's agents again (restart %d of --max-restarts %d): it rejoins at an "
                 "outer round",
                 L->t->regions[r].name, L->restarts[r], L->o.max_restarts);
        xdc_diag d = {{0}};
        for (int n = 0; n < L->t->regions[r].n_hosts; n++) {
            xdc_err_t rc = start_agent(L, r, n, &d);
            if (rc != XDC_OK) {
                fprintf(stderr, "xdc launch: run failed: restarting region %s: %s\n", L->t->regions[r].name, d.msg);
                return rc;
            }
        }
    }
    return XDC_OK;
}

/* The supervise loop's periodic work (orch_proc.h): relay routes, members that never join (they fail
 * the run with their names), the coordinator's view of failures and of the end, who is still missing. */
static xdc_err_t launch_tick(void *ctx, int *done)
{
    launch *L = ctx;
    if (L->o.emulate) pump_relays(L);
    XDC_CHECK(restart_regions(L));
    char missing[2048], key[256], why[2048];
    if (!L->joined) {
        L->joined = rdzv_server_missing(L->rdzv, -1, missing, sizeof missing) == 0;
        if (!L->joined && xdc_deadline_passed(L->join_deadline)) {
            fprintf(stderr, "xdc: run failed: members never joined the rendezvous: %s\n", missing);
            return XDC_ERR_UNAVAILABLE;
        }
    }
    if (L->elastic) {
        int held = 0;
        xdc_diag dd = {{0}};
        xdc_err_t qrc = orch_decider_tick(&L->decider, &held, &dd);
        if (qrc != XDC_OK) snprintf(why, sizeof why, "%s", dd.msg);
        if (qrc == XDC_OK && held) qrc = lose_reported(L, why, sizeof why);
        if (qrc == XDC_OK && held) qrc = orch_quorum_tick(&L->quorum, why, sizeof why);
        if (qrc != XDC_OK && held && orch_decider_tick(&L->decider, &held, &dd) == XDC_OK && !held)
            qrc = XDC_OK; /* deposed during the tick: etcd refused what it decided, the run is not its to end */
        if (qrc != XDC_OK) {
            fprintf(stderr, "xdc %s: run failed: %s\n", L->o.coordinator ? "coordinator" : "launch", why);
            return qrc;
        }
    }
    if (L->chaos) orch_chaos_tick(L->chaos); /* after the decider's tick: a round it just decided is fresh */
    if (L->o.coordinator) {
        if (!L->elastic && rdzv_server_find(L->rdzv, RDZV_PREFIX_FAILED, key, sizeof key, why, sizeof why) == 0) {
            xdc_err_t err = blame(L, -1, why, sizeof why);
            fprintf(stderr, "xdc coordinator: run failed: %s\n", why);
            return err != XDC_OK ? err : XDC_ERR_UNAVAILABLE;
        }
        if (xdc_now_ns() >= L->next_finished) {
            L->next_finished = xdc_now_ns() + (uint64_t)LAUNCH_FINISHED_MS * XDC_NS_PER_MS;
            if (run_finished(L)) {
                *done = 1;
                return XDC_OK;
            }
        }
    }
    if (xdc_now_ns() > L->next_nag) {
        if (rdzv_server_missing(L->rdzv, 30000, missing, sizeof missing) > 0)
            XDC_INFO(XDC_SUB_ORCH, "waiting for: %s", missing);
        L->next_nag = xdc_now_ns() + LAUNCH_NAG_MS * XDC_NS_PER_MS;
    }
    return XDC_OK;
}

/* A launch that does not decide saw region r's agent end (`reason`): failed/<member> for each of the region's
 * workers that has none, so the holder drops the region at once rather than at a grace window (a killed
 * worker reports nothing itself). A restarted worker clears its member's report when it asks to rejoin. */
static void report_lost(launch *L, int r, const char *reason)
{
    int first = xdc_topology_first_worker(L->t, r);
    for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
        rdzv_member_state st;
        char val[RDZV_VALUE_MAX];
        if (rdzv_server_member(L->rdzv, first + k, &st) != 0 ||
            (rdzv_server_get(L->rdzv, rdzv_key_failed(st.name).s, val, sizeof val) == 0 && val[0]))
            continue;
        orch_failure_format(XDC_ERR_PEER_LOST, reason, val, sizeof val);
        rdzv_server_set(L->rdzv, rdzv_key_failed(st.name).s, val);
    }
}

static int agent_failed(void *ctx, const orch_procs *g, int i, pid_t pid, int status)
{
    char how[128], why[2048];
    (void)pid;
    orch_proc_describe(status, how, sizeof how);
    launch *L = ctx;
    int held = 0;
    xdc_diag dd = {{0}};
    if (L->elastic) { /* the region leaves the run; the others go on while they are enough */
        char reason[ORCH_PROC_NAME_MAX + 160];
        int r = L->agent_region[i];
        snprintf(reason, sizeof reason, "its agent %s %s", g->name[i], how);
        if (orch_decider_tick(&L->decider, &held, &dd) == XDC_OK && !held) { /* another process decides */
            report_lost(L, r, reason);
            if (L->restarts[r] < L->o.max_restarts) L->restart_due[r] = 1;
            return 1;
        }
        if (!L->quorum.live[r]) /* dropped earlier: its workers learnt so and left */
            XDC_INFO(XDC_SUB_ORCH, "agent %s of region %s, out of the run, ended: %s", g->name[i],
                     L->t->regions[r].name, how);
        if (orch_quorum_lose(&L->quorum, r, reason, why, sizeof why) == XDC_OK) {
            if (L->restarts[r] < L->o.max_restarts) L->restart_due[r] = 1;
            return 1;
        }
        fprintf(stderr, "xdc launch: run failed: %s; stopping the other agents\n", why);
        L->blamed = XDC_ERR_UNAVAILABLE;
        return 0;
    }
    L->blamed = blame(L, i, why, sizeof why);
    fprintf(stderr, "xdc launch: run failed: %s\n  (agent %s %s); stopping the other agents\n",
            why[0] ? why : "an agent failed", g->name[i], how);
    return 0;
}

/* --chaos: the schedule for this run's shape, injected through its workers, agents and relays. */
static xdc_err_t start_chaos(launch *L, xdc_diag *diag)
{
    orch_chaos_shape sh = {.n_regions = L->t->n_regions,
                           .steps = L->cfg.train.steps,
                           .restarts = L->elastic && L->o.max_restarts > 0,
                           .spare_regions = L->t->n_regions - orch_quorum_min(&L->cfg, L->t->n_regions),
                           .links = L->o.emulate};
    for (int r = 0; r < L->t->n_regions; r++) sh.workers[r] = xdc_topology_region_workers(L->t, r);
    L->chaos_world = (orch_chaos_world){.t = L->t,
                                        .run_dir = L->run_dir,
                                        .rdzv = L->rdzv,
                                        .agents = &L->agents,
                                        .agent_region = L->agent_region,
                                        .live = L->elastic ? L->quorum.live : NULL,
                                        .decided = L->elastic ? &L->quorum.decided : NULL,
                                        .restarts = L->restarts,
                                        .max_restarts = L->o.max_restarts,
                                        .relays = L->relays,
                                        .etcd_pids = L->store.kind == RDZV_ETCD ? getenv("XDC_CHAOS_ETCD_PIDS") : NULL,
                                        .decider = L->elastic && L->store.kind == RDZV_ETCD ? &L->decider : NULL,
                                        .decider_pids = getenv("XDC_CHAOS_DECIDER_PIDS")};
    return orch_chaos_create(&L->o.chaos, &sh, &L->chaos_world, &L->chaos, diag);
}

static void launch_interrupted(void *ctx, int sig)
{
    const launch *L = ctx;
    (void)sig;
    fprintf(stderr, "xdc %s: interrupted; stopping\n", L->o.coordinator ? "coordinator" : "launch");
}

/* Wait for every agent (the coordinator: for every worker's report); on the first failure stop the
 * rest. */
static xdc_err_t supervise(launch *L, int *agent_exit)
{
    L->next_nag = xdc_now_ns() + LAUNCH_NAG_MS * XDC_NS_PER_MS;
    L->join_deadline = xdc_deadline_ms(L->cfg.timeouts.rendezvous_ms + 5000);
    orch_supervisor sup = {.ctx = L,
                           .tick_ms = LAUNCH_TICK_MS,
                           .linger = L->o.coordinator,
                           .tick = launch_tick,
                           .failed = agent_failed,
                           .interrupted = launch_interrupted};
    xdc_err_t rc = orch_procs_supervise(&L->agents, &sup, agent_exit);
    if (rc == XDC_ERR_PEER_LOST && L->blamed != XDC_OK) { /* the cause's error, not the first agent's exit */
        rc = L->blamed;
        *agent_exit = 0;
    }
    return rc;
}

/* Merge the per-rank traces into RUN/trace.json (one timeline for Perfetto); "" when there are none. */
static void merge_traces(const launch *L, char *out, size_t cap)
{
    char pattern[700];
    glob_t g;
    out[0] = '\0';
    snprintf(pattern, sizeof pattern, "%s/traces/trace-*.json", L->run_dir);
    if (glob(pattern, 0, NULL, &g) != 0) return;
    snprintf(out, cap, "%s/trace.json", L->run_dir);
    xdc_diag d = {{0}};
    if (orch_trace_merge(out, (const char *const *)g.gl_pathv, (int)g.gl_pathc, &d) != XDC_OK) {
        XDC_WARN(XDC_SUB_ORCH, "trace merge: %s", d.msg);
        out[0] = '\0';
    }
    globfree(&g);
}

/* "us-east cuda (NCCL intra), eu-west cpu (shared-memory intra)": with `ran`, what each region's rank 0
 * published as device/<region> (the rule's answer where it published nothing), else the rule's. */
static void describe_devices(launch *L, int ran, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < L->t->n_regions && n < cap; r++) {
        char val[256];
        if (!ran || rdzv_server_get(L->rdzv, rdzv_key_device(L->t->regions[r].name).s, val, sizeof val) != 0)
            orch_device_describe(orch_device_of_region(L->device, L->t, r), -1, val, sizeof val);
        n += (size_t)snprintf(out + n, cap - n, "%s%s %s", r ? ", " : "", L->t->regions[r].name, val);
    }
}

static void print_summary(launch *L, double wall)
{
    char trace[800];
    merge_traces(L, trace, sizeof trace);
    char res[RDZV_VALUE_MAX], mask[XDC_TOPO_MAX_REGIONS + 1] = "";
    double vl = 0, tok_s = 0;
    char hash[32] = "0";
    long long steps = 0;
    if (rdzv_server_get(L->rdzv, RDZV_KEY_RESULT, res, sizeof res) == 0)
        sscanf(res, "%lf %31s %lld %lf %256s", &vl, hash, &steps, &tok_s, mask);
    /* Exposed WAN (share of step time) and compute utilisation (compute time over the training loop's wall
     * time) of every worker: the mean and the worst. */
    unsigned long long tx_all = 0, raw_all = 0;
    double exp_sum = 0, exp_max = 0, util_sum = 0, util_min = 0;
    int n = 0;
    for (int r = 0; r < L->t->n_regions; r++)
        for (int k = 0; k < xdc_topology_region_workers(L->t, r); k++) {
            char val[512];
            if (rdzv_server_get(L->rdzv, rdzv_key_stats(r, k).s, val, sizeof val) != 0) continue;
            unsigned long long tx, raw;
            double t_step, t_comp, t_intra, t_wan, t_wall;
            long long steps_done;
            if (sscanf(val, "%llu %llu %lf %lf %lf %lf %lld %lf", &tx, &raw, &t_step, &t_comp, &t_intra, &t_wan,
                       &steps_done, &t_wall) != 8)
                continue;
            tx_all += tx;
            raw_all += raw;
            double e = t_step > 0 ? 100.0 * t_wan / t_step : 0, u = t_wall > 0 ? t_comp / t_wall : 0;
            exp_sum += e;
            util_sum += u;
            exp_max = n == 0 || e > exp_max ? e : exp_max;
            util_min = n == 0 || u < util_min ? u : util_min;
            n++;
        }
    double exp_mean = n ? exp_sum / n : 0, util_mean = n ? util_sum / n : 0;
    printf("\nrun %s (%s mode) finished in %.1f s: %.0f tokens/s, WAN %.2f MB sent for %.2f MB of fp32 (x%.1f), "
           "exposed WAN %.1f%% of step time (mean of %d workers; worst %.1f%%), compute %.0f%% of wall time (worst "
           "%.0f%%)\n  logs: %s/logs/   steps: %s/steps/   trace (Perfetto): %s\n",
           L->run_id, orch_mode_name(L->cfg.mode), wall, tok_s, (double)tx_all / 1e6, (double)raw_all / 1e6,
           tx_all ? (double)raw_all / (double)tx_all : 0.0, exp_mean, n, exp_max, 100 * util_mean, 100 * util_min,
           L->run_dir, L->run_dir, trace[0] ? trace : "(none)");
    char devices[1024];
    describe_devices(L, 1, devices, sizeof devices);
    printf("  devices: %s\n", devices);
    if (L->elastic && L->quorum.dropped[0]) printf("  regions dropped: %s\n", L->quorum.dropped);
    /* An elastic run's result is the last round's members' (orch_train.c): named, comma-separated. */
    char covers[XDC_TOPO_MAX_REGIONS * XDC_NAME_MAX + 16] = "";
    for (int r = 0, n_c = 0; r < L->t->n_regions && mask[r]; r++)
        if (mask[r] == '1')
            n_c += snprintf(covers + n_c, sizeof covers - (size_t)n_c, "%s%s",
                            n_c ? "," : " regions=", L->t->regions[r].name);
    printf("final val_loss=%.4f params_xxh64=%s steps=%lld wan_bytes=%llu exposed_wan_pct=%.1f "
           "exposed_wan_pct_max=%.1f compute_util=%.3f compute_util_min=%.3f%s\n",
           vl, hash, steps, tx_all, exp_mean, exp_max, util_mean, util_min, covers);
    fflush(stdout);
}

static void launch_close(launch *L)
{
    orch_chaos_destroy(L->chaos);
    orch_procs_close(&L->agents);
    for (int i = 0; i < L->n_relays; i++) xdc_wan_relay_destroy(L->relays[i]);
    rdzv_server_destroy(L->rdzv);
    xdc_wan_engine_destroy(L->eng);
    xdc_topology_destroy(L->t);
}

/* The topology, the run file and, with `plan: auto`, the planner's choices (printed). */
static xdc_err_t launch_load(launch *L, xdc_diag *diag)
{
    xdc_cfg_errors errs;
    XDC_CHECK(orch_device_override(L->o.device, &L->device, NULL, diag));
    if (xdc_topology_load(L->o.topology, &L->t, &errs) != XDC_OK ||
        orch_run_config_load(L->o.config, &L->cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_ERR_CONFIG;
    }
    orch_run_config_scale_timeouts(&L->cfg, L->t);
    if (L->cfg.elastic.min_regions > L->t->n_regions) {
        xdc_diag_set(diag, "%s: elastic.min_regions is %d but topology %s has %d regions", L->o.config,
                     L->cfg.elastic.min_regions, L->o.topology, L->t->n_regions);
        return XDC_ERR_CONFIG;
    }
    for (int r = 0; L->cfg.diloco.keep_unsent && r < L->t->n_regions; r++) /* a plan: auto layout: the workers check */
        if (xdc_topology_region_workers(L->t, r) > L->cfg.pipeline_stages) {
            xdc_diag_set(diag,
                         "%s: diloco.keep_unsent needs one replica per stage in each region, but region %s has %d "
                         "workers for %d pipeline stages",
                         L->o.config, L->t->regions[r].name, xdc_topology_region_workers(L->t, r),
                         L->cfg.pipeline_stages);
            return XDC_ERR_CONFIG;
        }
    /* The workers of a region step together (pipeline stages, replicas), and nothing fixes how many steps each
     * would run while a round waits */
    for (int r = 0; L->cfg.diloco.train_while_waiting && r < L->t->n_regions; r++)
        if (xdc_topology_region_workers(L->t, r) > 1) {
            xdc_diag_set(diag, "%s: diloco.train_while_waiting needs one worker per region, but region %s has %d",
                         L->o.config, L->t->regions[r].name, xdc_topology_region_workers(L->t, r));
            return XDC_ERR_CONFIG;
        }
    if (!orch_quorum_elastic(&L->cfg, L->t->n_regions)) {
        char run[128];
        snprintf(run, sizeof run, "%s mode%s over %d regions", orch_mode_name(L->cfg.mode),
                 L->cfg.span_regions ? " with span_regions" : "", L->t->n_regions);
        if (L->cfg.elastic.set)
            XDC_WARN(XDC_SUB_ORCH,
                     "%s: elastic settings ignored: %s keeps every region in every round (diloco, streaming, and "
                     "sync without delay_steps across regions go by quorum)",
                     L->o.config, run);
        if (L->o.max_restarts)
            XDC_WARN(XDC_SUB_ORCH,
                     "--max-restarts %d ignored: %s has no outer round to rejoin at (a lost region ends the run; "
                     "--resume continues it)",
                     L->o.max_restarts, run);
    }
    if (L->cfg.plan_auto) {
        orch_planned plan;
        XDC_CHECK(orch_plan_apply(&L->cfg, L->t, &plan, diag));
        char line[768];
        orch_plan_describe(&L->cfg, L->t, &plan.plan, line, sizeof line);
        printf("%s\n", line);
    }
    /* Refused here, named, rather than by every worker at once, whichever of them the launch hears from first */
    if (orch_run_config_check_layout(&L->cfg, L->t, diag) != XDC_OK) {
        xdc_diag_prefix(diag, "%s on %s", L->o.config, L->o.topology);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

/* --resume: the newest complete checkpoint must have been taken by this run's layout (workers, mode,
 * codec, topology), refused before anything starts; the workers check it again when they load it. */
static xdc_err_t check_resume(launch *L, xdc_diag *diag)
{
    int64_t step = orch_manifest_newest(L->run_dir);
    if (step < 0) return XDC_OK; /* nothing to resume: the workers start from step 0 and say so */
    orch_manifest found, want;
    XDC_CHECK(orch_manifest_read(L->run_dir, step, &found, diag));
    XDC_CHECK(orch_manifest_expect(&L->cfg, L->t, &want, diag));
    return orch_manifest_check(L->run_dir, &found, &want, diag);
}

/* The compute probe's figure the plan was made with (ORCH_PLAN_PROBE_ENV), in RUN/plan-probe: `xdc launch --resume`
 * plans with it again (orchestrator/cli/cli_probe.c), so the resumed run takes the plan its checkpoints were made by. */
static xdc_err_t record_probe(launch *L, xdc_diag *diag)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/plan-probe", L->run_dir);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", getenv(ORCH_PLAN_PROBE_ENV)) < 0 || fclose(f) != 0) {
        xdc_diag_set(diag, "%s: cannot write the compute probe's figure", path);
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

/* Run id, run folder, the WAN emulation decision; what agents and workers inherit. */
static xdc_err_t launch_prepare(launch *L, xdc_diag *diag)
{
    if (L->o.run_id) snprintf(L->run_id, sizeof L->run_id, "%s", L->o.run_id);
    else
        snprintf(L->run_id, sizeof L->run_id, "run-%llu-%d", (unsigned long long)(xdc_wall_ns() / 1000000000ull),
                 (int)getpid());
    snprintf(L->run_dir, sizeof L->run_dir, "%s", L->o.run_dir ? L->o.run_dir : "runs");
    if (!L->o.run_dir) {
        size_t n = strlen(L->run_dir);
        snprintf(L->run_dir + n, sizeof L->run_dir - n, "/%s", L->run_id);
    }
    XDC_CHECK(orch_mkdirs(L->run_dir, 0755, diag));
    if (L->o.resume) XDC_CHECK(check_resume(L, diag));
    else if (L->cfg.plan_auto && L->cfg.probe_flops > 0) XDC_CHECK(record_probe(L, diag));
    L->o.run_id = L->run_id;
    L->o.run_dir = L->run_dir;
    if (L->o.emulate < 0) L->o.emulate = !L->o.coordinator && L->t->n_regions > 1; /* all regions on this host */
    if (!L->o.coordinator) setenv("XDC_ADVERTISE_HOST", "127.0.0.1", 1);           /* node names are labels here */
    xdc_log_set_identity("launch", "local", -1);
    return XDC_OK;
}

static void print_banner(launch *L)
{
    char devices[1024];
    describe_devices(L, 0, devices, sizeof devices);
    printf("xdc launch: run %s, %d regions, %d workers, %s mode, %s WAN; rendezvous at %s; run folder %s\n", L->run_id,
           L->t->n_regions, xdc_topology_total_workers(L->t), orch_mode_name(L->cfg.mode),
           L->o.emulate ? "emulated" : "real", L->store.kind == RDZV_ETCD ? L->store.url : L->coordinator, L->run_dir);
    printf("devices: %s\n", devices);
    if (L->o.standby)
        printf("standing by to decide the run's rounds (%s under a %d s lease) should its holder go\n",
               RDZV_KEY_DECIDER, L->decider.ttl_s);
    else if (L->o.coordinator)
        printf("start one agent per node with:\n  xdc agent --topology %s --config %s --run-dir %s --coordinator %s"
               " --run-id %s --region REGION --node N%s%s%s%s%s%s\n",
               L->o.topology, L->o.config, L->run_dir, L->coordinator, L->run_id,
               L->store.kind == RDZV_ETCD ? " --rdzv " : "", L->store.kind == RDZV_ETCD ? L->store.url : "",
               L->o.emulate ? " --emulate-wan" : "", L->device != ORCH_DEVICE_TOPOLOGY ? " --device " : "",
               L->device != ORCH_DEVICE_TOPOLOGY ? orch_device_name(L->device) : "",
               orch_creds_given(&L->o.creds) ? " --cert-dir NODE_CERTS" : "");
    fflush(stdout);
}

/* Certificates, the rendezvous, the agents; diag names the step that failed. */
static xdc_err_t launch_start(launch *L, xdc_diag *diag)
{
    xdc_diag d = {{0}};
    const char *what = "certificates";
    xdc_err_t rc = make_certs(L, &d);
    if (rc == XDC_OK) what = "rendezvous", rc = start_rendezvous(L, &d);
    if (rc == XDC_OK) {
        print_banner(L);
        if (L->o.chaos.on) what = "chaos", rc = start_chaos(L, &d);
        if (rc == XDC_OK && !L->o.coordinator) what = "agents", rc = start_agents(L, &d);
    }
    if (rc != XDC_OK) xdc_diag_set(diag, "%s: %s: %s", what, xdc_strerror(rc), d.msg);
    return rc;
}

xdc_err_t orch_launch_run(const orch_launch_opts *o, int *agent_exit, xdc_diag *diag)
{
    static launch L; /* large (relays, children); one run per process */
    memset(&L, 0, sizeof L);
    L.o = *o;
    L.run_id_given = o->run_id != NULL;
    *agent_exit = 0;
    orch_procs_init(&L.agents, 2); /* agents stop workers of their own: they get two graces */
    xdc_err_t rc = launch_load(&L, diag);
    rdzv_target store; /* resolved again with the run id in start_rendezvous */
    if (rc == XDC_OK) rc = rdzv_target_resolve(o->rdzv.rdzv, L.cfg.rdzv, "-", &store, diag);
    if (rc == XDC_OK && store.kind == RDZV_BUILTIN && o->standby) {
        xdc_diag_set(diag, "--standby needs --rdzv etcd://...: the built-in store lives in one process, whose "
                           "decider cannot move (docs/runtime.md, \"Who decides\")");
        rc = XDC_ERR_INVALID;
    }
    if (rc == XDC_OK && store.kind == RDZV_BUILTIN && (!o->host || !*o->host)) {
        xdc_diag_set(diag, "--host is required: the address agents reach the coordinator at (0.0.0.0: every "
                           "interface)");
        rc = XDC_ERR_INVALID;
    }
    if (rc == XDC_OK) rc = launch_prepare(&L, diag);
    if (rc == XDC_OK) {
        orch_proc_catch_stop_signals();
        double t0 = (double)xdc_now_ns() / 1e9;
        rc = launch_start(&L, diag);
        if (rc != XDC_OK) orch_procs_kill(&L.agents);
        else rc = supervise(&L, agent_exit);
        if (L.chaos) orch_chaos_finish(L.chaos);
        double wall = (double)xdc_now_ns() / 1e9 - t0;
        if (rc == XDC_OK && o->exec_argv) /* the programs' own output says what they did */
            printf("\nrun %s finished in %.1f s: %d members of %d regions ran %s and exited 0\n", L.run_id, wall,
                   xdc_topology_total_workers(L.t), L.t->n_regions, o->exec_argv[0]);
        else if (rc == XDC_OK) print_summary(&L, wall);
    }
    launch_close(&L);
    return rc;
}
