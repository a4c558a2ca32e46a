// GPT-2: token + position embedding -> n_layers pre-LN blocks -> final LayerNorm -> LM head tied
// to the token embedding, with a cross-entropy loss over the padded vocabulary (padding masked).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "models/gpt_config.h"
#include "core/parameters.h"
#include "models/transformer_block.h"

namespace trellis {

// Activation memory one micro-batch of (B, T) needs, by part.
struct ActivationBytes {
  size_t kept = 0;   // kept from forward to backward
  size_t work = 0;   // temporaries of one block or of one head chunk at a time
  size_t total() const { return kept + work; }
};

class GPT {
 public:
  // Builds the parameter store and the activation arenas for micro-batches of (B, T).
  GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch);

  static std::vector<ParameterSpec> parameter_specs(const GPTConfig& cfg);
  static ActivationBytes activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T);

  void initialize(uint64_t seed) { params_.initialize(seed); }
  ParameterStore& params() { return params_; }
  const GPTConfig& config() const { return cfg_; }

  // Called during backward with [begin, end) element ranges of the flat gradient buffer whose
  // gradients are final for this micro-batch (data-parallel reduction can start on them).
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;

  // Forward, loss and backward of one micro-batch. tokens, targets: i32 (B, T) on the device.
  // Gradients of dloss * sum(losses) are added to the gradient buffer; sum(losses) is added to
  // loss_sum (f32 scalar on the device). No host synchronization.
  void forward_backward(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                        const Tensor& loss_sum, const GradsReady& grads_ready = nullptr);
  // Forward and loss only (validation): adds sum(losses) to loss_sum.
  void forward_loss(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum);

  // Peak bytes used in the activation arenas so far.
  size_t activation_peak() const { return acts_.peak() + work_.peak(); }

 private:
  // Runs embedding and blocks; returns the final LayerNorm output (B*T, C).
  Tensor forward_trunk(const StepContext& ctx, const Tensor& tokens);
  // Head over row chunks: logits, loss (and, if backward, dlogits -> dwte, dlnf).
  void head(const Tensor& targets, float dloss, const Tensor& loss_sum, bool backward);
  DropoutKey embedding_dropout_key(const StepContext& ctx, int64_t T) const;
  // [begin, end) of the parameters whose names start with `prefix` (contiguous by construction).
  std::pair<int64_t, int64_t> range_of(const std::string& prefix) const;

  Runtime& rt_;
  GPTConfig cfg_;
  int64_t micro_batch_;
  ParameterStore params_;
  std::vector<TransformerBlock> blocks_;
  std::vector<BlockSaved> saved_;
  Arena acts_;   // kept activations of the micro-batch in flight
  Arena work_;   // temporaries, reset after each block
  Buffer dres_buf_;  // gradient of the residual stream (B, T, C)
  // Kept by the trunk for the head and its backward.
  Tensor lnf_out_, lnf_mean_, lnf_rstd_, final_x_, dlnf_;
  // Gradient ranges reported to GradsReady: blocks by layer, then lnf, wte, wpe.
  std::vector<std::pair<int64_t, int64_t>> block_ranges_;
  std::pair<int64_t, int64_t> lnf_range_, wte_range_, wpe_range_;
};

}  // namespace trellis
