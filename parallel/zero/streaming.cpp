// Reduce-scatter of the buckets into the pieces, and the stage 2-3 slots.
#include "parallel/zero/streaming.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "core/ops.h"

namespace trellis {

namespace {
constexpr int kSlots = 2;  // the block in use and the next one (its reduction or its gather)
}

ZeroStreaming::ZeroStreaming(Runtime& rt, ParameterStore& params, ZeroOptimizer& optimizer)
    : rt_(rt), params_(params), optimizer_(optimizer), stage_(optimizer.stage()) {
  TRELLIS_CHECK(optimizer.sharded() && stage_ >= 1, "ZeroStreaming: needs a sharded optimizer (ZeRO stage >= 1)");
  progress_.resize(params.buckets().size());
  for (int kind = 0; kind < 2; ++kind) {
    int64_t padded = 0, piece = 0;  // the largest streamed bucket of this kind
    for (const ParameterBucket& b : params.buckets())
      if (b.grads_streamed && int(b.expert) == kind) {
        padded = std::max(padded, b.padded);
        piece = std::max(piece, b.piece);
      }
    if (padded == 0) continue;
    Pool& pool = pools_[kind];
    if (stage_ >= 2) {
      pool.grads.resize(kSlots);
      for (GradSlot& s : pool.grads) {
        s.buf = Buffer(rt.allocator(), size_t(padded) * 4, kind ? "ZeRO experts' gradient slot" : "ZeRO gradient slot");
        s.recv_buf = Buffer(rt.allocator(), size_t(piece) * 4, kind ? "ZeRO experts' gradient slot piece" : "ZeRO gradient slot piece");
        s.grads = s.buf.tensor(DType::f32, {padded});
        s.recv = s.recv_buf.tensor(DType::f32, {piece});
      }
    }
    if (stage_ >= 3) {
      pool.values.resize(kSlots);
      for (ValueSlot& s : pool.values) {
        s.buf = Buffer(rt.allocator(), size_t(padded) * dtype_size(params.dtype()),
                     kind ? "ZeRO experts' parameter slot" : "ZeRO parameter slot");
        s.values = s.buf.tensor(params.dtype(), {padded});
      }
    }
  }
}

size_t ZeroStreaming::buffer_bytes() const {
  size_t n = 0;
  for (const Pool& pool : pools_) {
    for (const GradSlot& s : pool.grads) n += s.buf.bytes() + s.recv_buf.bytes();
    for (const ValueSlot& s : pool.values) n += s.buf.bytes();
  }
  return n;
}

size_t ZeroStreaming::planned_bytes(int64_t block, int64_t experts, int stage, int shards, int expert_shards,
                                    DType dtype) {
  if (stage < 2) return 0;
  size_t n = 0;
  for (auto [numel, N] : {std::pair<int64_t, int>{block, shards}, {experts, expert_shards}}) {
    if (numel == 0) continue;
    const int64_t padded = padded_bucket_size(numel, N);
    n += kSlots * size_t(padded + padded / N) * 4;                     // gradients and their pieces
    if (stage >= 3) n += kSlots * size_t(padded) * dtype_size(dtype);  // parameters
  }
  return n;
}

ZeroStreaming::Pool& ZeroStreaming::pool_of(int bucket) { return pools_[params_.buckets().at(size_t(bucket)).expert ? 1 : 0]; }

void ZeroStreaming::on_reduced(std::function<void(int bucket)> f) {
  TRELLIS_CHECK(stage_ == 1, "ZeroStreaming::on_reduced: at stage 1 only (later stages accumulate pieces)");
  on_reduced_ = std::move(f);
}

void ZeroStreaming::begin() {
  started_.clear();
  optimizer_.zero_owned_grads();
  for (Progress& p : progress_) {
    p.ready = 0;
    p.started = false;
  }
}

void ZeroStreaming::start_whole(int b) {
  NvtxRange r("gradient_reduce_scatter");
  Progress& p = progress_[size_t(b)];
  p.started = true;
  started_.push_back(b);
  Communicator& group = optimizer_.group_of(b);  // an experts' bucket: its expert-data group
  if (group.size() > 1) p.handle = group.reduce_scatter_async(optimizer_.owned_grads(b), params_.bucket_grads(b));
  else copy(rt_, optimizer_.owned_grads(b), params_.bucket_grads(b));  // held by this rank alone: already summed
}

void ZeroStreaming::ready(int64_t begin, int64_t end, bool final) {
  const std::vector<ParameterBucket>& buckets = params_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ParameterBucket& k = buckets[b];
    const int64_t lo = std::max(begin, k.offset), hi = std::min(end, k.offset + k.numel);
    if (lo >= hi) continue;
    Progress& p = progress_[b];
    p.ready += hi - lo;
    if (p.ready < k.numel) continue;
    p.ready = 0;
    if (!k.grads_streamed) {  // kept whole: accumulates until the step's last backward
      if (final && !p.started) start_whole(int(b));
      continue;
    }
    std::vector<GradSlot>& slots = pool_of(int(b)).grads;
    auto slot = std::find_if(slots.begin(), slots.end(), [&](const GradSlot& s) { return s.bound == int(b); });
    TRELLIS_CHECK(slot != slots.end(), "ZeroStreaming: gradients of bucket " + std::to_string(b) + " ready but not bound");
    NvtxRange r("gradient_reduce_scatter");
    slot->reducing = int(b);
    slot->started = ++clock_;
    slot->handle =
        optimizer_.group_of(int(b)).reduce_scatter_async(slot->recv.slice(0, {k.piece}), slot->grads.slice(0, {k.padded}));
  }
}

