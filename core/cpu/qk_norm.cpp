// CPU QK-norm: RMSNorm of each query and key head of a qkv tensor (core/ops.h), forward and backward.
#include <cmath>
#include <vector>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {
// Where head j (< H + Hkv: the q heads, then the k heads) of token row r starts in qkv, and its weight.
struct NormedHeads {
  int64_t rows, W, hd, heads;  // heads = H + Hkv
  int q;
  int64_t at(int64_t r, int64_t j) const { return r * W + j * hd; }
};
NormedHeads normed_heads(const Tensor& qkv, AttentionHeads h) {
  const int64_t W = qkv.size(2);
  return {qkv.size(0) * qkv.size(1), W, W / h.qkv_heads(), int64_t(h.q) + h.kv, h.q};
}
}  // namespace

void qk_norm_forward(Runtime&, const Tensor& out, const Tensor& rstd, const Tensor& qkv, const Tensor& wq,
                     const Tensor& wk, AttentionHeads heads, float eps) {
  const NormedHeads d = normed_heads(qkv, heads);
  dispatch_float(qkv.dtype, "qk_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = qkv.ptr<T>(), *pq = wq.ptr<T>(), *pk = wk.ptr<T>();
    T* po = out.ptr<T>();
    float* ps = rstd.ptr<float>();
#pragma omp parallel for schedule(static) if (d.rows * d.W > kParallelMin)
    for (int64_t r = 0; r < d.rows; ++r) {
      for (int64_t j = 0; j < d.heads; ++j) {
        const T* x = px + d.at(r, j);
        const T* w = j < d.q ? pq : pk;
        double ss = 0;
        for (int64_t i = 0; i < d.hd; ++i) ss += double(load(x, i)) * load(x, i);
        const float rs = float(1.0 / std::sqrt(ss / double(d.hd) + double(eps)));
        for (int64_t i = 0; i < d.hd; ++i) store(po, d.at(r, j) + i, load(x, i) * rs * load(w, i));
        ps[r * d.heads + j] = rs;
      }
      if (po != px)  // v
        for (int64_t i = d.heads * d.hd; i < d.W; ++i) po[r * d.W + i] = px[r * d.W + i];
    }
  });
}

void qk_norm_backward(Runtime&, const Tensor& dqkv, const Tensor& dwq, const Tensor& dwk, const Tensor& dout,
                      const Tensor& qkv, const Tensor& wq, const Tensor& wk, const Tensor& rstd, AttentionHeads heads,
                      bool accumulate_params) {
  const NormedHeads d = normed_heads(qkv, heads);
  dispatch_float(qkv.dtype, "qk_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = qkv.ptr<T>(), *pq = wq.ptr<T>(), *pk = wk.ptr<T>(), *pd = dout.ptr<T>();
    T* pdx = dqkv.ptr<T>();
    const float* ps = rstd.ptr<float>();
    // The weight gradients first, while dout is whole (dqkv may be dout): column i sums dout * xhat
    // over the rows in order and their heads in order.
    std::vector<double> gq(size_t(d.hd), 0.0), gk(size_t(d.hd), 0.0);
#pragma omp parallel for schedule(static) if (d.rows * d.W > kParallelMin)
    for (int64_t i = 0; i < d.hd; ++i) {
      for (int64_t r = 0; r < d.rows; ++r)
        for (int64_t j = 0; j < d.heads; ++j) {
          const double v = double(load(pd, d.at(r, j) + i)) * (load(px, d.at(r, j) + i) * ps[r * d.heads + j]);
          (j < d.q ? gq : gk)[size_t(i)] += v;
        }
    }
    for (int64_t i = 0; i < d.hd; ++i) {
      add_into(dwq, i, gq[size_t(i)], accumulate_params);
      add_into(dwk, i, gk[size_t(i)], accumulate_params);
    }
    // dx = rstd (g - xhat mean(g xhat)), g = dout * w, per head.
#pragma omp parallel for schedule(static) if (d.rows * d.W > kParallelMin)
    for (int64_t r = 0; r < d.rows; ++r) {
      for (int64_t j = 0; j < d.heads; ++j) {
        const int64_t o = d.at(r, j);
        const T* w = j < d.q ? pq : pk;
        const float rs = ps[r * d.heads + j];
        double sum_gx = 0;
        for (int64_t i = 0; i < d.hd; ++i) sum_gx += double(load(pd, o + i) * load(w, i)) * (load(px, o + i) * rs);
        const float mgx = float(sum_gx / double(d.hd));
        for (int64_t i = 0; i < d.hd; ++i) {
          const float xhat = load(px, o + i) * rs, g = load(pd, o + i) * load(w, i);
          store(pdx, o + i, (g - xhat * mgx) * rs);
        }
      }
      if (pdx != pd)  // v
        for (int64_t i = d.heads * d.hd; i < d.W; ++i) pdx[r * d.W + i] = pd[r * d.W + i];
    }
  });
}

}  // namespace trellis::cpu
