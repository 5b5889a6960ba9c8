/* orch_elastic_member.h — the member half of the elastic round protocol (the host half and the protocol
 * itself: orch_quorum.h; the keys: orchestrator/rdzv/orch_rdzv_keys.h). One worker's view of its rounds,
 * on its rendezvous client and plain values, with no model state: the worker (orchestrator/worker/) moves
 * the parameters and the sums, this half says who is in each round and which contributions count.
 *
 * A round of a worker: orch_elastic_arrive posts its arrival and takes the host's decision (live: who is
 * in, joining: who rejoins at it); once its exchange is under way (orch_elastic_opened) orch_elastic_lost
 * says which member regions the host names lost during it, so the worker stops waiting for their shards;
 * after it, orch_elastic_settle posts what the worker summed and takes the round's final set. A restarted
 * worker of a region that left finds the run under way (orch_elastic_rejoin_detect), asks to rejoin and
 * learns the round that takes it back (orch_elastic_rejoin_ask); the worker then dials that round's members
 * and takes a slice of the state from each (m->quorum: the round's decision says who they are). */
#ifndef ORCH_ELASTIC_MEMBER_H
#define ORCH_ELASTIC_MEMBER_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "topology/xdc_topology.h"

#include <stddef.h>
#include <stdint.h>

typedef struct orch_elastic_member {
    rdzv_client *rdzv;
    const xdc_topology *t; /* the regions, by index; their names for the log */
    int region_idx, rank;  /* this worker: its region and its rank in it */
    /* A decision comes at most the grace window after the first region arrived, a final set the grace
     * window after the last member's exchange; a member's own region may take an operation's deadline. */
    int64_t grace_ms, operation_ms;
    uint8_t live[XDC_TOPO_MAX_REGIONS];    /* 1: in the last round decided (all before the first) */
    uint8_t joining[XDC_TOPO_MAX_REGIONS]; /* 1: rejoins at the last round (it gets the round's outer state) */
    /* 1: in the last round with weight 0, a region that rejoined and is still catching up ('t' or 'c'), or one
     * taken back at it that takes part in its exchange ('j' with joins_in_round) unless the round counted the inner
     * steps it ran from its snapshot (orch_elastic_took_early: then it weighs as a member) */
    uint8_t catching_up[XDC_TOPO_MAX_REGIONS];
    /* 1: a region taken back at a round ('j') takes part in that round's exchange with weight 0 (elastic DiLoCo,
     * orch_quorum_joins_in_round): it is in m->live and m->catching_up for it; 0: it comes in at the next round */
    int joins_in_round;
    rdzv_arrive_kind arrive; /* how this worker arrives at its next round (a rejoined one catching up: the worker) */
    /* A rejoined worker whose state is on its way (arrive: RDZV_ARRIVE_TAKING) asks state_in(state_ctx) while it
     * waits for its round's decision: once it returns 1, the arrival becomes "took" if the round is not decided
     * yet (NULL: never asked) */
    int (*state_in)(void *state_ctx);
    void *state_ctx;
    /* inner steps such a worker ran from its snapshot while its state came (a streaming joiner that trains while it
     * takes it, orch_rejoin.c), in its "taking"/"took" arrivals as "+<n>": the round gives it weight 0 all the same;
     * bench-chaos's story reads when it trained again and how many steps its region lost */
    int taking_ran;
    /* DiLoCo's train_while_waiting (orch_quorum.h), `ran`: each decision comes with ran/<round>, read into extra[r]:
     * the inner steps region r ran while that round waited, which weigh its pseudo-gradient. A member that arrives
     * plainly and is still undecided after busy_after_s runs busy(busy_ctx) (one inner step) until the decision
     * comes, posting "<round>+<n>" before its n-th; ran_self: how many it ran in the last round (one more than
     * extra[] says when the host read its arrival just before its last post) */
    int ran;
    int extra[XDC_TOPO_MAX_REGIONS];
    xdc_err_t (*busy)(void *busy_ctx, xdc_diag *diag);
    void *busy_ctx;
    double busy_after_s;
    int ran_self;
    /* left/<region> of each region a hand-over waits on (a member: the round's joiners; a joiner: the members of
     * the round that took it back, while its state is on its way) when that round was read (-1: none yet);
     * LLONG_MAX for a region no hand-over waited on */
    long long left_at[XDC_TOPO_MAX_REGIONS];
    int n_live;
    char quorum[XDC_TOPO_MAX_REGIONS + 1]; /* the last decision as published, one '0'/'1'/'j'/'t'/'c' per region */
    long long open;                        /* the round whose exchange is under way; -1: none */
    uint8_t told[XDC_TOPO_MAX_REGIONS];    /* the regions lost/<open> named that orch_elastic_lost reported */
} orch_elastic_member;

