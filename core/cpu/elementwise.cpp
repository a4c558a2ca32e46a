// CPU elementwise ops: fill, copy, cast, add, accumulate, scale (computed in f32).
#include <cstring>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

void fill(Runtime&, const Tensor& x, float value) {
  const int64_t n = x.numel();
  if (x.dtype == DType::i32) {
    int32_t* p = x.ptr<int32_t>();
    const int32_t v = int32_t(value);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  dispatch_float(x.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    T* p = x.ptr<T>();
    const T v = from_float<T>(value);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void copy(Runtime&, const Tensor& dst, const Tensor& src) {
  if (dst.data != src.data && dst.nbytes()) std::memcpy(dst.data, src.data, dst.nbytes());
}

void cast(Runtime&, const Tensor& out, const Tensor& in) {
  const int64_t n = in.numel();
  dispatch_float(out.dtype, "cast", [&](auto otag) {
    using O = decltype(otag);
    dispatch_float(in.dtype, "cast", [&](auto itag) {
      using I = decltype(itag);
      O* o = out.ptr<O>();
      const I* s = in.ptr<I>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) store(o, i, load(s, i));
    });
  });
}

void add(Runtime&, const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.ptr<T>();
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) store(o, i, load(pa, i) + load(pb, i));
  });
}

void accumulate(Runtime&, const Tensor& out, const Tensor& a) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype, "accumulate", [&](auto otag) {
    using O = decltype(otag);
    dispatch_float(a.dtype, "accumulate", [&](auto atag) {
      using A = decltype(atag);
      O* o = out.ptr<O>();
      const A* pa = a.ptr<A>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) store(o, i, load(o, i) + load(pa, i));
    });
  });
}

void scale(Runtime&, const Tensor& x, float s) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    T* p = x.ptr<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) store(p, i, load(p, i) * s);
  });
}

}  // namespace trellis::cpu
