// CUDA layer norm (forward, backward; with rms RMSNorm, with a null bias none), bias gradient and
// the scalar reductions, all deterministic:
// column sums go through per-chunk partials summed in a fixed order, never through atomics. The
// chunking (colsum_chunks, layernorm_chunks) depends on the shape only, so results are bitwise
// repeatable on any GPU; which kernel runs (vectorized or not) also depends on the tensors'
// 16-byte alignment, the same from run to run for the same model and layout.
#include <type_traits>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// ---- 16-byte vectors ----
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T e[N];
};
template <typename T>
__device__ __forceinline__ Pack<T> ld16(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(r.e) = *reinterpret_cast<const int4*>(p);
  return r;
}
template <typename T>
__device__ __forceinline__ void st16(T* p, const Pack<T>& v) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(v.e);
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::bf16;
  else return DType::f16;
}

// The vectorized row kernels keep a row in registers: lane l holds vectors l, l + 32, ... of the
// row, at most kMaxRowIters of them (bf16: cols <= 2048, f32: cols <= 1024).
constexpr int kMaxRowIters = 8;
template <typename T>
int row_iters(int64_t cols) {
  constexpr int N = Pack<T>::N;
  return int((cols + 32 * N - 1) / (32 * N));
}

// ---- layer norm forward ----

// One warp per row. Two passes over the row for mean and variance (numerically safer than
// E[x^2] - E[x]^2), a third to write.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                                         int64_t rows, int64_t cols, float eps, bool rms) {
  int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) s += to_f32(xr[c]);
  float m = rms ? 0.0f : warp_sum(s) / float(cols);
  float v = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    float d = to_f32(xr[c]) - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / float(cols) + eps);
  T* orow = out + row * cols;
  for (int64_t c = lane; c < cols; c += 32)
    orow[c] = from_f32<T>((to_f32(xr[c]) - m) * r * to_f32(w[c]) + (b ? to_f32(b[c]) : 0.0f));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// The same with the row held in registers (one read of x), 16-byte loads and stores. With ADD, the
// row is first x + branch, rounded to T and written to r_out (the residual add fused in: the stats
// are those of the rounded sum, so it is bitwise add then layer norm). (Staging w and b in shared
// memory, each warp then taking 4 rows, changed nothing measurable: ~3 TB/s either way at GPT-2
// 1.3B's shapes, bench/sessions/2026-11-30c call 5.)
// Requires cols % Pack<T>::N == 0 and 16-byte aligned pointers.
template <typename T, int ITERS, bool ADD>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_vec_kernel(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int64_t rows,
                                 int cols, float eps, bool rms, const T* branch, T* r_out) {
  constexpr int N = Pack<T>::N;
  int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int nvec = cols / N;
  const T* xr = x + row * cols;
  // Every load before the first store: r_out might alias x or branch as far as the compiler knows,
  // so a store between them would keep the next loads from being issued early (one vector in
  // flight a warp: the add ran at 3.0 TB/s, bench/sessions/2026-11-30i call 1).
  Pack<T> xv[ITERS], bv[ADD ? ITERS : 1];
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    int v = lane + 32 * i;
    if (v < nvec) {
      xv[i] = ld16(xr + v * N);
      if constexpr (ADD) bv[i] = ld16(branch + row * cols + v * N);
    }
  }
  if constexpr (ADD) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      int v = lane + 32 * i;
      if (v < nvec) {
#pragma unroll
        for (int j = 0; j < N; ++j) xv[i].e[j] = from_f32<T>(to_f32(xv[i].e[j]) + to_f32(bv[i].e[j]));
        st16(r_out + row * cols + v * N, xv[i]);
      }
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    if (lane + 32 * i < nvec) {
#pragma unroll
      for (int j = 0; j < N; ++j) s += to_f32(xv[i].e[j]);
    }
  }
  float m = rms ? 0.0f : warp_sum(s) / float(cols);
  float var = 0.0f;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    if (lane + 32 * i < nvec) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        float d = to_f32(xv[i].e[j]) - m;
        var += d * d;
      }
    }
  }
  float r = 1.0f / sqrtf(warp_sum(var) / float(cols) + eps);
  T* orow = out + row * cols;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    int v = lane + 32 * i;
    if (v < nvec) {
      Pack<T> wv = ld16(w + v * N), bv{}, o;  // bv{}: zeros where there is no bias
      if (b) bv = ld16(b + v * N);
#pragma unroll
      for (int j = 0; j < N; ++j)
        o.e[j] = from_f32<T>((to_f32(xv[i].e[j]) - m) * r * to_f32(wv.e[j]) + to_f32(bv.e[j]));
      st16(orow + v * N, o);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// ---- layer norm backward ----

// Fallback (any cols / alignment): dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),
// dnorm = dout * w. One warp per row.
template <typename T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* mean,
                                             const float* rstd, int64_t rows, int64_t cols, bool rms) {
  int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  const T* dr = dout + row * cols;
  float m = mean[row], r = rstd[row];
  float sd = 0.0f, sdx = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    float dn = to_f32(dr[c]) * to_f32(w[c]);
    float xh = (to_f32(xr[c]) - m) * r;
    sd += dn;
    sdx += dn * xh;
  }
  float mean_d = rms ? 0.0f : warp_sum(sd) / float(cols);
  float mean_dx = warp_sum(sdx) / float(cols);
  T* dxr = dx + row * cols;
  for (int64_t c = lane; c < cols; c += 32) {
    float dn = to_f32(dr[c]) * to_f32(w[c]);
    float xh = (to_f32(xr[c]) - m) * r;
    dxr[c] = from_f32<T>(to_f32(dxr[c]) + (dn - mean_d - xh * mean_dx) * r);
  }
}

