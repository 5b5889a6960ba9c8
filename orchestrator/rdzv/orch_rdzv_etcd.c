/* orch_rdzv_etcd.c — the rendezvous store on etcd (orch_rdzv.h, orch_rdzv_priv.h): libcurl to etcd's v3
 * JSON gateway (POST /v3/kv/put, /v3/kv/range, /v3/kv/txn, /v3/kv/deleterange, /v3/lease/grant,
 * /v3/lease/keepalive, /v3/lease/revoke, /v3/kv/lease/timetolive; keys and values base64), mutual TLS
 * when configured.
 *
 * Every key of a run is "<prefix>/<key>", so runs share one etcd under different prefixes. Besides the
 * run's own keys (wan/..., failed/..., finished) the store keeps, under "<prefix>/_rdzv/":
 * - joined/<member>: who holds the member's name (rdzv_holder, orch_rdzv_keys.h: its generation, lease ID and
 *   certificate digest), written at each join (no lease: "it joined at some time"). A restarted process of
 *   the member (a higher generation, the same client certificate) revokes the lease of the one it replaces
 *   instead of waiting out its TTL;
 * - alive/<member>: its last heartbeat status, under its lease — gone once the lease expires;
 * - barrier/<name>/<gen>/m/<member>: an arrival, under the arriving member's lease, so a dead member's
 *   arrival goes with its lease; <gen> counts the member's entries into barrier <name> (every member
 *   enters the same barriers in the same order); barrier/<name>/<gen>/open: written, without a lease,
 *   by the first member that saw every arrival, so a member that passes and leaves (its lease revoked)
 *   cannot strand one still looking.
 * A member's lease is kept alive by a thread of its own (its own CURL handle), every third of its TTL,
 * so a member busy computing stays alive and a killed one is gone after the TTL.
 *
 * etcd away: each request is retried with backoff (20 ms doubling to 500 ms) until the operation's
 * deadline, then the operation fails with XDC_ERR_TIMEOUT naming etcd's address, the operation and the
 * last transport error. TLS failures and etcd's refusals are not retried. Waits (get, barrier) poll a
 * range with backoff (10 ms doubling to 250 ms) instead of a watch stream. */
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/rdzv/orch_rdzv_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ETCD_TX_MAX     16384      /* bytes of one request body: a key and a value in base64, and JSON */
#define ETCD_RX_MAX     (4u << 20) /* bytes of the largest reply taken (a range over every member) */
#define ETCD_B64_KEY    (RDZV_KEY_MAX * 2 * 4 / 3 + 8) /* bytes: base64 of a prefixed key, with NUL */
#define ETCD_B64_VALUE  (RDZV_VALUE_MAX * 4 / 3 + 8)   /* bytes: base64 of a value, with NUL */
#define ETCD_TRY_MS     3000                           /* the most one HTTP attempt may take */
#define ETCD_MIN_TRY_MS 500                            /* the least one attempt is given, even at its deadline */
#define ETCD_HOST_MS    2000                           /* deadline of the host's (launcher's) operations */
#define ETCD_BARRIERS   16                             /* barrier names one member tracks generations of */
#define ETCD_INTERNAL   "_rdzv/"

/* One HTTP connection to etcd, reused for every request of its owner (one thread). */
typedef struct {
    CURL *curl;
    struct curl_slist *hdrs;
    char base[300];  /* "http(s)://host:port" */
    char where[300]; /* "etcd at host:port", for messages */
    char prefix[RDZV_KEY_MAX];
    char *rx; /* (rx_cap) bytes: the reply; grows to the largest reply seen, at most ETCD_RX_MAX */
    size_t rx_len, rx_cap;
    int rx_over;          /* the reply passed ETCD_RX_MAX */
    char tx[ETCD_TX_MAX]; /* bytes: the request body */
    char err[CURL_ERROR_SIZE];
} etcd_conn;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void pause_ms(int64_t ms) { poll(NULL, 0, (int)(ms > 1000 ? 1000 : ms)); }

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    etcd_conn *c = arg;
    size_t len = size * n;
    if (c->rx_len + len + 1 > c->rx_cap) {
        size_t cap = c->rx_cap ? c->rx_cap : 4096;
        while (cap < c->rx_len + len + 1) cap *= 2;
        char *p = cap <= ETCD_RX_MAX ? xdc_realloc(c->rx, cap) : NULL;
        if (!p) {
            c->rx_over = 1;
            return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
        }
        c->rx = p;
        c->rx_cap = cap;
    }
    memcpy(c->rx + c->rx_len, data, len);
    c->rx_len += len;
    c->rx[c->rx_len] = '\0';
    return len;
}

static void conn_close(etcd_conn *c)
{
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->hdrs);
    xdc_free(c->rx);
    memset(c, 0, sizeof *c);
}

static xdc_err_t conn_open(etcd_conn *c, const rdzv_target *t, xdc_diag *diag)
{
    memset(c, 0, sizeof *c);
    pthread_once(&curl_once, curl_init_once);
    int tls = t->cacert && *t->cacert;
    snprintf(c->base, sizeof c->base, "%s://%s:%d", tls ? "https" : "http", t->host, t->port);
    snprintf(c->where, sizeof c->where, "etcd at %s:%d", t->host, t->port);
    snprintf(c->prefix, sizeof c->prefix, "%s/", t->prefix);
    c->curl = curl_easy_init();
    c->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (!c->curl || !c->hdrs) {
        conn_close(c);
        return XDC_ERR_NOMEM;
    }
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->err);
    curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, tls ? "https" : "http");
    if (tls) {
        curl_easy_setopt(c->curl, CURLOPT_CAINFO, t->cacert);
        curl_easy_setopt(c->curl, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    }
    if ((t->cert && *t->cert) != (t->key && *t->key) || (!tls && t->cert && *t->cert)) {
        xdc_diag_set(diag, "%s: --etcd-cert and --etcd-key go together, and with --etcd-cacert", c->where);
        conn_close(c);
        return XDC_ERR_CONFIG;
    }
    if (t->cert && *t->cert) {
        curl_easy_setopt(c->curl, CURLOPT_SSLCERT, t->cert);
        curl_easy_setopt(c->curl, CURLOPT_SSLKEY, t->key);
    }
    return XDC_OK;
}

/* 1 when a failed transfer may succeed if tried again (etcd down or slow), 0 when it will not (TLS,
 * a reply too large, a bad URL). */
static int transient(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR ||
           rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE ||
           rc == CURLE_COULDNT_RESOLVE_HOST;
}

/* One request: POST `path` with `body` (decref'd here), retried until `deadline` (xdc_now_ns) while etcd
 * cannot be reached. XDC_OK with *reply (caller decrefs; NULL reply: not wanted). What is named in
 * errors: `what`. */
