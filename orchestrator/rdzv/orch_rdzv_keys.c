/* orch_rdzv_keys.c — the run's store keys and the values of the elastic round protocol that more than one
 * process parses: built with their one format each, parsed strictly (canonical form only, so a parsed key
 * built again is the same text; see orch_rdzv_keys.h). */
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include "wan/xdc_wan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define INT_DIGITS  9  /* region indices, ranks, counts: below 10^9 */
#define STEP_DIGITS 18 /* steps: below 10^18 (RDZV_ROUND_END is "end") */

static rdzv_key key_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static rdzv_key key_fmt(const char *fmt, ...)
{
    rdzv_key k;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k.s, sizeof k.s, fmt, ap);
    va_end(ap);
    return k;
}

rdzv_key rdzv_key_wan(int region_idx, int rank) { return key_fmt("wan/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_relay(int from, int to, int rank) { return key_fmt("relay/%d/%d/%d", from, to, rank); }
rdzv_key rdzv_key_outer(int region_idx, int rank) { return key_fmt("outer/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_xchg(int region_idx, int rank) { return key_fmt("xchg/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_links(int region_idx, int rank) { return key_fmt("links/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_stats(int region_idx, int rank) { return key_fmt("stats/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_ckpt(int region_idx, int rank) { return key_fmt("ckpt/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_warm(int region_idx, int rank) { return key_fmt("warm/%d/%d", region_idx, rank); }
rdzv_key rdzv_key_metrics(const char *region, int rank) { return key_fmt("metrics/%s/%d", region, rank); }
rdzv_key rdzv_key_failed(const char *member) { return key_fmt(RDZV_PREFIX_FAILED "%s", member); }
rdzv_key rdzv_key_intra(const char *region) { return key_fmt("intra/%s", region); }
rdzv_key rdzv_key_intra_after(const char *region, int times_left) { return key_fmt("intra/%s/%d", region, times_left); }
rdzv_key rdzv_key_device(const char *region) { return key_fmt("device/%s", region); }
rdzv_key rdzv_key_replan_link(int region_idx) { return key_fmt(RDZV_PREFIX_REPLAN "link/%d", region_idx); }
rdzv_key rdzv_key_replan(long long step) { return key_fmt(RDZV_PREFIX_REPLAN "%lld", step); }
rdzv_key rdzv_key_quorum(long long round) { return key_fmt("quorum/%s", rdzv_val_round(round).s); }
rdzv_key rdzv_key_final(long long step) { return key_fmt("final/%lld", step); }
rdzv_key rdzv_key_lost(long long step) { return key_fmt("lost/%lld", step); }
rdzv_key rdzv_key_steps(long long step) { return key_fmt("steps/%lld", step); }
rdzv_key rdzv_key_ran(long long step) { return key_fmt("ran/%lld", step); }
rdzv_key rdzv_key_routes(long long step) { return key_fmt("routes/%lld", step); }
rdzv_key rdzv_key_left(int region_idx) { return key_fmt("left/%d", region_idx); }
rdzv_key rdzv_key_rejoin(const char *nonce) { return key_fmt("rejoin/%s", nonce); }
rdzv_key rdzv_key_back(int region_idx, int times_left) { return key_fmt("back/%d/%d", region_idx, times_left); }

/* ---- parsing ------------------------------------------------------------------------------------- */

/* A decimal number of at most `digits` digits without sign or leading zero at p: *out and the text after
 * it, or NULL. */
static const char *take_num(const char *p, int digits, long long *out)
{
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n > (size_t)digits || (p[0] == '0' && n > 1)) return NULL;
    long long v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    *out = v;
    return p + n;
}

static const char *take_int(const char *p, int *out)
{
    long long v;
    p = p ? take_num(p, INT_DIGITS, &v) : NULL;
    if (p) *out = (int)v;
    return p;
}

/* One name up to the next '/' or the end, 1..cap-1 bytes, into out[cap]: the text after it, or NULL. */
static const char *take_name(const char *p, char *out, size_t cap)
{
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= cap) return NULL;
    memcpy(out, p, n);
    out[n] = '\0';
    return p + n;
}

/* "/" at p: the text after it, or NULL. */
static const char *take_slash(const char *p) { return p && *p == '/' ? p + 1 : NULL; }

static int valid_nonce(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < RDZV_NONCE_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The keys <prefix><region index>/<rank>. */
static const struct {
    const char *prefix;
    rdzv_key_kind kind;
} worker_keys[] = {{"wan/", RDZV_KIND_WAN},     {"outer/", RDZV_KIND_OUTER}, {"xchg/", RDZV_KIND_XCHG},
                   {"links/", RDZV_KIND_LINKS}, {"stats/", RDZV_KIND_STATS}, {"ckpt/", RDZV_KIND_CKPT},
                   {"warm/", RDZV_KIND_WARM}};

/* The keys <prefix><step>. */
static const struct {
    const char *prefix;
    rdzv_key_kind kind;
} step_keys[] = {{"final/", RDZV_KIND_FINAL},
                 {"lost/", RDZV_KIND_LOST},
                 {"steps/", RDZV_KIND_STEPS},
                 {"ran/", RDZV_KIND_RAN},
                 {"routes/", RDZV_KIND_ROUTES}};

/* `key` minus `prefix` when it starts with it, else NULL. */
static const char *after(const char *key, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(key, prefix, n) == 0 ? key + n : NULL;
}

/* The parts of `key` into *p; the text left after them (to be ""), or NULL. */
static const char *parse_parts(const char *key, rdzv_key_parts *p)
{
    const char *r;
    for (size_t i = 0; i < sizeof worker_keys / sizeof worker_keys[0]; i++)
        if ((r = after(key, worker_keys[i].prefix))) {
            p->kind = worker_keys[i].kind;
            return take_int(take_slash(take_int(r, &p->region_idx)), &p->rank);
        }
    for (size_t i = 0; i < sizeof step_keys / sizeof step_keys[0]; i++)
        if ((r = after(key, step_keys[i].prefix))) {
            p->kind = step_keys[i].kind;
            return take_num(r, STEP_DIGITS, &p->num);
        }
    if (strcmp(key, RDZV_KEY_RESULT) == 0 || strcmp(key, RDZV_KEY_FINISHED) == 0) {
        p->kind = key[0] == 'r' ? RDZV_KIND_RESULT : RDZV_KIND_FINISHED;
        return "";
    }
    if ((r = after(key, RDZV_PREFIX_REPLAN "link/"))) {
        p->kind = RDZV_KIND_REPLAN_LINK;
        return take_int(r, &p->region_idx);
    }
    if ((r = after(key, RDZV_PREFIX_REPLAN))) {
        p->kind = RDZV_KIND_REPLAN;
        return take_num(r, STEP_DIGITS, &p->num);
    }
    if ((r = after(key, "relay/"))) {
        p->kind = RDZV_KIND_RELAY;
        return take_int(take_slash(take_int(take_slash(take_int(r, &p->region_idx)), &p->to)), &p->rank);
    }
    if ((r = after(key, "metrics/"))) {
        p->kind = RDZV_KIND_METRICS;
        return take_int(take_slash(take_name(r, p->name, XDC_WAN_NAME_MAX)), &p->rank);
    }
    if ((r = after(key, RDZV_PREFIX_FAILED))) {
        p->kind = RDZV_KIND_FAILED;
        if (!*r || strlen(r) >= sizeof p->name) return NULL;
        snprintf(p->name, sizeof p->name, "%s", r);
        return "";
    }
    if ((r = after(key, "intra/"))) {
        p->kind = RDZV_KIND_INTRA;
        r = take_name(r, p->name, XDC_WAN_NAME_MAX);
        if (!r || !*r) return r;
        p->kind = RDZV_KIND_INTRA_AFTER;
        r = take_slash(r);
        return r ? take_num(r, INT_DIGITS, &p->num) : NULL;
    }
    if ((r = after(key, "device/"))) {
        p->kind = RDZV_KIND_DEVICE;
        return take_name(r, p->name, XDC_WAN_NAME_MAX);
    }
    if ((r = after(key, "quorum/"))) {
        p->kind = RDZV_KIND_QUORUM;
        if (strcmp(r, RDZV_ROUND_END_NAME) == 0) return p->num = RDZV_ROUND_END, "";
        return take_num(r, STEP_DIGITS, &p->num);
    }
    if ((r = after(key, "left/"))) {
        p->kind = RDZV_KIND_LEFT;
        return take_int(r, &p->region_idx);
    }
    if ((r = after(key, "rejoin/"))) {
        p->kind = RDZV_KIND_REJOIN;
        if (!valid_nonce(r)) return NULL;
        snprintf(p->name, sizeof p->name, "%s", r);
        return "";
    }
    return NULL;
}

xdc_err_t rdzv_key_parse(const char *key, rdzv_key_parts *out)
{
    rdzv_key_parts p = {.region_idx = -1, .to = -1, .rank = -1, .num = -1};
    if (!key || strlen(key) >= RDZV_KEY_MAX) return XDC_ERR_PROTO;
    const char *rest = parse_parts(key, &p);
    if (!rest || *rest) return XDC_ERR_PROTO;
    *out = p;
    return XDC_OK;
}

static int owned(const rdzv_key_parts *k, const char *member, const char *region, int region_idx, int rank)
{
    switch (k->kind) {
    case RDZV_KIND_WAN:
    case RDZV_KIND_OUTER: /* its arrival at an outer round */
    case RDZV_KIND_XCHG:  /* what its round summed */
    case RDZV_KIND_LINKS: /* its links as it arrives at a round */
    case RDZV_KIND_STATS:
    case RDZV_KIND_CKPT: /* its last checkpoint's outcome */
    case RDZV_KIND_WARM: /* the snapshot it rejoins from */ return k->region_idx == region_idx && k->rank == rank;
    case RDZV_KIND_METRICS: return k->rank == rank && strcmp(k->name, region) == 0;
    case RDZV_KIND_FAILED: return strcmp(k->name, member) == 0;
    case RDZV_KIND_INTRA:
    case RDZV_KIND_INTRA_AFTER: /* a rejoining region's bootstrap, intra/<region>/<times it left> */
    case RDZV_KIND_DEVICE: return rank == 0 && strcmp(k->name, region) == 0;
    case RDZV_KIND_REPLAN_LINK: return rank == 0 && k->region_idx == region_idx; /* its incoming links' rate */
    default: return 0;
    }
}

int rdzv_key_owned_by(const char *key, const char *member, const char *region, int region_idx, int rank,
                      rdzv_key_kind *kind)
{
    rdzv_key_parts p;
    if (rdzv_key_parse(key, &p) != XDC_OK || !owned(&p, member, region, region_idx, rank)) return 0;
    if (kind) *kind = p.kind;
    return 1;
}

/* ---- values -------------------------------------------------------------------------------------- */

rdzv_val rdzv_val_round(long long round)
{
    rdzv_val v;
    if (round == RDZV_ROUND_END) snprintf(v.s, sizeof v.s, "%s", RDZV_ROUND_END_NAME);
    else snprintf(v.s, sizeof v.s, "%lld", round);
    return v;
}

xdc_err_t rdzv_val_round_parse(const char *text, long long *round)
{
    if (strcmp(text, RDZV_ROUND_END_NAME) == 0) {
        *round = RDZV_ROUND_END;
        return XDC_OK;
    }
    const char *rest = take_num(text, STEP_DIGITS, round);
    return rest && !*rest ? XDC_OK : XDC_ERR_PROTO;
}

rdzv_val rdzv_val_join(const char *nonce, int ran)
{
    rdzv_val v;
    if (ran > 0) snprintf(v.s, sizeof v.s, RDZV_VAL_JOIN "%s+%d", nonce, ran);
    else snprintf(v.s, sizeof v.s, RDZV_VAL_JOIN "%s", nonce);
    return v;
}

/* The prefixes of a rejoined worker's arrivals, by rdzv_arrive_kind. */
static const char *const arrive_prefix[] = {"", "taking:", "took:"};

rdzv_val rdzv_val_arrival(long long round, rdzv_arrive_kind kind, int ran)
{
    rdzv_val v;
    if (ran > 0) snprintf(v.s, sizeof v.s, "%s%s+%d", arrive_prefix[kind], rdzv_val_round(round).s, ran);
    else snprintf(v.s, sizeof v.s, "%s%s", arrive_prefix[kind], rdzv_val_round(round).s);
    return v;
}

xdc_err_t rdzv_val_outer_parse(const char *val, long long *round, char *nonce, rdzv_arrive_kind *kind, int *extra)
{
    const char *r = after(val, RDZV_VAL_JOIN);
    nonce[0] = '\0';
    if (kind) *kind = RDZV_ARRIVE;
    if (extra) *extra = 0;
    for (int k = RDZV_ARRIVE_TAKING; !r && k <= RDZV_ARRIVE_TOOK; k++) {
        const char *at = after(val, arrive_prefix[k]);
        if (!at) continue;
        if (kind) *kind = (rdzv_arrive_kind)k;
        val = at;
        break;
    }
    /* "<round>+<extra>", "join:<nonce>+<extra>": a positive count, in canonical form (a nonce has no '+') */
    const char *plus = r ? strchr(r, '+') : take_num(val, STEP_DIGITS, round);
    if (plus && *plus == '+') {
        int e = 0;
        const char *end = take_int(plus + 1, &e);
        if (!end || *end || e == 0) return XDC_ERR_PROTO;
        if (extra) *extra = e;
    }
    if (!r) return plus && *plus == '+' ? XDC_OK : rdzv_val_round_parse(val, round);
    size_t len = plus ? (size_t)(plus - r) : strlen(r);
    char own[RDZV_NONCE_MAX];
    if (len >= sizeof own) return XDC_ERR_PROTO;
    memcpy(own, r, len);
    own[len] = '\0';
    if (!valid_nonce(own)) return XDC_ERR_PROTO;
    memcpy(nonce, own, len + 1);
    *round = -1;
    return XDC_OK;
}

rdzv_val rdzv_val_xchg(long long step, const uint8_t *got, int n)
{
    rdzv_val v;
    size_t len = (size_t)snprintf(v.s, sizeof v.s, "%lld:", step);
    for (int r = 0; r < n && len + 1 < sizeof v.s; r++) v.s[len++] = got[r] ? '1' : '0';
    v.s[len] = '\0';
    return v;
}

xdc_err_t rdzv_val_xchg_parse(const char *val, int n, long long *step, char *set)
{
    const char *rest = take_num(val, STEP_DIGITS, step);
    if (!rest || *rest != ':' || strlen(rest + 1) != (size_t)n || strspn(rest + 1, "01") != (size_t)n)
        return XDC_ERR_PROTO;
    memcpy(set, rest + 1, (size_t)n + 1);
    return XDC_OK;
}

void rdzv_val_steps(const int *h, int n, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < n && len < cap; r++) len += (size_t)snprintf(out + len, cap - len, "%s%d", r ? "," : "", h[r]);
}

xdc_err_t rdzv_val_steps_parse(const char *val, int n, int *h)
{
    const char *p = val;
    for (int r = 0; r < n; r++) {
        if (r && (p = *p == ',' ? p + 1 : NULL) == NULL) return XDC_ERR_PROTO;
        if (!(p = take_int(p, &h[r]))) return XDC_ERR_PROTO;
    }
    return *p ? XDC_ERR_PROTO : XDC_OK;
}

rdzv_holder_text rdzv_val_holder(const rdzv_holder *h)
{
    rdzv_holder_text v;
    snprintf(v.s, sizeof v.s, "%lld:%s:%s", h->generation, h->lease, h->cert);
    return v;
}

xdc_err_t rdzv_val_holder_parse(const char *val, rdzv_holder *out)
{
    const char *lease = take_num(val, STEP_DIGITS, &out->generation);
    if (!lease || *lease++ != ':') return XDC_ERR_PROTO;
    const char *cert = strchr(lease, ':');
    size_t n_lease = cert ? (size_t)(cert - lease) : 0;
    if (n_lease == 0 || n_lease >= sizeof out->lease || strspn(lease, "0123456789") != n_lease) return XDC_ERR_PROTO;
    cert++;
    if (strcmp(cert, "-") != 0 && (strlen(cert) != 64 || strspn(cert, "0123456789abcdef") != 64)) return XDC_ERR_PROTO;
    snprintf(out->lease, sizeof out->lease, "%.*s", (int)n_lease, lease);
    snprintf(out->cert, sizeof out->cert, "%s", cert);
    return XDC_OK;
}
