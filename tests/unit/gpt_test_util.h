// What the GPT model tests share (gpt_test, moe_test): a batch of the synthetic "random" source, and
// one micro-batch's loss and gradients, or its loss alone, on the CPU.
#pragma once
#include <cstdint>
#include <vector>

#include "data/synthetic_dataset.h"
#include "models/gpt.h"

namespace trellis::gpt_testing {

struct Batch {
  std::vector<int32_t> tokens, targets;
};

inline Batch make_batch(const GPTConfig& c, int64_t B) {
  SyntheticDataset data("random", c.vocab_size, c.seq_len, 7);
  Batch b;
  data.batch(Split::train, 0, B, b.tokens, b.targets);
  return b;
}

// Loss (mean over tokens) and gradients of one micro-batch.
struct Result {
  double loss;
  std::vector<float> grads;
};

inline Result run(GPT& model, const Batch& batch, int64_t B, const StepContext& ctx) {
  const GPTConfig& c = model.config();
  Tensor tokens(const_cast<int32_t*>(batch.tokens.data()), DType::i32, Device::CPU(), {B, c.seq_len});
  Tensor targets(const_cast<int32_t*>(batch.targets.data()), DType::i32, Device::CPU(), {B, c.seq_len});
  float loss_sum = 0;
  Tensor ls(&loss_sum, DType::f32, Device::CPU(), {1});
  model.params().zero_grads();
  const double n = double(B * c.seq_len);
  model.forward_backward(ctx, tokens, targets, float(1.0 / n), ls);
  Result r;
  r.loss = loss_sum / n;
  Tensor g = model.params().flat_grads();
  r.grads.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
  return r;
}

inline double loss_only(GPT& model, const Batch& batch, int64_t B, const StepContext& ctx) {
  const GPTConfig& c = model.config();
  Tensor tokens(const_cast<int32_t*>(batch.tokens.data()), DType::i32, Device::CPU(), {B, c.seq_len});
  Tensor targets(const_cast<int32_t*>(batch.targets.data()), DType::i32, Device::CPU(), {B, c.seq_len});
  float loss_sum = 0;
  Tensor ls(&loss_sum, DType::f32, Device::CPU(), {1});
  model.forward_loss(ctx, tokens, targets, ls);
  return loss_sum / double(B * c.seq_len);
}

}  // namespace trellis::gpt_testing
