// Puts the samples of a micro-batch on the device: draws them on the host by global sample
// index, stages them in pinned memory and copies them over.
#pragma once
#include <utility>
#include <vector>

#include "core/alloc.h"
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
  Buffer staging_, device_;
  std::vector<int32_t> in_, tg_;
};

}  // namespace trellis
