// Runtime construction for the CPU and (when built) the CUDA backend.
#include "core/runtime.h"

#include <omp.h>

#include <fstream>
#include <string>

#if TRELLIS_HAVE_CUDA
#include "core/cuda/cuda_state.h"
#include "core/cuda/device_runtime.h"
#include "core/cuda/env_info.h"
#endif

namespace trellis {

bool built_with_cuda() { return TRELLIS_HAVE_CUDA; }

int cuda_device_count() {
#if TRELLIS_HAVE_CUDA
  return gpu::device_count();
#else
  return 0;
#endif
}

Runtime::Runtime(const RuntimeOptions& opt) : opt_(opt) {
  if (opt_.cpu_threads > 0) omp_set_num_threads(opt_.cpu_threads);
  if (opt_.profile_ops || opt_.trace) profiler_ = std::make_unique<OpProfiler>(*this, opt_.profile_ops);
  if (opt_.collective_timeout_s > 0) watchdog_ = std::make_unique<Watchdog>(opt_.collective_timeout_s);
  gpu_label_ = "the GPU " + opt_.device.str();
  if (opt_.device.is_cpu()) {
    device_alloc_ = make_host_allocator();
    host_alloc_ = make_host_allocator();
    return;
  }
#if TRELLIS_HAVE_CUDA
  cuda_ = gpu::create_state(opt_.device.index, opt_.deterministic);
  cuda_->profiler = profiler_.get();
  cuda_->peer_collectives = opt_.peer_collectives;
  device_alloc_ = gpu::make_device_allocator(opt_.device.index);
  host_alloc_ = gpu::make_pinned_allocator();
#else
  throw UserError("device " + opt_.device.str() + " requested, but this build has no CUDA backend");
#endif
}

Runtime::~Runtime() {
  synchronize();
#if TRELLIS_HAVE_CUDA
  if (cuda_) cuda_->profiler = nullptr;
#endif
  profiler_.reset();  // returns its CUDA events while the device state exists
  scratch_ = Buffer();
#if TRELLIS_HAVE_CUDA
  if (cuda_) {
    device_alloc_.reset();
    gpu::destroy_state(cuda_);
  }
#endif
}

void* Runtime::scratch(size_t bytes) {
  if (bytes > scratch_.bytes()) {
    synchronize();
    scratch_ = Buffer();
    scratch_ = Buffer(*device_alloc_, bytes, "op scratch");
    ++scratch_generation_;
  }
  return scratch_.data();
}

void Runtime::synchronize() {
#if TRELLIS_HAVE_CUDA
  if (cuda_) {
    Watchdog::Guard g = watch_gpu_wait();
    gpu::synchronize(cuda_);
  }
#endif
}

Watchdog::Guard Runtime::watch_gpu_wait(const char* what) {
  return Watchdog::Guard(what ? watchdog_.get() : nullptr, what, gpu_label_, true);
}

std::string Runtime::device_name() const {
#if TRELLIS_HAVE_CUDA
  if (cuda_) return gpu::device_name(cuda_);
#endif
  return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
}

std::string Runtime::library_versions() const {
#if TRELLIS_HAVE_CUDA
  if (cuda_) return gpu::library_versions();
#endif
  return "";
}

size_t Runtime::free_memory() const {
#if TRELLIS_HAVE_CUDA
  if (cuda_) return gpu::free_memory(cuda_);
#endif
  return host_available_memory();
}

size_t host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib << 10;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

double Runtime::peak_flops() const {
#if TRELLIS_HAVE_CUDA
  if (cuda_) return gpu::peak_flops(cuda_);
#endif
  return 0.0;
}

}  // namespace trellis
