// The shape of a GPT-2 model and how it runs (compute dtype, dropout, activation checkpointing).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/rotary.h"
#include "moe/moe_config.h"

namespace trellis {

// What backward recomputes: nothing; the block (all but its input); the attention core (selective);
// the element-wise outputs, both layer norms' and the GELU's (elementwise).
enum class Checkpointing { none, full, selective, elementwise };

constexpr int64_t kVocabPadMultiple = 128;  // whatever the layout, so results do not depend on it
constexpr int64_t kMaxHeadSize = 256;       // model.head_dim's limit: the GPU's attention and QK-norm kernels'

// The dims of a head of size head_dim that partial rotary with `factor` turns (Hugging Face's
// int(head_dim x partial_rotary_factor)), as GPTConfig::rope_dims: 0 where that is the whole head.
inline int64_t partial_rope_dims(int64_t head_dim, double factor) {
  const int64_t dims = int64_t(double(head_dim) * factor);
  return dims >= head_dim ? 0 : dims;
}

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t seq_len = 1024;
  int64_t n_layers = 12;
  int64_t n_heads = 12;
  // Key-value heads: 0 = n_heads (multi-head attention), fewer for grouped-query attention (each
  // shared by n_heads / n_kv_heads query heads; 1 = multi-query).
  int64_t n_kv_heads = 0;
  int64_t d_model = 768;
  // The size of each attention head: 0 = d_model / n_heads; else decoupled from d_model (Qwen3's,
  // Gemma's), so q and the attention output are n_heads x head_size wide.
  int64_t head_size = 0;
  // QK-norm: an RMSNorm of every query and key head before the rotary turn, weights (head size) of its
  // own for q and for k (Qwen3's, OLMoE's; Dehghani et al. 2023).
  bool qk_norm = false;
  // Positions: a learned table wpe (GPT-2), or rotary embedding of q and k (RoPE, base rope_theta)
  // and no table.
  bool rope = false;
  double rope_theta = 10000.0;
  // Llama 3's frequency scaling, or with rope_linear every frequency divided by rope_factor, or with
  // rope_yarn YaRN's (core/rotary.h); rope_factor 1 = none.
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0, rope_original_positions = 8192.0;
  bool rope_linear = false, rope_yarn = false;
  // LongRoPE (rope_longrope): each pair's frequency divided by its factor, the long ones where seq_len
  // exceeds rope_original_positions, else the short ones (one a turned pair each); q and k scaled by
  // rope_attention_factor.
  bool rope_longrope = false;
  std::vector<double> rope_long_factors, rope_short_factors;
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0, rope_attention_factor = 1.0;  // YaRN's (and LongRoPE's factor)
  int64_t rope_dims = 0;  // partial rotary: each head's first rope_dims turn (RotaryFrequencies::dims); 0 = all
  // Sliding-window attention (Mistral's, Phi-3's): a query sees the last sliding_window positions,
  // its own included (AttentionHeads::window); 0 = every earlier position.
  int64_t sliding_window = 0;
  // Document masking of packed samples (data.document_mask; Megatron's --reset-attention-mask): the
  // token after each document_eod opens a new document, which no later token attends past. A training
  // setting, not the model's: never saved with it. -1 = none.
  int64_t document_eod = -1;
  // With document_eod, learned positions count from each document's start (data.reset_positions;
  // Megatron's --reset-position-ids); also a training setting.
  bool document_positions = false;
  // The dense MLP: GPT-2's GELU, or SwiGLU (Llama's: silu(gate) * up, the fc layer twice as wide,
  // [gate | up]). Experts are MLPs of the same kind and biases, of width moe.ffn_hidden (moe_config.h,
  // whose swiglu and bias must equal these: experts_match_model()).
  bool swiglu = false;
  int64_t ffn_hidden = 0;  // the dense MLP's hidden width F; 0 = 4 * d_model
  // The normalization of ln1, ln2 and lnf: GPT-2's LayerNorm (weight and bias), or RMSNorm (Llama's:
  // no mean subtracted, a weight only).
  bool rmsnorm = false;
  double norm_eps = 1e-5;  // added to the variance (LayerNorm) or the mean square (RMSNorm)
  // Biases in the blocks' linear layers (qkv, attn.proj, mlp.fc, mlp.proj): GPT-2's, or none (Llama's).
  bool bias = true;
  // With bias = false, biases on qkv alone (Qwen2's; Megatron's --add-qkv-bias).
  bool qkv_bias = false;
  // The head (logits = lnf(x) W^T): GPT-2's, W the token embedding wte itself (tied), or Llama's, a
  // matrix lm_head.w of its own (Vp, C), initialized and trained apart.
  bool tied_head = true;
  float dropout = 0.0f;            // embeddings and residual branches
  float attention_dropout = 0.0f;  // attention probabilities
  DType dtype = DType::f32;  // parameters and activations; statistics are f32
  DType grad_dtype = DType::f32;  // parameter gradients: f32, or dtype (train.grad_dtype)
  Checkpointing checkpointing = Checkpointing::none;
  // Blocks per virtual pipeline stage, in virtual-stage order (parallel.stage_layers); empty = the
  // balanced partition of GPT::pipeline_partition. Does not change the model, only its split.
  std::vector<int> stage_layers;
  MoEConfig moe;  // mixture-of-experts MLPs in some blocks ([moe]); experts = 0: none

