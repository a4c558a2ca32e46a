// Fused causal attention in the FlashAttention-2 manner for bf16/f16, head_dim 64 or 128: q, k, v read
// straight from the (B, T, (H + 2 Hkv) hd) qkv rows (query head h on key-value head h / (H / Hkv)), tensor cores through mma.sync m16n8k16 (f32 accumulate) fed by
// ldmatrix, K/V (or Q/dO) tiles double-buffered in shared memory by cp.async, online softmax in f32
// registers. The backward recomputes P: one kernel per key block accumulates dK, dV over the query
// blocks (of every query head of its key-value head's group), another per query block accumulates dQ.
// No atomics, so the results are bitwise repeatable.
// Attention dropout (kDrop) multiplies each probability by its Philox factor (core/philox.h) after
// the row sums are taken, in forward and in both backward kernels. A sliding window (W) and document
// masking (starts) give each query a first key (first_key below); the kernels skip the key (query)
// blocks wholly before it and mask the blocks across it.
#include <cmath>

#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kFlashThreads = 128;  // 4 warps, each owning 16 rows of the block's row tile
constexpr int kPad = 8;             // elements of padding per shared-memory row: ldmatrix without bank conflicts
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ----
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The first key query t (< T) sees: none W or more before it (W = T: no window) and, with document
// masking, none before its document's start (starts: its sample's row of doc_starts, or null). It never
// decreases with t.
__device__ __forceinline__ int first_key(int t, int W, const int* starts) {
  const int f = max(0, t - W + 1);
  return starts ? max(f, starts[t]) : f;
}

template <typename E> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};

// ---- fragment addressing (lane = threadIdx.x % 32; tiles row-major in shared memory, LD elements a row) ----
// A operand (16 x 16) at (row0, col0): registers = rows lo/hi x cols lo/hi as mma wants them.
template <int LD, typename E> __device__ __forceinline__ const E* a_frag_addr(const E* s, int row0, int col0, int lane) {
  return s + (row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + col0 + (lane >> 4) * 8;
}
// B operand from a tile stored n-major (rows = n, cols = k; e.g. K for S = Q K^T): two n-tiles of 8
// (n0, n0 + 8) for k in [k0, k0 + 16). r[0], r[1] feed n-tile n0, r[2], r[3] n-tile n0 + 8.
template <int LD, typename E> __device__ __forceinline__ const E* b_frag_addr(const E* s, int n0, int k0, int lane) {
  return s + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8;
}
// B operand from a tile stored k-major (rows = k, cols = n; e.g. V for O = P V), read with .trans:
// k in [k0, k0 + 16), n-tiles n0 and n0 + 8 as above.
template <int LD, typename E> __device__ __forceinline__ const E* bt_frag_addr(const E* s, int k0, int n0, int lane) {
  return s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8;
}

// acc[NT][4] (+)= A(16 x 16*KS, from shared at row0) * B^T, B n-major in shared (NT*8 rows).
template <typename E, int LD, int KS, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const E* sA, int row0, const E* sB, int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, a_frag_addr<LD>(sA, row0, kk * 16, lane));
#pragma unroll
    for (int nn = 0; nn < NT / 2; ++nn) {
      uint32_t b[4];
      ldsm_x4(b, b_frag_addr<LD>(sB, nn * 16, kk * 16, lane));
      Mma<E>::run(acc[2 * nn], a, b[0], b[1]);
      Mma<E>::run(acc[2 * nn + 1], a, b[2], b[3]);
    }
  }
}

