/* orch_rdzv.c — rendezvous store server and client (see orch_rdzv.h). The server runs an acceptor
 * thread and one thread per connected member; waits (get, barrier) park on one condition variable with
 * a deadline, so the store is a few hundred lines instead of an event machine. */
#include "orchestrator/control/orch_rdzv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#define RDZV_MAX_KEYS  4096
#define RDZV_MAX_CONNS 1024
#define RDZV_MSG_MAX   (RDZV_VALUE_MAX + 1024) /* bytes of one JSON message */
#define RDZV_NAG_MS    5000                    /* how often a parked wait logs who is missing */

typedef struct {
    char key[256];
    char *value;
} kv;

typedef struct {
    char name[RDZV_MEMBER_MAX];
    int joined;
    uint64_t last_ns;
    char status[128];
} member;

typedef struct {
    char name[128];
    int count; /* arrivals in the current generation */
    int generation;
    char (*arrived)[RDZV_MEMBER_MAX]; /* (RDZV_MAX_CONNS) names in the current generation */
} barrier;

typedef struct conn {
    rdzv_server *srv;
    xdc_wan_peer *peer;
    pthread_t thread;
    int idx;  /* member index, -1 before join */
    int live; /* the connection's thread still serves it (atomic) */
    char rx[RDZV_MSG_MAX], tx[RDZV_MSG_MAX];
} conn;

struct rdzv_server {
    xdc_wan_engine *eng;
    xdc_wan_listener *lis;
    pthread_t acceptor;
    atomic_int stop; /* set by rdzv_server_destroy, read by the acceptor and connection threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv keys[RDZV_MAX_KEYS];
    int n_keys;
    member members[RDZV_MAX_CONNS];
    int n_members, n_expected;
    barrier barriers[16];
    int n_barriers;
    conn *conns[RDZV_MAX_CONNS];
    int n_conns;
    uint64_t start_ns;
};

/* ---- store (under mu) -------------------------------------------------------------------------- */

static kv *find_key(rdzv_server *s, const char *key)
{
    for (int i = 0; i < s->n_keys; i++)
        if (strcmp(s->keys[i].key, key) == 0) return &s->keys[i];
    return NULL;
}

static int store_set(rdzv_server *s, const char *key, const char *value)
{
    kv *k = find_key(s, key);
    if (!k) {
        if (s->n_keys == RDZV_MAX_KEYS) return -1;
        k = &s->keys[s->n_keys++];
        snprintf(k->key, sizeof k->key, "%s", key);
        k->value = NULL;
    }
    char *v = xdc_strdup(value);
    if (!v) return -1;
    xdc_free(k->value);
    k->value = v;
    pthread_cond_broadcast(&s->cv);
    return 0;
}

static int find_member(rdzv_server *s, const char *name)
{
    for (int i = 0; i < s->n_members; i++)
        if (strcmp(s->members[i].name, name) == 0) return i;
    return -1;
}

static void describe_member(const rdzv_server *s, const member *m, uint64_t now, char *out, size_t cap)
{
    if (!m->joined) snprintf(out, cap, "%s (never joined; waited %.1f s)", m->name, (double)(now - s->start_ns) / 1e9);
    else
        snprintf(out, cap, "%s (last heard %.1f s ago: %s)", m->name, (double)(now - m->last_ns) / 1e9,
                 m->status[0] ? m->status : "joined");
}

/* Comma list of expected members not in `present` (a barrier's arrivals) or, with present NULL, of
 * members never joined or silent for silent_ms. */
static int list_missing(rdzv_server *s, const barrier *present, int64_t silent_ms, char *out, size_t cap)
{
    uint64_t now = xdc_now_ns();
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < s->n_members; i++) {
        const member *m = &s->members[i];
        int here;
        if (present) {
            here = 0;
            for (int a = 0; a < present->count && a < RDZV_MAX_CONNS; a++)
                here = here || strcmp(present->arrived[a], m->name) == 0;
            if (i >= s->n_expected && !m->joined) here = 1;
        } else {
            here = m->joined && (silent_ms < 0 || now - m->last_ns <= (uint64_t)silent_ms * XDC_NS_PER_MS);
            if (i >= s->n_expected) here = 1; /* members nobody expected are never "missing" */
        }
        if (here) continue;
        char one[300];
        describe_member(s, m, now, one, sizeof one);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", n ? ", " : "", one);
        n++;
    }
    return n;
}

