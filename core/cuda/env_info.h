// The GPU part of the environment report (env_report): driver and runtime versions, GPUs, memory,
// NCCL and cuBLAS versions. Plain C++ declarations; only built with the CUDA backend.
#pragma once
#include <string>

namespace trellis::gpu {

// Several lines, each ending in a newline. Never throws or aborts: without a driver or a GPU it
// says "no CUDA driver/GPU found" and why.
std::string environment_report();

}  // namespace trellis::gpu
