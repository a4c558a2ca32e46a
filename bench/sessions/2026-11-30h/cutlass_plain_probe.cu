// One-off probe (session 2026-11-30h, issue 8): call 2 found CUTLASS's ping-pong kernel 9-17% faster
// than cuBLASLt for the GELU-fused GEMMs under sustained load. Is it for the plain GEMMs of a GPT-2
// 1.3B step too (in a step they run at ~673-711 TFLOP/s)? Row-major operands as Trellis stores them:
//   MODE 2: qkv forward   out (16384 x 6144) = x (16384 x 2048) w^T + bias, w (6144 x 2048)   bf16 out
//   MODE 3: fc dgrad      dx (16384 x 2048) = dh (16384 x 8192) w, w (8192 x 2048)           bf16 out
//   MODE 4: fc wgrad      dw (8192 x 2048) = dh^T x, dh (16384 x 8192), x (16384 x 2048)       f32 out
// SCHED 0: cooperative 128x256x64 cluster 2x1; SCHED 1: ping-pong 128x128x64 cluster 2x1.
// Times cuBLASLt (heuristic's first algorithm, as Trellis) and CUTLASS alternately, 20 runs a round,
// 6 rounds, and compares the outputs. Build:
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DMODE=2 -DSCHED=1 -I<cutlass>/include \
//        cutlass_plain_probe.cu -lcublasLt -o probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#define CK(x)                                                                           \
  do {                                                                                  \
    auto e_ = (x);                                                                      \
    if (int(e_) != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

using namespace cute;
using BF = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

#if SCHED == 0
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiSched = cutlass::epilogue::TmaWarpSpecializedCooperative;
using TileMNK = Shape<_128, _256, _64>;
#else
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiSched = cutlass::epilogue::TmaWarpSpecialized;
using TileMNK = Shape<_128, _128, _64>;
#endif
using ClusterMNK = Shape<_2, _1, _1>;

#if MODE == 2
constexpr int M = 16384, N = 6144, K = 2048;
using LayoutA = RowMajor;     // x (M, K)
using LayoutB = ColumnMajor;  // w stored (N, K)
using OutT = BF;
using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<BF, float, BF>;
#elif MODE == 3
constexpr int M = 16384, N = 2048, K = 8192;
using LayoutA = RowMajor;  // dh (M, K)
using LayoutB = RowMajor;  // w stored (K, N)
using OutT = BF;
using Fusion = cutlass::epilogue::fusion::LinearCombination<BF, float>;
#else
constexpr int M = 8192, N = 2048, K = 16384;
using LayoutA = ColumnMajor;  // dh stored (K, M): A = dh^T
using LayoutB = RowMajor;     // x stored (K, N)
using OutT = float;
using Fusion = cutlass::epilogue::fusion::LinearCombination<float, float>;
#endif
constexpr int kAlignD = 16 / sizeof(OutT);

using EpilogueOp = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileMNK, ClusterMNK,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, kAlignD, OutT, RowMajor, kAlignD,
    EpiSched, Fusion>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BF, LayoutA, 8, BF, LayoutB, 8, float, TileMNK, ClusterMNK,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename EpilogueOp::SharedStorage))>,
    MainSched>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, EpilogueOp>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

template <class S>
S packed(int rows, int cols) {
  S s{};
  if constexpr (cute::is_constant<1, decltype(get<1>(s))>::value) get<0>(s) = cols;
  else get<1>(s) = rows;
  get<2>(s) = int64_t(rows) * cols;
  return s;
}

__global__ void fill_random(__nv_bfloat16* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(scale * (float(h & 0xffffff) / float(1 << 23) - 1.0f));
  }
}

