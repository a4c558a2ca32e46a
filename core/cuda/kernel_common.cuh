// Shared device helpers for the CUDA kernels: f32 <-> storage conversions, dtype dispatch,
// launch geometry and warp/block reductions in a fixed order. Included from core/cuda/*.cu only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/gpu_check.h"
#include "core/dtype.h"

namespace trellis::gpu {

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Runs the statement list with `T` bound to the storage type of a float dtype.
#define TRELLIS_FLOAT_SWITCH(dtype, T, ...)                                               \
  switch (dtype) {                                                                        \
    case ::trellis::DType::f32: { using T = float; __VA_ARGS__; break; }                  \
    case ::trellis::DType::bf16: { using T = __nv_bfloat16; __VA_ARGS__; break; }         \
    case ::trellis::DType::f16: { using T = __half; __VA_ARGS__; break; }                 \
    default: TRELLIS_FATAL("CUDA op: unsupported dtype " + std::string(::trellis::dtype_name(dtype))); \
  }

constexpr int kThreads = 256;

// Grid for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return unsigned(b);
}

#define TRELLIS_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// The logistic function, as SwiGLU's silu and the shared expert gate take it.
__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block in a fixed tree (deterministic); every thread gets the result.
// `shared` holds at least 32 floats; blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// Carves 256-byte aligned pieces out of one scratch allocation.
struct ScratchCarver {
  size_t offset = 0;
  char* base = nullptr;
  size_t take(size_t bytes) {
    size_t at = (offset + 255) / 256 * 256;
    offset = at + bytes;
    return at;
  }
  template <typename T> T* at(size_t off) const { return reinterpret_cast<T*>(base + off); }
};

}  // namespace trellis::gpu
