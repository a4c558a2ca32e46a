// The ops: one signature each, dispatching on the tensors' device to core/cpu (the reference)
// or core/cuda. Shapes are row-major; "rows" = all leading dims flattened. Outputs come first.
// No op allocates on the hot path (CUDA ops take workspace from Runtime::scratch).
// Float dtypes: f32, bf16, f16; reductions and statistics are computed in f32.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/rotary.h"
#include "core/runtime.h"
#include "core/step_scalars.h"
#include "core/tensor.h"

namespace trellis {

// ---- data movement and elementwise ----
void fill(Runtime& rt, const Tensor& x, float value);
// Same dtype and element count; any pair of devices (host <-> device copies included).
void copy(Runtime& rt, const Tensor& dst, const Tensor& src);
// Element-wise conversion between float dtypes (same device, same element count).
void cast(Runtime& rt, const Tensor& out, const Tensor& in);
// out = a + b (residual connection). out may alias a or b.
void add(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b);
// out += a (out and a may differ in dtype; sum computed in f32).
void accumulate(Runtime& rt, const Tensor& out, const Tensor& a);
// x *= s
void scale(Runtime& rt, const Tensor& x, float s);

// ---- GEMM ----
struct MatmulOptions {
  bool trans_a = false;        // a is stored (K, M)
  bool trans_b = false;        // b is stored (N, K)
  bool accumulate = false;     // out += result (out read first)
  const Tensor* bias = nullptr;  // (N), a's dtype, added to every row
  float alpha = 1.0f;
  // GELU (GPT-2's tanh form) fused into the GEMM, cuBLASLt epilogues on CUDA; at most one of the two,
  // neither with accumulate. The tensor has out's element count and dtype and does not alias out.
  // Forward: *gelu_input = alpha * op(a) @ op(b) [+ bias] (the pre-activation, kept for backward),
  // out = gelu(*gelu_input).
  const Tensor* gelu_input = nullptr;
  // Backward: out = alpha * op(a) @ op(b) * gelu'(*gelu_grad_of), *gelu_grad_of being the forward's
  // pre-activation (no bias).
  const Tensor* gelu_grad_of = nullptr;
  // out = alpha * op(a) @ op(b) [+ bias] + *residual, rounded once (the residual add of a block fused
  // into the GEMM's epilogue on CUDA). out's shape and dtype; may be out itself; not with accumulate or
  // GELU.
  const Tensor* residual = nullptr;
  // Batched (strided): `batch` problems of this form, the tensors given being problem 0's; problem
  // i's out, GELU tensor and residual start i x stride_out elements after problem 0's, its a, b and
  // bias i x stride_a, stride_b, stride_bias after (a stride of 0 shares the operand). One cuBLASLt
  // call on CUDA where it fuses every epilogue asked for, except the GELU's backward (else one call
  // a problem). The experts' GEMMs of a mixture-of-experts block.
  int64_t batch = 1;
  int64_t stride_out = 0, stride_a = 0, stride_b = 0, stride_bias = 0;
  // a's row count (M, or K with trans_a) changes from call to call (the dropless experts' GEMMs;
  // unbatched only): on CUDA the plan is made once for the next power of two and its algorithm run at
  // each call's size (checked once a size; a size where cuBLASLt does not take it gets a plan of its
  // own), so calls do not wait for the heuristic and the plans stay few.
  bool rows_vary = false;
};
// out (M, N) = alpha * op(a) @ op(b) [+ bias] [+ out or residual], or with GELU fused as above. a, b: 2-D, same
// float dtype; out: a's dtype or f32 (weight gradients accumulate in f32). Accumulation in f32 on
// every backend.
void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt = {});
// Calls f(out, a, b, options) for each problem of a batched matmul as an unbatched one.
void for_each_matmul_problem(const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt,
                             const std::function<void(const Tensor&, const Tensor&, const Tensor&,
                                                      const MatmulOptions&)>& f);
