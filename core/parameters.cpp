// Flat parameter/gradient buffers and layout-independent initialization.
#include "core/parameters.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/ops.h"
#include "core/philox.h"

namespace trellis {

namespace {

uint64_t hash_name(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name, seeded
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Product of the dimensions after `dim`.
int64_t inner_size(const Shape& s, int dim) {
  int64_t n = 1;
  for (int d = dim + 1; d < s.rank; ++d) n *= s[d];
  return n;
}

}  // namespace

Shape TensorSplit::global_shape(const Shape& local) const {
  if (replicated()) return local;
  TRELLIS_CHECK(dim >= 0 && dim < local.rank && index >= 0 && index < parts && groups >= 1 && first_units >= 1 &&
                    local[dim] % units() == 0,
                "bad tensor split: dim " + std::to_string(dim) + ", part " + std::to_string(index) + " of " +
                    std::to_string(parts) + ", " + std::to_string(groups) + " groups of " + std::to_string(units()) +
                    " units, local shape " + local.str());
  Shape g = local;
  g.dims[size_t(dim)] *= parts;
  return g;
}

Shape TensorSplit::local_shape(const Shape& global) const {
  if (replicated()) return global;
  TRELLIS_CHECK(dim >= 0 && dim < global.rank && first_units >= 1 && global[dim] % (int64_t(units()) * parts) == 0,
                "cannot split " + global.str() + " along dim " + std::to_string(dim) + " into " +
                    std::to_string(groups) + " groups (" + std::to_string(units()) + " units) of " +
                    std::to_string(parts) + " parts");
  Shape l = global;
  l.dims[size_t(dim)] /= parts;
  global_shape(l);  // validates the rest
  return l;
}

int64_t TensorSplit::global_index(const Shape& local, int64_t local_index) const {
  if (replicated()) return local_index;
  // local = (outer, n, inner), global = (outer, n * parts, inner); local row j, at offset o in group
  // g (local rows [b, e)), is global row parts * b + index * (e - b) + o.
  const int64_t inner = inner_size(local, dim), n = local[dim];
  const int64_t outer = local_index / (n * inner), j = local_index / inner % n, in = local_index % inner;
  int g = 0;
  while (group_range(n, g).second <= j) ++g;
  const auto [b, e] = group_range(n, g);
  const int64_t gj = parts * b + index * (e - b) + (j - b);
  return (outer * n * parts + gj) * inner + in;
}

// Padded to a multiple of shards x 64 when sharded, so that every piece, and every bucket after it,
// starts 256-byte aligned for f32 (128 for 16-bit) as the vectorized kernels and cuBLASLt's fastest
// paths want.
int64_t padded_bucket_size(int64_t n, int shards) {
  const int64_t multiple = shards > 1 ? int64_t(shards) * 64 : 1;
  return (n + multiple - 1) / multiple * multiple;
}

ParameterSpec shard_spec(const ParameterSpec& full, int dim, int parts, int index, int groups, int first_units) {
  TRELLIS_CHECK(full.split.replicated(), full.name + " is already split");
  ParameterSpec s = full;
  s.split = TensorSplit{dim, parts, index, groups, first_units};
  s.shape = s.split.local_shape(full.shape);
  return s;
}

namespace {

// The normal draw of GLOBAL element `index` of a parameter whose name hashed (with the seed) to `key`.
float normal_draw(uint64_t key, float std, int64_t index) {
  Philox4 r = philox4x32(uint32_t(index), uint32_t(uint64_t(index) >> 32), 0, 0, uint32_t(key), uint32_t(key >> 32));
  // Box-Muller on two 24-bit uniforms; u1 in (0, 1] so the log is finite.
  double u1 = (double(r.v[0] >> 8) + 1.0) / 16777216.0;
  double u2 = double(r.v[1] >> 8) / 16777216.0;
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return float(z * std);
}

// dst[i] = initial_value(seed, spec, begin + i) for i < end - begin, on every core.
void initial_values(uint64_t seed, const ParameterSpec& spec, int64_t begin, int64_t end, float* dst) {
  if (spec.init != Init::normal) {
    std::fill(dst, dst + (end - begin), spec.init == Init::ones ? 1.0f : 0.0f);
    return;
  }
  const uint64_t key = hash_name(seed, spec.name);  // once per parameter, not per element
#pragma omp parallel for schedule(static)
  for (int64_t i = begin; i < end; ++i) dst[i - begin] = normal_draw(key, spec.std, spec.split.global_index(spec.shape, i));
}

}  // namespace

float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t local_index) {
  switch (spec.init) {
    case Init::zeros: return 0.0f;
    case Init::ones: return 1.0f;
    case Init::normal: break;
  }
  return normal_draw(hash_name(seed, spec.name), spec.std, spec.split.global_index(spec.shape, local_index));
}

std::vector<ParameterBucket> plan_buckets(const std::vector<ParameterSpec>& specs, int shards, int expert_shards) {
  std::vector<ParameterBucket> buckets;
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParameterSpec& s = specs[i];
    s.global_shape();  // validates the split
    // A block's parameters are one bucket (its experts', under expert parallelism, another); every
    // other parameter is a bucket of its own.
    if (buckets.empty() || s.bucket != specs[i - 1].bucket || s.expert != specs[i - 1].expert) {
      ParameterBucket b;
      b.first = i;
      b.offset = offset;
      b.block = s.bucket >= 0 ? s.bucket : -1;
      b.expert = s.expert;
      for (const ParameterBucket& o : buckets)
        TRELLIS_CHECK(b.block < 0 || o.block != b.block || o.expert != b.expert,
                      "ParameterStore: block " + std::to_string(b.block) + "'s " + (b.expert ? "experts are" : "parameters are") +
                          " not contiguous");
      buckets.push_back(b);
    }
    ParameterBucket& b = buckets.back();
    b.numel += s.shape.numel();
    b.end = i + 1;
    const int n = b.expert ? expert_shards : shards;
    b.padded = padded_bucket_size(b.numel, n);
    b.piece = b.padded / n;
    offset = b.offset + b.padded;
  }
  return buckets;
}