// acc[NT][4] += P(16 x 8*PT, accumulator layout in registers) * B, B k-major in shared (8*PT rows, NT*8 cols).
template <typename E, int LD, int PT, int NT>
__device__ __forceinline__ void mma_pb(float (&acc)[NT][4], const float (&p)[PT][4], const E* sB, int lane) {
#pragma unroll
  for (int kk = 0; kk < PT / 2; ++kk) {
    // The accumulators of two adjacent n-tiles are exactly the A fragment of one k-step.
    uint32_t a[4] = {Mma<E>::pack(p[2 * kk][0], p[2 * kk][1]), Mma<E>::pack(p[2 * kk][2], p[2 * kk][3]),
                     Mma<E>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                     Mma<E>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < NT / 2; ++dn) {
      uint32_t b[4];
      ldsm_x4_t(b, bt_frag_addr<LD>(sB, kk * 16, dn * 16, lane));
      Mma<E>::run(acc[2 * dn], a, b[0], b[1]);
      Mma<E>::run(acc[2 * dn + 1], a, b[2], b[3]);
    }
  }
}

// R rows x HD columns of one head from global rows [row0, row0 + R) (row stride `stride` elements)
// into shared (LD a row); rows >= T_ are zero-filled.
template <int R, int HD, int LD, typename E>
__device__ __forceinline__ void load_tile(E* s, const E* g, int64_t stride, int row0, int T_) {
  constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  static_assert(R * kChunks % kFlashThreads == 0, "tile loads must split evenly over the block");
#pragma unroll
  for (int i = 0; i < R * kChunks / kFlashThreads; ++i) {
    int c = i * kFlashThreads + threadIdx.x, r = c / kChunks, k = (c % kChunks) * 8, row = row0 + r;
    bool ok = row < T_;
    cp_async16(s + r * LD + k, g + int64_t(ok ? row : 0) * stride + k, ok);
  }
}

// Writes a warp's 16 x HD accumulator tile (rows row0 + g, row0 + g + 8) times `mul` to global.
template <typename E, int HD>
__device__ __forceinline__ void store_rows(E* g, int64_t stride, int row0, int T_, const float (&acc)[HD / 8][4],
                                           float mul0, float mul1, int lane) {
  int r = row0 + (lane >> 2), c = 2 * (lane & 3);
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    if (r < T_)
      *reinterpret_cast<uint32_t*>(g + int64_t(r) * stride + dt * 8 + c) =
          Mma<E>::pack(acc[dt][0] * mul0, acc[dt][1] * mul0);
    if (r + 8 < T_)
      *reinterpret_cast<uint32_t*>(g + int64_t(r + 8) * stride + dt * 8 + c) =
          Mma<E>::pack(acc[dt][2] * mul1, acc[dt][3] * mul1);
  }
}