// db (N) += column sums of dy (rows, N); accumulate = false: db = the sums (db is not read, so
// it may hold anything: a gradient's first write of a step). Parameter gradients (db here, dw, db
// and the column sums of layernorm_backward, dwte and dwpe of embedding_backward) are f32, or the
// activations' 16-bit dtype (train.grad_dtype): summed in f32 either way, rounded once as written.
// Batched: dy's rows are `batch` equal blocks; block i's sums go to the (N) at i x db_stride elements
// after db's first (db: block 0's). The experts' bias gradients of a mixture-of-experts block.
void bias_backward(Runtime& rt, const Tensor& db, const Tensor& dy, bool accumulate = true, int64_t batch = 1,
                   int64_t db_stride = 0);

// ---- layer norm over the last dimension C ----
// out = (x - mean) * rstd * w + b. mean, rstd: f32 (rows). w, b: (C), x's dtype; b may be empty (no
// bias). rms: RMSNorm (Zhang & Sennrich 2019; Llama's), no mean subtracted: mean is written as 0
// and rstd = 1 / sqrt(mean(x^2) + eps).
void layernorm_forward(Runtime& rt, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                       const Tensor& x, const Tensor& w, const Tensor& b, float eps = 1e-5f, bool rms = false);
// The residual add fused with the layer norm that follows it: r = x + branch (rounded to x's dtype,
// as add writes it), then layernorm_forward of r into out, mean, rstd. r, out: x's shape and dtype.
void add_layernorm_forward(Runtime& rt, const Tensor& r, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& x, const Tensor& branch, const Tensor& w, const Tensor& b,
                           float eps = 1e-5f, bool rms = false);
// The column sums of the residual-stream gradient that a layer norm's backward updates: of dx as it
// comes in (`before`) and as it leaves (`after`), f32 or x's dtype (C), each added to, or written where its flag
// says so. In a pre-LN block they are the bias gradients of the two projections whose outputs join
// the residual stream on either side of ln2 (the MLP's below it, the attention's above), summed
// while the layer norm reads and writes those rows anyway instead of by two more passes.
struct ResidualColumnSums {
  Tensor before, after;
  bool accumulate_before = true, accumulate_after = true;
};

// dx += d/dx (x's dtype; accumulating lets the residual gradient pass through), dw += and db +=
// (f32 or x's dtype, C; with accumulate_params = false written, not read). mean and rstd are the forward's.
// With sums: also the column sums of dx before and after (ResidualColumnSums). db empty: no bias.
// rms: the forward's RMSNorm (its mean is 0; dx has no mean(dnorm) term).
void layernorm_backward(Runtime& rt, const Tensor& dx, const Tensor& dw, const Tensor& db,
                        const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, bool accumulate_params = true,
                        const ResidualColumnSums* sums = nullptr, bool rms = false);

// ---- GELU, GPT-2's tanh approximation ----
void gelu_forward(Runtime& rt, const Tensor& out, const Tensor& x);
// dx = dout * gelu'(x); dx may alias dout.
void gelu_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x);

// ---- SwiGLU (Shazeer 2020; Llama's MLP) ----
// Each row of h (..., 2F) is [gate | up]: g (..., F) = silu(gate) * up, silu(a) = a * sigmoid(a).
void swiglu_forward(Runtime& rt, const Tensor& g, const Tensor& h);
// dh (..., 2F) = [dg * up * silu'(gate) | dg * silu(gate)]. dh may be h (each pair is read before it
// is written: the experts write the gradient over the activation), but must not alias dg.
void swiglu_backward(Runtime& rt, const Tensor& dh, const Tensor& dg, const Tensor& h);

