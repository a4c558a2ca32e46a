// Private helpers of the CPU backend: dtype dispatch, element loads/stores, scratch carving.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/runtime.h"
#include "core/tensor.h"

namespace trellis::cpu {

// Loops shorter than this run on one thread (the fork/join costs more than the work).
constexpr int64_t kParallelMin = 1 << 14;

// Calls f(T{}) with T = float, bf16_t or f16_t matching the float dtype t.
template <typename F> void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(bf16_t{}); return;
    case DType::f16: f(f16_t{}); return;
    default: TRELLIS_FATAL(std::string(op) + ": unsupported dtype " + std::string(dtype_name(t)));
  }
}

// Last dimension and the product of the others. Same as Tensor::cols()/rows(), written so that
// GCC 12 at -O2 does not see a negative index into Shape::dims (a false -Warray-bounds).
inline int64_t inner_dim(const Tensor& t) {
  const int r = t.shape.rank;
  return r > 0 && r <= kMaxDims ? t.shape.dims[size_t(r - 1)] : 1;
}
inline int64_t outer_dim(const Tensor& t) {
  const int64_t c = inner_dim(t);
  return c ? t.numel() / c : 0;
}

inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

template <typename T> inline float load(const T* p, int64_t i) { return to_float(p[i]); }
template <typename T> inline void store(T* p, int64_t i, float v) { p[i] = from_float<T>(v); }

// Element i of a float tensor (a parameter gradient: f32, or 16-bit under train.grad_dtype) set to
// its old value (if accumulate) + sum, rounded once.
inline void add_into(const Tensor& out, int64_t i, double sum, bool accumulate) {
  dispatch_float(out.dtype, "add_into", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.data);
    store(p, i, float((accumulate ? double(load(p, i)) : 0.0) + sum));
  });
}

// Converts n elements of a float tensor's storage to f32 (a plain copy for f32).
void to_f32(float* dst, const Tensor& src, int64_t n);
// Writes n f32 values into a float tensor's storage, rounded to its dtype.
void from_f32(const Tensor& dst, const float* src, int64_t n);

// Carves consecutive 64-byte aligned f32 arrays out of the runtime's scratch space.
class ScratchF32 {
 public:
  // Sizes in floats of every array that will be taken, so the scratch is grown once.
  ScratchF32(Runtime& rt, std::initializer_list<int64_t> sizes);
  float* take(int64_t n);

 private:
  char* base_ = nullptr;
  size_t used_ = 0, total_ = 0;
};

}  // namespace trellis::cpu
