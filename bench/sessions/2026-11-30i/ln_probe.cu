// Probe (twelfth session): where GPT-2 1.3B's memory-bound kernels stand against the bandwidth.
// The layer-norm backward (16384 x 2048 bf16) as the op runs it, its fused kernel over a sweep of
// ring depth and chunk count, a form that takes R rows per block barrier, the bias-gradient column
// sums (16384 x 8192 and x 6144) over a sweep of chunk counts, the fused add + layer-norm forward,
// and plain streaming kernels moving the same bytes (what this access pattern can reach).
// (Call 4 also timed the bias sums finished inside their kernel, commit f4b35e4, since reverted: no
// faster than the second pass.)
// Build (repository root): nvcc -O3 -std=c++17 -arch=sm_90 -I. ln_probe.cu core/dtype.cpp -o ln_probe
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/cuda/norm.cu"

namespace trellis {
void fatal(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what.c_str());
  std::abort();
}
}  // namespace trellis

namespace trellis::gpu {

// elementwise.cu's, used only by the forward's unvectorized path, which the probe never takes.
void launch_add(cudaStream_t, void*, const void*, const void*, DType, int64_t) { TRELLIS_FATAL("probe: no launch_add"); }

// R rows per iteration: their row sums share one barrier, their shuffles interleave.
template <typename T, int STAGES, int R>
__global__ void __launch_bounds__(256) ln_bwd_rows_kernel(T* dx, float* p_dw, float* p_db, const T* dout, const T* x,
                                                          const T* w, const float* mean, const float* rstd,
                                                          int64_t rows, int cols, int64_t rows_per_chunk) {
  constexpr int N = Pack<T>::N;
  extern __shared__ int4 ring[];  // [STAGES][R][x, dout, dx][blockDim.x], then [STAGES][R][blockDim.x] stats
  __shared__ float2 sums[2][R][8];
  const int nvec = cols / N, nt = int(blockDim.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = nt >> 5;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float2* stats = reinterpret_cast<float2*>(ring + STAGES * R * 3 * nt);
  auto slot = [&](int stage, int q, int array) { return ring + ((stage * R + q) * 3 + array) * nt + threadIdx.x; };
  const bool on = int(threadIdx.x) < nvec;
  auto fetch = [&](int64_t r, int stage) {
#pragma unroll
    for (int q = 0; q < R; ++q) {
      if (r + q < r1 && on) {
        float2* st = stats + (stage * R + q) * nt + threadIdx.x;
        copy_async4(&st->x, mean + r + q);
        copy_async4(&st->y, rstd + r + q);
        const int64_t at = (r + q) * cols + threadIdx.x * N;
        copy_async16(slot(stage, q, 0), x + at);
        copy_async16(slot(stage, q, 1), dout + at);
        copy_async16(slot(stage, q, 2), dx + at);
      }
    }
    copy_async_commit();
  };
  float wf[N], aw[N], ab[N];
  {
    Pack<T> wv{};
    if (on) wv = ld16(w + threadIdx.x * N);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      wf[j] = on ? to_f32(wv.e[j]) : 0.0f;
      aw[j] = ab[j] = 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) fetch(r0 + int64_t(k) * R, k);
  const float inv_cols = 1.0f / float(cols);
  int it = 0;
  for (int64_t r = r0; r < r1; r += R, ++it) {
    const int stage = it % STAGES;
    fetch(r + int64_t(STAGES - 1) * R, (it + STAGES - 1) % STAGES);
    copy_async_wait<STAGES - 1>();
    float dy[R][N], xh[R][N], rs[R], sd[R], sdx[R];
#pragma unroll
    for (int q = 0; q < R; ++q) {
      Pack<T> xc{}, dc{};
      float2 st = make_float2(0.0f, 0.0f);
      if (on && r + q < r1) {
        st = stats[(stage * R + q) * nt + threadIdx.x];
        *reinterpret_cast<int4*>(xc.e) = *slot(stage, q, 0);
        *reinterpret_cast<int4*>(dc.e) = *slot(stage, q, 1);
      }
      rs[q] = st.y;
      sd[q] = sdx[q] = 0.0f;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        dy[q][j] = to_f32(dc.e[j]);
        xh[q][j] = (to_f32(xc.e[j]) - st.x) * st.y;
        const float dn = dy[q][j] * wf[j];
        sd[q] += dn;
        sdx[q] = fmaf(dn, xh[q][j], sdx[q]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int q = 0; q < R; ++q) {
        sd[q] += __shfl_xor_sync(0xffffffffu, sd[q], o);
        sdx[q] += __shfl_xor_sync(0xffffffffu, sdx[q], o);
      }
    }
    const int parity = it & 1;
    if (lane == 0) {
#pragma unroll
      for (int q = 0; q < R; ++q) sums[parity][q][warp] = make_float2(sd[q], sdx[q]);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < R; ++q) {
      float2 tot = sums[parity][q][0];
      for (int k = 1; k < nwarps; ++k) {
        tot.x += sums[parity][q][k].x;
        tot.y += sums[parity][q][k].y;
      }
      const float mean_d = tot.x * inv_cols, mean_dx = tot.y * inv_cols;
      if (on && r + q < r1) {
        Pack<T> g;
        *reinterpret_cast<int4*>(g.e) = *slot(stage, q, 2);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float dn = dy[q][j] * wf[j];
          g.e[j] = from_f32<T>(to_f32(g.e[j]) + (dn - mean_d - xh[q][j] * mean_dx) * rs[q]);
          ab[j] += dy[q][j];
          aw[j] = fmaf(dy[q][j], xh[q][j], aw[j]);
        }
        st16(dx + (r + q) * cols + threadIdx.x * N, g);
      }
    }
  }
  copy_async_wait<0>();
  if (on) {
    const int64_t at = int64_t(blockIdx.x) * cols + threadIdx.x * N;
    store_float4s(p_db + at, ab);
    store_float4s(p_dw + at, aw);
  }
}

// out = a + b + c, 16-byte vectors, UNROLL vectors per thread in flight (grid-stride).
template <int UNROLL>
__global__ void stream3_kernel(int4* out, const int4* a, const int4* b, const int4* c, int64_t nvec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * UNROLL;
  for (int64_t i0 = int64_t(blockIdx.x) * blockDim.x * UNROLL + threadIdx.x; i0 < nvec; i0 += stride) {
    int4 va[UNROLL], vb[UNROLL], vc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t i = i0 + int64_t(u) * blockDim.x;
      if (i < nvec) { va[u] = a[i]; vb[u] = b[i]; vc[u] = c[i]; }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t i = i0 + int64_t(u) * blockDim.x;
      if (i < nvec) out[i] = make_int4(va[u].x ^ vb[u].x ^ vc[u].x, va[u].y ^ vb[u].y ^ vc[u].y,
                                       va[u].z ^ vb[u].z ^ vc[u].z, va[u].w ^ vb[u].w ^ vc[u].w);
    }
  }
}
// One read: per-thread xor of 16-byte vectors, one int per block out.
template <int UNROLL>
__global__ void read1_kernel(int* out, const int4* a, int64_t nvec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * UNROLL;
  int acc = 0;
  for (int64_t i0 = int64_t(blockIdx.x) * blockDim.x * UNROLL + threadIdx.x; i0 < nvec; i0 += stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t i = i0 + int64_t(u) * blockDim.x;
      v[u] = i < nvec ? a[i] : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678) out[blockIdx.x] = acc;
}

}  // namespace trellis::gpu

