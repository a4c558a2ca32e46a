// The CUDA backend's op entry points (except matmul.cpp and attention.cpp): resolve tensors to
// pointers, dtypes and sizes, take scratch from the runtime, and call the kernel launchers.
#include "core/cuda/gpu_ops.h"

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_state.h"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

void fill(Runtime& rt, const Tensor& x, float value) {
  launch_fill(compute_stream(rt), x.data, x.dtype, x.numel(), value);
}

void copy(Runtime& rt, const Tensor& dst, const Tensor& src) {
  if (dst.nbytes() == 0) return;
  // The direction follows from the pointers (unified addressing). The copy is ordered on the
  // compute stream; a copy into host memory is complete once rt.synchronize() returns. With
  // pageable host memory it returns only when done, behind the queued work: a wait the watchdog
  // watches (a stuck collective before it would hold it forever).
  const bool host_side = dst.device.is_cpu() || src.device.is_cpu();
  Watchdog::Guard g = rt.watch_gpu_wait(host_side ? "its queued work (a copy to or from host memory)" : nullptr);
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault, compute_stream(rt)));
}

void cast(Runtime& rt, const Tensor& out, const Tensor& in) {
  launch_cast(compute_stream(rt), out.data, out.dtype, in.data, in.dtype, out.numel());
}

void add(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b) {
  launch_add(compute_stream(rt), out.data, a.data, b.data, out.dtype, out.numel());
}

void accumulate(Runtime& rt, const Tensor& out, const Tensor& a) {
  launch_accumulate(compute_stream(rt), out.data, out.dtype, a.data, a.dtype, out.numel());
}

void scale(Runtime& rt, const Tensor& x, float s) { launch_scale(compute_stream(rt), x.data, x.dtype, x.numel(), s); }

void bias_backward(Runtime& rt, const Tensor& db, const Tensor& dy, bool accumulate, int64_t batch, int64_t db_stride) {
  const int64_t rows = dy.rows() / batch, cols = dy.cols();
  if (rows == 0 || cols == 0) return;
  if (batch > 1 && !batched_colsums_fit(rows, batch)) {  // one block at a time
    const Tensor block = dy.view({batch * rows, cols}).slice(0, {rows, cols});
    for (int64_t i = 0; i < batch; ++i)
      gpu::bias_backward(rt, db.shifted(i * db_stride), block.shifted(i * rows * cols), accumulate);
    return;
  }
  const int64_t chunks = batch == 1 ? colsum_chunks(rows) : batch * batch_colsum_chunks(rows);
  auto* scratch = static_cast<float*>(rt.scratch(size_t(chunks * cols) * sizeof(float)));
  launch_bias_backward(compute_stream(rt), db.data, db.dtype, dy.data, dy.dtype, rows, cols, scratch, accumulate, batch,
                       db_stride);
}

void layernorm_forward(Runtime& rt, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& w, const Tensor& b, float eps, bool rms) {
  launch_layernorm_forward(compute_stream(rt), out.data, mean.ptr<float>(), rstd.ptr<float>(), x.data, w.data, b.data,
                           x.dtype, x.rows(), x.cols(), eps, rms);
}

void add_layernorm_forward(Runtime& rt, const Tensor& r, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& x, const Tensor& branch, const Tensor& w, const Tensor& b, float eps,
                           bool rms) {
  launch_add_layernorm_forward(compute_stream(rt), r.data, out.data, mean.ptr<float>(), rstd.ptr<float>(), x.data,
                               branch.data, w.data, b.data, x.dtype, x.rows(), x.cols(), eps, rms);
}

void layernorm_backward(Runtime& rt, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                        const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        bool accumulate_params, const ResidualColumnSums* sums, bool rms) {
  int64_t rows = x.rows(), cols = x.cols();
  if (rows == 0 || cols == 0) return;
  const int64_t floats = layernorm_backward_scratch(rows, cols, sums != nullptr);
  auto* scratch = static_cast<float*>(rt.scratch(size_t(floats) * sizeof(float)));
  ColumnSumOutputs extra;
  if (sums) extra = {sums->before.data, sums->after.data, sums->accumulate_before, sums->accumulate_after};
  CudaState& st = cuda_state(rt);
  launch_layernorm_backward(st.compute, dx.data, dw.data, db.data, dw.dtype, dout.data, x.data, w.data,
                            mean.ptr<float>(), rstd.ptr<float>(), x.dtype, rows, cols, scratch, accumulate_params,
                            st.block_shared_memory, extra, rms);
}