static barrier *find_barrier(rdzv_server *s, const char *name)
{
    for (int i = 0; i < s->n_barriers; i++)
        if (strcmp(s->barriers[i].name, name) == 0) return &s->barriers[i];
    if (s->n_barriers == (int)(sizeof s->barriers / sizeof s->barriers[0])) return NULL;
    barrier *b = &s->barriers[s->n_barriers];
    memset(b, 0, sizeof *b);
    b->arrived = xdc_calloc(RDZV_MAX_CONNS, sizeof *b->arrived);
    if (!b->arrived) return NULL;
    s->n_barriers++;
    snprintf(b->name, sizeof b->name, "%s", name);
    return b;
}

/* Park until pred() holds or the deadline passes; logs who is missing every RDZV_NAG_MS. */
static int wait_until(rdzv_server *s, uint64_t deadline, int (*pred)(rdzv_server *, void *), void *arg,
                      const char *what, const barrier *b)
{
    uint64_t next_nag = xdc_now_ns() + RDZV_NAG_MS * XDC_NS_PER_MS;
    while (!pred(s, arg)) {
        if (atomic_load(&s->stop) || xdc_deadline_passed(deadline)) return 0;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
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

static int key_present(rdzv_server *s, void *arg) { return find_key(s, arg) != NULL; }

typedef struct {
    barrier *b;
    int generation, count;
} barrier_wait;

static int barrier_done(rdzv_server *s, void *arg)
{
    (void)s;
    barrier_wait *w = arg;
    return w->b->generation != w->generation;
}

/* ---- request handling ---------------------------------------------------------------------------- */

static json_t *handle(conn *c, json_t *req)
{
    rdzv_server *s = c->srv;
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *key = json_string_value(json_object_get(req, "key"));
    json_int_t timeout_ms = json_integer_value(json_object_get(req, "timeout_ms"));
    if (!op) return json_pack("{s:b, s:s}", "ok", 0, "error", "request without op");
    json_t *rep = NULL;
    pthread_mutex_lock(&s->mu);
    if (c->idx >= 0) {
        member *m = &s->members[c->idx];
        m->last_ns = xdc_now_ns();
        const char *status = json_string_value(json_object_get(req, "status"));
        if (status) snprintf(m->status, sizeof m->status, "%s", status);
    }
    if (strcmp(op, "join") == 0) {
        const char *name = json_string_value(json_object_get(req, "member"));
        const xdc_wan_identity *id = xdc_wan_peer_identity(c->peer);
        size_t rl = strlen(id->region);
        if (!name || strlen(name) >= RDZV_MEMBER_MAX) {
            rep = json_pack("{s:b, s:s}", "ok", 0, "error", "join without a member name");
        } else if (strncmp(name, id->region, rl) != 0 || name[rl] != '/') {
            rep = json_pack("{s:b, s:s}", "ok", 0, "error", "member name does not match the certificate's region");
        } else {
            int i = find_member(s, name);
            if (i < 0 && s->n_members < RDZV_MAX_CONNS) {
                i = s->n_members++;
                snprintf(s->members[i].name, sizeof s->members[i].name, "%s", name);
            }
            if (i < 0) {
                rep = json_pack("{s:b, s:s}", "ok", 0, "error", "too many members");
            } else {
                c->idx = i;
                s->members[i].joined = 1;
                s->members[i].last_ns = xdc_now_ns();
                snprintf(s->members[i].status, sizeof s->members[i].status, "joined");
                XDC_DEBUG(XDC_SUB_ORCH, "rendezvous: %s joined", name);
                pthread_cond_broadcast(&s->cv);
                rep = json_pack("{s:b}", "ok", 1);
            }
        }
    } else if (strcmp(op, "set") == 0 && key) {
        const char *value = json_string_value(json_object_get(req, "value"));
        if (!value || strlen(value) >= RDZV_VALUE_MAX || store_set(s, key, value) != 0)
            rep = json_pack("{s:b, s:s}", "ok", 0, "error", "bad value or store full");
        else rep = json_pack("{s:b}", "ok", 1);
    } else if (strcmp(op, "get") == 0 && key) {
        char what[300];
        snprintf(what, sizeof what, "get of key '%s'", key);
        if (timeout_ms != 0) wait_until(s, xdc_deadline_ms(timeout_ms), key_present, (void *)key, what, NULL);
        kv *k = find_key(s, key);
        if (k) rep = json_pack("{s:b, s:s}", "ok", 1, "value", k->value);
        else rep = json_pack("{s:b, s:b, s:s}", "ok", 0, "absent", 1, "error", "key not set");
    } else if (strcmp(op, "barrier") == 0 && key) {
        int count = (int)json_integer_value(json_object_get(req, "count"));
        barrier *b = find_barrier(s, key);
        if (!b || count < 1 || count > RDZV_MAX_CONNS) {
            rep = json_pack("{s:b, s:s}", "ok", 0, "error", "bad barrier");
        } else {
            barrier_wait w = {b, b->generation, count};
            snprintf(b->arrived[b->count++], RDZV_MEMBER_MAX, "%s", c->idx >= 0 ? s->members[c->idx].name : "?");
            if (b->count >= count) {
                b->count = 0;
                b->generation++;
                pthread_cond_broadcast(&s->cv);
            }
            char what[300];
            snprintf(what, sizeof what, "barrier '%s'", key);
            if (wait_until(s, xdc_deadline_ms(timeout_ms), barrier_done, &w, what, b)) {
                rep = json_pack("{s:b}", "ok", 1);
            } else {
                char missing[3000], msg[3200];
                list_missing(s, b, -1, missing, sizeof missing);
                snprintf(msg, sizeof msg, "barrier '%s': %d of %d arrived; missing: %s", key, b->count, count,
                         missing[0] ? missing : "(unexpected members)");
                /* Withdraw our arrival so a retry counts once. */
                for (int a = 0; a < b->count; a++)
                    if (c->idx >= 0 && strcmp(b->arrived[a], s->members[c->idx].name) == 0) {
                        memmove(b->arrived[a], b->arrived[a + 1], (size_t)(b->count - a - 1) * RDZV_MEMBER_MAX);
                        b->count--;
                        break;
                    }
                rep = json_pack("{s:b, s:b, s:s}", "ok", 0, "timeout", 1, "error", msg);
            }
        }
    } else if (strcmp(op, "heartbeat") == 0) {
        rep = json_pack("{s:b}", "ok", 1);
    } else {
        rep = json_pack("{s:b, s:s}", "ok", 0, "error", "unknown op or missing key");
    }
    pthread_mutex_unlock(&s->mu);
    return rep;
}

/* Send one JSON message and wait for it to be acknowledged. */
static xdc_err_t send_json(xdc_wan_peer *p, json_t *msg, char *buf, size_t cap, int64_t timeout_ms, xdc_diag *diag)
{
    size_t n = json_dumpb(msg, buf, cap, JSON_COMPACT);
    if (n == 0 || n > cap) {
        xdc_diag_set(diag, "rendezvous message larger than %zu bytes", cap);
        return XDC_ERR_RANGE;
    }
    xdc_wan_request *r;
    XDC_CHECK(xdc_wan_isend(p, XDC_WAN_LATENCY, buf, n, 0, n, &r));
    return xdc_wan_wait(r, timeout_ms, NULL, NULL, diag);
}

/* Receive one JSON message, waiting up to timeout_ms (< 0: until *stop). The receive stays posted across
 * the short waits, so no message is lost between them. */
static xdc_err_t recv_json(xdc_wan_peer *p, char *buf, size_t cap, int64_t timeout_ms, atomic_int *stop, json_t **out,
                           xdc_diag *diag)
{
    xdc_wan_request *r;
    size_t n = 0;
    *out = NULL;
    XDC_CHECK(xdc_wan_irecv(p, XDC_WAN_LATENCY, buf, cap, &r));
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(r, 200, &n, NULL, diag);
        if (rc == XDC_OK) break;
        if (rc != XDC_ERR_TIMEOUT) return rc;
        if ((stop && atomic_load(stop)) || xdc_deadline_passed(deadline)) {
            xdc_diag_set(diag, "no reply from the rendezvous server within %lld ms", (long long)timeout_ms);
            return XDC_ERR_TIMEOUT; /* the receive stays posted; closing the peer fails it */
        }
    }
    json_error_t jerr;
    *out = json_loadb(buf, n, 0, &jerr);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        xdc_diag_set(diag, "rendezvous message is not a JSON object: %s", jerr.text);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    rdzv_server *s = c->srv;
    __atomic_store_n(&c->live, 1, __ATOMIC_RELEASE);
    while (!atomic_load(&s->stop)) {
        json_t *req;
        xdc_diag d = {{0}};
        xdc_err_t rc = recv_json(c->peer, c->rx, sizeof c->rx, -1, &s->stop, &req, &d);
        if (rc != XDC_OK) {
            pthread_mutex_lock(&s->mu);
            if (c->idx >= 0 && !atomic_load(&s->stop))
                snprintf(s->members[c->idx].status, sizeof s->members[c->idx].status, "connection lost: %s", d.msg);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        json_t *rep = handle(c, req);
        json_decref(req);
        rc = send_json(c->peer, rep, c->tx, sizeof c->tx, 30000, &d);
        json_decref(rep);
        if (rc != XDC_OK) break;
    }
    __atomic_store_n(&c->live, 0, __ATOMIC_RELEASE);
    return NULL;
}

static void *acceptor_main(void *arg)
{
    rdzv_server *s = arg;
    while (!atomic_load(&s->stop)) {
        xdc_wan_peer *p;
        xdc_diag d = {{0}};
        if (xdc_wan_accept(s->lis, 200, &p, &d) != XDC_OK) continue;
        conn *c = xdc_calloc(1, sizeof *c);
        pthread_mutex_lock(&s->mu);
        if (!c || s->n_conns == RDZV_MAX_CONNS) {
            pthread_mutex_unlock(&s->mu);
            xdc_free(c);
            xdc_wan_peer_close(p);
            continue;
        }
        c->srv = s;
        c->peer = p;
        c->idx = -1;
        s->conns[s->n_conns++] = c;
        pthread_mutex_unlock(&s->mu);
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            xdc_wan_peer_close(p); /* no thread to serve it */
            c->peer = NULL;
        }
    }
    return NULL;
}

xdc_err_t rdzv_server_create(xdc_wan_engine *eng, const char *host, int port, const char *const *expected,
                             int n_expected, rdzv_server **out, xdc_diag *diag)
{
    *out = NULL;
    if (n_expected > RDZV_MAX_CONNS) {
        xdc_diag_set(diag, "%d members expected; the built-in store takes at most %d", n_expected, RDZV_MAX_CONNS);
        return XDC_ERR_RANGE;
    }
    rdzv_server *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    s->eng = eng;
    s->start_ns = xdc_now_ns();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < n_expected; i++) snprintf(s->members[i].name, RDZV_MEMBER_MAX, "%s", expected[i]);
    s->n_members = s->n_expected = n_expected;
    xdc_err_t rc = xdc_wan_listen(eng, host, port, &s->lis, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "rendezvous server on %s:%d", host ? host : "*", port);
        xdc_free(s);
        return rc;
    }
    if (pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) {
        xdc_wan_listener_close(s->lis);
        xdc_free(s);
        return XDC_ERR_NOMEM;
    }
    *out = s;
    return XDC_OK;
}

