// CPU rotary position embedding: each (sample, position) row's q and k heads turned in place.
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void rotary_embedding(Runtime&, const Tensor& qkv, AttentionHeads heads, const RotaryFrequencies& freqs,
                      int64_t first_position, bool inverse) {
  const int64_t B = qkv.size(0), T = qkv.size(1), W = qkv.size(2), hd = W / heads.qkv_heads(), half = freqs.turned(hd) / 2;
  dispatch_float(qkv.dtype, "rotary_embedding", [&](auto tag) {
    using T_ = decltype(tag);
    T_* base = qkv.ptr<T_>();
#pragma omp parallel for schedule(static) if (B * T * W > kParallelMin)
    for (int64_t row = 0; row < B * T; ++row) {
      const double pos = double(first_position + row % T);
      T_* r = base + row * W;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * freqs.inverse_frequency(i, half);  // theta^(-2i/dims), unless scaled
        const double a = freqs.amplitude();  // YaRN's; the backward (inverse) scales by it too
        const float c = float(std::cos(angle) * a), s = float((inverse ? -std::sin(angle) : std::sin(angle)) * a);
        for (int64_t h = 0; h < heads.q + heads.kv; ++h) {  // q's heads, then k's
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
