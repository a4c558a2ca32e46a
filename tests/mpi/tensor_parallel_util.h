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

// Rank `index`'s part of `full` split along `dim` into groups x parts (a 1-D tensor is one row),
// in the order a shard stores it.
inline std::vector<float> slice_of(const Tensor& full, int dim, int parts, int index, int groups = 1) {
  const int64_t rows = full.rows(), cols = full.cols();
  const float* p = full.ptr<float>();
  std::vector<float> out;
  if (full.dim() > 1 && dim == 0) {
    const int64_t piece = rows / (groups * parts);
    for (int g = 0; g < groups; ++g)
      for (int64_t i = (g * parts + index) * piece; i < (g * parts + index + 1) * piece; ++i)
        out.insert(out.end(), p + i * cols, p + (i + 1) * cols);
  } else {
    const int64_t piece = cols / (groups * parts);
    for (int64_t i = 0; i < rows; ++i)
      for (int g = 0; g < groups; ++g) {
        const float* row = p + i * cols + (g * parts + index) * piece;
        out.insert(out.end(), row, row + piece);
      }
  }
  return out;
}

// The part of a full parameter's tensor (value or gradient) that the shard `spec` holds.
inline std::vector<float> slice_of(const Tensor& full, const ParameterSpec& spec) {
  const TensorSplit& s = spec.split;
  return slice_of(full, s.dim, s.parts, s.index, s.groups);
}

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
