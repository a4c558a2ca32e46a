// CUDA softmax cross-entropy (forward, fused forward+backward in place), the three passes of the
// vocabulary-parallel cross entropy, and the token/position embeddings (the token table possibly a
// vocabulary shard); embedding backward is deterministic (stable radix sort by token, then each
// run of equal tokens summed in position order by one warp).
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kXentThreads = 512;

// Fallback (any Vp / alignment): one block per row; an online max/sum over the real vocabulary,
// then (with dlogits) a second pass that writes the gradient over the whole padded row.
template <typename T>
__global__ void cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t Vp,
                                     int64_t vocab, float dloss) {
  __shared__ float shared[32];
  int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  int32_t tgt = targets[row];
  bool has_target = tgt >= 0 && tgt < vocab;
  // Read before any thread may overwrite the row (dlogits may alias logits); the block
  // reductions below order this read before the second pass.
  float x_tgt = (threadIdx.x == 0 && has_target) ? to_f32(x[tgt]) : 0.0f;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    float v = to_f32(x[c]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  float M = block_max(m, shared);
  float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M), shared);
  float lse = M + logf(S);
  if (threadIdx.x == 0) losses[row] = has_target ? lse - x_tgt : 0.0f;
  if (!dlogits) return;
  T* d = dlogits + row * Vp;
  for (int64_t c = threadIdx.x; c < Vp; c += blockDim.x) {
    float g = 0.0f;
    if (has_target && c < vocab) g = dloss * (expf(to_f32(x[c]) - lse) - (c == tgt ? 1.0f : 0.0f));
    d[c] = from_f32<T>(g);
  }
}

// ---- the vectorized cross entropy: 16-byte loads/stores, 8 bf16 (4 f32) per vector ----
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T e[N];
};
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// 512 threads and up to 2 blocks per SM: enough bytes in flight, and few enough rows in flight
// (~2 per SM, 100 KB each at GPT-2's vocabulary) that pass 2 finds the row in L2.
constexpr int kXentVecThreads = 512;
constexpr int kXentUnroll = 4;  // vectors in flight per thread and pass

// e^(x - m) as 2^(x log2 e - m log2 e) on the SFU, the scale folded into the caller's FMA (one op less
// per logit than __expf(x - m)). The kernel is instruction-bound at GPT-2's vocabulary, not
// memory-bound: two exponentials per logit, so the masks and the target test stay out of its loops.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Adds the values f (-inf for none) to a thread's running max m and sum s of e^(value - m): one
// rescale for all K, and none while the max stays (2^(m log2 e - round(m log2 e)) is not exactly 1).
template <int K>
__device__ __forceinline__ void online_softmax_add(float& m, float& s, const float (&f)[K]) {
  float lm = -INFINITY;
#pragma unroll
  for (int i = 0; i < K; ++i) lm = fmaxf(lm, f[i]);
  const float nm = fmaxf(m, lm);
  if (nm == -INFINITY) return;
  const float nm2 = nm * kLog2e;
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i) acc += exp2_approx(fmaf(f[i], kLog2e, -nm2));
  if (nm > m) s *= exp2_approx(fmaf(m, kLog2e, -nm2));  // m = -inf: s is 0 and stays 0
  s += acc;
  m = nm;
}

