// The kernels around attention's batched GEMMs (attention.cpp): head (un)permutes, the causal
// softmax that writes the log-sum-exp, and the softmax backward, each applying the attention
// dropout mask (core/philox.h) when it has one; and the document starts of document masking.
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

// The first key query i of sample b sees (AttentionMask).
__device__ __forceinline__ int64_t first_key(const AttentionMask& mask, int64_t b, int64_t i, int64_t T_) {
  const int64_t f = mask.window > 0 && i >= mask.window ? i - mask.window + 1 : 0;
  return mask.doc_starts ? max(f, int64_t(mask.doc_starts[b * T_ + i])) : f;
}

// One warp per score row r = (bh, i); only first_key(i) <= j <= i take part.
template <typename T>
__global__ void causal_softmax_kernel(T* P, float* lse, const float* S, int64_t rows, int64_t H, int64_t T_,
                                      bool write_lse, AttentionDropoutKey drop, AttentionMask mask) {
  int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  int64_t i = r % T_, bh = r / T_, first = first_key(mask, bh / H, i, T_);
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
                                        AttentionMask mask) {
  TRELLIS_GRID_STRIDE(e, n) {
    int64_t r = e / T_, i = r % T_, j = e % T_;
    float p = j <= i && j >= first_key(mask, r / T_ / H, i, T_) ? expf(S[e] - lse[r]) : 0.0f;
    dS[e] = from_f32<T>(p * (keep_factor(drop, r / T_, H, i, j) * dP[e] - D[r]) * scale);
  }
}

// One warp per sample: each lane scans a stretch of it for end-of-document tokens, a warp scan carries
// the latest start across the stretches, and a second pass writes each token's start.
__global__ void document_starts_kernel(int32_t* starts, int32_t* positions, const int32_t* tokens, int64_t B,
                                       int64_t T_, int32_t eod) {
  const int64_t b = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (b >= B) return;
  const int32_t* tok = tokens + b * T_;
  int32_t* out = starts + b * T_;
  const int64_t per = (T_ + 31) / 32, lo = min(T_, lane * per), hi = min(T_, lo + per);
  int32_t latest = 0;  // the start that follows this lane's stretch
  for (int64_t t = lo; t < hi; ++t)
    if (tok[t] == eod) latest = int32_t(t + 1);
  for (int off = 1; off < 32; off <<= 1) {  // inclusive max over the lanes up to this one
    const int32_t v = __shfl_up_sync(0xffffffffu, latest, off);
    if (lane >= off) latest = max(latest, v);
  }
  int32_t start = __shfl_up_sync(0xffffffffu, latest, 1);  // the lanes before this one's
  if (lane == 0) start = 0;
  for (int64_t t = lo; t < hi; ++t) {
    out[t] = start;
    if (positions) positions[b * T_ + t] = int32_t(t) - start;
    if (tok[t] == eod) start = int32_t(t + 1);
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
                           int64_t T_, const AttentionDropoutKey& drop, const AttentionMask& mask) {
  int64_t rows = B * H * T_;
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    causal_softmax_kernel<E><<<warp_rows_grid(rows), kThreads, 0, s>>>(static_cast<E*>(P), lse, S, rows, H, T_,
                                                                       true, drop, mask));
  CUDA_CHECK_LAUNCH();
}

void launch_causal_probs(cudaStream_t s, void* P, const float* S, const float* lse, DType t, int64_t B, int64_t H,
                         int64_t T_, const AttentionDropoutKey& drop, const AttentionMask& mask) {
  int64_t rows = B * H * T_;
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    causal_softmax_kernel<E><<<warp_rows_grid(rows), kThreads, 0, s>>>(static_cast<E*>(P), const_cast<float*>(lse),
                                                                       S, rows, H, T_, false, drop, mask));
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
                             const AttentionDropoutKey& drop, const AttentionMask& mask) {
  int64_t n = B * H * T_ * T_;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    softmax_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(static_cast<E*>(dS), S, lse, dP, D, n, H, T_,
                                                                scale, drop, mask));
  CUDA_CHECK_LAUNCH();
}

void launch_document_starts(cudaStream_t s, int32_t* starts, int32_t* positions, const int32_t* tokens, int64_t B,
                            int64_t T_, int32_t eod_token) {
  if (B * T_ == 0) return;
  document_starts_kernel<<<warp_rows_grid(B), kThreads, 0, s>>>(starts, positions, tokens, B, T_, eod_token);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
