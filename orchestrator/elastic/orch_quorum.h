/* orch_quorum.h — who takes part in each outer round of an elastic DiLoCo or streaming run (docs/runtime.md, "Elastic
 * regions"). One owner decides: the process that hosts the rendezvous store (`xdc launch` or `xdc
 * coordinator`), which outlives every region; with etcd whichever of them holds the role (orch_decider.h). Each worker posts its arrival at the round of step S as
 * outer/<region index>/<rank> = S; a region has arrived when all its workers have. The round is decided
 * when every region still in the run has arrived, or `grace` after the first one did: the decision is
 * published once as quorum/<S> = one character per region ('1' in the round, '0' not, 'j' joining, 't' and 'c':
 * below), and every worker
 * of every region reads that same value, so all members of a round average over the same set. A region
 * that is not in a round is out of the run until it rejoins; one whose agent or worker failed is out at once,
 * without waiting for the grace window. A region out of the run comes back when every one of its workers
 * (restarted) posted outer/<region>/<rank> = join:<nonce>: the next round decided names it 'j' (joining:
 * not in this round's average; each member region hands it a slice of the round's state), publishes the
 * round's step as rejoin/<nonce> for each of its workers, and counts it in the run again from the next round
 * (in elastic DiLoCo, joins_in_round, it takes part in that round's exchange already, with weight 0: it is in
 * the round's open set, and its sums are in the round's final set like a member's).
 * While its state is still arriving its workers arrive at once at each round, as taking:<S> (or took:<S> once
 * their state came): the decision names the region 't' (still taking it) or 'c' (every worker of it took it
 * since its last round): in the round with weight 0 (it exchanges, the mean leaves it out), a member in full
 * from the round after its 'c' (docs/runtime.md "Rejoining").
 * Each time a region leaves, left/<region index> = how many times it did: its restarted workers wait for it
 * and name their region's new intra bootstrap key with it (the earlier one is stale). Fewer than `min_regions` regions
 * left ends the run. The end of the run is one more such round, named RDZV_ROUND_END_NAME ("end", orch_rdzv_keys.h) instead of a step:
 * it takes the place of the all-members "done" barrier, which would wait for the regions that left.
 *
 * A region can also leave while a round's exchange is under way (a DiLoCo round's, or a streaming fragment's:
 * one fragment is on the wire at a time, and its workers take its final set when it lands). The
 * host then publishes lost/<S> (one character per region, '1': left during round S's exchange) so that
 * members stop waiting for its shards, and each worker of the round's member regions posts which regions'
 * contributions it summed, xchg/<region index>/<rank> = "<S>:<set>". Once every worker of each member
 * region still in the run has, the host publishes final/<S>: the regions all of them summed. A member whose
 * round used another set sums again over it (xdc_sync_resum), so every member ends the round on the same
 * bytes whoever got which shard before the region went.
 *
 * With DiLoCo's nobody waits (orch_quorum_pace), each decision quorum/<S> comes after steps/<S>: the inner
 * steps each region runs in the round after S (orch_elastic_steps reads it).
 *
 * With DiLoCo's train_while_waiting (`ran`), a member that waits for the decision of round S runs inner steps
 * meanwhile and posts its arrival as "<S>+<n>" before its n-th; each decision quorum/<S> comes after ran/<S>: the
 * n each member region posted when the host decided (its workers' fewest), 0 for the others. Every member weighs
 * the round's pseudo-gradients with those counts, so all weigh alike. A member may have begun one step more than
 * the host read (it posted, the host had read, the decision was not out yet): that step is in its
 * pseudo-gradient and not in its weight. In elastic DiLoCo a region taken back ('j') whose workers trained from
 * their snapshots while they asked (join:<nonce>+<n>), snapshots of the round decided last, has those steps
 * counted in ran/<S> too: the round weighs its pseudo-gradient by them instead of 0. */
#ifndef ORCH_QUORUM_H
#define ORCH_QUORUM_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "topology/xdc_topology.h"

#include <stddef.h>
#include <stdint.h>

