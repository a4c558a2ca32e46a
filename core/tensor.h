// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, device, shape).
// Memory is owned by buffers (see alloc.h); tensors never allocate.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace trellis {

struct Device {
  enum Kind : uint8_t { cpu, cuda } kind = cpu;
  int index = 0;
  bool is_cpu() const { return kind == cpu; }
  bool is_cuda() const { return kind == cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const { return kind == cpu ? "cpu" : "cuda:" + std::to_string(index); }
  static Device CPU() { return Device{cpu, 0}; }
  static Device CUDA(int i) { return Device{cuda, i}; }
};

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    TRELLIS_CHECK(d.size() <= kMaxDims, "too many dimensions");
    for (int64_t x : d) dims[rank++] = x;
  }
  int64_t operator[](int i) const { return dims[size_t(i) % kMaxDims]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i) if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device;
  Shape shape;

  Tensor() = default;
  Tensor(void* p, DType t, Device d, Shape s) : data(p), dtype(t), device(d), shape(s) {}

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t size(int i) const { return shape[i]; }
  int dim() const { return shape.rank; }
  bool defined() const { return data != nullptr; }
  // Rows = product of all but the last dimension; cols = last dimension.
  int64_t cols() const { return shape.rank ? shape[shape.rank - 1] : 1; }
  int64_t rows() const { return cols() ? numel() / cols() : 0; }

  template <typename T> T* ptr() const { return static_cast<T*>(data); }
  // Same memory, another shape of the same element count.
  Tensor view(Shape s) const {
    TRELLIS_CHECK(s.numel() == numel(), "view " + s.str() + " of " + shape.str());
    return Tensor(data, dtype, device, s);
  }
  // Elements [offset, offset + s.numel()) of the flattened tensor, as shape s.
  Tensor slice(int64_t offset, Shape s) const {
    TRELLIS_CHECK(offset >= 0 && offset + s.numel() <= numel(), "slice out of range");
    return Tensor(static_cast<char*>(data) + offset * int64_t(dtype_size(dtype)), dtype, device, s);
  }
  // The same shape `elems` elements further on: a strided batch's next problem (not bounds-checked:
  // it lies outside this view).
  Tensor shifted(int64_t elems) const {
    return Tensor(static_cast<char*>(data) + elems * int64_t(dtype_size(dtype)), dtype, device, shape);
  }
  std::string str() const;  // "bf16[4, 64] on cuda:0"
};

}  // namespace trellis
