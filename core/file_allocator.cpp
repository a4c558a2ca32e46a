#include "core/file_allocator.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace trellis {

namespace {

class FileBackedAllocator final : public Allocator {
 public:
  explicit FileBackedAllocator(std::string dir) : dir_(std::move(dir)) {}

  void* allocate(size_t bytes, const char* what) override {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t rounded = (bytes + page - 1) / page * page;
    if (rounded == 0) return nullptr;
    int fd = open(dir_.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {  // no O_TMPFILE on this filesystem: a named file, unlinked at once
      std::string path = dir_ + "/trellis-offload-XXXXXX";
      fd = mkstemp(path.data());
      if (fd < 0) {
        const int e = errno;
        fail("cannot create a file in " + dir_ + " (" + std::strerror(e) + ")", what, rounded);
      }
      unlink(path.c_str());
    }
    if (const int e = posix_fallocate(fd, 0, off_t(rounded)); e != 0) {
      close(fd);
      fail("cannot reserve it in " + dir_ + " (" + std::strerror(e) + ")", what, rounded);
    }
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_errno = errno;
    close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) fail(std::string("cannot map it (") + std::strerror(map_errno) + ")", what, rounded);
    ledger_.add(p, rounded);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    munmap(p, ledger_.remove(p, "file-backed allocator"));
  }
  MemoryStats stats() const override { return ledger_.stats(); }
  void reset_peak() override { ledger_.reset_peak(); }
  Device device() const override { return Device::CPU(); }

 private:
  [[noreturn]] void fail(const std::string& why, const char* what, size_t bytes) {
    TRELLIS_FATAL("zero.offload = \"nvme\": " + format_bytes(bytes) + " for " + what + ": " + why);
  }
  std::string dir_;
  AllocationLedger ledger_;
};

}  // namespace

std::unique_ptr<Allocator> make_file_backed_allocator(const std::string& dir) {
  return std::make_unique<FileBackedAllocator>(dir);
}

std::optional<size_t> free_disk_bytes(const std::string& dir) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  return size_t(st.f_bavail) * size_t(st.f_frsize);
}

}  // namespace trellis
