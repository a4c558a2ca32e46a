// A seeded permutation of [0, n) evaluated one element at a time, without storing it: a Feistel
// network on the smallest even power of two >= n, cycle-walked back into range. Used to shuffle
// the windows of an epoch so sample i of any epoch costs O(1) time and no memory.
#pragma once
#include <cstdint>

#include "core/philox.h"

namespace trellis {

// The position of `i` (< n) under the permutation keyed by (seed, stream).
inline int64_t permute_index(int64_t i, int64_t n, uint64_t seed, uint64_t stream) {
  if (n <= 1) return 0;
  int half = 1;
  while ((int64_t(1) << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = uint64_t(i);
  do {  // x stays in [0, 4^half) and the walk returns to [0, n) in < 4 steps on average
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 6; ++round) {
      const uint64_t f = philox_word(seed, stream * 8 + round, right) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

}  // namespace trellis
