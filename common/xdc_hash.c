/* xdc_hash.c — thin wrappers over libxxhash so callers never include xxhash.h. */
#include "common/xdc_hash.h"

#define XXH_STATIC_LINKING_ONLY /* the state struct, to copy it between processes */
#include <xxhash.h>

#include <string.h>

_Static_assert(sizeof(XXH64_state_t) <= XDC_HASH_STATE_BYTES, "XDC_HASH_STATE_BYTES too small");

uint64_t xdc_xxh64(const void *data, size_t len, uint64_t seed) { return XXH64(data, len, seed); }
uint64_t xdc_xxh3(const void *data, size_t len) { return XXH3_64bits(data, len); }

xdc_hash_state *xdc_hash64_create(uint64_t seed)
{
    XXH64_state_t *s = XXH64_createState();
    if (s) XXH64_reset(s, seed);
    return (xdc_hash_state *)s;
}

void xdc_hash64_update(xdc_hash_state *s, const void *data, size_t len) { XXH64_update((XXH64_state_t *)s, data, len); }

uint64_t xdc_hash64_digest(const xdc_hash_state *s) { return XXH64_digest((const XXH64_state_t *)s); }

void xdc_hash64_destroy(xdc_hash_state *s)
{
    if (s) XXH64_freeState((XXH64_state_t *)s);
}

void xdc_hash64_export(const xdc_hash_state *s, void *buf)
{
    memset(buf, 0, XDC_HASH_STATE_BYTES);
    memcpy(buf, s, sizeof(XXH64_state_t));
}

void xdc_hash64_import(xdc_hash_state *s, const void *buf) { memcpy(s, buf, sizeof(XXH64_state_t)); }
