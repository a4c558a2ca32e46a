// CPU GELU, GPT-2's tanh approximation: forward and backward (dx may alias dout).
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(Runtime&, const Tensor& out, const Tensor& x) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* po = out.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = load(px, i);
      store(po, i, 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v))));
    }
  });
}

void gelu_backward(Runtime&, const Tensor& dx, const Tensor& dout, const Tensor& x) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.ptr<T>(), *pd = dout.ptr<T>();
    T* pdx = dx.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = load(px, i);
      const float th = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
      const float dudx = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
      const float grad = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * dudx;
      store(pdx, i, load(pd, i) * grad);
    }
  });
}

}  // namespace trellis::cpu
