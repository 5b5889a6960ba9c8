/* orch_rdzv_quota.h — what one member may hold in the rendezvous store: keys and value bytes in all, and
 * under each prefix it may write many keys of (a region's rejoin bootstraps intra/<region>/<n>, a granted
 * prefix such as replan/). The built-in store charges every write to the member that made it and refuses
 * one over its quota, naming the member; with etcd the member's own client checks the same quota before it
 * writes (docs/security.md: what etcd itself enforces). Sum of all quotas bounds the store, so no member
 * can fill it for another. */
#ifndef ORCH_RDZV_QUOTA_H
#define ORCH_RDZV_QUOTA_H

#include <stddef.h>

/* Which of may_write's rules let a member write a key. */
typedef enum {
    RDZV_KEY_DENIED = 0,
    RDZV_KEY_OWN,    /* one of the fixed keys of the member (wan/<r>/<k>, metrics/..., failed/<name>, ...) */
    RDZV_KEY_REJOIN, /* intra/<region>/<times it left>, the region's rank 0 only */
    RDZV_KEY_GRANT,  /* a run-wide key granted to the member by name (finished, result) */
    RDZV_KEY_PREFIX, /* a key under a prefix granted to the member (replan/<step>) */
    RDZV_KEY_CLASSES
} rdzv_key_class;

#define RDZV_QUOTA_OWN_KEYS     10  /* may_write's fixed keys of a region's rank 0; others have 7 */
#define RDZV_QUOTA_GRANT_KEYS   16  /* run-wide keys one member may be granted (RDZV_MAX_GRANTS of a run) */
#define RDZV_QUOTA_MARGIN       8   /* keys over what the run's shape counts, under each prefix */
#define RDZV_QUOTA_PREFIX_VALUE 512 /* bytes a value under a prefix holds on average (a bootstrap, a re-plan) */

/* What the run's shape lets its members write under the prefixes of many keys. Every process of a run
 * computes it from the same files (orch_run_config_rdzv_shape): the store host to enforce it, an etcd member
 * to check its own writes. */
typedef struct rdzv_run_shape {
    long rejoins; /* times a region may leave and come back: one bootstrap intra/<region>/<n> each */
    long replans; /* re-plan checks: one replan/<step> each, written by global rank 0 */
} rdzv_run_shape;
/* The shape of a store whose host says nothing of its run (rdzv_server_create alone, tests, tools). */
#define RDZV_SHAPE_DEFAULT ((rdzv_run_shape){.rejoins = 56, .replans = 8184})

typedef struct rdzv_quota {
    int keys[RDZV_KEY_CLASSES];     /* keys of each class one member may hold */
    size_t bytes[RDZV_KEY_CLASSES]; /* value bytes of each class one member may hold */
} rdzv_quota;

/* What one member holds now, charged by rdzv_quota_charge. */
typedef struct rdzv_usage {
    int keys[RDZV_KEY_CLASSES];
    size_t bytes[RDZV_KEY_CLASSES];
} rdzv_usage;

/* The quota of a member of a run of this shape (the same for every member: a class it may not write stays
 * unused): its 10 own keys and 16 granted ones of up to RDZV_VALUE_MAX bytes each; rejoins + margin keys
 * intra/<region>/<n> and replans + margin keys under a granted prefix, RDZV_QUOTA_PREFIX_VALUE bytes each
 * on average. */
void rdzv_quota_for_run(rdzv_quota *q, const rdzv_run_shape *shape);
/* rdzv_quota_for_run of RDZV_SHAPE_DEFAULT. */
void rdzv_quota_init(rdzv_quota *q);
/* 0 when `u` may write a key of class `cls` of new_bytes value bytes, replacing old_bytes of its own
 * (is_new: the key is not the member's yet); -1 with the reason in why[cap] ("12 keys under intra/..."). */
int rdzv_quota_check(const rdzv_quota *q, const rdzv_usage *u, rdzv_key_class cls, int is_new, size_t old_bytes,
                     size_t new_bytes, char *why, size_t cap);
/* Charge (sign +1) or refund (sign -1) one key of `bytes` value bytes of class cls to u. */
void rdzv_quota_charge(rdzv_usage *u, rdzv_key_class cls, int sign, size_t bytes);
/* The class of a key `member` ("region/host:rank") writes, as its own client sees it (etcd: no store host
 * checks): intra/<region>/<digits> a rejoin, replan/<...> but replan/link/<r> a prefix key, finished and
 * result granted, any other one of its own keys. */
rdzv_key_class rdzv_quota_classify(const char *member, const char *key);
/* Keys the store must hold for n_members members of n_regions regions and n_grants grants, quotas full. */
long rdzv_quota_store_keys(const rdzv_quota *q, int n_members, int n_regions, int n_grants);

#endif /* ORCH_RDZV_QUOTA_H */
