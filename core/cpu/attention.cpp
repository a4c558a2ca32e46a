// CPU causal self-attention (within a sliding window and documents where AttentionHeads has them): forward keeps only the log-sum-exp per score row; backward recomputes
// the probabilities (and the dropout mask, from its Philox key). Every output row is owned by one thread, so results do not depend on the
// thread count. 16-bit tensors are staged in f32 scratch.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

struct Dims {
  int64_t B, T, H, Hkv, hd, C, W;  // C = H hd: out's row; W = (H + 2 Hkv) hd: qkv's row
  float scale;
  AttentionHeads heads;  // its window and documents: query t of sample b sees keys [first(b, t), t]
  const int32_t* doc_starts = nullptr;  // heads.doc_starts' (B, T), or null
  int64_t first(int64_t b, int64_t t) const {
    const int64_t f = heads.first_key(t);
    return doc_starts ? std::max<int64_t>(f, doc_starts[b * T + t]) : f;
  }
  // Whether query t sees key s <= t (first(b, t) never decreases with t: the queries that see s are
  // s .. the last for which this holds).
  bool sees(int64_t b, int64_t t, int64_t s) const { return t < T && first(b, t) <= s; }
  // Element offset of (b, t, which in {0:q, 1:k, 2:v}, query head h) in qkv (B, T, W): k and v of
  // the key-value head h / (H / Hkv).
  int64_t qkv(int64_t b, int64_t t, int which, int64_t h) const {
    const int64_t col = which == 0 ? h * hd : C + (which - 1) * Hkv * hd + h / (H / Hkv) * hd;
    return (b * T + t) * W + col;
  }
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * C + h * hd; }  // in (B, T, C)
};

Dims dims_of(const Tensor& qkv, AttentionHeads heads) {
  Dims d{qkv.size(0), qkv.size(1), heads.q, heads.kv, qkv.size(2) / heads.qkv_heads(), 0, qkv.size(2), 0.0f, heads};
  if (heads.doc_starts.defined()) d.doc_starts = heads.doc_starts.ptr<int32_t>();
  d.C = d.H * d.hd;
  d.scale = 1.0f / std::sqrt(float(d.hd));
  return d;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Dropout factor of probability (t, s) of head (b, h): 1 without dropout.
float keep(const AttentionDropoutKey& k, int64_t b, int64_t h, int64_t t, int64_t s) {
  return k.threshold == 0 ? 1.0f : attention_keep_scale(k, b, h, t, s);
}

// out (B, T, C) and lse (B, H, T) from f32 qkv; buf holds T floats per thread.
void forward_f32(const Dims& d, const float* qkv, float* out, float* lse, float* buf, const AttentionDropoutKey& k) {
  const int64_t rows = d.B * d.H * d.T;
#pragma omp parallel
  {
    float* sc = buf + int64_t(omp_get_thread_num()) * d.T;
#pragma omp for schedule(dynamic, 8)
    for (int64_t idx = 0; idx < rows; ++idx) {
      const int64_t b = idx / (d.H * d.T), h = (idx / d.T) % d.H, t = idx % d.T;
      const float* q = qkv + d.qkv(b, t, 0, h);
      const int64_t first = d.first(b, t);
      float mx = -INFINITY;
      for (int64_t s = first; s <= t; ++s) {
        sc[s] = dot(q, qkv + d.qkv(b, s, 1, h), d.hd) * d.scale;
        mx = std::max(mx, sc[s]);
      }
      float sum = 0.0f;
      for (int64_t s = first; s <= t; ++s) {
        sc[s] = std::exp(sc[s] - mx);
        sum += sc[s];
      }
      float* o = out + d.row(b, t, h);
      std::fill(o, o + d.hd, 0.0f);
      const float inv = 1.0f / sum;
      for (int64_t s = first; s <= t; ++s) {
        const float p = sc[s] * inv * keep(k, b, h, t, s);
        const float* v = qkv + d.qkv(b, s, 2, h);
        for (int64_t i = 0; i < d.hd; ++i) o[i] += p * v[i];
      }
      lse[idx] = mx + std::log(sum);
    }
  }
}

// dqkv (f32, zeroed here) from f32 qkv, dout and D = rowsum(dout * out) (B, H, T).
void backward_f32(const Dims& d, float* dqkv, const float* qkv, const float* dout, const float* lse,
                  const float* D, const AttentionDropoutKey& k) {
  const int64_t rows = d.B * d.H * d.T;
  std::memset(dqkv, 0, sizeof(float) * size_t(d.B * d.T * d.W));
  // Dropped probability and score gradient of query t, key s (first(t) <= s <= t) of head (b, h): with
  // o = sum_s p_s m_s v_s, dL/dp_s = m_s (do . v_s) and sum_s p_s dL/dp_s = do . o = D.
  auto grads = [&](int64_t b, int64_t h, int64_t t, int64_t s, float& pm, float& ds) {
    const int64_t r = (b * d.H + h) * d.T + t;
    const float p = std::exp(dot(qkv + d.qkv(b, t, 0, h), qkv + d.qkv(b, s, 1, h), d.hd) * d.scale - lse[r]);
    const float m = keep(k, b, h, t, s);
    pm = p * m;
    ds = p * (m * dot(dout + d.row(b, t, h), qkv + d.qkv(b, s, 2, h), d.hd) - D[r]);
  };
  // dq: one query row per iteration, keys in order.
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t idx = 0; idx < rows; ++idx) {
    const int64_t b = idx / (d.H * d.T), h = (idx / d.T) % d.H, t = idx % d.T;
    float* dq = dqkv + d.qkv(b, t, 0, h);
    for (int64_t s = d.first(b, t); s <= t; ++s) {
      float p, ds;
      grads(b, h, t, s, p, ds);
      const float* k = qkv + d.qkv(b, s, 1, h);
      for (int64_t i = 0; i < d.hd; ++i) dq[i] += ds * d.scale * k[i];
    }
  }
  // dk, dv: one key row of a key-value head per iteration, its query heads and their queries in order.
  const int64_t group = d.H / d.Hkv;
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t idx = 0; idx < d.B * d.Hkv * d.T; ++idx) {
    const int64_t b = idx / (d.Hkv * d.T), kv = (idx / d.T) % d.Hkv, s = idx % d.T;
    float* dk = dqkv + d.qkv(b, s, 1, kv * group);
    float* dv = dqkv + d.qkv(b, s, 2, kv * group);
    for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
      for (int64_t t = s; d.sees(b, t, s); ++t) {
        float p, ds;
        grads(b, h, t, s, p, ds);
        const float* q = qkv + d.qkv(b, t, 0, h);
        const float* g = dout + d.row(b, t, h);
        for (int64_t i = 0; i < d.hd; ++i) {
          dk[i] += ds * d.scale * q[i];
          dv[i] += p * g[i];
        }
      }
  }
}

}  // namespace

