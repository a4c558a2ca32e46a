// CPU rotary position embedding: each (sample, position) row's q and k heads turned in place.
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void rotary_embedding(Runtime&, const Tensor& qkv, int n_heads, double theta, int64_t first_position, bool inverse) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hd = C / n_heads, half = hd / 2;
  dispatch_float(qkv.dtype, "rotary_embedding", [&](auto tag) {
    using T_ = decltype(tag);
    T_* base = qkv.ptr<T_>();
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
    for (int64_t row = 0; row < B * T; ++row) {
      const double pos = double(first_position + row % T);
      T_* r = base + row * 3 * C;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(theta, -double(i) / double(half));  // theta^(-2i/hd)
        const float c = float(std::cos(angle)), s = inverse ? -float(std::sin(angle)) : float(std::sin(angle));
        for (int64_t h = 0; h < 2 * n_heads; ++h) {  // q's heads, then k's
          T_* x = r + h * hd;
          const float x1 = load(x, i), x2 = load(x, i + half);
          store(x, i, x1 * c - x2 * s);
          store(x, i + half, x2 * c + x1 * s);
        }
      }
    }
  });
}

}  // namespace trellis::cpu
