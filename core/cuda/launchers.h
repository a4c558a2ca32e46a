// Kernel launchers: the .cu files (device code, C++17) define them; the host files of core/cuda
// (gpu_ops.cpp, matmul.cpp, attention.cpp; C++20, they see Runtime and Tensor) call them. Raw
// pointers, dtypes and sizes only; every launcher enqueues on stream `s` and checks the launch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/philox.h"
#include "core/rotary.h"

namespace trellis::gpu {

// ---- elementwise.cu ----
void launch_fill(cudaStream_t s, void* x, DType t, int64_t n, float value);  // float and integer dtypes
void launch_cast(cudaStream_t s, void* out, DType out_t, const void* in, DType in_t, int64_t n);
void launch_add(cudaStream_t s, void* out, const void* a, const void* b, DType t, int64_t n);
void launch_accumulate(cudaStream_t s, void* out, DType out_t, const void* a, DType a_t, int64_t n);
void launch_scale(cudaStream_t s, void* x, DType t, int64_t n, float factor);
// out (rows, cols) += bias (cols); sum in f32.
void launch_bias_add(cudaStream_t s, void* out, DType out_t, const void* bias, DType bias_t, int64_t rows,
                     int64_t cols);
void launch_gelu_forward(cudaStream_t s, void* out, const void* x, DType t, int64_t n);
void launch_gelu_backward(cudaStream_t s, void* dx, const void* dout, const void* x, DType t, int64_t n);
// swiglu_forward / swiglu_backward (core/ops.h) on `rows` rows of g (F wide) and h (2F wide).
void launch_swiglu_forward(cudaStream_t s, void* g, const void* h, DType t, int64_t rows, int64_t F);
void launch_swiglu_backward(cudaStream_t s, void* dh, const void* dg, const void* h, DType t, int64_t rows,
                            int64_t F);

// The layout-independent element index of ops.h's DropoutKey, resolved on the host.
struct DropoutIndex {
  int64_t cols, global_cols, col_offset, seq_local, seq_global, seq_offset;
  uint64_t seed, stream;
  float p, inv_keep;
};
// out = x * keep * inv_keep (out may alias x).
void launch_dropout(cudaStream_t s, void* out, const void* x, DType t, int64_t n, const DropoutIndex& k);

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale;
  const float* scalars;  // non-null: lr, bc1, bc2 and grad_scale from it, and no update where its kApply is 0 (core/step_scalars.h)
};
// The runs of one AdamW launch: run r covers [r == 0 ? 0 : end[r - 1], end[r]) and takes
// AdamWArgs::weight_decay when bit r of `decay` is set, else none.
constexpr int kAdamWRunsPerLaunch = 16;
struct AdamWRunTable {
  int64_t end[kAdamWRunsPerLaunch];
  uint32_t decay;
  int count;
};
// core/step_scalars.h's finish_step_scalars on the device (one thread).
void launch_adamw_step_scalars(cudaStream_t s, float* scalars, const float* loss_sum, const float* norm_sq);
// params_out may be null; grad: f32, or 16-bit (train.grad_dtype).
void launch_adamw(cudaStream_t s, float* master, float* m, float* v, const void* grad, DType grad_t,
                  void* params_out, DType params_t, int64_t n, const AdamWArgs& a, const AdamWRunTable& runs);
// The same on split masters: bf16 params (the high halves) and their low halves (core/dtype.h).
void launch_adamw_split(cudaStream_t s, void* params, void* low, float* m, float* v, const void* grad, DType grad_t,
                        int64_t n, const AdamWArgs& a, const AdamWRunTable& runs);

