// The CUDA backend's per-runtime state (device, streams, cuBLAS/cuBLASLt handles and workspace)
// and (through gpu_check.h) the CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK macros. Internal to core/cuda,
// host code only: it includes core/runtime.h, which is C++20, while device code is compiled as C++17.
#pragma once
#include <cstddef>
#include <string>

#include "core/cuda/gpu_check.h"
#include "core/runtime.h"

namespace trellis {

struct MatmulPlanCache;  // cuBLASLt descriptors and algorithms keyed by problem (matmul.cpp)
struct CudnnAttention;   // cuDNN handle and attention graphs (cudnn_attention.cpp), made on first use
class OpProfiler;         // the runtime's op timer and tracer (core/profiler.h)

struct CudaState {
  int device = 0;
  cudaStream_t compute = nullptr;  // every op runs here
  cudaStream_t comm = nullptr;     // collectives (ordered against compute by events)
  cudaStream_t copy = nullptr;     // offload / prefetch copies
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;   // batched GEMMs of the attention core
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t block_shared_memory = 0;  // the most a block may opt in to (sharedMemPerBlockOptin)
  size_t total_memory = 0;
  bool deterministic = false;
  bool peer_collectives = true;    // two-rank sums and gathers through peer memory (peer_collectives.h)
  MatmulPlanCache* matmul_plans = nullptr;
  CudnnAttention* cudnn = nullptr;
  OpProfiler* profiler = nullptr;  // the runtime's, for tracing collectives (nccl_comm.cpp)
};

namespace gpu {
void destroy_matmul_plans(MatmulPlanCache* c);  // matmul.cpp
}  // namespace gpu

inline CudaState& cuda_state(Runtime& rt) {
  CudaState* s = rt.cuda();
  TRELLIS_CHECK(s != nullptr, "CUDA op called on a runtime without a CUDA device");
  return *s;
}
inline cudaStream_t compute_stream(Runtime& rt) { return cuda_state(rt).compute; }

}  // namespace trellis

