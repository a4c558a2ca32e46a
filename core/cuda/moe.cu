// CUDA mixture-of-experts routing (core/ops.h): softmax and top-k per token (a warp each), slot
// positions per expert in priority order (a block scan per expert), dispatch and combine of token
// rows, and their backwards; the shared MLP's sigmoid gate on rows. Same arithmetic as core/cpu/moe.cpp; sums over rows may differ in
// order (dgate's dot products, the softmax's sum), the integer routing is bitwise the CPU's.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <initializer_list>
#include <type_traits>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kMaxExpertsPerLane = 32;  // E <= 1024 (the moe.experts key's bound)

// A warp per token: probs, their log-sum-exp, the top-k experts (largest logits, the lower expert
// among equals), gates.
__global__ void route_probs_kernel(float* probs, float* lse, int32_t* expert, float* gate, const float* logits,
                                   int64_t N, int E, int K, bool renormalize) {
  const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (n >= N) return;
  const float* l = logits + n * E;
  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
  sum = warp_sum(sum);
  for (int e = lane; e < E; e += 32) probs[n * E + e] = expf(l[e] - mx) / sum;
  if (lane == 0) lse[n] = mx + logf(sum);
  uint32_t taken = 0;  // bit i: this lane's expert lane + 32 i is chosen
  float chosen = 0.0f;
  int mine = 0;  // lane k < K: the k-th choice
  for (int k = 0; k < K; ++k) {
    float best = -INFINITY;
    int best_e = E;
    for (int i = 0, e = lane; e < E; ++i, e += 32)
      if (!(taken >> i & 1u) && (best_e == E || l[e] > best)) {
        best = l[e];
        best_e = e;
      }
    for (int o = 16; o > 0; o >>= 1) {  // the largest, then the lower expert
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (oe < E && (best_e == E || ob > best || (ob == best && oe < best_e))) {
        best = ob;
        best_e = oe;
      }
    }
    if ((best_e & 31) == lane) taken |= 1u << (best_e / 32);
    chosen += expf(best - mx) / sum;
    if (lane == k) mine = best_e;
  }
  if (lane < K) {
    const float p = expf(l[mine] - mx) / sum;
    expert[n * K + lane] = mine;
    gate[n * K + lane] = renormalize && K > 1 ? p / chosen : p;
  }
}

constexpr int kScanThreads = 512;

// Dropless routing's first pass, a block per expert: counts[e] = its choices.
__global__ void route_counts_kernel(float* counts, const int32_t* expert, int64_t NK) {
  using Reduce = cub::BlockReduce<int64_t, kScanThreads>;
  __shared__ typename Reduce::TempStorage temp;
  int64_t mine = 0;
  for (int64_t i = threadIdx.x; i < NK; i += kScanThreads) mine += expert[i] == int32_t(blockIdx.x) ? 1 : 0;
  const int64_t total = Reduce(temp).Sum(mine);
  if (threadIdx.x == 0) counts[blockIdx.x] = float(total);
}

// A block per expert: its choices in priority order (k major, token minor), positions by a block scan.
// With a capacity (cap > 0) expert e's slots are rows [e cap, (e + 1) cap), the unfilled ones marked
// empty; dropless (cap = 0) they are packed after the experts before it (counts from the first pass).
__global__ void route_slots_kernel(int32_t* slot, int32_t* slot_token, float* counts, const int32_t* expert,
                                   int64_t N, int K, int64_t cap) {
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int64_t packed_first;
  const int e = blockIdx.x;
  const bool dropless = cap == 0;
  if (dropless && threadIdx.x == 0) {
    int64_t before = 0;
    for (int j = 0; j < e; ++j) before += int64_t(counts[j]);
    packed_first = before;
  }
  __syncthreads();
  const int64_t first = dropless ? packed_first : e * cap;
  if (dropless) cap = N;  // an expert takes each token at most once
  int64_t base = 0;
  for (int64_t begin = 0; begin < N * K; begin += kScanThreads) {
    const int64_t i = begin + threadIdx.x;
    const int64_t k = i / N, n = i % N, nk = n * K + k;
    const int match = i < N * K && expert[nk] == e ? 1 : 0;
    int before = 0, total = 0;
    Scan(temp).ExclusiveSum(match, before, total);
    if (match) {
      const int64_t pos = base + before;
      slot[nk] = pos < cap ? int32_t(first + pos) : -1;
      if (pos < cap) slot_token[first + pos] = int32_t(nk);
    }
    base += total;
    __syncthreads();  // temp is reused
  }
  if (dropless) return;  // counts[e] is the first pass's, and no slot is empty
  for (int64_t pos = base + threadIdx.x; pos < cap; pos += kScanThreads) slot_token[e * cap + pos] = -1;
  if (threadIdx.x == 0) counts[e] = float(base);
}

