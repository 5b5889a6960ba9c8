/* orch_rdzv.c — rendezvous store server and client (see orch_rdzv.h). The server runs an acceptor
 * thread and one thread per connection; waits (get, barrier) park on one condition variable with a
 * deadline, so the store is a few hundred lines instead of an event machine. Each connection keeps one
 * receive posted at all times, so a member that leaves while its barrier is parked is seen at once. */
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_priv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/rdzv/orch_rdzv_quota.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "topology/xdc_topology.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RDZV_HOST_KEYS    4096 /* keys the host itself may set; members' keys are bounded by their quotas */
#define RDZV_MAX_CONNS    1024
#define RDZV_CONNS_PER_ID 8 /* connections one certificate identity may hold at once */
#define RDZV_MAX_BARRIERS 16
#define RDZV_MAX_GRANTS   (16 + XDC_TOPO_MAX_REGIONS) /* the run-wide keys, and (elastic) `result` per region */
#define RDZV_JOIN_MS      30000                       /* a connection that has not joined by then is closed */
#define RDZV_NAG_MS       5000                        /* how often a parked wait logs who is missing */
#define RDZV_POLL_MS      100   /* a parked wait rechecks its connection and the stop flag this often */
#define RDZV_REPLY_MS     30000 /* a member must take its reply within this */
#define RDZV_WHO_MAX      (RDZV_MEMBER_MAX + 96)
#define RDZV_SILENT_S     1.0 /* a member's line says how long its connection was silent beyond this */

typedef struct {
    char key[RDZV_KEY_MAX];
    char *value;
    int owner;          /* the member that wrote it last (its quota holds it), -1: the host */
    rdzv_key_class cls; /* the rule that let the owner write it */
} kv;

struct conn;

typedef struct {
    char name[RDZV_MEMBER_MAX];
    char region[XDC_WAN_NAME_MAX];
    int region_idx, rank;
    int joined;
    uint64_t last_ns;
    char status[RDZV_STATUS_MAX];
    struct conn *conn; /* the connection it joined on last */
    rdzv_usage use;    /* what its keys hold of its quota */
} member;

typedef struct {
    int member;        /* index into members */
    struct conn *conn; /* the connection that arrived; its end withdraws the arrival */
} arrival;

typedef struct {
    char name[RDZV_KEY_MAX];
    int count;        /* arrivals in the current generation */
    int generation;   /* only grows, also across reuse of the slot by another name */
    arrival *arrived; /* (n_expected) */
} barrier;

typedef struct {
    char key[RDZV_KEY_MAX];
    int prefix; /* key ends with '/': every key under it */
    int member;
} grant;

typedef struct conn {
    struct bserver *srv;
    xdc_wan_peer *peer;
    xdc_wan_identity id;     /* the certificate's, copied: the peer is closed before the slot is freed */
    xdc_wan_request *rx_req; /* the receive posted into rx, NULL when none */
    pthread_t thread;
    int idx;                /* member index, -1 before join */
    int ended;              /* under mu: the thread is done with the connection and closed its peer */
    int close;              /* handle() decided to end the connection after its reply */
    char who[RDZV_WHO_MAX]; /* for logs: certificate identity, then the member name */
    rdzv_request req;
    char rx[RDZV_MSG_MAX], tx[RDZV_MSG_MAX]; /* bytes: one message each */
} conn;

typedef struct bserver {
    rdzv_server base; /* first: the store interface (orch_rdzv_priv.h) */
    xdc_wan_engine *eng;
    xdc_wan_listener *lis;
    pthread_t acceptor;
    atomic_int stop; /* set by rdzv_server_destroy, read by the acceptor and connection threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv *keys; /* (cap_keys); grows: members are bounded by `quota`, the host by RDZV_HOST_KEYS */
    int n_keys, cap_keys, n_host_keys;
    rdzv_quota quota; /* of each member */
    member *members;  /* (n_expected) */
    int n_expected;
    barrier barriers[RDZV_MAX_BARRIERS];
    int n_barriers;
    grant grants[RDZV_MAX_GRANTS];
    int n_grants;
    conn *conns[RDZV_MAX_CONNS];
    int n_conns;
    uint64_t start_ns;
} bserver;

/* ---- messages ------------------------------------------------------------------------------------ */

typedef enum { F_MEMBER, F_KEY, F_VALUE, F_STATUS, F_COUNT, F_TIMEOUT, F_N } field_id;

/* Which fields each op needs (bit set) and may carry. */
static const struct {
    const char *name;
    unsigned need, may;
} ops[] = {
    [RDZV_OP_JOIN] = {"join", 1u << F_MEMBER, 1u << F_MEMBER | 1u << F_STATUS},
    [RDZV_OP_SET] = {"set", 1u << F_KEY | 1u << F_VALUE, 1u << F_KEY | 1u << F_VALUE | 1u << F_STATUS},
    [RDZV_OP_GET] = {"get", 1u << F_KEY, 1u << F_KEY | 1u << F_TIMEOUT | 1u << F_STATUS},
    [RDZV_OP_BARRIER] = {"barrier", 1u << F_KEY | 1u << F_COUNT | 1u << F_TIMEOUT,
                         1u << F_KEY | 1u << F_COUNT | 1u << F_TIMEOUT | 1u << F_STATUS},
    [RDZV_OP_HEARTBEAT] = {"heartbeat", 0, 1u << F_STATUS},
};

static const char *const field_names[F_N] = {"member", "key", "value", "status", "count", "timeout_ms"};

/* 1 when every byte of s is printable ASCII (spaces too when `spaces`). */
static int printable(const char *s, int spaces)
{
    for (; *s; s++)
        if ((unsigned char)*s > 0x7e || (unsigned char)*s < (spaces ? 0x20 : 0x21)) return 0;
    return 1;
}

