/* xdc_hash.h — checksums over bytes, on libxxhash: XXH64 for the parameter hash that runs print
 * (params_xxh64), XXH3-64 for frame and chunk checks. Streaming form for hashing an arena in parts. */
#ifndef XDC_HASH_H
#define XDC_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t xdc_xxh64(const void *data, size_t len, uint64_t seed);
/* Fast check for frames, chunks and checkpoints. */
uint64_t xdc_xxh3(const void *data, size_t len);

typedef struct xdc_hash_state xdc_hash_state;
xdc_hash_state *xdc_hash64_create(uint64_t seed);
void xdc_hash64_update(xdc_hash_state *s, const void *data, size_t len);
uint64_t xdc_hash64_digest(const xdc_hash_state *s);
void xdc_hash64_destroy(xdc_hash_state *s);

/* Hand a running hash to another process of the same build (pipeline stages hash their parameter
 * arenas in turn, each continuing the state of the one before). XDC_HASH_STATE_BYTES bytes. */
#define XDC_HASH_STATE_BYTES 128
void xdc_hash64_export(const xdc_hash_state *s, void *buf);
void xdc_hash64_import(xdc_hash_state *s, const void *buf);

#endif /* XDC_HASH_H */
