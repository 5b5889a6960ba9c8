/* xdc_rng.h — the project's one deterministic PRNG (xoshiro256** seeded by splitmix64). Used for model
 * init, data shuffling, emulator jitter and tests, so a seed reproduces a run bit for bit. The state is
 * a plain struct so it can be checkpointed. */
#ifndef XDC_RNG_H
#define XDC_RNG_H

#include <stdint.h>

typedef struct xdc_rng {
    uint64_t s[4];
} xdc_rng;

void xdc_rng_seed(xdc_rng *r, uint64_t seed);
uint64_t xdc_rng_u64(xdc_rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t xdc_rng_below(xdc_rng *r, uint64_t n);
/* Uniform float in [0, 1). */
float xdc_rng_uniform(xdc_rng *r);
/* Standard normal (Box–Muller). */
float xdc_rng_normal(xdc_rng *r);

#endif /* XDC_RNG_H */
