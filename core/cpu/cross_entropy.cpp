// CPU softmax cross-entropy over a padded vocabulary (padded columns masked out), forward and
// fused forward+backward (which may run in place on the logits); and the three passes of the
// vocabulary-parallel form (row max, sum of exp and target logit, losses and gradient on a shard).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

// Log-sum-exp of the first `vocab` entries of a row, max-subtracted, summed in double.
template <typename T> float row_lse(const T* x, int64_t vocab) {
  float mx = -INFINITY;
  for (int64_t c = 0; c < vocab; ++c) mx = std::max(mx, load(x, c));
  double s = 0;
  for (int64_t c = 0; c < vocab; ++c) s += std::exp(double(load(x, c) - mx));
  return float(double(mx) + std::log(s));
}

// dx = dloss * (softmax - onehot(t)) over the n real columns of a row of `cols`, zeros in the
// padding; t outside [0, n) puts no one-hot in this row (a target in another shard). dx may alias x:
// every element is read before it is written.
template <typename T>
void write_xent_grad(T* dx, const T* x, int64_t n, int64_t cols, float lse, int64_t t, float dloss) {
  for (int64_t c = 0; c < n; ++c) {
    const float p = std::exp(load(x, c) - lse);
    store(dx, c, dloss * (c == t ? p - 1.0f : p));
  }
  for (int64_t c = n; c < cols; ++c) store(dx, c, 0.0f);
}

void check_target(int32_t t, int64_t vocab) {
  if (t < -1 || t >= vocab)
    TRELLIS_FATAL("softmax_cross_entropy: target " + std::to_string(t) + " outside [-1, " +
                  std::to_string(vocab) + ")");
}

}  // namespace

void softmax_cross_entropy_forward(Runtime&, const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                   int64_t vocab) {
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const int32_t* tg = targets.ptr<int32_t>();
  float* lo = losses.ptr<float>();
  for (int64_t r = 0; r < N; ++r) check_target(tg[r], vocab);
  dispatch_float(logits.dtype, "softmax_cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.ptr<T>();
#pragma omp parallel for schedule(static) if (N * vocab > kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* x = px + r * Vp;
      lo[r] = tg[r] < 0 ? 0.0f : row_lse(x, vocab) - load(x, tg[r]);
    }
  });
}

void softmax_cross_entropy_backward(Runtime&, const Tensor& dlogits, const Tensor& losses, const Tensor& logits,
                                    const Tensor& targets, int64_t vocab, float dloss) {
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const int32_t* tg = targets.ptr<int32_t>();
  float* lo = losses.ptr<float>();
  for (int64_t r = 0; r < N; ++r) check_target(tg[r], vocab);
  dispatch_float(logits.dtype, "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.ptr<T>();
    T* pd = dlogits.ptr<T>();
#pragma omp parallel for schedule(static) if (N * vocab > kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* x = px + r * Vp;
      T* dx = pd + r * Vp;  // may be x itself
      const int32_t t = tg[r];
      if (t < 0) {
        lo[r] = 0.0f;
        for (int64_t c = 0; c < Vp; ++c) store(dx, c, 0.0f);
        continue;
      }
      const float lse = row_lse(x, vocab);
      lo[r] = lse - load(x, t);
      write_xent_grad(dx, x, vocab, Vp, lse, t, dloss);
    }
  });
}

// ---- vocabulary-parallel passes: the shard holds global columns [vocab_begin, vocab_begin + cols) ----

namespace {
// Columns of the shard that are real vocabulary (the rest is padding).
int64_t real_cols(int64_t cols, int64_t vocab, int64_t vocab_begin) {
  return std::clamp<int64_t>(vocab - vocab_begin, 0, cols);
}
}  // namespace

void vocab_parallel_xent_max(Runtime&, const Tensor& row_max, const Tensor& logits, int64_t vocab,
                             int64_t vocab_begin) {
  const int64_t N = logits.size(0), cols = logits.size(1), n = real_cols(cols, vocab, vocab_begin);
  float* mx = row_max.ptr<float>();
  dispatch_float(logits.dtype, "vocab_parallel_xent_max", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.ptr<T>();
#pragma omp parallel for schedule(static) if (N * n > kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* x = px + r * cols;
      float m = -INFINITY;
      for (int64_t c = 0; c < n; ++c) m = std::max(m, load(x, c));
      mx[r] = m;
    }
  });
}

void vocab_parallel_xent_sum_exp(Runtime&, const Tensor& row_sum, const Tensor& target_logit, const Tensor& logits,
                                 const Tensor& targets, const Tensor& row_max, int64_t vocab, int64_t vocab_begin) {
  const int64_t N = logits.size(0), cols = logits.size(1), n = real_cols(cols, vocab, vocab_begin);
  const int32_t* tg = targets.ptr<int32_t>();
  const float* mx = row_max.ptr<float>();
  float *sum = row_sum.ptr<float>(), *xt = target_logit.ptr<float>();
  for (int64_t r = 0; r < N; ++r) check_target(tg[r], vocab);
  dispatch_float(logits.dtype, "vocab_parallel_xent_sum_exp", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.ptr<T>();
#pragma omp parallel for schedule(static) if (N * n > kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* x = px + r * cols;
      const float m = mx[r];
      double s = 0;  // as row_lse: max-subtracted in f32, summed in double
      for (int64_t c = 0; c < n; ++c) s += std::exp(double(load(x, c) - m));
      sum[r] = float(s);
      const int64_t t = int64_t(tg[r]) - vocab_begin;
      xt[r] = tg[r] >= 0 && t >= 0 && t < n ? load(x, t) : 0.0f;
    }
  });
}

void vocab_parallel_xent_loss_and_grad(Runtime&, const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                       const Tensor& targets, const Tensor& row_max, const Tensor& row_sum,
                                       const Tensor& target_logit, int64_t vocab, int64_t vocab_begin,
                                       float dloss) {
  const int64_t N = logits.size(0), cols = logits.size(1), n = real_cols(cols, vocab, vocab_begin);
  const int32_t* tg = targets.ptr<int32_t>();
  const float *mx = row_max.ptr<float>(), *sum = row_sum.ptr<float>(), *xt = target_logit.ptr<float>();
  float* lo = losses.ptr<float>();
  for (int64_t r = 0; r < N; ++r) check_target(tg[r], vocab);
  // The log-sum-exp of the full row, as row_lse computes it.
  auto lse_of = [&](int64_t r) { return float(double(mx[r]) + std::log(double(sum[r]))); };
  for (int64_t r = 0; r < N; ++r) lo[r] = tg[r] < 0 ? 0.0f : lse_of(r) - xt[r];
  if (!dlogits.defined()) return;
  dispatch_float(logits.dtype, "vocab_parallel_xent_loss_and_grad", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.ptr<T>();
    T* pd = dlogits.ptr<T>();
#pragma omp parallel for schedule(static) if (N * cols > kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* x = px + r * cols;
      T* dx = pd + r * cols;  // may be x itself
      if (tg[r] < 0) {
        for (int64_t c = 0; c < cols; ++c) store(dx, c, 0.0f);
        continue;
      }
      // The target's column in the shard, if it is there.
      write_xent_grad(dx, x, n, cols, lse_of(r), int64_t(tg[r]) - vocab_begin, dloss);
    }
  });
}

}  // namespace trellis::cpu
