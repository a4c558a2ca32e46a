// CPU mixture-of-experts routing: top-k softmax gates with a fixed capacity per expert, the
// dispatch of token rows into expert slots, the gated combine, and their backwards.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void moe_route(Runtime&, const Tensor& probs, const Tensor& lse, const Tensor& expert, const Tensor& gate,
               const Tensor& slot, const Tensor& slot_token, const Tensor& counts, const Tensor& logits,
               bool renormalize, bool dropless) {
  const int64_t N = logits.size(0), E = logits.size(1), K = expert.size(1);
  const int64_t cap = dropless ? N : slot_token.numel() / E;  // an expert takes each token at most once
  const bool norm = renormalize && K > 1;
  const float* lg = logits.ptr<float>();
  float *pr = probs.ptr<float>(), *ls = lse.ptr<float>(), *gt = gate.ptr<float>(), *cn = counts.ptr<float>();
  int32_t *ex = expert.ptr<int32_t>(), *sl = slot.ptr<int32_t>(), *st = slot_token.ptr<int32_t>();
#pragma omp parallel for schedule(static) if (N * E > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = lg + n * E;
    float* p = pr + n * E;
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    ls[n] = mx + std::log(sum);
    // The K largest logits (softmax keeps their order), the lower expert first among equals.
    int32_t* x = ex + n * K;
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (std::find(x, x + k, int32_t(e)) != x + k) continue;
        if (best < 0 || l[e] > l[best]) best = e;
      }
      x[k] = int32_t(best);
    }
    float chosen = 0;
    for (int64_t k = 0; k < K; ++k) chosen += p[x[k]];
    for (int64_t k = 0; k < K; ++k) gt[n * K + k] = norm ? p[x[k]] / chosen : p[x[k]];
  }
  // An expert's first slot: e x capacity, or dropless, after the choices of the experts before it.
  std::vector<int64_t> first(size_t(E), 0), filled(size_t(E), 0);
  if (dropless) {
    for (int64_t i = 0; i < N * K; ++i) ++filled[size_t(ex[i])];
    for (int64_t e = 1; e < E; ++e) first[size_t(e)] = first[size_t(e - 1)] + filled[size_t(e - 1)];
    std::fill(filled.begin(), filled.end(), 0);
  } else {
    for (int64_t e = 0; e < E; ++e) first[size_t(e)] = e * cap;
  }
  // Slots in priority order: every token's first choice in token order, then the second choices...
  std::fill(st, st + slot_token.numel(), -1);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t e = ex[n * K + k], pos = filled[size_t(e)]++, s = first[size_t(e)] + pos;
      sl[n * K + k] = pos < cap ? int32_t(s) : -1;
      if (pos < cap) st[s] = int32_t(n * K + k);
    }
  for (int64_t e = 0; e < E; ++e) cn[e] = float(filled[size_t(e)]);
}

void moe_dispatch(Runtime&, const Tensor& xe, const Tensor& x, const Tensor& slot_token, int64_t top_k) {
  const int64_t S = xe.size(0), C = xe.size(1);
  const int32_t* st = slot_token.ptr<int32_t>();
  dispatch_float(x.dtype, "moe_dispatch", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* po = xe.ptr<T>();
#pragma omp parallel for schedule(static) if (S * C > kParallelMin)
    for (int64_t s = 0; s < S; ++s) {
      if (st[s] < 0) std::fill(po + s * C, po + (s + 1) * C, from_float<T>(0.0f));
      else std::copy(px + (st[s] / top_k) * C, px + (st[s] / top_k + 1) * C, po + s * C);
    }
  });
}

void moe_dispatch_backward(Runtime&, const Tensor& dx, const Tensor& dxe, const Tensor& slot, bool accumulate) {
  const int64_t N = slot.size(0), K = slot.size(1), C = dx.cols();
  const int32_t* sl = slot.ptr<int32_t>();
  dispatch_float(dx.dtype, "moe_dispatch_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pe = dxe.ptr<T>();
    T* pd = dx.ptr<T>();
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        float v = 0.0f;  // the choices' sum, then the earlier gradient (the combine's order)
        for (int64_t k = 0; k < K; ++k)
          if (sl[n * K + k] >= 0) v += load(pe, int64_t(sl[n * K + k]) * C + c);
        store(pd, n * C + c, accumulate ? load(pd, n * C + c) + v : v);
      }
  });
}

void moe_combine(Runtime&, const Tensor& out, const Tensor& ye, const Tensor& slot, const Tensor& gate,
                 const Tensor& residual) {
  const int64_t N = slot.size(0), K = slot.size(1), C = out.cols();
  const int32_t* sl = slot.ptr<int32_t>();
  const float* gt = gate.ptr<float>();
  dispatch_float(out.dtype, "moe_combine", [&](auto tag) {
    using T = decltype(tag);
    const T *py = ye.ptr<T>(), *pr = residual.defined() ? residual.ptr<T>() : nullptr;
    T* po = out.ptr<T>();
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        float v = 0;
        for (int64_t k = 0; k < K; ++k)
          if (sl[n * K + k] >= 0) v += gt[n * K + k] * load(py, int64_t(sl[n * K + k]) * C + c);
        store(po, n * C + c, pr ? load(pr, n * C + c) + v : v);
      }
  });
}

