/* orch_elastic_member.c — a worker's half of the elastic round protocol: arrivals and decisions, the
 * bookkeeping of a round's exchange (lost regions, what was summed, the final set), and the rejoin
 * handshake's store side (see orch_elastic_member.h; the protocol: orch_quorum.h). */
#include "orchestrator/elastic/orch_elastic_member.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REJOIN_ASK_MS 250 /* a restarted worker's waits (to be let go, for its round), between looks at the store */

void orch_elastic_member_init(orch_elastic_member *m, rdzv_client *rdzv, const xdc_topology *t, int region_idx,
                              int rank, int64_t grace_ms, int64_t operation_ms)
{
    memset(m, 0, sizeof *m);
    m->rdzv = rdzv;
    m->t = t;
    m->region_idx = region_idx;
    m->rank = rank;
    m->grace_ms = grace_ms;
    m->operation_ms = operation_ms;
    m->n_live = t->n_regions;
    memset(m->live, 1, (size_t)t->n_regions);
    for (int r = 0; r < XDC_TOPO_MAX_REGIONS; r++) m->left_at[r] = LLONG_MAX;
    m->open = -1;
}

#define STATE_POLL_S 0.05 /* a joiner's look at its state while it waits for a round's decision */

static const char *region_name(const orch_elastic_member *m, int r) { return m->t->regions[r].name; }

/* 1 when `set` is one character of `allowed` per region. */
static int is_region_set(const orch_elastic_member *m, const char *set, const char *allowed)
{
    size_t n = (size_t)m->t->n_regions;
    return strlen(set) == n && strspn(set, allowed) == n;
}

/* left/<r>: how many times region r left the run; -1 when not there or not a count. */
static long long left_count(orch_elastic_member *m, int r)
{
    char val[64];
    long long n;
    xdc_diag d = {{0}};
    return rdzv_try_get(m->rdzv, rdzv_key_left(r).s, val, sizeof val, &d) == XDC_OK &&
                   rdzv_val_round_parse(val, &n) == XDC_OK
               ? n
               : -1;
}

/* Region r's character c in a decision whose ran/<round> is in m->extra: in the round with weight 0 ('t', 'c', or a
 * 'j' that takes part in its exchange unless the round counted the steps it ran from its snapshot). */
static uint8_t weightless(const orch_elastic_member *m, char c, int r)
{
    return c == 't' || c == 'c' || (c == 'j' && m->joins_in_round && !(m->ran && m->extra[r] > 0));
}

int orch_elastic_took_early(const orch_elastic_member *m, int r)
{
    return m->quorum[r] == 'j' && m->joins_in_round && !weightless(m, 'j', r);
}

int orch_elastic_left_again(orch_elastic_member *m, int r)
{
    return m->left_at[r] != LLONG_MAX && left_count(m, r) > m->left_at[r];
}

/* Our region is out (dropped `from` a round or the run; `noticed`: how this worker learnt it, after the rest): it
 * leaves. The message names the configured grace (the worker does not know an adaptive window's). */
static xdc_err_t dropped(const orch_elastic_member *m, const char *from, const char *noticed, xdc_diag *diag)
{
    xdc_diag_set(diag,
                 "region %s was dropped from %s (it missed the %.1f s grace window or lost a worker), so it leaves "
                 "the run; restarting its agents brings it back at a later outer round%s",
                 region_name(m, m->region_idx), from, (double)m->grace_ms / 1000.0, noticed);
    return XDC_ERR_UNAVAILABLE;
}

xdc_err_t orch_elastic_woke(orch_elastic_member *m, int left, double gap_s, xdc_diag *diag)
{
    if (left_count(m, m->region_idx) <= left) return XDC_OK; /* still in (or no answer: its next round says) */
    char noticed[96];
    snprintf(noticed, sizeof noticed, "; noticed on waking, %.1f s after its previous look at the clock", gap_s);
    return dropped(m, "the run", noticed, diag);
}