#define ORCH_QUORUM_SPREADS       4 /* the last rounds whose arrival spread sets the window (orch_quorum_spread) */
#define ORCH_QUORUM_SPREADS_MIN   2 /* rounds seen before it does (the grace alone until then) */
#define ORCH_QUORUM_SPREAD_FACTOR 4 /* that window: this many times the lower median of their spreads */

typedef struct orch_quorum {
    const xdc_topology *t;
    rdzv_server *rdzv;
    int min_regions;
    int64_t grace_ms;
    /* A region in its first round after the one that took it back is waited for grace_ms + back_ms, while
     * every region that sends it the state (a member of that round) is still in the run: in sync mode it
     * receives the whole state first; in DiLoCo and streaming it arrives at once (weight 0 until its state
     * came), and the longer window only covers its start */
    int64_t back_ms;
    long long back_at[XDC_TOPO_MAX_REGIONS];  /* the round that took each region back; -1: none */
    char back_from[XDC_TOPO_MAX_REGIONS + 1]; /* the last round that took regions back: its members ('1') */
    uint8_t live[XDC_TOPO_MAX_REGIONS];       /* 1: still in the run */
    int n_live;
    long long decided; /* step of the last round decided; -1: none */
    long long pending; /* step of the round being waited for; -1: none */
    uint64_t first_at; /* xdc_now_ns() when the first member arrived at `pending`; 0: none yet */
    int named; /* the regions late for `pending` were logged: 1 half way through the window, 2 waited on past it */
    char dropped[1024];             /* "eu-west (its agent exited with status 69), ..." for the summary */
    int left[XDC_TOPO_MAX_REGIONS]; /* times each region left the run, published as left/<region index> */
    int64_t silent_ms;     /* a member quiet this long during an exchange is lost (orch_quorum_exchange_silent_ms) */
    uint64_t silent_next;  /* xdc_now_ns() of the next look at the open exchange's members */
    long long quiet_round; /* the round quiet_from is of */
    uint64_t quiet_from[XDC_TOPO_MAX_REGIONS]; /* since when a worker of each region is quiet in it (0: none is) */
    uint8_t quiet_named[XDC_TOPO_MAX_REGIONS]; /* that quiet was logged half way to its drop */
    long long open;                            /* the round whose final set is not published yet; -1: none */
    char open_set[XDC_TOPO_MAX_REGIONS + 1];   /* its members ('1') */
    char lost_set[XDC_TOPO_MAX_REGIONS + 1];   /* those that left during its exchange ('1'), lost/<open> */
    /* DiLoCo's "nobody waits" (orch_quorum_pace): a round's time budget in inner steps of the fastest region
     * (0: off, every region runs the period), and each region's cost of one inner step relative to that */
    int pace_steps;
    double slowdown[XDC_TOPO_MAX_REGIONS];
    /* The run's last round before the end (orch_quorum_last_round): a region taken back there would train
     * nothing more, and its members would wait for its state at the end; no region is taken back at it or after
     * (a request then stays unanswered, and the joiner leaves once the end is decided). LLONG_MAX: no such
     * round known (the end alone) */
    long long last_round;
    /* elastic.grace_min (orch_quorum_spread; 0: off): a region late at a round is dropped after
     * min(grace_ms, max(grace_min_ms, ORCH_QUORUM_SPREAD_FACTOR x the lower median arrival spread of the last
     * ORCH_QUORUM_SPREADS rounds everyone reached in time)), the full grace until ORCH_QUORUM_SPREADS_MIN were */
    int64_t grace_min_ms;
    uint64_t spread_ns[ORCH_QUORUM_SPREADS]; /* first to last arrival of each of the last rounds all reached (a ring) */
    int n_spreads; /* how many were recorded (the ring's next slot: n_spreads % ORCH_QUORUM_SPREADS) */
    /* 1: a region taken back at a round takes part in that round's exchange with weight 0 (elastic DiLoCo,
     * orch_quorum_joins_in_round): 'j' is in the round's open set like 't', so its final set waits for the joiner's
     * sums and its loss during the exchange is published as any member's; 0: it comes in at the next round */
    int joins_in_round;
    /* 1: DiLoCo's train_while_waiting: each decision comes after ran/<step> (above) */
    int ran;
    /* test hook XDC_TEST_REJOIN_AT=<step>[:<region>][,...]: take each region back at its round only (a step
     * without a region: every region's), which waits until the regions due then asked; -1: any round */
    long long rejoin_at[XDC_TOPO_MAX_REGIONS];
} orch_quorum;

