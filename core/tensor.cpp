// String forms of shapes and tensors, for error messages.
#include "core/tensor.h"

namespace trellis {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype)) + shape.str() + " on " + device.str();
}

}  // namespace trellis
