// Puts the samples of a micro-batch on the device: draws them on the host by global sample
// index, stages them in pinned memory and copies them over asynchronously. Two slots alternate,
// each with a fence, so preparing a micro-batch waits only for the copy of the one before the
// previous, never for the whole device.
#pragma once
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/compute_fence.h"
#include "core/runtime.h"
#include "data/sample_source.h"

namespace trellis {

class BatchLoader {
 public:
  BatchLoader(Runtime& rt, const SampleSource& data, int64_t B, int64_t T);
  // Samples [first, first + B) of `split` as (inputs, targets), i32 (B, T) on the device.
  std::pair<Tensor, Tensor> load(Split split, int64_t first);

  // Step slots, for a step replayed as a CUDA graph (core/step_graph.h): one pinned and one device
  // buffer per micro-batch of a step, at fixed addresses. stage() draws micro-batch mb's samples
  // into its pinned slot (host work, before the step is queued or launched); upload() queues the
  // copy of slot mb to the device (what the graph replays) and returns its device tensors.
  void reserve_step_slots(int count);
  void stage(Split split, int64_t first, int mb);
  std::pair<Tensor, Tensor> upload(int mb);

 private:
  // Draws B samples from `first` into in_ and tg_; put() then copies them into host buffers.
  void draw(Split split, int64_t first);
  void put(const Tensor& host_in, const Tensor& host_tg) const;
  Runtime& rt_;
  const SampleSource& data_;
  int64_t B_, T_;
  static constexpr int kSlots = 2;
  Buffer staging_, device_;       // kSlots x (inputs, targets)
  ComputeFence copied_[kSlots];   // the slot's host-to-device copy is done
  int next_ = 0;
  std::vector<int32_t> in_, tg_;
  int step_slots_ = 0;
  Buffer step_staging_, step_device_;  // step_slots_ x (inputs, targets)
};

}  // namespace trellis
