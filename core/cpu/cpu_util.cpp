// Helpers shared by the CPU ops: f32 staging conversions and the scratch carver.
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void to_f32(float* dst, const Tensor& src, int64_t n) {
  dispatch_float(src.dtype, "to_f32", [&](auto tag) {
    using T = decltype(tag);
    const T* s = src.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = load(s, i);
  });
}

void from_f32(const Tensor& dst, const float* src, int64_t n) {
  dispatch_float(dst.dtype, "from_f32", [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) store(d, i, src[i]);
  });
}

ScratchF32::ScratchF32(Runtime& rt, std::initializer_list<int64_t> sizes) {
  for (int64_t n : sizes) total_ += round_up(size_t(n) * sizeof(float));
  if (total_) base_ = static_cast<char*>(rt.scratch(total_));
}

float* ScratchF32::take(int64_t n) {
  size_t b = round_up(size_t(n) * sizeof(float));
  TRELLIS_CHECK(used_ + b <= total_, "ScratchF32: more taken than declared");
  float* p = reinterpret_cast<float*>(base_ + used_);
  used_ += b;
  return p;
}

}  // namespace trellis::cpu
