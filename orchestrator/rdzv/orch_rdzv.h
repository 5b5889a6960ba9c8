/* orch_rdzv.h — the built-in rendezvous store: join, key/value, barriers and heartbeats for the members
 * of a run (workers), over the WAN transport, so it is mutual TLS and works across hosts. The launcher
 * (or `xdc coordinator`) hosts the server; every member is a client named "region/host:rank". A wait
 * that runs out names the members still missing and when each was last heard.
 *
 * Protocol: one flat JSON object per message on the latency class, request then reply, one request at
 * a time per client: {"op":"join|set|get|barrier|heartbeat", ...} (rdzv_request_parse says which
 * fields each op takes). The server authorizes every request (docs/security.md):
 * - a connection does nothing before `join`, and joins once, as the expected member whose region and
 *   rank its certificate names (the host comes from the run's member list, which pins it);
 * - a member writes only its own keys: wan/<region index>/<rank>, stats/<region index>/<rank>,
 *   outer/<region index>/<rank>, metrics/<region>/<rank>, failed/<its name>, and with rank 0 intra/<region> and device/<region>;
 *   run-wide keys (finished, result, replan/...) only the member rdzv_server_grant named; anything
 *   else (relay/..., abort) only the hosting process;
 * - a member's keys stay within its quota (orch_rdzv_quota.h), sized from the run's shape by the host
 *   (rdzv_server_quota); a write over it is refused naming the member;
 * - a barrier counts each member once, for all members of the run, and forgets an arrival whose
 *   connection ended or whose wait timed out;
 * - a message that does not parse (not JSON, nested, a field of the wrong type or size, longer than
 *   RDZV_MSG_MAX) is logged with the member's identity and its connection closed without a reply.
 * Connections are freed as they end, so the number of sessions over a run's life is unbounded.
 *
 * The same interface has a second backend, etcd (orch_rdzv_etcd.c, docs/runtime.md "Rendezvous
 * backends"): rdzv_target says which store a process uses, rdzv_client_open and rdzv_server_open open
 * either, and every rdzv_* call below works on both (the built-in's authorization rules are the
 * built-in's; with etcd, etcd's own auth decides, docs/security.md). */
#ifndef ORCH_RDZV_H
#define ORCH_RDZV_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv_quota.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

#define RDZV_MEMBER_MAX    128                     /* bytes of a member name, with its NUL */
#define RDZV_KEY_MAX       256                     /* bytes of a key, with its NUL */
#define RDZV_STATUS_MAX    128                     /* bytes of a heartbeat status, with its NUL */
#define RDZV_VALUE_MAX     4096                    /* bytes of one value, with its NUL */
#define RDZV_MSG_MAX       (RDZV_VALUE_MAX + 1024) /* bytes of one JSON message */
/* The server's certificate names this region (rank 0): xdc://RUN/coordinator/0. */
#define RDZV_SERVER_REGION "coordinator"

typedef struct rdzv_server rdzv_server;
typedef struct rdzv_client rdzv_client;

/* ---- which store --------------------------------------------------------------------------------- */

#define RDZV_ETCD_TTL_S 10 /* default lease of an etcd member: it counts as gone this long after it stops */

typedef enum { RDZV_BUILTIN = 0, RDZV_ETCD = 1 } rdzv_kind;

/* Where the store is. Built-in: host:port of the store (to join) or to listen on (to host). etcd: its
 * client address and the key prefix of this run; with cacert, https with the server checked against it,
 * and with cert + key a client certificate (etcd's client-cert auth). */
typedef struct rdzv_target {
    rdzv_kind kind;
    char host[256];
    int port;
    char prefix[RDZV_KEY_MAX];       /* etcd: every key of the run is "<prefix>/<key>"; no leading or trailing '/' */
    char url[512];                   /* etcd: "etcd://host:port/prefix", as the run uses it (to pass on) */
    const char *cacert, *cert, *key; /* etcd TLS files (NULL: plain HTTP; --etcd-cacert/--etcd-cert/--etcd-key) */
    int lease_ttl_s;                 /* etcd member lease (0: RDZV_ETCD_TTL_S) */
    int attach;         /* etcd, rdzv_server_open: a view of a live run's prefix as it is (a standby), not emptied */
    const char *source; /* where the choice came from: "--rdzv", "XDC_RDZV", "run file", "default" */
} rdzv_target;

