// The CPU backend (the reference): OpenBLAS GEMM, OpenMP loops, reductions in a fixed order.
// Called by core/ops.cpp after argument checks; semantics are those documented in core/ops.h.
#pragma once
#include "core/ops.h"
#include "core/philox.h"

namespace trellis::cpu {

#include "core/backend_ops.inc"

}  // namespace trellis::cpu
