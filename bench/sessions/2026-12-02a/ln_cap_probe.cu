// Probe (eighteenth session): the layer-norm backward at GPT-2 1.3B's shape (16384 x 2048 bf16)
// as the step runs it, right after a large GEMM, with the GPU at its power cap. In the step the op
// took ~112 us a call against 81 (99 with the dx sums) back to back at full clock: its chain of
// work per row slows with the SM clock. Each variant (kernel + column finalize) is timed between
// two events right after a 16384 x 8192 x 2048 GEMM (the "heater"), variants in turn, rounds
// interleaved; also back to back without the heater, for contrast.
// Build (repository root): nvcc -O3 -std=c++17 -arch=sm_90 -I. ln_cap_probe.cu core/dtype.cpp -lcublas
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/norm.cu"

namespace trellis {
void fatal(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what.c_str());
  std::abort();
}
}  // namespace trellis
namespace trellis::gpu {
void launch_add(cudaStream_t, void*, const void*, const void*, DType, int64_t) { TRELLIS_FATAL("probe: no launch_add"); }
}  // namespace trellis::gpu

using namespace trellis;
using namespace trellis::gpu;
using bf16 = __nv_bfloat16;

namespace probe {

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

struct Buffers {
  bf16 *dx, *dout, *x, *w;
  float *mean, *rstd, *scratch;
  bf16 *dw, *db, *sb, *sa;
  int64_t rows;
  int cols;
};

struct Variant {
  std::string name;
  std::function<void(cudaStream_t)> run;
  std::vector<float> capped, alone;
};

template <int ITERS, int STAGES, bool SUMS>
Variant fused(const Buffers& b, int64_t chunks) {
  const int threads = fused_threads(b.cols / 8, ITERS);
  const size_t bytes = fused_ring_bytes(STAGES, ITERS, threads);
  auto kernel = layernorm_backward_fused_kernel<bf16, ITERS, STAGES, SUMS>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
  char name[128];
  std::snprintf(name, sizeof name, "%s threads %3d x%d stages %d chunks %4lld (%d/SM)", SUMS ? "sums" : "plain",
                threads, ITERS, STAGES, (long long)chunks, per_sm);
  Variant v;
  v.name = name;
  v.run = [=](cudaStream_t s) {
    const int64_t rpc = (b.rows + chunks - 1) / chunks;
    float* p_db = b.scratch;
    float* p_dw = b.scratch + chunks * b.cols;
    float* p_before = SUMS ? b.scratch + 2 * chunks * b.cols : nullptr;
    float* p_after = SUMS ? b.scratch + 3 * chunks * b.cols : nullptr;
    kernel<<<unsigned(chunks), threads, bytes, s>>>(b.dx, p_dw, p_db, p_before, p_after, b.dout, b.x, b.w, b.mean,
                                                     b.rstd, b.rows, b.cols, rpc);
    CUDA_CHECK_LAUNCH();
    FinalizeJobs jobs;
    jobs.out_t = DType::bf16;
    jobs.add(b.dw, p_dw, false);
    jobs.add(b.db, p_db, false);
    if (SUMS) {
      jobs.add(b.sb, p_before, false);
      jobs.add(b.sa, p_after, false);
    }
    finalize_columns(s, jobs, chunks, b.cols);
  };
  return v;
}

}  // namespace probe

using namespace probe;

