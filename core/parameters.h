// The model's parameters as named views into one flat buffer (compute dtype), with gradients in
// a second flat buffer (f32). Initialization is keyed by (seed, name, element index), so any
// shard of a parameter is exactly the slice one rank would have drawn.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/runtime.h"

namespace trellis {

enum class Init { normal, zeros, ones };

struct ParameterSpec {
  std::string name;  // "h.3.attn.qkv.w"
  Shape shape;
  Init init = Init::normal;
  float std = 0.02f;
  bool decay = false;  // weight decay applies to 2-D weights only
};

struct Parameter {
  ParameterSpec spec;
  int64_t offset = 0;  // in elements, within the flat buffers
  Tensor value;        // view into the parameter buffer (compute dtype)
  Tensor grad;         // view into the gradient buffer (f32)
};

class ParameterStore {
 public:
  ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype);

  // Draws every parameter from (seed, name, index) on the host and copies it to the device.
  void initialize(uint64_t seed);
  void zero_grads();

  const Parameter& operator[](size_t i) const { return params_[i]; }
  const Parameter& get(const std::string& name) const;
  size_t size() const { return params_.size(); }
  const std::vector<Parameter>& all() const { return params_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Tensor flat_values() const { return values_.tensor(dtype_, {numel_}); }
  Tensor flat_grads() const { return grads_.tensor(DType::f32, {numel_}); }

 private:
  Runtime& rt_;
  DType dtype_;
  int64_t numel_ = 0;
  std::vector<Parameter> params_;
  Buffer values_;
  Buffer grads_;
};

// The initial value of element `index` of parameter `name` (for tests and shards).
float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t index);

}  // namespace trellis