/* One field into `out`: its type, size and characters. */
static xdc_err_t parse_field(field_id f, json_t *v, rdzv_request *out, xdc_diag *diag)
{
    const char *name = field_names[f];
    if (f == F_COUNT || f == F_TIMEOUT) {
        json_int_t lo = f == F_COUNT ? 1 : 0, hi = f == F_COUNT ? RDZV_MAX_CONNS : INT32_MAX;
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
            xdc_diag_set(diag, "field '%s' must be an integer in %lld..%lld", name, (long long)lo, (long long)hi);
            return XDC_ERR_PROTO;
        }
        if (f == F_COUNT) out->count = (int)json_integer_value(v);
        else out->timeout_ms = json_integer_value(v);
        return XDC_OK;
    }
    static const size_t caps[] = {
        [F_MEMBER] = RDZV_MEMBER_MAX, [F_KEY] = RDZV_KEY_MAX, [F_VALUE] = RDZV_VALUE_MAX, [F_STATUS] = RDZV_STATUS_MAX};
    char *dst = f == F_MEMBER ? out->member : f == F_KEY ? out->key : f == F_VALUE ? out->value : out->status;
    if (!json_is_string(v)) {
        xdc_diag_set(diag, "field '%s' must be a string", name);
        return XDC_ERR_PROTO;
    }
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n >= caps[f] || (f == F_KEY && n == 0)) {
        xdc_diag_set(diag, "field '%s' is %zu bytes; it takes 1 to %zu", name, n, caps[f] - 1);
        return XDC_ERR_PROTO;
    }
    if (f != F_VALUE && !printable(s, f == F_STATUS)) {
        xdc_diag_set(diag, "field '%s' has a byte outside printable ASCII", name);
        return XDC_ERR_PROTO;
    }
    memcpy(dst, s, n + 1);
    return XDC_OK;
}

xdc_err_t rdzv_request_parse(const void *buf, size_t len, rdzv_request *out, xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    if (len > RDZV_MSG_MAX) {
        xdc_diag_set(diag, "message of %zu bytes is over the %d-byte bound", len, RDZV_MSG_MAX);
        return XDC_ERR_PROTO;
    }
    /* Requests are flat: refuse nesting before the parser recurses into it. */
    const char *p = buf;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if ((ch == '{' || ch == '[') && ++depth > 1) {
            xdc_diag_set(diag, "nested value at byte %zu: a request is one flat object", i);
            return XDC_ERR_PROTO;
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    json_error_t jerr;
    json_t *req = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req || !json_is_object(req)) {
        if (req) xdc_diag_set(diag, "not a JSON object");
        else xdc_diag_set(diag, "not valid JSON: %s", jerr.text);
        json_decref(req);
        return XDC_ERR_PROTO;
    }
    xdc_err_t rc = XDC_OK;
    const char *op = json_string_value(json_object_get(req, "op"));
    int o = -1;
    for (int i = 0; op && i < (int)(sizeof ops / sizeof ops[0]); i++)
        if (strcmp(op, ops[i].name) == 0) o = i;
    if (o < 0) {
        xdc_diag_set(diag, "no op, or not one of join, set, get, barrier, heartbeat");
        rc = XDC_ERR_PROTO;
    }
    unsigned seen = 0;
    const char *name;
    json_t *v;
    json_object_foreach(req, name, v)
    {
        if (rc != XDC_OK || strcmp(name, "op") == 0) continue;
        int f = 0;
        while (f < F_N && strcmp(field_names[f], name) != 0) f++;
        if (f == F_N || !(ops[o].may & 1u << f)) {
            xdc_diag_set(diag, "%s takes no field '%.64s'", ops[o].name, name);
            rc = XDC_ERR_PROTO;
        } else {
            rc = parse_field((field_id)f, v, out, diag);
            seen |= 1u << f;
        }
    }
    for (int f = 0; rc == XDC_OK && f < F_N; f++)
        if ((ops[o].need & 1u << f) && !(seen & 1u << f)) {
            xdc_diag_set(diag, "%s needs field '%s'", ops[o].name, field_names[f]);
            rc = XDC_ERR_PROTO;
        }
    if (rc == XDC_OK) out->op = (rdzv_op)o;
    json_decref(req);
    return rc;
}