int rdzv_server_port(const rdzv_server *s) { return xdc_wan_listener_port(s->lis); }

void rdzv_server_set(rdzv_server *s, const char *key, const char *value)
{
    pthread_mutex_lock(&s->mu);
    store_set(s, key, value);
    pthread_mutex_unlock(&s->mu);
}

int rdzv_server_get(rdzv_server *s, const char *key, char *value, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    kv *k = find_key(s, key);
    if (k) snprintf(value, cap, "%s", k->value);
    pthread_mutex_unlock(&s->mu);
    return k ? 0 : -1;
}

int rdzv_server_find(rdzv_server *s, const char *prefix, char *key, size_t key_cap, char *value, size_t cap)
{
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

int rdzv_server_connections(rdzv_server *s)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_conns; i++) n += __atomic_load_n(&s->conns[i]->live, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&s->mu);
    return n;
}

int rdzv_server_missing(rdzv_server *s, int64_t silent_ms, char *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    int n = list_missing(s, NULL, silent_ms, out, cap);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void rdzv_server_destroy(rdzv_server *s)
{
    if (!s) return;
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->acceptor, NULL);
    xdc_wan_listener_close(s->lis);
    for (int i = 0; i < s->n_conns; i++) {
        conn *c = s->conns[i];
        if (c->peer) {
            xdc_wan_peer_close(c->peer);
            pthread_join(c->thread, NULL);
        }
        xdc_free(c);
    }
    for (int i = 0; i < s->n_keys; i++) xdc_free(s->keys[i].value);
    for (int i = 0; i < s->n_barriers; i++) xdc_free(s->barriers[i].arrived);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    xdc_free(s);
}

