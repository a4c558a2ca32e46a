// One pre-LayerNorm GPT-2 block with explicit forward and backward:
//   r = x + drop(proj(attn(ln1(x))));  y = r + drop(fc2(gelu(fc1(ln2(r)))))
// fc1 is C -> F (F = model.ffn_hidden_size, 4C by default); with model.mlp = swiglu it is twice as
// wide, [gate | up], and gelu(.) is silu(gate) * up.
// What backward needs is kept in BlockSaved; with activation checkpointing part of it is dropped
// after forward and recomputed in backward.
//
// Tensor parallelism (Megatron's intra-layer split over a group of t ranks): qkv and fc are
// column-parallel (rank r holds heads [r*H/t, (r+1)*H/t) and columns [r*F/t, (r+1)*F/t) of the
// MLP; SwiGLU's fc holds those columns of both gate and up), attn.proj and mlp.proj row-parallel; attention runs on the local heads. Without sequence
// parallelism the block's input and output are the full (B, T, C) activation on every rank; with
// it they are this rank's token shard, rows [r*N/t, (r+1)*N/t) of the flattened (N = B*T, C)
// activation, and LayerNorm, dropout and the residual adds run on the shard. Dropout masks are the
// matching part of the full layout's masks, so the results do not depend on t.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/parameters.h"
#include "models/gpt_config.h"
#include "moe/moe_mlp.h"
#include "parallel/tensor/context.h"
#include "parallel/tensor/layers.h"

namespace trellis {

// Which micro-batch this is, so dropout masks are keyed by global indices.
struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;           // optimizer step (1-based)
  int64_t sample_offset = 0;  // global index of the micro-batch's first sample
  bool training = true;       // dropout only while training
  // Tokens per sample of the micro-batch. Needed (> 0) when the block's activations are token
  // shards (sequence parallelism), which do not show the (B, T) split; otherwise x's shape gives it.
  int64_t seq_len = 0;
  // d(objective)/d(each MoE block's balancing loss) for this micro-batch: moe.aux_loss_coef x the
  // loss gradient's scale x its tokens (the mean over micro-batches, as the language-model loss)
  // x target_share.
  float moe_aux_scale = 0.0f;
  // d(objective)/d(each MoE block's z-loss), alike with moe.z_loss_coef.
  float moe_z_scale = 0.0f;
  // The step's targets kept over its tokens (1 unless some are left out: data.eod_mask_loss, a loss
  // mask). The optimizer takes the gradients as those of a mean over the targets kept (its
  // kLossScale), so the routers' losses, which average over every token, are weighted by it to keep
  // their coefficients.
  float target_share = 1.0f;
  // Defined (f32 (3) on the device): each MoE block's forward adds its balancing loss, dropped
  // choices and z-loss (moe_statistics), for the log; a recomputation does not.
  Tensor moe_stats;
  // Document masking (GPTConfig::document_eod): i32 (B, T) on the device, where each token's document
  // starts in its sample (AttentionHeads::doc_starts); undefined = none.
  Tensor doc_starts;
};

// The parameters of block `layer`, as views into the store.
struct BlockParams {
  const Parameter *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *proj_w = nullptr,
                  *proj_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
  const Parameter *q_norm_w = nullptr, *k_norm_w = nullptr;  // model.qk_norm's
  const Parameter *fc_w = nullptr, *fc_b = nullptr, *fc_proj_w = nullptr, *fc_proj_b = nullptr;  // a dense MLP
  MoEParams moe;  // or a mixture of experts (router_w set)

  // Block `layer`'s parameters in `store`, by the names TransformerBlock::append_specs gives them
  // (expert_rank: which experts this rank holds, see MoEMLP).
  static BlockParams of(const ParameterStore& store, const GPTConfig& cfg, int layer, int expert_rank = 0);
};