using namespace trellis;
using namespace trellis::gpu;
using bf16 = __nv_bfloat16;

namespace probe {

cudaStream_t g_stream;

// Median over 5 rounds of 20 back-to-back launches, microseconds per launch.
double time_us(const std::function<void()>& f) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    CUDA_CHECK(cudaEventRecord(a, g_stream));
    for (int i = 0; i < 20; ++i) f();
    CUDA_CHECK(cudaEventRecord(b, g_stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    rounds.push_back(ms * 1000.0 / 20);
  }
  std::sort(rounds.begin(), rounds.end());
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return rounds[2];
}

void report(const char* what, double us, double mbytes) {
  std::printf("%-58s %8.1f us  %6.2f TB/s\n", what, us, mbytes / us);  // MB per microsecond = TB/s
}

__global__ void fill_kernel(bf16* p, int64_t n, uint32_t seed, float scale, float offset) {
  TRELLIS_GRID_STRIDE(i, n) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    p[i] = __float2bfloat16(offset + scale * (float(h & 0xffff) / 65536.0f - 0.5f));
  }
}

template <typename P>
P* dev(int64_t n) {
  P* p;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(P)));
  return p;
}

template <int STAGES, int ITERS>
void sweep_fused(bf16* dx, float* scratch, const bf16* dout, const bf16* x, const bf16* w, const float* mean,
                 const float* rstd, int64_t rows, int cols, double mb) {
  for (int64_t chunks : {256, 512, 1024, 2048}) {
    const int nvec = cols / 8, threads = ((nvec + ITERS - 1) / ITERS + 31) / 32 * 32;
    const int64_t rpc = (rows + chunks - 1) / chunks;
    const size_t bytes = fused_ring_bytes(STAGES, ITERS, threads);
    auto kernel = layernorm_backward_fused_kernel<bf16, ITERS, STAGES, false>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
    double us = time_us([&] {
      kernel<<<unsigned(chunks), threads, bytes, g_stream>>>(dx, scratch + chunks * cols, scratch, nullptr, nullptr,
                                                             dout, x, w, mean, rstd, rows, cols, rpc);
      CUDA_CHECK_LAUNCH();
    });
    char what[128];
    std::snprintf(what, sizeof what, "ln bwd fused kernel ITERS %d STAGES %d chunks %4lld (%d/SM)", ITERS, STAGES,
                  (long long)chunks, per_sm);
    report(what, us, mb);
  }
}

