// CUDA KV-cache kernels for generation: appending k, v rows to the caches, and attention of new
// queries over the cache with one warp per (b, h, query) and an online softmax in f32.
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kCacheWarps = kThreads / 32;

template <typename T>
__global__ void kv_append_kernel(T* kc, T* vc, const T* qkv, int64_t B, int64_t n, int64_t C, int64_t Ckv,
                                 int64_t Tmax, int64_t pos) {
  TRELLIS_GRID_STRIDE(idx, B * n * Ckv) {
    const int64_t c = idx % Ckv, i = (idx / Ckv) % n, b = idx / (Ckv * n);
    const int64_t src = (b * n + i) * (C + 2 * Ckv) + C + c, dst = (b * Tmax + pos + i) * Ckv + c;
    kc[dst] = qkv[src];
    vc[dst] = qkv[src + Ckv];
  }
}

// Lane l owns head dims l, l + 32, ... (at most kMaxHeadDim / 32 of them).
template <typename T>
__global__ void cache_attention_kernel(T* out, const T* qkv, const T* kc, const T* vc, int64_t B, int64_t n,
                                       int64_t H, int64_t Hkv, int64_t hd, int64_t Tmax, int64_t pos, float scale,
                                       int64_t window) {
  const int64_t r = int64_t(blockIdx.x) * kCacheWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= B * H * n) return;
  const int64_t C = H * hd, Ckv = Hkv * hd, W = C + 2 * Ckv;
  const int64_t b = r / (H * n), h = (r / n) % H, i = r % n, last = pos + i, kv = h / (H / Hkv) * hd;
  constexpr int kPer = kMaxHeadDim / 32;
  float q[kPer], acc[kPer];
  for (int j = 0; j < kPer; ++j) {
    const int64_t d = lane + 32 * j;
    q[j] = d < hd ? to_f32(qkv[(b * n + i) * W + h * hd + d]) : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = window > 0 && last >= window ? last - window + 1 : 0; s <= last; ++s) {
    const int64_t base = (b * Tmax + s) * Ckv + kv;
    float dot = 0.0f;
    for (int j = 0; j < kPer; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) dot += q[j] * to_f32(kc[base + d]);
    }
    const float x = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, x);
    const float corr = expf(m - m_new), p = expf(x - m_new);
    l = l * corr + p;
    for (int j = 0; j < kPer; ++j) {
      const int64_t d = lane + 32 * j;
      acc[j] = acc[j] * corr + (d < hd ? p * to_f32(vc[base + d]) : 0.0f);
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
  for (int j = 0; j < kPer; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < hd) out[(b * n + i) * C + h * hd + d] = from_f32<T>(acc[j] * inv);
  }
}

}  // namespace

void launch_kv_cache_append(cudaStream_t s, void* k_cache, void* v_cache, const void* qkv, DType t, int64_t B,
                            int64_t n, int64_t C, int64_t Ckv, int64_t Tmax, int64_t pos) {
  const int64_t total = B * n * Ckv;
  if (total == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    kv_append_kernel<E><<<grid_for(total), kThreads, 0, s>>>(static_cast<E*>(k_cache), static_cast<E*>(v_cache),
                                                             static_cast<const E*>(qkv), B, n, C, Ckv, Tmax, pos));
  CUDA_CHECK_LAUNCH();
}

void launch_attention_with_cache(cudaStream_t s, void* out, const void* qkv, const void* k_cache,
                                 const void* v_cache, DType t, int64_t B, int64_t n, int64_t H, int64_t Hkv,
                                 int64_t hd, int64_t Tmax, int64_t pos, int64_t window) {
  const int64_t rows = B * H * n;
  if (rows == 0) return;
  TRELLIS_CHECK(hd <= kMaxHeadDim, "attention_with_cache: head_dim " + std::to_string(hd) + " > " +
                                       std::to_string(kMaxHeadDim) + " is not supported on CUDA");
  const float scale = 1.0f / sqrtf(float(hd));
  const unsigned grid = unsigned((rows + kCacheWarps - 1) / kCacheWarps);
  TRELLIS_FLOAT_SWITCH(t, E,
    cache_attention_kernel<E><<<grid, kThreads, 0, s>>>(static_cast<E*>(out), static_cast<const E*>(qkv),
                                                        static_cast<const E*>(k_cache),
                                                        static_cast<const E*>(v_cache), B, n, H, Hkv, hd, Tmax,
                                                        pos, scale, window));
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
