// BatchLoader.
#include "launcher/batch_loader.h"

#include <algorithm>

#include "core/ops.h"

namespace trellis {

BatchLoader::BatchLoader(Runtime& rt, const SampleSource& data, int64_t B, int64_t T)
    : rt_(rt), data_(data), B_(B), T_(T),
      staging_(rt.host_allocator(), size_t(2 * B * T) * 4, "batch staging"),
      device_(rt.allocator(), size_t(2 * B * T) * 4, "batch tokens") {}

std::pair<Tensor, Tensor> BatchLoader::load(Split split, int64_t first) {
  in_.resize(size_t(B_ * T_));
  tg_.resize(size_t(B_ * T_));
  for (int64_t i = 0; i < B_; ++i) data_.sample(split, first + i, in_.data() + i * T_, tg_.data() + i * T_);
  rt_.synchronize();  // the previous batch's copy out of the staging buffer must be done
  const size_t half = size_t(B_ * T_) * 4;
  Tensor host_in = staging_.tensor(DType::i32, {B_, T_}), host_tg = staging_.tensor(DType::i32, {B_, T_}, half);
  std::copy(in_.begin(), in_.end(), host_in.ptr<int32_t>());
  std::copy(tg_.begin(), tg_.end(), host_tg.ptr<int32_t>());
  Tensor dev_in = device_.tensor(DType::i32, {B_, T_}), dev_tg = device_.tensor(DType::i32, {B_, T_}, half);
  copy(rt_, dev_in, host_in);
  copy(rt_, dev_tg, host_tg);
  return {dev_in, dev_tg};
}

}  // namespace trellis
