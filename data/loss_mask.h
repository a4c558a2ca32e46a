// Which targets a sample's loss counts. Megatron's --eod-mask-loss (data.eod_mask_loss): the
// target after an end-of-document token is the next document's first token, which nothing before
// it predicts, so it is left out (-1, no target) and the loss is the mean over the targets kept.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "data/sample_source.h"

namespace trellis {

// The samples of `inner`, with target -1 wherever the input is `eod`.
class EodLossMask : public SampleSource {
 public:
  EodLossMask(std::unique_ptr<SampleSource> inner, int32_t eod) : inner_(std::move(inner)), eod_(eod) {}
  void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const override;
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t seq_len() const override { return inner_->seq_len(); }
  std::string identity() const override { return inner_->identity(); }
  int64_t distinct_samples(Split s) const override { return inner_->distinct_samples(s); }

 private:
  std::unique_ptr<SampleSource> inner_;
  int32_t eod_;
};

// The targets (not -1) of samples [first, first + count) of `split`: what the mean loss over them
// divides by. Draws the samples, so every rank gets the same count for the same samples, whatever
// part of them it trains on.
int64_t count_targets(const SampleSource& data, Split split, int64_t first, int64_t count);

}  // namespace trellis