void ZeroStreaming::retire(GradSlot& s) {
  if (s.reducing < 0) return;
  s.handle.wait();
  accumulate(rt_, optimizer_.owned_grads(s.reducing), s.recv.slice(0, {params_.buckets()[size_t(s.reducing)].piece}));
  s.reducing = -1;
}

void ZeroStreaming::finish() {
  for (size_t b = 0; b < progress_.size(); ++b)
    if (!params_.buckets()[b].grads_streamed && !progress_[b].started) start_whole(int(b));
  for (int b : started_) {
    progress_[size_t(b)].handle.wait();
    if (on_reduced_) on_reduced_(b);
  }
  started_.clear();
  for (Pool& pool : pools_)
    for (GradSlot& s : pool.grads) {
      TRELLIS_CHECK(s.bound < 0, "ZeroStreaming: a gradient slot is still bound at the end of backward");
      retire(s);
    }
}

void ZeroStreaming::before_backward(int bucket, int next) {
  if (params_.buckets().at(size_t(bucket)).grads_streamed) {
    // The free slot, else the one whose reduction started first (it had the longest to finish).
    GradSlot* pick = nullptr;
    for (GradSlot& s : pool_of(bucket).grads) {
      TRELLIS_CHECK(s.bound < 0, "ZeroStreaming: two blocks' backward at once");
      if (!pick || (pick->reducing >= 0 && (s.reducing < 0 || s.started < pick->started))) pick = &s;
    }
    retire(*pick);
    fill(rt_, pick->grads, 0.0f);
    params_.bind_grads(bucket, pick->grads);
    pick->bound = bucket;
  }
  acquire_values(bucket, next);
}

void ZeroStreaming::after_backward(int bucket) {
  for (GradSlot& s : pool_of(bucket).grads)
    if (s.bound == bucket) {
      TRELLIS_CHECK(s.reducing == bucket, "ZeroStreaming: bucket " + std::to_string(bucket) + "'s gradients were not reported ready");
      params_.bind_grads(bucket, Tensor());
      s.bound = -1;
    }
  release_values(bucket);
}

void ZeroStreaming::before_forward(int bucket, int next) { acquire_values(bucket, next); }
void ZeroStreaming::after_forward(int bucket) { release_values(bucket); }

ZeroStreaming::ValueSlot* ZeroStreaming::value_slot_of(int bucket) {
  for (ValueSlot& s : pool_of(bucket).values)
    if (s.bucket == bucket) return &s;
  return nullptr;
}

// A slot of bucket's pool not in use: one holding nothing, else one not holding `keep`, else any.
ZeroStreaming::ValueSlot* ZeroStreaming::free_value_slot(int bucket, int keep) {
  ValueSlot* pick = nullptr;
  auto rank = [keep](const ValueSlot& s) { return s.bucket < 0 ? 0 : s.bucket != keep ? 1 : 2; };
  for (ValueSlot& s : pool_of(bucket).values)
    if (!s.in_use && (!pick || rank(s) < rank(*pick))) pick = &s;
  return pick;
}

void ZeroStreaming::start_gather(ValueSlot& s, int bucket) {
  NvtxRange r("parameter_gather");
  s.gather.wait();  // a gather still pending into it (on the device: ordered anyway)
  const ParameterBucket& k = params_.buckets()[size_t(bucket)];
  s.bucket = bucket;
  s.gather = optimizer_.group_of(bucket).all_gather_async(s.values.slice(0, {k.padded}), params_.owned_values(bucket));
}

void ZeroStreaming::acquire_values(int bucket, int next) {
  if (!params_.buckets().at(size_t(bucket)).values_streamed) return;
  ValueSlot* s = value_slot_of(bucket);
  if (!s) {
    s = free_value_slot(bucket, next);
    TRELLIS_CHECK(s, "ZeroStreaming: no free parameter slot");
    start_gather(*s, bucket);
  }
  TRELLIS_CHECK(!s->in_use, "ZeroStreaming: bucket " + std::to_string(bucket) + " is in use twice");
  s->gather.wait();
  s->in_use = true;
  params_.bind_values(bucket, s->values);
  if (next >= 0 && params_.buckets().at(size_t(next)).values_streamed && !value_slot_of(next)) {
    TRELLIS_CHECK(&pool_of(next) == &pool_of(bucket), "ZeroStreaming: the next bucket is of another kind");
    if (ValueSlot* p = free_value_slot(next, bucket)) start_gather(*p, next);  // prefetch
  }
}

void ZeroStreaming::release_values(int bucket) {
  if (!params_.buckets().at(size_t(bucket)).values_streamed) return;
  ValueSlot* s = value_slot_of(bucket);
  TRELLIS_CHECK(s && s->in_use, "ZeroStreaming: released bucket " + std::to_string(bucket) + " was not acquired");
  s->in_use = false;  // keeps its values: the same block's backward may follow
  params_.bind_values(bucket, Tensor());
}

void ZeroStreaming::parameters_changed() {
  for (Pool& pool : pools_)
    for (ValueSlot& s : pool.values) {
      TRELLIS_CHECK(!s.in_use, "ZeroStreaming: parameters changed while a block uses them");
      s.gather.wait();
      s.bucket = -1;
    }
}

}  // namespace trellis
