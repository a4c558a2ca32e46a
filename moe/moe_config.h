// The shape of a mixture-of-experts MLP (the [moe] config section): how many experts, how many a
// token goes to, how many tokens an expert takes, which blocks have one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace trellis {

struct MoEConfig {
  int64_t experts = 0;             // 0: every block's MLP is dense
  int64_t top_k = 2;               // experts per token
  double capacity_factor = 1.25;   // an expert's slots per micro-batch: factor x top_k x tokens / experts
  bool dropless = false;           // no capacity: every choice computed, experts' rows packed (moe.dropless)
  float aux_loss_coef = 0.01f;     // weight of the load-balancing loss (Switch Transformer)
  float z_loss_coef = 0.0f;        // weight of the router z-loss (ST-MoE): mean of log(sum exp(logits))^2
  int64_t layer_freq = 1;          // block l has experts when l % layer_freq == 0 ...
  int64_t first_dense = 0;         // ... and l >= first_dense (moe.first_dense_layers, DeepSeekMoE's first_k_dense_replace)
  int64_t shared_experts = 0;      // expert-sized MLPs every token also goes through, as one MLP this many experts wide
  bool shared_gate = false;        // the shared MLP's output times sigmoid(x . w) per token (Qwen1.5/2-MoE's shared_expert_gate)
  int64_t expert_parallel = 1;     // experts split over this many data-parallel ranks
  int64_t ffn_hidden = 0;          // an expert's hidden width F (moe.ffn_hidden_size); 0 = 4 x d_model
  bool renormalize = true;         // top_k > 1: gates divided by the chosen probabilities' sum (moe.renormalize)
  // The experts' MLP, as the model's dense one (model.mlp, model.bias): GPT-2's fc -> GELU -> proj with
  // biases, or SwiGLU (Mixtral's, Qwen-MoE's, DeepSeek's: fc is [gate | up], 2F wide), with or without.
  bool swiglu = false;
  bool bias = true;

  bool in_layer(int64_t layer) const { return experts > 0 && layer >= first_dense && layer % layer_freq == 0; }
  // The blocks with experts: the multiples of layer_freq in [first_dense, n_layers).
  int64_t layers(int64_t n_layers) const {
    if (experts == 0 || n_layers <= first_dense) return 0;
    return (n_layers - 1) / layer_freq - (first_dense + layer_freq - 1) / layer_freq + 1;
  }
  // Whether every block has experts (so none has the dense MLP).
  bool every_block() const { return experts > 0 && layer_freq == 1 && first_dense == 0; }
  int64_t local_experts() const { return experts / expert_parallel; }
  // An expert's hidden width F (proj's input), and its fc's output (SwiGLU: 2F).
  int64_t expert_width(int64_t d_model) const { return ffn_hidden > 0 ? ffn_hidden : 4 * d_model; }
  int64_t expert_fc_width(int64_t d_model) const { return (swiglu ? 2 : 1) * expert_width(d_model); }
  // The shared MLP's hidden width (0: none): shared_experts experts' widths.
  int64_t shared_width(int64_t d_model) const { return shared_experts * expert_width(d_model); }
  // Slots per expert for a micro-batch of `tokens` tokens: at least 1, at most every token (which
  // dropless routing is: no choice is dropped).
  int64_t capacity(int64_t tokens) const {
    if (dropless) return tokens;
    const double c = capacity_factor * double(top_k) * double(tokens) / double(experts);
    return std::clamp<int64_t>(int64_t(std::ceil(c)), 1, tokens);
  }
  // The rows of the experts' tensors for a micro-batch: every expert's slots, or dropless one a choice.
  int64_t slots(int64_t tokens) const { return dropless ? tokens * top_k : experts * capacity(tokens); }
  // The rows of this rank's experts' tensors: the slots, or dropless with expert parallelism the most
  // its experts can receive (every token of the expert group choosing min(top_k, local experts) of
  // them: the memory plan's bound, expert_parallel x min(top_k, local experts) / top_k x the slots).
  int64_t expert_rows(int64_t tokens) const {
    if (!dropless || expert_parallel == 1) return slots(tokens);
    return expert_parallel * tokens * std::min(top_k, local_experts());
  }
  // The experts' GEMM rows per token (an upper bound with a capacity, of which empty slots are part).
  double rows_per_token() const { return dropless ? double(top_k) : capacity_factor * double(top_k); }
};

}  // namespace trellis