/* Every region of `t` in the run, nothing decided. Each round's exchange ends with a final set, and a
 * member region one of whose workers is silent on the store for `silent_ms` while its exchange is under way
 * (killed or stopped: a live worker's engine answers keepalives whatever it computes) leaves the run then, not
 * at the next round's grace window, which its members could not reach. A region taken back is waited for
 * `back_ms` longer in its first round (the launcher: timeouts.operation, the deadline a silent transfer of its
 * state fails at; a joiner that fails exits, and its agent's failure drops it at once). */
void orch_quorum_init(orch_quorum *q, const xdc_topology *t, rdzv_server *rdzv, int min_regions, int64_t grace_ms,
                      int64_t back_ms, int64_t silent_ms);
/* DiLoCo's "nobody waits" (docs/runtime.md): from now on each round's decision also says how many inner steps
 * each region runs in the round after it, steps/<step> (rdzv_val_steps): a region in the round runs
 * xdc_plan_round_steps(budget, pace[r]) = max(1, floor(budget / pace[r])) of them, where budget is the period in
 * inner steps of the fastest region (pace 1, orch_run_config_pace: its GPUs and diloco.slowdown), which runs all
 * of it; one out of it runs 0. steps/0, the first round's, is published now. */
void orch_quorum_pace(orch_quorum *q, int budget, const double *pace);
/* The rounds' own arrival spread sets how long a late region is waited for: from now on, once
 * ORCH_QUORUM_SPREADS_MIN rounds were reached by every region in the run as a member (their first to last
 * arrival measured, the first round's start-up skew among them), a region late at a round is dropped after
 * min(grace, max(grace_min_ms, ORCH_QUORUM_SPREAD_FACTOR x the lower median spread of the last
 * ORCH_QUORUM_SPREADS such rounds)) rather than the whole grace: a stopped worker holds its round's members
 * for a few times a normal round's straggle, not 20 s, and one round that waited out a stall does not set the
 * window. A region in its first round back keeps grace + back_ms; those rounds (the joiner's state transfer),
 * rounds with a region catching up ('t', 'c': it arrives at once, and the window runs from the first member's
 * arrival) and rounds that dropped someone are not spreads. */
void orch_quorum_spread(orch_quorum *q, int64_t grace_min_ms);
/* Decide the pending round when it is due (the launcher's tick). A region late past the window whose every worker
 * answers on the store (rdzv_member_state's awake_s: a stopped worker continued, computing its way to the round) is
 * waited on for up to as long again (at most back_ms; not in a region's first round back, which has back_ms
 * already); one that is silent is dropped at the window. XDC_ERR_UNAVAILABLE when the regions that arrived in time
 * are fewer than min_regions, with the round, who arrived and who did not in why[cap]. */
xdc_err_t orch_quorum_tick(orch_quorum *q, char *why, size_t cap);
/* 1 when worker k of region r, out of the run, asked to rejoin and no round answered it yet: it waits for its
 * round or for the end's decision (orch_elastic_rejoin_ask). */
int orch_quorum_asks(const orch_quorum *q, int r, int k);
/* Region r failed (`reason`: how); it leaves the run now, logged with its name. Returns XDC_ERR_UNAVAILABLE
 * (why[cap] says so) when fewer than min_regions regions are left. A region already out: XDC_OK. */
xdc_err_t orch_quorum_lose(orch_quorum *q, int r, const char *reason, char *why, size_t cap);

#endif /* ORCH_QUORUM_H */
