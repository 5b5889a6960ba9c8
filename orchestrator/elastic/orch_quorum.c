/* orch_quorum.c — the outer rounds' quorum of an elastic DiLoCo or streaming run, decided by the store's host (see
 * orch_quorum.h). */
#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/elastic/orch_routes.h"
#include "scheduler/xdc_plan.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUORUM_SILENT_LOOK_MS 250 /* how often an open exchange's members are looked at (drop_silent) */

void orch_quorum_init(orch_quorum *q, const xdc_topology *t, rdzv_server *rdzv, int min_regions, int64_t grace_ms,
                      int64_t back_ms, int64_t silent_ms)
{
    memset(q, 0, sizeof *q);
    q->t = t;
    q->rdzv = rdzv;
    q->min_regions = min_regions;
    q->grace_ms = grace_ms;
    q->back_ms = back_ms;
    for (int r = 0; r < XDC_TOPO_MAX_REGIONS; r++) q->back_at[r] = -1;
    q->n_live = t->n_regions;
    memset(q->live, 1, (size_t)t->n_regions);
    q->decided = q->pending = -1;
    q->silent_ms = silent_ms;
    q->open = -1;
    q->last_round = LLONG_MAX;
    /* tests/e2e/test_elastic.c: a return at a chosen round, "36" for every region or "36:eu-west,44:ap-south" */
    for (int r = 0; r < XDC_TOPO_MAX_REGIONS; r++) q->rejoin_at[r] = -1;
    for (const char *e = getenv("XDC_TEST_REJOIN_AT"); e && *e; e = strchr(e, ',') ? strchr(e, ',') + 1 : NULL) {
        char *end, name[XDC_NAME_MAX + 1] = "";
        long long step = strtoll(e, &end, 10);
        if (*end == ':') snprintf(name, sizeof name, "%.*s", (int)strcspn(end + 1, ","), end + 1);
        for (int r = 0; r < t->n_regions; r++)
            if (!name[0] || strcmp(name, t->regions[r].name) == 0) q->rejoin_at[r] = step;
    }
}

/* Worker k of region r's last arrival (outer/r/k): a step, LLONG_MAX for the end, -1 when it posted none; how it
 * arrived into *kind (a rejoined worker still taking its state, or that took it since its last round), and the
 * inner steps it ran since into *extra (train_while_waiting; NULL: not wanted). */
static long long arrival(const orch_quorum *q, int r, int k, rdzv_arrive_kind *kind, int *extra)
{
    char val[64], nonce[RDZV_NONCE_MAX];
    long long step;
    if (rdzv_server_get(q->rdzv, rdzv_key_outer(r, k).s, val, sizeof val) != 0 ||
        rdzv_val_outer_parse(val, &step, nonce, kind, extra) != XDC_OK)
        return -1;
    return step; /* a rejoin request (-1) is no arrival */
}

/* Worker k of region r's rejoin request (outer/r/k = join:<nonce>): its nonce into nonce[RDZV_NONCE_MAX], or 0 when
 * it posted none, or one a round took already (rejoin/<nonce> is set): that joiner was dropped again before it
 * became a member (it never came, or took no state), and waits for nothing; only its restart asks anew. */
static int join_request(const orch_quorum *q, int r, int k, char *nonce)
{
    char val[128];
    long long step;
    return rdzv_server_get(q->rdzv, rdzv_key_outer(r, k).s, val, sizeof val) == 0 &&
           rdzv_val_outer_parse(val, &step, nonce, NULL, NULL) == XDC_OK && nonce[0] &&
           rdzv_server_get(q->rdzv, rdzv_key_rejoin(nonce).s, val, sizeof val) != 0;
}

/* Take every region out of the run all of whose workers asked to rejoin into the round at `step` as joining
 * ('j' in mask; not at the run's last round nor at its end: it would train nothing more): each worker learns
 * the round from rejoin/<nonce>; it counts again from the next round. Joiners of one round connect to each
 * other too (the higher dials the lower, orch_rejoin.c). */