// The row kernels below move 16-byte vectors of V elements (8 for 16-bit, 4 for f32) where the
// rows allow it (C a multiple of V, 16-byte aligned pointers), else one element at a time (V = 1).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T e[V];
};

// Slot rows from token rows: out[s] = x[t / K] for the choice t = slot_token[s] (scaled by gate[t]
// when given), zero for an empty slot. Dispatch (x the tokens), and the combine's backward (x = dout).
template <typename T, int V, bool Gated>
__global__ void slots_from_tokens_kernel(T* out, const T* x, const int32_t* slot_token, const float* gate, int64_t S,
                                         int64_t C, int K) {
  using W = Vec<T, V>;
  const int64_t Cv = C / V;
  TRELLIS_GRID_STRIDE(i, S * Cv) {
    const int32_t t = slot_token[i / Cv];
    W w;
    if (t < 0) {
      for (int j = 0; j < V; ++j) w.e[j] = from_f32<T>(0.0f);
    } else {
      w = reinterpret_cast<const W*>(x)[int64_t(t / K) * Cv + i % Cv];
      if constexpr (Gated)
        for (int j = 0; j < V; ++j) w.e[j] = from_f32<T>(gate[t] * to_f32(w.e[j]));
    }
    reinterpret_cast<W*>(out)[i] = w;
  }
}

// Token rows from slot rows: out[n] = base[n] + sum over n's kept choices k of y[slot[n, k]]
// (weighted by gate[n, k] when given; base may be none, or out itself). The combine (base the
// residual), and the dispatch's backward (base = out when accumulating).
template <typename T, int V, bool Gated>
__global__ void tokens_from_slots_kernel(T* out, const T* y, const int32_t* slot, const float* gate, const T* base,
                                         int64_t N, int64_t C, int K) {
  using W = Vec<T, V>;
  const int64_t Cv = C / V;
  TRELLIS_GRID_STRIDE(i, N * Cv) {
    const int64_t n = i / Cv, c = i % Cv;
    float v[V] = {};
    for (int k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0) continue;
      const W e = reinterpret_cast<const W*>(y)[int64_t(s) * Cv + c];
      if constexpr (Gated) {
        const float g = gate[n * K + k];
        for (int j = 0; j < V; ++j) v[j] += g * to_f32(e.e[j]);
      } else {
        for (int j = 0; j < V; ++j) v[j] += to_f32(e.e[j]);
      }
    }
    W o;
    if (base) {
      const W r = reinterpret_cast<const W*>(base)[i];
      for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(to_f32(r.e[j]) + v[j]);
    } else {
      for (int j = 0; j < V; ++j) o.e[j] = from_f32<T>(v[j]);
    }
    reinterpret_cast<W*>(out)[i] = o;
  }
}