// ---- forward: one block per (64-query block, b*H + h) ----
template <typename E, int HD, bool kDrop>
__global__ void __launch_bounds__(kFlashThreads) flash_fwd_kernel(E* __restrict__ out, float* __restrict__ lse,
                                                                  const E* __restrict__ qkv, int T_, int H, int Hkv,
                                                                  float sl2, AttentionDropoutKey drop, int W,
                                                                  const int* __restrict__ doc_starts) {
  constexpr int BM = 64, BN = 64, LD = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sK = sQ + BM * LD;      // 2 buffers of BN * LD
  E* sV = sK + 2 * BN * LD;  // 2 buffers of BN * LD
  const int m = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = H * HD, Ckv = Hkv * HD;
  const int64_t rs = int64_t(C) + 2 * Ckv;
  const E* q = qkv + int64_t(b) * T_ * rs + int64_t(h) * HD;
  const E* k = qkv + int64_t(b) * T_ * rs + C + int64_t(h / (H / Hkv)) * HD;
  const E* v = k + Ckv;
  const int q0 = m * BM;
  const int* starts = doc_starts ? doc_starts + int64_t(b) * T_ : nullptr;
  // Causal, BM == BN: key blocks j_begin..m, the last one masked, and those before the first key of
  // the block's last query (a window's or a document's edge).
  const int j_begin = first_key(q0, W, starts) / BN, n_tiles = m + 1 - j_begin;
  const int edge_end = first_key(min(q0 + BM, T_) - 1, W, starts);

  load_tile<BM, HD, LD>(sQ, q, rs, q0, T_);
  load_tile<BN, HD, LD>(sK, k, rs, j_begin * BN, T_);
  load_tile<BN, HD, LD>(sV, v, rs, j_begin * BN, T_);
  cp_async_commit();

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float mx[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (log2 units) and partial sums
  const int row_lo = q0 + warp * 16 + (lane >> 2);             // this thread's rows: row_lo, row_lo + 8
  // Their first keys (rows past T, never stored, take the last row's).
  const int first[2] = {first_key(min(row_lo, T_ - 1), W, starts), first_key(min(row_lo + 8, T_ - 1), W, starts)};

  for (int it = 0; it < n_tiles; ++it) {
    const int j = j_begin + it;
    if (it + 1 < n_tiles) {
      int nb = (it + 1) & 1;
      load_tile<BN, HD, LD>(sK + nb * BN * LD, k, rs, (j + 1) * BN, T_);
      load_tile<BN, HD, LD>(sV + nb * BN * LD, v, rs, (j + 1) * BN, T_);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const E* cK = sK + (it & 1) * BN * LD;
    const E* cV = sV + (it & 1) * BN * LD;

    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    mma_abt<E, LD, HD / 16, BN / 8>(s, sQ, warp * 16, cK, lane);

    if (j == m || j * BN < edge_end) {  // keys after the query, or before its first key, are out
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int key = j * BN + nt * 8 + 2 * (lane & 3) + (e & 1), row = row_lo + (e >> 1) * 8;
          if (key > row || key < first[e >> 1]) s[nt][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mr = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mr = fmaxf(mr, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 1));
      mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 2));
      float mnew = fmaxf(mx[r], mr * sl2);
      // -inf only while a row has seen no key (the blocks before its first key; every row sees its own in the
      // diagonal block): then the exponents are taken against 0, giving zeros, not NaN.
      const float mref = mnew == -INFINITY ? 0.0f : mnew;
      float alpha = exp2f(mx[r] - mref);
      mx[r] = mnew;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        s[nt][2 * r] = exp2f(fmaf(s[nt][2 * r], sl2, -mref));
        s[nt][2 * r + 1] = exp2f(fmaf(s[nt][2 * r + 1], sl2, -mref));
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }
    if constexpr (kDrop) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] *= attention_keep_scale(drop, b, h, row_lo + (e >> 1) * 8,
                                           j * BN + nt * 8 + 2 * (lane & 3) + (e & 1));
    }
    mma_pb<E, LD, BN / 8, HD / 8>(o, s, cV, lane);
    __syncthreads();  // this buffer is refilled two tiles on
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  store_rows<E, HD>(out + int64_t(b) * T_ * C + int64_t(h) * HD, C, q0 + warp * 16, T_, o, 1.0f / l[0],
                    1.0f / l[1], lane);
  if ((lane & 3) == 0) {
    float* L = lse + int64_t(blockIdx.y) * T_;
    if (row_lo < T_) L[row_lo] = (mx[0] + log2f(l[0])) * kLn2;
    if (row_lo + 8 < T_) L[row_lo + 8] = (mx[1] + log2f(l[1])) * kLn2;
  }
}

