// Puts the samples of a micro-batch on the device: draws them on the host by global sample
// index, stages them in pinned memory and copies them over asynchronously. Two slots alternate,
// each with a fence, so preparing a micro-batch waits only for the copy of the one before the
// previous, never for the whole device.
#pragma once
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/compute_fence.h"
#include "core/runtime.h"
#include "data/sample_source.h"

namespace trellis {

class BatchLoader {
 public:
  BatchLoader(Runtime& rt, const SampleSource& data, int64_t B, int64_t T);
  // Samples [first, first + B) of `split` as (inputs, targets), i32 (B, T) on the device.
  std::pair<Tensor, Tensor> load(Split split, int64_t first);

 private:
  Runtime& rt_;
  const SampleSource& data_;
  int64_t B_, T_;
  static constexpr int kSlots = 2;
  Buffer staging_, device_;       // kSlots x (inputs, targets)
  ComputeFence copied_[kSlots];   // the slot's host-to-device copy is done
  int next_ = 0;
  std::vector<int32_t> in_, tg_;
};

}  // namespace trellis