/* Every region of t in, no round open. */
void orch_elastic_member_init(orch_elastic_member *m, rdzv_client *rdzv, const xdc_topology *t, int region_idx,
                              int rank, int64_t grace_ms, int64_t operation_ms);

/* Arrive at `round` (a step, or RDZV_ROUND_END; as m->arrive says, "taking" turning into "took" while the round
 * is undecided once m->state_in says so; a plain arrival training on as m->busy says) and wait for the host's
 * decision (with m->ran, and ran/<round> into m->extra): m->live,
 * m->joining, m->catching_up, m->n_live follow it, so every member counts the same regions. XDC_ERR_UNAVAILABLE
 * naming the region when ours is not in it (it leaves the run; its agent, restarted, may bring it back),
 * XDC_ERR_PROTO when the decision (m->quorum) is not one '0'/'1'/'j'/'t'/'c' per region; the wait's error when
 * none came. */
xdc_err_t orch_elastic_arrive(orch_elastic_member *m, long long round, xdc_diag *diag);

/* Has region r left the run since the round that takes regions back was read (its left/<r> count grew: its
 * agent or worker failed)? Asked of the round's joiners by a member that waits for one's connection, and of the
 * round's members by a joiner that waits for their slices of the state: neither waits for a process that is
 * gone. 0 for any other region, and when the store does not answer. */
int orch_elastic_left_again(orch_elastic_member *m, int r);

/* A worker that was stopped (SIGSTOP, a frozen VM; the worker's orch_elastic_look notices it) asks once, as it wakes:
 * was its region dropped meanwhile, its left/<region> count (which every drop raises: a missed round's
 * window, a loss during an exchange, a failed agent) above `left`, the count when this process joined the run (0
 * for a first start)? Then XDC_ERR_UNAVAILABLE naming the region, as orch_elastic_arrive would at its next round,
 * and that it noticed on waking, gap_s seconds after its previous look (the stop, and any wait it was stopped in);
 * XDC_OK otherwise, also when the store does not answer. */
xdc_err_t orch_elastic_woke(orch_elastic_member *m, int left, double gap_s, xdc_diag *diag);
/* A joiner that took part in the exchange of the round that took it back (`round`, joins_in_round): post
 * whether its state is in (`took`) as its arrival there (outer/<region>/<rank> = took:<round> or taking:<round>;
 * the host reads arrivals at later rounds only) and read its region's other workers' the same: *all = 1 when
 * every one of them took it, so they all train from that round on or all take part in the next with weight 0
 * (their inner steps run together: pipeline stages, replicas). XDC_ERR_TIMEOUT when one did not post within an
 * operation's deadline. */
xdc_err_t orch_elastic_region_took(orch_elastic_member *m, long long round, int took, int *all, xdc_diag *diag);

/* DiLoCo's nobody waits: the inner steps of each region in the round after `step` (step 0: the first round),
 * steps/<step> as the host published it (orch_quorum_pace) with the decision of that round, into h[n_regions].
 * XDC_ERR_PROTO when it is not one count per region; the wait's error when none came. */
xdc_err_t orch_elastic_steps(orch_elastic_member *m, long long step, int *h, xdc_diag *diag);

/* The exchange of the round at `step` is under way. */
void orch_elastic_opened(orch_elastic_member *m, long long step);
/* The open round's lost/<step>, if the host published one: lost[r] = 1 for each member region it names that
 * no earlier call reported (never ours: the final set says so), logged; *n: how many. Without an open round
 * or a loss, none. */