static void admit_joiners(orch_quorum *q, long long step, char *mask)
{
    char nonce[RDZV_NONCE_MAX];
    for (int r = 0; r < q->t->n_regions; r++) {
        if (q->rejoin_at[r] >= 0 && step != q->rejoin_at[r]) continue;
        int n = xdc_topology_region_workers(q->t, r), k = 0;
        while (!q->live[r] && k < n && join_request(q, r, k, nonce)) k++;
        if (q->live[r] || k < n) continue;
        if (step >= q->last_round) { /* its workers leave once they read the end's decision */
            if (step != LLONG_MAX)
                XDC_WARN(XDC_SUB_ORCH,
                         "region %s asks to rejoin at the run's last round (step %lld): not taken back, it would "
                         "train nothing more; it leaves at the end of the run",
                         q->t->regions[r].name, step);
            continue;
        }
        for (k = 0; k < n; k++) {
            join_request(q, r, k, nonce);
            rdzv_server_set(q->rdzv, rdzv_key_rejoin(nonce).s, rdzv_val_round(step).s);
        }
        /* for any launch's chaos story: the joiner's own request is soon overwritten by its arrivals */
        rdzv_server_set(q->rdzv, rdzv_key_back(r, q->left[r]).s, rdzv_val_round(step).s);
        mask[r] = 'j';
        q->back_at[r] = step;
        memcpy(q->back_from, mask, (size_t)q->t->n_regions + 1); /* its members so far: joiners come after */
        q->live[r] = 1;
        q->n_live++;
        size_t len = strlen(q->dropped);
        snprintf(q->dropped + len, sizeof q->dropped - len, ", then %s rejoined at the outer round at step %lld",
                 q->t->regions[r].name, step);
        XDC_WARN(XDC_SUB_ORCH, "region %s rejoins the run at the outer round at step %lld; %d of %d regions",
                 q->t->regions[r].name, step, q->n_live, q->t->n_regions);
    }
}

int orch_quorum_asks(const orch_quorum *q, int r, int k)
{
    char nonce[RDZV_NONCE_MAX];
    return !q->live[r] && join_request(q, r, k, nonce);
}

/* 1 when every worker of each region out of the run that XDC_TEST_REJOIN_AT takes back at `step` asked to rejoin. */
static int all_asked(const orch_quorum *q, long long step)
{
    char nonce[RDZV_NONCE_MAX];
    for (int r = 0; r < q->t->n_regions; r++)
        for (int k = 0; !q->live[r] && q->rejoin_at[r] == step && k < xdc_topology_region_workers(q->t, r); k++)
            if (!join_request(q, r, k, nonce)) return 0;
    return 1;
}

/* The round being waited for: the earliest step past the last decided one that a worker of a region still
 * in the run arrived at (workers wait at a round until it is decided, so no worker is two rounds ahead). */
static long long next_round(const orch_quorum *q)
{
    long long s = -1;
    for (int r = 0; r < q->t->n_regions; r++)
        for (int k = 0; q->live[r] && k < xdc_topology_region_workers(q->t, r); k++) {
            long long a = arrival(q, r, k, NULL, NULL);
            if (a > q->decided && (s < 0 || a < s)) s = a;
        }
    return s;
}

/* Region r's character in the decision of the round at `step` once all its workers arrived there: '1', or, for
 * a region that rejoined and takes part with weight 0 until its state came (docs/runtime.md "Rejoining"), 't'
 * while any of its workers is still taking it, 'c' when all took it since their last round (a member from the
 * next round on: its workers leave the catch-up together); '0' while one has not arrived. */
static char region_arrived(const orch_quorum *q, int r, long long step)
{
    int taking = 0, took = 0;
    for (int k = 0; k < xdc_topology_region_workers(q->t, r); k++) {
        rdzv_arrive_kind kind;
        if (arrival(q, r, k, &kind, NULL) != step) return '0';
        taking |= kind == RDZV_ARRIVE_TAKING;
        took |= kind == RDZV_ARRIVE_TOOK;
    }
    return taking ? 't' : took ? 'c' : '1';
}