/* "region/host:rank" into its parts (rank: decimal digits only); 0 when it has that shape. */
static int split_member(const char *name, char *region, size_t cap, int *rank)
{
    const char *slash = strchr(name, '/'), *colon = strrchr(name, ':');
    if (!slash || !colon || colon < slash || slash == name || colon == slash + 1 || (size_t)(slash - name) >= cap ||
        !colon[1] || strlen(colon + 1) > 6 || strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -1;
    memcpy(region, name, (size_t)(slash - name));
    region[slash - name] = '\0';
    *rank = atoi(colon + 1);
    return 0;
}

/* ---- store (under mu) -------------------------------------------------------------------------- */

static kv *find_key(bserver *s, const char *key)
{
    for (int i = 0; i < s->n_keys; i++)
        if (strcmp(s->keys[i].key, key) == 0) return &s->keys[i];
    return NULL;
}

/* Set key to value on behalf of member `owner` (-1: the host) under rule cls: the key's quota charge moves
 * to its new writer. The caller checked the writer's quota. */
static int store_set(bserver *s, const char *key, const char *value, int owner, rdzv_key_class cls)
{
    kv *k = find_key(s, key);
    if (!k && owner < 0 && s->n_host_keys == RDZV_HOST_KEYS) return -1;
    if (!k && s->n_keys == s->cap_keys) {
        int cap = s->cap_keys ? 2 * s->cap_keys : 256;
        kv *keys = xdc_realloc(s->keys, (size_t)cap * sizeof *keys);
        if (!keys) return -1;
        s->keys = keys;
        s->cap_keys = cap;
    }
    char *v = xdc_strdup(value);
    if (!v) return -1;
    if (!k) {
        k = &s->keys[s->n_keys++];
        snprintf(k->key, sizeof k->key, "%s", key);
        k->value = NULL;
    } else if (k->owner >= 0) {
        rdzv_quota_charge(&s->members[k->owner].use, k->cls, -1, strlen(k->value));
    } else {
        s->n_host_keys--;
    }
    if (owner >= 0) rdzv_quota_charge(&s->members[owner].use, cls, +1, strlen(v));
    else s->n_host_keys++;
    k->owner = owner;
    k->cls = cls;
    xdc_free(k->value);
    k->value = v;
    pthread_cond_broadcast(&s->cv);
    return 0;
}

static int find_member(bserver *s, const char *name)
{
    for (int i = 0; i < s->n_expected; i++)
        if (strcmp(s->members[i].name, name) == 0) return i;
    return -1;
}

/* Whether member i may write `key`, and by which rule (its quota counts the key there): one of its own
 * keys (orch_rdzv_keys.h; a rejoining region's bootstrap intra/<region>/<n> among them, counted apart), or a
 * run-wide key or prefix granted to it. */
static rdzv_key_class may_write(const bserver *s, int i, const char *key)
{
    const member *m = &s->members[i];
    rdzv_key_kind kind;
    if (rdzv_key_owned_by(key, m->name, m->region, m->region_idx, m->rank, &kind))
        return kind == RDZV_KIND_INTRA_AFTER ? RDZV_KEY_REJOIN : RDZV_KEY_OWN;
    for (int g = 0; g < s->n_grants; g++) {
        const grant *gr = &s->grants[g];
        if (gr->member == i && (gr->prefix ? strncmp(key, gr->key, strlen(gr->key)) == 0 : strcmp(key, gr->key) == 0))
            return gr->prefix ? RDZV_KEY_PREFIX : RDZV_KEY_GRANT;
    }
    return RDZV_KEY_DENIED;
}

/* Seconds the member's connection has carried nothing (keepalives included), 0 without one. A member
 * blocked behind another answers keepalives; the one they all wait for, stopped or hung, does not. */
static double conn_silence(const member *m)
{
    if (!m->conn) return 0;
    xdc_wan_stats st;
    xdc_wan_peer_stats(m->conn->peer, &st);
    return st.silent_seconds;
}

static void describe_member(const bserver *s, const member *m, uint64_t now, char *out, size_t cap)
{
    if (!m->joined) {
        snprintf(out, cap, "%s (never joined; waited %.1f s)", m->name, (double)(now - s->start_ns) / 1e9);
        return;
    }
    double silent = conn_silence(m);
    char quiet[64] = "";
    if (silent > RDZV_SILENT_S) snprintf(quiet, sizeof quiet, "; its connection silent for %.1f s", silent);
    snprintf(out, cap, "%s (last heard %.1f s ago: %s%s)", m->name, (double)(now - m->last_ns) / 1e9,
             m->status[0] ? m->status : "joined", quiet);
}

static int arrived(const barrier *b, int i)
{
    for (int a = 0; a < b->count; a++)
        if (b->arrived[a].member == i) return 1;
    return 0;
}

/* Comma list of members not in `present` (a barrier's arrivals) or, with present NULL, of members
 * never joined or silent for silent_ms. */
static int list_missing(bserver *s, const barrier *present, int64_t silent_ms, char *out, size_t cap)
{
    uint64_t now = xdc_now_ns();
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < s->n_expected; i++) {
        const member *m = &s->members[i];
        int here = present ? arrived(present, i)
                           : m->joined && (silent_ms < 0 || now - m->last_ns <= (uint64_t)silent_ms * XDC_NS_PER_MS);
        if (here) continue;
        char one[RDZV_MEMBER_MAX + RDZV_STATUS_MAX + 64];
        describe_member(s, m, now, one, sizeof one);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", n ? ", " : "", one);
        n++;
    }
    return n;
}

/* The barrier called `name`; a new one takes a free slot or the slot of one nobody is waiting at. */
static barrier *find_barrier(bserver *s, const char *name)
{
    barrier *idle = NULL;
    for (int i = 0; i < s->n_barriers; i++) {
        if (strcmp(s->barriers[i].name, name) == 0) return &s->barriers[i];
        if (!idle && s->barriers[i].count == 0) idle = &s->barriers[i];
    }
    barrier *b = idle;
    if (s->n_barriers < RDZV_MAX_BARRIERS) {
        b = &s->barriers[s->n_barriers];
        b->arrived = xdc_calloc((size_t)(s->n_expected ? s->n_expected : 1), sizeof *b->arrived);
        if (!b->arrived) return NULL;
        s->n_barriers++;
    }
    if (b)
        snprintf(b->name, sizeof b->name, "%s", name); /* keeps its generation: a released waiter still sees it move */
    return b;
}

/* Take back every arrival `c` made (its wait timed out, or it ended). */
static void withdraw(bserver *s, const conn *c)
{
    for (int i = 0; i < s->n_barriers; i++) {
        barrier *b = &s->barriers[i];
        for (int a = 0; a < b->count;)
            if (b->arrived[a].conn == c) {
                memmove(&b->arrived[a], &b->arrived[a + 1], (size_t)(b->count - a - 1) * sizeof *b->arrived);
                b->count--;
            } else {
                a++;
            }
    }
}

/* 1 while the connection is usable for a parked wait: its posted receive is still pending. A message
 * during a pending request breaks the one-request-at-a-time rule; a failed receive means it left. */
static int conn_alive(conn *c)
{
    int done = 0;
    xdc_diag d = {{0}};
    if (!c->rx_req) return 0;
    xdc_err_t rc = xdc_wan_test(c->rx_req, &done, NULL, NULL, &d);
    if (rc == XDC_OK && !done) return 1;
    c->rx_req = NULL; /* released by the test */
    c->close = 1;
    if (rc == XDC_OK) XDC_WARN(XDC_SUB_ORCH, "rendezvous: %s sent a request while one was pending; closing", c->who);
    return 0;
}