void gelu_forward(Runtime& rt, const Tensor& out, const Tensor& x) {
  launch_gelu_forward(compute_stream(rt), out.data, x.data, x.dtype, x.numel());
}

void gelu_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x) {
  launch_gelu_backward(compute_stream(rt), dx.data, dout.data, x.data, x.dtype, x.numel());
}

void swiglu_forward(Runtime& rt, const Tensor& g, const Tensor& h) {
  launch_swiglu_forward(compute_stream(rt), g.data, h.data, h.dtype, g.rows(), g.cols());
}

void swiglu_backward(Runtime& rt, const Tensor& dh, const Tensor& dg, const Tensor& h) {
  launch_swiglu_backward(compute_stream(rt), dh.data, dg.data, h.data, h.dtype, dg.rows(), dg.cols());
}

void rotary_embedding(Runtime& rt, const Tensor& qkv, AttentionHeads heads, const RotaryFrequencies& freqs,
                      int64_t first_position, bool inverse) {
  launch_rotary_embedding(compute_stream(rt), qkv.data, qkv.dtype, qkv.size(0), qkv.size(1),
                          qkv.size(2) / heads.qkv_heads(), qkv.size(2), heads.q + heads.kv, freqs, first_position,
                          inverse);
}

void qk_norm_forward(Runtime& rt, const Tensor& out, const Tensor& rstd, const Tensor& qkv, const Tensor& wq,
                     const Tensor& wk, AttentionHeads heads, float eps) {
  const int64_t W = qkv.size(2);
  launch_qk_norm_forward(compute_stream(rt), out.data, rstd.ptr<float>(), qkv.data, wq.data, wk.data, qkv.dtype,
                         qkv.size(0) * qkv.size(1), W, int(W / heads.qkv_heads()), heads.q + heads.kv, heads.q, eps);
}

void qk_norm_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dwq, const Tensor& dwk, const Tensor& dout,
                      const Tensor& qkv, const Tensor& wq, const Tensor& wk, const Tensor& rstd, AttentionHeads heads,
                      bool accumulate_params) {
  const int64_t rows = qkv.size(0) * qkv.size(1), W = qkv.size(2), hd = W / heads.qkv_heads();
  auto* scratch = static_cast<float*>(rt.scratch(size_t(qk_norm_backward_scratch(rows, hd)) * sizeof(float)));
  launch_qk_norm_backward(compute_stream(rt), dqkv.data, dwq.data, dwk.data, dwq.dtype, dout.data, qkv.data, wq.data,
                          wk.data, rstd.ptr<float>(), qkv.dtype, rows, W, int(hd), heads.q + heads.kv, heads.q, scratch,
                          accumulate_params);
}

void kv_cache_append(Runtime& rt, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t pos,
                     AttentionHeads heads) {
  const int64_t hd = qkv.size(2) / heads.qkv_heads();
  launch_kv_cache_append(compute_stream(rt), k_cache.data, v_cache.data, qkv.data, qkv.dtype, qkv.size(0),
                         qkv.size(1), heads.q * hd, heads.kv * hd, k_cache.size(1), pos);
}

void attention_with_cache(Runtime& rt, const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, AttentionHeads heads) {
  launch_attention_with_cache(compute_stream(rt), out.data, qkv.data, k_cache.data, v_cache.data, qkv.dtype,
                              qkv.size(0), qkv.size(1), heads.q, heads.kv, qkv.size(2) / heads.qkv_heads(),
                              k_cache.size(1), pos, heads.window);
}

void softmax_cross_entropy_forward(Runtime& rt, const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                   int64_t vocab) {
  launch_cross_entropy(compute_stream(rt), losses.ptr<float>(), nullptr, logits.data, targets.ptr<int32_t>(),
                       logits.dtype, logits.size(0), logits.size(1), vocab, 0.0f);
}