/* Region r leaves the run; its name and why go to the log and the summary's list. */
static void drop(orch_quorum *q, int r, const char *reason)
{
    q->live[r] = 0;
    q->n_live--;
    int lost = q->open >= 0 && q->open_set[r] == '1';
    if (lost) q->lost_set[r] = '1'; /* before any write: each carries the state to a next decider (orch_decider.h) */
    char val[16];
    snprintf(val, sizeof val, "%d", ++q->left[r]);
    rdzv_server_set(q->rdzv, rdzv_key_left(r).s, val);
    XDC_WARN(XDC_SUB_ORCH, "region %s dropped from the run: %s; %d of %d regions go on", q->t->regions[r].name, reason,
             q->n_live, q->t->n_regions);
    size_t n = strlen(q->dropped);
    snprintf(q->dropped + n, sizeof q->dropped - n, "%s%s (%s)", n ? ", " : "", q->t->regions[r].name, reason);
    if (lost) { /* its round's members stop waiting for it */
        rdzv_server_set(q->rdzv, rdzv_key_lost(q->open).s, q->lost_set);
        XDC_WARN(XDC_SUB_ORCH, "region %s left during the exchange of the outer round at step %lld",
                 q->t->regions[r].name, q->open);
    }
}

/* While an exchange is open: a member region one of whose workers is known gone (the built-in store saw its
 * connection close) leaves the run at once, and one of whose workers has been quiet (silent past awake_s, or under
 * etcd its lease gone) for silent_ms leaves then. When the region's quiet began is kept across the looks (a lease
 * that ran out says nothing of how long ago), and forgotten once all its workers answer again or the round ends.
 * One look every QUORUM_SILENT_LOOK_MS: under etcd a member's view is four requests. */
static void drop_silent(orch_quorum *q)
{
    if (q->open < 0 || q->silent_ms <= 0) return;
    uint64_t now = xdc_now_ns();
    if (q->quiet_round != q->open)
        memset(q->quiet_from, 0, sizeof q->quiet_from), memset(q->quiet_named, 0, sizeof q->quiet_named),
            q->quiet_round = q->open;
    if (now < q->silent_next) return;
    q->silent_next = now + (uint64_t)QUORUM_SILENT_LOOK_MS * XDC_NS_PER_MS;
    for (int r = 0, i = 0; r < q->t->n_regions; r++) {
        int workers = xdc_topology_region_workers(q->t, r), ended = 0, quiet = 0;
        double silent_s = 0;
        char name[RDZV_MEMBER_MAX], reason[RDZV_MEMBER_MAX + 96];
        for (int k = 0; k < workers; k++, i++) {
            rdzv_member_state st;
            if (ended || q->open_set[r] != '1' || !q->live[r] || rdzv_server_member(q->rdzv, i, &st) != 0 || !st.joined)
                continue;
            ended = st.ended;
            if (ended || ((!st.connected || st.silent_s >= st.awake_s) && !quiet++)) {
                snprintf(name, sizeof name, "%s", st.name);
                silent_s = st.connected ? st.silent_s : 0;
            }
        }
        if (ended) {
            snprintf(reason, sizeof reason, "%s's connection ended during its exchange", name);
            drop(q, r, reason);
            continue;
        }
        if (!quiet) {
            q->quiet_from[r] = 0;
            continue;
        }
        if (!q->quiet_from[r]) q->quiet_from[r] = now - (uint64_t)(silent_s * 1e9);
        double quiet_s = (double)(now - q->quiet_from[r]) / 1e9;
        if (!q->quiet_named[r] && quiet_s * 2000.0 >= (double)q->silent_ms) { /* once, half way */
            XDC_INFO(XDC_SUB_ORCH,
                     "the outer round at step %lld: waiting on %s, quiet for %.1f s during its exchange; "
                     "dropped at %.1f s",
                     q->open, name, quiet_s, (double)q->silent_ms / 1000.0);
            q->quiet_named[r] = 1;
        }
        if (quiet_s * 1000.0 < (double)q->silent_ms) continue;
        snprintf(reason, sizeof reason, "%s silent for %.1f s during its exchange", name, quiet_s);
        drop(q, r, reason);
    }
}

/* The open round's final set, once every worker of each of its member regions still in the run posted
 * which regions it summed (xchg/<region>/<rank> = "<step>:<set>"): the regions all of them summed, published
 * as final/<step>. */