  // The rotary frequencies for sequences of `length` positions (default seq_len): LongRoPE's long
  // factors past rope_original_positions, else the short ones (transformers' rule, which generation
  // follows as its sequence grows).
  RotaryFrequencies rotary(int64_t length = 0) const {
    RotaryFrequencies f(rope_theta);
    f.factor = rope_factor;
    f.low_freq_factor = rope_low_freq_factor;
    f.high_freq_factor = rope_high_freq_factor;
    f.original_positions = rope_original_positions;
    f.linear = rope_linear;
    f.yarn = rope_yarn;
    f.beta_fast = rope_beta_fast;
    f.beta_slow = rope_beta_slow;
    f.attention_factor = rope_attention_factor;
    f.dims = rope_dims;
    f.longrope = rope_longrope;
    if (rope_longrope) {
      const double positions = double(length > 0 ? length : seq_len);
      const std::vector<double>& pairs = positions > rope_original_positions ? rope_long_factors : rope_short_factors;
      for (size_t i = 0; i < pairs.size() && i < size_t(kMaxRotaryPairs); ++i) f.pair_factors[i] = pairs[i];
    }
    return f;
  }
  bool has_qkv_bias() const { return bias || qkv_bias; }
  int64_t padded_vocab() const { return (vocab_size + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple; }
  int64_t head_dim() const { return head_size > 0 ? head_size : d_model / n_heads; }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t attention_width() const { return n_heads * head_dim(); }  // q's and the attention output's: attn.proj's input
  int64_t qkv_width() const { return attention_width() + 2 * kv_heads() * head_dim(); }  // attn.qkv's output: [q | k | v]
  int64_t mlp_width() const { return ffn_hidden > 0 ? ffn_hidden : 4 * d_model; }  // F: mlp.proj's input
  int64_t fc_width() const { return (swiglu ? 2 : 1) * mlp_width(); }     // mlp.fc's output
  // The experts' MLP is the dense one's kind: copied into moe, which MoEMLP reads.
  void set_expert_mlp() {
    moe.swiglu = swiglu;
    moe.bias = bias;
  }
  bool experts_match_model() const { return moe.experts == 0 || (moe.swiglu == swiglu && moe.bias == bias); }
  // Parameters of the model as published (no vocabulary padding), a tied embedding counted once;
  // a block with experts counts its router, every expert and the shared MLP.
  int64_t parameter_count() const { return count_parameters(moe.experts); }
  // The vocabulary padding's rows: of wte and of an untied head.
  int64_t padding_parameter_count() const { return (tied_head ? 1 : 2) * (padded_vocab() - vocab_size) * d_model; }
  // The parameters one token's forward uses: a block with experts counts top_k of them (and the shared MLP).
  int64_t active_parameter_count() const { return count_parameters(moe.top_k); }
  // Model FLOPs per trained token: 6N + 12 L C T (REFERENCE.md; C the attention width, d_model unless
  // model.head_dim decouples it), N = active_parameter_count() less an untied token embedding (its
  // lookups are no matmul; tied, its N counts the head's). With a sliding window shorter than the
  // sequence a query attends to W keys, not T: 12 L C W.
  double flops_per_token() const {
    const int64_t lookup_only = tied_head ? 0 : vocab_size * d_model;
    const int64_t keys = sliding_window > 0 && sliding_window < seq_len ? sliding_window : seq_len;
    return 6.0 * double(active_parameter_count() - lookup_only) + 12.0 * double(n_layers * attention_width() * keys);
  }

 private:
  // An MLP of hidden width F of the model's kind: fc (F, SwiGLU 2F) and proj, with their biases where it has them.
  int64_t mlp_parameters(int64_t F) const {
    const int64_t fc = (swiglu ? 2 : 1) * F;
    return (fc * d_model + (bias ? fc : 0)) + (F * d_model + (bias ? d_model : 0));
  }
  int64_t count_parameters(int64_t experts_per_moe_block) const {
    const int64_t C = d_model, mlp = mlp_parameters(mlp_width());
    const int64_t expert = mlp_parameters(moe.expert_width(C));
    const int64_t norm = rmsnorm ? C : 2 * C;  // a norm's weight (and LayerNorm's bias)
    const int64_t linear_biases = (has_qkv_bias() ? qkv_width() : 0) + (bias ? C : 0);  // qkv's and attn.proj's
    const int64_t qk_norms = qk_norm ? 2 * head_dim() : 0;
    const int64_t per_layer = norm + qkv_width() * C + attention_width() * C + linear_biases + qk_norms + norm + mlp;
    const int64_t moe_layers = moe.layers(n_layers);
    const int64_t H = moe.shared_width(C), shared = (H > 0 ? mlp_parameters(H) : 0) + (moe.shared_gate ? C : 0);  // every token's
    const int64_t moe_extra = moe_layers * (moe.experts * C + experts_per_moe_block * expert - mlp + shared);
    return (tied_head ? 1 : 2) * vocab_size * C + (rope ? 0 : seq_len * C) + n_layers * per_layer + moe_extra + norm;
  }
};

}  // namespace trellis
