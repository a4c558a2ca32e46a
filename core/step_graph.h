// One training step replayed as a CUDA graph: the ~650 kernels of a GPT step then start back to
// back on the GPU instead of one launch at a time (about 1 us each, bench/sessions/2026-11-30j
// call 5). The first run queues the step as usual (it sizes the scratch, builds the cuBLASLt and
// cuDNN plans); the second is captured into a graph and launched; later runs only launch it. The
// graph keeps the addresses and kernel arguments of the captured step, so the caller keeps every
// value that changes from step to step in memory the step reads (core/step_scalars.h, the batch
// loader's step slots) and passes as `key` what the step's kernels take by value (the run with a
// new key, or the first after the scratch was reallocated, is plain; the one after it captures). Inactive
// on the CPU: every run queues the step.
#pragma once
#include <cstdint>
#include <functional>

#include "core/runtime.h"

namespace trellis {

class StepGraph {
 public:
  explicit StepGraph(Runtime& rt) : rt_(rt) {}
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Queues one step on the compute stream: calls enqueue (plainly, or captured) unless the graph
  // of an earlier call with the same key is launched instead. Returns whether enqueue was called.
  bool run(uint64_t key, const std::function<void()>& enqueue);
  // Steps launched from a graph so far (captures included).
  int64_t replays() const { return replays_; }

 private:
  Runtime& rt_;
  void* graph_ = nullptr;
  uint64_t key_ = 0, scratch_generation_ = 0;
  bool warmed_ = false;  // one plain run with this key and scratch came before the capture
  int64_t replays_ = 0;
};

}  // namespace trellis