static xdc_err_t conn_post(etcd_conn *c, const char *path, json_t *body, uint64_t deadline, const char *what,
                           json_t **reply, xdc_diag *diag)
{
    if (reply) *reply = NULL;
    if (!body) return XDC_ERR_NOMEM;
    size_t n = json_dumpb(body, c->tx, sizeof c->tx - 1, JSON_COMPACT);
    json_decref(body);
    if (n == 0 || n >= sizeof c->tx - 1) {
        xdc_diag_set(diag, "%s: %s: request larger than %d bytes", c->where, what, ETCD_TX_MAX);
        return XDC_ERR_RANGE;
    }
    c->tx[n] = '\0';
    char url[400];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, c->tx);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, (long)n);
    int64_t backoff = 20, total = ((int64_t)deadline - (int64_t)xdc_now_ns()) / (int64_t)XDC_NS_PER_MS;
    char last[CURL_ERROR_SIZE + 64] = "";
    for (int tries = 0;; tries++) {
        /* At least one attempt, of at least ETCD_MIN_TRY_MS: a wait's last look may start at its deadline. */
        int64_t left = ((int64_t)deadline - (int64_t)xdc_now_ns()) / (int64_t)XDC_NS_PER_MS;
        if (left <= 0 && tries > 0) break;
        long try_ms = (long)(left < ETCD_MIN_TRY_MS ? ETCD_MIN_TRY_MS : left < ETCD_TRY_MS ? left : ETCD_TRY_MS);
        curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, try_ms);
        curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, try_ms);
        c->rx_len = 0;
        c->rx_over = 0;
        c->err[0] = '\0';
        CURLcode rc = curl_easy_perform(c->curl);
        if (rc == CURLE_OK) {
            long code = 0;
            curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
            json_error_t jerr;
            json_t *rep = json_loadb(c->rx ? c->rx : "", c->rx_len, 0, &jerr);
            if (!rep || !json_is_object(rep)) {
                json_decref(rep);
                xdc_diag_set(diag, "%s: %s: HTTP %ld, reply is not a JSON object", c->where, what, code);
                return XDC_ERR_PROTO;
            }
            if (code == 200) {
                if (reply) *reply = rep;
                else json_decref(rep);
                return XDC_OK;
            }
            const char *msg = json_string_value(json_object_get(rep, "error"));
            xdc_diag_set(diag, "%s refused %s: HTTP %ld: %s", c->where, what, code, msg ? msg : "(no message)");
            json_int_t grpc = json_integer_value(json_object_get(rep, "code"));
            json_decref(rep);
            /* gRPC PermissionDenied (7) or Unauthenticated (16): etcd's auth said no. */
            return code == 401 || code == 403 || grpc == 7 || grpc == 16 ? XDC_ERR_AUTH : XDC_ERR_UNAVAILABLE;
        }
        snprintf(last, sizeof last, "%s", c->err[0] ? c->err : curl_easy_strerror(rc));
        if (c->rx_over) {
            xdc_diag_set(diag, "%s: %s: reply larger than %u bytes", c->where, what, ETCD_RX_MAX);
            return XDC_ERR_RANGE;
        }
        /* TLS 1.3: a server that refuses our certificate says so in an alert, which curl reports from the
         * read or the write that meets it (whichever comes first varies with timing); never transient. */
        int refused = strstr(c->err, "alert") != NULL;
        if (!transient(rc) || refused) {
            xdc_diag_set(diag, "%s: %s: %s", c->where, what, last);
            return refused || rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION ||
                           rc == CURLE_SSL_CERTPROBLEM || rc == CURLE_SSL_CACERT_BADFILE
                       ? XDC_ERR_TLS
                       : XDC_ERR_UNAVAILABLE;
        }
        left = ((int64_t)deadline - (int64_t)xdc_now_ns()) / (int64_t)XDC_NS_PER_MS;
        if (left > 0) pause_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 > 500 ? 500 : backoff * 2;
    }
    xdc_diag_set(diag, "%s did not answer %s within %lld ms (last try: %s)", c->where, what,
                 (long long)(total > 0 ? total : 0), last);
    return XDC_ERR_TIMEOUT;
}

/* ---- keys ---------------------------------------------------------------------------------------- */

static void b64(const char *s, size_t n, char *out)
{
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
}

/* Base64 `in` into out[cap] as text; -1 when it does not decode or does not fit. */
static int unb64(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in);
    if (n % 4 || n / 4 * 3 + 1 > cap) return -1;
    int len = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)in, (int)n);
    if (len < 0) return -1;
    for (size_t i = n; i > 0 && in[i - 1] == '='; i--) len--;
    out[len] = '\0';
    return len;
}

/* "<prefix>/<key>" in base64 into out (ETCD_B64_KEY); with range_end, the end of the range of every key
 * starting with it (its last byte plus one). */
static void full_key(const etcd_conn *c, const char *key, char *out, char *range_end)
{
    char k[RDZV_KEY_MAX * 2];
    int n = snprintf(k, sizeof k, "%s%s", c->prefix, key);
    if (n >= (int)sizeof k) n = (int)sizeof k - 1;
    b64(k, (size_t)n, out);
    if (range_end) {
        k[n - 1]++;
        b64(k, (size_t)n, range_end);
    }
}

static xdc_err_t kv_put(etcd_conn *c, const char *key, const char *value, const char *lease, uint64_t deadline,
                        const char *what, xdc_diag *diag)
{
    char k[ETCD_B64_KEY], v[ETCD_B64_VALUE];
    size_t n = strlen(value);
    if (n >= RDZV_VALUE_MAX || strlen(key) >= RDZV_KEY_MAX) {
        xdc_diag_set(diag, "%s: %s: key or value too long (at most %d and %d bytes)", c->where, what, RDZV_KEY_MAX - 1,
                     RDZV_VALUE_MAX - 1);
        return XDC_ERR_RANGE;
    }
    full_key(c, key, k, NULL);
    b64(value, n, v);
    json_t *body = json_pack("{s:s, s:s}", "key", k, "value", v);
    if (body && lease) json_object_set_new(body, "lease", json_string(lease));
    return conn_post(c, "/v3/kv/put", body, deadline, what, NULL, diag);
}

/* Range over `key` (prefix: every key starting with it). *reply holds "kvs" (absent when none). */
static xdc_err_t kv_range(etcd_conn *c, const char *key, int prefix, int keys_only, int limit, uint64_t deadline,
                          const char *what, json_t **reply, xdc_diag *diag)
{
    char k[ETCD_B64_KEY], end[ETCD_B64_KEY];
    full_key(c, key, k, prefix ? end : NULL);
    json_t *body = json_pack("{s:s}", "key", k);
    if (body && prefix) json_object_set_new(body, "range_end", json_string(end));
    if (body && keys_only) json_object_set_new(body, "keys_only", json_true());
    if (body && limit) json_object_set_new(body, "limit", json_integer(limit));
    return conn_post(c, "/v3/kv/range", body, deadline, what, reply, diag);
}

static xdc_err_t kv_delete(etcd_conn *c, const char *key, int prefix, uint64_t deadline, const char *what,
                           xdc_diag *diag)
{
    char k[ETCD_B64_KEY], end[ETCD_B64_KEY];
    full_key(c, key, k, prefix ? end : NULL);
    json_t *body = json_pack("{s:s}", "key", k);
    if (body && prefix) json_object_set_new(body, "range_end", json_string(end));
    return conn_post(c, "/v3/kv/deleterange", body, deadline, what, NULL, diag);
}

