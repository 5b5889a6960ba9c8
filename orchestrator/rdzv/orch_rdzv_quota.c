/* orch_rdzv_quota.c — per-member quotas of the rendezvous store (see orch_rdzv_quota.h). */
#include "orchestrator/rdzv/orch_rdzv_quota.h"

#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static const char *const class_names[RDZV_KEY_CLASSES] = {
    [RDZV_KEY_OWN] = "its own keys",
    [RDZV_KEY_REJOIN] = "its region's rejoin keys intra/<region>/<n>",
    [RDZV_KEY_GRANT] = "run-wide keys granted to it",
    [RDZV_KEY_PREFIX] = "keys under the prefixes granted to it",
};

void rdzv_quota_for_run(rdzv_quota *q, const rdzv_run_shape *shape)
{
    *q = (rdzv_quota){0};
    q->keys[RDZV_KEY_OWN] = RDZV_QUOTA_OWN_KEYS;
    q->bytes[RDZV_KEY_OWN] = (size_t)RDZV_QUOTA_OWN_KEYS * RDZV_VALUE_MAX;
    q->keys[RDZV_KEY_GRANT] = RDZV_QUOTA_GRANT_KEYS;
    q->bytes[RDZV_KEY_GRANT] = (size_t)RDZV_QUOTA_GRANT_KEYS * RDZV_VALUE_MAX;
    /* The counts come from the run file (steps up to INT_MAX): clamp before they become int key counts. */
    long rejoins = shape->rejoins < 0 ? 0 : shape->rejoins > INT_MAX / 2 ? INT_MAX / 2 : shape->rejoins;
    long replans = shape->replans < 0 ? 0 : shape->replans > INT_MAX / 2 ? INT_MAX / 2 : shape->replans;
    q->keys[RDZV_KEY_REJOIN] = (int)rejoins + RDZV_QUOTA_MARGIN;
    q->bytes[RDZV_KEY_REJOIN] = (size_t)q->keys[RDZV_KEY_REJOIN] * RDZV_QUOTA_PREFIX_VALUE;
    q->keys[RDZV_KEY_PREFIX] = (int)replans + RDZV_QUOTA_MARGIN;
    q->bytes[RDZV_KEY_PREFIX] = (size_t)q->keys[RDZV_KEY_PREFIX] * RDZV_QUOTA_PREFIX_VALUE;
}

void rdzv_quota_init(rdzv_quota *q) { rdzv_quota_for_run(q, &RDZV_SHAPE_DEFAULT); }

rdzv_key_class rdzv_quota_classify(const char *member, const char *key)
{
    rdzv_key_parts k;
    if (rdzv_key_parse(key, &k) != XDC_OK) return RDZV_KEY_OWN;
    size_t region = strcspn(member, "/"); /* "region/host:rank" */
    switch (k.kind) {
    case RDZV_KIND_INTRA_AFTER:
        return strlen(k.name) == region && strncmp(k.name, member, region) == 0 ? RDZV_KEY_REJOIN : RDZV_KEY_OWN;
    case RDZV_KIND_REPLAN: return RDZV_KEY_PREFIX;
    case RDZV_KIND_FINISHED:
    case RDZV_KIND_RESULT: return RDZV_KEY_GRANT;
    default: return RDZV_KEY_OWN;
    }
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
