// GPT-2 inference with a KV cache: prefill a batch of prompts, then decode one token per step,
// each returning the last position's logits (host f32); plus seeded host-side sampling. Blocks with
// experts route every token without dropping any (a slot for every token at every expert).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/alloc.h"
#include "core/parameters.h"
#include "models/gpt_config.h"
#include "moe/moe_mlp.h"

namespace trellis {

class GPTInference {
 public:
  // Caches for `batch` sequences of up to max_len (<= cfg.seq_len) positions, in cfg.dtype.
  GPTInference(Runtime& rt, const GPTConfig& cfg, int64_t batch, int64_t max_len);

  ParameterStore& params() { return params_; }
  const GPTConfig& config() const { return cfg_; }
  int64_t batch() const { return B_; }
  int64_t position() const { return pos_; }  // tokens in the cache per sequence

  // Forgets the cache and runs tokens (B * n, row-major (B, n)) from position 0.
  // Returns the logits of the last position, (B, padded_vocab) f32, on the host.
  std::vector<float> prefill(const std::vector<int32_t>& tokens, int64_t n);
  // Appends one token per sequence (B) at position(); returns its logits like prefill.
  std::vector<float> step(const std::vector<int32_t>& tokens);

 private:
  std::vector<float> forward(const std::vector<int32_t>& tokens, int64_t n);

  Runtime& rt_;
  GPTConfig cfg_;
  int64_t B_, max_len_, pos_ = 0;
  ParameterStore params_;
  std::vector<Buffer> k_cache_, v_cache_;  // per layer (B, max_len, C)
  Arena acts_;  // tokens, the residual stream (ping-pong) and the head of one forward
  Arena work_;  // temporaries of one block
  std::vector<std::optional<MoEMLP>> experts_;  // per layer: the block's experts, if it has them
};

struct SamplingOptions {
  float temperature = 1.0f;  // <= 0: greedy (argmax)
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 1;
  int64_t vocab = 0;  // generate() draws ids < vocab only (0: the model's vocab_size), e.g. a smaller text vocabulary
};

// A token from one row of logits over the real vocabulary [0, vocab) (padding never drawn).
// The uniform draw is Philox keyed by (seed, step, row), so a run repeats exactly.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& opt, uint64_t step, uint64_t row);

// Continues every prompt by n_new tokens (returns only the new ones). Prompts may differ in
// length: the batch is prefilled with the shortest length, and rows whose prompt is longer are
// fed their own next prompt token (instead of a sample) until it is used up, so every row keeps
// one position per step. Needs max prompt length + n_new - 1 <= the model's max_len.
std::vector<std::vector<int32_t>> generate(GPTInference& model, const std::vector<std::vector<int32_t>>& prompts,
                                           int64_t n_new, const SamplingOptions& opt);

}  // namespace trellis