void softmax_cross_entropy_backward(Runtime& rt, const Tensor& dlogits, const Tensor& losses, const Tensor& logits,
                                    const Tensor& targets, int64_t vocab, float dloss) {
  launch_cross_entropy(compute_stream(rt), losses.ptr<float>(), dlogits.data, logits.data, targets.ptr<int32_t>(),
                       logits.dtype, logits.size(0), logits.size(1), vocab, dloss);
}

namespace {
int64_t vp_real_cols(const Tensor& logits, int64_t vocab, int64_t vocab_begin) {
  return std::clamp<int64_t>(vocab - vocab_begin, 0, logits.size(1));
}
}  // namespace

void vocab_parallel_xent_max(Runtime& rt, const Tensor& row_max, const Tensor& logits, int64_t vocab,
                             int64_t vocab_begin) {
  launch_vp_xent_max(compute_stream(rt), row_max.ptr<float>(), logits.data, logits.dtype, logits.size(0),
                     logits.size(1), vp_real_cols(logits, vocab, vocab_begin));
}

void vocab_parallel_xent_sum_exp(Runtime& rt, const Tensor& row_sum, const Tensor& target_logit, const Tensor& logits,
                                 const Tensor& targets, const Tensor& row_max, int64_t vocab, int64_t vocab_begin) {
  launch_vp_xent_sum_exp(compute_stream(rt), row_sum.ptr<float>(), target_logit.ptr<float>(), logits.data,
                         targets.ptr<int32_t>(), row_max.ptr<float>(), logits.dtype, logits.size(0), logits.size(1),
                         vp_real_cols(logits, vocab, vocab_begin), vocab_begin);
}

void vocab_parallel_xent_loss_and_grad(Runtime& rt, const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                       const Tensor& targets, const Tensor& row_max, const Tensor& row_sum,
                                       const Tensor& target_logit, int64_t vocab, int64_t vocab_begin, float dloss) {
  launch_vp_xent_loss_and_grad(compute_stream(rt), losses.ptr<float>(), dlogits.defined() ? dlogits.data : nullptr,
                               logits.data, targets.ptr<int32_t>(), row_max.ptr<float>(), row_sum.ptr<float>(),
                               target_logit.ptr<float>(), logits.dtype, logits.size(0), logits.size(1),
                               vp_real_cols(logits, vocab, vocab_begin), vocab_begin, dloss);
}

void embedding_forward(Runtime& rt, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       int64_t vocab_begin, int64_t /*vocab_size: tokens are not range-checked on the device*/,
                       const Tensor& positions) {
  launch_embedding_forward(compute_stream(rt), out.data, tokens.ptr<int32_t>(), wte.data,
                           wpe.defined() ? wpe.data : nullptr, positions.defined() ? positions.ptr<int32_t>() : nullptr,
                           wte.dtype, tokens.size(0), tokens.size(1), wte.size(1), vocab_begin, wte.size(0));
}

void embedding_backward(Runtime& rt, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_begin, int64_t vocab_size) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t C = dwte.defined() ? dwte.size(1) : dwpe.defined() ? dwpe.size(1) : 0;
  if (B * T * C == 0) return;
  size_t bytes = 0;
  void* scratch = nullptr;
  if (dwte.defined()) {
    bytes = embedding_backward_scratch_bytes(B * T, vocab_size);
    scratch = rt.scratch(bytes);
  }
  launch_embedding_backward(compute_stream(rt), dwte.defined() ? dwte.data : nullptr, dwte.dtype,
                            dwpe.defined() ? dwpe.data : nullptr, dwpe.dtype, dout.data, tokens.ptr<int32_t>(),
                            dout.dtype, B, T, C, vocab_begin, dwte.defined() ? dwte.size(0) : 0, vocab_size, scratch,
                            bytes);
}

namespace {
DropoutIndex dropout_index(const Tensor& t, float p, const DropoutKey& key) {
  DropoutIndex k{};
  k.cols = t.cols() > 0 ? t.cols() : 1;
  k.global_cols = key.global_cols > 0 ? key.global_cols : k.cols;
  k.col_offset = key.col_offset;
  k.seq_local = key.seq_local;
  k.seq_global = key.seq_global;
  k.seq_offset = key.seq_offset;
  k.seed = key.seed;
  k.stream = key.stream;
  k.p = p;
  k.inv_keep = 1.0f / (1.0f - p);
  return k;
}
}  // namespace

