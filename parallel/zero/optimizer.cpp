// AdamW over contiguous runs of the owned pieces (a handful of launches per bucket and step).
#include "parallel/zero/optimizer.h"

#include <algorithm>

#include "core/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/step_scalars.h"

namespace trellis {

ZeroOptimizer::ZeroOptimizer(Runtime& rt, ParameterStore& params, Communicator* data, int stage,
                             std::unique_ptr<Allocator> offload, Communicator* expert_data)
    : rt_(rt), params_(params), data_(stage >= 1 && data && data->size() > 1 ? data : nullptr),
      expert_data_(data_ ? expert_data : nullptr), stage_(data_ ? stage : 0), host_alloc_(std::move(offload)) {
  const StoreSharding& sh = params.sharding();
  TRELLIS_CHECK(sh.shards == (data_ ? data_->size() : 1) && sh.shard == (data_ ? data_->rank() : 0),
                "ZeroOptimizer: the parameter store is not sharded over the data group");
  const bool experts = std::any_of(params.buckets().begin(), params.buckets().end(),
                                   [](const ParameterBucket& b) { return b.expert; });
  TRELLIS_CHECK(!data_ || !experts ||
                    (expert_data_ && sh.expert_shards == expert_data_->size() && sh.expert_shard == expert_data_->rank()),
                "ZeroOptimizer: the experts' buckets are not sharded over the expert-data group");
  TRELLIS_CHECK(sh.stream_grads == (stage_ >= 2) && sh.stream_values == (stage_ >= 3),
                "ZeroOptimizer: the parameter store does not stream what ZeRO stage " + std::to_string(stage_) + " streams");
  const std::vector<ParameterBucket>& buckets = params.buckets();
  int64_t whole = 0;
  for (const ParameterBucket& b : buckets) {
    owned_at_.push_back(owned_numel_);
    owned_numel_ += b.piece;
    whole_at_.push_back(whole);
    whole += b.numel;
  }
  const int64_t s = owned_numel_;
  Allocator& state = offloaded() ? *host_alloc_ : rt.allocator();
  // Offloaded f32 parameters: the master is what goes up each step, so it is pinned.
  Allocator& master_alloc = offloaded() && params.dtype() == DType::f32 ? rt.host_allocator() : state;
  if (params.dtype() == DType::bf16) {  // split masters: the parameters are their high halves
    master_buf_ = Buffer(state, size_t(s) * 2, "low halves of the fp32 master weights");
    master_ = master_buf_.tensor(DType::bf16, {s});
  } else if (params.dtype() != DType::f32 || offloaded()) {
    master_buf_ = Buffer(master_alloc, size_t(s) * 4, "fp32 master weights");
    master_ = master_buf_.tensor(DType::f32, {s});
  }
  if (offloaded()) {
    if (params.dtype() == DType::f32) {
      host_values_ = master_;
    } else {
      host_values_buf_ = Buffer(rt.host_allocator(), size_t(s) * dtype_size(params.dtype()), "host copy of the parameters");
      host_values_ = host_values_buf_.tensor(params.dtype(), {s});
    }
    int64_t largest = 0;
    for (const ParameterBucket& b : buckets) largest = std::max(largest, b.piece);
    // The gradients come down as the device holds them: reduced pieces f32, a store's own maybe 16-bit.
    const DType gt = data_ ? DType::f32 : params.grad_dtype();
    for (int i = 0; i < 2; ++i) {
      staging_buf_[i] = Buffer(rt.host_allocator(), size_t(largest) * dtype_size(gt), "gradient staging for the host's AdamW");
      staging_[i] = staging_buf_[i].tensor(gt, {largest});
      fetched_[i] = std::make_unique<ComputeFence>(rt);
    }
    host_scalars_buf_ = Buffer(rt.host_allocator(), kStepScalarCount * sizeof(float), "step scalars for the host's AdamW");
    host_scalars_ = host_scalars_buf_.tensor(DType::f32, {kStepScalarCount});
  }
  reset_master();
  m_buf_ = Buffer(state, size_t(s) * 4, "Adam first moments");
  v_buf_ = Buffer(state, size_t(s) * 4, "Adam second moments");
  m_ = m_buf_.tensor(DType::f32, {s});
  v_ = v_buf_.tensor(DType::f32, {s});
  for (const Tensor& t : {m_, v_}) offloaded() ? cpu::fill(rt, t, 0.0f) : fill(rt, t, 0.0f);
  if (data_) {
    grad_buf_ = Buffer(rt.allocator(), size_t(s) * 4, "reduced gradient pieces");
    grads_ = grad_buf_.tensor(DType::f32, {s});
    fill(rt, grads_, 0.0f);
  } else {
    grads_ = params.flat_grads();  // unsharded: the pieces are the buckets, in place
  }
  // The updated pieces are gathered into the store's buckets every step: at two ranks of one node
  // straight from the peer's copy engine. (Stage 3 gathers the blocks into slots instead.)
  if (data_ && stage_ < 3) data_->share_gather_target(params.flat_values());
  for (size_t b = 0; b < buckets.size(); ++b) {  // spans of runs of one decay flag, cut to the piece
    const ParameterBucket& k = buckets[b];
    const int64_t lo_b = rank_in_group(int(b)) * k.piece, hi_b = lo_b + k.piece;  // bucket-relative
    for (size_t i = k.first; i < k.end; ++i) {
      const Parameter& p = params.all()[i];
      const int64_t at = p.offset - k.offset;
      const int64_t lo = std::max(at, lo_b) - lo_b, hi = std::min(at + p.spec.shape.numel(), hi_b) - lo_b;
      if (lo >= hi) continue;
      Span* span = spans_.empty() ? nullptr : &spans_.back();
      if (!span || span->bucket != int(b) || span->offset + span->numel != lo) {
        spans_.push_back({int(b), lo, 0, {}});
        span = &spans_.back();
      }
      span->numel += hi - lo;
      AdamWRuns& runs = span->runs;
      if (!runs.decays.empty() && runs.decays.back() == p.spec.decay) runs.ends.back() = span->numel;
      else {
        runs.ends.push_back(span->numel);
        runs.decays.push_back(p.spec.decay);
      }
    }
  }
  // Bucket b's spans are [first_span_[b], first_span_[b + 1]) (spans are made in bucket order).
  first_span_.assign(buckets.size() + 1, spans_.size());
  for (size_t i = spans_.size(); i-- > 0;) {
    TRELLIS_CHECK(i == 0 || spans_[i - 1].bucket <= spans_[i].bucket, "ZeroOptimizer: AdamW spans out of bucket order");
    first_span_[size_t(spans_[i].bucket)] = i;
  }
  for (size_t b = buckets.size(); b-- > 0;) first_span_[b] = std::min(first_span_[b], first_span_[b + 1]);
}

ZeroOptimizer::~ZeroOptimizer() {
  if (data_ && stage_ < 3) data_->drop_gather_target(params_.flat_values());
}

Tensor ZeroOptimizer::owned_grads(int b) const {
  return grads_.slice(owned_at_[size_t(b)], {params_.buckets()[size_t(b)].piece});
}

template <typename F>
void ZeroOptimizer::for_each_owned(const std::vector<std::pair<int64_t, int64_t>>& ranges, F&& f) const {
  for (auto [begin, end] : ranges) {
    for (size_t b = 0; b < params_.buckets().size(); ++b) {
      const ParameterBucket& k = params_.buckets()[b];
      const int64_t lo_piece = k.offset + rank_in_group(int(b)) * k.piece;  // the piece in the flat layout
      const int64_t lo = std::max(begin, lo_piece), hi = std::min({end, lo_piece + k.piece, k.offset + k.numel});
      if (lo < hi) f(int(b), grads_.slice(owned_at_[b] + lo - lo_piece, {hi - lo}));
    }
  }
}

std::vector<Tensor> ZeroOptimizer::owned_grads(const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  std::vector<Tensor> out;
  for_each_owned(ranges, [&](int, const Tensor& t) { out.push_back(t); });
  return out;
}

std::vector<std::vector<Tensor>> ZeroOptimizer::owned_grads_by_bucket(const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  std::vector<std::vector<Tensor>> out(params_.buckets().size());
  for_each_owned(ranges, [&](int b, const Tensor& t) { out[size_t(b)].push_back(t); });
  return out;
}

void ZeroOptimizer::zero_owned_grads() {
  if (data_ && stage_ >= 2) fill(rt_, grads_, 0.0f);
}

void ZeroOptimizer::step(const AdamWHyper& h, float grad_scale) {
  // Sharded, each bucket's updated piece is all-gathered as soon as its spans are done, while the
  // next buckets update: the gathers (copy engines at two ranks) hide behind AdamW. Every rank
  // issues them for every bucket in order, also for a piece that is only padding (no spans).
  // Offloaded, bucket b+1's gradient piece comes down while the host updates bucket b.
  std::vector<CommHandle> gathers;
  const size_t nb = params_.buckets().size();
  AdamWHyper on_host = h;  // offloaded: the step's scalars come down with the first gradient piece
  if (offloaded() && h.scalars.defined()) {
    copy(rt_, host_scalars_, h.scalars);
    on_host.scalars = host_scalars_;
  }
  if (offloaded() && nb > 0) fetch_grads(first_span_[0], first_span_[1], 0);
  for (size_t b = 0; b < nb; ++b) {
    if (offloaded()) {
      if (b + 1 < nb) fetch_grads(first_span_[b + 1], first_span_[b + 2], int((b + 1) % 2));
      step_on_host(first_span_[b], first_span_[b + 1], int(b % 2), on_host, grad_scale);
    } else {
      for (size_t i = first_span_[b]; i < first_span_[b + 1]; ++i) {
        const Span& r = spans_[i];
        const Tensor values = params_.owned_values(r.bucket).slice(r.offset, {r.numel});
        const int64_t at = owned_at_[size_t(r.bucket)] + r.offset;
        adamw_step(rt_, master_.defined() ? master_.slice(at, {r.numel}) : values, m_.slice(at, {r.numel}),
                   v_.slice(at, {r.numel}), grads_.slice(at, {r.numel}), master_.defined() ? values : Tensor(), h,
                   grad_scale, &r.runs);
      }
    }
    if (data_ && !params_.buckets()[b].values_streamed && group_of(int(b)).size() > 1) {
      NvtxRange r("parameter_all_gather");
      gathers.push_back(group_of(int(b)).all_gather_async(params_.bucket_values(int(b)), params_.owned_values(int(b))));
    }
  }
  for (CommHandle& g : gathers) g.wait();
}

void ZeroOptimizer::fetch_grads(size_t first, size_t end, int slot) {
  for (size_t i = first; i < end; ++i) {
    const Span& r = spans_[i];
    copy(rt_, staging_[slot].slice(r.offset, {r.numel}),
         grads_.slice(owned_at_[size_t(r.bucket)] + r.offset, {r.numel}));
  }
  fetched_[slot]->record();
}

void ZeroOptimizer::step_on_host(size_t first, size_t end, int slot, const AdamWHyper& h, float grad_scale) {
  NvtxRange range("adamw_on_host");
  fetched_[slot]->wait();  // the gradient piece is in the staging buffer (and the step's scalars)
  // A skipped step (fp16 overflow) changes nothing: no update, and no parameters to send back up.
  if (h.scalars.defined() && h.scalars.ptr<float>()[kApply] == 0.0f) return;
  for (size_t i = first; i < end; ++i) {
    const Span& r = spans_[i];
    const int64_t at = owned_at_[size_t(r.bucket)] + r.offset;
    const Tensor values = host_values_.slice(at, {r.numel});
    cpu::adamw_step(rt_, master_.slice(at, {r.numel}), m_.slice(at, {r.numel}), v_.slice(at, {r.numel}),
                    staging_[slot].slice(r.offset, {r.numel}), params_.dtype() == DType::f32 ? Tensor() : values, h,
                    grad_scale, &r.runs);
    // Pinned: queued behind the next bucket's gradient copy. The host writes these values again
    // only after a later fence wait (the next step's first fetch is queued behind this copy).
    copy(rt_, params_.owned_values(r.bucket).slice(r.offset, {r.numel}), values);
  }
}

size_t ZeroOptimizer::host_state_bytes() const {
  if (!offloaded()) return 0;
  return master_buf_.bytes() + m_buf_.bytes() + v_buf_.bytes() + host_values_buf_.bytes() + staging_buf_[0].bytes() +
         staging_buf_[1].bytes();
}

size_t ZeroOptimizer::state_bytes() const {
  if (offloaded()) return grad_buf_.bytes();
  return master_buf_.bytes() + m_buf_.bytes() + v_buf_.bytes() + grad_buf_.bytes();
}

int64_t ZeroOptimizer::model_state_bytes(int64_t n, DType dtype, int stage, int data_size, bool offload,
                                         DType grad_dtype, int64_t experts, int expert_data) {
  const int64_t N = stage >= 1 ? data_size : 1;
  const int64_t e = int64_t(dtype_size(dtype)), master = dtype == DType::f32 ? 0 : dtype == DType::bf16 ? 2 : 4;
  if (experts > 0 && N > 1) {  // the experts' buckets apart, over the expert-data group
    const int64_t rest = model_state_bytes(n - experts, dtype, stage, data_size, offload, grad_dtype);
    if (expert_data > 1) return rest + model_state_bytes(experts, dtype, stage, expert_data, offload, grad_dtype);
    // Held by one rank each: kept whole, their reduced piece the whole bucket.
    return rest + experts * (e + 4 + 4) + (offload ? 0 : experts * (master + 8));
  }
  const int64_t g = int64_t(dtype_size(grad_dtype));
  const int64_t params = stage >= 3 ? n * e / N : n * e;
  const int64_t grads = stage >= 2 ? n * 4 / N : n * g + (N > 1 ? n * 4 / N : 0);  // + the reduced pieces (f32)
  return params + grads + (offload ? 0 : n * (master + 8) / N);
}

int64_t ZeroOptimizer::offloaded_state_bytes(int64_t n, DType dtype, int stage, int data_size) {
  const int64_t N = stage >= 1 ? data_size : 1;
  const int64_t master = dtype == DType::f16 ? 6 : 4;
  return n * (master + 8) / N;
}

int64_t ZeroOptimizer::offloaded_pinned_bytes(int64_t n, DType dtype, int stage, int data_size) {
  const int64_t N = stage >= 1 ? data_size : 1;
  return n * (dtype == DType::f32 ? 4 : 2) / N;
}

int64_t ZeroOptimizer::offload_staging_bytes(int64_t largest_bucket, int stage, int data_size, DType grad_dtype) {
  const int64_t N = stage >= 1 ? data_size : 1;
  const int64_t g = N > 1 ? 4 : int64_t(dtype_size(grad_dtype));
  return 2 * ((largest_bucket + N - 1) / N + 64) * g;  // + the padding a piece may carry
}

int64_t ZeroOptimizer::owned_real(int b) const {
  const ParameterBucket& k = params_.buckets()[size_t(b)];
  return std::clamp<int64_t>(k.numel - rank_in_group(b) * k.piece, 0, k.piece);
}

Communicator& ZeroOptimizer::group_of(int b) const {
  TRELLIS_CHECK(data_, "ZeroOptimizer::group_of: the state is not sharded");
  return params_.buckets()[size_t(b)].expert ? *expert_data_ : *data_;
}

int64_t ZeroOptimizer::rank_in_group(int b) const { return data_ ? params_.shard_of(b) : 0; }

void ZeroOptimizer::scatter(const Tensor& whole, const Tensor& owned) const {
  TRELLIS_CHECK(whole.numel() == params_.numel(), "ZeroOptimizer::scatter: not the whole stage's copy");
  for (size_t b = 0; b < params_.buckets().size(); ++b) {
    const int64_t real = owned_real(int(b));
    if (real > 0)
      copy(rt_, owned.slice(owned_at_[b], {real}),
           whole.slice(whole_at_[b] + rank_in_group(int(b)) * params_.buckets()[b].piece, {real}));
  }
  rt_.synchronize();  // `whole` may be host memory that the caller frees next
}

bool ZeroOptimizer::split_master() const { return master_.defined() && master_.dtype == DType::bf16; }

void ZeroOptimizer::reset_master() {
  if (offloaded()) {  // the host's copy of the parameters first, from the device
    for (size_t b = 0; b < params_.buckets().size(); ++b)
      copy(rt_, host_values_.slice(owned_at_[b], {params_.buckets()[b].piece}), params_.owned_values(int(b)));
    rt_.synchronize();
    if (split_master()) cpu::fill(rt_, master_, -0.0f);
    else if (params_.dtype() != DType::f32) cpu::cast(rt_, master_, host_values_);
    return;
  }
  if (split_master()) {
    fill(rt_, master_, -0.0f);  // low halves 0x8000 (the bits of bf16 -0.0): each master is its parameter
  } else if (master_.defined()) {
    for (size_t b = 0; b < params_.buckets().size(); ++b)
      cast(rt_, master_.slice(owned_at_[b], {params_.buckets()[b].piece}), params_.owned_values(int(b)));
  }
}

Tensor ZeroOptimizer::master_values(std::vector<char>& host) const {
  if (!split_master()) return params_.dtype() == DType::f32 ? Tensor() : master_;
  const int64_t n = owned_numel_;
  const size_t count = size_t(n);
  std::vector<bf16_t> hi(count);
  std::vector<uint16_t> lo(count);
  copy(rt_, Tensor(lo.data(), DType::bf16, Device::CPU(), {n}), master_);
  if (offloaded()) {
    copy(rt_, Tensor(hi.data(), DType::bf16, Device::CPU(), {n}), host_values_);
  } else {
    for (size_t b = 0; b < params_.buckets().size(); ++b)
      copy(rt_, Tensor(hi.data() + owned_at_[b], DType::bf16, Device::CPU(), {params_.buckets()[b].piece}),
           params_.owned_values(int(b)));
  }
  rt_.synchronize();
  host.resize(size_t(n) * 4);
  auto* out = reinterpret_cast<float*>(host.data());
  for (int64_t i = 0; i < n; ++i) out[i] = join_master(hi[size_t(i)], lo[size_t(i)]);
  return Tensor(host.data(), DType::f32, Device::CPU(), {n});
}

void ZeroOptimizer::set_master(const Tensor& owned) {
  TRELLIS_CHECK(has_separate_master() && owned.numel() == owned_numel_ && owned.dtype == DType::f32,
                "ZeroOptimizer::set_master: not this rank's f32 master weights");
  if (!split_master()) {
    copy(rt_, master_, owned);
    rt_.synchronize();  // `owned` may be host memory that the caller frees next
    return;
  }
  const int64_t n = owned_numel_;
  const size_t count = size_t(n);
  std::vector<float> w(count);
  copy(rt_, Tensor(w.data(), DType::f32, Device::CPU(), {n}), owned);
  rt_.synchronize();
  std::vector<bf16_t> hi(count);
  std::vector<uint16_t> lo(count);
  for (int64_t i = 0; i < n; ++i) trellis::split_master(w[size_t(i)], hi[size_t(i)], lo[size_t(i)]);
  copy(rt_, master_, Tensor(lo.data(), DType::bf16, Device::CPU(), {n}));
  if (offloaded()) copy(rt_, host_values_, Tensor(hi.data(), DType::bf16, Device::CPU(), {n}));
  for (size_t b = 0; b < params_.buckets().size(); ++b)
    copy(rt_, params_.owned_values(int(b)),
         Tensor(hi.data() + owned_at_[b], DType::bf16, Device::CPU(), {params_.buckets()[b].piece}));
  rt_.synchronize();  // the host vectors go next
}

Tensor ZeroOptimizer::whole_values(std::vector<char>& host) const {
  const StoreSharding& sh = params_.sharding();
  if (sh.shards == 1 && !sh.stream_values) return params_.flat_values().slice(0, {params_.numel()});
  const DType dt = params_.dtype();
  const size_t e = dtype_size(dt);
  host.resize(size_t(params_.numel()) * e);
  const Tensor whole(host.data(), dt, Device::CPU(), {params_.numel()});
  Buffer gathered;  // one streamed bucket at a time (stage 3)
  for (size_t b = 0; b < params_.buckets().size(); ++b) {
    const ParameterBucket& k = params_.buckets()[b];
    Tensor src = params_.bucket_values(int(b));
    if (k.values_streamed) {
      if (gathered.bytes() == 0) {
        int64_t largest = 0;
        for (const ParameterBucket& o : params_.buckets()) largest = std::max(largest, o.padded);
        gathered = Buffer(rt_.allocator(), size_t(largest) * e, "parameter gather");
      }
      src = gathered.tensor(dt, {k.padded});
      group_of(int(b)).all_gather(src, params_.owned_values(int(b)));
    }
    copy(rt_, whole.slice(whole_at_[b], {k.numel}), src.slice(0, {k.numel}));
  }
  rt_.synchronize();  // the host copy is complete before the bucket buffer goes
  return whole;
}

void ZeroOptimizer::set_values(const Tensor& whole) {
  TRELLIS_CHECK(whole.numel() == params_.numel() && whole.dtype == params_.dtype(), "ZeroOptimizer::set_values: not the whole stage's parameters");
  for (size_t b = 0; b < params_.buckets().size(); ++b) {
    const ParameterBucket& k = params_.buckets()[b];
    if (!k.values_streamed) {
      copy(rt_, params_.bucket_values(int(b)).slice(0, {k.numel}), whole.slice(whole_at_[b], {k.numel}));
    } else if (const int64_t real = owned_real(int(b)); real > 0) {
      copy(rt_, params_.owned_values(int(b)).slice(0, {real}), whole.slice(whole_at_[b] + rank_in_group(int(b)) * k.piece, {real}));
    }
  }
  reset_master();  // set_master may set them afterwards
  rt_.synchronize();  // `whole` may be host memory that the caller frees next
}

}  // namespace trellis
