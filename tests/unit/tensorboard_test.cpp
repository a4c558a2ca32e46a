// TensorBoard event files: CRC32C and the TFRecord mask on known vectors; the file is named as
// TensorBoard expects, starts with a valid file_version record, and its scalar records decode
// (with a small TFRecord + protobuf reader written here, independent of the writer's encoder);
// a disabled writer does nothing and a bad directory is a one-line UserError.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "launcher/tensorboard.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

// ---- A minimal reader: TFRecords, then Event / Summary / Value protobufs. ----

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <typename T>
T get_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// Splits a file into record payloads, checking both CRCs of each; fails the test on a bad frame.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u) << "truncated record header at " << at;
    if (bytes.size() - at < 12) break;
    const uint64_t len = get_le<uint64_t>(bytes, at);
    EXPECT_EQ(get_le<uint32_t>(bytes, at + 8), mask(crc32c(bytes.data() + at, 8))) << "length crc at " << at;
    EXPECT_GE(bytes.size() - at - 12, len + 4) << "truncated record at " << at;
    if (bytes.size() - at - 12 < len + 4) break;
    std::string data = bytes.substr(at + 12, len);
    EXPECT_EQ(get_le<uint32_t>(bytes, at + 12 + len), mask(crc32c(data.data(), data.size()))) << "data crc at " << at;
    out.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return out;
}

struct Field {
  uint32_t number = 0, wire_type = 0;
  uint64_t varint = 0;  // wire type 0
  std::string bytes;    // wire types 1, 2, 5 (raw little-endian bytes for the fixed ones)
};

uint64_t get_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; at < s.size() && shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  ADD_FAILURE() << "bad varint";
  return v;
}

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = get_varint(s, at);
    Field f;
    f.number = uint32_t(key >> 3);
    f.wire_type = uint32_t(key & 7);
    switch (f.wire_type) {
      case 0: f.varint = get_varint(s, at); break;
      case 1: f.bytes = s.substr(at, 8); at += 8; break;
      case 5: f.bytes = s.substr(at, 4); at += 4; break;
      case 2: {
        const uint64_t n = get_varint(s, at);
        f.bytes = s.substr(at, n);
        at += n;
        break;
      }
      default: ADD_FAILURE() << "unexpected wire type " << f.wire_type; return fields;
    }
    EXPECT_LE(at, s.size()) << "field " << f.number << " runs past the message";
    fields.push_back(std::move(f));
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<std::pair<std::string, float>> values;  // summary values: tag, simple_value
};

Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1 && f.wire_type == 1) {
      std::memcpy(&e.wall_time, f.bytes.data(), 8);
    } else if (f.number == 2 && f.wire_type == 0) {
      e.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3 && f.wire_type == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire_type == 2) {
      for (const Field& v : parse_message(f.bytes)) {
        EXPECT_TRUE(v.number == 1 && v.wire_type == 2) << "Summary field " << v.number;
        std::string tag;
        std::optional<float> value;
        for (const Field& g : parse_message(v.bytes)) {
          if (g.number == 1 && g.wire_type == 2) tag = g.bytes;
          else if (g.number == 2 && g.wire_type == 5) value = get_le<float>(g.bytes, 0);
          else ADD_FAILURE() << "unexpected Value field " << g.number;
        }
        EXPECT_TRUE(value.has_value()) << "no simple_value for " << tag;
        e.values.emplace_back(tag, value.value_or(NAN));
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number << " (wire type " << f.wire_type << ")";
    }
  }
  return e;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("trellis_tb_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// ---- Tests ----

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  unsigned char buf[32];
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(crc32c(buf, 32), 0x8A9136AAu);
  std::memset(buf, 0xFF, sizeof buf);
  EXPECT_EQ(crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(buf, 32), 0x113FDB5Cu);
}

TEST(TensorBoard, MaskedCrc) {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, mod 2^32.
  EXPECT_EQ(tfrecord_masked_crc("123456789", 9), 0xC78AB0E5u);
  EXPECT_EQ(tfrecord_masked_crc("", 0), 0xa282ead8u);
}

