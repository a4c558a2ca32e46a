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

std::pair<Tensor, Tensor> BatchLoader::load(Split split, int64_t first) {
  in_.resize(size_t(B_ * T_));
  tg_.resize(size_t(B_ * T_));
  for (int64_t i = 0; i < B_; ++i) data_.sample(split, first + i, in_.data() + i * T_, tg_.data() + i * T_);
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  copied_[slot].wait();  // this slot's previous copy out of the staging buffer must be done
  const size_t half = size_t(B_ * T_) * 4, at = size_t(slot) * 2 * half;
  Tensor host_in = staging_.tensor(DType::i32, {B_, T_}, at);
  Tensor host_tg = staging_.tensor(DType::i32, {B_, T_}, at + half);
  std::copy(in_.begin(), in_.end(), host_in.ptr<int32_t>());
  std::copy(tg_.begin(), tg_.end(), host_tg.ptr<int32_t>());
  Tensor dev_in = device_.tensor(DType::i32, {B_, T_}, at), dev_tg = device_.tensor(DType::i32, {B_, T_}, at + half);
  copy(rt_, dev_in, host_in);
  copy(rt_, dev_tg, host_tg);
  copied_[slot].record();
  return {dev_in, dev_tg};
}

}  // namespace trellis
