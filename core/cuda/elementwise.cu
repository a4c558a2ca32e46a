// CUDA elementwise ops: fill, copy, cast, add, accumulate, scale, bias add, GELU, SwiGLU, dropout, AdamW.
#include <cmath>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"
#include "core/philox.h"
#include "core/step_scalars.h"

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

// ---- vectors of V elements (V * sizeof(T) <= 16 bytes, or a multiple of 16) ----
template <typename T, int V>
struct alignas(sizeof(T) * V >= 16 ? 16 : sizeof(T) * V) Vec {
  T e[V];
};
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> vload(const T* p) {
  Vec<T, V> r;
  constexpr int kBytes = int(sizeof(T)) * V;
  if constexpr (V == 1) {
    r.e[0] = *p;
  } else if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) reinterpret_cast<int4*>(r.e)[i] = reinterpret_cast<const int4*>(p)[i];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<int2*>(r.e) = *reinterpret_cast<const int2*>(p);
  } else {
    static_assert(kBytes == 4, "vector size");
    *reinterpret_cast<int*>(r.e) = *reinterpret_cast<const int*>(p);
  }
  return r;
}
template <typename T, int V>
__device__ __forceinline__ void vstore(T* p, const Vec<T, V>& v) {
  constexpr int kBytes = int(sizeof(T)) * V;
  if constexpr (V == 1) {
    *p = v.e[0];
  } else if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) reinterpret_cast<int4*>(p)[i] = reinterpret_cast<const int4*>(v.e)[i];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<int2*>(p) = *reinterpret_cast<const int2*>(v.e);
  } else {
    static_assert(kBytes == 4, "vector size");
    *reinterpret_cast<int*>(p) = *reinterpret_cast<const int*>(v.e);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Elements per vector: 16 bytes of the widest type, when every pointer is 16-byte aligned; else 1.
template <typename... Ts>
constexpr int vec_width() {
  size_t m = 1;
  for (size_t s : {sizeof(Ts)...}) m = s > m ? s : m;
  return int(16 / m);
}
template <typename... Ps>
bool all_aligned(const Ps*... ps) {
  return (... && (ps == nullptr || aligned16(ps)));
}

// Grid-stride over the n / V whole vectors (fv(first element index)), then over the n % V tail
// element by element (f1(index)).
template <int V, typename FV, typename F1>
__device__ __forceinline__ void vec_loop(int64_t n, FV fv, F1 f1) {
  const int64_t nv = n / V;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t k = tid; k < nv; k += step) fv(k * V);
  for (int64_t i = nv * V + tid; i < n; i += step) f1(i);
}

template <typename T, int V>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<T, V> va = vload<T, V>(a + i0), vb = vload<T, V>(b + i0), o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(to_f32(va.e[j]) + to_f32(vb.e[j]));
    vstore<T, V>(out + i0, o);
  }, [&](int64_t i) { out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i])); });
}

template <typename To, typename Ta, int V>
__global__ void accumulate_kernel(To* out, const Ta* a, int64_t n) {
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<To, V> o = vload<To, V>(out + i0);
    Vec<Ta, V> va = vload<Ta, V>(a + i0);
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<To>(to_f32(o.e[j]) + to_f32(va.e[j]));
    vstore<To, V>(out + i0, o);
  }, [&](int64_t i) { out[i] = from_f32<To>(to_f32(out[i]) + to_f32(a[i])); });
}

template <typename T, int V>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<T, V> o = vload<T, V>(x + i0);
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(to_f32(o.e[j]) * s);
    vstore<T, V>(x + i0, o);
  }, [&](int64_t i) { x[i] = from_f32<T>(to_f32(x[i]) * s); });
}

