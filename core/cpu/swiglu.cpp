// CPU SwiGLU: g = silu(gate) * up over rows of h = [gate | up], and its backward.
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void swiglu_forward(Runtime&, const Tensor& g, const Tensor& h) {
  const int64_t rows = g.rows(), F = g.cols();
  dispatch_float(h.dtype, "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* ph = h.ptr<T>();
    T* pg = g.ptr<T>();
#pragma omp parallel for schedule(static) if (rows * F > kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < F; ++i) {
        const float a = load(ph, r * 2 * F + i), b = load(ph, r * 2 * F + F + i);
        store(pg, r * F + i, a * sigmoid(a) * b);
      }
  });
}

void swiglu_backward(Runtime&, const Tensor& dh, const Tensor& dg, const Tensor& h) {
  const int64_t rows = dg.rows(), F = dg.cols();
  dispatch_float(h.dtype, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *ph = h.ptr<T>(), *pd = dg.ptr<T>();
    T* pdh = dh.ptr<T>();
#pragma omp parallel for schedule(static) if (rows * F > kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < F; ++i) {
        const float a = load(ph, r * 2 * F + i), b = load(ph, r * 2 * F + F + i), d = load(pd, r * F + i);
        const float s = sigmoid(a);
        store(pdh, r * 2 * F + i, d * b * s * (1.0f + a * (1.0f - s)));  // silu'(a) = s (1 + a (1 - s))
        store(pdh, r * 2 * F + F + i, d * a * s);
      }
  });
}

}  // namespace trellis::cpu