// Asynchronous copies global -> shared (cp.async, sm_80 and later; before that plain copies, which
// is still correct: a thread only ever reads the shared slots it filled itself).
__device__ __forceinline__ void copy_async16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem));
#else
  *static_cast<int4*>(smem) = *static_cast<const int4*>(gmem);
#endif
}
__device__ __forceinline__ void copy_async4(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem));
#else
  *static_cast<float*>(smem) = *static_cast<const float*>(gmem);
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;");
#endif
}
template <int PENDING>  // waits until at most PENDING of this thread's newest groups are in flight
__device__ __forceinline__ void copy_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
#endif
}

// Fused pass (16-byte vectors): one thread block per chunk of rows (layernorm_chunks), its threads
// splitting each row's vectors (thread t holds vectors t, t + blockDim.x, ...). A thread's columns
// are thus the same for every row, so its dw and db sums stay in a few registers, and the block
// writes one partial per column for its chunk (summed in chunk order by column_finalize_kernel:
// deterministic). Rows stream through a ring of STAGES shared-memory slots filled by cp.async, so
// STAGES - 1 rows of x, dout and dx (and their mean and rstd) are in flight while one is computed;
// each thread copies and reads only its own vectors, so the ring needs no barrier. (One row in
// flight per block, in registers, took 7.2 ms per step at GPT-2 1.3B; the ring 6.3 ms, still only
// ~2.1 TB/s, and fewer instructions per element changed nothing: the limit is not yet known.)
// The row sums of dnorm and dnorm * xhat go through a block reduction whose shared slots alternate
// with the row's parity, so one barrier per row suffices.
// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w. Requires
// cols % Pack<T>::N == 0, 16-byte aligned dx, dout, x, w, and blockDim.x a multiple of 32 with
// blockDim.x * ITERS >= cols / Pack<T>::N; dynamic shared memory of fused_ring_bytes.
// (Earlier forms: one warp per row holding the row's column sums in registers ran at a third of
// the memory bandwidth, one CTA per SM; a warp-per-row pass plus a separate column pass read dout
// and x twice.)
inline size_t fused_ring_bytes(int stages, int iters, int threads) {
  return size_t(stages) * size_t(threads) * (3 * iters * sizeof(int4) + sizeof(float2));
}