// V > 1 needs cols % V == 0 (a vector never straddles two rows).
template <typename To, typename Tb, int V>
__global__ void bias_add_kernel(To* out, const Tb* bias, int64_t rows, int64_t cols) {
  vec_loop<V>(rows * cols, [&](int64_t i0) {
    Vec<To, V> o = vload<To, V>(out + i0);
    Vec<Tb, V> vb = vload<Tb, V>(bias + i0 % cols);
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<To>(to_f32(o.e[j]) + to_f32(vb.e[j]));
    vstore<To, V>(out + i0, o);
  }, [&](int64_t i) { out[i] = from_f32<To>(to_f32(out[i]) + to_f32(bias[i % cols])); });
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

// GELU with tanh written through the logistic function, exact in real arithmetic:
// 0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)) =: sg, and sech^2(u) = 4 * sg * (1 - sg). One fast
// exponential instead of tanhf; no cancellation for large |u| (sg -> 0 or 1 cleanly).
__device__ __forceinline__ float gelu_sigmoid(float v) {
  float u = kGeluC * (v + 0.044715f * v * v * v);
  return 1.0f / (1.0f + __expf(-2.0f * u));
}
__device__ __forceinline__ float gelu_value(float v) { return v * gelu_sigmoid(v); }
__device__ __forceinline__ float gelu_grad(float v) {
  float sg = gelu_sigmoid(v);
  // 0.5 * (1 + tanh) + 0.5 * v * sech^2 * du/dv
  return sg + 2.0f * v * sg * (1.0f - sg) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
}

template <typename T, int V>
__global__ void gelu_forward_kernel(T* out, const T* x, int64_t n) {
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<T, V> vx = vload<T, V>(x + i0), o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(gelu_value(to_f32(vx.e[j])));
    vstore<T, V>(out + i0, o);
  }, [&](int64_t i) { out[i] = from_f32<T>(gelu_value(to_f32(x[i]))); });
}

// dx may alias dout (each element is read before it is written, by the same thread).
template <typename T, int V>
__global__ void gelu_backward_kernel(T* dx, const T* dout, const T* x, int64_t n) {
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<T, V> vx = vload<T, V>(x + i0), vd = vload<T, V>(dout + i0), o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(to_f32(vd.e[j]) * gelu_grad(to_f32(vx.e[j])));
    vstore<T, V>(dx + i0, o);
  }, [&](int64_t i) { dx[i] = from_f32<T>(to_f32(dout[i]) * gelu_grad(to_f32(x[i]))); });
}

// SwiGLU over rows of h = [gate | up] (width 2F), g of width F. With V > 1, F % V == 0, so a
// vector stays within one row.
template <typename T, int V>
__global__ void swiglu_forward_kernel(T* g, const T* h, int64_t F, int64_t n) {
  auto at = [&](int64_t i) { return (i / F) * 2 * F + i % F; };  // gate of g's element i
  vec_loop<V>(n, [&](int64_t i0) {
    const int64_t a0 = at(i0);
    Vec<T, V> va = vload<T, V>(h + a0), vb = vload<T, V>(h + a0 + F), o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float a = to_f32(va.e[j]);
      o.e[j] = from_f32<T>(a * sigmoid(a) * to_f32(vb.e[j]));
    }
    vstore<T, V>(g + i0, o);
  }, [&](int64_t i) {
    const float a = to_f32(h[at(i)]);
    g[i] = from_f32<T>(a * sigmoid(a) * to_f32(h[at(i) + F]));
  });
}

template <typename T, int V>
__global__ void swiglu_backward_kernel(T* dh, const T* dg, const T* h, int64_t F, int64_t n) {
  auto at = [&](int64_t i) { return (i / F) * 2 * F + i % F; };
  auto both = [](float a, float b, float d, float& da, float& db) {
    const float s = sigmoid(a);
    da = d * b * s * (1.0f + a * (1.0f - s));  // silu'(a) = s (1 + a (1 - s))
    db = d * a * s;
  };
  vec_loop<V>(n, [&](int64_t i0) {
    const int64_t a0 = at(i0);
    Vec<T, V> va = vload<T, V>(h + a0), vb = vload<T, V>(h + a0 + F), vd = vload<T, V>(dg + i0), oa, ob;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float da, db;
      both(to_f32(va.e[j]), to_f32(vb.e[j]), to_f32(vd.e[j]), da, db);
      oa.e[j] = from_f32<T>(da);
      ob.e[j] = from_f32<T>(db);
    }
    vstore<T, V>(dh + a0, oa);
    vstore<T, V>(dh + a0 + F, ob);
  }, [&](int64_t i) {
    float da, db;
    both(to_f32(h[at(i)]), to_f32(h[at(i) + F]), to_f32(dg[i]), da, db);
    dh[at(i)] = from_f32<T>(da);
    dh[at(i) + F] = from_f32<T>(db);
  });
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