TEST(TensorBoard, DisabledWriterDoesNothing) {
  TensorBoardWriter tb("");
  EXPECT_FALSE(tb.enabled());
  EXPECT_TRUE(tb.path().empty());
  tb.scalar("train/loss", 1, 1.0);
  tb.scalars(1, {{"a", 1.0}});
  tb.flush();
}

TEST(TensorBoard, FileStartsWithVersionRecord) {
  TempDir tmp;
  const fs::path dir = tmp.path / "nested" / "tb";  // missing parents are created
  const double before = now();
  TensorBoardWriter tb(dir.string());
  ASSERT_TRUE(tb.enabled());
  const fs::path file(tb.path());
  EXPECT_EQ(file.parent_path(), dir);
  const std::string name = file.filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  std::string suffix = ".";
  suffix += std::to_string(getpid());
  suffix += ".trellis";
  EXPECT_TRUE(name.ends_with(suffix)) << name;
  EXPECT_TRUE(fs::exists(file));

  const std::string bytes = slurp(tb.path());  // flushed already, with the writer still open
  // The frame by hand: uint64 length, masked crc of it, payload, masked crc of the payload.
  ASSERT_GE(bytes.size(), 16u);
  const uint64_t len = get_le<uint64_t>(bytes, 0);
  ASSERT_EQ(bytes.size(), 12 + len + 4) << "one record only";
  const std::vector<std::string> records = read_records(bytes);
  ASSERT_EQ(records.size(), 1u);
  const Event e = decode_event(records[0]);
  ASSERT_TRUE(e.file_version.has_value());
  EXPECT_EQ(*e.file_version, "brain.Event:2");
  EXPECT_EQ(e.step, 0);
  EXPECT_TRUE(e.values.empty());
  EXPECT_GE(e.wall_time, before - 1.0);
  EXPECT_LE(e.wall_time, now() + 1.0);
}

TEST(TensorBoard, ScalarRecordsDecode) {
  TempDir tmp;
  std::string path;
  const std::string long_tag(300, 'x');  // a length that takes a two-byte varint
  {
    TensorBoardWriter tb(tmp.path.string());
    path = tb.path();
    tb.scalar("train/loss", 1, 4.25);
    tb.scalar("train/lr", 2, 3e-3);
    tb.scalar("val/loss", 100, 1.0 / 3.0);
    tb.scalar("train/peak_mem_bytes", int64_t{1} << 40, 123456789.0);  // multi-byte step varint
    tb.scalar(long_tag, 300, -2.5);
    tb.scalars(7, {{"train/tokens_per_s", 12345.5}, {"train/mfu", 0.42}});
    // Flushed on every write: the records are on disk before the writer closes.
    EXPECT_EQ(read_records(slurp(path)).size(), 7u);
  }
  const std::vector<std::string> records = read_records(slurp(path));
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(decode_event(records[0]).file_version, "brain.Event:2");

  struct Want {
    int64_t step;
    std::vector<std::pair<std::string, float>> values;
  };
  const std::vector<Want> want = {
      {1, {{"train/loss", 4.25f}}},
      {2, {{"train/lr", float(3e-3)}}},
      {100, {{"val/loss", float(1.0 / 3.0)}}},
      {int64_t{1} << 40, {{"train/peak_mem_bytes", float(123456789.0)}}},
      {300, {{long_tag, -2.5f}}},
      {7, {{"train/tokens_per_s", 12345.5f}, {"train/mfu", 0.42f}}},
  };
  double last_time = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i + 1));
    const Event e = decode_event(records[i + 1]);
    EXPECT_FALSE(e.file_version.has_value());
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_EQ(e.values, want[i].values);
    EXPECT_GE(e.wall_time, last_time);
    last_time = e.wall_time;
  }
}

TEST(TensorBoard, BadDirectoryIsUserError) {
  TempDir tmp;
  fs::create_directories(tmp.path);
  const fs::path file = tmp.path / "plain_file";
  std::ofstream(file) << "x";
  for (const fs::path& dir : {file, file / "sub"}) {
    try {
      TensorBoardWriter tb(dir.string());
      ADD_FAILURE() << "no error for " << dir;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("log.tensorboard_dir = " + dir.string() + ": cannot ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace trellis
