// The peer all-reduce's freed-slot waits (core/cuda/peer_slot_waits.h), checked on the CPU over a
// run of tensors of random chunk counts: no chunk overwrites a slot the peer may still read, no wait
// asks for a chunk not yet pushed (or less than half the slots behind), and a tensor of at most half
// the slots waits once at most.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "core/cuda/peer_slot_waits.h"

namespace trellis::gpu {
namespace {

TEST(PeerSlotWaits, EverySlotFreedBeforeReuseWithHalfTheSlotsInFlight) {
  for (uint64_t slots : {2u, 4u, 8u, 16u}) {
    std::mt19937 rng{uint32_t(slots)};
    uint64_t seq = 0;      // chunks pushed so far
    uint64_t waited = 0;   // the peer has freed every chunk <= this (freeing is in chunk order)
    for (int tensor = 0; tensor < 500; ++tensor) {
      const uint64_t chunks = 1 + rng() % (3 * slots), first = seq + 1;
      int waits = 0;
      for (uint64_t c = first; c < first + chunks; ++c) {
        if (const auto w = slot_wait_before(c, first, chunks, slots)) {
          ++waits;
          ASSERT_EQ(w->freed + slots, w->slot_of) << "a slot's previous chunk";
          ASSERT_LE(w->freed + slots / 2 + 1, c) << "a wait for a chunk not pushed, or too recent to pipeline";
          waited = std::max(waited, w->freed);
        }
        if (c > slots) {
          ASSERT_GE(waited, c - slots) << "chunk " << c << " would overwrite a slot not yet freed";
        }
        seq = c;
      }
      if (chunks <= slots / 2) {
        EXPECT_LE(waits, 1) << chunks << " chunks";
      }
    }
  }
}

TEST(PeerSlotWaits, ATensorOfHalfTheSlotsWaitsOnceOnItsLastSlot) {
  // 8 slots, chunks 21-24 of a 4-chunk tensor: one wait, before chunk 21, on chunk 24's slot for 16.
  const auto w = slot_wait_before(21, 21, 4, 8);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->slot_of, 24u);
  EXPECT_EQ(w->freed, 16u);
  for (uint64_t c = 22; c <= 24; ++c) EXPECT_FALSE(slot_wait_before(c, 21, 4, 8).has_value());
  // The first tensors of a run need no wait until a slot comes round again.
  EXPECT_FALSE(slot_wait_before(1, 1, 4, 8).has_value());
  EXPECT_FALSE(slot_wait_before(8, 5, 4, 8).has_value());
  EXPECT_EQ(slot_wait_before(9, 9, 4, 8)->freed, 4u);
}

}  // namespace
}  // namespace trellis::gpu