// A warp per choice (n, k): dgate = dout[n] . ye[slot].
template <typename T, int V>
__global__ void combine_backward_gates_kernel(float* dgate, const T* dout, const T* ye, const int32_t* slot,
                                              int64_t N, int64_t C, int K) {
  using W = Vec<T, V>;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, Cv = C / V;
  const int lane = threadIdx.x & 31;
  if (w >= N * K) return;
  const int32_t s = slot[w];
  float v = 0.0f;
  if (s >= 0)
    for (int64_t c = lane; c < Cv; c += 32) {
      const W d = reinterpret_cast<const W*>(dout)[(w / K) * Cv + c], y = reinterpret_cast<const W*>(ye)[int64_t(s) * Cv + c];
      for (int j = 0; j < V; ++j) v += to_f32(d.e[j]) * to_f32(y.e[j]);
    }
  v = warp_sum(v);
  if (lane == 0) dgate[w] = v;
}

// A warp per token: dL/dprobs (the gates' and the balancing loss's), then through the softmax, plus
// the z-loss's z lse[n] probs[n, e].
__global__ void router_backward_kernel(float* dlogits, const float* dgate, const float* probs, const float* lse,
                                       const int32_t* expert, const float* gate, const float* counts, float aux,
                                       float z, int64_t N, int E, int K, bool renormalize) {
  const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (n >= N) return;
  const float* p = probs + n * E;
  const int32_t* x = expert + n * K;
  float chosen = 0.0f, dot = 0.0f;
  for (int k = 0; k < K; ++k) {
    chosen += p[x[k]];
    dot += dgate[n * K + k] * gate[n * K + k];
  }
  float d[kMaxExpertsPerLane];
  float pd = 0.0f;
  for (int i = 0, e = lane; e < E; ++i, e += 32) {
    float v = aux * counts[e];
    for (int k = 0; k < K; ++k)
      if (x[k] == e) v += renormalize && K > 1 ? (dgate[n * K + k] - dot) / chosen : dgate[n * K + k];
    d[i] = v;
    pd += p[e] * v;
  }
  pd = warp_sum(pd);
  const float zn = z * lse[n];
  for (int i = 0, e = lane; e < E; ++i, e += 32) dlogits[n * E + e] = p[e] * (d[i] - pd + zn);
}

// A block per expert: its term of the balancing loss and its dropped choices, into partial[e] and
// partial[E + e]; then one block sums them in expert order, and the tokens' lse^2 (deterministic), into stats.
__global__ void statistics_partial_kernel(float* partial, const float* probs, const float* counts, int64_t N, int E,
                                          int K, int64_t cap) {
  __shared__ float shared[32];
  const int e = blockIdx.x;
  float sum = 0.0f;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) sum += probs[n * E + e];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    partial[e] = float(E) * (counts[e] / float(N * K)) * (sum / float(N));
    partial[E + e] = fmaxf(0.0f, counts[e] - float(cap));
  }
}

__global__ void statistics_sum_kernel(float* stats, const float* partial, const float* lse, int64_t N, int E) {
  __shared__ float shared[32];
  float aux = 0.0f, dropped = 0.0f, z = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    aux += partial[e];
    dropped += partial[E + e];
  }
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) z += lse[n] * lse[n];
  aux = block_sum(aux, shared);
  dropped = block_sum(dropped, shared);
  z = block_sum(z, shared);
  if (threadIdx.x == 0) {
    stats[0] += aux;
    stats[1] += dropped;
    stats[2] += z / float(N);
  }
}

// out[n] = sigmoid(z[n]) * x[n] (out may be x).
template <typename T, int V>
__global__ void sigmoid_gate_rows_kernel(T* out, const T* x, const float* z, int64_t N, int64_t C) {
  using W = Vec<T, V>;
  const int64_t Cv = C / V;
  TRELLIS_GRID_STRIDE(i, N * Cv) {
    const float g = sigmoid(z[i / Cv]);
    W w = reinterpret_cast<const W*>(x)[i];
    for (int j = 0; j < V; ++j) w.e[j] = from_f32<T>(g * to_f32(w.e[j]));
    reinterpret_cast<W*>(out)[i] = w;
  }
}

