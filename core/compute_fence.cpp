#include "core/compute_fence.h"

#include "core/runtime.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/device_runtime.h"
#endif

namespace trellis {

ComputeFence::ComputeFence(Runtime& rt) : rt_(rt) {
#if TRELLIS_HAVE_CUDA
  if (rt.cuda()) event_ = gpu::create_timing_event();
#endif
}

ComputeFence::~ComputeFence() {
#if TRELLIS_HAVE_CUDA
  if (event_) gpu::destroy_timing_event(event_);
#endif
}

void ComputeFence::record() {
#if TRELLIS_HAVE_CUDA
  if (event_) gpu::record_on_compute(rt_.cuda(), event_);
#endif
  recorded_ = true;
}

void ComputeFence::wait() {
#if TRELLIS_HAVE_CUDA
  if (event_ && recorded_) {
    Watchdog::Guard g = rt_.watch_gpu_wait();
    gpu::event_synchronize(event_);
  }
#endif
}

}  // namespace trellis
