/* orch_routes.h — each elastic outer round's routes around WAN links that are down or slow (docs/runtime.md,
 * "Chaos"). A part of the round protocol (orch_quorum.h), in plain values: the worker measures, the decider chooses,
 * every member applies the decision's routes (xdc_sync_set_routes), never its own view.
 *
 * The report. Rank 0 of each region posts, before its arrival at the round of step S,
 * links/<region index>/0 = "<S>:<one character per region>" (orch_routes_report_char):
 *   '-'        itself, or a region it has no direct link to;
 *   'd'        down: its WAN peer has no stream up now;
 *   '0'..'9'   the rate the link moved what it carried since the report before (the last round's exchange) at, in
 *              tenths of the link's planned bandwidth, rounded down ('9': 0.9 or more);
 *   '?'        not measured: it carried too little since (under ORCH_ROUTES_MIN_MS at its planned rate; a relayed
 *              round leaves it idle), was down meanwhile, or
 *              its last measure is ORCH_ROUTES_PROBE reports old: the probe of a link avoided as slow, which then
 *              goes direct for a round and is measured again.
 * The decision. When the decider decides the round at S (orch_quorum_tick) and some link is avoided, it publishes
 * routes/<S> before quorum/<S> (orch_routes_choose; no key: every link direct, "-"): "<a>-<b>:<c>:<why>" for each
 * avoided link a < b, comma separated: a's and b's shards to each other are relayed, unchanged, by region c; why is 'd' (down) or the link's
 * rate digit (slow). Every member builds the round's route table from that text alone (orch_routes_table). */
#ifndef ORCH_ROUTES_H
#define ORCH_ROUTES_H

#include "common/xdc_err.h"
#include "topology/xdc_topology.h"

#include <stddef.h>

#define ORCH_ROUTES_PROBE     4 /* reports a link's rate measure counts for: a slow link is tried direct again */
/* A link is measured only when what it carried since the last report takes this long at its planned rate: a shorter
 * transfer shows the hosts' pace (encoding, scheduling) more than the link's. */
#define ORCH_ROUTES_MIN_MS    100
#define ORCH_ROUTES_VALUE_MAX 1024 /* bytes of a routes/<step> value, with its NUL: avoided links past it go direct */

/* The report's character for a link: down, else its measured rate over its planned one (frac < 0: not measured). */
char orch_routes_report_char(int down, double frac);

/* The decider's choice for a round, from the round's decision `mask` (one '0'/'1'/'j'/'t'/'c' per region) and each
 * region's report `rep[r]` (n_regions characters as above; NULL or "" when it posted none for this round): a direct
 * link a - b of the topology is avoided when it is down, or slow (measured below half the best measure of the other
 * links, or of its planned rate when none: what the hosts' own pace lets a healthy link show here) and some
 * region c linked to both relays faster by a clear margin: min(rate(a, c), rate(c, b)) > 2 x rate(a, b), a rate being
 * the planned bandwidth times the measured fraction (the middle of its tenth; planned where not measured); the relay
 * is the c whose two links are neither down nor slow with the highest min rate, the lowest index breaking ties.
 * Nothing is avoided in a round with a region out of it or joining ('0', 'j': regions leave the rounds only where no
 * route relays, xdc_sync_set_members) nor over a topology that is not a full mesh (its routes are the topology's).
 * Deterministic given its inputs. The decision's text into out[cap] (ORCH_ROUTES_VALUE_MAX): "-" or the list. */
void orch_routes_choose(const xdc_topology *t, const char *mask, const char *const *rep, char *out, size_t cap);

/* The route table of a decision (xdc_sync_cfg.route's layout, n_regions * n_regions): the topology's routes
 * (xdc_topology_routes) with each avoided link's shards through its relay. XDC_ERR_PROTO, in diag, when the text is
 * not a decision of this topology. */
xdc_err_t orch_routes_table(const xdc_topology *t, const char *decision, int *route, xdc_diag *diag);

/* 1 when decision `decision` ("-" or "": none) goes around the link between regions a and b. */
int orch_routes_avoids(const xdc_topology *t, const char *decision, int a, int b);

/* The log line of a member whose round at `step` changes routes from decision `was` to `now` ("-": direct), into
 * out[cap]: "outer round at step N: west<->asia avoided (down): relayed through east; east<->asia direct again".
 * 0 (out empty) when nothing changed. */
int orch_routes_describe(const xdc_topology *t, long long step, const char *was, const char *now, char *out,
                         size_t cap);

#endif /* ORCH_ROUTES_H */