/* ran/<round>, which the host writes before the round's decision, into m->extra. */
static xdc_err_t read_ran(orch_elastic_member *m, long long round, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX];
    rdzv_key key = rdzv_key_ran(round);
    XDC_CHECK(rdzv_get(m->rdzv, key.s, m->operation_ms, val, sizeof val, diag));
    if (rdzv_val_steps_parse(val, m->t->n_regions, m->extra) != XDC_OK) {
        xdc_diag_set(diag, "%s = '%.64s' is not one count per region (%d)", key.s, val, m->t->n_regions);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* A member arrived at `round`: wait busy_after_s for its decision (a round whose regions arrive together is decided
 * within a tick of the host's), then run inner steps until it comes, each announced in the arrival first: the host
 * reads at most what was posted. */
static xdc_err_t train_while_waiting(orch_elastic_member *m, long long round, uint64_t deadline, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX];
    rdzv_key quorum = rdzv_key_quorum(round);
    int64_t first_ms = (int64_t)(m->busy_after_s * 1000.0);
    if (first_ms > xdc_deadline_poll_ms(deadline)) first_ms = xdc_deadline_poll_ms(deadline);
    xdc_diag quiet = {{0}};
    if (rdzv_get(m->rdzv, quorum.s, first_ms, val, sizeof val, &quiet) == XDC_OK) return XDC_OK;
    while (!xdc_deadline_passed(deadline) && rdzv_try_get(m->rdzv, quorum.s, val, sizeof val, diag) == XDC_ERR_AGAIN) {
        XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_outer(m->region_idx, m->rank).s,
                           rdzv_val_arrival(round, RDZV_ARRIVE, m->ran_self + 1).s, diag));
        m->ran_self++;
        XDC_CHECK(m->busy(m->busy_ctx, diag));
    }
    return XDC_OK;
}

/* This worker's arrival at `round`, as m->arrive says (with a joiner's inner steps from its snapshot). */
static rdzv_val arrival(const orch_elastic_member *m, long long round)
{
    return rdzv_val_arrival(round, m->arrive, m->arrive != RDZV_ARRIVE && round != RDZV_ROUND_END ? m->taking_ran : 0);
}

xdc_err_t orch_elastic_arrive(orch_elastic_member *m, long long round, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX];
    int n = m->t->n_regions;
    rdzv_val name = rdzv_val_round(round);
    rdzv_key outer = rdzv_key_outer(m->region_idx, m->rank), quorum = rdzv_key_quorum(round);
    XDC_CHECK(rdzv_set(m->rdzv, outer.s, arrival(m, round).s, diag));
    /* The decision comes at most the grace window after the first region arrived, an operation's deadline
     * later when a region is in its first round back (orch_quorum_init's back_ms); our own region's other
     * workers may take up to an operation's deadline to get here. */
    uint64_t deadline = xdc_deadline_ms(m->grace_ms + 2 * m->operation_ms);
    /* A joiner arrives at once (it runs no inner step): its state may land before the others arrive, and then it
     * trains from the next round. The decision says which arrival the host read. */
    while (m->arrive == RDZV_ARRIVE_TAKING && m->state_in && !xdc_deadline_passed(deadline) &&
           rdzv_try_get(m->rdzv, quorum.s, val, sizeof val, diag) == XDC_ERR_AGAIN) {
        if (m->state_in(m->state_ctx)) {
            m->arrive = RDZV_ARRIVE_TOOK;
            XDC_CHECK(rdzv_set(m->rdzv, outer.s, arrival(m, round).s, diag));
            break;
        }
        xdc_sleep_s(STATE_POLL_S);
    }
    m->ran_self = 0;
    if (m->busy && m->arrive == RDZV_ARRIVE && round != RDZV_ROUND_END)
        XDC_CHECK(train_while_waiting(m, round, deadline, diag));
    xdc_err_t rc = rdzv_get(m->rdzv, quorum.s, xdc_deadline_poll_ms(deadline), val, sizeof val, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "round %s: no quorum decision", name.s);
        return rc;
    }
    if (m->ran && round != RDZV_ROUND_END) XDC_CHECK(read_ran(m, round, diag));
    if (!is_region_set(m, val, "01jtc")) {
        xdc_diag_set(diag, "round %s: quorum '%.64s' is not one 0/1/j/t/c per region (%d)", name.s, val, n);
        return XDC_ERR_PROTO;
    }
    if (!strchr("1tc", val[m->region_idx])) {
        char from[64];
        snprintf(from, sizeof from, "round %s", name.s);
        return dropped(m, from, "", diag);
    }
    int live = 0;
    for (int r = 0; r < n; r++) {
        uint8_t joins = val[r] == 'j' && m->joins_in_round; /* in this round's exchange */
        uint8_t in = val[r] == '1' || val[r] == 't' || val[r] == 'c' || joins;
        if (m->live[r] && !in)
            XDC_WARN(XDC_SUB_ORCH, "round %s: region %s dropped from the quorum", name.s, region_name(m, r));
        m->live[r] = in;
        m->joining[r] = val[r] == 'j';
        m->catching_up[r] = weightless(m, val[r], r);
        live += in;
        if (m->joining[r]) m->left_at[r] = left_count(m, r); /* a joiner keeps its donors' across its rounds */
    }
    m->n_live = live;
    memcpy(m->quorum, val, (size_t)n + 1);
    return XDC_OK;
}