__device__ __forceinline__ float adamw_update(float& master, float& m, float& v, float grad, float weight_decay,
                                              const AdamWArgs& a) {
  float g = grad * a.grad_scale;
  float mi = a.beta1 * m + (1.0f - a.beta1) * g;
  float vi = a.beta2 * v + (1.0f - a.beta2) * g * g;
  m = mi;
  v = vi;
  float mhat = mi / a.bc1, vhat = vi / a.bc2;
  float w = master;
  w -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + weight_decay * w);
  master = w;
  return w;
}

// The step's values from a.scalars when given; false: the step is skipped.
__device__ __forceinline__ bool adamw_resolve(AdamWArgs& a) {
  if (!a.scalars) return true;
  const float* s = a.scalars;
  if (s[kApply] == 0.0f) return false;
  a.lr = s[kLr];
  a.bc1 = s[kBiasCorrection1];
  a.bc2 = s[kBiasCorrection2];
  a.grad_scale = s[kGradScale];
  return true;
}

// Element i's run in the table, starting the search at run r (elements are visited in order).
__device__ __forceinline__ int adamw_run_of(const AdamWRunTable& t, int64_t i, int r) {
  while (r + 1 < t.count && i >= t.end[r]) ++r;
  return r;
}

// f32 state, V floats per vector (V = 4: 16-byte accesses); params_out (Tp) may be null; gradients G
// (f32, or 16-bit under train.grad_dtype). Runs with and without weight decay share the launch (one
// per parameter bucket instead of one per run).
template <typename Tp, typename G, int V>
__global__ void adamw_kernel(float* master, float* m, float* v, const G* grad, Tp* params_out, AdamWArgs args,
                             AdamWRunTable runs, int64_t n) {
  AdamWArgs a = args;
  if (!adamw_resolve(a)) return;
  auto decay_of = [&](int r) { return (runs.decay >> r) & 1u ? a.weight_decay : 0.0f; };
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<float, V> w = vload<float, V>(master + i0), mv = vload<float, V>(m + i0), vv = vload<float, V>(v + i0);
    Vec<G, V> g = vload<G, V>(grad + i0);
    Vec<Tp, V> p;
    int r = adamw_run_of(runs, i0, 0);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      r = adamw_run_of(runs, i0 + j, r);
      p.e[j] = from_f32<Tp>(adamw_update(w.e[j], mv.e[j], vv.e[j], to_f32(g.e[j]), decay_of(r), a));
    }
    vstore<float, V>(master + i0, w);
    vstore<float, V>(m + i0, mv);
    vstore<float, V>(v + i0, vv);
    if (params_out) vstore<Tp, V>(params_out + i0, p);
  }, [&](int64_t i) {
    float w = master[i], mi = m[i], vi = v[i];
    float r = adamw_update(w, mi, vi, to_f32(grad[i]), decay_of(adamw_run_of(runs, i, 0)), a);
    master[i] = w;
    m[i] = mi;
    v[i] = vi;
    if (params_out) params_out[i] = from_f32<Tp>(r);
  });
}