static void finalize(orch_quorum *q)
{
    if (q->open < 0) return;
    int n = q->t->n_regions;
    char set[XDC_TOPO_MAX_REGIONS + 1], val[XDC_TOPO_MAX_REGIONS + 32], got[XDC_TOPO_MAX_REGIONS + 1];
    long long step;
    memcpy(set, q->open_set, (size_t)n + 1);
    for (int r = 0; r < n; r++)
        for (int k = 0; q->open_set[r] == '1' && q->live[r] && k < xdc_topology_region_workers(q->t, r); k++) {
            if (rdzv_server_get(q->rdzv, rdzv_key_xchg(r, k).s, val, sizeof val) != 0 ||
                rdzv_val_xchg_parse(val, n, &step, got) != XDC_OK || step != q->open)
                return; /* not posted yet (or still the last round's) */
            for (int i = 0; i < n; i++)
                if (got[i] != '1') set[i] = '0';
        }
    long long step_done = q->open;
    q->open = -1; /* before the write, which carries the state to a next decider */
    rdzv_server_set(q->rdzv, rdzv_key_final(step_done).s, set);
    if (strcmp(set, q->open_set) != 0)
        XDC_WARN(XDC_SUB_ORCH, "the outer round at step %lld: final set %s (it began with %s; left during it: %s)",
                 step_done, set, q->open_set, q->lost_set);
}

/* "us-east, eu-west": the regions whose mask character is `c`. */
static void names(const orch_quorum *q, const char *mask, char c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < q->t->n_regions && n < cap; r++)
        if (mask[r] == c) n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", q->t->regions[r].name);
    if (!out[0]) snprintf(out, cap, "none");
}

/* steps/<step>: the inner steps of each region in the round after `step`, those in `mask` (not '0') running
 * what the budget buys at their pace (orch_quorum_pace). */
static void publish_steps(const orch_quorum *q, long long step, const char *mask)
{
    if (q->pace_steps <= 0) return;
    int h[XDC_TOPO_MAX_REGIONS];
    char val[RDZV_VALUE_MAX];
    for (int r = 0; r < q->t->n_regions; r++)
        h[r] = mask[r] == '0' ? 0 : xdc_plan_round_steps(q->pace_steps, q->slowdown[r]);
    rdzv_val_steps(h, q->t->n_regions, val, sizeof val);
    rdzv_server_set(q->rdzv, rdzv_key_steps(step).s, val);
    XDC_DEBUG(XDC_SUB_ORCH, "the round after step %lld: inner steps %s", step, val);
}

/* The inner steps region r, taken back at the round being decided, ran from its workers' snapshots while they
 * asked (join:<nonce>+<n>, the fewest of its workers'), when those snapshots are of the round decided last: the
 * state the round's members began it from, so those steps are the round's like theirs. 0 otherwise (a snapshot of
 * an earlier round: the joiner takes the state, with weight 0 in the round, as any joiner). */
static int ran_early(const orch_quorum *q, int r)
{
    int fewest = 0;
    for (int k = 0; k < xdc_topology_region_workers(q->t, r); k++) {
        char val[128], nonce[RDZV_NONCE_MAX];
        long long at, snap;
        int n = 0;
        if (rdzv_server_get(q->rdzv, rdzv_key_outer(r, k).s, val, sizeof val) != 0 ||
            rdzv_val_outer_parse(val, &at, nonce, NULL, &n) != XDC_OK || !nonce[0] || n <= 0 ||
            rdzv_server_get(q->rdzv, rdzv_key_warm(r, k).s, val, sizeof val) != 0 || sscanf(val, "%lld ", &snap) != 1 ||
            snap != q->decided)
            return 0;
        if (k == 0 || n < fewest) fewest = n;
    }
    return fewest;
}

/* ran/<step> (train_while_waiting): the inner steps each member region ('1' in mask) ran while it waited for the
 * decision of the round at `step`, as its arrivals say now (the fewest of its workers'), and in elastic DiLoCo those
 * each region it takes back ('j') ran from its snapshot of the round before (ran_early); 0 for the others. Logged
 * with how long the round waited from its first member's arrival (`waited`, ns): no region trained longer. */
