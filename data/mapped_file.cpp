// mmap-backed read-only files and small whole-file helpers.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace trellis {

int open_regular_file(const std::string& path, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UserError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw UserError(path + (dir ? ": is a directory, not a file" : ": not a regular file"));
  }
  ::fcntl(fd, F_SETFL, O_RDONLY);  // reads of a regular file block as usual
  if (size) *size = size_t(st.st_size);
  return fd;
}

std::string read_file_head(const std::string& path, size_t n) {
  const int fd = open_regular_file(path);
  std::string buf;
  char chunk[65536];
  while (buf.size() < n) {
    const ssize_t r = ::read(fd, chunk, std::min(sizeof chunk, n - buf.size()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      throw UserError(path + ": read error: " + std::strerror(err));
    }
    if (r == 0) break;
    buf.append(chunk, size_t(r));
  }
  ::close(fd);
  return buf;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, &size_);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw UserError(path + ": cannot memory-map: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_text_file(const std::string& path) {
  return read_file_head(path, std::string().max_size());  // read until its end
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw UserError(path + ": cannot create: " + std::strerror(errno));
  const bool ok = (size == 0 || std::fwrite(data, 1, size, f) == size);
  if (std::fclose(f) != 0 || !ok) throw UserError(path + ": write failed: " + std::strerror(errno));
}

}  // namespace trellis