/* Entry i of a range reply: its key without "<prefix>/" and its value, decoded. -1 past the end. */
static int range_entry(const etcd_conn *c, json_t *rep, size_t i, char *key, size_t key_cap, char *value, size_t cap)
{
    json_t *e = json_array_get(json_object_get(rep, "kvs"), i);
    if (!e) return -1;
    char k[RDZV_KEY_MAX * 2];
    const char *kb = json_string_value(json_object_get(e, "key")), *vb = json_string_value(json_object_get(e, "value"));
    if (!kb || unb64(kb, k, sizeof k) < 0) return -1;
    size_t pl = strlen(c->prefix);
    if (key) snprintf(key, key_cap, "%s", strncmp(k, c->prefix, pl) == 0 ? k + pl : k);
    if (value) {
        value[0] = '\0';
        if (vb && unb64(vb, value, cap) < 0) return -1;
    }
    return 0;
}

/* Compare-and-set: put `key` = value under `lease` only when the key does not exist (a transaction on
 * its create revision being 0). *done says whether it was put. */
static xdc_err_t kv_create(etcd_conn *c, const char *key, const char *value, const char *lease, uint64_t deadline,
                           const char *what, int *done, xdc_diag *diag)
{
    char k[ETCD_B64_KEY], v[ETCD_B64_VALUE];
    *done = 0;
    if (strlen(value) >= RDZV_VALUE_MAX) return XDC_ERR_RANGE;
    full_key(c, key, k, NULL);
    b64(value, strlen(value), v);
    json_t *put = json_pack("{s:s, s:s}", "key", k, "value", v), *rep = NULL;
    if (put && lease) json_object_set_new(put, "lease", json_string(lease));
    json_t *body = put ? json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:o}]}", "compare", "key", k, "target", "CREATE",
                                   "result", "EQUAL", "create_revision", "0", "success", "request_put", put)
                       : NULL;
    XDC_CHECK(conn_post(c, "/v3/kv/txn", body, deadline, what, &rep, diag));
    *done = json_is_true(json_object_get(rep, "succeeded"));
    json_decref(rep);
    return XDC_OK;
}

/* ---- leases ------------------------------------------------------------------------------------- */

/* A lease and the thread that keeps it alive every third of its TTL on a connection of its own, so its
 * owner (a member, or the decider's holder) stays alive however long it computes, and is gone TTL after it
 * stops (killed, or stopped with SIGSTOP: the thread stops with it).
 * A member's lease is renewed when it ran out while its process was stopped longer than the TTL and then
 * continued: the thread, first to run again, finds it gone, grants a new one and calls renew(renew_ctx, conn,
 * id) to hold the member's name under it again (0: held; else the new lease is revoked and nothing more is
 * tried: a later process of the member holds the name). Without it the process ran on with its liveness
 * gone for good, and the round decider dropped its region at its next exchange ("connection ended"). */
typedef struct etcd_lease {
    etcd_conn conn;
    char id[32]; /* lease ID, decimal as etcd writes it; "" before the grant; under mu once started */
    int ttl_s;
    const char *owner; /* who holds it, for messages */
    pthread_t th;
    int started, stop; /* stop under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    xdc_err_t (*renew)(void *ctx, etcd_conn *conn, const char *id, xdc_diag *diag); /* under mu; NULL: never */
    void *renew_ctx;
} etcd_lease;

/* The lease's ID now (it changes when a member's lease is renewed) into out[sizeof l->id]. */
static void lease_id(etcd_lease *l, char *out)
{
    pthread_mutex_lock(&l->mu);
    memcpy(out, l->id, sizeof l->id);
    pthread_mutex_unlock(&l->mu);
}

/* Grant a lease of l->ttl_s on l's connection: its ID into id[sizeof l->id]. */
static xdc_err_t lease_grant(etcd_lease *l, uint64_t deadline, char *id, xdc_diag *diag)
{
    json_t *rep = NULL;
    id[0] = '\0';
    XDC_CHECK(conn_post(&l->conn, "/v3/lease/grant", json_pack("{s:i}", "TTL", l->ttl_s), deadline, "lease grant", &rep,
                        diag));
    const char *got = json_string_value(json_object_get(rep, "ID"));
    if (got) snprintf(id, sizeof l->id, "%s", got);
    json_decref(rep);
    if (id[0]) return XDC_OK;
    xdc_diag_set(diag, "%s: lease grant: no lease ID in the reply", l->conn.where);
    return XDC_ERR_PROTO;
}

/* The member's lease ran out (the keep-alive thread, its owner continued after a stop longer than the TTL): a new
 * one, under which renew holds the name again. */
static void lease_renew(etcd_lease *l)
{
    char id[sizeof l->id], old[sizeof l->id];
    xdc_diag d = {{0}};
    uint64_t deadline = xdc_deadline_ms((int64_t)l->ttl_s * 1000 / 3);
    xdc_err_t rc = lease_grant(l, deadline, id, &d);
    pthread_mutex_lock(&l->mu);
    if (rc == XDC_OK) rc = l->renew(l->renew_ctx, &l->conn, id, &d);
    memcpy(old, l->id, sizeof old);
    if (rc == XDC_OK) memcpy(l->id, id, sizeof l->id);
    else l->renew = NULL;
    pthread_mutex_unlock(&l->mu);
    if (rc == XDC_OK) {
        XDC_WARN(XDC_SUB_ORCH,
                 "rendezvous: %s's lease %s ran out while it was stopped or cut off; it holds its name again under "
                 "lease %s",
                 l->owner, old, id);
        return;
    }
    XDC_WARN(XDC_SUB_ORCH, "rendezvous: %s's lease %s ran out and was not renewed: %s", l->owner, old, d.msg);
    if (id[0])
        conn_post(&l->conn, "/v3/lease/revoke", json_pack("{s:s}", "ID", id), deadline, "lease revoke", NULL, &d);
}

