// The CUDA backend: cuBLASLt GEMM and own kernels, all on the runtime's compute stream.
// Called by core/ops.cpp after argument checks; semantics are those documented in core/ops.h.
// Plain C++ declarations: no CUDA header leaks out of core/cuda.
#pragma once
#include "core/ops.h"
#include "core/philox.h"

namespace trellis::gpu {

#include "core/backend_ops.inc"

}  // namespace trellis::gpu
