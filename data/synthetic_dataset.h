// Synthetic datasets keyed by global sample index, so the samples of a step are the same
// whatever the layout and the micro-batch split.
//   random:    uniform random tokens (for throughput runs; nothing to learn)
//   synthetic: a learnable task: each next token follows a fixed seeded permutation of the
//              vocabulary with probability 0.9, else is uniform, so the loss can fall from
//              ln(V) towards about 0.1 ln(V) + 0.33 with no data file at all.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/sample_source.h"

namespace trellis {

class SyntheticDataset : public SampleSource {
 public:
  SyntheticDataset(std::string kind, int64_t vocab_size, int64_t seq_len, uint64_t seed);

  // Writes sample `index` of `split`: inputs (seq_len) and next-token targets (seq_len).
  void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const override;
  int64_t vocab_size() const override { return vocab_; }
  int64_t seq_len() const override { return seq_len_; }
  // Fills (count, seq_len) inputs and targets with samples first .. first + count - 1.
  void batch(Split split, int64_t first, int64_t count, std::vector<int32_t>& inputs,
             std::vector<int32_t>& targets) const;
  // The lowest loss a perfect model can reach on the task (nats per token), for the docs/tests.
  double entropy_floor() const;

 private:
  std::string kind_;
  int64_t vocab_, seq_len_;
  uint64_t seed_;
  std::vector<int32_t> successor_;  // the permutation the learnable task follows
};

}  // namespace trellis
