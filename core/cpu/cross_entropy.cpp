// CPU softmax cross-entropy over a padded vocabulary (padded columns masked out), forward and
// fused forward+backward (which may run in place on the logits).
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
      T* dx = pd + r * Vp;  // may be x itself: every element is read before it is written
      const int32_t t = tg[r];
      if (t < 0) {
        lo[r] = 0.0f;
        for (int64_t c = 0; c < Vp; ++c) store(dx, c, 0.0f);
        continue;
      }
      const float lse = row_lse(x, vocab);
      lo[r] = lse - load(x, t);
      for (int64_t c = 0; c < vocab; ++c) {
        const float p = std::exp(load(x, c) - lse);
        store(dx, c, dloss * (c == t ? p - 1.0f : p));
      }
      for (int64_t c = vocab; c < Vp; ++c) store(dx, c, 0.0f);
    }
  });
}

}  // namespace trellis::cpu