// ---- norm.cu ----
// Column reductions (dw, db, bias grads) sum fixed row chunks into f32 partials, then the chunks
// in order: deterministic. Partials take colsum_chunks(rows) * cols floats per reduced quantity.
// (256 rows a chunk, at most 64 chunks: at 16384 x 8192 bf16 the partials kernel ran at 4.2 TB/s
// with 64 chunks against 4.0 with 256, the whole op 81.8 -> 78.6 us; bench/sessions/2026-11-30i
// calls 1 and 2.)
inline int64_t colsum_chunks(int64_t rows) {
  int64_t c = (rows + 255) / 256;  // at most 256 rows per chunk ...
  if (c > 64) c = 64;              // ... and at most 64 chunks
  return c < 1 ? 1 : c;
}
// Chunks of a batch's blocks of `rows` rows: as colsum_chunks, fewer where they would not divide the
// rows evenly (a chunk never spans two blocks). One block alone takes colsum_chunks(rows).
inline int64_t batch_colsum_chunks(int64_t rows) {
  int64_t per = (rows + colsum_chunks(rows) - 1) / colsum_chunks(rows);  // rows a chunk
  while (rows % per != 0) ++per;
  return rows / per;
}
// Whether a batch of blocks of `rows` rows takes one batched bias_backward: its launches' grids hold
// the chunks, and they are not fewer than half of one block's alone (an awkward row count, a prime
// say, would leave one chunk a block and few thread blocks: then one call a block).
inline bool batched_colsums_fit(int64_t rows, int64_t batch) {
  const int64_t k = batch_colsum_chunks(rows);
  return batch <= 65535 && batch * k <= 65535 && 2 * k >= colsum_chunks(rows);
}
// The fused layer-norm backward's chunks: one thread block each, 32 rows, at most 1024 chunks.
inline int64_t layernorm_chunks(int64_t rows) {
  int64_t c = (rows + 31) / 32;
  if (c > 1024) c = 1024;
  return c < 1 ? 1 : c;
}
// Floats of scratch launch_layernorm_backward takes: partials of dw and db, and with `sums` of the
// two dx sums (ColumnSumOutputs).
inline int64_t layernorm_backward_scratch(int64_t rows, int64_t cols, bool sums) {
  const int64_t a = colsum_chunks(rows), b = layernorm_chunks(rows);
  return (sums ? 4 : 2) * (a > b ? a : b) * cols;
}
// ResidualColumnSums for launch_layernorm_backward: the column sums of dx before and after its
// update (+= or, without accumulate, =), gradients of the launch's grad_t; null pointers: not asked for.
struct ColumnSumOutputs {
  void* before = nullptr;
  void* after = nullptr;
  bool accumulate_before = true, accumulate_after = true;
};
// b null: no bias; rms: RMSNorm (mean written as 0, not subtracted).
void launch_layernorm_forward(cudaStream_t s, void* out, float* mean, float* rstd, const void* x, const void* w,
                              const void* b, DType t, int64_t rows, int64_t cols, float eps, bool rms = false);
// r = x + branch, out = layer norm of r (one pass where the row fits the vectorized kernel).
void launch_add_layernorm_forward(cudaStream_t s, void* r, void* out, float* mean, float* rstd, const void* x,
                                  const void* branch, const void* w, const void* b, DType t, int64_t rows,
                                  int64_t cols, float eps, bool rms = false);
// dx += ..., dw += ..., db += ... (dw, db = ... without accumulate_params), and the dx column sums
// `sums` asks for; the gradients dw, db and the sums are grad_t (f32, or t: train.grad_dtype);
// scratch: layernorm_backward_scratch(rows, cols, sums asked) floats; block_shared_memory: what a
// block of the device may opt in to (CudaState's). db null: no bias; rms: the forward's RMSNorm.
void launch_layernorm_backward(cudaStream_t s, void* dx, void* dw, void* db, DType grad_t, const void* dout,
                               const void* x, const void* w, const float* mean, const float* rstd, DType t,
                               int64_t rows, int64_t cols, float* scratch, bool accumulate_params,
                               size_t block_shared_memory, const ColumnSumOutputs& sums = {}, bool rms = false);
// db (grad_t) += column sums of dy (db = without accumulate); scratch: colsum_chunks(rows) * cols floats.
// Batched: dy is `batch` blocks of `rows` rows, block i's sums into db + i x db_stride elements;
// scratch: batch x batch_colsum_chunks(rows) x cols floats.
void launch_bias_backward(cudaStream_t s, void* db, DType grad_t, const void* dy, DType t, int64_t rows, int64_t cols,
                          float* scratch, bool accumulate, int64_t batch = 1, int64_t db_stride = 0);