static void publish_ran(const orch_quorum *q, long long step, const char *mask, uint64_t waited)
{
    if (!q->ran) return;
    int e[XDC_TOPO_MAX_REGIONS];
    char val[RDZV_VALUE_MAX];
    for (int r = 0; r < q->t->n_regions; r++) {
        e[r] = mask[r] == 'j' && q->joins_in_round ? ran_early(q, r) : 0;
        for (int k = 0; mask[r] == '1' && k < xdc_topology_region_workers(q->t, r); k++) {
            int n = 0;
            if (arrival(q, r, k, NULL, &n) == step && (k == 0 || n < e[r])) e[r] = n;
        }
        if (mask[r] == 'j' && e[r])
            XDC_INFO(XDC_SUB_ORCH,
                     "the outer round at step %lld takes region %s back with the %d inner steps it ran from its "
                     "snapshot of round %lld while it asked",
                     step, q->t->regions[r].name, e[r], q->decided);
    }
    rdzv_val_steps(e, q->t->n_regions, val, sizeof val);
    rdzv_server_set(q->rdzv, rdzv_key_ran(step).s, val);
    char who[512] = "";
    size_t len = 0;
    for (int r = 0; r < q->t->n_regions && len < sizeof who; r++)
        if (e[r] && mask[r] == '1')
            len += (size_t)snprintf(who + len, sizeof who - len, "%s%s %d", len ? ", " : "", q->t->regions[r].name,
                                    e[r]);
    if (len)
        XDC_INFO(XDC_SUB_ORCH, "the outer round at step %lld waited %.2f s: inner steps run while it waited: %s", step,
                 (double)waited / 1e9, who);
}

/* routes/<step>: the links the round at `step` goes around (orch_routes.h), from what rank 0 of each region reported
 * of its links as it arrived there (links/<region>/0 = "<step>:<one character per region>"); when none, no key. */
static void publish_routes(const orch_quorum *q, long long step, const char *mask)
{
    int n = q->t->n_regions;
    char val[XDC_TOPO_MAX_REGIONS][XDC_TOPO_MAX_REGIONS + 24], out[ORCH_ROUTES_VALUE_MAX]; /* a step, ':', n */
    const char *rep[XDC_TOPO_MAX_REGIONS];
    for (int r = 0; r < n; r++) {
        char *e;
        rep[r] = NULL;
        if (mask[r] == '0' || rdzv_server_get(q->rdzv, rdzv_key_links(r, 0).s, val[r], sizeof val[r]) != 0) continue;
        if (strtoll(val[r], &e, 10) == step && *e == ':' && strlen(e + 1) == (size_t)n) rep[r] = e + 1;
    }
    orch_routes_choose(q->t, mask, rep, out, sizeof out);
    if (strcmp(out, "-") == 0) return; /* none: every link direct, no key (a member reads its absence so) */
    rdzv_server_set(q->rdzv, rdzv_key_routes(step).s, out);
    XDC_INFO(XDC_SUB_ORCH, "the outer round at step %lld goes around links: %s", step, out);
}

void orch_quorum_pace(orch_quorum *q, int budget, const double *pace)
{
    char all[XDC_TOPO_MAX_REGIONS + 1];
    q->pace_steps = budget;
    for (int r = 0; r < q->t->n_regions; r++) {
        q->slowdown[r] = pace[r] >= 1.0 ? pace[r] : 1.0;
        all[r] = '1';
    }
    all[q->t->n_regions] = '\0';
    publish_steps(q, 0, all);
}

void orch_quorum_spread(orch_quorum *q, int64_t grace_min_ms)
{
    q->grace_min_ms = grace_min_ms;
    q->n_spreads = 0;
}

/* How long a late region is waited for at a plain round (orch_quorum_spread): the grace, or once enough
 * rounds were seen, ORCH_QUORUM_SPREAD_FACTOR times the lower median of their arrival spreads, within
 * [grace_min, grace]. The median, not the widest: a round that waited out a stall within the grace (before the
 * window formed, or one a region made just in time) is one outlier, and would otherwise set the window to
 * that stall for the next rounds. */
static int64_t spread_window_ms(const orch_quorum *q)
{
    if (q->grace_min_ms <= 0 || q->n_spreads < ORCH_QUORUM_SPREADS_MIN) return q->grace_ms;
    int k = q->n_spreads < ORCH_QUORUM_SPREADS ? q->n_spreads : ORCH_QUORUM_SPREADS;
    uint64_t v[ORCH_QUORUM_SPREADS];
    for (int i = 0; i < k; i++) { /* insertion sort of the few recorded */
        int j = i;
        for (; j > 0 && v[j - 1] > q->spread_ns[i]; j--) v[j] = v[j - 1];
        v[j] = q->spread_ns[i];
    }
    int64_t ms = (int64_t)(v[(k - 1) / 2] * ORCH_QUORUM_SPREAD_FACTOR / XDC_NS_PER_MS);
    if (ms < q->grace_min_ms) ms = q->grace_min_ms;
    return ms < q->grace_ms ? ms : q->grace_ms;
}