// ---- attention heads ----
// The heads of a qkv tensor (B, T, (H + 2 Hkv) hd): [q | k | v] along the last dim, H query heads
// of hd dims, then Hkv key heads and Hkv value heads; head h of each part at columns [h*hd, (h+1)*hd)
// of it. Query head h reads key-value head h / (H / Hkv): grouped-query attention (Ainslie et al.
// 2023; Hkv = 1 is multi-query), or with Hkv = H (an int converts to that) multi-head attention,
// qkv (B, T, 3C) for C = H hd.
struct AttentionHeads {
  int q = 0, kv = 0;
  // Sliding-window attention (Mistral's, Phi-3's): a query at position t sees keys (t - window, t];
  // 0 = every earlier key. Only the attention ops read it.
  int64_t window = 0;
  // Document masking of packed sequences (data.document_mask): i32 (B, T), the position where the
  // document of each query starts (document_starts below), so no query sees a key of an earlier
  // document; undefined = none. Each value must be at most its position and never decrease along a
  // sample (document_starts' are; the kernels skip key blocks by it). Only the attention ops read it,
  // the generation cache's not at all.
  Tensor doc_starts;
  AttentionHeads(int heads) : q(heads), kv(heads) {}  // NOLINT(google-explicit-constructor): multi-head
  AttentionHeads(int q_heads, int kv_heads, int64_t sliding_window = 0)
      : q(q_heads), kv(kv_heads), window(sliding_window) {}
  int group() const { return q / kv; }                        // query heads per key-value head
  int64_t qkv_heads() const { return int64_t(q) + 2 * kv; }   // head-sized column blocks of a qkv row
  // The first key the query at position t sees through the window (doc_starts aside).
  int64_t first_key(int64_t t) const { return window > 0 && t >= window ? t - window + 1 : 0; }
};

// ---- document masking ----
// starts (i32, as tokens (B, T)): for each token, where its document starts in its sample: one past
// the last earlier position holding eod_token, else 0 (Megatron's reset_attention_mask: the
// end-of-document token closes its document, the token after it opens the next). positions (as
// tokens, optional): each token's place in its document, t - starts (Megatron's reset_position_ids).
void document_starts(Runtime& rt, const Tensor& starts, const Tensor& tokens, int32_t eod_token,
                     const Tensor& positions = {});

// ---- rotary position embedding (RoPE) ----
// Rotates the q and k parts of qkv (B, T, (H + 2 Hkv) hd), in place, by their positions: in every head the dims
// (i, i + hd/2), i < hd/2, are one pair (the rotate-half form of GPT-NeoX, Llama and Megatron),
// turned by the angle (first_position + t) x freqs.inverse_frequency(i, hd/2) (theta^(-2i/hd), the
// scalings aside: core/rotary.h) and scaled by freqs.amplitude() (YaRN's attention factor, else 1). The
// angle and its cosine and sine (times the amplitude) are computed in double, the rotation in f32.
// inverse: by the negative angle (the rotation's transpose), the amplitude the same, which is its
// backward: applied to dqkv it turns the gradient of the rotated q, k into that of the unrotated. v is
// not touched. hd must be even. With freqs.dims (partial rotary) only each head's first dims turn,
// hd/2 read as dims/2 above; the other dims are not touched. dims must be even and at most hd.
void rotary_embedding(Runtime& rt, const Tensor& qkv, AttentionHeads heads, const RotaryFrequencies& freqs,
                      int64_t first_position = 0, bool inverse = false);

// ---- QK-norm: RMSNorm of every query and key head (Qwen3's, OLMo 2's per head; Dehghani et al. 2023) ----
// out (as qkv): each q head x of qkv (hd dims, AttentionHeads' layout) becomes x * rstd * wq, each k head
// x * rstd * wk, rstd = 1 / sqrt(mean(x^2) + eps) over the head; v is copied. rstd: f32 (B*T, H + Hkv), the
// q heads' then the k heads'. wq, wk: (hd), qkv's dtype. out may be qkv (no backward then: it reads qkv).
void qk_norm_forward(Runtime& rt, const Tensor& out, const Tensor& rstd, const Tensor& qkv, const Tensor& wq,
                     const Tensor& wk, AttentionHeads heads, float eps);