ParameterStore::ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype,
                               const StoreSharding& sharding, DType grad_dtype)
    : rt_(rt), dtype_(dtype), grad_dtype_(grad_dtype), sharding_(sharding) {
  TRELLIS_CHECK(grad_dtype == DType::f32 || (grad_dtype == dtype && sharding.shards == 1 && !sharding.stream_grads),
                "ParameterStore: gradients are f32, or the parameters' dtype in an unsharded store");
  TRELLIS_CHECK(sharding.shards >= 1 && sharding.shard >= 0 && sharding.shard < sharding.shards,
                "ParameterStore: bad shard " + std::to_string(sharding.shard) + " of " + std::to_string(sharding.shards));
  TRELLIS_CHECK(sharding.expert_shards >= 1 && sharding.expert_shard >= 0 && sharding.expert_shard < sharding.expert_shards,
                "ParameterStore: bad expert shard " + std::to_string(sharding.expert_shard) + " of " +
                    std::to_string(sharding.expert_shards));
  TRELLIS_CHECK(!sharding.stream_values || sharding.stream_grads, "ParameterStore: streamed values need streamed gradients");
  buckets_ = plan_buckets(specs, sharding.shards, sharding.expert_shards);
  for (const ParameterBucket& b : buckets_) {
    int64_t at = b.offset;
    for (size_t i = b.first; i < b.end; ++i) {
      Parameter p;
      p.spec = specs[i];
      p.offset = at;
      at += specs[i].shape.numel();
      params_.push_back(p);
    }
    numel_ += b.numel;
    padded_numel_ += b.padded;
  }
  // Storage: the whole padded layout, less what is streamed (a stage-3 bucket keeps its piece).
  int64_t value_elems = 0, grad_elems = 0;
  for (ParameterBucket& b : buckets_) {
    // A block's experts held by one rank of their expert-data group have nothing to shard: kept whole.
    const bool streamable = b.block >= 0 && (!b.expert || sharding.expert_shards > 1);
    b.grads_streamed = sharding.stream_grads && streamable;
    b.values_streamed = sharding.stream_values && streamable;
    value_at_.push_back(value_elems);
    value_elems += b.values_streamed ? b.piece : b.padded;
    grad_at_.push_back(b.grads_streamed ? -1 : grad_elems);
    grad_elems += b.grads_streamed ? 0 : b.padded;
  }
  values_ = Buffer(rt.allocator(), size_t(value_elems) * dtype_size(dtype), "parameters");
  const size_t ge = dtype_size(grad_dtype);
  grads_ = Buffer(rt.allocator(), size_t(grad_elems) * ge, "gradients");
  fill(rt, values_.tensor(dtype, {value_elems}), 0.0f);  // the buckets' padding stays zero
  bound_values_.assign(buckets_.size(), Tensor());
  bound_grads_.assign(buckets_.size(), Tensor());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!buckets_[b].values_streamed) bind_values_unchecked(int(b), values_.tensor(dtype, {buckets_[b].padded}, size_t(value_at_[b]) * dtype_size(dtype)));
    if (!buckets_[b].grads_streamed) bind_grads_unchecked(int(b), grads_.tensor(grad_dtype, {buckets_[b].padded}, size_t(grad_at_[b]) * ge));
  }
}