int main() {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  int smem_optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  Buffers b;
  b.rows = 16384;
  b.cols = 2048;
  const int64_t n = b.rows * b.cols;
  b.dx = dev<bf16>(n), b.dout = dev<bf16>(n), b.x = dev<bf16>(n), b.w = dev<bf16>(b.cols);
  b.dw = dev<bf16>(b.cols), b.db = dev<bf16>(b.cols), b.sb = dev<bf16>(b.cols), b.sa = dev<bf16>(b.cols);
  b.mean = dev<float>(b.rows), b.rstd = dev<float>(b.rows);
  b.scratch = dev<float>(int64_t(4) * 2048 * b.cols);
  bf16* y = dev<bf16>(n);
  fill_kernel<<<1024, 256, 0, s>>>(b.x, n, 1, 4.0f, 0.1f);
  fill_kernel<<<1024, 256, 0, s>>>(b.dout, n, 2, 0.02f, 0.0f);
  fill_kernel<<<1024, 256, 0, s>>>(b.dx, n, 3, 0.02f, 0.0f);
  fill_kernel<<<64, 256, 0, s>>>(b.w, b.cols, 5, 0.2f, 1.0f);
  launch_layernorm_forward(s, y, b.mean, b.rstd, b.x, b.w, b.w, DType::bf16, b.rows, b.cols, 1e-5f);

  // The heater: the 1.3B fc GEMM's shape, bf16 in and out, f32 accumulation.
  const int M = 8192, N = 16384, K = 2048;
  bf16 *ga = dev<bf16>(int64_t(M) * K), *gb = dev<bf16>(int64_t(K) * N), *gc = dev<bf16>(int64_t(M) * N);
  fill_kernel<<<1024, 256, 0, s>>>(ga, int64_t(M) * K, 7, 0.1f, 0.0f);
  fill_kernel<<<1024, 256, 0, s>>>(gb, int64_t(K) * N, 8, 0.1f, 0.0f);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.0f, zero = 0.0f;
  auto heater = [&] {
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, ga, CUDA_R_16BF, M, gb, CUDA_R_16BF, K, &zero, gc,
                     CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmEx failed\n");
      std::exit(1);
    }
  };

  std::vector<Variant> vs;
  Variant op_plain, op_sums;
  op_plain.name = "op as built, plain";
  op_plain.run = [&](cudaStream_t st) {
    launch_layernorm_backward(st, b.dx, b.dw, b.db, DType::bf16, b.dout, b.x, b.w, b.mean, b.rstd, DType::bf16, b.rows,
                              b.cols, b.scratch, false, size_t(smem_optin));
  };
  op_sums.name = "op as built, with the dx sums";
  op_sums.run = [&](cudaStream_t st) {
    ColumnSumOutputs sums;
    sums.before = b.sb;
    sums.after = b.sa;
    launch_layernorm_backward(st, b.dx, b.dw, b.db, DType::bf16, b.dout, b.x, b.w, b.mean, b.rstd, DType::bf16, b.rows,
                              b.cols, b.scratch, false, size_t(smem_optin), sums);
  };
  vs.push_back(op_plain);
  vs.push_back(op_sums);
  for (int64_t c : {256, 264, 396, 512, 528, 1024}) {
    vs.push_back(fused<2, 3, false>(b, c));
    vs.push_back(fused<2, 4, false>(b, c));
    vs.push_back(fused<2, 6, false>(b, c));
  }
  for (int64_t c : {512, 1024, 2048}) {
    vs.push_back(fused<1, 3, false>(b, c));
    vs.push_back(fused<1, 4, false>(b, c));
  }
  for (int64_t c : {256, 264, 396, 512, 528}) {
    vs.push_back(fused<2, 3, true>(b, c));
    vs.push_back(fused<2, 4, true>(b, c));
  }
  // Call 2: the other memory-bound ops of the norm file at the cap (bias gradients over chunk
  // counts, the layer-norm forward, the sum of squares).
  bf16* wide = dev<bf16>(b.rows * 8192);
  fill_kernel<<<1024, 256, 0, s>>>(wide, b.rows * 8192, 9, 0.02f, 0.0f);
  for (int cols : {6144, 8192}) {
    for (int64_t chunks : {32, 64, 128, 256}) {
      Variant v;
      char name[128];
      std::snprintf(name, sizeof name, "bias grad 16384 x %d, chunks %lld", cols, (long long)chunks);
      v.name = name;
      v.run = [=](cudaStream_t st) {
        launch_column_partials<bf16>(st, b.scratch, nullptr, wide, static_cast<const bf16*>(nullptr), nullptr, nullptr,
                                     b.rows, cols, chunks, b.rows / chunks);
        FinalizeJobs jobs;
        jobs.out_t = DType::bf16;
        jobs.add(b.sb, b.scratch, false);
        finalize_columns(st, jobs, chunks, cols);
      };
      vs.push_back(v);
    }
  }
  {
    Variant v;
    v.name = "layer-norm forward op";
    v.run = [&](cudaStream_t st) {
      launch_layernorm_forward(st, y, b.mean, b.rstd, b.x, b.w, b.w, DType::bf16, b.rows, b.cols, 1e-5f);
    };
    vs.push_back(v);
    Variant q;
    q.name = "sum of squares, 16384 x 8192 bf16";
    q.run = [&](cudaStream_t st) { launch_sum(st, b.scratch, wide, DType::bf16, b.rows * 8192, true, b.scratch + 64); };
    vs.push_back(q);
  }

  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  // Warm to the cap: ~2 s of GEMMs.
  for (int i = 0; i < 2000; ++i) heater();
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (int pass = 0; pass < 3; ++pass) {
    for (int round = 0; round < 10; ++round) {
      for (auto& v : vs) {
        heater();
        CUDA_CHECK(cudaEventRecord(e0, s));
        v.run(s);
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        v.capped.push_back(ms * 1000);
      }
    }
  }
  // Back to back, after a pause, no heater: 5 rounds of 20, per-launch mean of each round.
  for (auto& v : vs) {
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int round = 0; round < 5; ++round) {
      CUDA_CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < 20; ++i) v.run(s);
      CUDA_CHECK(cudaEventRecord(e1, s));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      v.alone.push_back(ms * 1000 / 20);
    }
  }
  auto median = [](std::vector<float> a) {
    std::sort(a.begin(), a.end());
    return a[a.size() / 2];
  };
  auto pct = [](std::vector<float> a, double q) {
    std::sort(a.begin(), a.end());
    return a[size_t(q * (a.size() - 1))];
  };
  std::printf("%-52s %12s %8s %8s %12s\n", "variant (kernel + finalize)", "after GEMM", "p10", "p90", "back to back");
  for (auto& v : vs)
    std::printf("%-52s %9.1f us %8.1f %8.1f %9.1f us\n", v.name.c_str(), median(v.capped), pct(v.capped, 0.1),
                pct(v.capped, 0.9), median(v.alone));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