// Activations of one block for one micro-batch. Shapes: (B, T, C) unless noted (att: (B, T, H hd), C
// unless model.head_dim decouples it); under tensor parallelism C, 3C, F and H of the tensor-parallel
// region (qkv, att, lse, h, g) are the local C/t, 3C/t, F/t and H/t, and with sequence parallelism x, ln1, r, ln2 and the stats are this
// rank's (N/t, C) token shard.
struct BlockSaved {
  Tensor x;                      // block input (always kept; the previous block's output)
  Tensor ln1, ln1_mean, ln1_rstd;  // stats f32 (B*T)
  Tensor qkv;                    // (B, T, 3C): what attention reads (after QK-norm and the rotary turn)
  // With QK-norm: qkv's linear output and the norms' f32 (B, T, H + Hkv), kept; qkv is then a temporary,
  // made again from them for backward (qkv_again).
  Tensor qkv_in, qk_rstd;
  Tensor att, lse;               // attention output; lse f32 (B, H, T)
  Tensor r;                      // residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor h, g;                   // fc output (B, T, F; SwiGLU 2F) and its activation (B, T, F)
  MoESaved moe;                  // a mixture of experts instead

  // Part `i` of `parts` equal parts of the samples (views): what the batch split runs on.
  BlockSaved part(int i, int parts) const;
};

// Under the batch split (TensorParallelContext::split_batch) the all-reduces that finish each half
// of a block's output are still in flight when forward returns. Passed from block to block, the
// next block waits for each half just before reading it, so one half's reduction runs while the
// other half computes; whoever reads the last block's output calls wait().
struct PendingOutput {
  CommHandle half[2];
  void wait() {
    for (CommHandle& h : half) h.wait();
  }
};

class TransformerBlock {
 public:
  // `p` are this rank's parameters, made by append_specs with the same `tp` (checked). `experts`:
  // the expert group of a block with experts, when moe.expert_parallel > 1.
  TransformerBlock(const GPTConfig& cfg, int layer, const BlockParams& p, const TensorParallelContext& tp = {},
                   Communicator* experts = nullptr);

  // The parameter specs of block `layer`, in buffer order; with tp.size > 1 this rank's shards
  // (qkv.w/b column-split in 3 groups, attn.proj.w row-split, mlp.fc.w/b column-split (SwiGLU: 2 groups),
  // mlp.proj.w row-split; LayerNorms and the two proj biases replicated). Only tp.size and
  // tp.rank are used.
  // A block with experts (moe.in_layer) has MoEMLP's parameters in place of mlp.*: those of expert
  // rank `expert_rank`.
  static void append_specs(const GPTConfig& cfg, int layer, std::vector<ParameterSpec>& out,
                           const TensorParallelContext& tp = {}, int expert_rank = 0);
  // UserError unless a tensor group of `tensor` ranks can split the block (n_heads and 4*d_model).
  static void check_tensor_parallel(const GPTConfig& cfg, int tensor);

  // y = block(x). Kept activations are taken from `keep`, the rest from `temp` (which the caller
  // may reset once forward returns). With sequence parallelism x and y are this rank's (N/t, C)
  // token shards and ctx.seq_len must be set. With `pending`, x's halves are waited for on it as
  // they are needed and it returns holding y's (see PendingOutput); without, y is complete.
  void forward(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y, BlockSaved& s,
               Arena& keep, Arena& temp, PendingOutput* pending = nullptr) const;
  // dres holds dL/dy on entry and dL/dx on return (accumulated in place). Parameter gradients are
  // added into the store's gradient buffer. `work` is reset by the caller after each block.
  void backward(Runtime& rt, const StepContext& ctx, const Tensor& dres, BlockSaved& s, Arena& work) const;

  // The parameters whose gradients are partial sums on each tensor rank after backward and must
  // be all-reduced (summed) over the tensor group once per step, after the last micro-batch's
  // backward and before the gradient norm: the LayerNorms under sequence parallelism (applied to
  // token shards), and QK-norm's weights (each rank's heads). Every other replicated gradient is
  // already equal on all ranks.
  std::vector<const Parameter*> tensor_partial_grads() const;
  // The parameters whose gradients backward writes through grad_accumulates (so the store can leave
  // them unzeroed, ParameterStore::write_first): all of the block's, here or in the tensor-parallel
  // layers.
  std::vector<const Parameter*> first_written_grads() const;