/* Park until pred() holds, the deadline passes or the connection ends; logs who is missing every
 * RDZV_NAG_MS. Returns 1 when pred() holds. */
static int wait_until(conn *c, uint64_t deadline, int (*pred)(bserver *, void *), void *arg, const char *what,
                      const barrier *b)
{
    bserver *s = c->srv;
    uint64_t next_nag = xdc_now_ns() + RDZV_NAG_MS * XDC_NS_PER_MS;
    while (!pred(s, arg)) {
        if (atomic_load(&s->stop) || xdc_deadline_passed(deadline) || !conn_alive(c)) return 0;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += RDZV_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (xdc_now_ns() >= next_nag) {
            char missing[2048];
            if (list_missing(s, b, -1, missing, sizeof missing) > 0)
                XDC_INFO(XDC_SUB_ORCH, "rendezvous: %s is waiting for %s", what, missing);
            next_nag = xdc_now_ns() + RDZV_NAG_MS * XDC_NS_PER_MS;
        }
    }
    return 1;
}

static int key_present(bserver *s, void *arg) { return find_key(s, arg) != NULL; }

typedef struct {
    barrier *b;
    int generation;
} barrier_wait;

static int barrier_done(bserver *s, void *arg)
{
    (void)s;
    barrier_wait *w = arg;
    return w->b->generation != w->generation;
}

/* ---- request handling (under mu) ------------------------------------------------------------------ */

