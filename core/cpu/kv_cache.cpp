// CPU KV-cache ops for generation: appending k, v rows and attention of new queries over the cache
// (f32 accumulation, one (b, h, query) row per iteration, so results do not depend on threads).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void kv_cache_append(Runtime&, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t pos,
                     AttentionHeads heads) {
  const int64_t B = qkv.size(0), n = qkv.size(1), W = qkv.size(2), hd = W / heads.qkv_heads(), Tmax = k_cache.size(1);
  const size_t e = dtype_size(qkv.dtype), row = size_t(heads.kv * hd) * e, q_row = size_t(heads.q * hd) * e;
  const char* src = static_cast<const char*>(qkv.data);
  char* kc = static_cast<char*>(k_cache.data);
  char* vc = static_cast<char*>(v_cache.data);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const char* r = src + size_t((b * n + i) * W) * e + q_row;  // its k, then its v
      const size_t dst = size_t(b * Tmax + pos + i) * row;
      std::memcpy(kc + dst, r, row);
      std::memcpy(vc + dst, r + row, row);
    }
}

void attention_with_cache(Runtime& rt, const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, AttentionHeads heads) {
  const int64_t B = qkv.size(0), n = qkv.size(1), W = qkv.size(2), Tmax = k_cache.size(1);
  const int64_t H = heads.q, hd = W / heads.qkv_heads(), C = H * hd, Ckv = heads.kv * hd, group = heads.group();
  const int64_t rows = B * H * n, keys = pos + n;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t per_thread = keys + 2 * hd;  // scores, query, output accumulator
  ScratchF32 scratch(rt, {int64_t(omp_get_max_threads()) * per_thread});
  float* buf = scratch.take(int64_t(omp_get_max_threads()) * per_thread);
  dispatch_float(qkv.dtype, "attention_with_cache", [&](auto tag) {
    using T = decltype(tag);
    const T* q_all = qkv.ptr<T>();
    const T* kc = k_cache.ptr<T>();
    const T* vc = v_cache.ptr<T>();
    T* o_all = out.ptr<T>();
#pragma omp parallel
    {
      float* sc = buf + int64_t(omp_get_thread_num()) * per_thread;
      float* q = sc + keys;
      float* acc = q + hd;
#pragma omp for schedule(dynamic, 4)
      for (int64_t idx = 0; idx < rows; ++idx) {
        const int64_t b = idx / (H * n), h = (idx / n) % H, i = idx % n, last = pos + i;
        for (int64_t d = 0; d < hd; ++d) q[d] = load(q_all, (b * n + i) * W + h * hd + d);
        const int64_t kv = h / group * hd;  // its key-value head's columns in the caches
        const int64_t first = heads.first_key(last);
        float mx = -INFINITY;
        for (int64_t s = first; s <= last; ++s) {
          const int64_t base = (b * Tmax + s) * Ckv + kv;
          float dot = 0.0f;
          for (int64_t d = 0; d < hd; ++d) dot += q[d] * load(kc, base + d);
          sc[s] = dot * scale;
          mx = std::max(mx, sc[s]);
        }
        float sum = 0.0f;
        std::fill(acc, acc + hd, 0.0f);
        for (int64_t s = first; s <= last; ++s) {
          const float p = std::exp(sc[s] - mx);
          sum += p;
          const int64_t base = (b * Tmax + s) * Ckv + kv;
          for (int64_t d = 0; d < hd; ++d) acc[d] += p * load(vc, base + d);
        }
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < hd; ++d) store(o_all, (b * n + i) * C + h * hd + d, acc[d] * inv);
      }
    }
  });
}

}  // namespace trellis::cpu