xdc_err_t orch_elastic_region_took(orch_elastic_member *m, long long round, int took, int *all, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX], nonce[RDZV_NONCE_MAX];
    rdzv_arrive_kind kind = took ? RDZV_ARRIVE_TOOK : RDZV_ARRIVE_TAKING;
    XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_outer(m->region_idx, m->rank).s,
                       rdzv_val_arrival(round, kind, m->taking_ran).s, diag));
    uint64_t deadline = xdc_deadline_ms(m->operation_ms);
    *all = took;
    for (int k = 0; *all && k < xdc_topology_region_workers(m->t, m->region_idx); k++) {
        rdzv_key key = rdzv_key_outer(m->region_idx, k);
        long long at = -1;
        /* its request (join:<nonce>) until it posts; past `round` (arrived at the next one) only without its state:
         * one that took it trains with us first */
        while (rdzv_try_get(m->rdzv, key.s, val, sizeof val, diag) != XDC_OK ||
               rdzv_val_outer_parse(val, &at, nonce, &kind, NULL) != XDC_OK || at < round) {
            if (xdc_deadline_passed(deadline)) {
                xdc_diag_set(diag, "round %lld: region %s's worker %d did not say whether it took its state (%s)",
                             round, region_name(m, m->region_idx), k, key.s);
                return XDC_ERR_TIMEOUT;
            }
            xdc_sleep_s(STATE_POLL_S);
        }
        *all = at == round && kind == RDZV_ARRIVE_TOOK;
    }
    return XDC_OK;
}

xdc_err_t orch_elastic_steps(orch_elastic_member *m, long long step, int *h, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX];
    rdzv_key key = rdzv_key_steps(step);
    /* Published before the round's decision, which this worker already has (or, for step 0, at the launch). */
    XDC_CHECK(rdzv_get(m->rdzv, key.s, m->operation_ms, val, sizeof val, diag));
    if (rdzv_val_steps_parse(val, m->t->n_regions, h) != XDC_OK) {
        xdc_diag_set(diag, "%s = '%.64s' is not one count per region (%d)", key.s, val, m->t->n_regions);
        return XDC_ERR_PROTO;
    }
    XDC_DEBUG(XDC_SUB_ORCH, "the round after step %lld: inner steps %s", step, val);
    return XDC_OK;
}

void orch_elastic_opened(orch_elastic_member *m, long long step)
{
    m->open = step;
    memset(m->told, 0, sizeof m->told);
}

