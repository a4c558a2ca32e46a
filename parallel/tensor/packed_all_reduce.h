// All-reduces (sums) a fixed list of small f32 tensors over a group as one message: copied into
// one buffer, reduced once, copied back. Sequence parallelism leaves every LayerNorm's gradient as
// a partial sum over the tensor group (4 small tensors per layer); one collective instead of one
// per tensor saves a launch and a round of latency each.
#pragma once
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"

namespace trellis {

class PackedAllReduce {
 public:
  // `tensors`: f32, on the runtime's device; their total size fixes the buffer once.
  PackedAllReduce(Runtime& rt, Communicator* group, std::vector<Tensor> tensors);
  // Sums every tensor over the group, in place (nothing without a group or tensors).
  void run();

 private:
  Runtime& rt_;
  Communicator* group_;
  std::vector<Tensor> tensors_;
  Buffer buf_;
  Tensor packed_;
};

}  // namespace trellis