static void *keepalive_main(void *arg)
{
    etcd_lease *l = arg;
    int failing = 0;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (int64_t)l->ttl_s * 1000000000 / 3;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        if (l->stop) break;
        pthread_mutex_unlock(&l->mu);
        xdc_diag d = {{0}};
        json_t *rep = NULL;
        char id[sizeof l->id];
        lease_id(l, id);
        xdc_err_t rc = conn_post(&l->conn, "/v3/lease/keepalive", json_pack("{s:s}", "ID", id),
                                 xdc_deadline_ms((int64_t)l->ttl_s * 1000 / 3), "lease keep-alive", &rep, &d);
        const char *ttl = json_string_value(json_object_get(json_object_get(rep, "result"), "TTL"));
        int expired = rc == XDC_OK && (!ttl || atoi(ttl) <= 0);
        json_decref(rep);
        pthread_mutex_lock(&l->mu);
        int renew = expired && l->renew; /* set once the member joined (rdzv_etcd_client_create) */
        pthread_mutex_unlock(&l->mu);
        if (renew) {
            lease_renew(l);
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if (expired) {
            rc = XDC_ERR_UNAVAILABLE;
            xdc_diag_set(&d, "%s: lease %s of %s expired", l->conn.where, id, l->owner);
        }
        if (rc != XDC_OK && !failing) XDC_WARN(XDC_SUB_ORCH, "rendezvous: %s", d.msg);
        else if (rc == XDC_OK && failing) XDC_INFO(XDC_SUB_ORCH, "rendezvous: %s answers again", l->conn.where);
        failing = rc != XDC_OK;
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Grant a lease of ttl_s for `owner` (a string that outlives the lease) and keep it alive from now on. */
static xdc_err_t lease_start(etcd_lease *l, const rdzv_target *t, int ttl_s, const char *owner, uint64_t deadline,
                             xdc_diag *diag)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->ttl_s = ttl_s;
    l->owner = owner;
    XDC_CHECK(conn_open(&l->conn, t, diag));
    XDC_CHECK(lease_grant(l, deadline, l->id, diag));
    if (pthread_create(&l->th, NULL, keepalive_main, l) != 0) return XDC_ERR_NOMEM;
    l->started = 1;
    return XDC_OK;
}

/* Stop keeping the lease alive and, with `revoke`, revoke it (its keys go at once; without, they go when it
 * ends); a lease_start that failed half way too. */
static void lease_end(etcd_lease *l, int revoke)
{
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->th, NULL);
    }
    xdc_diag d = {{0}};
    if (revoke && l->id[0] &&
        conn_post(&l->conn, "/v3/lease/revoke", json_pack("{s:s}", "ID", l->id), xdc_deadline_ms(1000), "lease revoke",
                  NULL, &d) != XDC_OK)
        XDC_DEBUG(XDC_SUB_ORCH, "rendezvous: %s", d.msg);
    conn_close(&l->conn);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    memset(l, 0, sizeof *l);
}

static void lease_stop(etcd_lease *l) { lease_end(l, 1); }

/* ---- member -------------------------------------------------------------------------------------- */

typedef struct {
    char name[RDZV_KEY_MAX];
    int gen;
} barrier_gen;

/* A key this member wrote, as its quota counts it. */
typedef struct {
    char *key;
    rdzv_key_class cls;
    size_t bytes; /* of its value */
} written_key;

typedef struct eclient {
    rdzv_client base; /* first: the store interface */
    etcd_conn conn;   /* the member's requests, one at a time (op_mu), as the built-in client's */
    pthread_mutex_t op_mu;
    char member[RDZV_MEMBER_MAX];
    etcd_lease lease;   /* the member's liveness */
    rdzv_holder holder; /* its claim to the name (joined/<member>), its lease's ID as renewed */
    int64_t op_ms;      /* deadline of set, heartbeat and one-look get */
    barrier_gen gens[ETCD_BARRIERS];
    int n_gens;
    /* No store host sees an etcd member's writes: its own client holds it to its quota (orch_rdzv_quota.h).
     * written: (n_written of cap_written) the keys it holds, at most the quota's sum. */
    rdzv_quota quota;
    rdzv_usage use;
    written_key *written;
    int n_written, cap_written;
} eclient;

static void ec_destroy(rdzv_client *base)
{
    eclient *c = (eclient *)base;
    lease_stop(&c->lease); /* a clean leave: the member's alive and arrival keys go at once */
    conn_close(&c->conn);
    for (int i = 0; i < c->n_written; i++) xdc_free(c->written[i].key);
    xdc_free(c->written);
    pthread_mutex_destroy(&c->op_mu);
    xdc_free(c);
}

/* The entry of `key` among the keys we wrote, or a new one (key NULL) when it is new and memory allows;
 * NULL without memory. */
static written_key *written_entry(eclient *c, const char *key)
{
    for (int i = 0; i < c->n_written; i++)
        if (strcmp(c->written[i].key, key) == 0) return &c->written[i];
    if (c->n_written == c->cap_written) {
        int cap = c->cap_written ? 2 * c->cap_written : 16;
        written_key *w = xdc_realloc(c->written, (size_t)cap * sizeof *w);
        if (!w) return NULL;
        c->written = w;
        c->cap_written = cap;
    }
    written_key *w = &c->written[c->n_written];
    *w = (written_key){0};
    return w;
}

static xdc_err_t set_unlocked(rdzv_client *base, const char *key, const char *value, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    char what[RDZV_KEY_MAX + 16], why[160];
    snprintf(what, sizeof what, "set '%s'", key);
    /* The built-in store's quota check and message, on our side: etcd bounds only its whole database. */
    rdzv_key_class cls = rdzv_quota_classify(c->member, key);
    written_key *w = written_entry(c, key);
    if (!w) return XDC_ERR_NOMEM;
    int mine = w->key != NULL; /* its class is the key's own: classify looks at the key alone */
    size_t len = strlen(value);
    if (rdzv_quota_check(&c->quota, &c->use, cls, !mine, mine ? w->bytes : 0, len, why, sizeof why) != 0) {
        XDC_WARN(XDC_SUB_ORCH, "rendezvous: refused %s's write of key '%s' on its own side (etcd): %s", c->member, key,
                 why);
        xdc_diag_set(diag, "rendezvous: key '%s': %s is %s", key, c->member, why);
        return XDC_ERR_AUTH;
    }
    XDC_CHECK(kv_put(&c->conn, key, value, NULL, xdc_deadline_ms(c->op_ms), what, diag));
    if (w->key) {
        rdzv_quota_charge(&c->use, w->cls, -1, w->bytes);
    } else {
        w->key = xdc_strdup(key);
        if (!w->key) return XDC_OK; /* written, uncounted: the quota errs towards the member */
        c->n_written++;
    }
    rdzv_quota_charge(&c->use, cls, +1, len);
    w->cls = cls;
    w->bytes = len;
    return XDC_OK;
}

static xdc_err_t get_unlocked(rdzv_client *base, const char *key, int64_t timeout_ms, char *value, size_t cap,
                              xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    uint64_t deadline = xdc_deadline_ms(timeout_ms > 0 ? timeout_ms : c->op_ms);
    char what[RDZV_KEY_MAX + 16];
    snprintf(what, sizeof what, "get '%s'", key);
    for (int64_t backoff = 10;; backoff = backoff * 2 > 250 ? 250 : backoff * 2) {
        json_t *rep;
        XDC_CHECK(kv_range(&c->conn, key, 0, 0, 1, deadline, what, &rep, diag));
        int found = range_entry(&c->conn, rep, 0, NULL, 0, value, cap) == 0;
        json_decref(rep);
        if (found) return XDC_OK;
        if (timeout_ms == 0) {
            xdc_diag_set(diag, "rendezvous: key '%s' is not set", key);
            return XDC_ERR_AGAIN;
        }
        if (xdc_deadline_passed(deadline)) break;
        pause_ms(backoff);
    }
    xdc_diag_set(diag, "rendezvous: key '%s' was not set within %lld ms", key, (long long)timeout_ms);
    return XDC_ERR_TIMEOUT;
}