// A warp per row: dx[n] = sigmoid(z[n]) * dout[n] (dx may be dout: each vector is read before it is
// written), dz[n] = sigmoid'(z[n]) * dout[n] . x[n].
template <typename T, int V>
__global__ void sigmoid_gate_rows_backward_kernel(T* dx, float* dz, const T* dout, const T* x, const float* z, int64_t N,
                                                  int64_t C) {
  using W = Vec<T, V>;
  const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, Cv = C / V;
  const int lane = threadIdx.x & 31;
  if (n >= N) return;
  const float g = sigmoid(z[n]);
  float dot = 0.0f;
  for (int64_t c = lane; c < Cv; c += 32) {
    const W d = reinterpret_cast<const W*>(dout)[n * Cv + c], v = reinterpret_cast<const W*>(x)[n * Cv + c];
    W o;
    for (int j = 0; j < V; ++j) {
      dot += to_f32(d.e[j]) * to_f32(v.e[j]);
      o.e[j] = from_f32<T>(g * to_f32(d.e[j]));
    }
    reinterpret_cast<W*>(dx)[n * Cv + c] = o;
  }
  dot = warp_sum(dot);
  if (lane == 0) dz[n] = g * (1.0f - g) * dot;
}

unsigned warps_grid(int64_t warps) { return unsigned((warps * 32 + kThreads - 1) / kThreads); }

}  // namespace

void launch_moe_route(cudaStream_t s, float* probs, float* lse, int32_t* expert, float* gate, int32_t* slot,
                      int32_t* slot_token, float* counts, const float* logits, int64_t N, int E, int K, int64_t cap,
                      bool renormalize) {
  // cap = 0: dropless, each expert's choices packed after the ones before it.
  TRELLIS_CHECK(E <= 32 * kMaxExpertsPerLane && K <= 32, "moe_route: at most 1024 experts and 32 choices on the GPU");
  if (N > 0) {
    route_probs_kernel<<<warps_grid(N), kThreads, 0, s>>>(probs, lse, expert, gate, logits, N, E, K, renormalize);
    CUDA_CHECK_LAUNCH();
  }
  if (cap == 0) {
    route_counts_kernel<<<unsigned(E), kScanThreads, 0, s>>>(counts, expert, N * K);
    CUDA_CHECK_LAUNCH();
  }
  route_slots_kernel<<<unsigned(E), kScanThreads, 0, s>>>(slot, slot_token, counts, expert, N, K, cap);
  CUDA_CHECK_LAUNCH();
}

namespace {
// Calls f(Vec width) with 16 / sizeof(T) when C and every pointer allow 16-byte vectors, else 1.
template <typename T, typename F>
void with_width(int64_t C, std::initializer_list<const void*> ptrs, F f) {
  constexpr int V = 16 / sizeof(T);
  bool ok = C % V == 0;
  for (const void* p : ptrs) ok = ok && (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
  if (ok) f(std::integral_constant<int, V>{});
  else f(std::integral_constant<int, 1>{});
}
template <typename T, int V>
void slots_from_tokens(cudaStream_t s, void* out, const void* x, const int32_t* slot_token, const float* gate,
                       int64_t S, int64_t C, int K) {
  if (S * C == 0) return;
  auto kernel = gate ? slots_from_tokens_kernel<T, V, true> : slots_from_tokens_kernel<T, V, false>;
  kernel<<<grid_for(S * C / V), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(x), slot_token, gate, S, C, K);
  CUDA_CHECK_LAUNCH();
}

template <typename T, int V>
void tokens_from_slots(cudaStream_t s, void* out, const void* y, const int32_t* slot, const float* gate,
                       const void* base, int64_t N, int64_t C, int K) {
  if (N * C == 0) return;
  auto kernel = gate ? tokens_from_slots_kernel<T, V, true> : tokens_from_slots_kernel<T, V, false>;
  kernel<<<grid_for(N * C / V), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(y), slot, gate,
                                                  static_cast<const T*>(base), N, C, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_moe_dispatch(cudaStream_t s, void* xe, const void* x, DType t, const int32_t* slot_token, int64_t S,
                         int64_t C, int K) {
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {xe, x}, [&](auto v) {
    slots_from_tokens<E, decltype(v)::value>(s, xe, x, slot_token, nullptr, S, C, K);
  }));
}

