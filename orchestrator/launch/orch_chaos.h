/* orch_chaos.h — `xdc launch --chaos SEED[:RATE[:KINDS]]`: a seeded random fault schedule and the launcher
 * side that injects it and tells the story of the run.
 *
 * The schedule is a pure function of the seed, the rate and the run's shape (orch_chaos_schedule): the same
 * seed gives the same faults, each due at a step of the run, read from the members' own progress (their
 * heartbeats, "step N"), never from the wall clock; only how long a fault lasts (a stall, a link outage or
 * slowdown) is wall time. RATE is the expected number of faults per region per 100 steps (default 1):
 * a run of S steps over R regions gets round(RATE * R * S / 100) faults, due between 10 % and 85 % of its
 * steps, so the last ones have time to recover before the end. Every kind the run allows appears once
 * before any kind appears twice.
 *
 * Kinds (KINDS is a comma-separated list of these names; default every kind the run allows):
 *   kill-worker  SIGKILL one worker; its agent leaves, --max-restarts starts it again, it rejoins
 *   kill-agent   SIGKILL a region's agents (their workers follow them), started again the same way
 *   stall        SIGSTOP one worker for 2-30 s, then SIGCONT (a straggler; still stopped at the end of the grace
 *                window, its region leaves and comes back like a killed one; continued before, it is waited on)
 *   link-down    cut one emulated link (every relayed connection reset) for 2-20 s
 *   link-slow    one emulated link at a tenth of its rate for 10-60 s
 *   kill-donor   during a recovery: SIGKILL a worker of a region still in the run while another region's
 *                restarted agents are rejoining (armed at its step, fired once a rejoin is under way)
 *   kill-pair    SIGKILL the workers of two regions at the same step
 *   kill-etcd    SIGKILL one member of the etcd cluster (--rdzv etcd:// with XDC_CHAOS_ETCD_PIDS, below)
 *   kill-decider the process holding the round decider's role (orch_decider.h) dies: a standby `xdc
 *                coordinator` holding it gets SIGKILL (its pid named in XDC_CHAOS_DECIDER_PIDS, below); this
 *                launch holding it lets it go as a killed holder would (orch_decider_lapse: its lease runs out,
 *                it decides nothing more) and stands by again once another process took it. Recovered when
 *                the store names another holder. Needs --rdzv etcd:// and XDC_CHAOS_DECIDER_PIDS
 * The kills, the stall and kill-donor need an elastic run with --max-restarts; kill-donor and kill-pair
 * need two regions beyond the quorum (elastic.min_regions); the link kinds the emulated WAN. A fault whose
 * target is out of the run or still held by an earlier fault waits until it is back, as does one that would
 * leave fewer regions in the run than the quorum (the faults test recovery, not the quorum's floor); a
 * link fault waits for an earlier one on its link; a kill of a region with no restart left is skipped, and
 * so is a fault held back past 90 % of the run's steps (no room left to recover).
 *
 * The etcd cluster is not the launcher's: XDC_CHAOS_ETCD_PIDS names its members' pid files (comma-separated),
 * each holding the pid of one member; whoever runs the cluster starts a killed member again and rewrites its
 * pid file (bench/chaos/run.sh does), which is the fault's recovery. Likewise XDC_CHAOS_DECIDER_PIDS names the
 * pid files of the standby coordinators (`xdc coordinator --standby`) that kill-decider may kill; whoever runs
 * them starts a killed one again as a standby.
 *
 * The story: one line on stdout for every fault injected and one for every recovery, each naming what,
 * where, when (step and seconds since the launch) and how long, all starting "chaos: ". A recovery line says
 * fault_s, how long the fault's cause lasted (a stall until its SIGCONT, a link fault until its restore; 0 for a
 * kill), and recovery_s, how long the run took from there to be whole again (the region training in it again,
 * the role held again, the etcd member running again); a region's line also detect_s (the fault to the region's
 * leaving) and rejoin_s (its leaving to its training again). */
#ifndef ORCH_CHAOS_H
#define ORCH_CHAOS_H

#include "common/xdc_err.h"
#include "orchestrator/elastic/orch_decider.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "topology/xdc_topology.h"
#include "wan/emu/xdc_wan_emu.h"

#include <stdint.h>

typedef enum orch_chaos_kind {
    ORCH_CHAOS_KILL_WORKER,
    ORCH_CHAOS_KILL_AGENT,
    ORCH_CHAOS_STALL,
    ORCH_CHAOS_LINK_DOWN,
    ORCH_CHAOS_LINK_SLOW,
    ORCH_CHAOS_KILL_DONOR,
    ORCH_CHAOS_KILL_PAIR,
    ORCH_CHAOS_KILL_ETCD,
    ORCH_CHAOS_KILL_DECIDER,
    ORCH_CHAOS_KINDS
} orch_chaos_kind;

#define ORCH_CHAOS_MAX_FAULTS 256
#define ORCH_CHAOS_MAX_ETCD   8 /* etcd members (and standby coordinators) whose pid files are read */
#define ORCH_CHAOS_PATH_MAX   512