// Split masters (core/dtype.h): the bf16 parameters hi and the low halves lo, V elements per vector
// (V = 4: 8-byte accesses to them, 16-byte to the f32 state).
template <typename G, int V>
__global__ void adamw_split_kernel(uint16_t* hi, uint16_t* lo, float* m, float* v, const G* grad, AdamWArgs args,
                                   AdamWRunTable runs, int64_t n) {
  AdamWArgs a = args;
  if (!adamw_resolve(a)) return;
  auto decay_of = [&](int r) { return (runs.decay >> r) & 1u ? a.weight_decay : 0.0f; };
  vec_loop<V>(n, [&](int64_t i0) {
    Vec<uint16_t, V> h = vload<uint16_t, V>(hi + i0), l = vload<uint16_t, V>(lo + i0);
    Vec<float, V> mv = vload<float, V>(m + i0), vv = vload<float, V>(v + i0);
    Vec<G, V> g = vload<G, V>(grad + i0);
    int r = adamw_run_of(runs, i0, 0);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      r = adamw_run_of(runs, i0 + j, r);
      float w = __uint_as_float(join_master_bits(h.e[j], l.e[j]));
      adamw_update(w, mv.e[j], vv.e[j], to_f32(g.e[j]), decay_of(r), a);
      split_master_bits(__float_as_uint(w), h.e[j], l.e[j]);
    }
    vstore<uint16_t, V>(hi + i0, h);
    vstore<uint16_t, V>(lo + i0, l);
    vstore<float, V>(m + i0, mv);
    vstore<float, V>(v + i0, vv);
  }, [&](int64_t i) {
    float w = __uint_as_float(join_master_bits(hi[i], lo[i])), mi = m[i], vi = v[i];
    adamw_update(w, mi, vi, to_f32(grad[i]), decay_of(adamw_run_of(runs, i, 0)), a);
    split_master_bits(__float_as_uint(w), hi[i], lo[i]);
    m[i] = mi;
    v[i] = vi;
  });
}

}  // namespace