void moe_combine_backward(Runtime&, const Tensor& dye, const Tensor& dgate, const Tensor& dout, const Tensor& ye,
                          const Tensor& slot, const Tensor& slot_token, const Tensor& gate) {
  const int64_t N = slot.size(0), K = slot.size(1), S = dye.size(0), C = dye.size(1);
  const int32_t *sl = slot.ptr<int32_t>(), *st = slot_token.ptr<int32_t>();
  const float* gt = gate.ptr<float>();
  float* dg = dgate.ptr<float>();
  dispatch_float(dout.dtype, "moe_combine_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pd = dout.ptr<T>(), *py = ye.ptr<T>();
    T* pe = dye.ptr<T>();
#pragma omp parallel for schedule(static) if (S * C > kParallelMin)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t nk = st[s], n = nk / K;
      for (int64_t c = 0; c < C; ++c) store(pe, s * C + c, nk < 0 ? 0.0f : gt[nk] * load(pd, n * C + c));
    }
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t s = sl[n * K + k];
        float v = 0;
        if (s >= 0)
          for (int64_t c = 0; c < C; ++c) v += load(pd, n * C + c) * load(py, s * C + c);
        dg[n * K + k] = v;
      }
  });
}

void moe_router_backward(Runtime&, const Tensor& dlogits, const Tensor& dgate, const Tensor& probs,
                         const Tensor& lse, const Tensor& expert, const Tensor& gate, const Tensor& counts,
                         float aux_scale, float z_scale, bool renormalize) {
  const int64_t N = probs.size(0), E = probs.size(1), K = expert.size(1);
  const bool norm = renormalize && K > 1;
  const float *pr = probs.ptr<float>(), *ls = lse.ptr<float>(), *dg = dgate.ptr<float>(), *gt = gate.ptr<float>(),
              *cn = counts.ptr<float>();
  const int32_t* ex = expert.ptr<int32_t>();
  float* dl = dlogits.ptr<float>();
  // The balancing loss E * sum_e f_e P_e, f_e = counts_e / (N K), P_e = the mean of probs[:, e]:
  // d/dprobs[n, e] = E f_e / N.
  const float aux = aux_scale * float(E) / (float(N) * float(N) * float(K));
  // The z-loss mean_n lse_n^2: d/dlogits[n, e] = 2 lse_n probs[n, e] / N (dlse/dlogits = probs).
  const float z = z_scale * 2.0f / float(N);
#pragma omp parallel for schedule(static) if (N * E > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = pr + n * E;
    float* d = dl + n * E;  // dL/dprobs first, then dL/dlogits in place
    for (int64_t e = 0; e < E; ++e) d[e] = aux * cn[e];
    if (!norm) {  // gate_k = p[e_k]
      for (int64_t k = 0; k < K; ++k) d[ex[n * K + k]] += dg[n * K + k];
    } else {  // gate_k = p[e_k] / S, S the sum of the chosen probs
      float chosen = 0, dot = 0;
      for (int64_t k = 0; k < K; ++k) {
        chosen += p[ex[n * K + k]];
        dot += dg[n * K + k] * gt[n * K + k];
      }
      for (int64_t k = 0; k < K; ++k) d[ex[n * K + k]] += (dg[n * K + k] - dot) / chosen;
    }
    float pd = 0;
    for (int64_t e = 0; e < E; ++e) pd += p[e] * d[e];
    const float zn = z * ls[n];
    for (int64_t e = 0; e < E; ++e) d[e] = p[e] * (d[e] - pd + zn);
  }
}

void moe_statistics(Runtime&, const Tensor& stats, const Tensor& probs, const Tensor& lse, const Tensor& counts,
                    int64_t top_k, int64_t capacity) {
  const int64_t N = probs.size(0), E = probs.size(1);
  const float *pr = probs.ptr<float>(), *ls = lse.ptr<float>(), *cn = counts.ptr<float>();
  double aux = 0, dropped = 0, z = 0;
  for (int64_t n = 0; n < N; ++n) z += double(ls[n]) * double(ls[n]);
  for (int64_t e = 0; e < E; ++e) {
    double mean_p = 0;
    for (int64_t n = 0; n < N; ++n) mean_p += pr[n * E + e];
    aux += double(E) * (double(cn[e]) / double(N * top_k)) * (mean_p / double(N));
    dropped += std::max(0.0, double(cn[e]) - double(capacity));
  }
  float* st = stats.ptr<float>();
  st[0] += float(aux);
  st[1] += float(dropped);
  st[2] += float(z / double(N));
}

void sigmoid_gate_rows(Runtime&, const Tensor& out, const Tensor& x, const Tensor& z) {
  const int64_t N = x.rows(), F = x.cols();
  const float* pz = z.ptr<float>();
  dispatch_float(x.dtype, "sigmoid_gate_rows", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* po = out.ptr<T>();
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const float g = sigmoid(pz[n]);
      for (int64_t f = 0; f < F; ++f) store(po, n * F + f, g * load(px, n * F + f));
    }
  });
}

void sigmoid_gate_rows_backward(Runtime&, const Tensor& dx, const Tensor& dz, const Tensor& dout, const Tensor& x,
                                const Tensor& z) {
  const int64_t N = x.rows(), F = x.cols();
  const float* pz = z.ptr<float>();
  float* pdz = dz.ptr<float>();
  dispatch_float(x.dtype, "sigmoid_gate_rows_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pd = dout.ptr<T>(), *px = x.ptr<T>();
    T* pdx = dx.ptr<T>();
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const float g = sigmoid(pz[n]);
      float dot = 0;
      for (int64_t f = 0; f < F; ++f) {  // each dout is read before dx (which may be dout) is written
        const float d = load(pd, n * F + f);
        dot += d * load(px, n * F + f);
        store(pdx, n * F + f, g * d);
      }
      pdz[n] = g * (1.0f - g) * dot;
    }
  });
}

}  // namespace trellis::cpu
