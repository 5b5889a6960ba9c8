/* orch_rdzv_store.c — the rendezvous store interface (orch_rdzv.h): which store a process uses
 * (rdzv_target_resolve), opening it, and the rdzv_* calls dispatched to the backend's table
 * (orch_rdzv_priv.h): the built-in store (orch_rdzv.c) or etcd (orch_rdzv_etcd.c). */
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_priv.h"

#include "common/xdc_time.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* etcd://HOST:PORT[/PREFIX] into t; -1 with diag naming what is wrong. */
static int parse_etcd(const char *url, const char *run_id, rdzv_target *t, xdc_diag *diag)
{
    const char *hp = url + strlen("etcd://"), *slash = strchr(hp, '/'), *colon;
    size_t hp_len = slash ? (size_t)(slash - hp) : strlen(hp);
    char hostport[300];
    if (hp_len == 0 || hp_len >= sizeof hostport) {
        xdc_diag_set(diag, "no HOST:PORT after etcd://");
        return -1;
    }
    memcpy(hostport, hp, hp_len);
    hostport[hp_len] = '\0';
    colon = strrchr(hostport, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == hostport || !end || *end || end == colon + 1 || port < 1 || port > 65535 ||
        (size_t)(colon - hostport) >= sizeof t->host) {
        xdc_diag_set(diag, "'%s' is not HOST:PORT (port 1-65535)", hostport);
        return -1;
    }
    snprintf(t->host, sizeof t->host, "%.*s", (int)(colon - hostport), hostport);
    t->port = (int)port;
    const char *prefix = slash ? slash + 1 : "";
    size_t n = strlen(prefix);
    while (n > 0 && prefix[n - 1] == '/') n--; /* "etcd://h:p/team/" is the prefix "team" */
    if (n == 0) snprintf(t->prefix, sizeof t->prefix, "xdc/%s", run_id ? run_id : "");
    else if (n < sizeof t->prefix - 64) snprintf(t->prefix, sizeof t->prefix, "%.*s", (int)n, prefix);
    else {
        xdc_diag_set(diag, "prefix longer than %zu bytes", sizeof t->prefix - 64);
        return -1;
    }
    for (const char *p = t->prefix; *p; p++)
        if (*p <= ' ' || *p > '~') {
            xdc_diag_set(diag, "prefix '%s' has a space or a byte that is not printable ASCII", t->prefix);
            return -1;
        }
    snprintf(t->url, sizeof t->url, "etcd://%s:%d/%s", t->host, t->port, t->prefix);
    return 0;
}

xdc_err_t rdzv_target_parse(const char *value, const char *run_id, rdzv_target *out, xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    out->source = "default";
    if (strcmp(value, "builtin") == 0) return XDC_OK;
    xdc_diag d = {{0}};
    if (strncmp(value, "etcd://", 7) != 0) xdc_diag_set(&d, "expected builtin or etcd://HOST:PORT[/PREFIX]");
    else if (parse_etcd(value, run_id, out, &d) == 0) {
        out->kind = RDZV_ETCD;
        return XDC_OK;
    }
    xdc_diag_set(diag, "rendezvous '%s': %s", value, d.msg);
    return XDC_ERR_CONFIG;
}

xdc_err_t rdzv_target_resolve(const char *flag, const char *run_file, const char *run_id, rdzv_target *out,
                              xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    const char *env = getenv("XDC_RDZV"), *v = NULL;
    out->source = "default";
    if (flag && *flag) v = flag, out->source = "--rdzv";
    else if (env && *env) v = env, out->source = "XDC_RDZV";
    else if (run_file && *run_file) v = run_file, out->source = "run file (rdzv:)";
    if (!v) return XDC_OK;
    const char *source = out->source;
    xdc_err_t rc = rdzv_target_parse(v, run_id, out, diag);
    out->source = source;
    if (rc != XDC_OK) xdc_diag_prefix(diag, "from %s", source);
    return rc;
}

void rdzv_flags_argv(const rdzv_flags *f, const char *rdzv, char **argv, int *n)
{
    const char *names[] = {"--rdzv", "--etcd-cacert", "--etcd-cert", "--etcd-key"};
    const char *values[] = {rdzv ? rdzv : f->rdzv, f->cacert, f->cert, f->key};
    for (int i = 0; i < 4; i++)
        if (values[i] && *values[i]) {
            argv[(*n)++] = (char *)names[i];
            argv[(*n)++] = (char *)values[i];
        }
}

void rdzv_flags_tls(const rdzv_flags *f, rdzv_target *t)
{
    t->cacert = f->cacert;
    t->cert = f->cert;
    t->key = f->key;
}

