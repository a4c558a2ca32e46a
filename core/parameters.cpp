// Flat parameter/gradient buffers and layout-independent initialization.
#include "core/parameters.h"

#include <cmath>
#include <string>
#include <vector>

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
  TRELLIS_CHECK(dim >= 0 && dim < local.rank && index >= 0 && index < parts && groups >= 1 &&
                    local[dim] % groups == 0,
                "bad tensor split: dim " + std::to_string(dim) + ", part " + std::to_string(index) + " of " +
                    std::to_string(parts) + ", " + std::to_string(groups) + " groups, local shape " + local.str());
  Shape g = local;
  g.dims[size_t(dim)] *= parts;
  return g;
}

Shape TensorSplit::local_shape(const Shape& global) const {
  if (replicated()) return global;
  TRELLIS_CHECK(dim >= 0 && dim < global.rank && global[dim] % (int64_t(groups) * parts) == 0,
                "cannot split " + global.str() + " along dim " + std::to_string(dim) + " into " +
                    std::to_string(groups) + " groups of " + std::to_string(parts) + " parts");
  Shape l = global;
  l.dims[size_t(dim)] /= parts;
  global_shape(l);  // validates the rest
  return l;
}

int64_t TensorSplit::global_index(const Shape& local, int64_t local_index) const {
  if (replicated()) return local_index;
  // local = (outer, n, inner) with n = groups * piece; global = (outer, n * parts, inner), and
  // local row j of group g is global row (g * parts + index) * piece + j % piece.
  const int64_t inner = inner_size(local, dim), n = local[dim], piece = n / groups;
  const int64_t outer = local_index / (n * inner), j = local_index / inner % n, in = local_index % inner;
  const int64_t gj = (j / piece * parts + index) * piece + j % piece;
  return (outer * n * parts + gj) * inner + in;
}

ParameterSpec shard_spec(const ParameterSpec& full, int dim, int parts, int index, int groups) {
  TRELLIS_CHECK(full.split.replicated(), full.name + " is already split");
  ParameterSpec s = full;
  s.split = TensorSplit{dim, parts, index, groups};
  s.shape = s.split.local_shape(full.shape);
  return s;
}

float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t local_index) {
  switch (spec.init) {
    case Init::zeros: return 0.0f;
    case Init::ones: return 1.0f;
    case Init::normal: break;
  }
  const int64_t index = spec.split.global_index(spec.shape, local_index);
  uint64_t key = hash_name(seed, spec.name);
  Philox4 r = philox4x32(uint32_t(index), uint32_t(uint64_t(index) >> 32), 0, 0, uint32_t(key), uint32_t(key >> 32));
  // Box-Muller on two 24-bit uniforms; u1 in (0, 1] so the log is finite.
  double u1 = (double(r.v[0] >> 8) + 1.0) / 16777216.0;
  double u2 = double(r.v[1] >> 8) / 16777216.0;
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return float(z * spec.std);
}

ParameterStore::ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype,
                               int64_t pad_multiple)
    : rt_(rt), dtype_(dtype) {
  for (const ParameterSpec& s : specs) {
    s.global_shape();  // validates the split
    Parameter p;
    p.spec = s;
    p.offset = numel_;
    numel_ += s.shape.numel();
    params_.push_back(p);
  }
  padded_numel_ = (numel_ + pad_multiple - 1) / pad_multiple * pad_multiple;
  values_ = Buffer(rt.allocator(), size_t(padded_numel_) * dtype_size(dtype), "parameters");
  grads_ = Buffer(rt.allocator(), size_t(padded_numel_) * 4, "gradients");
  fill(rt, padded_values().slice(numel_, {padded_numel_ - numel_}), 0.0f);
  for (Parameter& p : params_) {
    p.value = values_.tensor(dtype, p.spec.shape, size_t(p.offset) * dtype_size(dtype));
    p.grad = grads_.tensor(DType::f32, p.spec.shape, size_t(p.offset) * 4);
  }
}

const Parameter& ParameterStore::get(const std::string& name) const {
  for (const Parameter& p : params_)
    if (p.spec.name == name) return p;
  TRELLIS_FATAL("no parameter named " + name);
}

void ParameterStore::initialize(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(numel_));
  for (const Parameter& p : params_) {
    int64_t n = p.spec.shape.numel();
    float* dst = host.data() + p.offset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = initial_value(seed, p.spec, i);
  }
  Buffer staging(rt_.host_allocator(), size_t(numel_) * dtype_size(dtype_), "parameter staging");
  Tensor host_f32(host.data(), DType::f32, Device::CPU(), {numel_});
  Tensor stage = staging.tensor(dtype_, {numel_});
  Runtime host_rt(RuntimeOptions{});
  cast(host_rt, stage, host_f32);
  copy(rt_, flat_values(), stage);
  rt_.synchronize();
  zero_grads();
}

void ParameterStore::zero_grads() { fill(rt_, padded_grads(), 0.0f); }

}  // namespace trellis
