/* orch_rdzv_priv.h — the rendezvous store interface behind orch_rdzv.h, private to
 * orchestrator/rdzv: a table of functions per backend. The built-in store (orch_rdzv.c) and etcd
 * (orch_rdzv_etcd.c) each embed the base struct first in their own and fill its ops; the public
 * rdzv_* functions (orch_rdzv_store.c) dispatch through it. */
#ifndef ORCH_RDZV_PRIV_H
#define ORCH_RDZV_PRIV_H

#include "orchestrator/rdzv/orch_rdzv.h"

/* A member's view: what a worker does with the store. */
typedef struct rdzv_client_ops {
    xdc_err_t (*set)(rdzv_client *c, const char *key, const char *value, xdc_diag *diag);
    /* timeout_ms 0: one look, XDC_ERR_AGAIN when the key is not set; > 0: wait, then XDC_ERR_TIMEOUT. */
    xdc_err_t (*get)(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag);
    xdc_err_t (*barrier)(rdzv_client *c, const char *name, int count, int64_t timeout_ms, xdc_diag *diag);
    xdc_err_t (*heartbeat)(rdzv_client *c, const char *status, xdc_diag *diag);
    void (*quota)(rdzv_client *c, const rdzv_quota *q); /* NULL: the store host checks quotas */
    void (*destroy)(rdzv_client *c);                    /* never called with NULL */
} rdzv_client_ops;

struct rdzv_client {
    const rdzv_client_ops *ops;
};

/* The host's view: what the launcher (or `xdc coordinator`) reads and writes. */
typedef struct rdzv_server_ops {
    int (*port)(const rdzv_server *s);
    xdc_err_t (*grant)(rdzv_server *s, const char *key, const char *member, xdc_diag *diag);
    void (*quota)(rdzv_server *s, const rdzv_quota *q); /* NULL: members check their own quotas */
    void (*set)(rdzv_server *s, const char *key, const char *value);
    int (*get)(rdzv_server *s, const char *key, char *value, size_t cap);
    int (*find)(rdzv_server *s, const char *prefix, char *key, size_t key_cap, char *value, size_t cap);
    int (*connections)(rdzv_server *s);
    int (*slots)(rdzv_server *s);
    int (*missing)(rdzv_server *s, int64_t silent_ms, char *out, size_t cap);
    int (*member)(rdzv_server *s, int i, rdzv_member_state *out);
    int (*status)(rdzv_server *s, int i, char *out, size_t cap);
    /* NULL: the host is the only process that can hold a role */
    xdc_err_t (*role)(rdzv_server *s, const char *key, const char *holder, int ttl_s, const char *state_key,
                      rdzv_role_state_fn state, void *ctx, int *held, xdc_diag *diag);
    void (*role_lapse)(rdzv_server *s); /* NULL: the role cannot move */
    void (*destroy)(rdzv_server *s);    /* never called with NULL */
} rdzv_server_ops;

struct rdzv_server {
    const rdzv_server_ops *ops;
};

/* orch_rdzv_etcd.c */
xdc_err_t rdzv_etcd_client_create(const rdzv_target *t, const char *member, int64_t timeout_ms, rdzv_client **out,
                                  xdc_diag *diag);
xdc_err_t rdzv_etcd_server_create(const rdzv_target *t, const char *const *expected, int n_expected, int64_t timeout_ms,
                                  rdzv_server **out, xdc_diag *diag);
xdc_err_t rdzv_etcd_ping(const rdzv_target *t, int64_t timeout_ms, xdc_diag *diag);

#endif /* ORCH_RDZV_PRIV_H */