/* Every worker of region r answers on the store (joined, connected, heard within its store's awake_s): its
 * processes run. A stopped or killed one falls silent. */
static int region_awake(const orch_quorum *q, int r)
{
    for (int k = 0, i = xdc_topology_first_worker(q->t, r); k < xdc_topology_region_workers(q->t, r); k++, i++) {
        rdzv_member_state st;
        if (rdzv_server_member(q->rdzv, i, &st) != 0 || !st.joined || !st.connected || st.silent_s >= st.awake_s)
            return 0;
    }
    return 1;
}

/* Past the window (`window_ms`, waited `waited` ns), is a region late at the round (mask '0') awake, within
 * `more_ms` past it (orch_quorum_tick)? Names it once when so. */
static int wait_on(orch_quorum *q, const char *mask, int64_t window_ms, int64_t more_ms, uint64_t waited,
                   const char *round)
{
    if (waited >= (uint64_t)(window_ms + more_ms) * XDC_NS_PER_MS) return 0;
    char awake[XDC_TOPO_MAX_REGIONS + 1];
    int any = 0;
    for (int r = 0; r < q->t->n_regions; r++) {
        awake[r] = q->live[r] && mask[r] == '0' && region_awake(q, r) ? '1' : '0';
        any |= awake[r] == '1';
    }
    awake[q->t->n_regions] = '\0';
    if (any && q->named < 2) {
        char who[512];
        names(q, awake, '1', who, sizeof who);
        XDC_INFO(XDC_SUB_ORCH, "%s: %s late but answering (its processes run): waiting on for it up to %.1f s more",
                 round, who, (double)more_ms / 1000.0);
        q->named = 2;
    }
    return any;
}

