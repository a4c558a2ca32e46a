// TensorBoard event files: TFRecord framing around hand-encoded tensorflow.Event protobufs.
//
// TFRecord: uint64 length, uint32 masked crc32c(length), data, uint32 masked crc32c(data), all
// little-endian. The protobuf messages used (from tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#include "launcher/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"

namespace trellis {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

template <typename T>
void put_le(std::string& out, T v) {  // little-endian, as on every platform Trellis targets
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event with its wall time and step; the caller appends the payload field.
std::string event_header(int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_le(e, wall_time());
  if (step != 0) {  // proto3 leaves default values out
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));  // negative steps take ten bytes, as in protobuf
  }
  return e;
}

std::string summary_value(const std::string& tag, double value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_le(v, static_cast<float>(value));
  return v;
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (dir.empty()) return;
  const std::string prefix = "log.tensorboard_dir = " + dir + ": ";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(prefix + "cannot create the directory: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec))
    throw UserError(prefix + "cannot create the directory: it exists and is not a directory");

  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const std::string name = "events.out.tfevents." + std::to_string(static_cast<long long>(std::time(nullptr))) + "." +
                           host + "." + std::to_string(static_cast<long long>(getpid())) + ".trellis";
  path_ = (std::filesystem::path(dir) / name).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    const std::string reason = std::strerror(errno);
    throw UserError(prefix + "cannot open " + path_ + " for writing: " + reason);
  }

  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  scalars(step, {{tag, value}});
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (file_ == nullptr || values.empty()) return;
  std::string summary;
  for (const auto& [tag, value] : values) put_bytes(summary, 1, summary_value(tag, value));
  std::string e = event_header(step);
  put_bytes(e, 5, summary);
  write_record(e);
  flush();
}

void TensorBoardWriter::flush() {
  if (file_ != nullptr) std::fflush(file_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  const uint64_t len = data.size();
  put_le(rec, len);
  put_le(rec, tfrecord_masked_crc(rec.data(), 8));
  rec += data;
  put_le(rec, tfrecord_masked_crc(data.data(), data.size()));
  // Like the metrics file, a failed write (a full disk) does not stop training.
  std::fwrite(rec.data(), 1, rec.size(), file_);
}

}  // namespace trellis
