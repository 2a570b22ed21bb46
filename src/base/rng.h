/*
 * rng.h - splitmix64, the small deterministic generator for reproducible
 * synthetic inputs (random prompts of `run --batch-with`, bench-engine).
 * Not for sampling: the sampler keys its draws by (seed, position) itself.
 */
#ifndef INFERD_BASE_RNG_H
#define INFERD_BASE_RNG_H

#include <stdint.h>

/* Next value of the sequence whose state is *s (caller-owned). */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
