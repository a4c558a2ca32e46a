// CUDA elementwise ops: fill, copy, cast, add, accumulate, scale, bias add, GELU, dropout, AdamW.
#include <cmath>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"
#include "core/philox.h"

namespace trellis::gpu {

namespace {

template <typename T> __device__ __forceinline__ T fill_value(float v) { return from_f32<T>(v); }
template <> __device__ __forceinline__ int32_t fill_value<int32_t>(float v) { return int32_t(v); }
template <> __device__ __forceinline__ int64_t fill_value<int64_t>(float v) { return int64_t(v); }
template <> __device__ __forceinline__ uint8_t fill_value<uint8_t>(float v) { return uint8_t(v); }

template <typename T>
__global__ void fill_kernel(T* x, float v, int64_t n) {
  T val = fill_value<T>(v);
  TRELLIS_GRID_STRIDE(i, n) x[i] = val;
}

template <typename To, typename Ti>
__global__ void cast_kernel(To* out, const Ti* in, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) out[i] = from_f32<To>(to_f32(in[i]));
}

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename To, typename Ta>
__global__ void accumulate_kernel(To* out, const Ta* a, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) out[i] = from_f32<To>(to_f32(out[i]) + to_f32(a[i]));
}

template <typename T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) x[i] = from_f32<T>(to_f32(x[i]) * s);
}

template <typename To, typename Tb>
__global__ void bias_add_kernel(To* out, const Tb* bias, int64_t rows, int64_t cols) {
  TRELLIS_GRID_STRIDE(i, rows * cols) out[i] = from_f32<To>(to_f32(out[i]) + to_f32(bias[i % cols]));
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* x, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) {
    float v = to_f32(x[i]);
    float u = kGeluC * (v + 0.044715f * v * v * v);
    out[i] = from_f32<T>(0.5f * v * (1.0f + tanhf(u)));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* dout, const T* x, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) {
    float v = to_f32(x[i]);
    float u = kGeluC * (v + 0.044715f * v * v * v);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = from_f32<T>(to_f32(dout[i]) * grad);
  }
}

__device__ __forceinline__ bool dropout_keep(const DropoutIndex& k, int64_t i) {
  int64_t r = i / k.cols, c = i % k.cols;
  int64_t gr = k.seq_local > 0 ? (r / k.seq_local) * k.seq_global + k.seq_offset + r % k.seq_local : r;
  int64_t g = gr * k.global_cols + k.col_offset + c;
  return philox_uniform(philox_word(k.seed, k.stream, uint64_t(g))) >= k.p;
}

template <typename T>
__global__ void dropout_kernel(T* out, const T* x, DropoutIndex k, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) out[i] = dropout_keep(k, i) ? from_f32<T>(to_f32(x[i]) * k.inv_keep) : from_f32<T>(0.0f);
}

template <typename Tp>
__global__ void adamw_kernel(float* master, float* m, float* v, const float* grad, Tp* params_out, AdamWArgs a,
                             int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) {
    float g = grad[i] * a.grad_scale;
    float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / a.bc1, vhat = vi / a.bc2;
    float w = master[i];
    w -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * w);
    master[i] = w;
    if (params_out) params_out[i] = from_f32<Tp>(w);
  }
}

}  // namespace

void launch_fill(cudaStream_t s, void* x, DType t, int64_t n, float value) {
  if (n == 0) return;
  switch (t) {
    case DType::i32: fill_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<int32_t*>(x), value, n); break;
    case DType::i64: fill_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<int64_t*>(x), value, n); break;
    case DType::u8: fill_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<uint8_t*>(x), value, n); break;
    default: TRELLIS_FLOAT_SWITCH(t, T, fill_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(x), value, n));
  }
  CUDA_CHECK_LAUNCH();
}

void launch_cast(cudaStream_t s, void* out, DType out_t, const void* in, DType in_t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(out_t, To,
    TRELLIS_FLOAT_SWITCH(in_t, Ti,
      cast_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<To*>(out), static_cast<const Ti*>(in), n)));
  CUDA_CHECK_LAUNCH();
}

void launch_add(cudaStream_t s, void* out, const void* a, const void* b, DType t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    add_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                 static_cast<const T*>(b), n));
  CUDA_CHECK_LAUNCH();
}

void launch_accumulate(cudaStream_t s, void* out, DType out_t, const void* a, DType a_t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(out_t, To,
    TRELLIS_FLOAT_SWITCH(a_t, Ta,
      accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<To*>(out), static_cast<const Ta*>(a), n)));
  CUDA_CHECK_LAUNCH();
}

void launch_scale(cudaStream_t s, void* x, DType t, int64_t n, float factor) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T, scale_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(x), factor, n));
  CUDA_CHECK_LAUNCH();
}

void launch_bias_add(cudaStream_t s, void* out, DType out_t, const void* bias, DType bias_t, int64_t rows,
                     int64_t cols) {
  int64_t n = rows * cols;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(out_t, To,
    TRELLIS_FLOAT_SWITCH(bias_t, Tb,
      bias_add_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<To*>(out), static_cast<const Tb*>(bias),
                                                         rows, cols)));
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_forward(cudaStream_t s, void* out, const void* x, DType t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    gelu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(x), n));
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward(cudaStream_t s, void* dx, const void* dout, const void* x, DType t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    gelu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dx), static_cast<const T*>(dout),
                                                          static_cast<const T*>(x), n));
  CUDA_CHECK_LAUNCH();
}

void launch_dropout(cudaStream_t s, void* out, const void* x, DType t, int64_t n, const DropoutIndex& k) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(x), k, n));
  CUDA_CHECK_LAUNCH();
}

void launch_adamw(cudaStream_t s, float* master, float* m, float* v, const float* grad, void* params_out,
                  DType params_t, int64_t n, const AdamWArgs& a) {
  if (n == 0) return;
  if (!params_out) {
    adamw_kernel<float><<<grid_for(n), kThreads, 0, s>>>(master, m, v, grad, nullptr, a, n);
  } else {
    TRELLIS_FLOAT_SWITCH(params_t, T,
      adamw_kernel<T><<<grid_for(n), kThreads, 0, s>>>(master, m, v, grad, static_cast<T*>(params_out), a, n));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
