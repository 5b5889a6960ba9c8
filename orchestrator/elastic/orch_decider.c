/* orch_decider.c — the round decider's role under a lease and the quorum's state in the store, so another
 * process can take the role and go on (see orch_decider.h). */
#include "orchestrator/elastic/orch_decider.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void orch_decider_init(orch_decider *d, orch_quorum *q, int ttl_s)
{
    memset(d, 0, sizeof *d);
    d->q = q;
    d->ttl_s = ttl_s > 0 ? ttl_s : RDZV_ETCD_TTL_S;
    char host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(d->holder, sizeof d->holder, "%s:%d", host, (int)getpid());
}

/* The state is one line: "v1 <decided> <open> <open set> <lost set> <live> <left,...> <dropped...>", the
 * sets one character per region ("-" when no round is open), rounds as numbers (RDZV_ROUND_END for the end,
 * -1 for none). The grace window's clock (pending, first_at, named) is not in it: it starts again. */
size_t orch_decider_state(void *arg, char *out, size_t cap)
{
    const orch_quorum *q = arg;
    int n = q->t->n_regions;
    char live[XDC_TOPO_MAX_REGIONS + 1];
    for (int r = 0; r < n; r++) live[r] = q->live[r] ? '1' : '0';
    live[n] = '\0';
    size_t len = (size_t)snprintf(out, cap, "v1 %lld %lld %s %s %s ", q->decided, q->open,
                                  q->open >= 0 ? q->open_set : "-", q->open >= 0 ? q->lost_set : "-", live);
    for (int r = 0; r < n && len < cap; r++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", r ? "," : "", q->left[r]);
    if (len < cap) len += (size_t)snprintf(out + len, cap - len, " %s", q->dropped);
    return len < cap ? len : 0; /* too long for one value: nothing rather than a cut state */
}

/* 1 when s is n characters, each one of `allowed`. */
static int is_set(const char *s, int n, const char *allowed)
{
    if ((int)strlen(s) != n) return 0;
    for (int r = 0; r < n; r++)
        if (!strchr(allowed, s[r])) return 0;
    return 1;
}

xdc_err_t orch_decider_load(orch_quorum *q, const char *state, xdc_diag *diag)
{
    int n = q->t->n_regions, used = 0;
    long long decided, open;
    char open_set[XDC_TOPO_MAX_REGIONS + 1], lost_set[XDC_TOPO_MAX_REGIONS + 1], live[XDC_TOPO_MAX_REGIONS + 1],
        left[XDC_TOPO_MAX_REGIONS * 12];
    if (sscanf(state, "v1 %lld %lld %256s %256s %256s %3071s%n", &decided, &open, open_set, lost_set, live, left,
               &used) != 6 ||
        !is_set(live, n, "01") || decided < -1 || open < -1 ||
        (open >= 0 ? !is_set(open_set, n, "01") || !is_set(lost_set, n, "01")
                   : strcmp(open_set, "-") != 0 || strcmp(lost_set, "-") != 0)) {
        xdc_diag_set(diag, "the decider's state '%.200s' does not parse for %d regions", state, n);
        return XDC_ERR_PROTO;
    }
    int counts[XDC_TOPO_MAX_REGIONS];
    const char *p = left;
    for (int r = 0; r < n; r++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT_MAX || *end != (r + 1 < n ? ',' : '\0')) {
            xdc_diag_set(diag, "the decider's state: '%s' is not %d counts of times each region left", left, n);
            return XDC_ERR_PROTO;
        }
        counts[r] = (int)v;
        p = end + 1;
    }
    q->decided = decided;
    q->open = open;
    q->pending = -1;
    q->first_at = 0;
    q->named = 0;
    q->n_live = 0;
    for (int r = 0; r < n; r++) {
        q->live[r] = live[r] == '1';
        q->n_live += q->live[r];
        q->left[r] = counts[r];
    }
    if (open >= 0) {
        memcpy(q->open_set, open_set, (size_t)n + 1);
        memcpy(q->lost_set, lost_set, (size_t)n + 1);
    }
    const char *dropped = state + used;
    snprintf(q->dropped, sizeof q->dropped, "%s", *dropped == ' ' ? dropped + 1 : dropped);
    return XDC_OK;
}

#define DECIDER_LOAD_MS 250 /* how often a process that does not decide reads the holder's state */

