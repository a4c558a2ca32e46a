// The per-rank runtime context: device, streams, BLAS handles, allocators, op scratch space.
// Passed explicitly to every op; there is no "current" runtime.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/alloc.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "core/watchdog.h"

namespace trellis {

struct CudaState;  // defined in core/cuda; opaque outside the CUDA backend

struct RuntimeOptions {
  Device device = Device::CPU();
  bool deterministic = false;  // GPU: choose only bitwise-reproducible algorithms
  int cpu_threads = 0;         // OpenMP threads for the CPU backend; 0 = leave the default
  bool profile_ops = false;    // time every op (CUDA events on the compute stream) into an OpProfiler
  bool trace = false;          // an OpProfiler for one-step traces (OpProfiler::begin_trace) without profile_ops
  bool peer_collectives = true; // GPU: two ranks of one node sum and gather through peer memory, not NCCL (parallel.peer_all_reduce)
  double collective_timeout_s = 0;  // > 0: waits on other ranks and on the GPU are watched (core/watchdog.h)
};

class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& opt);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Device device() const { return opt_.device; }
  bool deterministic() const { return opt_.deterministic; }
  // Memory on this runtime's device (device memory for CUDA, host memory for the CPU).
  Allocator& allocator() { return *device_alloc_; }
  // Host memory for staging: pinned on CUDA, plain on the CPU.
  Allocator& host_allocator() { return *host_alloc_; }
  // A grow-only workspace for one op at a time on the compute stream. Growing frees the old one
  // (after a device sync), so call it with the largest size once at setup to keep steps free of
  // allocation. One op at a time: never hold a scratch pointer across another op call.
  void* scratch(size_t bytes);
  // How often the scratch was reallocated: work captured in a CUDA graph holds its address.
  uint64_t scratch_generation() const { return scratch_generation_; }
  // Waits until all work queued on this runtime's streams has finished.
  void synchronize();
  // Bytes this runtime's device can still hand out: free GPU memory, or the host's MemAvailable
  // (shared by every process on it); 0 when unknown.
  size_t free_memory() const;
  // Device description: "NVIDIA H200" or "cpu (N threads)".
  std::string device_name() const;
  // The GPU libraries as loaded, one line (core/cuda/env_info.h); empty on the CPU.
  std::string library_versions() const;
  // Dense 16-bit tensor-core peak in FLOP/s for MFU; 0 when unknown (CPU, unlisted GPU).
  double peak_flops() const;
  CudaState* cuda() const { return cuda_; }
  // Non-null when RuntimeOptions::profile_ops or trace is set.
  OpProfiler* profiler() { return profiler_.get(); }
  // Non-null when RuntimeOptions::collective_timeout_s > 0: communicators and GPU waits report to it.
  Watchdog* watchdog() { return watchdog_.get(); }
  // Watches the calling thread's wait for this GPU's queued work, described by `what` (null: not
  // watched); a guard that does nothing without a watchdog.
  Watchdog::Guard watch_gpu_wait(const char* what = "its queued work");

 private:
  RuntimeOptions opt_;
  std::unique_ptr<Allocator> device_alloc_;
  std::unique_ptr<Allocator> host_alloc_;
  Buffer scratch_;
  uint64_t scratch_generation_ = 0;
  std::unique_ptr<OpProfiler> profiler_;
  std::unique_ptr<Watchdog> watchdog_;
  std::string gpu_label_;  // "the GPU cuda:0", for the watchdog's message
  CudaState* cuda_ = nullptr;
};

// The host's MemAvailable (/proc/meminfo) in bytes; 0 when unknown.
size_t host_available_memory();

// Number of CUDA devices visible (0 when built without CUDA or no driver).
int cuda_device_count();
bool built_with_cuda();

}  // namespace trellis