/* --chaos SEED[:RATE[:KINDS]] */
typedef struct orch_chaos_spec {
    int on;
    uint64_t seed;
    double rate;    /* faults per region per 100 steps, in (0, 100] */
    unsigned kinds; /* bit (1u << kind) per kind asked for */
} orch_chaos_spec;

/* What the run allows (the launcher fills it from the topology, run file and flags). */
typedef struct orch_chaos_shape {
    int n_regions;
    int workers[XDC_TOPO_MAX_REGIONS]; /* workers of each region */
    int64_t steps;                     /* the run's optimizer steps */
    int restarts;                      /* 1: an elastic run with --max-restarts (regions come back) */
    int spare_regions;                 /* regions that may be out at once: n_regions - elastic.min_regions */
    int links;                         /* 1: an emulated WAN with more than one region */
    int etcd_members;                  /* etcd members with a pid file (0: no etcd faults) */
    int deciders;                      /* standby coordinators with a pid file (0: no decider kills) */
} orch_chaos_shape;

/* One planned fault. */
typedef struct orch_chaos_fault {
    orch_chaos_kind kind;
    int64_t step;    /* due once the run reached this step */
    int region;      /* kill-worker, kill-agent, stall: the target; links: the lower end; kill-donor: the region
                      * preferred as donor; kill-pair: the first; kill-etcd: the member (0-based); kill-decider:
                      * drawn, not used (whoever holds the role then is the target) */
    int other;       /* links: the higher end; kill-pair: the second region; else -1 */
    int rank;        /* kill-worker, stall: the worker (local rank); else 0 */
    int duration_ms; /* stall, link-down, link-slow; else 0 */
} orch_chaos_fault;

/* "kill-worker", ... */
const char *orch_chaos_kind_name(orch_chaos_kind k);
/* Parse SEED[:RATE[:KINDS]] into *out (on = 1). XDC_ERR_INVALID with diag naming the part that is wrong. */
xdc_err_t orch_chaos_spec_parse(const char *text, orch_chaos_spec *out, xdc_diag *diag);
/* The kinds (bits) both asked for in `s` and allowed by `shape`. */
unsigned orch_chaos_kinds_allowed(const orch_chaos_spec *s, const orch_chaos_shape *shape);
/* The schedule: at most `cap` faults into out[], ordered by step; returns how many. Pure: the same
 * arguments give the same faults. */
int orch_chaos_schedule(const orch_chaos_spec *s, const orch_chaos_shape *shape, orch_chaos_fault *out, int cap);

/* ---- the launcher's side ------------------------------------------------------------------------- */

/* What the launcher lends the injector: pointers into its own state, read at every tick. */
typedef struct orch_chaos_world {
    const xdc_topology *t;
    const char *run_dir;          /* RUN/pids/<region>-<rank>.pid: each worker's pid (orch_agent.c) */
    rdzv_server *rdzv;            /* the members' heartbeats ("step N"): the run's progress */
    const orch_procs *agents;     /* the launcher's agents */
    const int *agent_region;      /* the region of each agent slot */
    const uint8_t *live;          /* per region, 1 while in the run (NULL: not elastic, all in) */
    const long long *decided;     /* the last round decided (NULL: not elastic) */
    const int *restarts;          /* per region, its agents started again so far */
    int max_restarts;             /* --max-restarts */
    xdc_wan_relay *const *relays; /* one per pair of regions i < j, in order (0,1), (0,2), ..., (1,2), ...;
                                   * NULL until opened */
    const char *etcd_pids;        /* XDC_CHAOS_ETCD_PIDS of an etcd run; NULL: none */
    orch_decider *decider;        /* this launch's stand for the decider's role (etcd, elastic); NULL: none */
    const char *decider_pids;     /* XDC_CHAOS_DECIDER_PIDS of an etcd run; NULL: none */
} orch_chaos_world;

typedef struct orch_chaos orch_chaos;

/* Plan the schedule and print it (one line); `w` must stay valid until destroy. shape->etcd_members and
 * shape->deciders are taken from w->etcd_pids and w->decider_pids (the pid files they list; deciders only
 * with w->decider). */
xdc_err_t orch_chaos_create(const orch_chaos_spec *s, const orch_chaos_shape *shape, const orch_chaos_world *w,
                            orch_chaos **out, xdc_diag *diag);
/* Inject the faults that are due, end those whose time is up, log recoveries. Called every launcher tick. */
void orch_chaos_tick(orch_chaos *c);
/* The run ended: the faults never injected or never recovered, each named, and one closing line
 * "chaos: N faults injected of M planned, K recovered, max recovery X s". Continues stopped workers and
 * restores links. */
void orch_chaos_finish(orch_chaos *c);
/* NULL: no-op. */
void orch_chaos_destroy(orch_chaos *c);

#endif /* ORCH_CHAOS_H */