// N floats (N % 4 == 0) to 16-byte aligned dst as N / 4 vector stores.
template <int N>
__device__ __forceinline__ void store_float4s(float* dst, const float (&v)[N]) {
#pragma unroll
  for (int q = 0; q < N / 4; ++q)
    reinterpret_cast<float4*>(dst)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

// With SUMS, p_before and p_after get the chunk's column sums of dx as read and as written.
template <typename T, int ITERS, int STAGES, bool SUMS>
__global__ void __launch_bounds__(512, ITERS == 1 ? 2 : 1)  // ITERS 1: <= 64 registers, 4 blocks of 256 an SM
    layernorm_backward_fused_kernel(T* dx, float* p_dw, float* p_db, float* p_before, float* p_after,
                                    const T* dout, const T* x, const T* w, const float* mean, const float* rstd,
                                    int64_t rows, int cols, int64_t rows_per_chunk, bool rms) {
  constexpr int N = Pack<T>::N;
  extern __shared__ int4 ring[];  // [STAGES][x, dout, dx][ITERS][blockDim.x], then [STAGES][blockDim.x] stats
  __shared__ float2 sums[2][16];  // per warp (sum dnorm, sum dnorm * xhat), by row parity
  const int nvec = cols / N, nt = int(blockDim.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = nt >> 5;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float2* stats = reinterpret_cast<float2*>(ring + STAGES * 3 * ITERS * nt);
  auto slot = [&](int stage, int array, int i) { return ring + ((stage * 3 + array) * ITERS + i) * nt + threadIdx.x; };
  auto fetch = [&](int64_t r, int stage) {  // row r into the ring's slot `stage` (one commit group)
    if (r < r1) {
      float2* st = stats + stage * nt + threadIdx.x;
      copy_async4(&st->x, mean + r);
      copy_async4(&st->y, rstd + r);
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int v = threadIdx.x + i * nt;
        if (v < nvec) {
          copy_async16(slot(stage, 0, i), x + r * cols + v * N);
          copy_async16(slot(stage, 1, i), dout + r * cols + v * N);
          copy_async16(slot(stage, 2, i), dx + r * cols + v * N);
        }
      }
    }
    copy_async_commit();
  };
  float wf[ITERS][N], aw[ITERS][N], ab[ITERS][N];  // w in f32 once, not per row
  float sb[SUMS ? ITERS : 1][N], sa[SUMS ? ITERS : 1][N];  // dx column sums before / after (SUMS)
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int v = threadIdx.x + i * nt;
    Pack<T> wv{};
    if (v < nvec) wv = ld16(w + v * N);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      wf[i][j] = v < nvec ? to_f32(wv.e[j]) : 0.0f;
      aw[i][j] = ab[i][j] = 0.0f;
      if constexpr (SUMS) sb[i][j] = sa[i][j] = 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) fetch(r0 + k, k);
  const float inv_cols = 1.0f / float(cols);
  for (int64_t r = r0; r < r1; ++r) {
    const int k = int(r - r0), stage = k % STAGES;
    fetch(r + STAGES - 1, (k + STAGES - 1) % STAGES);  // into the slot this thread emptied last row
    copy_async_wait<STAGES - 1>();                      // row r has landed
    const float2 st = stats[stage * nt + threadIdx.x];
    const float m = st.x, rs = st.y;
    // dy and xhat in f32, computed once per element and kept for the update below; 0 past the row
    // (v >= nvec, whose slots were never filled).
    float dy[ITERS][N], xh[ITERS][N];
    float sd = 0.0f, sdx = 0.0f;
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      Pack<T> xc{}, dc{};
      if (threadIdx.x + i * nt < nvec) {
        *reinterpret_cast<int4*>(xc.e) = *slot(stage, 0, i);
        *reinterpret_cast<int4*>(dc.e) = *slot(stage, 1, i);
      }
#pragma unroll
      for (int j = 0; j < N; ++j) {
        dy[i][j] = to_f32(dc.e[j]);
        xh[i][j] = (to_f32(xc.e[j]) - m) * rs;
        const float dn = dy[i][j] * wf[i][j];
        sd += dn;
        sdx = fmaf(dn, xh[i][j], sdx);
      }
    }
    sd = warp_sum(sd);
    sdx = warp_sum(sdx);
    const int parity = int(r & 1);
    if (lane == 0) sums[parity][warp] = make_float2(sd, sdx);
    __syncthreads();
    float2 tot = sums[parity][0];
    for (int q = 1; q < nwarps; ++q) {
      tot.x += sums[parity][q].x;
      tot.y += sums[parity][q].y;
    }
    const float mean_d = rms ? 0.0f : tot.x * inv_cols, mean_dx = tot.y * inv_cols;
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = threadIdx.x + i * nt;
      if (v < nvec) {
        Pack<T> g;
        *reinterpret_cast<int4*>(g.e) = *slot(stage, 2, i);
        if constexpr (SUMS) {  // dy and xhat again from the ring: registers for the two sums instead
          Pack<T> xc, dc;
          *reinterpret_cast<int4*>(xc.e) = *slot(stage, 0, i);
          *reinterpret_cast<int4*>(dc.e) = *slot(stage, 1, i);
#pragma unroll
          for (int j = 0; j < N; ++j) {
            dy[i][j] = to_f32(dc.e[j]);
            xh[i][j] = (to_f32(xc.e[j]) - m) * rs;
          }
        }
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float dn = dy[i][j] * wf[i][j], old = to_f32(g.e[j]);
          g.e[j] = from_f32<T>(old + (dn - mean_d - xh[i][j] * mean_dx) * rs);
          if constexpr (SUMS) {
            sb[i][j] += old;
            sa[i][j] += to_f32(g.e[j]);  // as stored (rounded), as a later pass would read it
          }
          ab[i][j] += dy[i][j];
          aw[i][j] = fmaf(dy[i][j], xh[i][j], aw[i][j]);
        }
        st16(dx + r * cols + v * N, g);
      }
    }
  }
  copy_async_wait<0>();  // nothing may be in flight into shared memory when the block exits
  // The partials as 16-byte stores (a thread's N columns are adjacent; N floats per store scattered
  // each warp's stores over N times the sectors).
  static_assert(N % 4 == 0, "partials are stored as float4");
  const int64_t chunk = blockIdx.x;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int v = threadIdx.x + i * nt;
    if (v < nvec) {
      const int64_t at = chunk * cols + v * N;
      store_float4s(p_db + at, ab[i]);
      store_float4s(p_dw + at, aw[i]);
      if constexpr (SUMS) {
        store_float4s(p_before + at, sb[i]);
        store_float4s(p_after + at, sa[i]);
      }
    }
  }
}

// ---- column partials (bias gradient; layer-norm weight and bias gradients) ----

