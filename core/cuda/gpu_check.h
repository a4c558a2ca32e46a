// CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK: one generator macro; a failure calls trellis::fatal with
// "call: reason". C++17-clean so that both the .cu files and the host files of core/cuda use it.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/error.h"

namespace trellis {

inline bool gpu_status_ok(cudaError_t e) { return e == cudaSuccess; }
inline bool gpu_status_ok(cublasStatus_t e) { return e == CUBLAS_STATUS_SUCCESS; }
inline bool gpu_status_ok(ncclResult_t e) { return e == ncclSuccess; }
inline std::string gpu_status_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}
inline std::string gpu_status_text(cublasStatus_t e) { return cublasGetStatusString(e); }
inline std::string gpu_status_text(ncclResult_t e) { return ncclGetErrorString(e); }

}  // namespace trellis

#define TRELLIS_GPU_CHECK(call)                                                                 \
  do {                                                                                          \
    auto trellis_gpu_rc_ = (call);                                                              \
    if (!::trellis::gpu_status_ok(trellis_gpu_rc_))                                             \
      ::trellis::fatal(__FILE__, __LINE__,                                                      \
                       std::string(#call) + ": " + ::trellis::gpu_status_text(trellis_gpu_rc_)); \
  } while (0)
#define CUDA_CHECK(call) TRELLIS_GPU_CHECK(call)
#define CUBLAS_CHECK(call) TRELLIS_GPU_CHECK(call)
#define NCCL_CHECK(call) TRELLIS_GPU_CHECK(call)
// After every kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