/* ---- client ------------------------------------------------------------------------------------- */

struct rdzv_client {
    xdc_wan_peer *peer;
    int broken; /* a request failed mid-way: its late reply would answer the next one, so stop here */
    char member[RDZV_MEMBER_MAX];
    char rx[RDZV_MSG_MAX], tx[RDZV_MSG_MAX];
    pthread_mutex_t mu; /* one request at a time */
};

/* One request/reply. *rep is the reply object on XDC_OK (caller decrefs). A reply with ok=false comes
 * back as XDC_ERR_UNAVAILABLE (or XDC_ERR_TIMEOUT / XDC_ERR_AGAIN as flagged) with its text in diag. */
static xdc_err_t call(rdzv_client *c, json_t *req, int64_t timeout_ms, json_t **rep, xdc_diag *diag)
{
    *rep = NULL;
    pthread_mutex_lock(&c->mu);
    xdc_err_t rc = XDC_ERR_CLOSED;
    if (c->broken) {
        json_decref(req);
        xdc_diag_set(diag, "connection unusable after an earlier request failed");
    } else {
        rc = send_json(c->peer, req, c->tx, sizeof c->tx, timeout_ms < 0 ? 60000 : timeout_ms + 30000, diag);
        json_decref(req);
        if (rc == XDC_OK)
            rc = recv_json(c->peer, c->rx, sizeof c->rx, timeout_ms < 0 ? -1 : timeout_ms + 30000, NULL, rep, diag);
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
                                                         : XDC_ERR_UNAVAILABLE;
    json_decref(*rep);
    *rep = NULL;
    return rc;
}

static xdc_err_t call_simple(rdzv_client *c, json_t *req, int64_t timeout_ms, xdc_diag *diag)
{
    json_t *rep;
    if (!req) return XDC_ERR_NOMEM;
    XDC_CHECK(call(c, req, timeout_ms, &rep, diag));
    json_decref(rep);
    return XDC_OK;
}

xdc_err_t rdzv_client_create(xdc_wan_engine *eng, const char *host, int port, const char *member, int64_t timeout_ms,
                             rdzv_client **out, xdc_diag *diag)
{
    *out = NULL;
    rdzv_client *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->member, sizeof c->member, "%s", member);
    xdc_err_t rc = xdc_wan_connect(eng, host, port, RDZV_SERVER_REGION, 0, &c->peer, diag);
    if (rc == XDC_OK) rc = xdc_wan_peer_wait_ready(c->peer, timeout_ms, diag);
    if (rc == XDC_OK) rc = call_simple(c, json_pack("{s:s, s:s}", "op", "join", "member", member), timeout_ms, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "joining the rendezvous at %s:%d as %s", host, port, member);
        rdzv_client_destroy(c);
        return rc;
    }
    *out = c;
    return XDC_OK;
}