// Partials of one chunk of rows (blockIdx.y) for 32 * V columns (blockIdx.x): thread (g, t), g =
// threadIdx.x / 32, sums V adjacent columns over rows g, g + 8, ... of the chunk; the 8 groups are
// then added in group order. p_db gets the sums of dy; with x given (layer norm), p_dw gets the
// sums of dy * xhat, xhat = (x - mean) * rstd per row. Vector loads when V > 1 (then cols % V == 0
// and dy, x 16-byte aligned).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    column_partials_vec_kernel(float* p_db, float* p_dw, const T* dy, const T* x, const float* mean,
                               const float* rstd, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  constexpr int kGroups = kThreads / 32;
  __shared__ float sb[kGroups][V * 32];
  __shared__ float sw[kGroups][V * 32];
  const int t = threadIdx.x & 31, g = threadIdx.x >> 5;
  const int64_t c0 = (int64_t(blockIdx.x) * 32 + t) * V;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ab[V], aw[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ab[j] = aw[j] = 0.0f;
  if (c0 < cols) {
#pragma unroll 8  // eight of a group's rows (a chunk's rows are 32 per group) in flight at once
    for (int64_t r = r0 + g; r < r1; r += kGroups) {
      float d[V], xv[V];
      if constexpr (V == 1) {
        d[0] = to_f32(dy[r * cols + c0]);
        if (x) xv[0] = to_f32(x[r * cols + c0]);
      } else {
        Pack<T> dp = ld16(dy + r * cols + c0);
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = to_f32(dp.e[j]);
        if (x) {
          Pack<T> xp = ld16(x + r * cols + c0);
#pragma unroll
          for (int j = 0; j < V; ++j) xv[j] = to_f32(xp.e[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) ab[j] += d[j];
      if (x) {
        const float m = mean[r], rs = rstd[r];
#pragma unroll
        for (int j = 0; j < V; ++j) aw[j] += d[j] * (xv[j] - m) * rs;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {  // column c0 + j at [j * 32 + t]: no bank conflicts
    sb[g][j * 32 + t] = ab[j];
    sw[g][j * 32 + t] = aw[j];
  }
  __syncthreads();
  // Each of the 8 * 32 threads finishes V * 32 / 256 (or fewer) of the tile's columns.
  for (int q = threadIdx.x; q < V * 32; q += kThreads) {
    int j = q >> 5, tt = q & 31;
    int64_t c = (int64_t(blockIdx.x) * 32 + tt) * V + j;
    float b = sb[0][q], w = sw[0][q];
#pragma unroll
    for (int k = 1; k < kGroups; ++k) {
      b += sb[k][q];
      w += sw[k][q];
    }
    if (c < cols) {
      p_db[chunk * cols + c] = b;
      if (x) p_dw[chunk * cols + c] = w;
    }
  }
}

template <typename T>
void launch_column_partials(cudaStream_t s, float* p_db, float* p_dw, const T* dy, const T* x, const float* mean,
                            const float* rstd, int64_t rows, int64_t cols, int64_t chunks, int64_t rows_per_chunk) {
  constexpr int N = Pack<T>::N;
  if (cols % N == 0 && aligned16(dy) && (!x || aligned16(x))) {
    dim3 grid(unsigned((cols / N + 31) / 32), unsigned(chunks));
    column_partials_vec_kernel<T, N><<<grid, kThreads, 0, s>>>(p_db, p_dw, dy, x, mean, rstd, rows, cols, rows_per_chunk);
  } else {
    dim3 grid(unsigned((cols + 31) / 32), unsigned(chunks));
    column_partials_vec_kernel<T, 1><<<grid, kThreads, 0, s>>>(p_db, p_dw, dy, x, mean, rstd, rows, cols, rows_per_chunk);
  }
  CUDA_CHECK_LAUNCH();
}

// Up to 4 column reductions in one launch (blockIdx.y picks one): out[c] += sum over chunks of
// partials[chunk][c], or = without its accumulate flag (out not read). The outputs are gradients of
// one dtype, out_t: f32, or the activations' 16-bit one (train.grad_dtype), rounded once. Strided
// (a batch's): `count` reductions, j's output and partials at j x out_stride and partials_stride
// elements after job 0's, with job 0's accumulate flag.
struct FinalizeJobs {
  void* out[4];
  const float* partials[4];
  bool accumulate[4];
  unsigned count = 0;
  DType out_t = DType::f32;
  bool strided = false;
  int64_t out_stride = 0, partials_stride = 0;
  void add(void* o, const float* p, bool acc) {
    out[count] = o;
    partials[count] = p;
    accumulate[count] = acc;
    ++count;
  }
};
// Thread
// (g, t), g = threadIdx.x / 32 of kFinalizeGroups: sums chunks g, g + kFinalizeGroups, ... in order,
// with up to 16 of its loads in flight; the groups' sums are then added in g order. (With 8 groups
// a thread ran 64 dependent rounds of loads at 512 chunks, and only cols / 32 blocks are there.)
constexpr int kFinalizeGroups = 32;
template <typename G>
__global__ void __launch_bounds__(kFinalizeGroups * 32)
    column_finalize_kernel(FinalizeJobs jobs, int64_t chunks, int64_t cols) {
  __shared__ float sm[kFinalizeGroups][32];
  const unsigned j = jobs.strided ? 0 : blockIdx.y;
  G* out = static_cast<G*>(jobs.out[j]) + (jobs.strided ? int64_t(blockIdx.y) * jobs.out_stride : 0);
  const float* partials = jobs.partials[j] + (jobs.strided ? int64_t(blockIdx.y) * jobs.partials_stride : 0);
  const bool accumulate = jobs.accumulate[j];
  const int t = threadIdx.x & 31, g = threadIdx.x >> 5;
  const int64_t c = int64_t(blockIdx.x) * 32 + t;
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 16
    for (int64_t k = g; k < chunks; k += kFinalizeGroups) s += partials[k * cols + c];
  }
  sm[g][t] = s;
  __syncthreads();
  if (g == 0 && c < cols) {
    float tot = sm[0][t];
#pragma unroll
    for (int k = 1; k < kFinalizeGroups; ++k) tot += sm[k][t];
    out[c] = from_f32<G>(accumulate ? to_f32(out[c]) + tot : tot);
  }
}

void finalize_columns(cudaStream_t s, const FinalizeJobs& jobs, int64_t chunks, int64_t cols) {
  dim3 grid(unsigned((cols + 31) / 32), jobs.count);
  TRELLIS_FLOAT_SWITCH(jobs.out_t, G, column_finalize_kernel<G><<<grid, kFinalizeGroups * 32, 0, s>>>(jobs, chunks, cols));
  CUDA_CHECK_LAUNCH();
}

// ---- scalar sums ----

// With x 16-byte aligned, 16-byte loads four at a time (64 bytes in flight per thread: a grid of
// scalar loads kept too few bytes in flight to reach the memory bandwidth), the tail scalar.
template <typename T>
__global__ void sum_partials_kernel(float* partials, const T* x, int64_t n, bool squares, bool vec) {
  constexpr int N = Pack<T>::N, UNROLL = 4;
  __shared__ float shared[32];
  float s = 0.0f;
  auto add = [&](float v) { s += squares ? v * v : v; };
  int64_t done = 0;
  if (vec) {
    const int64_t nvec = n / N, stride = int64_t(gridDim.x) * blockDim.x;
    int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < nvec; i += UNROLL * stride) {
      Pack<T> v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = ld16(x + (i + u * stride) * N);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int j = 0; j < N; ++j) add(to_f32(v[u].e[j]));
    }
    for (; i < nvec; i += stride) {
      const Pack<T> v = ld16(x + i * N);
#pragma unroll
      for (int j = 0; j < N; ++j) add(to_f32(v.e[j]));
    }
    done = nvec * N;
  }
  for (int64_t i = done + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    add(to_f32(x[i]));
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_finalize_kernel(float* out, const float* partials) {
  __shared__ float shared[32];
  float s = block_sum(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) out[0] += s;
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T, int ITERS>
void layernorm_forward_vec(cudaStream_t s, T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                           int64_t rows, int64_t cols, float eps, bool rms, const T* branch, T* r_out) {
  if (branch)
    layernorm_forward_vec_kernel<T, ITERS, true>
        <<<row_blocks(rows), kThreads, 0, s>>>(out, mean, rstd, x, w, b, rows, int(cols), eps, rms, branch, r_out);
  else
    layernorm_forward_vec_kernel<T, ITERS, false>
        <<<row_blocks(rows), kThreads, 0, s>>>(out, mean, rstd, x, w, b, rows, int(cols), eps, rms, nullptr, nullptr);
}

// With branch: r_out = x + branch first (fused where the vectorized kernel applies, else the add
// kernel, then the layer norm of r_out).
template <typename T>
void layernorm_forward_impl(cudaStream_t s, T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                            int64_t rows, int64_t cols, float eps, bool rms, const T* branch = nullptr,
                            T* r_out = nullptr) {
  constexpr int N = Pack<T>::N;
  int iters = row_iters<T>(cols);
  bool vec = cols % N == 0 && iters <= kMaxRowIters && aligned16(out) && aligned16(x) && aligned16(w) &&
             aligned16(b) && (!branch || (aligned16(branch) && aligned16(r_out)));  // a null b is aligned
  if (!vec && branch) {  // the two ops in turn, the layer norm choosing its kernel by r_out as alone
    launch_add(s, r_out, x, branch, dtype_of<T>(), rows * cols);
    layernorm_forward_impl<T>(s, out, mean, rstd, r_out, w, b, rows, cols, eps, rms);
    return;
  }
  if (!vec) {
    layernorm_forward_kernel<T><<<row_blocks(rows), kThreads, 0, s>>>(out, mean, rstd, x, w, b, rows, cols, eps, rms);
    CUDA_CHECK_LAUNCH();
    return;
  }
  switch (iters) {
    case 1: layernorm_forward_vec<T, 1>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 2: layernorm_forward_vec<T, 2>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 3: layernorm_forward_vec<T, 3>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 4: layernorm_forward_vec<T, 4>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 5: layernorm_forward_vec<T, 5>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 6: layernorm_forward_vec<T, 6>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    case 7: layernorm_forward_vec<T, 7>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
    default: layernorm_forward_vec<T, 8>(s, out, mean, rstd, x, w, b, rows, cols, eps, rms, branch, r_out); break;
  }
  CUDA_CHECK_LAUNCH();
}

// The fused kernel's block: one vector a thread up to 128 threads a row, else two (ITERS), the
// threads as few as cover the row (a multiple of 32), at most 512: bf16 cols <= 8192, f32 <= 4096,
// else the two-pass form. The ring: 3 slots (2 rows ahead), <= 160 KB a block. (At
// GPT-2 1.3B's 16384 x 2048, bf16: 256 threads of one vector ran at 3.2 TB/s, 128 of two at 3.7, a
// stream moving the same bytes at 4.1; bench/sessions/2026-11-30i call 1.)
constexpr int kMaxFusedIters = 2;
constexpr int kFusedRowThreads = 128;
constexpr int kFusedStages = 3;
inline int fused_threads(int64_t nvec, int64_t iters) { return int(((nvec + iters - 1) / iters + 31) / 32 * 32); }
// p_before and p_after non-null: the variant that also sums dx's columns.
template <typename T, int ITERS>
void layernorm_backward_fused(cudaStream_t s, T* dx, float* p_dw, float* p_db, float* p_before, float* p_after,
                              const T* dout, const T* x, const T* w, const float* mean, const float* rstd,
                              int64_t rows, int64_t cols, int64_t chunks, bool rms) {
  const int threads = fused_threads(cols / Pack<T>::N, ITERS);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const size_t bytes = fused_ring_bytes(kFusedStages, ITERS, threads);
  auto kernel = p_before ? layernorm_backward_fused_kernel<T, ITERS, kFusedStages, true>
                         : layernorm_backward_fused_kernel<T, ITERS, kFusedStages, false>;
  if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<unsigned(chunks), threads, bytes, s>>>(dx, p_dw, p_db, p_before, p_after, dout, x, w, mean, rstd, rows,
                                                  int(cols), rows_per_chunk, rms);
}

// Batched: the blocks' rows one after another, cut in chunks that never span two blocks (so block
// i's partials are chunks [i k, (i + 1) k)), then one strided finalize for all of them.
template <typename T>
void bias_backward_impl(cudaStream_t s, void* db, DType grad_t, const T* dy, int64_t rows, int64_t cols,
                        float* scratch, bool accumulate, int64_t batch = 1, int64_t db_stride = 0) {
  const int64_t chunks = batch == 1 ? colsum_chunks(rows) : batch_colsum_chunks(rows);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  launch_column_partials<T>(s, scratch, nullptr, dy, static_cast<const T*>(nullptr), nullptr, nullptr, rows * batch,
                            cols, chunks * batch, rows_per_chunk);
  FinalizeJobs jobs;
  jobs.out_t = grad_t;
  jobs.add(db, scratch, accumulate);
  if (batch > 1) {
    jobs.count = unsigned(batch);
    jobs.strided = true;
    jobs.out_stride = db_stride;
    jobs.partials_stride = chunks * cols;
  }
  finalize_columns(s, jobs, chunks, cols);
}

template <typename T>
void layernorm_backward_impl(cudaStream_t s, T* dx, void* dw, void* db, DType grad_t, const T* dout, const T* x,
                             const T* w, const float* mean, const float* rstd, int64_t rows, int64_t cols,
                             float* scratch, bool accumulate, size_t block_shared_memory, const ColumnSumOutputs& sums,
                             bool rms) {
  constexpr int N = Pack<T>::N;
  const bool with_sums = sums.before != nullptr;
  const int64_t nvec = cols / N, iters = nvec > kFusedRowThreads ? 2 : 1;
  const bool fused = cols % N == 0 && nvec <= kMaxFusedIters * 512 && aligned16(dx) && aligned16(dout) &&
                     aligned16(x) && aligned16(w) &&
                     // a wide row's ring may not fit (Hopper 227 KB a block, A100 163 KB, other Ampere and Ada 99 KB)
                     fused_ring_bytes(kFusedStages, int(iters), fused_threads(nvec, iters)) <= block_shared_memory;
  if (fused) {
    // 32-row chunks. (At 1.3B's width, two vectors a thread, 64-row chunks were faster back to back
    // at full clock, 72.9 against 76.1 us; but right after a GEMM at the power cap, as in the step,
    // 32-row chunks took 82.4 us against 98.1 with the finalize, and 103.6 against 121.7 with the dx
    // sums: bench/sessions/2026-12-02a call 1. A block's rows run one after another, so at the
    // step's lower clock more blocks in flight win.)
    const int64_t chunks = layernorm_chunks(rows);
    float* p_db = scratch;
    float* p_dw = scratch + chunks * cols;
    float* p_before = with_sums ? scratch + 2 * chunks * cols : nullptr;
    float* p_after = with_sums ? scratch + 3 * chunks * cols : nullptr;
    auto fused_launch = iters == 1 ? &layernorm_backward_fused<T, 1> : &layernorm_backward_fused<T, 2>;
    fused_launch(s, dx, p_dw, p_db, p_before, p_after, dout, x, w, mean, rstd, rows, cols, chunks, rms);
    CUDA_CHECK_LAUNCH();
    FinalizeJobs jobs;
    jobs.out_t = grad_t;
    jobs.add(dw, p_dw, accumulate);
    if (db) jobs.add(db, p_db, accumulate);  // no bias: its partials are not summed
    if (with_sums) {
      jobs.add(sums.before, p_before, sums.accumulate_before);
      jobs.add(sums.after, p_after, sums.accumulate_after);
    }
    finalize_columns(s, jobs, chunks, cols);
    return;
  }
  // Any shape or alignment: the dx sums by the bias-gradient pass, before and after.
  if (with_sums) bias_backward_impl<T>(s, sums.before, grad_t, dx, rows, cols, scratch, sums.accumulate_before);
  // Any shape or alignment: a warp per row for dx, then the column pass for dw and db.
  const int64_t chunks = colsum_chunks(rows);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  float* p_db = scratch;
  float* p_dw = scratch + chunks * cols;
  layernorm_backward_dx_kernel<T><<<row_blocks(rows), kThreads, 0, s>>>(dx, dout, x, w, mean, rstd, rows, cols, rms);
  CUDA_CHECK_LAUNCH();
  launch_column_partials<T>(s, p_db, p_dw, dout, x, mean, rstd, rows, cols, chunks, rows_per_chunk);
  FinalizeJobs jobs;
  jobs.out_t = grad_t;
  jobs.add(dw, p_dw, accumulate);
  if (db) jobs.add(db, p_db, accumulate);
  finalize_columns(s, jobs, chunks, cols);
  if (with_sums) bias_backward_impl<T>(s, sums.after, grad_t, dx, rows, cols, scratch, sums.accumulate_after);
}

// ---- QK-norm ----
// A warp per (row, head) pair p = row x heads + head; lane l holds dims l, l + 32, ... of the head.
constexpr int kHeadSlots = kMaxHeadDim / 32;

template <typename T>
__global__ void qk_norm_forward_kernel(T* out, float* rstd, const T* x, const T* wq, const T* wk, int64_t rows,
                                       int64_t W, int hd, int heads, int q, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t p = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; p < rows * heads; p += warps) {
    const int j = int(p % heads);
    const int64_t at = (p / heads) * W + int64_t(j) * hd;
    const T* w = j < q ? wq : wk;
    float v[kHeadSlots], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      const int i = lane + 32 * k;
      v[k] = i < hd ? to_f32(x[at + i]) : 0.0f;
      ss += v[k] * v[k];
    }
    const float rs = rsqrtf(warp_sum(ss) / float(hd) + eps);
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      const int i = lane + 32 * k;
      if (i < hd) out[at + i] = from_f32<T>(v[k] * rs * to_f32(w[i]));
    }
    if (lane == 0) rstd[p] = rs;
  }
  if (out == x) return;
  const int64_t normed = int64_t(heads) * hd, vcols = W - normed;  // v, copied
  TRELLIS_GRID_STRIDE(e, rows * vcols) {
    const int64_t at = (e / vcols) * W + normed + e % vcols;
    out[at] = x[at];
  }
}

// Block c takes rows [c rpc, (c + 1) rpc); warp w of it the pairs w, w + 8, ... of those rows, summing
// dout * xhat per dim in registers; the warps' sums are then added in warp order into the chunk's
// partials (q's, then k's chunks x hd after them). dx may be dout: a lane reads its dims before writing them.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    qk_norm_backward_kernel(T* dx, float* p_q, float* p_k, const T* dout, const T* x, const T* wq, const T* wk,
                            const float* rstd, int64_t rows, int64_t W, int hd, int heads, int q, int64_t rpc) {
  __shared__ float sums[kWarpsPerBlock][2][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r0 = int64_t(blockIdx.x) * rpc, r1 = r0 + rpc < rows ? r0 + rpc : rows;
  float aq[kHeadSlots] = {}, ak[kHeadSlots] = {};
  for (int64_t p = r0 * heads + warp; p < r1 * heads; p += kWarpsPerBlock) {
    const int j = int(p % heads);
    const int64_t at = (p / heads) * W + int64_t(j) * hd;
    const T* w = j < q ? wq : wk;
    const float rs = rstd[p];
    float xh[kHeadSlots], g[kHeadSlots], dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      const int i = lane + 32 * k;
      const float d = i < hd ? to_f32(dout[at + i]) : 0.0f;
      xh[k] = i < hd ? to_f32(x[at + i]) * rs : 0.0f;
      g[k] = i < hd ? d * to_f32(w[i]) : 0.0f;
      dot += g[k] * xh[k];
      if (j < q) aq[k] += d * xh[k];
      else ak[k] += d * xh[k];
    }
    const float mean_gx = warp_sum(dot) / float(hd);
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      const int i = lane + 32 * k;
      if (i < hd) dx[at + i] = from_f32<T>((g[k] - xh[k] * mean_gx) * rs);
    }
  }
#pragma unroll
  for (int k = 0; k < kHeadSlots; ++k) {
    const int i = lane + 32 * k;
    if (i < hd) {
      sums[warp][0][i] = aq[k];
      sums[warp][1][i] = ak[k];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * hd; c += blockDim.x) {
    const int which = c / hd, i = c % hd;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) s += sums[w][which][i];
    (which == 0 ? p_q : p_k)[int64_t(blockIdx.x) * hd + i] = s;
  }
  if (dx == dout) return;
  const int64_t normed = int64_t(heads) * hd, vcols = W - normed;  // v, copied
  TRELLIS_GRID_STRIDE(e, rows * vcols) {
    const int64_t at = (e / vcols) * W + normed + e % vcols;
    dx[at] = dout[at];
  }
}

}  // namespace