void launch_moe_dispatch_backward(cudaStream_t s, void* dx, const void* dxe, DType t, const int32_t* slot, int64_t N,
                                  int64_t C, int K, bool accumulate) {
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {dx, dxe}, [&](auto v) {
    tokens_from_slots<E, decltype(v)::value>(s, dx, dxe, slot, nullptr, accumulate ? dx : nullptr, N, C, K);
  }));
}

void launch_moe_combine(cudaStream_t s, void* out, const void* ye, DType t, const int32_t* slot, const float* gate,
                        const void* residual, int64_t N, int64_t C, int K) {
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {out, ye, residual}, [&](auto v) {
    tokens_from_slots<E, decltype(v)::value>(s, out, ye, slot, gate, residual, N, C, K);
  }));
}

void launch_moe_combine_backward(cudaStream_t s, void* dye, float* dgate, const void* dout, const void* ye, DType t,
                                 const int32_t* slot, const int32_t* slot_token, const float* gate, int64_t N,
                                 int64_t S, int64_t C, int K) {
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {dye, dout, ye}, [&](auto v) {
    constexpr int V = decltype(v)::value;
    slots_from_tokens<E, V>(s, dye, dout, slot_token, gate, S, C, K);
    if (N * K > 0) {
      combine_backward_gates_kernel<E, V><<<warps_grid(N * K), kThreads, 0, s>>>(
          dgate, static_cast<const E*>(dout), static_cast<const E*>(ye), slot, N, C, K);
      CUDA_CHECK_LAUNCH();
    }
  }));
}

void launch_sigmoid_gate_rows(cudaStream_t s, void* out, const void* x, DType t, const float* z, int64_t N, int64_t C) {
  if (N * C == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {out, x}, [&](auto v) {
    constexpr int V = decltype(v)::value;
    sigmoid_gate_rows_kernel<E, V><<<grid_for(N * C / V), kThreads, 0, s>>>(static_cast<E*>(out), static_cast<const E*>(x),
                                                                           z, N, C);
    CUDA_CHECK_LAUNCH();
  }));
}

void launch_sigmoid_gate_rows_backward(cudaStream_t s, void* dx, float* dz, const void* dout, const void* x, DType t,
                                       const float* z, int64_t N, int64_t C) {
  if (N == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E, with_width<E>(C, {dx, dout, x}, [&](auto v) {
    constexpr int V = decltype(v)::value;
    sigmoid_gate_rows_backward_kernel<E, V><<<warps_grid(N), kThreads, 0, s>>>(
        static_cast<E*>(dx), dz, static_cast<const E*>(dout), static_cast<const E*>(x), z, N, C);
    CUDA_CHECK_LAUNCH();
  }));
}

void launch_moe_router_backward(cudaStream_t s, float* dlogits, const float* dgate, const float* probs,
                                const float* lse, const int32_t* expert, const float* gate, const float* counts,
                                float aux, float z, int64_t N, int E, int K, bool renormalize) {
  if (N == 0) return;
  TRELLIS_CHECK(E <= 32 * kMaxExpertsPerLane, "moe_router_backward: at most 1024 experts on the GPU");
  router_backward_kernel<<<warps_grid(N), kThreads, 0, s>>>(dlogits, dgate, probs, lse, expert, gate, counts, aux, z, N,
                                                            E, K, renormalize);
  CUDA_CHECK_LAUNCH();
}

void launch_moe_statistics(cudaStream_t s, float* stats, float* partial, const float* probs, const float* lse,
                           const float* counts, int64_t N, int E, int K, int64_t cap) {
  statistics_partial_kernel<<<unsigned(E), kThreads, 0, s>>>(partial, probs, counts, N, E, K, cap);
  CUDA_CHECK_LAUNCH();
  statistics_sum_kernel<<<1, kThreads, 0, s>>>(stats, partial, lse, N, E);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
