/*
 * rng.h - the random numbers of trainyard-worker: xoshiro256** seeded through splitmix64.
 *
 * Both generators are the published reference algorithms (Vigna, prng.di.unimi.it), so
 * every rank, and any other program that wants to reproduce a run, computes the same
 * stream from the same seed. The state is four 64-bit words and is saved in checkpoints.
 * Nothing here allocates or fails.
 */
#ifndef TY_RUNTIME_RNG_H
#define TY_RUNTIME_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct rng {
    uint64_t s[4];
} rng;

/* One step of splitmix64: advances *x and returns the next output. */
uint64_t rng_splitmix64(uint64_t *x);

/* Seeds xoshiro256** with four splitmix64 outputs of `seed` (never all zero). */
void rng_seed(rng *r, uint64_t seed);

/* Next xoshiro256** output. */
uint64_t rng_next(rng *r);

/* Uniform integer in [0, n) without modulo bias (Lemire's method); n > 0. */
uint64_t rng_below(rng *r, uint64_t n);

/* Uniform float in [0, 1), 24 random bits. */
float rng_uniform(rng *r);

/* Fills perm with a uniformly random permutation of 0..n-1 (Fisher-Yates, from the top). */
void rng_permutation(rng *r, uint32_t *perm, size_t n);

#endif