static xdc_err_t heartbeat_unlocked(rdzv_client *base, const char *status, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    char key[RDZV_KEY_MAX];
    snprintf(key, sizeof key, ETCD_INTERNAL "alive/%s", c->member);
    char id[sizeof c->lease.id];
    lease_id(&c->lease, id);
    return kv_put(&c->conn, key, status, id, xdc_deadline_ms(c->op_ms), "heartbeat", diag);
}

/* This member's next generation of barrier `name`; -1 when ETCD_BARRIERS names are in use. */
static int next_gen(eclient *c, const char *name)
{
    for (int i = 0; i < c->n_gens; i++)
        if (strcmp(c->gens[i].name, name) == 0) return ++c->gens[i].gen;
    if (c->n_gens == ETCD_BARRIERS) return -1;
    snprintf(c->gens[c->n_gens].name, sizeof c->gens[c->n_gens].name, "%s", name);
    return c->gens[c->n_gens++].gen = 0;
}

static xdc_err_t barrier_unlocked(rdzv_client *base, const char *name, int count, int64_t timeout_ms, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    int gen = next_gen(c, name);
    if (gen < 0) {
        xdc_diag_set(diag, "rendezvous: more than %d barrier names", ETCD_BARRIERS);
        return XDC_ERR_RANGE;
    }
    char dir[RDZV_KEY_MAX], key[RDZV_KEY_MAX + RDZV_MEMBER_MAX], what[RDZV_KEY_MAX + 16];
    snprintf(dir, sizeof dir, ETCD_INTERNAL "barrier/%s/%d/", name, gen);
    snprintf(key, sizeof key, "%sm/%s", dir, c->member);
    snprintf(what, sizeof what, "barrier '%s'", name);
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    char id[sizeof c->lease.id];
    lease_id(&c->lease, id);
    XDC_CHECK(kv_put(&c->conn, key, "1", id, deadline, what, diag));
    int here = 0;
    char arrived[1024] = "";
    for (int64_t backoff = 10;; backoff = backoff * 2 > 250 ? 250 : backoff * 2) {
        json_t *rep;
        XDC_CHECK(kv_range(&c->conn, dir, 1, 1, 0, deadline, what, &rep, diag));
        int open = 0;
        size_t len = 0, dl = strlen(dir);
        here = 0;
        arrived[0] = '\0';
        char k[RDZV_KEY_MAX * 2];
        for (size_t i = 0; range_entry(&c->conn, rep, i, k, sizeof k, NULL, 0) == 0; i++) {
            const char *rest = strlen(k) > dl ? k + dl : "";
            if (strcmp(rest, "open") == 0) open = 1;
            else if (strncmp(rest, "m/", 2) == 0) {
                here++;
                if (len < sizeof arrived)
                    len += (size_t)snprintf(arrived + len, sizeof arrived - len, "%s%s", here > 1 ? ", " : "",
                                            rest + 2);
            }
        }
        json_decref(rep);
        if (open || here >= count) {
            snprintf(key, sizeof key, "%sopen", dir);
            return open ? XDC_OK : kv_put(&c->conn, key, "1", NULL, deadline, what, diag);
        }
        if (xdc_deadline_passed(deadline)) break;
        pause_ms(backoff);
    }
    /* Withdraw our arrival, as the built-in store does for a wait that timed out. */
    xdc_diag ignore;
    kv_delete(&c->conn, key, 0, xdc_deadline_ms(1000), what, &ignore);
    xdc_diag_set(diag, "rendezvous: barrier '%s': %d of %d members arrived within %lld ms (arrived: %s)", name, here,
                 count, (long long)timeout_ms, arrived);
    return XDC_ERR_UNAVAILABLE;
}

/* The ops: one request at a time per client (op_mu), as the built-in client. */
static xdc_err_t ec_set(rdzv_client *base, const char *key, const char *value, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    pthread_mutex_lock(&c->op_mu);
    xdc_err_t rc = set_unlocked(base, key, value, diag);
    pthread_mutex_unlock(&c->op_mu);
    return rc;
}

static xdc_err_t ec_get(rdzv_client *base, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    pthread_mutex_lock(&c->op_mu);
    xdc_err_t rc = get_unlocked(base, key, timeout_ms, value, cap, diag);
    pthread_mutex_unlock(&c->op_mu);
    return rc;
}

static xdc_err_t ec_heartbeat(rdzv_client *base, const char *status, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    pthread_mutex_lock(&c->op_mu);
    xdc_err_t rc = heartbeat_unlocked(base, status, diag);
    pthread_mutex_unlock(&c->op_mu);
    return rc;
}

static xdc_err_t ec_barrier(rdzv_client *base, const char *name, int count, int64_t timeout_ms, xdc_diag *diag)
{
    eclient *c = (eclient *)base;
    pthread_mutex_lock(&c->op_mu);
    xdc_err_t rc = barrier_unlocked(base, name, count, timeout_ms, diag);
    pthread_mutex_unlock(&c->op_mu);
    return rc;
}

static void ec_quota(rdzv_client *base, const rdzv_quota *q)
{
    eclient *c = (eclient *)base;
    pthread_mutex_lock(&c->op_mu);
    c->quota = *q;
    pthread_mutex_unlock(&c->op_mu);
}

static const rdzv_client_ops etcd_client_ops = {.set = ec_set,
                                                .get = ec_get,
                                                .barrier = ec_barrier,
                                                .heartbeat = ec_heartbeat,
                                                .quota = ec_quota,
                                                .destroy = ec_destroy};

/* This process's claim to its member's name: its generation (XDC_RDZV_GENERATION, set by `xdc launch` on a
 * region's restarted agents; 0 when unset), its lease, and the SHA-256 of its client certificate file ('-'
 * without one; one that cannot be read is TLS set-up's to name). */
static void holder_of(const eclient *c, const rdzv_target *t, rdzv_holder *h)
{
    const char *gen = getenv("XDC_RDZV_GENERATION");
    h->generation = gen ? strtoll(gen, NULL, 10) : 0;
    snprintf(h->lease, sizeof h->lease, "%s", c->lease.id);
    snprintf(h->cert, sizeof h->cert, "-");
    FILE *f = t->cert ? fopen(t->cert, "rb") : NULL;
    if (!f) return;
    enum { PEM_MAX = 64 * 1024 }; /* bytes: a certificate chain's PEM */
    unsigned char *pem = xdc_malloc(PEM_MAX), md[EVP_MAX_MD_SIZE];
    size_t n = pem ? fread(pem, 1, PEM_MAX, f) : 0;
    fclose(f);
    unsigned int len = 0;
    int ok = pem && EVP_Digest(pem, n, md, &len, EVP_sha256(), NULL);
    xdc_free(pem);
    if (!ok) return;
    for (unsigned int i = 0; i < len && 2 * i + 2 < sizeof h->cert; i++) sprintf(h->cert + 2 * i, "%02x", md[i]);
}

/* The member's name is held alive by another lease: if the holder's record names an earlier generation with
 * the same certificate (a killed process of this member, which would hold the name until its TTL ran out),
 * revoke its lease; *took says so. Anything else (another certificate, not an earlier generation, no record)
 * is left to the lease. */