xdc_err_t orch_elastic_lost(orch_elastic_member *m, uint8_t lost[XDC_TOPO_MAX_REGIONS], int *n, xdc_diag *diag)
{
    char val[RDZV_VALUE_MAX];
    memset(lost, 0, XDC_TOPO_MAX_REGIONS);
    *n = 0;
    if (m->open < 0) return XDC_OK;
    xdc_err_t g = rdzv_try_get(m->rdzv, rdzv_key_lost(m->open).s, val, sizeof val, diag);
    if (g == XDC_ERR_AGAIN) return XDC_OK; /* nobody left */
    XDC_CHECK(g);
    for (int r = 0; r < m->t->n_regions && val[r]; r++)
        if (val[r] == '1' && !m->told[r] && r != m->region_idx) { /* ours: the final set says so */
            m->told[r] = lost[r] = 1;
            (*n)++;
            XDC_WARN(XDC_SUB_ORCH, "outer round at step %lld: region %s left during the exchange; not waiting for it",
                     m->open, region_name(m, r));
        }
    return XDC_OK;
}

xdc_err_t orch_elastic_settle(orch_elastic_member *m, long long step, const uint8_t *got, uint8_t *final, int *resum,
                              xdc_diag *diag)
{
    int n = m->t->n_regions;
    char val[RDZV_VALUE_MAX];
    rdzv_val post = rdzv_val_xchg(step, got, n);
    m->open = -1;
    *resum = 0;
    XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_xchg(m->region_idx, m->rank).s, post.s, diag));
    xdc_err_t rc = rdzv_get(m->rdzv, rdzv_key_final(step).s, m->operation_ms + m->grace_ms, val, sizeof val, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "outer round at step %lld: no final set", step);
        return rc;
    }
    if (!is_region_set(m, val, "01")) {
        xdc_diag_set(diag, "outer round at step %lld: final set '%.64s' is not one 0/1 per region (%d)", step, val, n);
        return XDC_ERR_PROTO;
    }
    int same = 1;
    for (int r = 0; r < n; r++) {
        final[r] = val[r] == '1';
        same &= final[r] == m->live[r];
    }
    if (!final[m->region_idx]) {
        xdc_diag_set(
            diag,
            "region %s left the run during the exchange of the outer round at step %lld (it was silent or lost "
            "a worker), so it leaves; restarting its agents brings it back at a later outer round",
            region_name(m, m->region_idx), step);
        return XDC_ERR_UNAVAILABLE;
    }
    if (same) return XDC_OK;
    char began[XDC_TOPO_MAX_REGIONS + 1];
    for (int r = 0; r < n; r++) began[r] = m->live[r] ? '1' : '0';
    began[n] = '\0';
    XDC_WARN(XDC_SUB_ORCH,
             "outer round at step %lld: summing again over the final set %s (the round began with %s; this worker "
             "summed %s)",
             step, val, began, strchr(post.s, ':') + 1);
    *resum = 1;
    return XDC_OK;
}