// out[0] += sum(x) or sum(x^2), in a fixed order; scratch: kSumPartials floats.
constexpr int kSumPartials = 512;
void launch_sum(cudaStream_t s, float* out, const void* x, DType t, int64_t n, bool squares, float* scratch);

// Which keys each query sees besides the causal bound (AttentionHeads' window and doc_starts): query t
// of sample b sees keys [first, t], first the later of t - window + 1 (window > 0) and doc_starts[b T + t]
// (where given; the device's copy of the (B, T) starts).
struct AttentionMask {
  int64_t window = 0;
  const int32_t* doc_starts = nullptr;
};

// ---- attention_kernels.cu: the pieces around the batched GEMMs of attention.cpp ----
// dst (B, H, T, hd) <- columns [col_offset + (h / group)*hd, ...) of src rows (B*T rows of row_stride
// elements): with group > 1 each source head fills `group` consecutive heads (grouped-query k, v).
void launch_to_heads(cudaStream_t s, void* dst, const void* src, int64_t row_stride, int64_t col_offset, DType t,
                     int64_t B, int64_t T, int64_t H, int64_t hd, int64_t group = 1);
// The inverse: columns [col_offset + g*hd, ...) of dst rows <- src (B, H, T, hd), head g the f32 sum
// of src heads [g*group, (g+1)*group) (their gradients), H / group of them.
void launch_from_heads(cudaStream_t s, void* dst, int64_t row_stride, int64_t col_offset, const void* src, DType t,
                       int64_t B, int64_t T, int64_t H, int64_t hd, int64_t group = 1);
// Forward: per row i of each (T, T) block of S (f32, already scaled; blocks ordered (b, h) with H
// heads), causal softmax over the keys j <= i that `mask` leaves: lse[i] (before dropout) and P (t,
// zeros elsewhere) times the dropout factor of `drop`.
void launch_causal_softmax(cudaStream_t s, void* P, float* lse, const float* S, DType t, int64_t B, int64_t H,
                           int64_t T, const AttentionDropoutKey& drop, const AttentionMask& mask);
// Backward: P = exp(S - lse) on those j, else 0, times the dropout factor.
void launch_causal_probs(cudaStream_t s, void* P, const float* S, const float* lse, DType t, int64_t B, int64_t H,
                         int64_t T, const AttentionDropoutKey& drop, const AttentionMask& mask);
// D (B, H, T) = rowsum(dout * out) per head; dout, out (B, T, H*hd).
void launch_attention_rowdot(cudaStream_t s, float* D, const void* dout, const void* out, DType t, int64_t B,
                             int64_t T, int64_t H, int64_t hd);
// dS = P * (m * dP - D) * scale into dS (t), with P = exp(S - lse) recomputed (causal, within the
// mask) and m the dropout factor; S, dP f32.
void launch_softmax_backward(cudaStream_t s, void* dS, const float* S, const float* lse, const float* dP,
                             const float* D, DType t, int64_t B, int64_t H, int64_t T, float scale,
                             const AttentionDropoutKey& drop, const AttentionMask& mask);
// document_starts (core/ops.h) of tokens (B, T) into starts, and into positions (if not null) t - starts.
void launch_document_starts(cudaStream_t s, int32_t* starts, int32_t* positions, const int32_t* tokens, int64_t B,
                            int64_t T, int32_t eod_token);

// ---- flash_attention.cu: fused causal attention (FlashAttention-2 style) on the (B, T, (H + 2 Hkv) hd)
// qkv rows, query head h on key-value head h / (H / Hkv); query i sees the keys j <= i that `mask` leaves ----
// True for the dtypes and head sizes the fused kernels cover (bf16/f16, head_dim 64 or 128); the
// pointers must also be 16-byte aligned. Otherwise attention.cpp takes the cuBLAS path.
bool flash_attention_supported(DType t, int64_t hd);
// out (B, T, H*hd), lse (B, H, T) f32 natural log, from qkv.
void launch_flash_attention_forward(cudaStream_t s, void* out, float* lse, const void* qkv, DType t, int64_t B,
                                    int64_t T, int64_t H, int64_t Hkv, int64_t hd, const AttentionDropoutKey& drop,
                                    const AttentionMask& mask);