/* Built-in: does anything accept a TCP connection at host:port within timeout_ms? */
static xdc_err_t ping_tcp(const rdzv_target *t, int64_t timeout_ms, xdc_diag *diag)
{
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(t->host, port, &hints, &ai);
    if (gai != 0) {
        xdc_diag_set(diag, "rendezvous %s:%d: %s", t->host, t->port, gai_strerror(gai));
        return XDC_ERR_UNAVAILABLE;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, ai->ai_protocol), err = errno;
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, (int)(timeout_ms > INT32_MAX ? INT32_MAX : timeout_ms));
            socklen_t len = sizeof err;
            if (n == 0) err = ETIMEDOUT;
            else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
    } else if (fd >= 0) {
        err = 0;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    if (err == 0) return XDC_OK;
    xdc_diag_set(diag, "rendezvous %s:%d: %s", t->host, t->port, strerror(err));
    return err == ETIMEDOUT ? XDC_ERR_TIMEOUT : XDC_ERR_UNAVAILABLE;
}

xdc_err_t rdzv_ping(const rdzv_target *t, int64_t timeout_ms, xdc_diag *diag)
{
    return t->kind == RDZV_ETCD ? rdzv_etcd_ping(t, timeout_ms, diag) : ping_tcp(t, timeout_ms, diag);
}

/* ---- host ---------------------------------------------------------------------------------------- */

xdc_err_t rdzv_server_open(const rdzv_target *t, xdc_wan_engine *eng, const char *const *expected, int n_expected,
                           int64_t timeout_ms, rdzv_server **out, xdc_diag *diag)
{
    if (t->kind == RDZV_ETCD) return rdzv_etcd_server_create(t, expected, n_expected, timeout_ms, out, diag);
    return rdzv_server_create(eng, t->host, t->port, expected, n_expected, out, diag);
}

int rdzv_server_port(const rdzv_server *s) { return s->ops->port(s); }

xdc_err_t rdzv_server_grant(rdzv_server *s, const char *key, const char *member, xdc_diag *diag)
{
    return s->ops->grant(s, key, member, diag);
}

void rdzv_server_quota(rdzv_server *s, const rdzv_quota *q)
{
    if (s->ops->quota) s->ops->quota(s, q);
}

void rdzv_server_set(rdzv_server *s, const char *key, const char *value) { s->ops->set(s, key, value); }

int rdzv_server_get(rdzv_server *s, const char *key, char *value, size_t cap)
{
    return s->ops->get(s, key, value, cap);
}

int rdzv_server_find(rdzv_server *s, const char *prefix, char *key, size_t key_cap, char *value, size_t cap)
{
    return s->ops->find(s, prefix, key, key_cap, value, cap);
}

int rdzv_server_connections(rdzv_server *s) { return s->ops->connections(s); }

int rdzv_server_slots(rdzv_server *s) { return s->ops->slots(s); }

int rdzv_server_missing(rdzv_server *s, int64_t silent_ms, char *out, size_t cap)
{
    return s->ops->missing(s, silent_ms, out, cap);
}

int rdzv_server_member(rdzv_server *s, int i, rdzv_member_state *out) { return s->ops->member(s, i, out); }

int rdzv_server_status(rdzv_server *s, int i, char *out, size_t cap) { return s->ops->status(s, i, out, cap); }

xdc_err_t rdzv_server_role(rdzv_server *s, const char *key, const char *holder, int ttl_s, const char *state_key,
                           rdzv_role_state_fn state, void *ctx, int *held, xdc_diag *diag)
{
    *held = 1;
    return s->ops->role ? s->ops->role(s, key, holder, ttl_s, state_key, state, ctx, held, diag) : XDC_OK;
}

void rdzv_server_role_lapse(rdzv_server *s)
{
    if (s->ops->role_lapse) s->ops->role_lapse(s);
}

void rdzv_server_destroy(rdzv_server *s)
{
    if (s) s->ops->destroy(s);
}

/* ---- member -------------------------------------------------------------------------------------- */

xdc_err_t rdzv_client_open(const rdzv_target *t, xdc_wan_engine *eng, const char *member, int64_t timeout_ms,
                           rdzv_client **out, xdc_diag *diag)
{
    if (t->kind == RDZV_ETCD) return rdzv_etcd_client_create(t, member, timeout_ms, out, diag);
    return rdzv_client_create(eng, t->host, t->port, member, timeout_ms, out, diag);
}

void rdzv_client_destroy(rdzv_client *c)
{
    if (c) c->ops->destroy(c);
}

void rdzv_client_quota(rdzv_client *c, const rdzv_quota *q)
{
    if (c->ops->quota) c->ops->quota(c, q);
}

xdc_err_t rdzv_set(rdzv_client *c, const char *key, const char *value, xdc_diag *diag)
{
    return c->ops->set(c, key, value, diag);
}

xdc_err_t rdzv_get(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag)
{
    return c->ops->get(c, key, timeout_ms < 0 || timeout_ms > INT32_MAX ? INT32_MAX : timeout_ms, value, cap, diag);
}

xdc_err_t rdzv_try_get(rdzv_client *c, const char *key, char *value, size_t cap, xdc_diag *diag)
{
    return c->ops->get(c, key, 0, value, cap, diag);
}

xdc_err_t rdzv_barrier(rdzv_client *c, const char *name, int count, int64_t timeout_ms, xdc_diag *diag)
{
    return c->ops->barrier(c, name, count, timeout_ms, diag);
}

xdc_err_t rdzv_heartbeat(rdzv_client *c, const char *status, xdc_diag *diag)
{
    return c->ops->heartbeat(c, status, diag);
}