// One block per row. Pass 1 reads the row once (kept in L2 for pass 2: few rows are in flight)
// with an online max / sum of exp per thread, rescaled at most once per kXentUnroll vectors; only
// the one vector that straddles the vocabulary's end is masked (padded columns to -inf). Pass 2 (with
// dlogits) rereads the row and writes dloss * (softmax - onehot), exactly 0 at padded columns and
// for rows without a target; the target's -1 is applied in its vector alone. dlogits may alias
// logits: each thread reads an element before writing it, and the target logit is read before the
// block reductions (barriers). Requires Vp % Pack<T>::N == 0 and 16-byte aligned rows.
template <typename T>
__global__ void __launch_bounds__(kXentVecThreads, 2)
    cross_entropy_vec_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t Vp,
                             int64_t vocab, float dloss) {
  constexpr int N = Pack<T>::N;
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int32_t tgt = targets[row];
  const bool has_target = tgt >= 0 && tgt < vocab;
  const float x_tgt = (threadIdx.x == 0 && has_target) ? to_f32(x[tgt]) : 0.0f;
  const int nv_full = int(vocab / N);  // vectors of real columns only
  const int nv = int(Vp / N);
  const int vocab_i = int(vocab);
  const int stride = int(blockDim.x);
  float m = -INFINITY, s = 0.0f;
  for (int v0 = threadIdx.x; v0 < nv_full; v0 += kXentUnroll * stride) {
    int4 raw[kXentUnroll] = {};
#pragma unroll
    for (int u = 0; u < kXentUnroll; ++u) {
      const int v = v0 + u * stride;
      if (v < nv_full) raw[u] = *reinterpret_cast<const int4*>(x + int64_t(v) * N);
    }
    float f[kXentUnroll * N];
#pragma unroll
    for (int u = 0; u < kXentUnroll; ++u) {
      const T* e = reinterpret_cast<const T*>(&raw[u]);
      const bool in = v0 + u * stride < nv_full;
#pragma unroll
      for (int j = 0; j < N; ++j) f[u * N + j] = in ? to_f32(e[j]) : -INFINITY;
    }
    online_softmax_add(m, s, f);
  }
  if (nv_full * N < vocab_i && threadIdx.x == nv_full % stride) {  // the straddling vector
    const T* e = x + int64_t(nv_full) * N;
    float f[N];
#pragma unroll
    for (int j = 0; j < N; ++j) f[j] = nv_full * N + j < vocab_i ? to_f32(e[j]) : -INFINITY;
    online_softmax_add(m, s, f);
  }
  const float M = block_max(m, shared);
  const float S = block_sum(m == -INFINITY ? 0.0f : s * exp2_approx((m - M) * kLog2e), shared);
  const float lse = M + logf(S);
  if (threadIdx.x == 0) losses[row] = has_target ? lse - x_tgt : 0.0f;
  if (!dlogits) return;
  T* d = dlogits + row * Vp;
  if (!has_target) {
    Pack<T> z;
#pragma unroll
    for (int j = 0; j < N; ++j) z.e[j] = from_f32<T>(0.0f);
    const int4 zr = *reinterpret_cast<const int4*>(z.e);
    for (int v = threadIdx.x; v < nv; v += stride) __stcs(reinterpret_cast<int4*>(d + int64_t(v) * N), zr);
    return;
  }
  const float lse2 = lse * kLog2e;
  const int v_tgt = tgt / N;
  for (int v0 = threadIdx.x; v0 < nv; v0 += kXentUnroll * stride) {
    int4 raw[kXentUnroll];
#pragma unroll
    for (int u = 0; u < kXentUnroll; ++u) {
      const int v = v0 + u * stride;
      if (v < nv) raw[u] = __ldcs(reinterpret_cast<const int4*>(x + int64_t(v) * N));
    }
#pragma unroll
    for (int u = 0; u < kXentUnroll; ++u) {
      const int v = v0 + u * stride;
      if (v < nv) {
        const T* e = reinterpret_cast<const T*>(&raw[u]);
        float p[N];
#pragma unroll
        for (int j = 0; j < N; ++j) p[j] = exp2_approx(fmaf(to_f32(e[j]), kLog2e, -lse2));
        if (v == v_tgt) {
#pragma unroll
          for (int j = 0; j < N; ++j)
            if (v * N + j == tgt) p[j] -= 1.0f;
        }
        Pack<T> g;
#pragma unroll
        for (int j = 0; j < N; ++j) g.e[j] = from_f32<T>(dloss * p[j]);
        if (v >= nv_full) {  // the straddling vector and the padding: exactly 0 past the vocabulary
#pragma unroll
          for (int j = 0; j < N; ++j)
            if (v * N + j >= vocab_i) g.e[j] = from_f32<T>(0.0f);
        }
        __stcs(reinterpret_cast<int4*>(d + int64_t(v) * N), *reinterpret_cast<const int4*>(g.e));
      }
    }
  }
}

