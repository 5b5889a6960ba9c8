/* xdc_hash.c — thin wrappers over libxxhash so callers never include xxhash.h. */
#include "common/xdc_hash.h"

#include <xxhash.h>

uint64_t xdc_xxh64(const void *data, size_t len, uint64_t seed) { return XXH64(data, len, seed); }
uint64_t xdc_xxh3(const void *data, size_t len) { return XXH3_64bits(data, len); }

xdc_hash_state *xdc_hash64_create(uint64_t seed)
{
    XXH64_state_t *s = XXH64_createState();
    if (s) XXH64_reset(s, seed);
    return (xdc_hash_state *)s;
}

void xdc_hash64_update(xdc_hash_state *s, const void *data, size_t len)
{
    XXH64_update((XXH64_state_t *)s, data, len);
}

uint64_t xdc_hash64_digest(const xdc_hash_state *s) { return XXH64_digest((const XXH64_state_t *)s); }

void xdc_hash64_destroy(xdc_hash_state *s)
{
    if (s) XXH64_freeState((XXH64_state_t *)s);
}
