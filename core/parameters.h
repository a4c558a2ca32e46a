// The model's parameters as named views into one flat buffer (compute dtype), with gradients in
// a second flat buffer (f32). Initialization is keyed by (seed, name, GLOBAL element index), so a
// tensor-parallel shard of a parameter is exactly the slice of what one rank would have drawn.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/runtime.h"

namespace trellis {

enum class Init { normal, zeros, ones };

// How a parameter is split over the tensor-parallel group. Dimension `dim` of the full tensor is
// viewed as `groups` equal groups, each cut into `parts` equal pieces; rank `index` holds its piece
// of every group, in group order. groups = 3 splits the fused qkv weight so that each rank holds
// [q | k | v] of its own heads. parts = 1 is a replicated parameter.
struct TensorSplit {
  int dim = 0;  // 0 = rows (out features of a weight), 1 = columns (in features)
  int parts = 1;
  int index = 0;
  int groups = 1;

  bool replicated() const { return parts == 1; }
  // The full tensor's shape, from a shard of shape `local`.
  Shape global_shape(const Shape& local) const;
  // The shard's shape, from the full tensor's (fatal unless groups * parts divides the dimension).
  Shape local_shape(const Shape& global) const;
  // Flat index in the full tensor of the shard's element `local_index`.
  int64_t global_index(const Shape& local, int64_t local_index) const;
};

struct ParameterSpec {
  std::string name;  // "h.3.attn.qkv.w"
  Shape shape;       // this rank's (local) shape
  Init init = Init::normal;
  float std = 0.02f;
  bool decay = false;  // weight decay applies to 2-D weights only
  TensorSplit split = {};  // default: replicated, shape is the full shape

  Shape global_shape() const { return split.global_shape(shape); }
};

// `full` (shape = the full shape) as rank `index` of `parts` holds it, split along `dim`.
ParameterSpec shard_spec(const ParameterSpec& full, int dim, int parts, int index, int groups = 1);

struct Parameter {
  ParameterSpec spec;
  int64_t offset = 0;  // in elements, within the flat buffers
  Tensor value;        // view into the parameter buffer (compute dtype)
  Tensor grad;         // view into the gradient buffer (f32)
};

class ParameterStore {
 public:
  // The flat buffers hold numel() elements, followed by zeros up to a multiple of pad_multiple
  // (ZeRO stages >= 1 split them evenly over the data group: padded_numel() / data size each).
  ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype, int64_t pad_multiple = 1);

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
  int64_t padded_numel() const { return padded_numel_; }
  Tensor padded_values() const { return values_.tensor(dtype_, {padded_numel_}); }
  Tensor padded_grads() const { return grads_.tensor(DType::f32, {padded_numel_}); }

 private:
  Runtime& rt_;
  DType dtype_;
  int64_t numel_ = 0, padded_numel_ = 0;
  std::vector<Parameter> params_;
  Buffer values_;
  Buffer grads_;
};

// The initial value of LOCAL element `index` of a parameter: the full tensor's element at the
// matching global index, whatever the split.
float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t index);

}  // namespace trellis
