// CPU layer norm over the last dimension: forward (saving mean, rstd) and accumulating backward;
// with rms, RMSNorm (the mean taken as 0). A missing bias b adds nothing and gets no gradient.
#include <algorithm>
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void layernorm_forward(Runtime&, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& w, const Tensor& b, float eps, bool rms) {
  const int64_t R = outer_dim(x), C = inner_dim(x);
  dispatch_float(x.dtype, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.ptr<T>(), *pw = w.ptr<T>(), *pb = b.ptr<T>();
    T* po = out.ptr<T>();
    float *pm = mean.ptr<float>(), *ps = rstd.ptr<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = px + r * C;
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += load(xr, c);
      const double mu = rms ? 0.0 : s / double(C);
      double v = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double d = load(xr, c) - mu;
        v += d * d;
      }
      const float m = float(mu), rs = float(1.0 / std::sqrt(v / double(C) + double(eps)));
      for (int64_t c = 0; c < C; ++c)
        store(po, r * C + c, (load(xr, c) - m) * rs * load(pw, c) + (pb ? load(pb, c) : 0.0f));
      pm[r] = m;
      ps[r] = rs;
    }
  });
}

// The separate ops in turn: bitwise what add then layernorm_forward write.
void add_layernorm_forward(Runtime& rt, const Tensor& r, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& x, const Tensor& branch, const Tensor& w, const Tensor& b, float eps,
                           bool rms) {
  cpu::add(rt, r, x, branch);
  cpu::layernorm_forward(rt, out, mean, rstd, r, w, b, eps, rms);
}

void layernorm_backward(Runtime& rt, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                        const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        bool accumulate_params, const ResidualColumnSums* sums, bool rms) {
  const int64_t R = outer_dim(x), C = inner_dim(x);
  const Tensor dx2d = dx.view({R, C});
  if (sums) cpu::bias_backward(rt, sums->before, dx2d, sums->accumulate_before);
  dispatch_float(x.dtype, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.ptr<T>(), *pw = w.ptr<T>(), *pd = dout.ptr<T>();
    T* pdx = dx.ptr<T>();
    const float *pm = mean.ptr<float>(), *ps = rstd.ptr<float>();
    // dx: rows are independent.
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T *xr = px + r * C, *dr = pd + r * C;
      const float m = pm[r], rs = ps[r];
      double sum_g = 0, sum_gx = 0;  // sums of dnorm and dnorm * xhat over the row
      for (int64_t c = 0; c < C; ++c) {
        const float g = load(dr, c) * load(pw, c);
        sum_g += g;
        sum_gx += double(g) * ((load(xr, c) - m) * rs);
      }
      const float mg = rms ? 0.0f : float(sum_g / double(C)), mgx = float(sum_gx / double(C));
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (load(xr, c) - m) * rs;
        const float g = load(dr, c) * load(pw, c);
        store(pdx, r * C + c, load(pdx, r * C + c) + (g - mg - xhat * mgx) * rs);
      }
    }
    // dw, db: sums over rows, parallel over column blocks, each column in row order.
    constexpr int64_t kBlock = 32;
    const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      double aw[kBlock] = {}, ab[kBlock] = {};
      for (int64_t r = 0; r < R; ++r) {
        const float m = pm[r], rs = ps[r];
        for (int64_t c = c0; c < c1; ++c) {
          const float d = load(pd, r * C + c);
          aw[c - c0] += double(d) * ((load(px, r * C + c) - m) * rs);
          ab[c - c0] += d;
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        add_into(dw, c, aw[c - c0], accumulate_params);
        if (db.defined()) add_into(db, c, ab[c - c0], accumulate_params);
      }
    }
  });
  if (sums) cpu::bias_backward(rt, sums->after, dx2d, sums->accumulate_after);
}

}  // namespace trellis::cpu
