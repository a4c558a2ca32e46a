// Memory owners: allocators with current/peak statistics, RAII buffers, and a bump arena for
// activations. Tensors are views into these.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <string>

#include "core/tensor.h"

namespace trellis {

struct MemoryStats {
  size_t current = 0;   // bytes handed out and not yet released
  size_t peak = 0;      // maximum of current since the last reset_peak()
  size_t reserved = 0;  // bytes held from the system (>= current for a caching allocator)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `what` names the request for the out-of-memory message.
  virtual void* allocate(size_t bytes, const char* what) = 0;
  virtual void release(void* p) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual Device device() const = 0;
};

// Bookkeeping shared by the non-caching allocators (host, pinned): the size of every live block
// and current/peak statistics. Thread-safe.
class AllocationLedger {
 public:
  void add(void* p, size_t bytes);
  // The size `p` was added with; fatal (naming `owner`) if it was never added.
  size_t remove(void* p, const char* owner);
  MemoryStats stats() const;
  void reset_peak();
  // Every live block, e.g. to free them all at shutdown.
  std::unordered_map<void*, size_t> live() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  MemoryStats stats_;
};

// 64-byte aligned host memory, with statistics.
std::unique_ptr<Allocator> make_host_allocator();

// Owns one allocation; hands out tensor views of it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& a, size_t bytes, const char* what);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const;
  // A view of `shape` starting `byte_offset` bytes in.
  Tensor tensor(DType t, Shape shape, size_t byte_offset = 0) const;

 private:
  Allocator* alloc_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Bump allocator over one buffer: activations of one micro-batch, scratch of one step.
// reset() makes all its views invalid at once.
class Arena {
 public:
  Arena() = default;
  Arena(Allocator& a, size_t bytes, const char* what) : buf_(a, bytes, what) {}
  Tensor take(DType t, Shape shape);  // 256-byte aligned; fatal with sizes when it is full
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return buf_.bytes(); }

 private:
  Buffer buf_;
  size_t used_ = 0;
  size_t peak_ = 0;
};

std::string format_bytes(size_t bytes);  // "1.50 GiB"
// "1.61 GB": decimal units, as link bandwidths are quoted (GB/s).
std::string format_decimal_bytes(double bytes);

}  // namespace trellis
