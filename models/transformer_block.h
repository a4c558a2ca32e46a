// One pre-LayerNorm GPT-2 block with explicit forward and backward:
//   r = x + drop(proj(attn(ln1(x))));  y = r + drop(fc2(gelu(fc1(ln2(r)))))
// What backward needs is kept in BlockSaved; with activation checkpointing part of it is dropped
// after forward and recomputed in backward.
#pragma once
#include <cstdint>

#include "core/alloc.h"
#include "core/ops.h"
#include "models/gpt_config.h"
#include "core/parameters.h"

namespace trellis {

// Which micro-batch this is, so dropout masks are keyed by global indices.
struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;           // optimizer step (1-based)
  int64_t sample_offset = 0;  // global index of the micro-batch's first sample
  bool training = true;       // dropout only while training
};

// The parameters of block `layer`, as views into the store.
struct BlockParams {
  const Parameter *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  const Parameter *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
};

// Activations of one block for one micro-batch. Shapes: (B, T, C) unless noted.
struct BlockSaved {
  Tensor x;                      // block input (always kept; the previous block's output)
  Tensor ln1, ln1_mean, ln1_rstd;  // stats f32 (B*T)
  Tensor qkv;                    // (B, T, 3C)
  Tensor att, lse;               // attention output; lse f32 (B, H, T)
  Tensor r;                      // residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor h, g;                   // (B, T, 4C): fc output and its GELU
};

class TransformerBlock {
 public:
  TransformerBlock(const GPTConfig& cfg, int layer, const BlockParams& p) : cfg_(cfg), layer_(layer), p_(p) {}

  // The parameter specs of block `layer`, in buffer order.
  static void append_specs(const GPTConfig& cfg, int layer, std::vector<ParameterSpec>& out);

  // y = block(x). Kept activations are taken from `keep`, the rest from `temp` (which the caller
  // may reset once forward returns).
  void forward(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y, BlockSaved& s,
               Arena& keep, Arena& temp) const;
  // dres holds dL/dy on entry and dL/dx on return (accumulated in place). Parameter gradients are
  // added into the store's gradient buffer. `work` is reset by the caller after each block.
  void backward(Runtime& rt, const StepContext& ctx, const Tensor& dres, BlockSaved& s, Arena& work) const;

  // Elements of activations kept per block (B*T*C units and f32 extras), for arena sizing.
  static size_t kept_bytes(const GPTConfig& cfg, int64_t B, int64_t T);
  static size_t work_bytes(const GPTConfig& cfg, int64_t B, int64_t T);

 private:
  DropoutKey dropout_key(const StepContext& ctx, int site, int64_t T) const;
  AttentionDropout attention_dropout(const StepContext& ctx) const;
  void attention_part(Runtime& rt, const StepContext& ctx, BlockSaved& s, Arena& a) const;  // att, lse from qkv
  void forward_into(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y, BlockSaved& s,
                    Arena& keep, Arena& temp, bool keep_attention, bool keep_rest) const;

  const GPTConfig& cfg_;
  int layer_;
  BlockParams p_;
};

}  // namespace trellis
