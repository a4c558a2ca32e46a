// Host allocator, Buffer and Arena.
#include "core/alloc.h"

#include <cstdio>
#include <cstdlib>

namespace trellis {

std::string format_bytes(size_t bytes) {
  char s[32];
  if (bytes >= (size_t(1) << 30)) std::snprintf(s, sizeof s, "%.2f GiB", double(bytes) / double(1 << 30));
  else if (bytes >= (size_t(1) << 20)) std::snprintf(s, sizeof s, "%.2f MiB", double(bytes) / double(1 << 20));
  else std::snprintf(s, sizeof s, "%.2f KiB", double(bytes) / 1024.0);
  return s;
}

std::string format_decimal_bytes(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.2f MB", b / 1e6);
  else std::snprintf(s, sizeof s, "%.2f kB", b / 1e3);
  return s;
}

void AllocationLedger::add(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[p] = bytes;
  stats_.current += bytes;
  stats_.reserved = stats_.current;
  if (stats_.current > stats_.peak) stats_.peak = stats_.current;
}

size_t AllocationLedger::remove(void* p, const char* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(p);
  TRELLIS_CHECK(it != sizes_.end(), std::string("release of a pointer the ") + owner + " does not own");
  const size_t bytes = it->second;
  stats_.current -= bytes;
  stats_.reserved = stats_.current;
  sizes_.erase(it);
  return bytes;
}

MemoryStats AllocationLedger::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AllocationLedger::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.current;
}

std::unordered_map<void*, size_t> AllocationLedger::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sizes_;
}

namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, const char* what) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !p) {
      const MemoryStats st = ledger_.stats();
      TRELLIS_FATAL("out of host memory allocating " + format_bytes(rounded) + " for " + what + " (in use " +
                    format_bytes(st.current) + ", peak " + format_bytes(st.peak) + ")");
    }
    ledger_.add(p, rounded);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    ledger_.remove(p, "host allocator");
    std::free(p);
  }
  MemoryStats stats() const override { return ledger_.stats(); }
  void reset_peak() override { ledger_.reset_peak(); }
  Device device() const override { return Device::CPU(); }

 private:
  AllocationLedger ledger_;
};

}  // namespace

std::unique_ptr<Allocator> make_host_allocator() { return std::make_unique<HostAllocator>(); }

Buffer::Buffer(Allocator& a, size_t bytes, const char* what)
    : alloc_(&a), data_(a.allocate(bytes, what)), bytes_(bytes) {}

Buffer::~Buffer() {
  if (alloc_ && data_) alloc_->release(data_);
}

Buffer::Buffer(Buffer&& o) noexcept : alloc_(o.alloc_), data_(o.data_), bytes_(o.bytes_) {
  o.alloc_ = nullptr;
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (alloc_ && data_) alloc_->release(data_);
    alloc_ = o.alloc_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.alloc_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Device Buffer::device() const { return alloc_ ? alloc_->device() : Device::CPU(); }

Tensor Buffer::tensor(DType t, Shape shape, size_t byte_offset) const {
  size_t need = byte_offset + size_t(shape.numel()) * dtype_size(t);
  TRELLIS_CHECK(need <= bytes_, "buffer view " + shape.str() + " at offset " + std::to_string(byte_offset) +
                                    " exceeds " + std::to_string(bytes_) + " bytes");
  return Tensor(static_cast<char*>(data_) + byte_offset, t, device(), shape);
}

Tensor Arena::take(DType t, Shape shape) {
  size_t start = (used_ + 255) / 256 * 256;
  size_t bytes = size_t(shape.numel()) * dtype_size(t);
  if (start + bytes > buf_.bytes())
    TRELLIS_FATAL("activation arena full: need " + format_bytes(start + bytes) + ", capacity " +
                  format_bytes(buf_.bytes()));
  used_ = start + bytes;
  if (used_ > peak_) peak_ = used_;
  return buf_.tensor(t, shape, start);
}

}  // namespace trellis
