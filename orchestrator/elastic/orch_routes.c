/* orch_routes.c — the routes of each elastic outer round around WAN links that are down or slow: the report's
 * characters, the decider's choice, the route table and the log line of a decision (see orch_routes.h). */
#include "orchestrator/elastic/orch_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARGIN 2.0 /* a relay must be this many times faster than the slow link */

char orch_routes_report_char(int down, double frac)
{
    if (down) return 'd';
    if (frac < 0) return '?';
    int tenths = frac >= 0.9 ? 9 : (int)(frac * 10.0);
    return (char)('0' + (tenths < 0 ? 0 : tenths));
}

/* What the two ends of link a - b reported of it: down when either says so, else the lower measured rate digit
 * ('0'..'9'), or '?' when neither measured it. */
static char link_state(const char *const *rep, int a, int b)
{
    char x = rep[a] && rep[a][0] ? rep[a][b] : '?', y = rep[b] && rep[b][0] ? rep[b][a] : '?';
    if (x == 'd' || y == 'd') return 'd';
    if (x >= '0' && x <= '9' && (y < '0' || y > '9' || x < y)) return x;
    return y >= '0' && y <= '9' ? y : '?';
}

/* The rate of link a - b in Gbit/s as its state says: 0 down, the planned bandwidth times the middle of the
 * measured tenth, the planned bandwidth unmeasured. */
static double link_rate(const xdc_topology *t, char st, int a, int b)
{
    double bw = xdc_topology_link(t, a, b)->bandwidth_gbps;
    if (st == 'd') return 0.0;
    if (st == '?' || st == '9') return bw;
    return bw * ((st - '0') + 0.5) / 10.0;
}

/* Down, or slow: measured below half of `best`, the highest measure of the other links ('9' when none has one; the
 * other links' measures stand for what the hosts' own pace lets a link show, e.g. a sender that encodes slower than
 * the link moves bytes). */
static int slow_or_down(char st, char best)
{
    return st == 'd' || (st >= '0' && st <= '9' && (st - '0') * 2 < best - '0' + (best == '9'));
}

/* The highest rate measure ('0'..'9') the ends reported of any link of the round other than a - b; '9' when none. */
static char best_other(const xdc_topology *t, const char *const *rep, int a, int b)
{
    char best = 0;
    for (int x = 0; x < t->n_regions; x++)
        for (int y = x + 1; y < t->n_regions; y++) {
            char st = link_state(rep, x, y);
            if ((x != a || y != b) && st >= '0' && st <= '9' && st > best) best = st;
        }
    return best ? best : '9';
}

void orch_routes_choose(const xdc_topology *t, const char *mask, const char *const *rep, char *out, size_t cap)
{
    int n = t->n_regions;
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < n; r++)
        if (mask[r] == '0' || mask[r] == 'j') n = 0; /* a region out of the round: no relay */
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b && !xdc_topology_link(t, a, b)) n = 0; /* not a full mesh: the topology's routes */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            char st = link_state(rep, a, b), best_rate_digit = best_other(t, rep, a, b);
            if (!slow_or_down(st, best_rate_digit)) continue;
            int best = -1;
            double best_rate = 0.0;
            for (int c = 0; c < n; c++) {
                if (c == a || c == b) continue;
                char sa = link_state(rep, a, c), sb = link_state(rep, c, b);
                double ra = link_rate(t, sa, a, c), rb = link_rate(t, sb, c, b), via = ra < rb ? ra : rb;
                if (!slow_or_down(sa, best_rate_digit) && !slow_or_down(sb, best_rate_digit) && via > best_rate)
                    best = c, best_rate = via;
            }
            if (best < 0 || (st != 'd' && best_rate <= MARGIN * link_rate(t, st, a, b))) continue;
            int w = snprintf(out + len, cap - len, "%s%d-%d:%d:%c", len ? "," : "", a, b, best, st);
            if (w < 0 || (size_t)w >= cap - len) { /* more avoided links than the value holds: the first ones */
                out[len] = '\0';
                break;
            }
            len += (size_t)w;
        }
    if (!out[0]) snprintf(out, cap, "-");
}