// dqkv (as qkv), every element written (a key-value head's dK, dV summed over its query heads, in
// order); D (B, H, T) = rowsum(dout * out) (launch_attention_rowdot). Deterministic: no atomics,
// fixed summation order.
void launch_flash_attention_backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const float* lse,
                                     const float* D, DType t, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                                     const AttentionDropoutKey& drop, const AttentionMask& mask);

// ---- rotary.cu ----
// rotary_embedding (core/ops.h) on the first `heads` heads of hd dims (q's, then k's) of each qkv
// row (B*T rows of W elements).
void launch_rotary_embedding(cudaStream_t s, void* qkv, DType t, int64_t B, int64_t T, int64_t hd, int64_t W,
                             int64_t heads, const RotaryFrequencies& freqs, int64_t first_position, bool inverse);

// ---- kv_cache.cu: generation with a KV cache ----
// Rows [pos, pos + n) of k_cache, v_cache (B, Tmax, Ckv) <- the k, v parts of qkv (B, n, C + 2 Ckv).
void launch_kv_cache_append(cudaStream_t s, void* k_cache, void* v_cache, const void* qkv, DType t, int64_t B,
                            int64_t n, int64_t C, int64_t Ckv, int64_t Tmax, int64_t pos);
// out (B, n, H hd): query i of qkv (B, n, (H + 2 Hkv) hd) attends to cache rows [0, pos + i] (with
// window > 0 the last `window` of them) of its key-value head h / (H / Hkv); head_dim <= kMaxHeadDim.
constexpr int kMaxHeadDim = 256;
void launch_attention_with_cache(cudaStream_t s, void* out, const void* qkv, const void* k_cache,
                                 const void* v_cache, DType t, int64_t B, int64_t n, int64_t H, int64_t Hkv,
                                 int64_t hd, int64_t Tmax, int64_t pos, int64_t window);

// ---- norm.cu: QK-norm ----
// qk_norm_forward / qk_norm_backward (core/ops.h) on `rows` qkv rows of W elements: the first `heads`
// heads of hd <= kMaxHeadDim dims normed, the first q of them by wq, the rest by wk. The backward's
// weight gradients go through qk_norm_backward_scratch(rows, hd) floats of partials (deterministic).
// Its chunks: 16 rows each, at most 1024 (its partials are only 2 hd wide, so many blocks cost little
// to sum, while colsum_chunks' 64 would leave most SMs idle), fixed by the shape as colsum_chunks'.
inline int64_t qk_norm_chunks(int64_t rows) {
  const int64_t c = (rows + 15) / 16;
  return c < 1 ? 1 : c > 1024 ? 1024 : c;
}
inline int64_t qk_norm_backward_scratch(int64_t rows, int64_t hd) { return 2 * qk_norm_chunks(rows) * hd; }
void launch_qk_norm_forward(cudaStream_t s, void* out, float* rstd, const void* qkv, const void* wq, const void* wk,
                            DType t, int64_t rows, int64_t W, int hd, int heads, int q, float eps);
void launch_qk_norm_backward(cudaStream_t s, void* dqkv, void* dwq, void* dwk, DType grad_t, const void* dout,
                             const void* qkv, const void* wq, const void* wk, const float* rstd, DType t, int64_t rows,
                             int64_t W, int hd, int heads, int q, float* scratch, bool accumulate_params);

// ---- loss_embed.cu ----
// losses (N) and, when dlogits is non-null, dlogits = dloss * (softmax - onehot) (padded columns 0;
// dlogits may alias logits).
void launch_cross_entropy(cudaStream_t s, float* losses, void* dlogits, const void* logits, const int32_t* targets,
                          DType t, int64_t N, int64_t Vp, int64_t vocab, float dloss);
// Vocabulary-parallel cross entropy on a shard (N, cols) of the logits: global column vocab_begin + c;
// the first n_real columns are real vocabulary, the rest padding. One block per row.
// row_max = max over the real columns (-inf if none).
void launch_vp_xent_max(cudaStream_t s, float* row_max, const void* logits, DType t, int64_t N, int64_t cols,
                        int64_t n_real);