void ParameterStore::bind_values_unchecked(int b, const Tensor& slot) {
  const ParameterBucket& k = buckets_.at(size_t(b));
  for (size_t i = k.first; i < k.end; ++i) {
    Parameter& p = params_[i];
    p.value = slot.defined() ? slot.slice(p.offset - k.offset, p.spec.shape) : Tensor();
  }
  bound_values_.at(size_t(b)) = slot.defined() ? slot.slice(0, {k.padded}) : Tensor();
}

void ParameterStore::bind_grads_unchecked(int b, const Tensor& slot) {
  const ParameterBucket& k = buckets_.at(size_t(b));
  for (size_t i = k.first; i < k.end; ++i) {
    Parameter& p = params_[i];
    p.grad = slot.defined() ? slot.slice(p.offset - k.offset, p.spec.shape) : Tensor();
  }
  bound_grads_.at(size_t(b)) = slot.defined() ? slot.slice(0, {k.padded}) : Tensor();
}

void ParameterStore::bind_values(int b, const Tensor& slot) {
  TRELLIS_CHECK(buckets_.at(size_t(b)).values_streamed, "bind_values: bucket " + std::to_string(b) + " is not streamed");
  TRELLIS_CHECK(!slot.defined() || (slot.dtype == dtype_ && slot.numel() >= buckets_[size_t(b)].padded), "bind_values: slot too small");
  bind_values_unchecked(b, slot);
}

void ParameterStore::bind_grads(int b, const Tensor& slot) {
  TRELLIS_CHECK(buckets_.at(size_t(b)).grads_streamed, "bind_grads: bucket " + std::to_string(b) + " is not streamed");
  TRELLIS_CHECK(!slot.defined() || (slot.dtype == grad_dtype_ && slot.numel() >= buckets_[size_t(b)].padded), "bind_grads: slot too small");
  bind_grads_unchecked(b, slot);
}

int ParameterStore::bucket_of_block(int layer) const {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].block == layer && !buckets_[b].expert) return int(b);
  TRELLIS_FATAL("ParameterStore: no bucket of block " + std::to_string(layer));
}

int ParameterStore::experts_bucket_of_block(int layer) const {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].block == layer && buckets_[b].expert) return int(b);
  return -1;
}

Tensor ParameterStore::bucket_grads(int b) const { return bound_grads_.at(size_t(b)); }
Tensor ParameterStore::bucket_values(int b) const { return bound_values_.at(size_t(b)); }

int ParameterStore::shard_of(int b) const {
  return buckets_.at(size_t(b)).expert ? sharding_.expert_shard : sharding_.shard;
}

Tensor ParameterStore::owned_values(int b) const {
  const ParameterBucket& k = buckets_.at(size_t(b));
  const int64_t at = value_at_[size_t(b)] + (k.values_streamed ? 0 : int64_t(shard_of(b)) * k.piece);
  return values_.tensor(dtype_, {k.piece}, size_t(at) * dtype_size(dtype_));
}

Tensor ParameterStore::flat_values() const {
  TRELLIS_CHECK(!sharding_.stream_values, "flat_values: the values are streamed (ZeRO stage 3)");
  return values_.tensor(dtype_, {padded_numel_});
}

Tensor ParameterStore::flat_grads() const {
  TRELLIS_CHECK(!sharding_.stream_grads, "flat_grads: the gradients are streamed (ZeRO stage >= 2)");
  return grads_.tensor(grad_dtype_, {padded_numel_});
}

const Tensor& value_or_empty(const Parameter* p) {
  static const Tensor empty;
  return p ? p->value : empty;
}

const Tensor& grad_or_empty(const Parameter* p) {
  static const Tensor empty;
  return p ? p->grad : empty;
}

const Parameter& ParameterStore::get(const std::string& name) const {
  if (const Parameter* p = find(name)) return *p;
  TRELLIS_FATAL("no parameter named " + name);
}

const Parameter* ParameterStore::find(const std::string& name) const {
  for (const Parameter& p : params_)
    if (p.spec.name == name) return &p;
  return nullptr;
}