void dropout_forward(Runtime& rt, const Tensor& out, const Tensor& x, float p, const DropoutKey& key) {
  launch_dropout(compute_stream(rt), out.data, x.data, x.dtype, x.numel(), dropout_index(x, p, key));
}

void dropout_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, float p, const DropoutKey& key) {
  launch_dropout(compute_stream(rt), dx.data, dout.data, dout.dtype, dout.numel(), dropout_index(dout, p, key));
}

void adamw_step_scalars(Runtime& rt, const Tensor& scalars, const Tensor& loss_sum, const Tensor& norm_sq) {
  launch_adamw_step_scalars(compute_stream(rt), scalars.ptr<float>(), loss_sum.ptr<float>(), norm_sq.ptr<float>());
}

void adamw_step(Runtime& rt, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params_out, const AdamWHyper& h, float grad_scale, const AdamWRuns* runs) {
  AdamWArgs a{};
  a.lr = h.lr;
  a.beta1 = h.beta1;
  a.beta2 = h.beta2;
  a.eps = h.eps;
  a.weight_decay = h.weight_decay;
  a.bc1 = bias_correction(h.beta1, h.step);
  a.bc2 = bias_correction(h.beta2, h.step);
  a.grad_scale = grad_scale;
  a.scalars = h.scalars.defined() ? h.scalars.ptr<float>() : nullptr;
  const size_t es = params_out.defined() ? dtype_size(params_out.dtype) : 0, gs = dtype_size(grad.dtype);
  const bool split = master.dtype == DType::bf16;  // split masters (core/ops.h)
  auto launch = [&](int64_t begin, int64_t n, const AdamWRunTable& t) {
    if (split) {
      launch_adamw_split(compute_stream(rt), static_cast<char*>(params_out.data) + size_t(begin) * 2,
                         static_cast<char*>(master.data) + size_t(begin) * 2, m.ptr<float>() + begin,
                         v.ptr<float>() + begin, static_cast<const char*>(grad.data) + size_t(begin) * gs, grad.dtype,
                         n, a, t);
      return;
    }
    launch_adamw(compute_stream(rt), master.ptr<float>() + begin, m.ptr<float>() + begin, v.ptr<float>() + begin,
                 static_cast<const char*>(grad.data) + size_t(begin) * gs, grad.dtype,
                 params_out.defined() ? static_cast<char*>(params_out.data) + size_t(begin) * es : nullptr,
                 params_out.dtype, n, a, t);
  };
  if (!runs) {
    AdamWRunTable t{};
    t.end[0] = master.numel();
    t.decay = 1;
    t.count = 1;
    launch(0, master.numel(), t);
    return;
  }
  // Up to kAdamWRunsPerLaunch runs per launch, each launch on its own span.
  for (size_t first = 0; first < runs->ends.size(); first += kAdamWRunsPerLaunch) {
    const int64_t begin = first == 0 ? 0 : runs->ends[first - 1];
    AdamWRunTable t{};
    t.count = int(std::min<size_t>(kAdamWRunsPerLaunch, runs->ends.size() - first));
    for (int r = 0; r < t.count; ++r) {
      t.end[r] = runs->ends[first + size_t(r)] - begin;
      if (runs->decays[first + size_t(r)]) t.decay |= 1u << r;
    }
    launch(begin, t.end[t.count - 1], t);
  }
}

void sum_accumulate(Runtime& rt, const Tensor& out, const Tensor& x) {
  auto* scratch = static_cast<float*>(rt.scratch(kSumPartials * sizeof(float)));
  launch_sum(compute_stream(rt), out.ptr<float>(), x.data, x.dtype, x.numel(), false, scratch);
}

void sum_squares_accumulate(Runtime& rt, const Tensor& out, const Tensor& x) {
  auto* scratch = static_cast<float*>(rt.scratch(kSumPartials * sizeof(float)));
  launch_sum(compute_stream(rt), out.ptr<float>(), x.data, x.dtype, x.numel(), true, scratch);
}

}  // namespace trellis::gpu
