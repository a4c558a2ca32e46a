// A read-only memory map of a whole file; errors are UserErrors naming the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trellis {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Opens a regular file for reading (a descriptor the caller closes; its size in *size if given). A
// FIFO, device or directory is refused without blocking on it (a FIFO's open would wait for a
// writer forever).
int open_regular_file(const std::string& path, size_t* size = nullptr);
// The first n bytes of a regular file (fewer if it is shorter); errors as open_regular_file.
std::string read_file_head(const std::string& path, size_t n);
bool file_exists(const std::string& path);
// Reads a whole file into a string (UserError naming the path if it cannot).
std::string read_text_file(const std::string& path);
// Writes bytes to a file, replacing it (UserError naming the path if it cannot).
void write_file(const std::string& path, const void* data, size_t size);

}  // namespace trellis
