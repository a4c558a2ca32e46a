// BatchLoader.
#include "launcher/batch_loader.h"

#include <algorithm>

#include "core/ops.h"

namespace trellis {

BatchLoader::BatchLoader(Runtime& rt, const SampleSource& data, int64_t B, int64_t T)
    : rt_(rt), data_(data), B_(B), T_(T),
      staging_(rt.host_allocator(), size_t(kSlots * 2 * B * T) * 4, "batch staging"),
      device_(rt.allocator(), size_t(kSlots * 2 * B * T) * 4, "batch tokens"),
      copied_{ComputeFence(rt), ComputeFence(rt)} {}

void BatchLoader::draw(Split split, int64_t first) {
  in_.resize(size_t(B_ * T_));
  tg_.resize(size_t(B_ * T_));
  for (int64_t i = 0; i < B_; ++i) data_.sample(split, first + i, in_.data() + i * T_, tg_.data() + i * T_);
}

void BatchLoader::put(const Tensor& host_in, const Tensor& host_tg) const {
  std::copy(in_.begin(), in_.end(), host_in.ptr<int32_t>());
  std::copy(tg_.begin(), tg_.end(), host_tg.ptr<int32_t>());
}

std::pair<Tensor, Tensor> BatchLoader::load(Split split, int64_t first) {
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  draw(split, first);    // while the GPU may still be reading this slot
  copied_[slot].wait();  // this slot's previous copy out of the staging buffer must be done
  const size_t half = size_t(B_ * T_) * 4, at = size_t(slot) * 2 * half;
  Tensor host_in = staging_.tensor(DType::i32, {B_, T_}, at);
  Tensor host_tg = staging_.tensor(DType::i32, {B_, T_}, at + half);
  put(host_in, host_tg);
  Tensor dev_in = device_.tensor(DType::i32, {B_, T_}, at), dev_tg = device_.tensor(DType::i32, {B_, T_}, at + half);
  copy(rt_, dev_in, host_in);
  copy(rt_, dev_tg, host_tg);
  copied_[slot].record();
  return {dev_in, dev_tg};
}

void BatchLoader::reserve_step_slots(int count) {
  const size_t bytes = size_t(count) * 2 * size_t(B_ * T_) * 4;
  step_staging_ = Buffer(rt_.host_allocator(), bytes, "batch staging (step slots)");
  step_device_ = Buffer(rt_.allocator(), bytes, "batch tokens (step slots)");
  step_slots_ = count;
}

// The step slots have no fences of their own: the caller stages a step only once the previous
// step's uploads are done (the trainer waits on a fence recorded after them).
void BatchLoader::stage(Split split, int64_t first, int mb) {
  TRELLIS_CHECK(mb >= 0 && mb < step_slots_, "BatchLoader::stage: micro-batch " + std::to_string(mb) +
                                                  " has no step slot (reserve_step_slots)");
  const size_t half = size_t(B_ * T_) * 4, at = size_t(mb) * 2 * half;
  draw(split, first);
  put(step_staging_.tensor(DType::i32, {B_, T_}, at), step_staging_.tensor(DType::i32, {B_, T_}, at + half));
}

std::pair<Tensor, Tensor> BatchLoader::upload(int mb) {
  TRELLIS_CHECK(mb >= 0 && mb < step_slots_, "BatchLoader::upload: micro-batch " + std::to_string(mb) +
                                                  " has no step slot (reserve_step_slots)");
  const size_t half = size_t(B_ * T_) * 4, at = size_t(mb) * 2 * half;
  Tensor dev_in = step_device_.tensor(DType::i32, {B_, T_}, at), dev_tg = step_device_.tensor(DType::i32, {B_, T_}, at + half);
  copy(rt_, dev_in, step_staging_.tensor(DType::i32, {B_, T_}, at));
  copy(rt_, dev_tg, step_staging_.tensor(DType::i32, {B_, T_}, at + half));
  return {dev_in, dev_tg};
}

}  // namespace trellis
