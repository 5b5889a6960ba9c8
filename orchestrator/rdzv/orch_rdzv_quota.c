/* orch_rdzv_quota.c — per-member quotas of the rendezvous store (see orch_rdzv_quota.h). */
#include "orchestrator/rdzv/orch_rdzv_quota.h"

#include "orchestrator/rdzv/orch_rdzv.h"

#include <stdio.h>

static const char *const class_names[RDZV_KEY_CLASSES] = {
    [RDZV_KEY_OWN] = "its own keys",
    [RDZV_KEY_REJOIN] = "its region's rejoin keys intra/<region>/<n>",
    [RDZV_KEY_GRANT] = "run-wide keys granted to it",
    [RDZV_KEY_PREFIX] = "keys under the prefixes granted to it",
};

void rdzv_quota_init(rdzv_quota *q)
{
    *q = (rdzv_quota){0};
    q->keys[RDZV_KEY_OWN] = RDZV_QUOTA_OWN_KEYS;
    q->bytes[RDZV_KEY_OWN] = (size_t)RDZV_QUOTA_OWN_KEYS * RDZV_VALUE_MAX;
    q->keys[RDZV_KEY_GRANT] = RDZV_QUOTA_GRANT_KEYS;
    q->bytes[RDZV_KEY_GRANT] = (size_t)RDZV_QUOTA_GRANT_KEYS * RDZV_VALUE_MAX;
    q->keys[RDZV_KEY_REJOIN] = RDZV_QUOTA_REJOINS;
    q->bytes[RDZV_KEY_REJOIN] = (size_t)RDZV_QUOTA_REJOINS * RDZV_VALUE_MAX;
    q->keys[RDZV_KEY_PREFIX] = RDZV_QUOTA_PREFIX_KEYS;
    q->bytes[RDZV_KEY_PREFIX] = (size_t)RDZV_QUOTA_PREFIX_KEYS * RDZV_QUOTA_PREFIX_VALUE;
}

int rdzv_quota_check(const rdzv_quota *q, const rdzv_usage *u, rdzv_key_class cls, int is_new, size_t old_bytes,
                     size_t new_bytes, char *why, size_t cap)
{
    if (cls <= RDZV_KEY_DENIED || cls >= RDZV_KEY_CLASSES) {
        snprintf(why, cap, "not its key");
        return -1;
    }
    int keys = u->keys[cls] + (is_new ? 1 : 0);
    size_t bytes = u->bytes[cls] - (is_new ? 0 : old_bytes) + new_bytes;
    if (keys > q->keys[cls]) {
        snprintf(why, cap, "over its quota of %d keys: %s", q->keys[cls], class_names[cls]);
        return -1;
    }
    if (bytes > q->bytes[cls]) {
        snprintf(why, cap, "over its quota of %zu value bytes (%zu held): %s", q->bytes[cls], u->bytes[cls],
                 class_names[cls]);
        return -1;
    }
    return 0;
}

void rdzv_quota_charge(rdzv_usage *u, rdzv_key_class cls, int sign, size_t bytes)
{
    if (cls <= RDZV_KEY_DENIED || cls >= RDZV_KEY_CLASSES) return;
    u->keys[cls] += sign;
    if (sign > 0) u->bytes[cls] += bytes;
    else u->bytes[cls] -= bytes <= u->bytes[cls] ? bytes : u->bytes[cls];
}

long rdzv_quota_store_keys(const rdzv_quota *q, int n_members, int n_regions, int n_grants)
{
    return (long)n_members * q->keys[RDZV_KEY_OWN] + (long)n_regions * q->keys[RDZV_KEY_REJOIN] +
           (long)n_grants * q->keys[RDZV_KEY_PREFIX];
}