// row_sum = sum over the real columns of exp(x - row_max); target_logit = x[target - vocab_begin] if in
// the shard's real columns, else 0.
void launch_vp_xent_sum_exp(cudaStream_t s, float* row_sum, float* target_logit, const void* logits,
                            const int32_t* targets, const float* row_max, DType t, int64_t N, int64_t cols,
                            int64_t n_real, int64_t vocab_begin);
// losses = log(row_sum) + row_max - target_logit (0 without a target); when dlogits is non-null also
// dlogits = dloss * (softmax - onehot) on the shard (padding and rows without a target 0; may alias logits).
void launch_vp_xent_loss_and_grad(cudaStream_t s, float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max, const float* row_sum,
                                  const float* target_logit, DType t, int64_t N, int64_t cols, int64_t n_real,
                                  int64_t vocab_begin, float dloss);
// wte holds rows [vocab_begin, vocab_begin + V) of the table (tokens outside add 0); wpe may be null;
// positions (null: t) pick wpe's rows.
void launch_embedding_forward(cudaStream_t s, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                              const int32_t* positions, DType t, int64_t B, int64_t T, int64_t C, int64_t vocab_begin,
                              int64_t V);
// vocab_size: the full table's rows (tokens lie in [0, vocab_size)).
size_t embedding_backward_scratch_bytes(int64_t n_tokens, int64_t vocab_size);
// dwte (V rows from vocab_begin) and dwpe may each be null; scratch is needed only with dwte. The
// gradients are f32 or t (train.grad_dtype), each element summed in f32 and rounded once.
void launch_embedding_backward(cudaStream_t s, void* dwte, DType dwte_t, void* dwpe, DType dwpe_t, const void* dout,
                               const int32_t* tokens, DType t, int64_t B, int64_t T, int64_t C, int64_t vocab_begin,
                               int64_t V, int64_t vocab_size, void* scratch, size_t scratch_bytes);

// ---- moe.cu (core/ops.h's moe_* ops; E experts, K choices, S = E * cap slots, or dropless (cap = 0
// for the route) N * K) ----
void launch_moe_route(cudaStream_t s, float* probs, float* lse, int32_t* expert, float* gate, int32_t* slot,
                      int32_t* slot_token, float* counts, const float* logits, int64_t N, int E, int K, int64_t cap,
                      bool renormalize);
void launch_moe_dispatch(cudaStream_t s, void* xe, const void* x, DType t, const int32_t* slot_token, int64_t S,
                         int64_t C, int K);
void launch_moe_dispatch_backward(cudaStream_t s, void* dx, const void* dxe, DType t, const int32_t* slot, int64_t N,
                                  int64_t C, int K, bool accumulate);
void launch_moe_combine(cudaStream_t s, void* out, const void* ye, DType t, const int32_t* slot, const float* gate,
                        const void* residual, int64_t N, int64_t C, int K);
void launch_moe_combine_backward(cudaStream_t s, void* dye, float* dgate, const void* dout, const void* ye, DType t,
                                 const int32_t* slot, const int32_t* slot_token, const float* gate, int64_t N,
                                 int64_t S, int64_t C, int K);
// stats (3) += (balancing loss, dropped choices, z-loss); partial: 2 E floats of scratch.
void launch_moe_statistics(cudaStream_t s, float* stats, float* partial, const float* probs, const float* lse,
                           const float* counts, int64_t N, int E, int K, int64_t cap);
void launch_sigmoid_gate_rows(cudaStream_t s, void* out, const void* x, DType t, const float* z, int64_t N, int64_t C);
void launch_sigmoid_gate_rows_backward(cudaStream_t s, void* dx, float* dz, const void* dout, const void* x, DType t,
                                       const float* z, int64_t N, int64_t C);
// aux, z: the balancing loss's and the z-loss's factors (core/cuda/moe_ops.cpp).
void launch_moe_router_backward(cudaStream_t s, float* dlogits, const float* dgate, const float* probs,
                                const float* lse, const int32_t* expert, const float* gate, const float* counts,
                                float aux, float z, int64_t N, int E, int K, bool renormalize);

}  // namespace trellis::gpu