static json_t *refuse(const char *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *refuse(const char *flag, const char *fmt, ...)
{
    char msg[3200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return flag ? json_pack("{s:b, s:b, s:s}", "ok", 0, flag, 1, "error", msg)
                : json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

/* A join: the name must be an expected member whose region and rank the certificate names. */
static json_t *handle_join(conn *c, const rdzv_request *q)
{
    bserver *s = c->srv;
    const xdc_wan_identity *id = &c->id;
    char region[XDC_WAN_NAME_MAX];
    int rank, i = find_member(s, q->member);
    const char *why = NULL;
    if (c->idx >= 0) why = "this connection has joined already";
    else if (split_member(q->member, region, sizeof region, &rank) != 0) why = "the name is not region/host:rank";
    else if (strcmp(region, id->region) != 0 || rank != id->rank)
        why = "the name's region and rank are not the certificate's";
    else if (i < 0) why = "no member of this run has that name";
    if (why) {
        XDC_WARN(XDC_SUB_ORCH, "rendezvous: refused the join of %s as '%s': %s; closing", c->who, q->member, why);
        c->close = 1;
        return refuse("denied", "join as %s refused: %s (certificate %s/%d)", q->member, why, id->region, id->rank);
    }
    member *m = &s->members[i];
    c->idx = i;
    snprintf(c->who, sizeof c->who, "%s", m->name);
    m->joined = 1;
    m->conn = c;
    m->last_ns = xdc_now_ns();
    snprintf(m->status, sizeof m->status, "joined");
    XDC_DEBUG(XDC_SUB_ORCH, "rendezvous: %s joined", m->name);
    pthread_cond_broadcast(&s->cv);
    return json_pack("{s:b}", "ok", 1);
}

static json_t *handle_barrier(conn *c, const rdzv_request *q)
{
    bserver *s = c->srv;
    barrier *b = find_barrier(s, q->key);
    if (!b) return refuse(NULL, "barrier '%s': too many barriers in use", q->key);
    if (q->count != s->n_expected)
        return refuse("denied", "barrier '%s' is for all %d members of the run, not %d", q->key, s->n_expected,
                      q->count);
    if (arrived(b, c->idx)) return refuse("denied", "barrier '%s': %s has arrived already", q->key, c->who);
    barrier_wait w = {b, b->generation};
    b->arrived[b->count++] = (arrival){c->idx, c};
    if (b->count >= q->count) {
        b->count = 0;
        b->generation++;
        pthread_cond_broadcast(&s->cv);
    }
    char what[RDZV_KEY_MAX + 16];
    snprintf(what, sizeof what, "barrier '%s'", q->key);
    if (wait_until(c, xdc_deadline_ms(q->timeout_ms), barrier_done, &w, what, b)) return json_pack("{s:b}", "ok", 1);
    char missing[3000];
    list_missing(s, b, -1, missing, sizeof missing);
    int count = b->count;
    withdraw(s, c); /* so a retry counts once, and a member that left is not counted */
    return refuse("timeout", "barrier '%s': %d of %d arrived; missing: %s", q->key, count, q->count, missing);
}

static json_t *handle(conn *c)
{
    bserver *s = c->srv;
    const rdzv_request *q = &c->req;
    if (q->op == RDZV_OP_JOIN) return handle_join(c, q);
    if (c->idx < 0) {
        XDC_WARN(XDC_SUB_ORCH, "rendezvous: %s sent %s before joining; closing", c->who, ops[q->op].name);
        c->close = 1;
        return refuse("denied", "%s before join", ops[q->op].name);
    }
    member *m = &s->members[c->idx];
    m->last_ns = xdc_now_ns();
    if (q->status[0]) snprintf(m->status, sizeof m->status, "%s", q->status);
    switch (q->op) {
    case RDZV_OP_SET: {
        rdzv_key_class cls = may_write(s, c->idx, q->key);
        if (!cls) {
            XDC_WARN(XDC_SUB_ORCH, "rendezvous: refused %s's write of key '%s': not its key", c->who, q->key);
            return refuse("denied", "key '%s' is not %s's to write", q->key, c->who);
        }
        const kv *k = find_key(s, q->key);
        int mine = k && k->owner == c->idx && k->cls == cls;
        char why[160];
        if (rdzv_quota_check(&s->quota, &m->use, cls, !mine, mine ? strlen(k->value) : 0, strlen(q->value), why,
                             sizeof why) != 0) {
            /* Its own refusal, named with its certificate: nobody else's write fails for it. */
            XDC_WARN(XDC_SUB_ORCH, "rendezvous: refused %s's write of key '%s' (certificate %s/%d): %s", c->who, q->key,
                     c->id.region, c->id.rank, why);
            return refuse("denied", "key '%s': %s is %s", q->key, c->who, why);
        }
        if (store_set(s, q->key, q->value, c->idx, cls) != 0) return refuse(NULL, "no memory for key '%s'", q->key);
        return json_pack("{s:b}", "ok", 1);
    }
    case RDZV_OP_GET: {
        char what[RDZV_KEY_MAX + 16];
        snprintf(what, sizeof what, "get of key '%s'", q->key);
        if (q->timeout_ms != 0) wait_until(c, xdc_deadline_ms(q->timeout_ms), key_present, (void *)q->key, what, NULL);
        kv *k = find_key(s, q->key);
        return k ? json_pack("{s:b, s:s}", "ok", 1, "value", k->value) : refuse("absent", "key not set");
    }
    case RDZV_OP_BARRIER: return handle_barrier(c, q);
    default: return json_pack("{s:b}", "ok", 1); /* heartbeat: last_ns and status above */
    }
}

/* Wait for request r until it completes, `deadline` passes (0: never) or *stop is set (stop NULL: no
 * flag); in the last two cases the request is given up (cancelled) and XDC_ERR_TIMEOUT (diag: `late`) or
 * XDC_ERR_CLOSED returned. A request the engine failed (XDC_ERR_TIMEOUT too when the peer went silent) keeps
 * the engine's reason. *n: a receive's length. */
static xdc_err_t await(xdc_wan_request *r, uint64_t deadline, atomic_int *stop, size_t *n, const char *late,
                       xdc_diag *diag)
{
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(r, RDZV_POLL_MS, n, NULL, diag);
        if (rc != XDC_ERR_AGAIN) return rc; /* released: completed, or failed (TIMEOUT: the peer went silent) */
        if ((stop && atomic_load(stop)) || (deadline && xdc_deadline_passed(deadline))) {
            xdc_wan_request_cancel(r);
            if (!deadline || !xdc_deadline_passed(deadline)) {
                xdc_diag_set(diag, "the rendezvous store is closing");
                return XDC_ERR_CLOSED;
            }
            xdc_diag_set(diag, "%s", late);
            return XDC_ERR_TIMEOUT;
        }
    }
}

/* Send one JSON message and wait (until `deadline`, or *stop) for it to be acknowledged. */
static xdc_err_t send_json(xdc_wan_peer *p, json_t *msg, char *buf, size_t cap, uint64_t deadline, atomic_int *stop,
                           xdc_diag *diag)
{
    size_t n = msg ? json_dumpb(msg, buf, cap, JSON_COMPACT) : 0;
    if (n == 0 || n > cap) {
        xdc_diag_set(diag, "rendezvous message larger than %zu bytes (or no memory for it)", cap);
        return XDC_ERR_RANGE;
    }
    xdc_wan_request *r;
    XDC_CHECK(xdc_wan_isend(p, XDC_WAN_LATENCY, buf, n, 0, n, &r));
    return await(r, deadline, stop, NULL, "a rendezvous message was not taken within the deadline", diag);
}

/* The next request of connection `c` into c->req, waiting until `deadline` (0: forever) or the stop
 * flag; the receive is posted again before returning, so it stays posted while the request is served. */
static xdc_err_t next_request(conn *c, uint64_t deadline, xdc_diag *diag)
{
    size_t n = 0;
    if (!c->rx_req) XDC_CHECK(xdc_wan_irecv(c->peer, XDC_WAN_LATENCY, c->rx, sizeof c->rx, &c->rx_req));
    char late[64];
    snprintf(late, sizeof late, "no join within %d ms", RDZV_JOIN_MS);
    xdc_err_t rc = await(c->rx_req, deadline, &c->srv->stop, &n, late, diag);
    c->rx_req = NULL; /* completed, failed or given up: released either way */
    XDC_CHECK(rc);
    XDC_CHECK(rdzv_request_parse(c->rx, n, &c->req, diag));
    return xdc_wan_irecv(c->peer, XDC_WAN_LATENCY, c->rx, sizeof c->rx, &c->rx_req);
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    bserver *s = c->srv;
    uint64_t join_by = xdc_deadline_ms(RDZV_JOIN_MS);
    xdc_diag d = {{0}};
    /* The stop flag is checked at every turn: a member that sends requests back to back completes a receive
     * at every wait and would otherwise hold the store open (and rdzv_server_destroy with it). */
    while (!atomic_load(&s->stop)) {
        xdc_err_t rc = next_request(c, c->idx < 0 ? join_by : 0, &d);
        if (rc == XDC_OK && atomic_load(&s->stop)) {
            xdc_diag_set(&d, "the rendezvous store is closing");
            break;
        }
        if (rc != XDC_OK) {
            /* A peer that leaves ends with CLOSED; anything else is the member's fault and worth a line. */
            if (rc == XDC_ERR_PROTO || rc == XDC_ERR_RANGE || rc == XDC_ERR_TIMEOUT)
                XDC_WARN(XDC_SUB_ORCH, "rendezvous: closing the connection of %s: %s", c->who, d.msg);
            break;
        }
        pthread_mutex_lock(&s->mu);
        json_t *rep = handle(c);
        pthread_mutex_unlock(&s->mu);
        rc = send_json(c->peer, rep, c->tx, sizeof c->tx, xdc_deadline_ms(RDZV_REPLY_MS), &s->stop, &d);
        json_decref(rep);
        if (rc != XDC_OK || c->close) break;
    }
    /* The member lets go of the connection before its peer closes: rdzv_server_member reads the peer of
     * a member's connection under the lock. */
    pthread_mutex_lock(&s->mu);
    if (c->idx >= 0 && s->members[c->idx].conn == c) {
        member *m = &s->members[c->idx];
        m->conn = NULL;
        if (!atomic_load(&s->stop)) snprintf(m->status, sizeof m->status, "connection lost: %.80s", d.msg);
    }
    pthread_mutex_unlock(&s->mu);
    xdc_wan_request_cancel(c->rx_req); /* NULL: none posted */
    xdc_wan_peer_destroy(c->peer);     /* the engine frees it: every session ever served would stay otherwise */
    pthread_mutex_lock(&s->mu);
    withdraw(s, c);
    c->ended = 1;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Join the threads of ended connections and free their slots. */
static void reclaim(bserver *s)
{
    conn *done[RDZV_MAX_CONNS];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_conns;)
        if (s->conns[i]->ended) {
            done[n++] = s->conns[i];
            s->conns[i] = s->conns[--s->n_conns];
        } else {
            i++;
        }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) {
        pthread_join(done[i]->thread, NULL);
        xdc_free(done[i]);
    }
}

/* Take connection `p` into a slot and start its thread; refused when slots or the identity's share run
 * out. */
static void admit(bserver *s, xdc_wan_peer *p)
{
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    conn *c = xdc_calloc(1, sizeof *c);
    int same = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_conns; i++) {
        const conn *o = s->conns[i];
        same += !o->ended && o->id.rank == id->rank && strcmp(o->id.region, id->region) == 0;
    }
    const char *why = !c                             ? "no memory"
                      : s->n_conns == RDZV_MAX_CONNS ? "every connection slot is in use"
                      : same >= RDZV_CONNS_PER_ID    ? "its certificate holds too many connections"
                                                     : NULL;
    if (!why) {
        c->srv = s;
        c->peer = p;
        c->id = *id;
        c->idx = -1;
        snprintf(c->who, sizeof c->who, "certificate %s/%d (not joined)", id->region, id->rank);
        if (pthread_create(&c->thread, NULL, conn_main, c) == 0) s->conns[s->n_conns++] = c;
        else why = "no thread for it";
    }
    pthread_mutex_unlock(&s->mu);
    if (why) {
        XDC_WARN(XDC_SUB_ORCH, "rendezvous: refused a connection from certificate %s/%d: %s", id->region, id->rank,
                 why);
        xdc_free(c);
        xdc_wan_peer_destroy(p);
    }
}

