// The peer collectives' freed-slot waits (peer_collectives.cpp), as a pure function so that the CPU
// tests check them. Chunks are numbered 1, 2, ... per communicator, the same on both ranks; chunk c
// goes through slot c % slots, whose previous chunk, c - slots, the peer must have added (freed)
// before c is pushed. The peer frees in chunk order, so one wait covers every chunk before the one
// waited for. Plain C++, no CUDA.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>

namespace trellis::gpu {

struct SlotWait {
  uint64_t slot_of;  // the chunk whose slot's freed flag is read (slot = slot_of % slots)
  uint64_t freed;    // the value it must reach: that slot's previous chunk
};

// Before pushing chunk `seq` of a tensor whose chunks are first .. first + chunks - 1: the wait to
// issue, if any. The first slots / 2 chunks share one wait (on the last of them), so half the slots
// stay in flight between back-to-back tensors; each later chunk waits for the chunk slots before it.
inline std::optional<SlotWait> slot_wait_before(uint64_t seq, uint64_t first, uint64_t chunks, uint64_t slots) {
  const uint64_t covered = first - 1 + std::min<uint64_t>(chunks, slots / 2);
  if (seq == first && covered > slots) return SlotWait{covered, covered - slots};
  if (seq > covered && seq > slots) return SlotWait{seq, seq - slots};
  return std::nullopt;
}

}  // namespace trellis::gpu
