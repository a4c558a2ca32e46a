#include "core/phase_marks.h"

#include "core/runtime.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/device_runtime.h"
#endif

namespace trellis {

PhaseMarks::PhaseMarks(Runtime& rt, int count) : rt_(rt), host_(size_t(count)) {
#if TRELLIS_HAVE_CUDA
  if (rt.cuda())
    for (int i = 0; i < count; ++i) events_.push_back(gpu::create_timing_event());
#endif
}

PhaseMarks::~PhaseMarks() {
#if TRELLIS_HAVE_CUDA
  for (void* e : events_) gpu::destroy_timing_event(e);
#endif
}

void PhaseMarks::mark(int i) {
#if TRELLIS_HAVE_CUDA
  if (!events_.empty()) {
    gpu::record_on_compute(rt_.cuda(), events_[size_t(i)]);
    return;
  }
#endif
  host_[size_t(i)] = std::chrono::steady_clock::now();
}

double PhaseMarks::ms(int from, int to) const {
#if TRELLIS_HAVE_CUDA
  if (!events_.empty()) return double(gpu::event_ms(events_[size_t(from)], events_[size_t(to)]));
#endif
  return std::chrono::duration<double, std::milli>(host_[size_t(to)] - host_[size_t(from)]).count();
}

}  // namespace trellis