static void *acceptor_main(void *arg)
{
    bserver *s = arg;
    while (!atomic_load(&s->stop)) {
        xdc_wan_peer *p;
        xdc_diag d = {{0}};
        xdc_err_t rc = xdc_wan_accept(s->lis, 200, &p, &d);
        reclaim(s);
        if (rc == XDC_OK) admit(s, p);
    }
    return NULL;
}

static const rdzv_server_ops builtin_server_ops;

xdc_err_t rdzv_server_create(xdc_wan_engine *eng, const char *host, int port, const char *const *expected,
                             int n_expected, rdzv_server **out, xdc_diag *diag)
{
    *out = NULL;
    if (!host || !*host) {
        xdc_diag_set(diag, "rendezvous server: no address to listen on (give one; 0.0.0.0 for every interface)");
        return XDC_ERR_INVALID;
    }
    if (n_expected < 1 || n_expected > RDZV_MAX_CONNS) {
        xdc_diag_set(diag, "%d members expected; the built-in store takes 1 to %d", n_expected, RDZV_MAX_CONNS);
        return XDC_ERR_RANGE;
    }
    bserver *s = xdc_calloc(1, sizeof *s);
    member *ms = xdc_calloc((size_t)n_expected, sizeof *ms);
    if (!s || !ms) {
        xdc_free(s);
        xdc_free(ms);
        return XDC_ERR_NOMEM;
    }
    s->members = ms;
    s->eng = eng;
    rdzv_quota_init(&s->quota);
    s->start_ns = xdc_now_ns();
    int regions = 0;
    for (int i = 0; i < n_expected; i++) {
        member *m = &ms[i];
        snprintf(m->name, sizeof m->name, "%s", expected[i]);
        if (split_member(m->name, m->region, sizeof m->region, &m->rank) != 0 || find_member(s, m->name) >= 0) {
            xdc_diag_set(diag, "rendezvous server: member '%s' is not region/host:rank or is listed twice", m->name);
            xdc_free(ms);
            xdc_free(s);
            return XDC_ERR_INVALID;
        }
        if (i > 0 && strcmp(ms[i - 1].region, m->region) != 0) regions++;
        m->region_idx = regions;
        s->n_expected = i + 1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    xdc_err_t rc = xdc_wan_listen(eng, host, port, &s->lis, diag);
    if (rc == XDC_OK && pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) {
        xdc_wan_listener_close(s->lis);
        rc = XDC_ERR_NOMEM;
    }
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "rendezvous server on %s:%d", host, port);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        xdc_free(ms);
        xdc_free(s);
        return rc;
    }
    s->base.ops = &builtin_server_ops;
    *out = &s->base;
    return XDC_OK;
}

static int bs_port(const rdzv_server *base) { return xdc_wan_listener_port(((const bserver *)base)->lis); }

static xdc_err_t bs_grant(rdzv_server *base, const char *key, const char *member, xdc_diag *diag)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    int i = find_member(s, member);
    xdc_err_t rc = XDC_ERR_INVALID;
    if (i < 0) xdc_diag_set(diag, "rendezvous: cannot grant '%s' to '%s': not a member of the run", key, member);
    else if (s->n_grants == RDZV_MAX_GRANTS || strlen(key) >= RDZV_KEY_MAX)
        xdc_diag_set(diag, "rendezvous: cannot grant '%s': at most %d grants of keys under %d bytes", key,
                     RDZV_MAX_GRANTS, RDZV_KEY_MAX);
    else {
        grant *g = &s->grants[s->n_grants++];
        snprintf(g->key, sizeof g->key, "%s", key);
        g->prefix = key[0] && key[strlen(key) - 1] == '/';
        g->member = i;
        rc = XDC_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void bs_quota(rdzv_server *base, const rdzv_quota *q)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    s->quota = *q;
    pthread_mutex_unlock(&s->mu);
}

