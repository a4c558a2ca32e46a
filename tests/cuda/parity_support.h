// What the CUDA-against-CPU parity tests share: host and device tensors that own their memory,
// seeded random inputs, the per-dtype tolerance and the comparisons, and a fixture holding one CPU
// and one (deterministic) CUDA runtime for a suite parameterized by dtype. Its tests skip when no
// CUDA device is visible.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/runtime.h"

namespace trellis::parity {

// A host tensor that owns its bytes (copies own theirs).
struct HostTensor {
  std::vector<unsigned char> bytes;
  Tensor t;
  HostTensor(DType d, Shape s) : bytes(size_t(s.numel()) * dtype_size(d)), t(bytes.data(), d, Device::CPU(), s) {}
  HostTensor(const HostTensor& o) : bytes(o.bytes), t(o.t) { t.data = bytes.data(); }
  HostTensor& operator=(const HostTensor& o) {
    bytes = o.bytes;
    t = o.t;
    t.data = bytes.data();
    return *this;
  }
  HostTensor(HostTensor&& o) noexcept : bytes(std::move(o.bytes)), t(o.t) { t.data = bytes.data(); }
  HostTensor& operator=(HostTensor&& o) noexcept {
    bytes = std::move(o.bytes);
    t = o.t;
    t.data = bytes.data();
    return *this;
  }
  int64_t numel() const { return t.numel(); }
  float get(int64_t i) const {
    switch (t.dtype) {
      case DType::f32: return t.ptr<float>()[i];
      case DType::bf16: return to_float(t.ptr<bf16_t>()[i]);
      case DType::f16: return to_float(t.ptr<f16_t>()[i]);
      case DType::i32: return float(t.ptr<int32_t>()[i]);
      default: return 0.0f;
    }
  }
  void set(int64_t i, float v) {
    switch (t.dtype) {
      case DType::f32: t.ptr<float>()[i] = v; break;
      case DType::bf16: t.ptr<bf16_t>()[i] = to_bf16(v); break;
      case DType::f16: t.ptr<f16_t>()[i] = to_f16(v); break;
      case DType::i32: t.ptr<int32_t>()[i] = int32_t(v); break;
      default: break;
    }
  }
};

// A device tensor that owns its memory.
struct DeviceTensor {
  Buffer buf;
  Tensor t;
};

inline HostTensor random_host(DType d, Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  HostTensor h(d, s);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, u(gen));
  return h;
}

struct Tolerance {
  float abs, rel;
};
inline Tolerance tolerance(DType d, float factor = 1.0f) {
  switch (d) {
    case DType::bf16: return {1e-2f * factor, 1e-2f * factor};  // 8-bit mantissa: 1 ulp = 0.4%
    case DType::f16: return {2e-3f * factor, 2e-3f * factor};   // 11-bit mantissa
    default: return {1e-4f * factor, 1e-4f * factor};          // f32: only summation order differs
  }
}

// |gpu - cpu| <= abs * max(1, max|cpu|) + rel * |cpu| for every element; infinities must match,
// a NaN never does.
inline void expect_close(const HostTensor& gpu, const HostTensor& cpu, Tolerance tol, const std::string& what) {
  ASSERT_EQ(gpu.numel(), cpu.numel()) << what;
  float max_ref = 0.0f;
  for (int64_t i = 0; i < cpu.numel(); ++i)
    if (std::isfinite(cpu.get(i))) max_ref = std::max(max_ref, std::fabs(cpu.get(i)));
  const float abs_tol = tol.abs * std::max(1.0f, max_ref);
  int64_t bad = 0, first = -1;
  float worst = 0.0f;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const float g = gpu.get(i), c = cpu.get(i);
    const bool ok = std::isinf(c) ? g == c : std::fabs(g - c) <= abs_tol + tol.rel * std::fabs(c);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
    if (!std::isinf(c)) {
      const float err = std::fabs(g - c);
      if (err > worst || std::isnan(err)) worst = err;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.numel() << " elements differ; first at " << first
                    << " (gpu " << (first >= 0 ? gpu.get(first) : 0.0f) << ", cpu "
                    << (first >= 0 ? cpu.get(first) : 0.0f) << "), max error " << worst << ", max |cpu| " << max_ref;
}

inline void expect_bitwise(const HostTensor& a, const HostTensor& b, const std::string& what) {
  ASSERT_EQ(a.bytes.size(), b.bytes.size()) << what;
  EXPECT_TRUE(std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0) << what << ": differ";
}

// A suite parameterized by dtype with a CPU runtime and a deterministic CUDA runtime (device 0),
// created once per suite.
class CpuGpuParity : public ::testing::TestWithParam<DType> {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    cpu_ = new Runtime(RuntimeOptions{});
    RuntimeOptions g;
    g.device = Device::CUDA(0);
    g.deterministic = true;
    gpu_ = new Runtime(g);
  }
  static void TearDownTestSuite() {
    delete gpu_;
    delete cpu_;
    gpu_ = nullptr;
    cpu_ = nullptr;
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }

  Runtime& cpu() { return *cpu_; }
  Runtime& gpu() { return *gpu_; }
  DType dt() const { return GetParam(); }

  DeviceTensor to_device(const HostTensor& h) {
    DeviceTensor d = device_empty(h.t.dtype, h.t.shape);
    copy(gpu(), d.t, h.t);
    return d;
  }
  HostTensor to_host(const DeviceTensor& d) {
    HostTensor h(d.t.dtype, d.t.shape);
    copy(gpu(), h.t, d.t);
    gpu().synchronize();
    return h;
  }
  DeviceTensor device_empty(DType d, Shape s) {
    DeviceTensor t;
    t.buf = Buffer(gpu().allocator(), std::max<size_t>(size_t(s.numel()) * dtype_size(d), 4), "parity test tensor");
    t.t = t.buf.tensor(d, s);
    return t;
  }
  // Filled with a value no op writes (every element must be overwritten).
  DeviceTensor device_poisoned(DType d, Shape s) {
    DeviceTensor t = device_empty(d, s);
    fill(gpu(), t.t, 7.0f);
    return t;
  }

  inline static Runtime* cpu_ = nullptr;
  inline static Runtime* gpu_ = nullptr;
};

}  // namespace trellis::parity
