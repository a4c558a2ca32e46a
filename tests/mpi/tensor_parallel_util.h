// What the tensor-parallel MPI tests share: host f32 tensors, the slice of a full tensor a shard
// holds (written out independently of TensorSplit), and a comparison with a scale-aware tolerance.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "core/tensor.h"

namespace trellis::tp_test {

inline int world_size() { int n = 1; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }
inline int world_rank() { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }

// Owns host f32 memory behind a tensor.
struct HostTensor {
  std::vector<float> data;
  Tensor t;
  explicit HostTensor(Shape s) : data(size_t(s.numel())), t(data.data(), DType::f32, Device::CPU(), s) {}
  HostTensor(Shape s, const std::vector<float>& v) : HostTensor(s) {
    EXPECT_EQ(v.size(), data.size());
    std::copy_n(v.begin(), std::min(v.size(), data.size()), data.begin());
  }
  float& operator[](int64_t i) { return data[size_t(i)]; }
};

inline std::vector<float> values(const Tensor& t) { return {t.ptr<float>(), t.ptr<float>() + t.numel()}; }

// The part of `full` that split `s` gives its rank (a 1-D tensor is one row), in the order a shard
// stores it: rank r's piece of each group in turn.
inline std::vector<float> slice_of(const Tensor& full, const TensorSplit& s) {
  const int64_t rows = full.rows(), cols = full.cols();
  const float* p = full.ptr<float>();
  std::vector<float> out;
  const bool by_rows = full.dim() > 1 && s.dim == 0;
  auto piece = [&](int64_t n, int g) {  // [begin, end) of this rank's piece of group g of n
    const auto [b, e] = s.group_range(n, g);
    const int64_t w = (e - b) / s.parts;
    return std::pair<int64_t, int64_t>{b + s.index * w, b + (s.index + 1) * w};
  };
  if (by_rows) {
    for (int g = 0; g < s.groups; ++g)
      for (auto [b, e] = piece(rows, g); b < e; ++b) out.insert(out.end(), p + b * cols, p + (b + 1) * cols);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (int g = 0; g < s.groups; ++g) {
        const auto [b, e] = piece(cols, g);
        out.insert(out.end(), p + i * cols + b, p + i * cols + e);
      }
  }
  return out;
}

// Rank `index`'s part of `full` split along `dim` into groups x parts.
inline std::vector<float> slice_of(const Tensor& full, int dim, int parts, int index, int groups = 1) {
  return slice_of(full, TensorSplit{dim, parts, index, groups});
}

// The part of a full parameter's tensor (value or gradient) that the shard `spec` holds.
inline std::vector<float> slice_of(const Tensor& full, const ParameterSpec& spec) { return slice_of(full, spec.split); }

// |got - want| <= tol * max(|want|, largest |want|): relative to the element, but never tighter
// than tol of the tensor's scale (an element near zero is a cancellation of larger terms).
inline void expect_close(const Tensor& got, const std::vector<float>& want, const std::string& what,
                         float tol = 1e-5f) {
  ASSERT_EQ(got.numel(), int64_t(want.size())) << what;
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(w));
  ASSERT_GT(scale, 0.0f) << what << " is all zeros: the comparison would prove nothing";
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.ptr<float>()[i], w = want[size_t(i)];
    if (std::abs(g - w) <= tol * std::max(std::abs(w), scale)) continue;
    if (++bad <= 3)
      ADD_FAILURE() << "[rank " << world_rank() << "] " << what << " element " << i << ": got " << g
                    << ", expected " << w;
  }
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace trellis::tp_test