// dqkv (as qkv) = the gradient through qk_norm_forward of dout: q and k heads through the norm, v copied;
// dwq, dwk (f32 or qkv's dtype, hd) += the column sums over all heads (written with accumulate_params =
// false). qkv and rstd are the forward's input and statistics. dqkv may be dout (each head is read
// before it is written), not qkv.
void qk_norm_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dwq, const Tensor& dwk, const Tensor& dout,
                      const Tensor& qkv, const Tensor& wq, const Tensor& wk, const Tensor& rstd, AttentionHeads heads,
                      bool accumulate_params = true);

// ---- causal self-attention core ----
// Dropout on the attention probabilities (after the softmax, before the product with v), with a
// mask keyed by the global (sample, head, query, key) index (core/philox.h): the same on every
// layout, in the recomputation of activation checkpointing, and between forward and backward.
struct AttentionDropout {
  float p = 0.0f;  // 0: none
  uint64_t seed = 0, stream = 0;
  int64_t sample_offset = 0;                  // global index of the micro-batch's first sample
  int64_t head_offset = 0, global_heads = 0;  // this rank's heads among all (0: its own heads)
};
// qkv: (B, T, (H + 2 Hkv) hd) as AttentionHeads says. out: (B, T, C = H hd) = dropout(softmax(q k^T /
// sqrt(hd), causal, within heads.window and heads.doc_starts' documents if set)) v per query head (with its key-value head). lse: f32 (B, H, T), the log-sum-exp
// of each score row (before dropout), kept for backward; the score matrix itself is not kept.
void attention_forward(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, AttentionHeads heads,
                       const AttentionDropout& drop = {});
// dqkv (as qkv) is overwritten; a key-value head's gradient sums its query heads'. out and lse are
// the forward's; drop must be the forward's.
void attention_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, AttentionHeads heads, const AttentionDropout& drop = {});

// ---- inference with a KV cache (generation) ----
// k_cache, v_cache: (B, Tmax, Hkv hd); qkv: (B, n, (H + 2 Hkv) hd) as above, all one dtype. Rows
// [pos, pos + n) of the caches <- the k and v parts of qkv (pos + n <= Tmax).
void kv_cache_append(Runtime& rt, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t pos,
                     AttentionHeads heads);
// out (B, n, H hd): the query of qkv row i (position pos + i) attends causally to cache rows
// [heads.first_key(pos + i), pos + i] of its key-value head (append the rows first); softmax scale
// 1/sqrt(hd), accumulation in f32.
void attention_with_cache(Runtime& rt, const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, AttentionHeads heads);

// ---- softmax cross-entropy over a padded vocabulary ----
// logits: (N, Vp), only the first `vocab` columns are real (padding is masked out).
// targets: i32 (N); -1 marks a position without a target (loss 0, gradient 0).
// losses: f32 (N), -log softmax(logits)[target].
void softmax_cross_entropy_forward(Runtime& rt, const Tensor& losses, const Tensor& logits,
                                   const Tensor& targets, int64_t vocab);
// Forward and backward in one pass: writes losses and dlogits = dloss * (softmax - onehot), with
// zeros in the padded columns. dlogits may alias logits (in place: no probability tensor kept).
void softmax_cross_entropy_backward(Runtime& rt, const Tensor& dlogits, const Tensor& losses,
                                    const Tensor& logits, const Tensor& targets, int64_t vocab,
                                    float dloss);