template <int STAGES, int R>
void sweep_rows(bf16* dx, float* scratch, const bf16* dout, const bf16* x, const bf16* w, const float* mean,
                const float* rstd, int64_t rows, int cols, double mb) {
  for (int64_t chunks : {256, 512, 1024}) {
    const int threads = cols / 8;
    const int64_t rpc = (rows + chunks - 1) / chunks;
    const size_t bytes = size_t(STAGES) * R * threads * (3 * sizeof(int4) + sizeof(float2));
    auto kernel = ln_bwd_rows_kernel<bf16, STAGES, R>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
    double us = time_us([&] {
      kernel<<<unsigned(chunks), threads, bytes, g_stream>>>(dx, scratch + chunks * cols, scratch, dout, x, w, mean,
                                                             rstd, rows, cols, rpc);
      CUDA_CHECK_LAUNCH();
    });
    char what[128];
    std::snprintf(what, sizeof what, "ln bwd R-rows kernel R %d STAGES %d chunks %4lld (%d/SM)", R, STAGES,
                  (long long)chunks, per_sm);
    report(what, us, mb);
  }
}

}  // namespace probe

using namespace probe;

int main() {
  CUDA_CHECK(cudaStreamCreate(&g_stream));
  int smem_optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  const size_t smem = size_t(smem_optin);
  const int64_t rows = 16384;
  const int cols = 2048;
  const int64_t n = rows * cols;
  bf16 *x = dev<bf16>(n), *dout = dev<bf16>(n), *dx = dev<bf16>(n), *dx_ref = dev<bf16>(n), *w = dev<bf16>(cols);
  bf16 *bsrc = dev<bf16>(rows * 8192), *rbuf = dev<bf16>(n), *obuf = dev<bf16>(n);
  float *mean = dev<float>(rows), *rstd = dev<float>(rows), *dw = dev<float>(8192), *db = dev<float>(8192);
  float *sb = dev<float>(8192), *sa = dev<float>(8192);
  float* scratch = dev<float>(int64_t(8) * 4096 * 8192);
  fill_kernel<<<1024, 256, 0, g_stream>>>(x, n, 1, 4.0f, 0.1f);
  fill_kernel<<<1024, 256, 0, g_stream>>>(dout, n, 2, 0.02f, 0.0f);
  fill_kernel<<<1024, 256, 0, g_stream>>>(dx, n, 3, 0.02f, 0.0f);
  fill_kernel<<<1024, 256, 0, g_stream>>>(bsrc, rows * 8192, 4, 0.02f, 0.0f);
  fill_kernel<<<64, 256, 0, g_stream>>>(w, cols, 5, 0.2f, 1.0f);
  // mean and rstd as the forward leaves them
  launch_layernorm_forward(g_stream, obuf, mean, rstd, x, w, w, DType::bf16, rows, cols, 1e-5f);
  CUDA_CHECK(cudaStreamSynchronize(g_stream));

  const double t = double(n) * 2 / 1e6;  // MB of one 16384 x 2048 bf16 tensor
  std::printf("16384 x 2048 bf16 = %.1f MB; layer-norm backward moves 4 of them (x, dout, dx in, dx out)\n", t);
  const int64_t nv = n * 2 / 16;
  for (int unroll : {1, 4}) {
    double us = time_us([&] {
      if (unroll == 1) stream3_kernel<1><<<132 * 16, 256, 0, g_stream>>>((int4*)rbuf, (int4*)x, (int4*)dout, (int4*)dx, nv);
      else stream3_kernel<4><<<132 * 4, 256, 0, g_stream>>>((int4*)rbuf, (int4*)x, (int4*)dout, (int4*)dx, nv);
      CUDA_CHECK_LAUNCH();
    });
    report(unroll == 1 ? "stream 3 reads + 1 write (unroll 1)" : "stream 3 reads + 1 write (unroll 4)", us, 4 * t);
  }
  {
    const int64_t nb = rows * 8192 * 2 / 16;
    double us = time_us([&] {
      read1_kernel<4><<<132 * 8, 256, 0, g_stream>>>((int*)sb, (int4*)bsrc, nb);
      CUDA_CHECK_LAUNCH();
    });
    report("stream 1 read, 16384 x 8192", us, 4 * t);
  }

  // The op as the model calls it (fused kernel + column finalize), without and with the dx sums.
  {
    double us = time_us([&] {
      launch_layernorm_backward(g_stream, dx, dw, db, dout, x, w, mean, rstd, DType::bf16, rows, cols, scratch, false, smem);
    });
    report("ln bwd op (fused + finalize), no sums", us, 4 * t);
    ColumnSumOutputs sums;
    sums.before = sb;
    sums.after = sa;
    us = time_us([&] {
      launch_layernorm_backward(g_stream, dx, dw, db, dout, x, w, mean, rstd, DType::bf16, rows, cols, scratch, false, smem,
                                sums);
    });
    report("ln bwd op (fused + finalize), with dx sums", us, 4 * t);
  }
  // Results: the R-rows kernel against the fused one (same dx in, compare dx out and partials).
  {
    const int64_t chunks = 512, rpc = rows / chunks;
    CUDA_CHECK(cudaMemcpyAsync(dx_ref, dx, n * 2, cudaMemcpyDeviceToDevice, g_stream));
    const size_t b1 = fused_ring_bytes(3, 1, 256);
    auto k1 = layernorm_backward_fused_kernel<bf16, 1, 3, false>;
    CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, int(b1)));
    k1<<<chunks, 256, b1, g_stream>>>(dx_ref, scratch + chunks * cols, scratch, nullptr, nullptr, dout, x, w, mean, rstd,
                                      rows, cols, rpc);
    CUDA_CHECK_LAUNCH();
    float* scratch2 = scratch + int64_t(4) * 4096 * 8192;
    CUDA_CHECK(cudaMemcpyAsync(rbuf, dx, n * 2, cudaMemcpyDeviceToDevice, g_stream));
    const size_t b2 = size_t(3) * 2 * 256 * (3 * sizeof(int4) + sizeof(float2));
    auto k2 = ln_bwd_rows_kernel<bf16, 3, 2>;
    CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, int(b2)));
    k2<<<chunks, 256, b2, g_stream>>>(rbuf, scratch2 + chunks * cols, scratch2, dout, x, w, mean, rstd, rows, cols, rpc);
    CUDA_CHECK_LAUNCH();
    std::vector<uint16_t> h1(n), h2(n);
    std::vector<float> p1(2 * chunks * cols), p2(2 * chunks * cols);
    CUDA_CHECK(cudaMemcpy(h1.data(), dx_ref, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h2.data(), rbuf, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(p1.data(), scratch, p1.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(p2.data(), scratch2, p2.size() * 4, cudaMemcpyDeviceToHost));
    int64_t ddx = 0, dp = 0;
    for (int64_t i = 0; i < n; ++i) ddx += h1[i] != h2[i];
    for (size_t i = 0; i < p1.size(); ++i) dp += p1[i] != p2[i];
    std::printf("R-rows (R 2) against fused: %lld of %lld dx differ, %lld of %zu partials differ\n", (long long)ddx,
                (long long)n, (long long)dp, p1.size());
  }
  sweep_fused<2, 1>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_fused<3, 1>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_fused<4, 1>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_fused<6, 1>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_fused<2, 2>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_fused<3, 2>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_rows<2, 2>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_rows<3, 2>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_rows<4, 2>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_rows<2, 4>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);
  sweep_rows<3, 4>(dx, scratch, dout, x, w, mean, rstd, rows, cols, 4 * t);

  // Bias gradients: the op, then its partials kernel over chunk counts.
  for (int bc : {6144, 8192}) {
    const double mb = double(rows) * bc * 2 / 1e6;
    char what[128];
    double us = time_us([&] { launch_bias_backward(g_stream, db, bsrc, DType::bf16, rows, bc, scratch, false); });
    std::snprintf(what, sizeof what, "bias bwd op 16384 x %d (partials + finalize)", bc);
    report(what, us, mb);
    for (int64_t chunks : {64, 128, 256, 512}) {
      us = time_us([&] {
        launch_column_partials<bf16>(g_stream, scratch, nullptr, bsrc, static_cast<const bf16*>(nullptr), nullptr,
                                     nullptr, rows, bc, chunks, rows / chunks);
      });
      std::snprintf(what, sizeof what, "bias partials kernel 16384 x %d, chunks %lld", bc, (long long)chunks);
      report(what, us, mb);
    }
  }
  // The forward: residual add + layer norm (x, branch in; r, out written).
  {
    double us = time_us([&] {
      launch_add_layernorm_forward(g_stream, rbuf, obuf, mean, rstd, x, dout, w, w, DType::bf16, rows, cols, 1e-5f);
    });
    report("add + layer-norm forward op", us, 4 * t);
    us = time_us([&] { launch_layernorm_forward(g_stream, obuf, mean, rstd, x, w, w, DType::bf16, rows, cols, 1e-5f); });
    report("layer-norm forward op", us, 2 * t);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