/* The rendezvous options of launch, agent and worker as given (NULL: not given): --rdzv, --etcd-cacert,
 * --etcd-cert, --etcd-key. Each process passes them on to the processes it starts. */
typedef struct rdzv_flags {
    const char *rdzv, *cacert, *cert, *key;
} rdzv_flags;
#define RDZV_FLAGS_ARGV 8 /* argv entries rdzv_flags_argv may add */

/* Append the given flags to argv at *n ("--rdzv", value, ...); `rdzv` replaces f->rdzv when not NULL
 * (the value the parent resolved). */
void rdzv_flags_argv(const rdzv_flags *f, const char *rdzv, char **argv, int *n);
/* The TLS files of f into t. */
void rdzv_flags_tls(const rdzv_flags *f, rdzv_target *t);

/* Parse one value: "builtin" or etcd://HOST:PORT[/PREFIX] (see rdzv_target_resolve). XDC_ERR_CONFIG
 * with diag saying what is wrong. */
xdc_err_t rdzv_target_parse(const char *value, const char *run_id, rdzv_target *out, xdc_diag *diag);
/* Choose the store: `flag` (--rdzv), else the XDC_RDZV variable, else `run_file` (the run file's rdzv:
 * key); NULL or "" skip a source. The value is "builtin" or etcd://HOST:PORT[/PREFIX]; without a
 * prefix an etcd run uses "xdc/<run_id>". Nothing given: the built-in store, host and port left for the
 * caller. XDC_ERR_CONFIG naming the source and the value when it is neither. TLS fields are NULL. */
xdc_err_t rdzv_target_resolve(const char *flag, const char *run_file, const char *run_id, rdzv_target *out,
                              xdc_diag *diag);

/* Is the store there? Built-in: a TCP connection to host:port is accepted. etcd: a range read under the
 * run's prefix answers (over TLS with the client certificate when configured, so auth is checked too). XDC_OK, else XDC_ERR_TIMEOUT / XDC_ERR_UNAVAILABLE with diag
 * naming the address. For `xdc doctor`. */
xdc_err_t rdzv_ping(const rdzv_target *t, int64_t timeout_ms, xdc_diag *diag);

/* ---- messages ------------------------------------------------------------------------------------ */

typedef enum { RDZV_OP_JOIN, RDZV_OP_SET, RDZV_OP_GET, RDZV_OP_BARRIER, RDZV_OP_HEARTBEAT } rdzv_op;

/* One request, decoded. Strings are NUL-terminated copies; fields an op does not take are empty/0. */
typedef struct rdzv_request {
    rdzv_op op;
    char member[RDZV_MEMBER_MAX]; /* join: printable ASCII, no spaces */
    char key[RDZV_KEY_MAX];       /* set, get, barrier: printable ASCII, no spaces */
    char value[RDZV_VALUE_MAX];   /* set: any text without NUL */
    char status[RDZV_STATUS_MAX]; /* any op (optional): what the member is doing, printable ASCII */
    int count;                    /* barrier: 1..1024 */
    int64_t timeout_ms;           /* get (optional, 0: do not wait), barrier: 0..INT32_MAX */
} rdzv_request;

/* Decode one request message of `len` bytes (untrusted: any bytes). XDC_ERR_PROTO with diag naming the
 * first problem: not one JSON object, an unknown op or field, a field of the wrong type, too long or
 * out of range, a field the op needs missing. */
xdc_err_t rdzv_request_parse(const void *buf, size_t len, rdzv_request *out, xdc_diag *diag);

/* ---- server -------------------------------------------------------------------------------------- */

/* Host the run's store as the launcher does: the built-in server on `eng` at t->host:t->port (see
 * rdzv_server_create), or with etcd a view of t's prefix, emptied first (a prefix belongs to one run at
 * a time). The rdzv_server_* functions below then work on either; etcd's view is for one thread. */
