// The MLP's two GELU-fused GEMMs as CUTLASS kernels for Hopper (sm_90a: TMA, warp-specialized
// ping-pong, tile 128x128x64, cluster 2x1), used by matmul.cpp in place of cuBLASLt's
// GELU_AUX_BIAS / DGELU epilogues, which ran ~15% slower at GPT-2 1.3B's MLP shapes on the H200
// (bench/sessions/2026-11-30h, call 2). Row-major throughout, bf16 or f16 in and out, f32 accumulate:
//   forward:  pre = alpha * a @ w^T + bias, out = gelu_tanh(pre)   a (M, K), w (N, K), bias (N)
//   backward: out = (alpha * a @ w) * gelu_tanh'(pre)               a (M, K), w (K, N), pre (M, N)
// Host code; built only with the CUTLASS headers (TRELLIS_HAVE_CUTLASS).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace trellis::gpu {

struct CutlassGemmArgs {
  cudaStream_t stream;
  bool f16;  // else bf16
  void* out;
  const void* a;
  const void* w;
  const void* bias;  // forward only
  void* pre;         // the pre-activation: written by the forward, read by the backward
  int64_t m, n, k;
  float alpha;
  int device, sm_count;
  void* workspace;  // scratch the kernel may need (the caller's cuBLASLt workspace: same stream)
  size_t workspace_bytes;
};

// Each launches and returns true, or launches nothing and returns false when the problem does not
// suit the kernel (sizes or alignment); CUDA and CUTLASS errors are fatal.
bool cutlass_gelu_forward(const CutlassGemmArgs& args);
bool cutlass_gelu_backward(const CutlassGemmArgs& args);
// How many of the above have launched in this process (tests: was the CUTLASS path taken?).
uint64_t cutlass_gelu_launches();

}  // namespace trellis::gpu