// ---- vocabulary-parallel cross entropy: the three passes over a shard (N, cols) of the logits ----
// One block per row; the first n_real columns are real vocabulary. kVec: 16-byte vectors (cols a
// multiple of Pack<T>::N and 16-byte aligned rows), else one element per thread and step.
constexpr int kVpThreads = 512;

// Calls f(value, column) for every column c < n of row x (the vector loads stay inside the row:
// the last vector ends at or before cols).
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void for_each_real_col(const T* x, int n, F&& f) {
  if constexpr (kVec) {
    constexpr int N = Pack<T>::N;
    const int nv = (n + N - 1) / N;
    const int stride = int(blockDim.x);
    for (int v0 = threadIdx.x; v0 < nv; v0 += kXentUnroll * stride) {
      int4 raw[kXentUnroll];
#pragma unroll
      for (int u = 0; u < kXentUnroll; ++u) {
        const int v = v0 + u * stride;
        if (v < nv) raw[u] = *reinterpret_cast<const int4*>(x + int64_t(v) * N);
      }
#pragma unroll
      for (int u = 0; u < kXentUnroll; ++u) {
        const int v = v0 + u * stride;
        if (v < nv) {
          const T* e = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
          for (int j = 0; j < N; ++j)
            if (v * N + j < n) f(to_f32(e[j]), v * N + j);
        }
      }
    }
  } else {
    for (int c = threadIdx.x; c < n; c += blockDim.x) f(to_f32(x[c]), c);
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kVpThreads)
    vp_xent_max_kernel(float* row_max, const T* logits, int64_t cols, int n_real) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  float m = -INFINITY;
  for_each_real_col<T, kVec>(logits + row * cols, n_real, [&](float v, int) { m = fmaxf(m, v); });
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[row] = m;
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kVpThreads)
    vp_xent_sum_exp_kernel(float* row_sum, float* target_logit, const T* logits, const int32_t* targets,
                           const float* row_max, int64_t cols, int n_real, int64_t vocab_begin) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  const float M = row_max[row];
  float s = 0.0f;
  for_each_real_col<T, kVec>(x, n_real, [&](float v, int) { s += __expf(v - M); });
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    const int32_t tg = targets[row];
    const int64_t t = int64_t(tg) - vocab_begin;
    row_sum[row] = s;
    target_logit[row] = tg >= 0 && t >= 0 && t < n_real ? to_f32(x[t]) : 0.0f;
  }
}

// The loss from the global statistics (the same expression in both kernels below: the same bits).
__device__ __forceinline__ float vp_lse(float row_max, float row_sum) { return row_max + logf(row_sum); }

__global__ void vp_xent_loss_kernel(float* losses, const int32_t* targets, const float* row_max,
                                    const float* row_sum, const float* target_logit, int64_t N) {
  TRELLIS_GRID_STRIDE(r, N) losses[r] = targets[r] >= 0 ? vp_lse(row_max[r], row_sum[r]) - target_logit[r] : 0.0f;
}

