/* orch_rdzv.h — the built-in rendezvous store: join, key/value, barriers and heartbeats for the members
 * of a run (agents and workers), over the WAN transport, so it is mutual TLS and works across hosts.
 * The launcher (or `xdc coordinator`) hosts the server; every member is a client named
 * "region/host:rank". A wait that runs out names the members still missing and when each was last heard.
 *
 * Protocol: one JSON object per message on the latency class, request then reply, one request at a
 * time per client: {"op":"join|set|get|barrier|heartbeat|members", ...}. */
#ifndef ORCH_RDZV_H
#define ORCH_RDZV_H

#include "common/xdc_err.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

#define RDZV_MEMBER_MAX    128
#define RDZV_VALUE_MAX     4096 /* bytes of one value */
/* The server's certificate names this region (rank 0): xdc://RUN/coordinator/0. */
#define RDZV_SERVER_REGION "coordinator"

typedef struct rdzv_server rdzv_server;
typedef struct rdzv_client rdzv_client;

/* Start the server on `eng` (host:port, port 0 = any). `expected` lists the member names the run needs
 * (n_expected entries), used to say who is missing. */
xdc_err_t rdzv_server_create(xdc_wan_engine *eng, const char *host, int port, const char *const *expected,
                             int n_expected, rdzv_server **out, xdc_diag *diag);
int rdzv_server_port(const rdzv_server *s);
/* Set a key from the hosting process (e.g. the launcher publishes "abort"). */
void rdzv_server_set(rdzv_server *s, const char *key, const char *value);
/* Copy a key's value; returns 0 when present, -1 when not. */
int rdzv_server_get(rdzv_server *s, const char *key, char *value, size_t cap);
/* First key starting with `prefix` (in the order keys were first set): 0 and its key and value when
 * there is one, -1 otherwise. */
int rdzv_server_find(rdzv_server *s, const char *prefix, char *key, size_t key_cap, char *value, size_t cap);
/* Members still connected (their connection thread has not seen them leave). */
int rdzv_server_connections(rdzv_server *s);
/* One line per expected member that has not joined or has been silent for more than `silent_ms`:
 * "name (never joined)" or "name (last heard 12.3 s ago: <what>)". Returns how many. */
int rdzv_server_missing(rdzv_server *s, int64_t silent_ms, char *out, size_t cap);
void rdzv_server_destroy(rdzv_server *s);

/* Connect to the server and join as `member`. */
xdc_err_t rdzv_client_create(xdc_wan_engine *eng, const char *host, int port, const char *member, int64_t timeout_ms,
                             rdzv_client **out, xdc_diag *diag);
void rdzv_client_destroy(rdzv_client *c);
xdc_err_t rdzv_set(rdzv_client *c, const char *key, const char *value, xdc_diag *diag);
/* Wait up to timeout_ms for `key` to be set. */
xdc_err_t rdzv_get(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag);
/* Non-blocking read: XDC_OK with the value, XDC_ERR_AGAIN when not set. */
xdc_err_t rdzv_try_get(rdzv_client *c, const char *key, char *value, size_t cap, xdc_diag *diag);
/* Wait until `count` members entered barrier `name`; on timeout diag names the missing members. */
xdc_err_t rdzv_barrier(rdzv_client *c, const char *name, int count, int64_t timeout_ms, xdc_diag *diag);
/* Tell the server we are alive and what we are doing ("step 12"). */
xdc_err_t rdzv_heartbeat(rdzv_client *c, const char *status, xdc_diag *diag);

#endif /* ORCH_RDZV_H */