xdc_err_t orch_elastic_lost(orch_elastic_member *m, uint8_t lost[XDC_TOPO_MAX_REGIONS], int *n, xdc_diag *diag);
/* After the exchange of the round at `step` (got[r]: region r's contributions were summed): post them as
 * xchg/<region index>/<rank> and wait for the round's final set into final[r]. *resum = 1 when it is not
 * the set the round began with (m->live): the worker sums again over it (logged here). The round is closed.
 * XDC_ERR_UNAVAILABLE when our own region is not in it (it left during the exchange), XDC_ERR_PROTO when the
 * set is not one '0'/'1' per region. */
xdc_err_t orch_elastic_settle(orch_elastic_member *m, long long step, const uint8_t *got, uint8_t *final, int *resum,
                              xdc_diag *diag);

/* At a worker's start: is the run under way already, an earlier process of this worker's having published
 * its WAN address (region: its region's name, for the message)? Then wait (up to timeout_ms) until the host let its region go: *rejoin = 1 and *left =
 * how many times the region left (its new intra bootstrap is named with it). A fresh start: *rejoin = 0. */
xdc_err_t orch_elastic_rejoin_detect(rdzv_client *rdzv, const char *region, int region_idx, int rank,
                                     int64_t timeout_ms, int *rejoin, int *left, xdc_diag *diag);
/* A joiner of elastic DiLoCo that trains from its snapshot while it asks (orch_rejoin.c): step(ctx) runs one
 * inner step, at most `most` of them (the steps from its snapshot's round to the next); `ran`: how many began. */
typedef struct orch_elastic_early {
    xdc_err_t (*step)(void *ctx, xdc_diag *diag);
    void *ctx;
    int most, ran;
} orch_elastic_early;

/* A restarted worker (member: its name "region/host:rank") asks to rejoin: its earlier process's failure
 * report is withdrawn, the request posted, and it waits up to timeout_ms for the round that takes it back,
 * *round; with `early` (NULL: none) it runs early->step meanwhile, posting join:<nonce>+<n> before its n-th (the
 * host counts them in the round that takes it back when its snapshot is of the round before: ran/<round>).
 * m->live then holds the regions of the run from the next round on (us and any joining with us),
 * in_round[r] = 1 for the round's members, whom the worker dials and who each hand over a slice of the
 * state, *from the lowest of them, and m->quorum the round's decision (with m->ran, m->extra its ran/<round>).
 * *round = RDZV_ROUND_END when the run's
 * end was decided first (no round takes a region back at the run's last round, orch_quorum.h): the run has no
 * use for us, and nothing else is set. XDC_ERR_PROTO when the decision does not name us joining or names no
 * member. */
xdc_err_t orch_elastic_rejoin_ask(orch_elastic_member *m, const char *member, int64_t timeout_ms,
                                  orch_elastic_early *early, long long *round, uint8_t in_round[XDC_TOPO_MAX_REGIONS],
                                  int *from, xdc_diag *diag);
/* Did the last round decided take region r back ('j', joins_in_round) counting the inner steps it ran from its
 * snapshot while it asked (m->extra[r] > 0)? Then it takes part in that round's exchange with their weight, its
 * pseudo-gradient from its snapshot's global parameters, instead of weight 0. */
int orch_elastic_took_early(const orch_elastic_member *m, int r);

/* Who hands a joiner which part of the state: the round's donors are its member regions ('1' in its quorum
 * `mask`), in region order, and `region` hands over parameters [*lo, *hi) of n_params, a share proportional to
 * the bandwidth of its link to the round's joiners ('j'; to the slowest of them), so each slice takes about as
 * long over its link; equal shares when a donor has no direct link to a joiner. Joiner and members compute it
 * alike from the topology and the mask. */
void orch_elastic_slice(const xdc_topology *t, size_t n_params, const char *mask, int region, size_t *lo, size_t *hi);

#endif /* ORCH_ELASTIC_MEMBER_H */
