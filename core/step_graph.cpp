#include "core/step_graph.h"

#if TRELLIS_HAVE_CUDA
#include "core/cuda/device_runtime.h"
#endif

namespace trellis {

StepGraph::~StepGraph() {
#if TRELLIS_HAVE_CUDA
  gpu::destroy_graph(graph_);
#endif
}

bool StepGraph::run(uint64_t key, const std::function<void()>& enqueue) {
#if TRELLIS_HAVE_CUDA
  if (rt_.cuda()) {
    const bool same = key == key_ && rt_.scratch_generation() == scratch_generation_;
    if (graph_ && same) {
      gpu::launch_graph(rt_.cuda(), graph_);
      ++replays_;
      return false;
    }
    gpu::destroy_graph(graph_);
    graph_ = nullptr;
    if (warmed_ && same) {
      gpu::begin_capture(rt_.cuda());
      try {
        enqueue();
      } catch (...) {  // leave the stream out of capture mode, so the error is the one reported
        gpu::abandon_capture(rt_.cuda());
        warmed_ = false;
        throw;
      }
      graph_ = gpu::end_capture(rt_.cuda());
      gpu::launch_graph(rt_.cuda(), graph_);
      ++replays_;
      return true;
    }
    enqueue();  // warm-up: whatever the step allocates or builds on first use happens here
    key_ = key;
    scratch_generation_ = rt_.scratch_generation();
    warmed_ = true;
    return true;
  }
#endif
  (void)key;
  enqueue();
  return true;
}

}  // namespace trellis
