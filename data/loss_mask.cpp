#include "data/loss_mask.h"

#include <vector>

namespace trellis {

void EodLossMask::sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const {
  inner_->sample(split, index, inputs, targets);
  for (int64_t t = 0, T = seq_len(); t < T; ++t)
    if (inputs[t] == eod_) targets[t] = -1;
}

int64_t count_targets(const SampleSource& data, Split split, int64_t first, int64_t count) {
  const int64_t T = data.seq_len();
  std::vector<int32_t> inputs(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  int64_t kept = 0;
  for (int64_t i = first; i < first + count; ++i) {
    data.sample(split, i, inputs.data(), targets.data());
    for (int32_t t : targets) kept += t >= 0;
  }
  return kept;
}

}  // namespace trellis