void orch_decider_lapse(orch_decider *d)
{
    rdzv_server_role_lapse(d->q->rdzv);
    d->held = 0;
    d->lapsed = 1;
}

/* Not holding the role: the holder's state into the quorum, when it changed (at most every DECIDER_LOAD_MS). */
static void follow(orch_decider *d)
{
    char state[RDZV_VALUE_MAX];
    if (xdc_now_ns() < d->next_load) return;
    d->next_load = xdc_now_ns() + (uint64_t)DECIDER_LOAD_MS * XDC_NS_PER_MS;
    if (rdzv_server_get(d->q->rdzv, RDZV_KEY_DECIDER_STATE, state, sizeof state) != 0 || !strcmp(state, d->loaded))
        return;
    xdc_diag ld = {{0}};
    if (orch_decider_load(d->q, state, &ld) != XDC_OK) XDC_DEBUG(XDC_SUB_ORCH, "the holder's state: %s", ld.msg);
    snprintf(d->loaded, sizeof d->loaded, "%s", state);
}

/* How often a process that does not decide asks the store for the role. Each try is an etcd transaction, which the
 * cluster's members agree on; a standby's every launch tick (20 ms) made that 50 a second. The lease is seconds long:
 * a quarter second more to take the role over. */
#define DECIDER_TRY_MS 250

xdc_err_t orch_decider_tick(orch_decider *d, int *held, xdc_diag *diag)
{
    if (!d->held) {
        *held = 0;
        if (xdc_now_ns() < d->next_try) {
            follow(d);
            return XDC_OK;
        }
        d->next_try = xdc_now_ns() + (uint64_t)DECIDER_TRY_MS * XDC_NS_PER_MS;
    }
    if (d->lapsed) { /* as a dead holder: nothing until another process holds the role */
        char now[RDZV_VALUE_MAX];
        *held = 0;
        if (rdzv_server_get(d->q->rdzv, RDZV_KEY_DECIDER, now, sizeof now) != 0 || !strcmp(now, d->holder)) {
            follow(d);
            return XDC_OK;
        }
        d->lapsed = 0;
        XDC_INFO(XDC_SUB_ORCH, "%s holds the deciding role now: %s stands by for it again", now, d->holder);
    }
    int was = d->held;
    xdc_err_t rc = rdzv_server_role(d->q->rdzv, RDZV_KEY_DECIDER, d->holder, d->ttl_s, RDZV_KEY_DECIDER_STATE,
                                    orch_decider_state, d->q, &d->held, diag);
    *held = rc == XDC_OK && d->held;
    if (rc != XDC_OK) { /* etcd away: not held this time; the next tick tries again */
        XDC_DEBUG(XDC_SUB_ORCH, "the deciding role: %s", diag->msg);
        return XDC_OK;
    }
    if (!d->held) follow(d);
    if (d->held == was) return XDC_OK;
    if (!d->held) return XDC_OK; /* deposed: rdzv_server_role said why */
    char state[RDZV_VALUE_MAX];
    if (rdzv_server_get(d->q->rdzv, RDZV_KEY_DECIDER_STATE, state, sizeof state) != 0) {
        XDC_DEBUG(XDC_SUB_ORCH, "%s decides the run's rounds (%s)", d->holder, RDZV_KEY_DECIDER);
        return XDC_OK; /* no holder wrote anything yet: the quorum as it was set up */
    }
    xdc_diag ld = {{0}};
    if (orch_decider_load(d->q, state, &ld) != XDC_OK) { /* a newer or damaged state: deciding on it is unsound */
        xdc_diag_set(diag, "taking the deciding role: %s", ld.msg);
        return XDC_ERR_PROTO;
    }
    if (d->q->open >= 0 && strchr(d->q->lost_set, '1')) /* the last holder may have gone before publishing it */
        rdzv_server_set(d->q->rdzv, rdzv_key_lost(d->q->open).s, d->q->lost_set);
    char open[64] = "no round open";
    if (d->q->open >= 0) snprintf(open, sizeof open, "the outer round at step %lld open", d->q->open);
    XDC_WARN(XDC_SUB_ORCH,
             "%s took over deciding the run's rounds from the store: last decided %s, %s, %d of %d regions in the run",
             d->holder, rdzv_val_round(d->q->decided).s, open, d->q->n_live, d->q->t->n_regions);
    return XDC_OK;
}
