// Bucketed, overlapped all-reduce of the flat gradient buffer.
#include "parallel/data/gradient_sync.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "core/ops.h"

namespace trellis {

GradientSync::GradientSync(Runtime& rt, Communicator& data_group, const Tensor& flat_grads,
                           const std::vector<std::pair<int64_t, int64_t>>& param_ranges, size_t bucket_bytes,
                           DType reduce_dtype, std::pair<int64_t, int64_t> own_bucket,
                           const std::vector<bool>& expert, Communicator* expert_data)
    : rt_(rt), comm_(data_group), grads_(flat_grads) {
  TRELLIS_CHECK(expert.empty() || expert.size() == param_ranges.size(), "GradientSync: one expert flag per parameter range");
  TRELLIS_CHECK(expert_data || std::find(expert.begin(), expert.end(), true) == expert.end(),
                "GradientSync: experts' gradients need the expert-data group");
  if (reduce_dtype != flat_grads.dtype && data_group.size() > 1) {
    wire_buf_ = Buffer(rt.allocator(), size_t(flat_grads.numel()) * dtype_size(reduce_dtype), "gradient reduce copy");
    wire_ = wire_buf_.tensor(reduce_dtype, {flat_grads.numel()});
  }
  // At two ranks of one node each bucket's sum is then computed half on each rank, each half copied
  // straight into the peer's buffer (Communicator::share_gather_target): GPT-2 350M at data = 2
  // scaled 96.2% against 95.9% summing whole buckets on both ranks (docs/benchmarks.md, tenth session).
  comm_.share_gather_target(reduced());
  const int64_t target = std::max<int64_t>(1, int64_t(bucket_bytes / dtype_size(wire_.defined() ? wire_.dtype : flat_grads.dtype)));
  int64_t end = -1;
  bool open_expert = false;  // the open bucket holds experts' gradients
  auto close = [&](int64_t b) {
    Bucket bucket;
    bucket.begin = b;
    bucket.end = end;
    bucket.comm = open_expert ? expert_data : &comm_;
    buckets_.push_back(std::move(bucket));
    end = -1;
  };
  const bool isolate = own_bucket.second > own_bucket.first;
  for (size_t i = param_ranges.size(); i-- > 0;) {  // backward order: from the end of the buffer
    auto [b, e] = param_ranges[i];
    const bool is_expert = !expert.empty() && expert[i];
    if (end >= 0 && is_expert != open_expert) close(e);  // experts' and others' gradients apart
    if (isolate && param_ranges[i] == own_bucket) {
      if (end >= 0) close(e);  // what came before it (in backward order) ends at its end
      end = e;
      open_expert = false;
      close(b);
      continue;
    }
    if (end < 0) {
      end = e;
      open_expert = is_expert;
    }
    if (end - b >= target || i == 0) close(b);
  }
}

GradientSync::~GradientSync() { comm_.drop_gather_target(reduced()); }

void GradientSync::begin() {
  for (Bucket& b : buckets_) {
    b.ready = 0;
    b.started = false;
    b.completed = false;
  }
}

void GradientSync::start(Bucket& b) {
  NvtxRange r("gradient_all_reduce");
  b.started = true;
  if (b.comm->size() == 1) return;  // an expert held by this rank alone: its gradient is complete
  const Tensor grads = grads_.slice(b.begin, {b.end - b.begin});
  if (!wire_.defined()) {
    b.handle = b.comm->all_reduce_async(grads, ReduceOp::sum);
    return;
  }
  const Tensor wire = wire_.slice(b.begin, {b.end - b.begin});
  cast(rt_, wire, grads);  // on the compute stream, after the backward that completed the bucket
  b.handle = b.comm->all_reduce_async(wire, ReduceOp::sum);
}

void GradientSync::ready(int64_t begin, int64_t end, bool /*final: always, see every_micro_batch*/) {
  for (Bucket& b : buckets_) {
    const int64_t lo = std::max(begin, b.begin), hi = std::min(end, b.end);
    if (lo >= hi) continue;
    b.ready += hi - lo;
    if (b.ready == b.end - b.begin && !b.started) start(b);
  }
}

void GradientSync::complete(Bucket& b) {
  if (b.completed) return;  // by wait_for already
  b.completed = true;
  if (b.comm->size() == 1) return;
  b.handle.wait();
  if (wire_.defined()) cast(rt_, grads_.slice(b.begin, {b.end - b.begin}), wire_.slice(b.begin, {b.end - b.begin}));
}

void GradientSync::finish() {
  for (Bucket& b : buckets_)
    if (!b.started) start(b);
  for (Bucket& b : buckets_) complete(b);
}

void GradientSync::wait_for(int64_t begin, int64_t end) {
  for (Bucket& b : buckets_) {
    if (b.begin != begin || b.end != end) continue;
    TRELLIS_CHECK(b.started, "GradientSync::wait_for: the bucket's reduction has not started");
    complete(b);
    return;
  }
  TRELLIS_FATAL("GradientSync::wait_for: no bucket is exactly that range");
}

}  // namespace trellis