void launch_layernorm_forward(cudaStream_t s, void* out, float* mean, float* rstd, const void* x, const void* w,
                              const void* b, DType t, int64_t rows, int64_t cols, float eps, bool rms) {
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    layernorm_forward_impl<T>(s, static_cast<T*>(out), mean, rstd, static_cast<const T*>(x),
                              static_cast<const T*>(w), static_cast<const T*>(b), rows, cols, eps, rms));
}

void launch_add_layernorm_forward(cudaStream_t s, void* r, void* out, float* mean, float* rstd, const void* x,
                                  const void* branch, const void* w, const void* b, DType t, int64_t rows,
                                  int64_t cols, float eps, bool rms) {
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    layernorm_forward_impl<T>(s, static_cast<T*>(out), mean, rstd, static_cast<const T*>(x),
                              static_cast<const T*>(w), static_cast<const T*>(b), rows, cols, eps, rms,
                              static_cast<const T*>(branch), static_cast<T*>(r)));
}

void launch_layernorm_backward(cudaStream_t s, void* dx, void* dw, void* db, DType grad_t, const void* dout,
                               const void* x, const void* w, const float* mean, const float* rstd, DType t,
                               int64_t rows, int64_t cols, float* scratch, bool accumulate_params,
                               size_t block_shared_memory, const ColumnSumOutputs& sums, bool rms) {
  if (rows == 0 || cols == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    layernorm_backward_impl<T>(s, static_cast<T*>(dx), dw, db, grad_t, static_cast<const T*>(dout),
                               static_cast<const T*>(x), static_cast<const T*>(w), mean, rstd, rows, cols,
                               scratch, accumulate_params, block_shared_memory, sums, rms));
}