xdc_err_t rdzv_server_open(const rdzv_target *t, xdc_wan_engine *eng, const char *const *expected, int n_expected,
                           int64_t timeout_ms, rdzv_server **out, xdc_diag *diag);
/* Start the built-in server on `eng` (host:port, port 0 = any; host NULL or "" is refused: say which address).
 * `expected` lists the run's members "region/host:rank" in the topology's order (regions in order, ranks
 * ascending; a member's region index is its region's position in that list); only they may join. */
xdc_err_t rdzv_server_create(xdc_wan_engine *eng, const char *host, int port, const char *const *expected,
                             int n_expected, rdzv_server **out, xdc_diag *diag);
int rdzv_server_port(const rdzv_server *s); /* etcd: etcd's port */
/* Let expected member `member` write the run-wide `key` (a trailing '/' grants every key under that
 * prefix; a key may be granted to several members). XDC_ERR_INVALID when the member is not expected or
 * the table (16 grants and one per region) is full. etcd: a no-op (etcd's auth decides who writes). */
xdc_err_t rdzv_server_grant(rdzv_server *s, const char *key, const char *member, xdc_diag *diag);
/* Every member's quota from now on (before members join: the launcher sizes it from the run's shape; until
 * then rdzv_quota_init's). etcd: a no-op (each member's client checks its own, rdzv_client_quota). */
void rdzv_server_quota(rdzv_server *s, const rdzv_quota *q);
/* Set a key from the hosting process (e.g. relay routes). */
void rdzv_server_set(rdzv_server *s, const char *key, const char *value);
/* Copy a key's value; returns 0 when present, -1 when not. */
int rdzv_server_get(rdzv_server *s, const char *key, char *value, size_t cap);
/* First key starting with `prefix` (in the order keys were first set): 0 and its key and value when
 * there is one, -1 otherwise. */
int rdzv_server_find(rdzv_server *s, const char *prefix, char *key, size_t key_cap, char *value, size_t cap);
/* Connections whose thread still serves them. */
int rdzv_server_connections(rdzv_server *s);
/* Connection slots in use: those served plus those ended but not yet reclaimed (the acceptor reclaims
 * ended ones before it takes the next connection). */
int rdzv_server_slots(rdzv_server *s);
/* One line per expected member that has not joined or has been silent for more than `silent_ms`:
 * "name (never joined)" or "name (last heard 12.3 s ago: <what>)". Returns how many. */
int rdzv_server_missing(rdzv_server *s, int64_t silent_ms, char *out, size_t cap);
/* What the store knows of member i (0..n_expected-1, the order given to rdzv_server_create). */
typedef struct rdzv_member_state {
    char name[RDZV_MEMBER_MAX];
    int joined;    /* it joined at some time */
    int connected; /* its connection is up now */
    /* its process is known to be gone: the built-in store saw its connection close. etcd cannot tell a lease that
     * ran out from a process that ended (a stopped process's lease runs out too, and it renews it as it wakes),
     * so under etcd never: not connected there is a silence of at least the lease's TTL */
    int ended;
    /* connected: seconds since its connection last carried anything. The member's WAN engine answers
     * keepalives whatever its training thread does, so a member blocked in a long wait stays near the
     * ping interval; a stopped or hung process grows without bound. */
    double silent_s;
    /* silent_s below this: the member's process runs (the built-in store: its keepalives, every 200 ms, within
     * 1 s; etcd: its lease renewed, every third of its TTL, within that and the TTL's 1 s resolution) */
    double awake_s;
    char detail[RDZV_MEMBER_MAX + RDZV_STATUS_MAX + 64]; /* "NAME (last heard 3.2 s ago: step 20)" */
} rdzv_member_state;
/* 0 and *out, or -1 when i is out of range. */
int rdzv_server_member(rdzv_server *s, int i, rdzv_member_state *out);
/* Member i's status as the store holds it into out[cap]: its last heartbeat's ("step 20"; "joined" before one), what
 * rdzv_server_member's detail quotes, at one read of the store (etcd: rdzv_server_member takes four requests, its
 * lease's age among them): for a poll several times a second. 0, or -1 when i is out of range or the store holds
 * none (never joined; etcd: gone; built-in: a gone member's is "connection lost: ..."). */