xdc_err_t orch_quorum_tick(orch_quorum *q, char *why, size_t cap)
{
    drop_silent(q);
    if (q->n_live < q->min_regions) {
        snprintf(why, cap,
                 "%d of %d regions left during the exchange of the outer round at step %lld, below "
                 "elastic.min_regions %d: %s",
                 q->n_live, q->t->n_regions, q->open, q->min_regions, q->dropped);
        return XDC_ERR_UNAVAILABLE;
    }
    finalize(q);
    long long step = next_round(q);
    if (step < 0) return XDC_OK;
    if (step != q->pending) q->pending = step, q->first_at = 0, q->named = 0;
    char mask[XDC_TOPO_MAX_REGIONS + 1];
    int arrived = 0, members = 0;
    for (int r = 0; r < q->t->n_regions; r++) {
        mask[r] = q->live[r] ? region_arrived(q, r, step) : '0';
        arrived += mask[r] != '0';
        members += mask[r] == '1';
    }
    mask[q->t->n_regions] = '\0';
    if (!arrived || !all_asked(q, step)) return XDC_OK;
    /* The window runs from the first member's arrival: a region catching up ('t', 'c') runs no inner step and
     * arrives at once, a whole round before the members, which a window from the rounds' spread would then drop
     * (and its arrival is no spread). With none but such regions there, from when all arrived. */
    if (!q->first_at && (members || arrived == q->n_live)) q->first_at = xdc_now_ns();
    if (!q->first_at) return XDC_OK;
    /* A region late for its first round after its return is still taking the state (which its members sent
     * while they trained on): a window of grace alone would drop it whenever that transfer outlasts the grace,
     * at every return. Not once a region that sends it left (the joiner waits for a dead sender's slice
     * until the WAN deadline fails it). The end has no first round back: no round takes a region back at the
     * run's last round (admit_joiners). */
    int64_t window_ms = spread_window_ms(q);
    int senders = 1, back = 0;
    for (int r = 0; r < q->t->n_regions; r++) senders &= q->back_from[r] != '1' || q->live[r];
    for (int r = 0; r < q->t->n_regions && senders; r++)
        if (q->live[r] && mask[r] == '0' && q->back_at[r] >= 0 && q->back_at[r] == q->decided)
            window_ms = q->grace_ms + q->back_ms;
    for (int r = 0; r < q->t->n_regions && step != LLONG_MAX; r++) /* a joiner's round is no spread either */
        back |= q->live[r] && q->back_at[r] >= 0 && q->back_at[r] == q->decided;
    uint64_t waited = xdc_now_ns() - q->first_at, grace = (uint64_t)window_ms * XDC_NS_PER_MS;
    char round[64], reason[160];
    if (step == LLONG_MAX) snprintf(round, sizeof round, "the end of the run");
    else snprintf(round, sizeof round, "the outer round at step %lld", step);
    if (arrived < q->n_live && waited < grace) {
        if (!q->named && waited >= grace / 2) { /* once per round, half way: who is late, not every jitter */
            char late[512];
            for (int r = 0; r < q->t->n_regions; r++)
                if (!q->live[r]) mask[r] = '1'; /* out of the run: not waited for */
            names(q, mask, '0', late, sizeof late);
            XDC_INFO(XDC_SUB_ORCH, "%s: waiting for %s for %.1f s; dropped at %.1f s", round, late,
                     (double)waited / 1e9, (double)grace / 1e9);
            q->named = 1;
        }
        return XDC_OK;
    }
    /* A late region that answers (a stopped worker continued, one slower than the window) is computing its way to
     * the round: waited on for up to another window, at most back_ms (the launcher's timeouts.operation: the
     * members wait for a decision for grace + twice that), not in a first round back, which has back_ms already. */
    int64_t more_ms = window_ms > q->grace_ms ? 0 : window_ms < q->back_ms ? window_ms : q->back_ms;
    if (arrived < q->n_live && wait_on(q, mask, window_ms, more_ms, waited, round)) return XDC_OK;
    char longer[64] = "";
    if (q->named == 2) snprintf(longer, sizeof longer, " and up to %.1f s more while it answered", more_ms / 1000.0);
    snprintf(reason, sizeof reason, "missed %s (%.1f s grace window%s%s)", round, (double)window_ms / 1000.0,
             window_ms > q->grace_ms   ? ", a region's first round back"
             : window_ms < q->grace_ms ? ", from the rounds' arrival spread"
                                       : "",
             longer);
    if (members == q->n_live && !back && step != LLONG_MAX) { /* every region a member, in time: a spread */
        q->spread_ns[q->n_spreads % ORCH_QUORUM_SPREADS] = waited;
        q->n_spreads++;
    }
    for (int r = 0; r < q->t->n_regions; r++)
        if (q->live[r] && mask[r] == '0') drop(q, r, reason);
    if (arrived < q->min_regions) {
        char in[512], out[512];
        names(q, mask, '1', in, sizeof in);
        names(q, mask, '0', out, sizeof out);
        snprintf(why, cap,
                 "%s: %d of %d regions (%s) arrived within the %.1f s grace window, below elastic.min_regions %d; "
                 "missing: %s",
                 round, arrived, q->t->n_regions, in, (double)q->grace_ms / 1000.0, q->min_regions, out);
        return XDC_ERR_UNAVAILABLE;
    }
    admit_joiners(q, step, mask);
    if (step != LLONG_MAX) publish_steps(q, step, mask); /* before the decision its members wait for */
    if (step != LLONG_MAX) publish_routes(q, step, mask);
    if (step != LLONG_MAX) publish_ran(q, step, mask, waited);
    q->decided = step; /* before the write, which carries the state to a next decider (orch_decider.h) */
    q->pending = -1;
    if (step != LLONG_MAX) { /* its exchange is under way: its final set comes after it */
        q->open = step;
        for (int r = 0; r < q->t->n_regions; r++)
            q->open_set[r] = mask[r] == '0' || (mask[r] == 'j' && !q->joins_in_round) ? '0' : '1';
        q->open_set[q->t->n_regions] = '\0';
        memset(q->lost_set, '0', (size_t)q->t->n_regions);
        q->lost_set[q->t->n_regions] = '\0';
    }
    rdzv_server_set(q->rdzv, rdzv_key_quorum(step).s, mask);
    XDC_DEBUG(XDC_SUB_ORCH, "%s: quorum %s", round, mask);
    return XDC_OK;
}

xdc_err_t orch_quorum_lose(orch_quorum *q, int r, const char *reason, char *why, size_t cap)
{
    if (r < 0 || r >= q->t->n_regions || !q->live[r]) return XDC_OK;
    drop(q, r, reason);
    if (q->n_live >= q->min_regions) return XDC_OK;
    snprintf(why, cap, "region %s lost (%s): %d of %d regions left, below elastic.min_regions %d",
             q->t->regions[r].name, reason, q->n_live, q->t->n_regions, q->min_regions);
    return XDC_ERR_UNAVAILABLE;
}