  // Bytes of activations kept per block and of its temporaries, for arena sizing (local sizes
  // under tensor parallelism; with sequence parallelism the temporaries include the gathered
  // full-size (N, C) inputs and partial sums of the parallel linears).
  // `moe`: of a block with experts. work_bytes covers either kind the model has.
  static size_t kept_bytes(const GPTConfig& cfg, int64_t B, int64_t T, const TensorParallelContext& tp = {},
                           bool moe = false);
  static size_t work_bytes(const GPTConfig& cfg, int64_t B, int64_t T, const TensorParallelContext& tp = {});

 private:
  struct Tokens {
    int64_t B, T, rows, row_offset;  // rows: this rank's token rows; row_offset: the first's global row
  };
  Tokens tokens_of(const StepContext& ctx, const Tensor& x) const;
  DropoutKey dropout_key(const StepContext& ctx, int site, const Tokens& n) const;
  AttentionDropout attention_dropout(const StepContext& ctx) const;
  AttentionHeads local_heads() const;  // this rank's query and key-value heads
  // The same for the attention core of ctx's micro-batch (its document starts, with document masking).
  AttentionHeads attention_heads(const StepContext& ctx) const;
  // How many parts of the samples forward runs in: 2 under the batch split (an even micro-batch
  // without sequence parallelism), else 1.
  int batch_parts(const Tokens& n) const;
  // ctx for part i of `parts` of the micro-batch (its first sample's global index).
  static StepContext part_context(const StepContext& ctx, const Tokens& n, int i, int parts);
  void attention_part(Runtime& rt, const StepContext& ctx, BlockSaved& s, Arena& a) const;  // att, lse from qkv
  // s.qkv as attention reads it: with QK-norm normed from s.qkv_in (its statistics into s.qk_rstd),
  // then turned by the rotary positions (in place).
  void attention_input(Runtime& rt, const BlockSaved& s) const;
  // With QK-norm: s.qkv (from `a`) made again from s.qkv_in, as forward made it.
  void qkv_again(Runtime& rt, BlockSaved& s, Arena& a) const;
  // The two halves of forward on one part of the samples: ln1 .. the attention projection, whose
  // all-reduce the returned handle is (into s.r, or `branch` with dropout or sequence parallelism);
  // and ln2 .. the MLP projection (into y, or `branch`; nothing with y undefined).
  CommHandle attention_half(Runtime& rt, const StepContext& ctx, BlockSaved& s, const Tensor& branch,
                            Arena& temp) const;
  // What backward needs of a mixture of experts goes to `keep`.
  CommHandle mlp_half(Runtime& rt, const StepContext& ctx, BlockSaved& s, const Tensor& branch, const Tensor& y,
                      Arena& keep, Arena& temp) const;
  // Whether the residual branches drop out in this forward: training with model.dropout.
  bool dropout_on(const StepContext& ctx) const { return ctx.training && cfg_.dropout > 0.0f; }
  // Dropout on the residual branches, or the residual adds as the projections' GEMM epilogues.
  bool residual_in_gemm(const StepContext& ctx) const;
  // y undefined: stop once what backward needs is computed (the recomputation of full checkpointing).
  // What is kept goes to `keep`, the rest to `temp`: att and lse with keep_attention, everything else
  // with keep_rest, of which ln1, ln2 and g only with keep_elementwise too.
  void forward_into(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y, BlockSaved& s,
                    Arena& keep, Arena& temp, bool keep_attention, bool keep_rest, bool keep_elementwise,
                    PendingOutput* pending = nullptr) const;

  const GPTConfig& cfg_;
  int layer_;
  BlockParams p_;
  TensorParallelContext tp_;
  // Set when tp_.size > 1.
  std::optional<ColumnParallelLinear> qkv_, fc_;
  std::optional<RowParallelLinear> proj_, fc_proj_;
  std::optional<MoEMLP> moe_;  // a block with experts
};

}  // namespace trellis