static xdc_err_t take_over(eclient *c, const rdzv_holder *me, uint64_t deadline, int *took, xdc_diag *diag)
{
    char key[RDZV_KEY_MAX], val[sizeof(rdzv_holder_text) * 2];
    json_t *rep = NULL;
    rdzv_holder prev;
    *took = 0;
    snprintf(key, sizeof key, ETCD_INTERNAL "joined/%s", c->member);
    XDC_CHECK(kv_range(&c->conn, key, 0, 0, 1, deadline, "join", &rep, diag));
    int found = range_entry(&c->conn, rep, 0, NULL, 0, val, sizeof val) == 0;
    json_decref(rep);
    if (!found || rdzv_val_holder_parse(val, &prev) != XDC_OK || strcmp(prev.cert, me->cert) != 0 ||
        prev.generation >= me->generation)
        return XDC_OK;
    xdc_diag d = {{0}}; /* refused: the lease ended meanwhile, and the name is free all the same */
    if (conn_post(&c->conn, "/v3/lease/revoke", json_pack("{s:s}", "ID", prev.lease), deadline, "lease revoke", NULL,
                  &d) != XDC_OK)
        XDC_DEBUG(XDC_SUB_ORCH, "rendezvous: %s", d.msg);
    XDC_WARN(XDC_SUB_ORCH,
             "rendezvous: member %s, generation %lld, takes its name over from generation %lld (the same "
             "certificate): lease %s revoked",
             c->member, me->generation, prev.generation, prev.lease);
    *took = 1;
    return XDC_OK;
}

/* The member's lease ran out while its process was stopped, and `id` is a new one (etcd_lease's renew, on the lease's
 * thread and connection): the name is ours again when no other process took it meanwhile (a later generation of
 * the member, restarted while this one was stopped, created alive/<member> under its own lease). */
static xdc_err_t member_renew(void *ctx, etcd_conn *conn, const char *id, xdc_diag *diag)
{
    eclient *c = ctx;
    char key[RDZV_KEY_MAX];
    int done = 0;
    uint64_t deadline = xdc_deadline_ms((int64_t)c->lease.ttl_s * 1000 / 3);
    snprintf(key, sizeof key, ETCD_INTERNAL "alive/%s", c->member);
    XDC_CHECK(kv_create(conn, key, "renewed", id, deadline, "renewing the lease", &done, diag));
    if (!done) {
        xdc_diag_set(diag, "another process holds member %s alive now", c->member);
        return XDC_ERR_UNAVAILABLE;
    }
    snprintf(c->holder.lease, sizeof c->holder.lease, "%s", id);
    snprintf(key, sizeof key, ETCD_INTERNAL "joined/%s", c->member);
    return kv_put(conn, key, rdzv_val_holder(&c->holder).s, NULL, deadline, "renewing the lease", diag);
}

xdc_err_t rdzv_etcd_client_create(const rdzv_target *t, const char *member, int64_t timeout_ms, rdzv_client **out,
                                  xdc_diag *diag)
{
    *out = NULL;
    eclient *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    c->base.ops = &etcd_client_ops;
    pthread_mutex_init(&c->op_mu, NULL);
    snprintf(c->member, sizeof c->member, "%s", member);
    rdzv_quota_init(&c->quota);
    c->op_ms = timeout_ms > 0 ? timeout_ms : 30000;
    uint64_t deadline = xdc_deadline_ms(c->op_ms);
    char key[RDZV_KEY_MAX];
    xdc_err_t rc = conn_open(&c->conn, t, diag);
    /* The lease is kept alive from now on: the wait below can outlast its TTL (a restarted member waits up to
     * its old process's TTL), and a lease that ran out meanwhile would take the new alive key with it. */
    if (rc == XDC_OK)
        rc = lease_start(&c->lease, t, t->lease_ttl_s > 0 ? t->lease_ttl_s : RDZV_ETCD_TTL_S, c->member, deadline,
                         diag);
    /* A member joins once: while another process holds `member` alive (its lease), it takes the name over if
     * it is a later generation of the same member (take_over), else waits for that lease to end, until the
     * deadline. */
    rdzv_holder me;
    holder_of(c, t, &me);
    snprintf(key, sizeof key, ETCD_INTERNAL "alive/%s", member);
    for (int done = 0, tried = 0, backoff = 10; rc == XDC_OK && !done;
         backoff = backoff * 2 > 250 ? 250 : backoff * 2) {
        rc = kv_create(&c->conn, key, "joined", c->lease.id, deadline, "join", &done, diag);
        if (rc == XDC_OK && !done && !tried++) {
            int took = 0;
            rc = take_over(c, &me, deadline, &took, diag);
            if (took) continue;
        }
        if (rc == XDC_OK && !done && xdc_deadline_passed(deadline)) {
            xdc_diag_set(diag, "another process holds member %s alive in %s (its lease has not ended)", member,
                         c->conn.where);
            rc = XDC_ERR_UNAVAILABLE;
        } else if (rc == XDC_OK && !done) {
            pause_ms(backoff);
        }
    }
    snprintf(key, sizeof key, ETCD_INTERNAL "joined/%s", member);
    if (rc == XDC_OK) rc = kv_put(&c->conn, key, rdzv_val_holder(&me).s, NULL, deadline, "join", diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "joining the rendezvous %s as %s", t->url, member);
        ec_destroy(&c->base);
        return rc;
    }
    c->holder = me;
    pthread_mutex_lock(&c->lease.mu);
    c->lease.renew = member_renew, c->lease.renew_ctx = c;
    pthread_mutex_unlock(&c->lease.mu);
    *out = &c->base;
    return XDC_OK;
}

/* ---- host ---------------------------------------------------------------------------------------- */

typedef struct eserver {
    rdzv_server base; /* first: the store interface */
    etcd_conn conn;
    rdzv_target t;
    int port;
    char (*names)[RDZV_MEMBER_MAX]; /* (n) the run's members */
    int n;
    int failing; /* the last host request failed (warn once per streak) */
    /* The role (rdzv_server_role): held while `held`; every write is then fenced on the role key's lease. */
    etcd_lease role_lease;
    int held;
    int fenced; /* writes go fenced on role_lease: from taking the role until standing for it again (a holder
                 * refused once stays fenced, so nothing it decided in that tick goes through) */
    char role_key[RDZV_KEY_MAX], state_key[RDZV_KEY_MAX], holder[RDZV_MEMBER_MAX];
    rdzv_role_state_fn state;
    void *state_ctx;
} eserver;

/* A host request's result: a failure is logged once per streak, and reads as "not there". */
static int host_ok(eserver *s, xdc_err_t rc, const xdc_diag *d)
{
    if (rc != XDC_OK && !s->failing) XDC_WARN(XDC_SUB_ORCH, "rendezvous: %s", d->msg);
    s->failing = rc != XDC_OK;
    return rc == XDC_OK;
}

static int es_port(const rdzv_server *base) { return ((const eserver *)base)->port; }

