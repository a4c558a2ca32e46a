// CUTLASS 3 kernels for the MLP's GELU-fused GEMMs on Hopper (see cutlass_gelu_gemm.h). Compiled for
// sm_90a only (wgmma, TMA), with NDEBUG: CUTLASS's device asserts are calls that serialize the wgmma
// pipeline. Ping-pong, 128x128x64, cluster 2x1 was the fastest of four schedules probed (session
// 2026-11-30h call 2: forward 0.82 ms against cuBLASLt's 0.99, backward 0.85 against 0.93, sustained).
#include <atomic>
#include <string>
#include <type_traits>

#include "core/cuda/cutlass_gelu_gemm.h"
#include "core/cuda/gpu_check.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace trellis::gpu {

namespace {

using namespace cute;
using RowMajor = cutlass::layout::RowMajor;

std::atomic<uint64_t> launches{0};

// A (M, K) row-major; B is w: forward (N, K) row-major (K-major), backward (K, N) row-major.
template <class T, bool kForward>
struct GeluGemm {
  using LayoutB = std::conditional_t<kForward, cutlass::layout::ColumnMajor, RowMajor>;
  using Fusion = std::conditional_t<
      kForward,
      cutlass::epilogue::fusion::LinCombPerColBiasEltActAux<RowMajor, cutlass::epilogue::thread::GELU_taylor, T,
                                                            float, T, T>,
      cutlass::epilogue::fusion::LinCombDeEltAct<RowMajor, cutlass::epilogue::thread::dGELU, T, float, T>>;
  using TileMNK = Shape<_128, _128, _64>;
  using ClusterMNK = Shape<_2, _1, _1>;
  static constexpr int kAlign = 16 / sizeof(T);
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileMNK, ClusterMNK,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, kAlign, T, RowMajor, kAlign,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, RowMajor, kAlign, T, LayoutB, kAlign, float, TileMNK,
      ClusterMNK,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// Packed strides of a (rows, cols) operand of stride type S (its unit mode is the contiguous one).
template <class S>
S packed(int64_t rows, int64_t cols) {
  S s{};
  if constexpr (cute::is_constant<1, decltype(get<1>(s))>::value) get<0>(s) = cols;
  else get<1>(s) = rows;
  get<2>(s) = rows * cols;
  return s;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void check(cutlass::Status s, const char* what) {
  if (s != cutlass::Status::kSuccess)
    TRELLIS_FATAL(std::string("CUTLASS GELU GEMM: ") + what + ": " + cutlass::cutlassGetStatusString(s));
}

template <class T, bool kForward>
bool run(const CutlassGemmArgs& g) {
  // TMA needs 16-byte aligned bases and row strides; the problem shape is int.
  const int64_t limit = int64_t(1) << 30;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.m > limit || g.n > limit || g.k > limit) return false;
  if (g.n % 8 != 0 || g.k % 8 != 0) return false;
  if (!aligned16(g.out) || !aligned16(g.a) || !aligned16(g.w) || !aligned16(g.pre)) return false;
  if (kForward && !aligned16(g.bias)) return false;
  using G = GeluGemm<T, kForward>;
  using Kernel = typename G::Kernel;
  const int M = int(g.m), N = int(g.n), K = int(g.k);
  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {M, N, K, 1};
  args.mainloop.ptr_A = static_cast<const T*>(g.a);
  args.mainloop.dA = packed<typename Kernel::StrideA>(M, K);
  args.mainloop.ptr_B = static_cast<const T*>(g.w);
  args.mainloop.dB = packed<typename Kernel::StrideB>(N, K);
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = packed<typename Kernel::StrideC>(M, N);
  args.epilogue.ptr_D = static_cast<T*>(g.out);
  args.epilogue.dD = packed<typename Kernel::StrideD>(M, N);
  args.epilogue.thread.alpha = g.alpha;
  args.epilogue.thread.beta = 0.0f;
  if constexpr (kForward) {
    args.epilogue.thread.bias_ptr = static_cast<const T*>(g.bias);
    args.epilogue.thread.aux_ptr = static_cast<T*>(g.pre);
  } else {
    args.epilogue.thread.aux_ptr = static_cast<const T*>(g.pre);
  }
  args.epilogue.thread.dAux = packed<typename Kernel::StrideD>(M, N);
  args.hw_info.device_id = g.device;
  args.hw_info.sm_count = g.sm_count;
  typename G::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
  if (G::Gemm::get_workspace_size(args) > g.workspace_bytes) return false;
  check(gemm.initialize(args, g.workspace, g.stream), "initialize");
  check(gemm.run(g.stream), "launch");
  CUDA_CHECK_LAUNCH();
  launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool cutlass_gelu_forward(const CutlassGemmArgs& g) {
  return g.f16 ? run<cutlass::half_t, true>(g) : run<cutlass::bfloat16_t, true>(g);
}

bool cutlass_gelu_backward(const CutlassGemmArgs& g) {
  return g.f16 ? run<cutlass::half_t, false>(g) : run<cutlass::bfloat16_t, false>(g);
}

uint64_t cutlass_gelu_launches() { return launches.load(std::memory_order_relaxed); }

}  // namespace trellis::gpu
