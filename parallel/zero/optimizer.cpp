// AdamW over contiguous runs of the flat buffers (a handful of launches per step), on the whole
// buffer (stage 0) or this data rank's slice (stage 1).
#include "parallel/zero/optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"

namespace trellis {

ShardRange shard_range(int64_t n, int ranks, int rank) {
  ShardRange r;
  r.size = (n + ranks - 1) / ranks;
  r.begin = std::min(n, rank * r.size);
  r.end = std::min(n, (rank + 1) * r.size);
  return r;
}

ZeroOptimizer::ZeroOptimizer(Runtime& rt, ParameterStore& params, Communicator* data, int stage)
    : rt_(rt), params_(params), data_(stage >= 1 && data && data->size() > 1 ? data : nullptr) {
  const int64_t n = params.numel();
  shard_ = data_ ? shard_range(n, data_->size(), data_->rank()) : ShardRange{n, 0, n};
  const int64_t s = shard_.size;
  if (data_)
    TRELLIS_CHECK(params.padded_numel() == s * data_->size(), "ZeroOptimizer: parameters not padded to the data size");
  // This rank's slice of the (padded) parameters: from element rank·s.
  const Tensor values = params.padded_values().slice(data_ ? data_->rank() * s : 0, {s});
  if (params.dtype() == DType::f32) {
    master_ = values;
  } else {
    master_buf_ = Buffer(rt.allocator(), size_t(s) * 4, "fp32 master weights");
    master_ = master_buf_.tensor(DType::f32, {s});
    cast(rt, master_, values);
  }
  m_buf_ = Buffer(rt.allocator(), size_t(s) * 4, "Adam first moments");
  v_buf_ = Buffer(rt.allocator(), size_t(s) * 4, "Adam second moments");
  m_ = m_buf_.tensor(DType::f32, {s});
  v_ = v_buf_.tensor(DType::f32, {s});
  fill(rt, m_, 0.0f);
  fill(rt, v_, 0.0f);
  if (data_) {
    grad_buf_ = Buffer(rt.allocator(), size_t(s) * 4, "reduced gradient slice");
    grads_ = grad_buf_.tensor(DType::f32, {s});
  } else {
    grads_ = params.flat_grads();
  }
  for (const Parameter& p : params.all()) {  // runs of one decay flag, cut to the slice
    const int64_t lo = std::max(p.offset, shard_.begin) - shard_.begin;
    const int64_t hi = std::min(p.offset + p.spec.shape.numel(), shard_.end) - shard_.begin;
    if (lo >= hi) continue;
    if (!runs_.empty() && runs_.back().decay == p.spec.decay && runs_.back().offset + runs_.back().numel == lo)
      runs_.back().numel += hi - lo;
    else
      runs_.push_back({lo, hi - lo, p.spec.decay});
  }
}

void ZeroOptimizer::reduce_gradients() {
  NvtxRange r("gradient_reduce_scatter");
  data_->reduce_scatter(grads_, params_.padded_grads());
}

std::vector<Tensor> ZeroOptimizer::owned_grads(const std::vector<Tensor>& grads) const {
  if (!data_) return grads;
  std::vector<Tensor> out;
  const float* flat = params_.flat_grads().ptr<float>();
  for (const Tensor& g : grads) {
    const int64_t offset = g.ptr<float>() - flat;
    const int64_t lo = std::max(offset, shard_.begin), hi = std::min(offset + g.numel(), shard_.end);
    if (lo < hi) out.push_back(grads_.slice(lo - shard_.begin, {hi - lo}));
  }
  return out;
}

void ZeroOptimizer::step(const AdamWHyper& h, float grad_scale) {
  const bool separate_master = params_.dtype() != DType::f32;
  const Tensor values = params_.padded_values();
  const int64_t first = data_ ? data_->rank() * shard_.size : 0;  // the slice's first element
  for (const Run& r : runs_) {
    AdamWHyper hr = h;
    if (!r.decay) hr.weight_decay = 0.0f;
    Tensor out = separate_master ? values.slice(first + r.offset, {r.numel}) : Tensor();
    adamw_step(rt_, master_.slice(r.offset, {r.numel}), m_.slice(r.offset, {r.numel}), v_.slice(r.offset, {r.numel}),
               grads_.slice(r.offset, {r.numel}), out, hr, grad_scale);
  }
  if (data_) {
    NvtxRange r("parameter_all_gather");
    data_->all_gather(values, values.slice(first, {shard_.size}));
  }
}

size_t ZeroOptimizer::state_bytes() const {
  return master_buf_.bytes() + m_buf_.bytes() + v_buf_.bytes() + grad_buf_.bytes();
}

int64_t ZeroOptimizer::model_state_bytes(int64_t n, DType dtype, int stage, int data_size) {
  const int ranks = stage >= 1 ? data_size : 1;
  const int64_t s = shard_range(n, ranks, 0).size, master = dtype == DType::f32 ? 0 : 4;
  return s * ranks * int64_t(dtype_size(dtype) + 4) + s * (master + 8 + (ranks > 1 ? 4 : 0));
}

Tensor ZeroOptimizer::gather(const Tensor& owned, Buffer& scratch) const {
  if (!data_) return owned;
  scratch = Buffer(rt_.allocator(), size_t(params_.padded_numel()) * 4, "optimizer state gather");
  const Tensor whole = scratch.tensor(DType::f32, {params_.padded_numel()});
  data_->all_gather(whole, owned);
  return whole.slice(0, {params_.numel()});
}

void ZeroOptimizer::scatter(const Tensor& whole, const Tensor& owned) const {
  TRELLIS_CHECK(data_ && whole.numel() == params_.numel(), "ZeroOptimizer::scatter: not sharded or not the whole buffer");
  if (shard_.numel() > 0) copy(rt_, owned.slice(0, {shard_.numel()}), whole.slice(shard_.begin, {shard_.numel()}));
}

}  // namespace trellis