/* The next entry "<a>-<b>:<c>:<why>" of a decision at *p (then past it and its comma): 1, 0 at its end, -1 when the
 * text is not one. */
static int next_entry(const xdc_topology *t, const char **p, int *a, int *b, int *c, char *why)
{
    if (!**p) return 0;
    char *e;
    long v[3];
    const char *q = *p;
    for (int i = 0; i < 3; i++) {
        v[i] = strtol(q, &e, 10);
        if (e == q || v[i] < 0 || v[i] >= t->n_regions || *e != (i == 0 ? '-' : ':')) return -1;
        q = e + 1;
    }
    *a = (int)v[0], *b = (int)v[1], *c = (int)v[2], *why = *q;
    if (!(*why == 'd' || (*why >= '0' && *why <= '9')) || (q[1] != ',' && q[1] != '\0') || (q[1] == ',' && !q[2]))
        return -1;
    if (*a >= *b || *c == *a || *c == *b) return -1;
    *p = q[1] == ',' ? q + 2 : q + 1;
    return 1;
}

xdc_err_t orch_routes_table(const xdc_topology *t, const char *decision, int *route, xdc_diag *diag)
{
    int n = t->n_regions, a, b, c, k;
    char why;
    XDC_CHECK(xdc_topology_routes(t, NULL, route));
    const char *p = strcmp(decision, "-") == 0 ? "" : decision;
    while ((k = next_entry(t, &p, &a, &b, &c, &why)) == 1) {
        if (!xdc_topology_link(t, a, b) || !xdc_topology_link(t, a, c) || !xdc_topology_link(t, c, b)) break;
        route[(size_t)a * (size_t)n + (size_t)b] = c; /* b gets a's shard from c, which gets it from a */
        route[(size_t)b * (size_t)n + (size_t)a] = c;
    }
    if (k == 0) return XDC_OK;
    xdc_diag_set(diag, "routes '%.64s' are not links of the topology relayed through a region linked to both",
                 decision);
    return XDC_ERR_PROTO;
}

/* Decision d's entry for link a - b (a < b) into *c and *why; 0 when it goes direct (or d is not a decision). */
static int avoided(const xdc_topology *t, const char *d, int a, int b, int *c, char *why)
{
    int x, y;
    const char *p = strcmp(d, "-") == 0 ? "" : d;
    while (next_entry(t, &p, &x, &y, c, why) == 1)
        if (x == a && y == b) return 1;
    return 0;
}

int orch_routes_describe(const xdc_topology *t, long long step, const char *was, const char *now, char *out, size_t cap)
{
    int n = t->n_regions, changed = 0;
    size_t len = (size_t)snprintf(out, cap, "outer round at step %lld:", step);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n && len < cap; b++) {
            int c0, c1;
            char w0, w1, why[32];
            int in0 = avoided(t, was, a, b, &c0, &w0), in1 = avoided(t, now, a, b, &c1, &w1);
            if (in0 == in1 && (!in1 || c0 == c1)) continue;
            if (in1)
                snprintf(why, sizeof why,
                         w1 == 'd'   ? "down"
                         : w1 == '0' ? "below 0.1 of its rate"
                                     : "0.%c of its rate",
                         w1);
            if (in1)
                len += (size_t)snprintf(out + len, cap - len, "%s %s<->%s avoided (%s): relayed through %s",
                                        changed ? ";" : "", t->regions[a].name, t->regions[b].name, why,
                                        t->regions[c1].name);
            else
                len += (size_t)snprintf(out + len, cap - len, "%s %s<->%s direct again", changed ? ";" : "",
                                        t->regions[a].name, t->regions[b].name);
            changed = 1;
        }
    if (!changed) out[0] = '\0';
    return changed;
}

int orch_routes_avoids(const xdc_topology *t, const char *decision, int a, int b)
{
    int c;
    char why;
    return avoided(t, decision, a < b ? a : b, a < b ? b : a, &c, &why);
}