static xdc_err_t es_grant(rdzv_server *base, const char *key, const char *member, xdc_diag *diag)
{
    (void)base, (void)key, (void)member, (void)diag;
    return XDC_OK; /* etcd's auth decides who writes (docs/security.md) */
}

/* First key under `key` (prefix) or `key` itself into k/value; 0 when found. */
static int host_first(eserver *s, const char *key, int prefix, char *k, size_t k_cap, char *value, size_t cap)
{
    xdc_diag d = {{0}};
    json_t *rep = NULL;
    if (!host_ok(s, kv_range(&s->conn, key, prefix, 0, 1, xdc_deadline_ms(ETCD_HOST_MS), "get", &rep, &d), &d))
        return -1;
    int rc = range_entry(&s->conn, rep, 0, k, k_cap, value, cap);
    json_decref(rep);
    return rc;
}

/* A write of the role's holder: one transaction that puts key = value, and the role's state with it, only
 * while the role key is still under this holder's lease. A holder deposed while it was stopped or cut off
 * (its lease expired, another process took the role) writes nothing: etcd refuses, and it holds the role
 * no more. */
static void role_put(eserver *s, const char *key, const char *value)
{
    char rk[ETCD_B64_KEY], k[ETCD_B64_KEY], v[ETCD_B64_VALUE], state[RDZV_VALUE_MAX] = "";
    if (strlen(value) >= RDZV_VALUE_MAX) return;
    full_key(&s->conn, s->role_key, rk, NULL);
    full_key(&s->conn, key, k, NULL);
    b64(value, strlen(value), v);
    json_t *puts = json_pack("[{s:{s:s, s:s}}]", "request_put", "key", k, "value", v), *rep = NULL;
    if (puts && s->state && s->state(s->state_ctx, state, sizeof state) > 0) {
        char sk[ETCD_B64_KEY], sv[ETCD_B64_VALUE];
        full_key(&s->conn, s->state_key, sk, NULL);
        b64(state, strlen(state), sv);
        json_array_append_new(puts, json_pack("{s:{s:s, s:s}}", "request_put", "key", sk, "value", sv));
    }
    json_t *body = puts ? json_pack("{s:[{s:s, s:s, s:s, s:s}], s:o}", "compare", "key", rk, "target", "LEASE",
                                    "result", "EQUAL", "lease", s->role_lease.id, "success", puts)
                        : NULL;
    xdc_diag d = {{0}};
    if (!host_ok(s, conn_post(&s->conn, "/v3/kv/txn", body, xdc_deadline_ms(ETCD_HOST_MS), "set", &rep, &d), &d))
        return;
    int done = json_is_true(json_object_get(rep, "succeeded"));
    json_decref(rep);
    if (done) return;
    char now[RDZV_MEMBER_MAX] = "nobody";
    host_first(s, s->role_key, 0, NULL, 0, now, sizeof now);
    XDC_WARN(XDC_SUB_ORCH,
             "rendezvous: %s refused %s's write of '%s': %s no longer holds '%s' (its lease %s ended; held by %s): "
             "standing down",
             s->conn.where, s->holder, key, s->holder, s->role_key, s->role_lease.id, now);
    s->held = 0;
    lease_stop(&s->role_lease); /* the next try takes a new lease */
}

static void es_set(rdzv_server *base, const char *key, const char *value)
{
    eserver *s = (eserver *)base;
    xdc_diag d = {{0}};
    if (s->fenced) role_put(s, key, value);
    else host_ok(s, kv_put(&s->conn, key, value, NULL, xdc_deadline_ms(ETCD_HOST_MS), "set", &d), &d);
}

static int es_get(rdzv_server *base, const char *key, char *value, size_t cap)
{
    return host_first((eserver *)base, key, 0, NULL, 0, value, cap);
}

static int es_find(rdzv_server *base, const char *prefix, char *key, size_t key_cap, char *value, size_t cap)
{
    return host_first((eserver *)base, prefix, 1, key, key_cap, value, cap);
}

/* Members with a key under `dir` (joined/ or alive/): present[i] set, status[i] (may be NULL) filled.
 * -1 when etcd did not answer. */
static int host_members(eserver *s, const char *dir, char *present, char (*status)[RDZV_STATUS_MAX])
{
    xdc_diag d = {{0}};
    json_t *rep = NULL;
    if (!host_ok(s, kv_range(&s->conn, dir, 1, !status, 0, xdc_deadline_ms(ETCD_HOST_MS), "members", &rep, &d), &d))
        return -1;
    size_t dl = strlen(dir);
    char k[RDZV_KEY_MAX * 2], v[RDZV_STATUS_MAX];
    memset(present, 0, (size_t)s->n);
    for (size_t e = 0; range_entry(&s->conn, rep, e, k, sizeof k, status ? v : NULL, sizeof v) == 0; e++)
        for (int i = 0; i < s->n; i++)
            if (strcmp(k + (strlen(k) >= dl ? dl : 0), s->names[i]) == 0) {
                present[i] = 1;
                if (status) snprintf(status[i], sizeof status[i], "%s", v);
            }
    json_decref(rep);
    return 0;
}

static int es_connections(rdzv_server *base)
{
    eserver *s = (eserver *)base;
    char *alive = xdc_calloc((size_t)s->n, 1);
    int n = 0;
    if (alive && host_members(s, ETCD_INTERNAL "alive/", alive, NULL) == 0)
        for (int i = 0; i < s->n; i++) n += alive[i];
    xdc_free(alive);
    return n;
}

/* Member i's line into out. */
static void describe(const eserver *s, int i, int joined, int alive, const char *status, double silent, char *out,
                     size_t cap)
{
    if (!joined) snprintf(out, cap, "%s (never joined)", s->names[i]);
    else if (!alive) snprintf(out, cap, "%s (its lease expired or was revoked: gone)", s->names[i]);
    else snprintf(out, cap, "%s (alive, lease renewed %.1f s ago: %s)", s->names[i], silent, status);
}

/* Seconds since member i's lease was last renewed (its granted TTL minus what is left); 0 when unknown. *awake_s:
 * the most a running member's lease goes unrenewed (a third of the TTL granted, kept alive that often, plus the 1 s
 * resolution of the TTL left). */
static double lease_silence(eserver *s, int i, double *awake_s)
{
    *awake_s = RDZV_ETCD_TTL_S / 3.0 + 1.0;
    char key[RDZV_KEY_MAX], rec[sizeof(rdzv_holder_text) * 2];
    rdzv_holder h;
    snprintf(key, sizeof key, ETCD_INTERNAL "joined/%s", s->names[i]);
    if (host_first(s, key, 0, NULL, 0, rec, sizeof rec) != 0 || rdzv_val_holder_parse(rec, &h) != XDC_OK) return 0;
    xdc_diag d = {{0}};
    json_t *rep = NULL;
    if (!host_ok(s,
                 conn_post(&s->conn, "/v3/kv/lease/timetolive", json_pack("{s:s}", "ID", h.lease),
                           xdc_deadline_ms(ETCD_HOST_MS), "lease time-to-live", &rep, &d),
                 &d))
        return 0;
    const char *ttl = json_string_value(json_object_get(rep, "TTL")),
               *granted = json_string_value(json_object_get(rep, "grantedTTL"));
    double silent = ttl && granted && atoi(ttl) >= 0 ? (double)(atoi(granted) - atoi(ttl)) : 0;
    if (granted && atoi(granted) > 0) *awake_s = atoi(granted) / 3.0 + 1.0;
    json_decref(rep);
    return silent;
}