static void bs_set(rdzv_server *base, const char *key, const char *value)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    store_set(s, key, value, -1, RDZV_KEY_DENIED);
    pthread_mutex_unlock(&s->mu);
}

static int bs_get(rdzv_server *base, const char *key, char *value, size_t cap)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    kv *k = find_key(s, key);
    if (k) snprintf(value, cap, "%s", k->value);
    pthread_mutex_unlock(&s->mu);
    return k ? 0 : -1;
}

static int bs_find(rdzv_server *base, const char *prefix, char *key, size_t key_cap, char *value, size_t cap)
{
    bserver *s = (bserver *)base;
    int found = -1;
    size_t n = strlen(prefix);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_keys && found < 0; i++)
        if (strncmp(s->keys[i].key, prefix, n) == 0) {
            snprintf(key, key_cap, "%s", s->keys[i].key);
            snprintf(value, cap, "%s", s->keys[i].value);
            found = 0;
        }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static int bs_connections(rdzv_server *base)
{
    bserver *s = (bserver *)base;
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_conns; i++) n += !s->conns[i]->ended;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int bs_slots(rdzv_server *base)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    int n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int bs_missing(rdzv_server *base, int64_t silent_ms, char *out, size_t cap)
{
    bserver *s = (bserver *)base;
    pthread_mutex_lock(&s->mu);
    int n = list_missing(s, NULL, silent_ms, out, cap);
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int bs_member(rdzv_server *base, int i, rdzv_member_state *out)
{
    bserver *s = (bserver *)base;
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= s->n_expected) return -1;
    pthread_mutex_lock(&s->mu);
    const member *m = &s->members[i];
    snprintf(out->name, sizeof out->name, "%s", m->name);
    out->joined = m->joined;
    out->connected = m->conn != NULL;
    out->ended = m->joined && !m->conn;
    out->silent_s = conn_silence(m);
    out->awake_s = RDZV_SILENT_S;
    describe_member(s, m, xdc_now_ns(), out->detail, sizeof out->detail);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int bs_status(rdzv_server *base, int i, char *out, size_t cap)
{
    bserver *s = (bserver *)base;
    if (i < 0 || i >= s->n_expected) return -1;
    pthread_mutex_lock(&s->mu);
    const member *m = &s->members[i];
    int rc = m->joined && m->status[0] ? 0 : -1;
    if (rc == 0) snprintf(out, cap, "%s", m->status);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void bs_destroy(rdzv_server *base)
{
    bserver *s = (bserver *)base;
    if (!s) return;
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    char who[1024] = "";
    int held = 0;
    for (int i = 0; i < s->n_conns; i++) {
        const conn *c = s->conns[i];
        size_t len = strlen(who);
        if (!c->ended && len < sizeof who) snprintf(who + len, sizeof who - len, "%s%s", held++ ? ", " : "", c->who);
    }
    pthread_mutex_unlock(&s->mu);
    /* Each connection thread sees the flag within a poll period, whatever its member sends. */
    if (held) XDC_INFO(XDC_SUB_ORCH, "rendezvous: closing the store; %d connections still held it: %s", held, who);
    pthread_join(s->acceptor, NULL);
    xdc_wan_listener_close(s->lis);
    /* Every connection thread sees the stop flag within a poll period and closes its own peer. */
    for (int i = 0; i < s->n_conns; i++) {
        pthread_join(s->conns[i]->thread, NULL);
        xdc_free(s->conns[i]);
    }
    for (int i = 0; i < s->n_keys; i++) xdc_free(s->keys[i].value);
    xdc_free(s->keys);
    for (int i = 0; i < s->n_barriers; i++) xdc_free(s->barriers[i].arrived);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    xdc_free(s->members);
    xdc_free(s);
}

static const rdzv_server_ops builtin_server_ops = {.port = bs_port,
                                                   .grant = bs_grant,
                                                   .quota = bs_quota,
                                                   .set = bs_set,
                                                   .get = bs_get,
                                                   .find = bs_find,
                                                   .connections = bs_connections,
                                                   .slots = bs_slots,
                                                   .missing = bs_missing,
                                                   .member = bs_member,
                                                   .status = bs_status,
                                                   .destroy = bs_destroy};

/* ---- client ------------------------------------------------------------------------------------- */

typedef struct bclient {
    rdzv_client base; /* first: the store interface (orch_rdzv_priv.h) */
    xdc_wan_peer *peer;
    int broken; /* a request failed mid-way: its late reply would answer the next one, so stop here */
    char member[RDZV_MEMBER_MAX];
    char rx[RDZV_MSG_MAX], tx[RDZV_MSG_MAX];
    pthread_mutex_t mu; /* one request at a time */
} bclient;

/* Receive one reply, waiting up to timeout_ms (< 0: forever). */
static xdc_err_t recv_reply(xdc_wan_peer *p, char *buf, size_t cap, int64_t timeout_ms, json_t **out, xdc_diag *diag)
{
    xdc_wan_request *r;
    size_t n = 0;
    *out = NULL;
    XDC_CHECK(xdc_wan_irecv(p, XDC_WAN_LATENCY, buf, cap, &r));
    char late[96];
    snprintf(late, sizeof late, "no reply from the rendezvous server within %lld ms", (long long)timeout_ms);
    XDC_CHECK(await(r, timeout_ms < 0 ? 0 : xdc_deadline_ms(timeout_ms), NULL, &n, late, diag));
    json_error_t jerr;
    *out = json_loadb(buf, n, 0, &jerr);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        xdc_diag_set(diag, "rendezvous reply is not a JSON object: %s", jerr.text);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* One request/reply. *rep is the reply object on XDC_OK (caller decrefs). A reply with ok=false comes
 * back as XDC_ERR_UNAVAILABLE (or XDC_ERR_TIMEOUT / XDC_ERR_AGAIN / XDC_ERR_AUTH as flagged) with its text in
 * diag. */
static xdc_err_t call(bclient *c, json_t *req, int64_t timeout_ms, json_t **rep, xdc_diag *diag)
{
    *rep = NULL;
    pthread_mutex_lock(&c->mu);
    xdc_err_t rc = XDC_ERR_CLOSED;
    if (c->broken) {
        json_decref(req);
        xdc_diag_set(diag, "connection unusable after an earlier request failed");
    } else {
        rc = send_json(c->peer, req, c->tx, sizeof c->tx, xdc_deadline_ms(timeout_ms < 0 ? 60000 : timeout_ms + 30000),
                       NULL, diag);
        json_decref(req);
        if (rc == XDC_OK)
            rc = recv_reply(c->peer, c->rx, sizeof c->rx, timeout_ms < 0 ? -1 : timeout_ms + 30000, rep, diag);
        if (rc != XDC_OK) c->broken = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "rendezvous");
        return rc;
    }
    if (json_is_true(json_object_get(*rep, "ok"))) return XDC_OK;
    xdc_diag_set(diag, "rendezvous: %s", json_string_value(json_object_get(*rep, "error")));
    rc = json_is_true(json_object_get(*rep, "timeout"))  ? XDC_ERR_TIMEOUT
         : json_is_true(json_object_get(*rep, "absent")) ? XDC_ERR_AGAIN
         : json_is_true(json_object_get(*rep, "denied")) ? XDC_ERR_AUTH
                                                         : XDC_ERR_UNAVAILABLE;
    json_decref(*rep);
    *rep = NULL;
    return rc;
}

static xdc_err_t call_simple(bclient *c, json_t *req, int64_t timeout_ms, xdc_diag *diag)
{
    json_t *rep;
    if (!req) return XDC_ERR_NOMEM;
    XDC_CHECK(call(c, req, timeout_ms, &rep, diag));
    json_decref(rep);
    return XDC_OK;
}

static const rdzv_client_ops builtin_client_ops;
static void bc_destroy(rdzv_client *base);

xdc_err_t rdzv_client_create(xdc_wan_engine *eng, const char *host, int port, const char *member, int64_t timeout_ms,
                             rdzv_client **out, xdc_diag *diag)
{
    *out = NULL;
    bclient *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    c->base.ops = &builtin_client_ops;
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->member, sizeof c->member, "%s", member);
    xdc_err_t rc = xdc_wan_connect(eng, host, port, RDZV_SERVER_REGION, 0, &c->peer, diag);
    if (rc == XDC_OK) rc = xdc_wan_peer_wait_ready(c->peer, timeout_ms, diag);
    if (rc == XDC_OK) rc = call_simple(c, json_pack("{s:s, s:s}", "op", "join", "member", member), timeout_ms, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "joining the rendezvous at %s:%d as %s", host, port, member);
        bc_destroy(&c->base);
        return rc;
    }
    *out = &c->base;
    return XDC_OK;
}

