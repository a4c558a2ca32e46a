// PackedAllReduce.
#include "parallel/tensor/packed_all_reduce.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "core/ops.h"

namespace trellis {

PackedAllReduce::PackedAllReduce(Runtime& rt, Communicator* group, std::vector<Tensor> tensors)
    : rt_(rt), group_(group), tensors_(std::move(tensors)) {
  if (!group_ || group_->size() == 1) tensors_.clear();
  int64_t n = 0;
  for (const Tensor& t : tensors_) {
    TRELLIS_CHECK(t.dtype == DType::f32, "PackedAllReduce: f32 tensors only");
    n += t.numel();
  }
  if (n == 0) return;
  buf_ = Buffer(rt.allocator(), size_t(n) * 4, "packed all-reduce");
  packed_ = buf_.tensor(DType::f32, {n});
}

void PackedAllReduce::run() {
  if (!packed_.defined()) return;
  NvtxRange r("packed_all_reduce");
  int64_t at = 0;
  for (const Tensor& t : tensors_) {
    copy(rt_, packed_.slice(at, {t.numel()}), t.view({t.numel()}));
    at += t.numel();
  }
  group_->all_reduce(packed_);
  at = 0;
  for (const Tensor& t : tensors_) {
    copy(rt_, t.view({t.numel()}), packed_.slice(at, {t.numel()}));
    at += t.numel();
  }
}

}  // namespace trellis