// ---- vocabulary-parallel softmax cross-entropy (logits split by columns over the tensor group) ----
// logits: (N, cols), this rank's shard: global columns [vocab_begin, vocab_begin + cols) of the
// (N, Vp) logits; global columns >= vocab are padding, masked out. targets: i32 (N), global ids in
// [-1, vocab), -1 = no target. Row statistics are f32 (N). The ops do no communication; the
// caller reduces over the tensor group between the passes:
//   1. vocab_parallel_xent_max            -> row_max                  all-reduce MAX
//   2. vocab_parallel_xent_sum_exp        -> row_sum, target_logit    all-reduce SUM (row_sum and
//      target_logit may be the two halves of one (2N) buffer: one all-reduce)
//   3. vocab_parallel_xent_loss_and_grad  -> losses (and dlogits on the shard)
// With one shard (vocab_begin 0, cols Vp) this is softmax_cross_entropy_forward/backward.
//
// row_max = max of the shard's real columns per row (-inf if the shard holds none).
void vocab_parallel_xent_max(Runtime& rt, const Tensor& row_max, const Tensor& logits, int64_t vocab,
                             int64_t vocab_begin);
// row_max: the global one. row_sum = sum over the shard's real columns of exp(logit - row_max);
// target_logit = the target's logit when the target lies in the shard, else 0 (so the SUM over the
// group is the target's logit; 0 for rows without a target).
void vocab_parallel_xent_sum_exp(Runtime& rt, const Tensor& row_sum, const Tensor& target_logit,
                                 const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 int64_t vocab, int64_t vocab_begin);
// From the global row_max, row_sum and target_logit: losses (f32, N) = log(row_sum) + row_max -
// target_logit (0 for target -1), the same on every rank. If dlogits is defined, also the shard of
// dlogits = dloss * (softmax - onehot): zeros in padded columns and in rows without a target.
// dlogits may alias logits (in place). Undefined dlogits: losses only (logits not read).
void vocab_parallel_xent_loss_and_grad(Runtime& rt, const Tensor& losses, const Tensor& dlogits,
                                       const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                       const Tensor& row_sum, const Tensor& target_logit, int64_t vocab,
                                       int64_t vocab_begin, float dloss);

// ---- embeddings ----
// out (B, T, C) = wte[tokens[b, t]] + wpe[t]. tokens: i32 (B, T); wte (V, C); wpe (>= T, C).
// Vocabulary shard: with vocab_size > 0, wte holds rows [vocab_begin, vocab_begin + V) of a
// (vocab_size, C) table; tokens must lie in [0, vocab_size) and those outside the shard contribute
// zero (the SUM over the shards is the full lookup). vocab_size 0: wte is the whole table
// (vocab_begin must be 0). wpe may be undefined: no positions added (add them once, after the
// reduction over the shards, e.g. with `add` per sample, or pass wpe on one shard only).
// positions: i32 (B, T), each token's row of wpe (data.reset_positions: its place in its document,
// document_starts'); undefined = t.
void embedding_forward(Runtime& rt, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                       const Tensor& wpe, int64_t vocab_begin = 0, int64_t vocab_size = 0,
                       const Tensor& positions = {});
// dwte (V, C) += rows of dout scattered by token; dwpe (>= T, C) += sum over the batch (f32 or
// dout's dtype: each row's sum in f32, added to the old value and rounded once), or with
// `positions` the rows of dout scattered by position, as dwte's by token.
// Deterministic: the rows that hit one token are summed in position order. The vocabulary shard
// as in embedding_forward: only tokens in [vocab_begin, vocab_begin + V) scatter into dwte. Either
// gradient may be undefined (not computed).
void embedding_backward(Runtime& rt, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                        const Tensor& tokens, int64_t vocab_begin = 0, int64_t vocab_size = 0,
                        const Tensor& positions = {});