xdc_err_t orch_elastic_rejoin_detect(rdzv_client *rdzv, const char *region, int region_idx, int rank,
                                     int64_t timeout_ms, int *rejoin, int *left, xdc_diag *diag)
{
    char val[300];
    *rejoin = 0;
    rdzv_key key = rdzv_key_wan(region_idx, rank);
    xdc_err_t rc = rdzv_try_get(rdzv, key.s, val, sizeof val, diag);
    if (rc == XDC_ERR_AGAIN) return XDC_OK; /* a fresh start */
    XDC_CHECK(rc);
    XDC_INFO(XDC_SUB_ORCH, "the run is under way (an earlier process of ours published %s = %s): rejoining it", key.s,
             val);
    /* The store host names our region gone once it missed a round (or its agent's failure was reported): left/<r>
     * counts its departures, and back/<r>/<n> is set once a round took it back after its n-th. A count it was taken
     * back after is our earlier process's own return, whose loss is not counted yet: wait until it is. Going on
     * would withdraw the failure report (orch_elastic_rejoin_ask) before a decider read it (one that was taking
     * over the role: bench-chaos dropped such a region only at the grace window, 23 s after its kill). */
    key = rdzv_key_left(region_idx);
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    long long times;
    for (;;) {
        rc = rdzv_get(rdzv, key.s, xdc_deadline_poll_ms(deadline), val, sizeof val, diag);
        if (rc != XDC_OK) {
            xdc_diag_prefix(diag, "region %s: the run is under way but did not let it go (%s)", region, key.s);
            return rc;
        }
        if (rdzv_val_round_parse(val, &times) != XDC_OK || times > INT32_MAX) {
            xdc_diag_set(diag, "region %s: %s = '%.32s' is not a count", region, key.s, val);
            return XDC_ERR_PROTO;
        }
        char at[64];
        rc = rdzv_try_get(rdzv, rdzv_key_back(region_idx, (int)times).s, at, sizeof at, diag);
        if (rc == XDC_ERR_AGAIN) break; /* out since its last departure */
        XDC_CHECK(rc);
        if (xdc_deadline_passed(deadline)) {
            xdc_diag_set(diag,
                         "region %s: the run is under way but did not let it go (%s = %lld, and it was taken back "
                         "after that at step %s: our earlier process's loss is not counted yet)",
                         region, key.s, times, at);
            return XDC_ERR_TIMEOUT;
        }
        xdc_sleep_s(REJOIN_ASK_MS / 1000.0);
    }
    *rejoin = 1;
    *left = (int)times;
    return XDC_OK;
}

xdc_err_t orch_elastic_rejoin_ask(orch_elastic_member *m, const char *member, int64_t timeout_ms,
                                  orch_elastic_early *early, long long *round, uint8_t in_round[XDC_TOPO_MAX_REGIONS],
                                  int *from, xdc_diag *diag)
{
    char nonce[RDZV_NONCE_MAX], val[RDZV_VALUE_MAX], mask[XDC_TOPO_MAX_REGIONS + 1];
    int n = m->t->n_regions, trains = early && early->most > 0;
    const char *us = region_name(m, m->region_idx);
    rdzv_key outer = rdzv_key_outer(m->region_idx, m->rank);
    snprintf(nonce, sizeof nonce, "%d-%llu", (int)getpid(), (unsigned long long)xdc_wall_ns());
    /* A report of the earlier process would make a coordinator drop the region again. */
    XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_failed(member).s, "", diag));
    /* A joiner that trains says so with its request, and runs that first step before it looks: the decider may
     * count it as soon as it reads the request, and a step counted must have been run. */
    XDC_CHECK(rdzv_set(m->rdzv, outer.s, rdzv_val_join(nonce, trains).s, diag));
    if (trains) {
        early->ran = 1;
        XDC_CHECK(early->step(early->ctx, diag));
    }
    /* The next round decided takes us: within the others' inner steps of a period plus the grace window; unless
     * it is the run's last, whose end we then read between slices of the wait. A joiner that trains looks between
     * its steps, each posted before it begins (the host counts at most what was posted). */
    rdzv_key key = rdzv_key_rejoin(nonce), end = rdzv_key_quorum(RDZV_ROUND_END);
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    xdc_err_t rc;
    for (;;) {
        int step = early && early->ran < early->most;
        rc = step ? rdzv_try_get(m->rdzv, key.s, val, sizeof val, diag)
                  : rdzv_get(m->rdzv, key.s, REJOIN_ASK_MS, val, sizeof val, diag);
        if (rc == XDC_ERR_AGAIN) rc = XDC_ERR_TIMEOUT;
        if (rc != XDC_ERR_TIMEOUT || xdc_deadline_passed(deadline)) break;
        xdc_diag d = {{0}};
        if (rdzv_try_get(m->rdzv, end.s, mask, sizeof mask, &d) == XDC_OK) {
            XDC_WARN(XDC_SUB_ORCH,
                     "region %s asked to rejoin, but the run's end was decided first (%s = %s): it is not needed "
                     "and leaves",
                     us, end.s, mask);
            *round = RDZV_ROUND_END;
            return XDC_OK;
        }
        if (!step) continue;
        XDC_CHECK(rdzv_set(m->rdzv, outer.s, rdzv_val_join(nonce, ++early->ran).s, diag));
        XDC_CHECK(early->step(early->ctx, diag));
    }
    if (rc == XDC_ERR_TIMEOUT)
        xdc_diag_set(diag, "region %s asked to rejoin (%s): no round took it within %.1f s", us, key.s,
                     (double)timeout_ms / 1000.0);
    else if (rc != XDC_OK) xdc_diag_prefix(diag, "region %s asked to rejoin (%s): no round took it", us, key.s);
    if (rc != XDC_OK) return rc;
    if (rdzv_val_round_parse(val, round) != XDC_OK) {
        xdc_diag_set(diag, "region %s asked to rejoin: %s = '%.32s' is not a round", us, key.s, val);
        return XDC_ERR_PROTO;
    }
    rdzv_val name = rdzv_val_round(*round);
    XDC_CHECK(rdzv_get(m->rdzv, rdzv_key_quorum(*round).s, m->operation_ms, mask, sizeof mask, diag));
    if (!is_region_set(m, mask, "01jtc") || mask[m->region_idx] != 'j') {
        xdc_diag_set(diag, "round %s: quorum '%s' does not name region %s as joining", name.s, mask, us);
        return XDC_ERR_PROTO;
    }
    memcpy(m->quorum, mask, (size_t)n + 1);           /* its members split the state between them (orch_rejoin.c) */
    if (m->ran) XDC_CHECK(read_ran(m, *round, diag)); /* its exchange's weights, when it takes part (joins_in_round) */
    m->n_live = 0;
    *from = -1;
    for (int r = 0; r < n; r++) {
        m->live[r] = mask[r] != '0'; /* from the next round on, us and the others joining with us */
        m->catching_up[r] = weightless(m, mask[r], r);
        m->n_live += m->live[r];
        in_round[r] = mask[r] == '1';
        m->left_at[r] = in_round[r] ? left_count(m, r) : LLONG_MAX;
        if (in_round[r] && *from < 0) *from = r;
    }
    if (*from < 0) {
        xdc_diag_set(diag, "round %s: quorum '%s' names no member to take the state from", name.s, mask);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* A donor's weight in the split: the bandwidth (Mbit/s, at least 1) of its link to the slowest reached of the
 * round's joiners ('j' in `mask`); 0 when a joiner has no direct link from it (its state then takes a relay's
 * route, whose rate the topology does not say). */
