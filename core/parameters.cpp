// Flat parameter/gradient buffers and layout-independent initialization.
#include "core/parameters.h"

#include <cmath>
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

}  // namespace

float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t index) {
  switch (spec.init) {
    case Init::zeros: return 0.0f;
    case Init::ones: return 1.0f;
    case Init::normal: break;
  }
  uint64_t key = hash_name(seed, spec.name);
  Philox4 r = philox4x32(uint32_t(index), uint32_t(uint64_t(index) >> 32), 0, 0, uint32_t(key), uint32_t(key >> 32));
  // Box-Muller on two 24-bit uniforms; u1 in (0, 1] so the log is finite.
  double u1 = (double(r.v[0] >> 8) + 1.0) / 16777216.0;
  double u2 = double(r.v[1] >> 8) / 16777216.0;
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return float(z * spec.std);
}

ParameterStore::ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype)
    : rt_(rt), dtype_(dtype) {
  for (const ParameterSpec& s : specs) {
    Parameter p;
    p.spec = s;
    p.offset = numel_;
    numel_ += s.shape.numel();
    params_.push_back(p);
  }
  values_ = Buffer(rt.allocator(), size_t(numel_) * dtype_size(dtype), "parameters");
  grads_ = Buffer(rt.allocator(), size_t(numel_) * 4, "gradients");
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

void ParameterStore::zero_grads() { fill(rt_, flat_grads(), 0.0f); }

}  // namespace trellis