// ---- dropout with a counter-based RNG (Philox), so a recomputed forward draws the same mask ----
// The local (rows, cols) tensor is a block of a global (global_rows, global_cols) activation; the
// mask of element (r, c) depends only on (seed, stream, global index), so every layout draws the
// same mask. Global row = (r / seq_local) * seq_global + seq_offset + r % seq_local when
// seq_local > 0 (a sequence shard), else r. Global col = col_offset + c.
struct DropoutKey {
  uint64_t seed = 0;
  uint64_t stream = 0;  // distinct per (step, micro-batch, layer, site)
  int64_t global_cols = 0;  // 0 = the tensor's own cols
  int64_t col_offset = 0;
  int64_t seq_local = 0, seq_global = 0, seq_offset = 0;
};
// out = x * keep / (1 - p), keep = uniform(seed, stream, index) >= p. out may alias x.
void dropout_forward(Runtime& rt, const Tensor& out, const Tensor& x, float p, const DropoutKey& key);
// dx = dout * keep / (1 - p) with the forward's mask. dx may alias dout.
void dropout_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, float p, const DropoutKey& key);

// ---- mixture of experts: top-k routing with a fixed capacity per expert ----
// N tokens over E experts, K choices each; an expert takes at most `capacity` choices (its slots,
// rows [e * capacity, (e + 1) * capacity) of the (E * capacity, C) expert tensors); a choice past
// that is dropped (it adds nothing; the residual stream carries the token on).
// logits: f32 (N, E). Writes probs f32 (N, E) = softmax(logits); lse f32 (N) = log sum_e exp(logits[n, e])
// (the router z-loss's term); expert i32 (N, K): the K largest
// logits in descending order (the lower expert first among equals); gate f32 (N, K): their probs,
// divided by their sum when K > 1 and `renormalize` (else the probs themselves); slot i32 (N, K): expert * capacity + position, or -1 if dropped;
// slot_token i32 (E * capacity): n * K + k of the choice in each slot, or -1 (empty); counts f32 (E):
// the choices of each expert before any was dropped. Positions go in priority order: every token's
// first choice in token order, then the second choices, and so on (GShard).
// `dropless`: no capacity; slot_token has N * K rows, expert e's choices packed (in the same order)
// in rows [o_e, o_e + counts[e]), o_e = the counts of the experts before it; none is dropped.
void moe_route(Runtime& rt, const Tensor& probs, const Tensor& lse, const Tensor& expert, const Tensor& gate,
               const Tensor& slot, const Tensor& slot_token, const Tensor& counts, const Tensor& logits,
               bool renormalize, bool dropless = false);
// xe (slots, C: E * capacity, or dropless N * K) = the rows of x (N, C) that slot_token places, zeros in
// empty slots.
void moe_dispatch(Runtime& rt, const Tensor& xe, const Tensor& x, const Tensor& slot_token, int64_t top_k);
// dx (N, C) = [dx +] the sum over the token's choices that were not dropped of dxe[slot].
void moe_dispatch_backward(Runtime& rt, const Tensor& dx, const Tensor& dxe, const Tensor& slot, bool accumulate);
// out (N, C) = [residual +] sum_k gate[n, k] * ye[slot[n, k]] over the choices not dropped, summed in
// f32 and rounded once. residual may be undefined, or out itself.
void moe_combine(Runtime& rt, const Tensor& out, const Tensor& ye, const Tensor& slot, const Tensor& gate,
                 const Tensor& residual = Tensor());
// dye (E * capacity, C) = gate * dout[n] in the slot of choice (n, k), zeros in empty slots;
// dgate f32 (N, K) = dout[n] . ye[slot[n, k]], 0 for a dropped choice.
void moe_combine_backward(Runtime& rt, const Tensor& dye, const Tensor& dgate, const Tensor& dout, const Tensor& ye,
                          const Tensor& slot, const Tensor& slot_token, const Tensor& gate);