void ParameterStore::initialize(uint64_t seed, Communicator* data) {
  const bool split = data && data->size() > 1;
  const bool sharded = sharding_.shards > 1;
  TRELLIS_CHECK(!split || !sharded || (data->size() == sharding_.shards && data->rank() == sharding_.shard),
                "ParameterStore::initialize: the data group is not the one the store is sharded over");
  TRELLIS_CHECK(!split || std::none_of(buckets_.begin(), buckets_.end(), [](const ParameterBucket& k) { return k.expert; }),
                "ParameterStore::initialize: the data group's ranks hold different experts (initialize each alone)");
  // Unsharded and split: this rank draws storage elements [begin, end) of `total`.
  const int64_t total = int64_t(values_.bytes() / dtype_size(dtype_));
  const int64_t range = split ? (total + data->size() - 1) / data->size() : total;
  const int64_t begin_all = split && !sharded ? std::min(total, data->rank() * range) : 0;
  const int64_t end_all = split && !sharded ? std::min(total, begin_all + range) : total;
  std::vector<float> host(size_t(total), 0.0f);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ParameterBucket& k = buckets_[b];
    // Bucket-relative [lo, hi) drawn here: a streamed bucket keeps only this rank's piece; split,
    // a sharded store draws its pieces and an unsharded one its range of the storage.
    const bool piece = k.values_streamed || (split && sharded);
    int64_t lo = piece ? int64_t(shard_of(int(b))) * k.piece : 0;
    int64_t hi = piece ? lo + k.piece : k.padded;
    const int64_t at = value_at_[b] - (k.values_streamed ? lo : 0);  // storage index of bucket element 0
    lo = std::max(lo, begin_all - at);
    hi = std::min(hi, end_all - at);
    for (size_t i = k.first; i < k.end && lo < hi; ++i) {
      const Parameter& p = params_[i];
      const int64_t base = p.offset - k.offset;  // the parameter's first element, bucket-relative
      const int64_t begin = std::max(lo, base), end = std::min(hi, base + p.spec.shape.numel());
      if (begin < end) initial_values(seed, p.spec, begin - base, end - base, host.data() + (at + begin));
    }
  }
  Buffer staging(rt_.host_allocator(), size_t(total) * dtype_size(dtype_), "parameter staging");
  Tensor host_f32(host.data(), DType::f32, Device::CPU(), {total});
  Tensor stage = staging.tensor(dtype_, {total});
  Runtime host_rt(RuntimeOptions{});
  cast(host_rt, stage, host_f32);
  copy(rt_, values_.tensor(dtype_, {total}), stage);
  if (split) {  // the rest from the other data ranks, which hold the same parameters
    std::vector<CommHandle> pending;
    if (sharded) {
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (!buckets_[b].values_streamed) pending.push_back(data->all_gather_async(bucket_values(int(b)), owned_values(int(b))));
    } else {
      for (int r = 0; r < data->size(); ++r) {
        const int64_t from = std::min(total, r * range), n = std::min(total, from + range) - from;
        if (n > 0) pending.push_back(data->broadcast_async(values_.tensor(dtype_, {n}, size_t(from) * dtype_size(dtype_)), r));
      }
    }
    for (CommHandle& h : pending) h.wait();
  }
  rt_.synchronize();
  zero_grads();
}

void ParameterStore::zero_grads() {
  bool any_first_write = false;
  for (Parameter& p : params_) {
    p.grad_fresh = p.first_write;
    any_first_write = any_first_write || p.first_write;
  }
  if (grads_.bytes() == 0) return;
  if (!any_first_write) {
    fill(rt_, grads_.tensor(grad_dtype_, {int64_t(grads_.bytes() / dtype_size(grad_dtype_))}), 0.0f);
    return;
  }
  // The other gradients in the store, contiguous runs in one fill each (the buckets' padding stays
  // zero from the constructor's fill: no op writes it).
  const size_t ge = dtype_size(grad_dtype_);
  char* run = nullptr;
  int64_t run_n = 0;
  auto flush = [&] {
    if (run_n > 0) fill(rt_, Tensor(run, grad_dtype_, rt_.device(), {run_n}), 0.0f);
    run_n = 0;
  };
  for (const ParameterBucket& b : buckets_) {
    if (b.grads_streamed) continue;
    for (size_t i = b.first; i < b.end; ++i) {
      const Parameter& p = params_[i];
      if (p.first_write) continue;
      char* at = static_cast<char*>(p.grad.data);
      if (run_n > 0 && at != run + size_t(run_n) * ge) flush();
      if (run_n == 0) run = at;
      run_n += p.grad.numel();
    }
  }
  flush();
}

int64_t largest_bucket_numel(const std::vector<ParameterSpec>& specs) {
  int64_t largest = 0, run = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i > 0 && (specs[i].bucket != specs[i - 1].bucket || specs[i].expert != specs[i - 1].expert))
      run = 0;  // as plan_buckets cuts buckets
    run += specs[i].shape.numel();
    largest = std::max(largest, run);
  }
  return largest;
}

void ParameterStore::write_first(const Parameter& p) {
  const ptrdiff_t i = &p - params_.data();
  TRELLIS_CHECK(i >= 0 && size_t(i) < params_.size(), "write_first: " + p.spec.name + " is not in this store");
  params_[size_t(i)].first_write = true;
}

void ParameterStore::check_grads_written() const {
  for (const Parameter& p : params_)
    TRELLIS_CHECK(!p.grad_fresh, "internal: the gradient of " + p.spec.name +
                                     " was not written in this step (a write_first parameter must be)");
}

}  // namespace trellis