// losses and dlogits = dloss * (exp(x - lse) - onehot) over the whole shard row (0 at padded
// columns and for rows without a target). dlogits may alias logits: each thread reads an element
// before writing it, and no thread touches another's elements.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kVpThreads, 2)
    vp_xent_grad_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, const float* row_max,
                        const float* row_sum, const float* target_logit, int64_t cols, int n_real,
                        int64_t vocab_begin, float dloss) {
  const int64_t row = blockIdx.x;
  const int32_t tg = targets[row];
  const float lse = vp_lse(row_max[row], row_sum[row]);
  if (threadIdx.x == 0) losses[row] = tg >= 0 ? lse - target_logit[row] : 0.0f;
  const int64_t t64 = int64_t(tg) - vocab_begin;
  const int t = tg >= 0 && t64 >= 0 && t64 < n_real ? int(t64) : -1;  // the target's column here, if any
  const int n = tg >= 0 ? n_real : 0;  // columns with a nonzero gradient
  const T* x = logits + row * cols;
  T* d = dlogits + row * cols;
  const int stride = int(blockDim.x);
  if constexpr (kVec) {
    constexpr int N = Pack<T>::N;
    const int nv = int(cols / N), nv_real = (n + N - 1) / N;
    // Vectors past the real columns (or every vector of a row without a target): zeros, unread.
    Pack<T> z;
#pragma unroll
    for (int j = 0; j < N; ++j) z.e[j] = from_f32<T>(0.0f);
    const int4 zr = *reinterpret_cast<const int4*>(z.e);
    for (int v = nv_real + threadIdx.x; v < nv; v += stride) __stcs(reinterpret_cast<int4*>(d + int64_t(v) * N), zr);
    for (int v0 = threadIdx.x; v0 < nv_real; v0 += kXentUnroll * stride) {
      int4 raw[kXentUnroll];
#pragma unroll
      for (int u = 0; u < kXentUnroll; ++u) {
        const int v = v0 + u * stride;
        if (v < nv_real) raw[u] = __ldcs(reinterpret_cast<const int4*>(x + int64_t(v) * N));
      }
#pragma unroll
      for (int u = 0; u < kXentUnroll; ++u) {
        const int v = v0 + u * stride;
        if (v < nv_real) {
          const T* e = reinterpret_cast<const T*>(&raw[u]);
          Pack<T> g;
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const int c = v * N + j;
            const float gv = c < n ? dloss * (__expf(to_f32(e[j]) - lse) - (c == t ? 1.0f : 0.0f)) : 0.0f;
            g.e[j] = from_f32<T>(gv);
          }
          __stcs(reinterpret_cast<int4*>(d + int64_t(v) * N), *reinterpret_cast<const int4*>(g.e));
        }
      }
    }
  } else {
    for (int c = threadIdx.x; c < int(cols); c += stride) {
      const float gv = c < n ? dloss * (__expf(to_f32(x[c]) - lse) - (c == t ? 1.0f : 0.0f)) : 0.0f;
      d[c] = from_f32<T>(gv);
    }
  }
}

// out = wte[token - vocab_begin] (0 outside the shard's V rows) + wpe[position] (if wpe): the token's
// positions entry, else t.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         const int32_t* positions, int64_t T_, int64_t C, int64_t n,
                                         int64_t vocab_begin, int64_t V) {
  TRELLIS_GRID_STRIDE(i, n) {
    const int64_t row = i / C, c = i % C, t = positions ? int64_t(positions[row]) : row % T_;
    const int64_t tok = int64_t(tokens[row]) - vocab_begin;
    float v = tok >= 0 && tok < V ? to_f32(wte[tok * C + c]) : 0.0f;
    if (wpe) v += to_f32(wpe[t * C + c]);
    out[i] = from_f32<T>(v);
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) v[i] = int32_t(i);
}

// One warp per run of equal tokens in the sorted order (the warp at the run's first element);
// rows are added to dwte in increasing position, the order of a sequential loop.
// Runs of tokens outside the shard's rows [vocab_begin, vocab_begin + V) are skipped.
template <typename T, typename G>
__global__ void embedding_runs_kernel(G* dwte, const T* dout, const int32_t* sorted_tokens,
                                      const int32_t* sorted_rows, int64_t n, int64_t C, int64_t vocab_begin,
                                      int64_t V) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t k = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; k < n; k += warps) {
    int32_t tok = sorted_tokens[k];
    if (k > 0 && sorted_tokens[k - 1] == tok) continue;
    const int64_t shard_row = int64_t(tok) - vocab_begin;
    if (shard_row < 0 || shard_row >= V) continue;
    int64_t end = k + 1;
    while (end < n && sorted_tokens[end] == tok) ++end;
    G* dst = dwte + shard_row * C;
    for (int64_t c = lane; c < C; c += 32) {
      float acc = to_f32(dst[c]);
      for (int64_t j = k; j < end; ++j) acc += to_f32(dout[int64_t(sorted_rows[j]) * C + c]);
      dst[c] = from_f32<G>(acc);
    }
  }
}