// ---- backward, dK and dV: one block per (64-key block, b*Hkv + g), query tiles of BM of the group's
// query heads, one head after the other ----
template <typename E, int HD, int BM, bool kDrop>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dkv_kernel(E* __restrict__ dqkv, const E* __restrict__ qkv,
                                                                      const E* __restrict__ dout,
                                                                      const float* __restrict__ lse,
                                                                      const float* __restrict__ Dsum, int T_, int H,
                                                                      int Hkv, float scale, float sl2,
                                                                      AttentionDropoutKey drop, int W,
                                                                      const int* __restrict__ doc_starts) {
  constexpr int BN = 64, LD = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem);
  E* sV = sK + BN * LD;
  E* sQ = sV + BN * LD;        // 2 buffers of BM * LD
  E* sdO = sQ + 2 * BM * LD;   // 2 buffers of BM * LD
  float* sL = reinterpret_cast<float*>(sdO + 2 * BM * LD);  // 2 x BM: lse * log2e (+inf past T)
  float* sD = sL + 2 * BM;                                  // 2 x BM: rowsum(dO * O) (0 past T)
  int* sF = reinterpret_cast<int*>(sD + 2 * BM);            // 2 x BM: each query's first key
  const int n = blockIdx.x;  // low key blocks see the most queries: launched first
  const int b = blockIdx.y / Hkv, g = blockIdx.y % Hkv, group = H / Hkv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = H * HD, Ckv = Hkv * HD;
  const int64_t rs = int64_t(C) + 2 * Ckv;
  const E* rows = qkv + int64_t(b) * T_ * rs;
  const E* k = rows + C + int64_t(g) * HD;
  const E* v = k + Ckv;
  const int k0 = n * BN, k_last = min(k0 + BN, T_) - 1;
  const int* starts = doc_starts ? doc_starts + int64_t(b) * T_ : nullptr;
  // The query tiles that see some key of the block: from the diagonal to the last query whose first
  // key is at most the block's last (first_key never decreases: a binary search).
  int q_lo = k_last, q_hi = T_ - 1;
  while (q_lo < q_hi) {
    const int mid = q_lo + (q_hi - q_lo + 1) / 2;
    if (first_key(mid, W, starts) <= k_last) q_lo = mid;
    else q_hi = mid - 1;
  }
  const int m_begin = k0 / BM, m_end = q_lo / BM + 1, tiles = m_end - m_begin;
  // Step `it` takes query tile m_begin + it % tiles of query head g * group + it / tiles.
  auto head_of = [&](int it) { return g * group + it / tiles; };
  auto tile_of = [&](int it) { return m_begin + it % tiles; };
  auto load_q_tile = [&](int it, int buf) {
    const int hq = head_of(it), mi = tile_of(it);
    const float* L = lse + (int64_t(b) * H + hq) * T_;
    const float* Dr = Dsum + (int64_t(b) * H + hq) * T_;
    load_tile<BM, HD, LD>(sQ + buf * BM * LD, rows + int64_t(hq) * HD, rs, mi * BM, T_);
    load_tile<BM, HD, LD>(sdO + buf * BM * LD, dout + int64_t(b) * T_ * C + int64_t(hq) * HD, C, mi * BM, T_);
    for (int i = threadIdx.x; i < BM; i += kFlashThreads) {
      int row = mi * BM + i;
      sL[buf * BM + i] = row < T_ ? L[row] * kLog2e : INFINITY;
      sD[buf * BM + i] = row < T_ ? Dr[row] : 0.0f;
      sF[buf * BM + i] = first_key(min(row, T_ - 1), W, starts);
    }
  };
  load_tile<BN, HD, LD>(sK, k, rs, k0, T_);
  load_tile<BN, HD, LD>(sV, v, rs, k0, T_);
  load_q_tile(0, 0);
  cp_async_commit();

  float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;
  const int key_lo = k0 + warp * 16 + (lane >> 2);  // this thread's keys: key_lo, key_lo + 8

  for (int it = 0; it < group * tiles; ++it) {
    const int buf = it & 1, mi = tile_of(it), h = head_of(it);
    if (it + 1 < group * tiles) {
      load_q_tile(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const E* cQ = sQ + buf * BM * LD;
    const E* cdO = sdO + buf * BM * LD;
    const float* cL = sL + buf * BM;
    const float* cD = sD + buf * BM;
    const int* cF = sF + buf * BM;

    float s[BM / 8][4], dp[BM / 8][4];  // S^T and dP^T: this warp's 16 keys x BM queries
#pragma unroll
    for (int i = 0; i < BM / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
    mma_abt<E, LD, HD / 16, BM / 8>(s, sK, warp * 16, cQ, lane);    // K Q^T
    mma_abt<E, LD, HD / 16, BM / 8>(dp, sV, warp * 16, cdO, lane);  // V dO^T

    // Some query of the tile precedes some key of the block, or its last query's first key follows one.
    const bool edge = mi * BM < k0 + BN - 1 || first_key(min(mi * BM + BM, T_) - 1, W, starts) > k0;
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int qi = nt * 8 + 2 * (lane & 3) + (e & 1), query = mi * BM + qi, key = key_lo + (e >> 1) * 8;
        float p = exp2f(fmaf(s[nt][e], sl2, -cL[qi]));
        if (edge && (query < key || key < cF[qi])) p = 0.0f;
        const float m = kDrop ? attention_keep_scale(drop, b, h, mi * BM + qi, key_lo + (e >> 1) * 8) : 1.0f;
        s[nt][e] = p * m;                            // dropped P^T, for dV
        dp[nt][e] = p * (m * dp[nt][e] - cD[qi]);  // dS^T (without the scale)
      }
    mma_pb<E, LD, BM / 8, HD / 8>(dv, s, cdO, lane);  // dV += P^T dO
    mma_pb<E, LD, BM / 8, HD / 8>(dk, dp, cQ, lane);  // dK += dS^T Q
    __syncthreads();  // this buffer is refilled two tiles on
  }

  E* dst = dqkv + int64_t(b) * T_ * rs + C + int64_t(g) * HD;
  store_rows<E, HD>(dst, rs, k0 + warp * 16, T_, dk, scale, scale, lane);
  store_rows<E, HD>(dst + Ckv, rs, k0 + warp * 16, T_, dv, 1.0f, 1.0f, lane);
}

// ---- backward, dQ: one block per (64-query block, b*H + h), key tiles of BN ----
template <typename E, int HD, int BN, bool kDrop>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dq_kernel(E* __restrict__ dqkv, const E* __restrict__ qkv,
                                                                     const E* __restrict__ dout,
                                                                     const float* __restrict__ lse,
                                                                     const float* __restrict__ Dsum, int T_, int H,
                                                                     int Hkv, float scale, float sl2,
                                                                     AttentionDropoutKey drop, int W,
                                                                     const int* __restrict__ doc_starts) {
  constexpr int BM = 64, LD = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sdO = sQ + BM * LD;
  E* sK = sdO + BM * LD;     // 2 buffers of BN * LD
  E* sV = sK + 2 * BN * LD;  // 2 buffers of BN * LD
  const int m = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = H * HD, Ckv = Hkv * HD;
  const int64_t rs = int64_t(C) + 2 * Ckv;
  const E* q = qkv + int64_t(b) * T_ * rs + int64_t(h) * HD;
  const E* k = qkv + int64_t(b) * T_ * rs + C + int64_t(h / (H / Hkv)) * HD;
  const E* v = k + Ckv;
  const E* dO = dout + int64_t(b) * T_ * C + int64_t(h) * HD;
  const int q0 = m * BM;
  const int q_last = min(T_, q0 + BM);  // exclusive
  const int* starts = doc_starts ? doc_starts + int64_t(b) * T_ : nullptr;
  // Key tiles j_begin .. j_end - 1: from the first key of the block's first query; those before the
  // first key of its last query cross the mask's left edge.
  const int j_begin = first_key(q0, W, starts) / BN, j_end = (q_last + BN - 1) / BN, n_tiles = j_end - j_begin;
  const int edge_end = first_key(q_last - 1, W, starts);

  load_tile<BM, HD, LD>(sQ, q, rs, q0, T_);
  load_tile<BM, HD, LD>(sdO, dO, C, q0, T_);
  load_tile<BN, HD, LD>(sK, k, rs, j_begin * BN, T_);
  load_tile<BN, HD, LD>(sV, v, rs, j_begin * BN, T_);
  cp_async_commit();

  const int row_lo = q0 + warp * 16 + (lane >> 2);
  float Lr[2], Dv[2];  // rows past T are never stored; any finite value will do
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int row = row_lo + 8 * r;
    Lr[r] = row < T_ ? lse[int64_t(blockIdx.y) * T_ + row] * kLog2e : 0.0f;
    Dv[r] = row < T_ ? Dsum[int64_t(blockIdx.y) * T_ + row] : 0.0f;
  }
  const int first[2] = {first_key(min(row_lo, T_ - 1), W, starts), first_key(min(row_lo + 8, T_ - 1), W, starts)};
  float dq[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    const int j = j_begin + it;
    if (it + 1 < n_tiles) {
      int nb = (it + 1) & 1;
      load_tile<BN, HD, LD>(sK + nb * BN * LD, k, rs, (j + 1) * BN, T_);
      load_tile<BN, HD, LD>(sV + nb * BN * LD, v, rs, (j + 1) * BN, T_);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const E* cK = sK + (it & 1) * BN * LD;
    const E* cV = sV + (it & 1) * BN * LD;

    float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
    mma_abt<E, LD, HD / 16, BN / 8>(s, sQ, warp * 16, cK, lane);    // Q K^T
    mma_abt<E, LD, HD / 16, BN / 8>(dp, sdO, warp * 16, cV, lane);  // dO V^T

    // Some key of the tile follows some query of the block, or precedes its last query's first key.
    const bool edge = j * BN + BN - 1 > q0 || j * BN < edge_end;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int r = e >> 1, key = j * BN + nt * 8 + 2 * (lane & 3) + (e & 1), row = row_lo + 8 * r;
        float p = exp2f(fmaf(s[nt][e], sl2, -Lr[r]));
        if (edge && (key > row || key < first[r])) p = 0.0f;
        const float mk = kDrop ? attention_keep_scale(drop, b, h, row_lo + 8 * r, key) : 1.0f;
        dp[nt][e] = p * (mk * dp[nt][e] - Dv[r]);  // dS (without the scale)
      }
    mma_pb<E, LD, BN / 8, HD / 8>(dq, dp, cK, lane);  // dQ += dS K
    __syncthreads();  // this buffer is refilled two tiles on
  }

  store_rows<E, HD>(dqkv + int64_t(b) * T_ * rs + int64_t(h) * HD, rs, q0 + warp * 16, T_, dq, scale, scale, lane);
}

