// CPU dropout with a Philox mask keyed by (seed, stream, global element index), so every layout and
// every recomputation draws the same mask.
#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"
#include "core/philox.h"

namespace trellis::cpu {

namespace {

// out = in * keep / (1 - p) over the local (rows, cols) block; out may alias in.
void apply_mask(Runtime& rt, const Tensor& out, const Tensor& in, float p, const DropoutKey& key) {
  if (p == 0.0f) {
    cpu::copy(rt, out, in);
    return;
  }
  const int64_t rows = outer_dim(in), cols = inner_dim(in);
  const int64_t gcols = key.global_cols > 0 ? key.global_cols : cols;
  const float inv_keep = 1.0f / (1.0f - p);
  dispatch_float(in.dtype, "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* pi = in.ptr<T>();
    T* po = out.ptr<T>();
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t grow =
          key.seq_local > 0 ? (r / key.seq_local) * key.seq_global + key.seq_offset + r % key.seq_local : r;
      const uint64_t base = uint64_t(grow) * uint64_t(gcols) + uint64_t(key.col_offset);
      for (int64_t c = 0; c < cols; ++c) {
        const bool keep = philox_uniform(philox_word(key.seed, key.stream, base + uint64_t(c))) >= p;
        store(po, r * cols + c, keep ? load(pi, r * cols + c) * inv_keep : 0.0f);
      }
    }
  });
}

}  // namespace

void dropout_forward(Runtime& rt, const Tensor& out, const Tensor& x, float p, const DropoutKey& key) {
  apply_mask(rt, out, x, p, key);
}

void dropout_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, float p, const DropoutKey& key) {
  apply_mask(rt, dx, dout, p, key);
}

}  // namespace trellis::cpu