static int es_missing(rdzv_server *base, int64_t silent_ms, char *out, size_t cap)
{
    eserver *s = (eserver *)base;
    (void)silent_ms; /* a lease is the member's liveness: alive or gone, nothing between */
    char *joined = xdc_calloc((size_t)s->n, 2);
    int n = 0;
    out[0] = '\0';
    if (!joined || host_members(s, ETCD_INTERNAL "joined/", joined, NULL) != 0 ||
        host_members(s, ETCD_INTERNAL "alive/", joined + s->n, NULL) != 0) {
        snprintf(out, cap, "(etcd did not answer)");
        xdc_free(joined);
        return s->n;
    }
    for (int i = 0; i < s->n; i++) {
        if (joined[i] && joined[s->n + i]) continue;
        char one[RDZV_MEMBER_MAX + 64];
        describe(s, i, joined[i], 0, "", 0, one, sizeof one);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", n ? ", " : "", one);
        n++;
    }
    xdc_free(joined);
    return n;
}

static int es_member(rdzv_server *base, int i, rdzv_member_state *out)
{
    eserver *s = (eserver *)base;
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= s->n) return -1;
    snprintf(out->name, sizeof out->name, "%s", s->names[i]);
    char key[RDZV_KEY_MAX], status[RDZV_STATUS_MAX] = "", rec[sizeof(rdzv_holder_text) * 2];
    snprintf(key, sizeof key, ETCD_INTERNAL "joined/%s", s->names[i]);
    out->joined = host_first(s, key, 0, NULL, 0, rec, sizeof rec) == 0;
    snprintf(key, sizeof key, ETCD_INTERNAL "alive/%s", s->names[i]);
    out->connected = out->joined && host_first(s, key, 0, NULL, 0, status, sizeof status) == 0;
    out->silent_s = out->connected ? lease_silence(s, i, &out->awake_s) : 0;
    describe(s, i, out->joined, out->connected, status, out->silent_s, out->detail, sizeof out->detail);
    return 0;
}

static int es_status(rdzv_server *base, int i, char *out, size_t cap)
{
    eserver *s = (eserver *)base;
    if (i < 0 || i >= s->n) return -1;
    char key[RDZV_KEY_MAX];
    snprintf(key, sizeof key, ETCD_INTERNAL "alive/%s", s->names[i]);
    return host_first(s, key, 0, NULL, 0, out, cap) == 0 && out[0] ? 0 : -1;
}

/* Take the role when it is free: create its key under a lease of our own (granted once per try to hold it). */
static xdc_err_t es_role(rdzv_server *base, const char *key, const char *holder, int ttl_s, const char *state_key,
                         rdzv_role_state_fn state, void *ctx, int *held, xdc_diag *diag)
{
    eserver *s = (eserver *)base;
    *held = s->held;
    if (s->held) return XDC_OK;
    snprintf(s->role_key, sizeof s->role_key, "%s", key);
    snprintf(s->state_key, sizeof s->state_key, "%s", state_key);
    snprintf(s->holder, sizeof s->holder, "%s", holder);
    s->state = state;
    s->state_ctx = ctx;
    uint64_t deadline = xdc_deadline_ms(ETCD_HOST_MS);
    if (!s->role_lease.id[0]) {
        xdc_err_t rc = lease_start(&s->role_lease, &s->t, ttl_s, s->holder, deadline, diag);
        if (rc != XDC_OK) {
            lease_stop(&s->role_lease);
            return rc;
        }
    }
    xdc_err_t rc = kv_create(&s->conn, key, holder, s->role_lease.id, deadline, "taking the role", &s->held, diag);
    if (rc != XDC_OK) lease_stop(&s->role_lease); /* etcd away, or the lease ended (we were stopped): a new one */
    *held = s->held;
    s->fenced = s->held; /* a standby's writes (a failure it reports) are plain ones */
    return rc;
}

static void es_role_lapse(rdzv_server *base)
{
    eserver *s = (eserver *)base;
    lease_end(&s->role_lease, 0);
    s->held = s->fenced = 0;
}

static void es_destroy(rdzv_server *base)
{
    eserver *s = (eserver *)base;
    lease_stop(&s->role_lease); /* the role's key goes at once: a standby takes it without waiting out the TTL */
    conn_close(&s->conn);
    xdc_free(s->names);
    xdc_free(s);
}

static const rdzv_server_ops etcd_server_ops = {.port = es_port,
                                                .grant = es_grant,
                                                .set = es_set,
                                                .get = es_get,
                                                .find = es_find,
                                                .connections = es_connections,
                                                .slots = es_connections,
                                                .missing = es_missing,
                                                .member = es_member,
                                                .status = es_status,
                                                .role = es_role,
                                                .role_lapse = es_role_lapse,
                                                .destroy = es_destroy};

xdc_err_t rdzv_etcd_server_create(const rdzv_target *t, const char *const *expected, int n_expected, int64_t timeout_ms,
                                  rdzv_server **out, xdc_diag *diag)
{
    *out = NULL;
    eserver *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    s->base.ops = &etcd_server_ops;
    s->port = t->port;
    s->t = *t;
    s->n = n_expected;
    s->names = xdc_calloc((size_t)(n_expected > 0 ? n_expected : 1), sizeof *s->names);
    xdc_err_t rc = s->names ? conn_open(&s->conn, t, diag) : XDC_ERR_NOMEM;
    for (int i = 0; rc == XDC_OK && i < n_expected; i++) snprintf(s->names[i], sizeof s->names[i], "%s", expected[i]);
    /* A prefix is one run's: what an earlier run under it left (finished, failed/...) must not end this one. */
    if (rc == XDC_OK && !t->attach)
        rc = kv_delete(&s->conn, "", 1, xdc_deadline_ms(timeout_ms), "clearing the run's prefix", diag);
    else if (rc == XDC_OK) /* a live run's (a standby): it answers, and what it holds stays */
        rc = rdzv_etcd_ping(t, timeout_ms, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "rendezvous %s", t->url);
        es_destroy(&s->base);
        return rc;
    }
    *out = &s->base;
    return XDC_OK;
}

xdc_err_t rdzv_etcd_ping(const rdzv_target *t, int64_t timeout_ms, xdc_diag *diag)
{
    etcd_conn c;
    XDC_CHECK(conn_open(&c, t, diag));
    json_t *rep = NULL;
    /* /health is a GET; a range of one key under the prefix also proves the client certificate and auth. */
    xdc_err_t rc = kv_range(&c, "", 0, 1, 1, xdc_deadline_ms(timeout_ms), "ping (range)", &rep, diag);
    json_decref(rep);
    conn_close(&c);
    return rc;
}
