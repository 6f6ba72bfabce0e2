/* test_rng.h — the C tests' PRNG: splitmix64 over one state per test
 * program (header-only; each test includes it once). */
#ifndef VSA_TEST_RNG_H
#define VSA_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static uint64_t
rng_next(void)
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#endif