void launch_fill(cudaStream_t s, void* x, DType t, int64_t n, float value) {
  if (n == 0) return;
  if (value == 0.0f && !std::signbit(value)) {  // +0 is zero bits in every dtype; the driver's memset writes at full bandwidth
    CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(n) * dtype_size(t), s));
    return;
  }
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
    auto* o = static_cast<T*>(out);
    auto* pa = static_cast<const T*>(a);
    auto* pb = static_cast<const T*>(b);
    if (all_aligned(o, pa, pb)) {
      constexpr int V = vec_width<T>();
      add_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(o, pa, pb, n);
    } else {
      add_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(o, pa, pb, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_accumulate(cudaStream_t s, void* out, DType out_t, const void* a, DType a_t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(out_t, To,
    TRELLIS_FLOAT_SWITCH(a_t, Ta,
      auto* o = static_cast<To*>(out);
      auto* pa = static_cast<const Ta*>(a);
      if (all_aligned(o, pa)) {
        constexpr int V = vec_width<To, Ta>();
        accumulate_kernel<To, Ta, V><<<grid_for(n / V), kThreads, 0, s>>>(o, pa, n);
      } else {
        accumulate_kernel<To, Ta, 1><<<grid_for(n), kThreads, 0, s>>>(o, pa, n);
      }));
  CUDA_CHECK_LAUNCH();
}

void launch_scale(cudaStream_t s, void* x, DType t, int64_t n, float factor) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    auto* p = static_cast<T*>(x);
    if (all_aligned(p)) {
      constexpr int V = vec_width<T>();
      scale_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(p, factor, n);
    } else {
      scale_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(p, factor, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_bias_add(cudaStream_t s, void* out, DType out_t, const void* bias, DType bias_t, int64_t rows,
                     int64_t cols) {
  int64_t n = rows * cols;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(out_t, To,
    TRELLIS_FLOAT_SWITCH(bias_t, Tb,
      auto* o = static_cast<To*>(out);
      auto* pb = static_cast<const Tb*>(bias);
      constexpr int V = vec_width<To, Tb>();
      if (all_aligned(o, pb) && cols % V == 0) {
        bias_add_kernel<To, Tb, V><<<grid_for(n / V), kThreads, 0, s>>>(o, pb, rows, cols);
      } else {
        bias_add_kernel<To, Tb, 1><<<grid_for(n), kThreads, 0, s>>>(o, pb, rows, cols);
      }));
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_forward(cudaStream_t s, void* out, const void* x, DType t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    auto* o = static_cast<T*>(out);
    auto* px = static_cast<const T*>(x);
    if (all_aligned(o, px)) {
      constexpr int V = vec_width<T>();
      gelu_forward_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(o, px, n);
    } else {
      gelu_forward_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(o, px, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_swiglu_forward(cudaStream_t s, void* g, const void* h, DType t, int64_t rows, int64_t F) {
  const int64_t n = rows * F;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    auto* o = static_cast<T*>(g);
    auto* ph = static_cast<const T*>(h);
    constexpr int V = vec_width<T>();
    if (all_aligned(o, ph) && F % V == 0) {
      swiglu_forward_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(o, ph, F, n);
    } else {
      swiglu_forward_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(o, ph, F, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_swiglu_backward(cudaStream_t s, void* dh, const void* dg, const void* h, DType t, int64_t rows,
                            int64_t F) {
  const int64_t n = rows * F;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    auto* o = static_cast<T*>(dh);
    auto* pd = static_cast<const T*>(dg);
    auto* ph = static_cast<const T*>(h);
    constexpr int V = vec_width<T>();
    if (all_aligned(o, pd, ph) && F % V == 0) {
      swiglu_backward_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(o, pd, ph, F, n);
    } else {
      swiglu_backward_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(o, pd, ph, F, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward(cudaStream_t s, void* dx, const void* dout, const void* x, DType t, int64_t n) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    auto* o = static_cast<T*>(dx);
    auto* pd = static_cast<const T*>(dout);
    auto* px = static_cast<const T*>(x);
    if (all_aligned(o, pd, px)) {
      constexpr int V = vec_width<T>();
      gelu_backward_kernel<T, V><<<grid_for(n / V), kThreads, 0, s>>>(o, pd, px, n);
    } else {
      gelu_backward_kernel<T, 1><<<grid_for(n), kThreads, 0, s>>>(o, pd, px, n);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_dropout(cudaStream_t s, void* out, const void* x, DType t, int64_t n, const DropoutIndex& k) {
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(x), k, n));
  CUDA_CHECK_LAUNCH();
}

__global__ void adamw_step_scalars_kernel(float* scalars, const float* loss_sum, const float* norm_sq) {
  finish_step_scalars(scalars, *loss_sum, *norm_sq);
}

void launch_adamw_step_scalars(cudaStream_t s, float* scalars, const float* loss_sum, const float* norm_sq) {
  adamw_step_scalars_kernel<<<1, 1, 0, s>>>(scalars, loss_sum, norm_sq);
  CUDA_CHECK_LAUNCH();
}

void launch_adamw(cudaStream_t s, float* master, float* m, float* v, const void* grad, DType grad_t,
                  void* params_out, DType params_t, int64_t n, const AdamWArgs& a, const AdamWRunTable& runs) {
  if (n == 0) return;
  const bool vec = all_aligned(master, m, v, grad) && (!params_out || aligned16(params_out));
  TRELLIS_FLOAT_SWITCH(grad_t, G,
    const G* g = static_cast<const G*>(grad);
    if (!params_out) {
      if (vec) adamw_kernel<float, G, 4><<<grid_for(n / 4), kThreads, 0, s>>>(master, m, v, g, nullptr, a, runs, n);
      else adamw_kernel<float, G, 1><<<grid_for(n), kThreads, 0, s>>>(master, m, v, g, nullptr, a, runs, n);
    } else {
      TRELLIS_FLOAT_SWITCH(params_t, T,
        auto* p = static_cast<T*>(params_out);
        if (vec) adamw_kernel<T, G, 4><<<grid_for(n / 4), kThreads, 0, s>>>(master, m, v, g, p, a, runs, n);
        else adamw_kernel<T, G, 1><<<grid_for(n), kThreads, 0, s>>>(master, m, v, g, p, a, runs, n));
    });
  CUDA_CHECK_LAUNCH();
}

void launch_adamw_split(cudaStream_t s, void* params, void* low, float* m, float* v, const void* grad, DType grad_t,
                        int64_t n, const AdamWArgs& a, const AdamWRunTable& runs) {
  if (n == 0) return;
  auto* hi = static_cast<uint16_t*>(params);
  auto* lo = static_cast<uint16_t*>(low);
  TRELLIS_FLOAT_SWITCH(grad_t, G,
    const G* g = static_cast<const G*>(grad);
    if (all_aligned(m, v, g, hi, lo))
      adamw_split_kernel<G, 4><<<grid_for(n / 4), kThreads, 0, s>>>(hi, lo, m, v, g, a, runs, n);
    else
      adamw_split_kernel<G, 1><<<grid_for(n), kThreads, 0, s>>>(hi, lo, m, v, g, a, runs, n));
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