void document_starts(Runtime&, const Tensor& starts, const Tensor& tokens, int32_t eod_token, const Tensor& positions) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int32_t* tok = tokens.ptr<int32_t>();
  int32_t* out = starts.ptr<int32_t>();
  int32_t* pos = positions.defined() ? positions.ptr<int32_t>() : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      out[b * T + t] = start;
      if (pos) pos[b * T + t] = int32_t(t) - start;
      if (tok[b * T + t] == eod_token) start = int32_t(t + 1);
    }
  }
}

void attention_forward(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, AttentionHeads heads,
                       const AttentionDropoutKey& drop) {
  const Dims d = dims_of(qkv, heads);
  const bool f32 = qkv.dtype == DType::f32;
  const int64_t n_qkv = qkv.numel(), n_out = out.numel();
  ScratchF32 scratch(rt, {f32 ? 0 : n_qkv, f32 ? 0 : n_out, int64_t(omp_get_max_threads()) * d.T});
  const float* q = f32 ? qkv.ptr<float>() : scratch.take(n_qkv);
  float* o = f32 ? out.ptr<float>() : scratch.take(n_out);
  if (!f32) to_f32(const_cast<float*>(q), qkv, n_qkv);
  forward_f32(d, q, o, lse.ptr<float>(), scratch.take(int64_t(omp_get_max_threads()) * d.T), drop);
  if (!f32) from_f32(out, o, n_out);
}

void attention_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, AttentionHeads heads, const AttentionDropoutKey& drop) {
  const Dims d = dims_of(qkv, heads);
  const bool f32 = qkv.dtype == DType::f32;
  const int64_t n_qkv = qkv.numel(), n_out = out.numel(), rows = d.B * d.H * d.T;
  ScratchF32 scratch(rt, {f32 ? 0 : n_qkv, f32 ? 0 : n_out, f32 ? 0 : n_qkv, rows});
  float *q = qkv.ptr<float>(), *g = dout.ptr<float>(), *dq = dqkv.ptr<float>();
  if (!f32) {
    q = scratch.take(n_qkv);
    g = scratch.take(n_out);
    dq = scratch.take(n_qkv);
    to_f32(q, qkv, n_qkv);
    to_f32(g, dout, n_out);
  }
  float* D = scratch.take(rows);
  dispatch_float(out.dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* po = out.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t idx = 0; idx < rows; ++idx) {
      const int64_t b = idx / (d.H * d.T), h = (idx / d.T) % d.H, t = idx % d.T;
      const int64_t r = d.row(b, t, h);
      float s = 0.0f;
      for (int64_t i = 0; i < d.hd; ++i) s += g[r + i] * load(po, r + i);
      D[idx] = s;
    }
  });
  backward_f32(d, dq, q, g, lse.ptr<float>(), D, drop);
  if (!f32) from_f32(dqkv, dq, n_qkv);
}

}  // namespace trellis::cpu
