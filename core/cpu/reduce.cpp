// CPU deterministic reductions to an f32 scalar: fixed chunks summed in double, combined in order.
#include <algorithm>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinChunk = 4096;

// out[0] += sum of f(x_i). Chunk boundaries depend only on n, never on the thread count.
template <bool kSquare> void sum_into(const Tensor& out, const Tensor& x) {
  const int64_t n = x.numel();
  const int64_t chunk = std::max(kMinChunk, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t nchunks = (n + chunk - 1) / chunk;
  double part[kMaxChunks] = {};
  dispatch_float(x.dtype, "sum_accumulate", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.ptr<T>();
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (int64_t k = 0; k < nchunks; ++k) {
      double s = 0;
      for (int64_t i = k * chunk, e = std::min(n, i + chunk); i < e; ++i) {
        const double v = load(p, i);
        s += kSquare ? v * v : v;
      }
      part[k] = s;
    }
  });
  double total = 0;
  for (int64_t k = 0; k < nchunks; ++k) total += part[k];
  float* o = out.ptr<float>();
  o[0] = float(double(o[0]) + total);
}

}  // namespace

void sum_accumulate(Runtime&, const Tensor& out, const Tensor& x) { sum_into<false>(out, x); }
void sum_squares_accumulate(Runtime&, const Tensor& out, const Tensor& x) { sum_into<true>(out, x); }

}  // namespace trellis::cpu
