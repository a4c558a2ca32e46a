// The kernels around attention's batched GEMMs (attention.cpp): head (un)permutes, the causal
// softmax that writes the log-sum-exp, and the softmax backward, each applying the attention
// dropout mask (core/philox.h) when it has one.
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

template <typename T>
__global__ void to_heads_kernel(T* dst, const T* src, int64_t row_stride, int64_t col_offset, int64_t B, int64_t T_,
                                int64_t H, int64_t hd, int64_t group) {
  TRELLIS_GRID_STRIDE(i, B * H * T_ * hd) {
    int64_t d = i % hd, t = (i / hd) % T_, h = (i / (hd * T_)) % H, b = i / (hd * T_ * H);
    dst[i] = src[(b * T_ + t) * row_stride + col_offset + h / group * hd + d];
  }
}

// dst head g (of H / group) <- the sum of src heads [g * group, (g + 1) * group), in order, in f32.
template <typename T>
__global__ void from_heads_kernel(T* dst, int64_t row_stride, int64_t col_offset, const T* src, int64_t B,
                                  int64_t T_, int64_t H, int64_t hd, int64_t group) {
  const int64_t G = H / group;
  TRELLIS_GRID_STRIDE(i, B * G * T_ * hd) {
    int64_t d = i % hd, t = (i / hd) % T_, g = (i / (hd * T_)) % G, b = i / (hd * T_ * G);
    float sum = 0.0f;
    for (int64_t j = 0; j < group; ++j) sum += to_f32(src[((b * H + g * group + j) * T_ + t) * hd + d]);
    dst[(b * T_ + t) * row_stride + col_offset + g * hd + d] = from_f32<T>(sum);
  }
}

__device__ __forceinline__ float keep_factor(const AttentionDropoutKey& k, int64_t bh, int64_t H, int64_t i,
                                            int64_t j) {
  return k.threshold == 0 ? 1.0f : attention_keep_scale(k, bh / H, bh % H, i, j);
}

// The first key query i sees: 0, or with a sliding window the window's first.
__device__ __forceinline__ int64_t first_key(int64_t i, int64_t window) {
  return window > 0 && i >= window ? i - window + 1 : 0;
}

// One warp per score row r = (bh, i); only first_key(i) <= j <= i take part.
template <typename T>
__global__ void causal_softmax_kernel(T* P, float* lse, const float* S, int64_t rows, int64_t H, int64_t T_,
                                      bool write_lse, AttentionDropoutKey drop, int64_t window) {
  int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  int64_t i = r % T_, bh = r / T_, first = first_key(i, window);
  const float* s = S + r * T_;
  T* p = P + r * T_;
  float l;
  if (write_lse) {
    float m = -INFINITY;
    for (int64_t j = first + lane; j <= i; j += 32) m = fmaxf(m, s[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = first + lane; j <= i; j += 32) sum += expf(s[j] - m);
    l = m + logf(warp_sum(sum));
    if (lane == 0) lse[r] = l;
  } else {
    l = lse[r];
  }
  for (int64_t j = lane; j < T_; j += 32)
    p[j] = from_f32<T>(j <= i && j >= first ? expf(s[j] - l) * keep_factor(drop, bh, H, i, j) : 0.0f);
}

// One warp per (b, h, t): D = sum_d dout * out.
template <typename T>
__global__ void rowdot_kernel(float* D, const T* dout, const T* out, int64_t B, int64_t T_, int64_t H, int64_t hd) {
  int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= B * H * T_) return;
  int64_t t = r % T_, h = (r / T_) % H, b = r / (T_ * H);
  int64_t base = (b * T_ + t) * H * hd + h * hd;
  float s = 0.0f;
  for (int64_t d = lane; d < hd; d += 32) s += to_f32(dout[base + d]) * to_f32(out[base + d]);
  s = warp_sum(s);
  if (lane == 0) D[r] = s;
}

template <typename T>
__global__ void softmax_backward_kernel(T* dS, const float* S, const float* lse, const float* dP, const float* D,
                                        int64_t n, int64_t H, int64_t T_, float scale, AttentionDropoutKey drop,
                                        int64_t window) {
  TRELLIS_GRID_STRIDE(e, n) {
    int64_t r = e / T_, i = r % T_, j = e % T_;
    float p = j <= i && j >= first_key(i, window) ? expf(S[e] - lse[r]) : 0.0f;
    dS[e] = from_f32<T>(p * (keep_factor(drop, r / T_, H, i, j) * dP[e] - D[r]) * scale);
  }
}

unsigned warp_rows_grid(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void launch_to_heads(cudaStream_t s, void* dst, const void* src, int64_t row_stride, int64_t col_offset, DType t,
                     int64_t B, int64_t T_, int64_t H, int64_t hd, int64_t group) {
  int64_t n = B * H * T_ * hd;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    to_heads_kernel<E><<<grid_for(n), kThreads, 0, s>>>(static_cast<E*>(dst), static_cast<const E*>(src),
                                                        row_stride, col_offset, B, T_, H, hd, group));
  CUDA_CHECK_LAUNCH();
}

void launch_from_heads(cudaStream_t s, void* dst, int64_t row_stride, int64_t col_offset, const void* src, DType t,
                       int64_t B, int64_t T_, int64_t H, int64_t hd, int64_t group) {
  int64_t n = B * (H / group) * T_ * hd;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    from_heads_kernel<E><<<grid_for(n), kThreads, 0, s>>>(static_cast<E*>(dst), row_stride, col_offset,
                                                          static_cast<const E*>(src), B, T_, H, hd, group));
  CUDA_CHECK_LAUNCH();
}

void launch_causal_softmax(cudaStream_t s, void* P, float* lse, const float* S, DType t, int64_t B, int64_t H,
                           int64_t T_, const AttentionDropoutKey& drop, int64_t window) {
  int64_t rows = B * H * T_;
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    causal_softmax_kernel<E><<<warp_rows_grid(rows), kThreads, 0, s>>>(static_cast<E*>(P), lse, S, rows, H, T_,
                                                                       true, drop, window));
  CUDA_CHECK_LAUNCH();
}

void launch_causal_probs(cudaStream_t s, void* P, const float* S, const float* lse, DType t, int64_t B, int64_t H,
                         int64_t T_, const AttentionDropoutKey& drop, int64_t window) {
  int64_t rows = B * H * T_;
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    causal_softmax_kernel<E><<<warp_rows_grid(rows), kThreads, 0, s>>>(static_cast<E*>(P), const_cast<float*>(lse),
                                                                       S, rows, H, T_, false, drop, window));
  CUDA_CHECK_LAUNCH();
}

void launch_attention_rowdot(cudaStream_t s, float* D, const void* dout, const void* out, DType t, int64_t B,
                             int64_t T_, int64_t H, int64_t hd) {
  int64_t rows = B * H * T_;
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    rowdot_kernel<E><<<warp_rows_grid(rows), kThreads, 0, s>>>(D, static_cast<const E*>(dout),
                                                               static_cast<const E*>(out), B, T_, H, hd));
  CUDA_CHECK_LAUNCH();
}

void launch_softmax_backward(cudaStream_t s, void* dS, const float* S, const float* lse, const float* dP,
                             const float* D, DType t, int64_t B, int64_t H, int64_t T_, float scale,
                             const AttentionDropoutKey& drop, int64_t window) {
  int64_t n = B * H * T_ * T_;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    softmax_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(static_cast<E*>(dS), S, lse, dP, D, n, H, T_,
                                                                scale, drop, window));
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
