// The GPU part of the environment report (env_report): driver and runtime versions, GPUs, memory,
// NCCL and cuBLAS versions. Plain C++ declarations; only built with the CUDA backend.
#pragma once
#include <string>

namespace trellis::gpu {

// Several lines, each ending in a newline. Never throws or aborts: without a driver or a GPU it
// says "no CUDA driver/GPU found" and why.
std::string environment_report();
// One line for a run's log: "CUDA runtime 13.0, cuBLASLt 13.1.0, cuDNN 9.19.0, NCCL 2.28.9", the
// versions as loaded (cuDNN only in builds with it).
std::string library_versions();

}  // namespace trellis::gpu
