// Carving one op's scratch allocation (Runtime::scratch) into 256-byte aligned pieces, on the host.
#pragma once
#include <cstddef>

namespace trellis::gpu {

class ScratchPlan {
 public:
  // Reserves `bytes`; returns the piece's byte offset from the scratch base.
  size_t take(size_t bytes) {
    size_t at = (end_ + 255) / 256 * 256;
    end_ = at + bytes;
    return at;
  }
  size_t total() const { return end_ > 0 ? end_ : 1; }

 private:
  size_t end_ = 0;
};

}  // namespace trellis::gpu
