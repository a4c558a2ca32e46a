// What ZeRO stages 2 and 3 do around each transformer block of a model (parallel/zero/streaming.h):
// provide its gradient storage and, at stage 3, gather its parameters just in time. Buckets are
// the parameter store's (core/parameters.h).
#pragma once

namespace trellis {

class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  // Before block bucket `bucket` runs forward; `next` runs after it (to prefetch), or -1.
  virtual void before_forward(int bucket, int next) = 0;
  virtual void after_forward(int bucket) = 0;
  // Before its backward (which may recompute its forward); after it, once its gradients were
  // reported ready.
  virtual void before_backward(int bucket, int next) = 0;
  virtual void after_backward(int bucket) = 0;
};

}  // namespace trellis