float host_value(const void* p, size_t i) {
  if constexpr (sizeof(OutT) == 4) return static_cast<const float*>(p)[i];
  else return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

int main() {
  const size_t a_n = size_t(M) * K, b_n = size_t(N) * K, d_n = size_t(M) * N;
  __nv_bfloat16 *a, *b, *bias;
  void *d_lt, *d_cu;
  CK(cudaMalloc(&a, a_n * 2));
  CK(cudaMalloc(&b, b_n * 2));
  CK(cudaMalloc(&bias, size_t(N) * 2));
  CK(cudaMalloc(&d_lt, d_n * sizeof(OutT)));
  CK(cudaMalloc(&d_cu, d_n * sizeof(OutT)));
  fill_random<<<1024, 256>>>(a, a_n, 1, 1.0f);
  fill_random<<<1024, 256>>>(b, b_n, 2, 0.05f);
  fill_random<<<1024, 256>>>(bias, N, 3, 0.5f);
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  // cuBLASLt as core/cuda/matmul.cpp: column-major D (N x M) = op(B_lt) op(A_lt), B_lt = b, A_lt = a.
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const bool trans_a = MODE == 4, trans_b = MODE == 2;  // Trellis's MatmulOptions
  const cublasOperation_t op_w = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_x = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_w, sizeof op_w));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_x, sizeof op_x));
  if (MODE == 2) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bt = CUDA_R_16BF;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  if (trans_b) CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
  else CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, N));
  if (trans_a) CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, M, K, M));
  else CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
  CK(cublasLtMatrixLayoutCreate(&ld, sizeof(OutT) == 4 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found));
  if (!found) { std::printf("no cuBLASLt algorithm\n"); return 1; }
  const float alpha = 1.0f, beta = 0.0f;
  auto run_lt = [&] {
    CK(cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d_lt, ld, d_lt, ld, &res.algo, ws, ws_bytes, s));
  };

  Gemm gemm;
  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {M, N, K, 1};
  args.mainloop.ptr_A = reinterpret_cast<const BF*>(a);
  args.mainloop.dA = packed<typename Kernel::StrideA>(M, K);
  args.mainloop.ptr_B = reinterpret_cast<const BF*>(b);
  args.mainloop.dB = packed<typename Kernel::StrideB>(N, K);
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = packed<typename Kernel::StrideC>(M, N);
  args.epilogue.ptr_D = static_cast<OutT*>(d_cu);
  args.epilogue.dD = packed<typename Kernel::StrideD>(M, N);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
#if MODE == 2
  args.epilogue.thread.bias_ptr = reinterpret_cast<const BF*>(bias);
#endif
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) { std::printf("CUTLASS: cannot implement\n"); return 1; }
  size_t cu_ws_bytes = Gemm::get_workspace_size(args);
  void* cu_ws = nullptr;
  if (cu_ws_bytes) CK(cudaMalloc(&cu_ws, cu_ws_bytes));
  CK(int(gemm.initialize(args, cu_ws, s)));
  auto run_cu = [&] { CK(int(gemm.run(s))); };

  run_lt();
  run_cu();
  CK(cudaStreamSynchronize(s));
  std::vector<OutT> hl(d_n), hc(d_n);
  CK(cudaMemcpy(hl.data(), d_lt, d_n * sizeof(OutT), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hc.data(), d_cu, d_n * sizeof(OutT), cudaMemcpyDeviceToHost));
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < d_n; ++i) {
    double l = host_value(hl.data(), i), c = host_value(hc.data(), i);
    max_abs = std::max(max_abs, std::fabs(l));
    max_diff = std::max(max_diff, std::fabs(l - c));
  }
  std::printf("MODE %d SCHED %d: output max |cuBLASLt| %.4f, max |diff| %.5f\n", MODE, SCHED, max_abs, max_diff);

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const double flops = 2.0 * M * double(N) * K;
  std::vector<double> t_lt, t_cu;
  for (int round = 0; round < 6; ++round) {
    for (int which = 0; which < 2; ++which) {
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < 20; ++i) which == 0 ? run_lt() : run_cu();
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      (which == 0 ? t_lt : t_cu).push_back(ms / 20);
    }
  }
  std::sort(t_lt.begin(), t_lt.end());
  std::sort(t_cu.begin(), t_cu.end());
  std::printf("MODE %d SCHED %d: cuBLASLt %.3f ms (%.0f TFLOP/s), CUTLASS %.3f ms (%.0f TFLOP/s); rounds lt %.3f-%.3f cu %.3f-%.3f\n",
              MODE, SCHED, t_lt[3], flops / t_lt[3] / 1e9, t_cu[3], flops / t_cu[3] / 1e9, t_lt.front(), t_lt.back(),
              t_cu.front(), t_cu.back());
  return 0;
}