// dwpe[t, c] += sum over b (in order) of dout[b, t, c].
template <typename T, typename G>
__global__ void position_grad_kernel(G* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C) {
  TRELLIS_GRID_STRIDE(i, T_ * C) {
    float acc = to_f32(dwpe[i]);
    for (int64_t b = 0; b < B; ++b) acc += to_f32(dout[b * T_ * C + i]);
    dwpe[i] = from_f32<G>(acc);
  }
}

int sort_end_bit(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < vocab) ++bits;
  return bits;
}

struct EmbeddingScratch {
  size_t keys_out, rows_in, rows_out, temp, temp_bytes, total;
};

EmbeddingScratch embedding_scratch_layout(int64_t n, int64_t vocab) {
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), int(n), 0, sort_end_bit(vocab)));
  ScratchCarver c;
  EmbeddingScratch l{};
  l.keys_out = c.take(size_t(n) * 4);
  l.rows_in = c.take(size_t(n) * 4);
  l.rows_out = c.take(size_t(n) * 4);
  l.temp = c.take(temp_bytes);
  l.temp_bytes = temp_bytes;
  l.total = c.offset;
  return l;
}

}  // namespace

void launch_cross_entropy(cudaStream_t s, float* losses, void* dlogits, const void* logits, const int32_t* targets,
                          DType t, int64_t N, int64_t Vp, int64_t vocab, float dloss) {
  if (N == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    constexpr int kN = Pack<E>::N;
    bool vec = Vp % kN == 0 && Vp / kN < int64_t(1) << 30 && aligned16(logits) && (!dlogits || aligned16(dlogits));
    if (vec) {
      cross_entropy_vec_kernel<E><<<unsigned(N), kXentVecThreads, 0, s>>>(
          losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), targets, Vp, vocab, dloss);
    } else {
      cross_entropy_kernel<E><<<unsigned(N), kXentThreads, 0, s>>>(losses, static_cast<E*>(dlogits),
                                                                    static_cast<const E*>(logits), targets, Vp,
                                                                    vocab, dloss);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_vp_xent_max(cudaStream_t s, float* row_max, const void* logits, DType t, int64_t N, int64_t cols,
                        int64_t n_real) {
  if (N == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    if (cols % Pack<E>::N == 0 && aligned16(logits)) {
      vp_xent_max_kernel<E, true><<<unsigned(N), kVpThreads, 0, s>>>(row_max, static_cast<const E*>(logits), cols,
                                                                      int(n_real));
    } else {
      vp_xent_max_kernel<E, false><<<unsigned(N), kVpThreads, 0, s>>>(row_max, static_cast<const E*>(logits), cols,
                                                                       int(n_real));
    });
  CUDA_CHECK_LAUNCH();
}

void launch_vp_xent_sum_exp(cudaStream_t s, float* row_sum, float* target_logit, const void* logits,
                            const int32_t* targets, const float* row_max, DType t, int64_t N, int64_t cols,
                            int64_t n_real, int64_t vocab_begin) {
  if (N == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    if (cols % Pack<E>::N == 0 && aligned16(logits)) {
      vp_xent_sum_exp_kernel<E, true><<<unsigned(N), kVpThreads, 0, s>>>(
          row_sum, target_logit, static_cast<const E*>(logits), targets, row_max, cols, int(n_real), vocab_begin);
    } else {
      vp_xent_sum_exp_kernel<E, false><<<unsigned(N), kVpThreads, 0, s>>>(
          row_sum, target_logit, static_cast<const E*>(logits), targets, row_max, cols, int(n_real), vocab_begin);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_vp_xent_loss_and_grad(cudaStream_t s, float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max, const float* row_sum,
                                  const float* target_logit, DType t, int64_t N, int64_t cols, int64_t n_real,
                                  int64_t vocab_begin, float dloss) {
  if (N == 0) return;
  if (!dlogits) {
    vp_xent_loss_kernel<<<grid_for(N), kThreads, 0, s>>>(losses, targets, row_max, row_sum, target_logit, N);
    CUDA_CHECK_LAUNCH();
    return;
  }
  TRELLIS_FLOAT_SWITCH(t, E,
    if (cols % Pack<E>::N == 0 && aligned16(logits) && aligned16(dlogits)) {
      vp_xent_grad_kernel<E, true><<<unsigned(N), kVpThreads, 0, s>>>(
          losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), targets, row_max, row_sum, target_logit,
          cols, int(n_real), vocab_begin, dloss);
    } else {
      vp_xent_grad_kernel<E, false><<<unsigned(N), kVpThreads, 0, s>>>(
          losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), targets, row_max, row_sum, target_logit,
          cols, int(n_real), vocab_begin, dloss);
    });
  CUDA_CHECK_LAUNCH();
}

void launch_embedding_forward(cudaStream_t s, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                              const int32_t* positions, DType t, int64_t B, int64_t T_, int64_t C,
                              int64_t vocab_begin, int64_t V) {
  int64_t n = B * T_ * C;
  if (n == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    embedding_forward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(static_cast<E*>(out), tokens,
                                                                 static_cast<const E*>(wte),
                                                                 static_cast<const E*>(wpe), positions, T_, C, n,
                                                                 vocab_begin, V));
  CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_scratch_bytes(int64_t n_tokens, int64_t vocab_size) {
  return embedding_scratch_layout(n_tokens, vocab_size).total;
}

void launch_embedding_backward(cudaStream_t s, void* dwte, DType dwte_t, void* dwpe, DType dwpe_t, const void* dout,
                               const int32_t* tokens, DType t, int64_t B, int64_t T_, int64_t C, int64_t vocab_begin,
                               int64_t V, int64_t vocab_size, void* scratch, size_t scratch_bytes) {
  int64_t n = B * T_;
  if (n == 0 || C == 0) return;
  if (dwte) {
    EmbeddingScratch l = embedding_scratch_layout(n, vocab_size);
    TRELLIS_CHECK(scratch_bytes >= l.total, "embedding_backward: scratch too small");
    ScratchCarver c{0, static_cast<char*>(scratch)};
    int32_t* keys_out = c.at<int32_t>(l.keys_out);
    int32_t* rows_in = c.at<int32_t>(l.rows_in);
    int32_t* rows_out = c.at<int32_t>(l.rows_out);
    iota_kernel<<<grid_for(n), kThreads, 0, s>>>(rows_in, n);
    CUDA_CHECK_LAUNCH();
    size_t temp_bytes = l.temp_bytes;
    // LSD radix sort is stable: equal tokens keep increasing row (= position) order. The keys are
    // the global token ids (all of them: another shard's runs are skipped by the runs kernel).
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(c.at<void>(l.temp), temp_bytes, tokens, keys_out, rows_in, rows_out,
                                               int(n), 0, sort_end_bit(vocab_size), s));
    TRELLIS_FLOAT_SWITCH(t, E, TRELLIS_FLOAT_SWITCH(dwte_t, G,
      embedding_runs_kernel<E, G><<<grid_for(n * 32), kThreads, 0, s>>>(static_cast<G*>(dwte), static_cast<const E*>(dout),
                                                                        keys_out, rows_out, n, C, vocab_begin, V)));
    CUDA_CHECK_LAUNCH();
  }
  if (dwpe) {
    TRELLIS_FLOAT_SWITCH(t, E, TRELLIS_FLOAT_SWITCH(dwpe_t, G,
      position_grad_kernel<E, G><<<grid_for(T_ * C), kThreads, 0, s>>>(static_cast<G*>(dwpe), static_cast<const E*>(dout),
                                                                       B, T_, C)));
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace trellis::gpu