int rdzv_server_status(rdzv_server *s, int i, char *out, size_t cap);
/* A role one process of the run holds at a time (the round decider, orch_decider.h), with etcd taken and
 * moved under a lease: `key` is created under a lease of ttl_s that this view keeps alive, with the value
 * `holder`, when no one holds it; *held says whether this view holds it now. While it does, every
 * rdzv_server_set of this view is one transaction that also writes state(ctx) (when it gives > 0 bytes) to
 * `state_key`, both only while `key` is still under this view's lease: a holder deposed while it was
 * stopped or cut off (its lease ended, another process took the role) has its writes refused by etcd, is
 * told so in the log, and holds the role no more (the next call tries to take it again). Destroying the
 * view gives the role up at once. Built-in: the host is the only process that can hold it (held, always).
 * An error when etcd did not answer (not held). */
typedef size_t (*rdzv_role_state_fn)(void *ctx, char *out, size_t cap);
xdc_err_t rdzv_server_role(rdzv_server *s, const char *key, const char *holder, int ttl_s, const char *state_key,
                           rdzv_role_state_fn state, void *ctx, int *held, xdc_diag *diag);
/* Stop holding the role as a holder that died would (`xdc launch --chaos` kill-decider): no more keep-alives
 * and no revoke, so its key goes when its lease ends and another process takes the role then; this view's
 * writes are plain ones again until it holds the role anew. Built-in: nothing (the role cannot move). */
void rdzv_server_role_lapse(rdzv_server *s);
void rdzv_server_destroy(rdzv_server *s);

/* ---- client -------------------------------------------------------------------------------------- */

/* Join the store t names as `member`: the built-in server at t->host:t->port over `eng`, or etcd (eng
 * unused; a lease kept alive by the client's own thread marks the member alive). */
xdc_err_t rdzv_client_open(const rdzv_target *t, xdc_wan_engine *eng, const char *member, int64_t timeout_ms,
                           rdzv_client **out, xdc_diag *diag);
/* Connect to the built-in server and join as `member`. */
xdc_err_t rdzv_client_create(xdc_wan_engine *eng, const char *host, int port, const char *member, int64_t timeout_ms,
                             rdzv_client **out, xdc_diag *diag);
void rdzv_client_destroy(rdzv_client *c);
/* etcd: every later rdzv_set of ours is checked against q on our side (no store host sees them; until then
 * rdzv_quota_init's), refused with XDC_ERR_AUTH and the built-in store's message naming us. Built-in: a
 * no-op (the store checks the quota its host set). */
void rdzv_client_quota(rdzv_client *c, const rdzv_quota *q);
/* etcd only: when etcd does not answer within an operation's deadline (retried with backoff until
 * then), the operation fails with XDC_ERR_TIMEOUT and diag naming etcd's address and the operation. */
/* Set one of our keys; XDC_ERR_AUTH when the server says it is not ours to write. */
xdc_err_t rdzv_set(rdzv_client *c, const char *key, const char *value, xdc_diag *diag);
/* Wait up to timeout_ms for `key` to be set. */
xdc_err_t rdzv_get(rdzv_client *c, const char *key, int64_t timeout_ms, char *value, size_t cap, xdc_diag *diag);
/* Non-blocking read: XDC_OK with the value, XDC_ERR_AGAIN when not set. */
xdc_err_t rdzv_try_get(rdzv_client *c, const char *key, char *value, size_t cap, xdc_diag *diag);
/* Wait until `count` members (all of the run's) entered barrier `name`; on timeout diag names the
 * missing members. */
xdc_err_t rdzv_barrier(rdzv_client *c, const char *name, int count, int64_t timeout_ms, xdc_diag *diag);
/* Tell the server we are alive and what we are doing ("step 12"). */
xdc_err_t rdzv_heartbeat(rdzv_client *c, const char *status, xdc_diag *diag);

#endif /* ORCH_RDZV_H */