// Kernels that want more than 48 KB of shared memory must say so first.
template <typename K> void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename E, int HD, bool kDrop>
void flash_forward(cudaStream_t s, void* out, float* lse, const void* qkv, int B, int T_, int H, int Hkv, float sl2,
                   const AttentionDropoutKey& drop, int W, const int* starts) {
  constexpr int BM = 64, BN = 64;
  size_t smem = size_t(BM + 4 * BN) * (HD + kPad) * sizeof(E);
  auto kernel = flash_fwd_kernel<E, HD, kDrop>;
  allow_smem(kernel, smem);
  dim3 grid((T_ + BM - 1) / BM, B * H);
  kernel<<<grid, kFlashThreads, smem, s>>>(static_cast<E*>(out), lse, static_cast<const E*>(qkv), T_, H, Hkv, sl2,
                                           drop, W, starts);
  CUDA_CHECK_LAUNCH();
}

template <typename E, int HD, bool kDrop>
void flash_backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const float* lse, const float* D,
                    int B, int T_, int H, int Hkv, float scale, float sl2, const AttentionDropoutKey& drop, int W,
                    const int* starts) {
  // Query tiles (dK/dV) and key tiles (dQ) of 32 rows at head_dim 128 keep the accumulators in registers.
  constexpr int BT = HD <= 64 ? 64 : 32, BN = 64, BM = 64, LD = HD + kPad;
  size_t smem_kv = size_t(2 * BN + 4 * BT) * LD * sizeof(E) + 4 * BT * sizeof(float) + 2 * BT * sizeof(int);
  auto kv = flash_bwd_dkv_kernel<E, HD, BT, kDrop>;
  allow_smem(kv, smem_kv);
  kv<<<dim3((T_ + BN - 1) / BN, B * Hkv), kFlashThreads, smem_kv, s>>>(
      static_cast<E*>(dqkv), static_cast<const E*>(qkv), static_cast<const E*>(dout), lse, D, T_, H, Hkv, scale, sl2,
      drop, W, starts);
  CUDA_CHECK_LAUNCH();
  size_t smem_q = size_t(2 * BM + 4 * BT) * LD * sizeof(E);
  auto dq = flash_bwd_dq_kernel<E, HD, BT, kDrop>;
  allow_smem(dq, smem_q);
  dq<<<dim3((T_ + BM - 1) / BM, B * H), kFlashThreads, smem_q, s>>>(
      static_cast<E*>(dqkv), static_cast<const E*>(qkv), static_cast<const E*>(dout), lse, D, T_, H, Hkv, scale, sl2,
      drop, W, starts);
  CUDA_CHECK_LAUNCH();
}

