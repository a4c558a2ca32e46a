// One-off probe (session 2026-11-30h, issue 8): can a CUTLASS 3 (Hopper, TMA warp-specialized) GEMM
// with the GELU fused in its epilogue beat cuBLASLt's GELU_AUX_BIAS / DGELU GEMMs, which run at ~600
// TFLOP/s in a GPT-2 1.3B step where plain GEMMs of the same size reach ~705? Shapes of the MLP at
// micro-batch 16: M = 16384 token rows, d_model 2048, hidden 8192, bf16 in and out, f32 accumulate.
//   MODE 0 (forward):  h = x W1^T + b1 (stored, the aux), g = gelu_tanh(h)   [x: M x 2048, W1: 8192 x 2048]
//   MODE 1 (backward): dh = (dy W2) * gelu'(h)                              [dy: M x 2048, W2: 2048 x 8192]
// SCHED: the kernel schedule, tile and cluster (call2.sh lists them).
// Times cuBLASLt's fused GEMM and the CUTLASS one alternately (20 back-to-back runs a round, 6 rounds)
// and compares their outputs. Build (one binary per MODE/SCHED):
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DMODE=0 -DSCHED=0 -I<cutlass>/include \
//        cutlass_gelu_probe.cu -lcublasLt -o probe_00
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
#include "cutlass/epilogue/thread/activation.h"
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

#if SCHED == 0 || SCHED == 2
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiSched = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiSched = cutlass::epilogue::TmaWarpSpecialized;
#endif
#if SCHED == 0
using TileMNK = Shape<_128, _256, _64>;
using ClusterMNK = Shape<_2, _1, _1>;
#elif SCHED == 1
using TileMNK = Shape<_128, _128, _64>;
using ClusterMNK = Shape<_2, _1, _1>;
#elif SCHED == 2
using TileMNK = Shape<_256, _128, _64>;
using ClusterMNK = Shape<_1, _2, _1>;
#else
using TileMNK = Shape<_64, _256, _64>;
using ClusterMNK = Shape<_1, _2, _1>;
#endif

using LayoutA = cutlass::layout::RowMajor;  // x or dy: M x K, K contiguous
#if MODE == 0
using LayoutB = cutlass::layout::ColumnMajor;  // W1 stored N x K row-major: B (K x N) K-major
using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltActAux<cutlass::layout::RowMajor,
    cutlass::epilogue::thread::GELU_taylor, BF, float, BF, BF>;
#else
using LayoutB = cutlass::layout::RowMajor;  // W2 stored K x N row-major: B N-major
using Fusion = cutlass::epilogue::fusion::LinCombDeEltAct<cutlass::layout::RowMajor,
    cutlass::epilogue::thread::dGELU, BF, float, BF>;
#endif
using LayoutD = cutlass::layout::RowMajor;

using EpilogueOp = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileMNK, ClusterMNK,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, 8, BF, LayoutD, 8, EpiSched,
    Fusion>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BF, LayoutA, 8, BF, LayoutB, 8, float, TileMNK, ClusterMNK,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename EpilogueOp::SharedStorage))>,
    MainSched>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, EpilogueOp>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

// Packed strides for a (rows, cols, 1) operand of stride type S (the one unit mode is the contiguous one).
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

int main() {
  const int M = 16384, N = 8192, K = 2048;
  const size_t a_n = size_t(M) * K, b_n = size_t(N) * K, d_n = size_t(M) * N;
  __nv_bfloat16 *a, *b, *bias, *aux, *d_lt, *d_cu, *aux_cu;
  CK(cudaMalloc(&a, a_n * 2));
  CK(cudaMalloc(&b, b_n * 2));
  CK(cudaMalloc(&bias, size_t(N) * 2));
  CK(cudaMalloc(&aux, d_n * 2));
  CK(cudaMalloc(&aux_cu, d_n * 2));
  CK(cudaMalloc(&d_lt, d_n * 2));
  CK(cudaMalloc(&d_cu, d_n * 2));
  fill_random<<<1024, 256>>>(a, a_n, 1, 1.0f);
  fill_random<<<1024, 256>>>(b, b_n, 2, 0.05f);
  fill_random<<<1024, 256>>>(bias, N, 3, 0.5f);
  fill_random<<<1024, 256>>>(aux, d_n, 4, 3.0f);  // the backward's pre-activation
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  // ---- cuBLASLt, as core/cuda/matmul.cpp sets it up: column-major D (N x M) ----
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = MODE == 0 ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epi = MODE == 0 ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_DGELU;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  void* lt_aux = MODE == 0 ? static_cast<void*>(aux) : static_cast<void*>(aux);
  const int64_t aux_ld = N;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &lt_aux, sizeof lt_aux));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  if (MODE == 0) {
    const cudaDataType_t bt = CUDA_R_16BF;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  if (MODE == 0) CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));  // W1 (N x K row-major), op T
  else CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, N));            // W2 (K x N row-major), op N
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));                 // x or dy, op N
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, M, N));
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

  // ---- CUTLASS ----
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
  args.epilogue.ptr_D = reinterpret_cast<BF*>(d_cu);
  args.epilogue.dD = packed<typename Kernel::StrideD>(M, N);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
#if MODE == 0
  args.epilogue.thread.bias_ptr = reinterpret_cast<const BF*>(bias);
  args.epilogue.thread.aux_ptr = reinterpret_cast<BF*>(aux_cu);
#else
  args.epilogue.thread.aux_ptr = reinterpret_cast<const BF*>(aux);
#endif
  args.epilogue.thread.dAux = packed<typename Kernel::StrideD>(M, N);
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) { std::printf("CUTLASS: cannot implement\n"); return 1; }
  size_t cu_ws_bytes = Gemm::get_workspace_size(args);
  void* cu_ws = nullptr;
  if (cu_ws_bytes) CK(cudaMalloc(&cu_ws, cu_ws_bytes));
  CK(int(gemm.initialize(args, cu_ws, s)));
  auto run_cu = [&] { CK(int(gemm.run(s))); };

  // ---- compare ----
  run_lt();
  run_cu();
  CK(cudaStreamSynchronize(s));
  std::vector<__nv_bfloat16> hl(d_n), hc(d_n);
  CK(cudaMemcpy(hl.data(), d_lt, d_n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hc.data(), d_cu, d_n * 2, cudaMemcpyDeviceToHost));
  double max_abs = 0, max_diff = 0, sum_diff = 0;
  for (size_t i = 0; i < d_n; ++i) {
    double l = __bfloat162float(hl[i]), c = __bfloat162float(hc[i]);
    max_abs = std::max(max_abs, std::fabs(l));
    max_diff = std::max(max_diff, std::fabs(l - c));
    sum_diff += std::fabs(l - c);
  }
  std::printf("MODE %d SCHED %d: output max |cuBLASLt| %.4f, max |diff| %.5f, mean |diff| %.2e", MODE, SCHED, max_abs,
              max_diff, sum_diff / double(d_n));
  if (MODE == 0) {
    CK(cudaMemcpy(hl.data(), aux, d_n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc.data(), aux_cu, d_n * 2, cudaMemcpyDeviceToHost));
    double ad = 0;
    for (size_t i = 0; i < d_n; ++i) ad = std::max(ad, double(std::fabs(__bfloat162float(hl[i]) - __bfloat162float(hc[i]))));
    std::printf(", aux max |diff| %.5f", ad);
  }
  std::printf("\n");

  // ---- time: alternate rounds of 20 back-to-back runs ----
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
