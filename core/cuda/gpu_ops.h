// The CUDA backend: cuBLASLt GEMM and own kernels, all on the runtime's compute stream.
// Called by core/ops.cpp after argument checks; semantics are those documented in core/ops.h.
// Plain C++ declarations: no CUDA header leaks out of core/cuda.
#pragma once
#include "core/ops.h"
#include "core/philox.h"

namespace trellis::gpu {

void fill(Runtime& rt, const Tensor& x, float value);
void copy(Runtime& rt, const Tensor& dst, const Tensor& src);
void cast(Runtime& rt, const Tensor& out, const Tensor& in);
void add(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b);
void accumulate(Runtime& rt, const Tensor& out, const Tensor& a);
void scale(Runtime& rt, const Tensor& x, float s);
void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt);
void bias_backward(Runtime& rt, const Tensor& db, const Tensor& dy, bool accumulate);
void layernorm_forward(Runtime& rt, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                       const Tensor& x, const Tensor& w, const Tensor& b, float eps);
void add_layernorm_forward(Runtime& rt, const Tensor& r, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& x, const Tensor& branch, const Tensor& w, const Tensor& b, float eps);
void layernorm_backward(Runtime& rt, const Tensor& dx, const Tensor& dw, const Tensor& db,
                        const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, bool accumulate_params, const ResidualColumnSums* sums);
void gelu_forward(Runtime& rt, const Tensor& out, const Tensor& x);
void gelu_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x);
void attention_forward(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_heads,
                       const AttentionDropoutKey& drop);
void attention_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, int n_heads, const AttentionDropoutKey& drop);
void kv_cache_append(Runtime& rt, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t pos);
void attention_with_cache(Runtime& rt, const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, int n_heads);
void softmax_cross_entropy_forward(Runtime& rt, const Tensor& losses, const Tensor& logits,
                                   const Tensor& targets, int64_t vocab);
void softmax_cross_entropy_backward(Runtime& rt, const Tensor& dlogits, const Tensor& losses,
                                    const Tensor& logits, const Tensor& targets, int64_t vocab,
                                    float dloss);
void vocab_parallel_xent_max(Runtime& rt, const Tensor& row_max, const Tensor& logits, int64_t vocab,
                             int64_t vocab_begin);
void vocab_parallel_xent_sum_exp(Runtime& rt, const Tensor& row_sum, const Tensor& target_logit,
                                 const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 int64_t vocab, int64_t vocab_begin);
void vocab_parallel_xent_loss_and_grad(Runtime& rt, const Tensor& losses, const Tensor& dlogits,
                                       const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                       const Tensor& row_sum, const Tensor& target_logit, int64_t vocab,
                                       int64_t vocab_begin, float dloss);
// vocab_size is resolved by ops.cpp (> 0: the full table's rows); wpe, dwte, dwpe may be undefined.
void embedding_forward(Runtime& rt, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                       const Tensor& wpe, int64_t vocab_begin, int64_t vocab_size);
void embedding_backward(Runtime& rt, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                        const Tensor& tokens, int64_t vocab_begin, int64_t vocab_size);
void dropout_forward(Runtime& rt, const Tensor& out, const Tensor& x, float p, const DropoutKey& key);
void dropout_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, float p, const DropoutKey& key);
void adamw_step_scalars(Runtime& rt, const Tensor& scalars, const Tensor& loss_sum, const Tensor& norm_sq);
void adamw_step(Runtime& rt, const Tensor& master, const Tensor& m, const Tensor& v,
                const Tensor& grad, const Tensor& params_out, const AdamWHyper& h, float grad_scale,
                const AdamWRuns* runs);
void sum_accumulate(Runtime& rt, const Tensor& out, const Tensor& x);
void sum_squares_accumulate(Runtime& rt, const Tensor& out, const Tensor& x);

}  // namespace trellis::gpu