#define TRELLIS_FLASH_SWITCH(dtype, hd, ...)                                                         \
  do {                                                                                               \
    if (dtype == DType::bf16 && hd == 64) { using E = __nv_bfloat16; constexpr int HD = 64; __VA_ARGS__; } \
    else if (dtype == DType::bf16 && hd == 128) { using E = __nv_bfloat16; constexpr int HD = 128; __VA_ARGS__; } \
    else if (dtype == DType::f16 && hd == 64) { using E = __half; constexpr int HD = 64; __VA_ARGS__; } \
    else if (dtype == DType::f16 && hd == 128) { using E = __half; constexpr int HD = 128; __VA_ARGS__; } \
    else TRELLIS_FATAL("flash attention: unsupported dtype/head_dim");                              \
  } while (0)

}  // namespace

bool flash_attention_supported(DType t, int64_t hd) {
  return (t == DType::bf16 || t == DType::f16) && (hd == 64 || hd == 128);
}

// The kernels' window: keys less than W before the query (T_: every earlier key).
static int window_of(int64_t window, int64_t T_) { return int(window > 0 && window < T_ ? window : T_); }

void launch_flash_attention_forward(cudaStream_t s, void* out, float* lse, const void* qkv, DType t, int64_t B,
                                    int64_t T_, int64_t H, int64_t Hkv, int64_t hd, const AttentionDropoutKey& drop,
                                    const AttentionMask& mask) {
  if (B * T_ * H == 0) return;
  float sl2 = float(kLog2e / std::sqrt(double(hd)));
  const int W = window_of(mask.window, T_);
  if (drop.threshold != 0)
    TRELLIS_FLASH_SWITCH(t, hd, flash_forward<E, HD, true>(s, out, lse, qkv, int(B), int(T_), int(H), int(Hkv), sl2,
                                                           drop, W, mask.doc_starts));
  else
    TRELLIS_FLASH_SWITCH(t, hd, flash_forward<E, HD, false>(s, out, lse, qkv, int(B), int(T_), int(H), int(Hkv), sl2,
                                                            drop, W, mask.doc_starts));
}

void launch_flash_attention_backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const float* lse,
                                     const float* D, DType t, int64_t B, int64_t T_, int64_t H, int64_t Hkv, int64_t hd,
                                     const AttentionDropoutKey& drop, const AttentionMask& mask) {
  if (B * T_ * H == 0) return;
  float scale = float(1.0 / std::sqrt(double(hd)));
  float sl2 = float(kLog2e / std::sqrt(double(hd)));
  const int W = window_of(mask.window, T_);
  if (drop.threshold != 0)
    TRELLIS_FLASH_SWITCH(t, hd, flash_backward<E, HD, true>(s, dqkv, dout, qkv, lse, D, int(B), int(T_), int(H),
                                                            int(Hkv), scale, sl2, drop, W, mask.doc_starts));
  else
    TRELLIS_FLASH_SWITCH(t, hd, flash_backward<E, HD, false>(s, dqkv, dout, qkv, lse, D, int(B), int(T_), int(H),
                                                             int(Hkv), scale, sl2, drop, W, mask.doc_starts));
}

}  // namespace trellis::gpu