void launch_bias_backward(cudaStream_t s, void* db, DType grad_t, const void* dy, DType t, int64_t rows, int64_t cols,
                          float* scratch, bool accumulate, int64_t batch, int64_t db_stride) {
  if (rows == 0 || cols == 0) return;
  TRELLIS_CHECK(batch == 1 || batched_colsums_fit(rows, batch),
                "bias_backward: a batch of " + std::to_string(batch) + " blocks of " + std::to_string(rows) +
                    " rows is not one launch's (gpu_ops.cpp runs those one block at a time)");
  TRELLIS_FLOAT_SWITCH(t, T,
    bias_backward_impl<T>(s, db, grad_t, static_cast<const T*>(dy), rows, cols, scratch, accumulate, batch, db_stride));
}

void launch_qk_norm_forward(cudaStream_t s, void* out, float* rstd, const void* qkv, const void* wq, const void* wk,
                            DType t, int64_t rows, int64_t W, int hd, int heads, int q, float eps) {
  if (rows == 0) return;
  TRELLIS_CHECK(hd <= kMaxHeadDim, "qk_norm: head size " + std::to_string(hd) + " > " + std::to_string(kMaxHeadDim));
  const unsigned blocks = grid_for(rows * heads * 32);
  TRELLIS_FLOAT_SWITCH(t, T,
    qk_norm_forward_kernel<T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(out), rstd, static_cast<const T*>(qkv),
                                                          static_cast<const T*>(wq), static_cast<const T*>(wk), rows,
                                                          W, hd, heads, q, eps));
  CUDA_CHECK_LAUNCH();
}