static uint64_t donor_weight(const xdc_topology *t, const char *mask, int donor)
{
    double mbps = -1;
    for (int j = 0; mask[j]; j++) {
        if (mask[j] != 'j') continue;
        const xdc_link *l = xdc_topology_link(t, donor, j);
        if (!l) return 0;
        if (mbps < 0 || l->bandwidth_gbps * 1000.0 < mbps) mbps = l->bandwidth_gbps * 1000.0;
    }
    return mbps < 1 ? 1 : (uint64_t)mbps;
}

void orch_elastic_slice(const xdc_topology *t, size_t n_params, const char *mask, int region, size_t *lo, size_t *hi)
{
    uint64_t before = 0, all = 0, mine = 0, wt[XDC_TOPO_MAX_REGIONS] = {0};
    int equal = 0;
    for (int r = 0; mask[r]; r++)
        if (mask[r] == '1') equal |= (wt[r] = donor_weight(t, mask, r)) == 0;
    for (int r = 0; mask[r]; r++) {
        if (mask[r] != '1') continue;
        uint64_t x = equal ? 1 : wt[r];
        if (r < region) before += x;
        if (r == region) mine = x;
        all += x;
    }
    /* Mbit/s weights: n_params * all stays far below 2^64 for any model and topology xdc takes */
    *lo = (size_t)((uint64_t)n_params * before / all);
    *hi = (size_t)((uint64_t)n_params * (before + mine) / all);
}