// dlogits f32 (N, E) from dgate through the gates (renormalized or not, as moe_route made them) and the softmax, plus aux_scale times the gradient
// of the balancing loss E * sum_e f_e P_e (f_e = counts[e] / (N K), P_e = the mean of probs[:, e];
// 1 when balanced; f_e taken as constant, as in Switch Transformer), plus z_scale times the gradient
// of the router z-loss mean_n lse[n]^2 (ST-MoE): 2 lse[n] probs[n, e] / N.
void moe_router_backward(Runtime& rt, const Tensor& dlogits, const Tensor& dgate, const Tensor& probs,
                         const Tensor& lse, const Tensor& expert, const Tensor& gate, const Tensor& counts,
                         float aux_scale, float z_scale, bool renormalize);
// For the log: stats f32 (3) += (the balancing loss E * sum_e f_e P_e, the choices dropped: sum_e
// max(0, counts[e] - capacity), the z-loss mean_n lse[n]^2), from moe_route's probs (N, E), lse (N)
// and counts (E); K = the choices per token.
void moe_statistics(Runtime& rt, const Tensor& stats, const Tensor& probs, const Tensor& lse, const Tensor& counts,
                    int64_t top_k, int64_t capacity);

// A per-token sigmoid gate on rows (Qwen2-MoE's shared expert gate): out (N, F) = sigmoid(z[n]) * x[n],
// z f32 with N elements (the gate's logits). out may be x.
void sigmoid_gate_rows(Runtime& rt, const Tensor& out, const Tensor& x, const Tensor& z);
// dx (N, F) = sigmoid(z[n]) * dout[n] (dx may be dout); dz f32 (N) = sigmoid'(z[n]) * (dout[n] . x[n]),
// the dot summed in f32, x the rows before the gate. Over a column shard of the rows, dz is that
// shard's part of the sum (the factor is the row's).
void sigmoid_gate_rows_backward(Runtime& rt, const Tensor& dx, const Tensor& dz, const Tensor& dout, const Tensor& x,
                                const Tensor& z);

// ---- optimizer ----
struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
  // Defined (f32[kStepScalarCount] on the tensors' device, core/step_scalars.h): the learning rate,
  // the bias corrections and the gradient scale are read from it where the update runs, instead
  // of lr, step and grad_scale, and nothing is updated where its kApply is 0.
  Tensor scalars;
};
// Consecutive runs of the tensors with and without weight decay: run i covers elements
// [i == 0 ? 0 : ends[i - 1], ends[i]) and is decayed (h.weight_decay) when decays[i]; ends.back() is
// the tensors' length. One step over all of them is one launch on CUDA (per 16 runs).
struct AdamWRuns {
  std::vector<int64_t> ends;
  std::vector<bool> decays;
};
// One AdamW step on fp32 master weights: g = grad * grad_scale (unscaling and clipping folded in;
// grad f32, bf16 or f16),
// m, v updated, master -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * master), weight_decay
// being h.weight_decay, or per run with runs. If params_out is defined, the updated master is also
// written to it (cast to its dtype). A bf16 `master` holds the low bits of split masters whose high
// bits are params_out (bf16, then required; core/dtype.h split_master): the update is the same as
// on f32 masters, and params_out is the master rounded with ties away from zero.
void adamw_step(Runtime& rt, const Tensor& master, const Tensor& m, const Tensor& v,
                const Tensor& grad, const Tensor& params_out, const AdamWHyper& h, float grad_scale,
                const AdamWRuns* runs = nullptr);

// scalars (f32[kStepScalarCount], core/step_scalars.h): kGradScale and kApply from the host's values
// in it and the step's loss_sum and norm_sq (f32 scalars), on the device, without a host wait.
void adamw_step_scalars(Runtime& rt, const Tensor& scalars, const Tensor& loss_sum, const Tensor& norm_sq);

// ---- reductions (deterministic: a fixed order on every backend) ----
// out (f32 scalar on x's device) += sum(x) / += sum(x^2).
void sum_accumulate(Runtime& rt, const Tensor& out, const Tensor& x);
void sum_squares_accumulate(Runtime& rt, const Tensor& out, const Tensor& x);

}  // namespace trellis