static void bc_destroy(rdzv_client *base)
{
    bclient *c = (bclient *)base;
    xdc_wan_peer_close(c->peer);
    pthread_mutex_destroy(&c->mu);
    xdc_free(c);
}

static xdc_err_t bc_set(rdzv_client *base, const char *key, const char *value, xdc_diag *diag)
{
    bclient *c = (bclient *)base;
    return call_simple(c, json_pack("{s:s, s:s, s:s}", "op", "set", "key", key, "value", value), 30000, diag);
}

/* timeout_ms 0: answer at once (XDC_ERR_AGAIN when the key is not set). */
static xdc_err_t bc_get(rdzv_client *base, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag)
{
    bclient *c = (bclient *)base;
    json_t *rep, *req = json_pack("{s:s, s:s, s:I}", "op", "get", "key", key, "timeout_ms", (json_int_t)timeout_ms);
    if (!req) return XDC_ERR_NOMEM;
    xdc_err_t rc = call(c, req, timeout_ms, &rep, diag);
    if (rc == XDC_ERR_AGAIN && timeout_ms != 0) {
        xdc_diag_set(diag, "rendezvous: key '%s' was not set within %lld ms", key, (long long)timeout_ms);
        return XDC_ERR_TIMEOUT;
    }
    XDC_CHECK(rc);
    const char *v = json_string_value(json_object_get(rep, "value"));
    if (!v) {
        json_decref(rep);
        xdc_diag_set(diag, "rendezvous: reply to get '%s' has no value", key);
        return XDC_ERR_PROTO;
    }
    snprintf(value, cap, "%s", v);
    json_decref(rep);
    return XDC_OK;
}

static xdc_err_t bc_barrier(rdzv_client *base, const char *name, int count, int64_t timeout_ms, xdc_diag *diag)
{
    bclient *c = (bclient *)base;
    xdc_err_t rc = call_simple(c,
                               json_pack("{s:s, s:s, s:i, s:I}", "op", "barrier", "key", name, "count", count,
                                         "timeout_ms", (json_int_t)timeout_ms),
                               timeout_ms, diag);
    /* Members that never arrived make the run unavailable (EX_UNAVAILABLE), not a transient failure. */
    return rc == XDC_ERR_TIMEOUT ? XDC_ERR_UNAVAILABLE : rc;
}

static xdc_err_t bc_heartbeat(rdzv_client *base, const char *status, xdc_diag *diag)
{
    bclient *c = (bclient *)base;
    return call_simple(c, json_pack("{s:s, s:s}", "op", "heartbeat", "status", status), 10000, diag);
}

static const rdzv_client_ops builtin_client_ops = {
    .set = bc_set, .get = bc_get, .barrier = bc_barrier, .heartbeat = bc_heartbeat, .destroy = bc_destroy};