void launch_qk_norm_backward(cudaStream_t s, void* dqkv, void* dwq, void* dwk, DType grad_t, const void* dout,
                             const void* qkv, const void* wq, const void* wk, const float* rstd, DType t, int64_t rows,
                             int64_t W, int hd, int heads, int q, float* scratch, bool accumulate_params) {
  if (rows == 0) return;
  TRELLIS_CHECK(hd <= kMaxHeadDim, "qk_norm: head size " + std::to_string(hd) + " > " + std::to_string(kMaxHeadDim));
  const int64_t chunks = qk_norm_chunks(rows), rpc = (rows + chunks - 1) / chunks;
  float *p_q = scratch, *p_k = scratch + chunks * hd;
  TRELLIS_FLOAT_SWITCH(t, T,
    qk_norm_backward_kernel<T><<<unsigned(chunks), kThreads, 0, s>>>(
        static_cast<T*>(dqkv), p_q, p_k, static_cast<const T*>(dout), static_cast<const T*>(qkv),
        static_cast<const T*>(wq), static_cast<const T*>(wk), rstd, rows, W, hd, heads, q, rpc));
  CUDA_CHECK_LAUNCH();
  FinalizeJobs jobs;
  jobs.out_t = grad_t;
  jobs.add(dwq, p_q, accumulate_params);
  jobs.add(dwk, p_k, accumulate_params);
  finalize_columns(s, jobs, chunks, hd);
}

void launch_sum(cudaStream_t s, float* out, const void* x, DType t, int64_t n, bool squares, float* scratch) {
  // A fixed grid (not sized by the GPU), so the summation order is the same everywhere.
  TRELLIS_FLOAT_SWITCH(t, T,
    sum_partials_kernel<T><<<kSumPartials, kThreads, 0, s>>>(scratch, static_cast<const T*>(x), n, squares, aligned16(x)));
  CUDA_CHECK_LAUNCH();
  sum_finalize_kernel<<<1, kSumPartials, 0, s>>>(out, scratch);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