void rdzv_client_destroy(rdzv_client *c)
{
    if (!c) return;
    xdc_wan_peer_close(c->peer);
    pthread_mutex_destroy(&c->mu);
    xdc_free(c);
}

xdc_err_t rdzv_set(rdzv_client *c, const char *key, const char *value, xdc_diag *diag)
{
    return call_simple(c, json_pack("{s:s, s:s, s:s}", "op", "set", "key", key, "value", value), 30000, diag);
}

static xdc_err_t get_common(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap,
                            xdc_diag *diag)
{
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

xdc_err_t rdzv_get(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag)
{
    return get_common(c, key, timeout_ms < 0 ? INT32_MAX : timeout_ms, value, cap, diag);
}

xdc_err_t rdzv_try_get(rdzv_client *c, const char *key, char *value, size_t cap, xdc_diag *diag)
{
    return get_common(c, key, 0, value, cap, diag);
}

xdc_err_t rdzv_barrier(rdzv_client *c, const char *name, int count, int64_t timeout_ms, xdc_diag *diag)
{
    xdc_err_t rc = call_simple(c,
                               json_pack("{s:s, s:s, s:i, s:I}", "op", "barrier", "key", name, "count", count,
                                         "timeout_ms", (json_int_t)timeout_ms),
                               timeout_ms, diag);
    /* Members that never arrived make the run unavailable (EX_UNAVAILABLE), not a transient failure. */
    return rc == XDC_ERR_TIMEOUT ? XDC_ERR_UNAVAILABLE : rc;
}

xdc_err_t rdzv_heartbeat(rdzv_client *c, const char *status, xdc_diag *diag)
{
    return call_simple(c, json_pack("{s:s, s:s}", "op", "heartbeat", "status", status), 10000, diag);
}
