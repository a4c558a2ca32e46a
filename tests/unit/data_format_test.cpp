// Megatron .bin/.idx and llm.c token files: round trips, and clear errors for corrupt,
// truncated or mismatched files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/unit/test_util.h"
#include "data/indexed_dataset.h"
#include "data/token_file.h"

namespace fs = std::filesystem;
using namespace trellis;
using trellis::testing::TempDir;
using trellis::testing::error_of;

namespace {

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

void write_sample_megatron(const std::string& prefix, TokenType type) {
  IndexedDatasetWriter w(prefix, type);
  w.add_document({1, 2, 3});
  w.add_document({});
  w.add_document({400, 5});
  w.finish();
}

}  // namespace

TEST(DataFormat, IndexedDatasetRoundTrip) {
  TempDir dir;
  for (TokenType type : {TokenType::u16, TokenType::i32}) {
    const std::string prefix = dir / std::string("d").append(std::to_string(int(type)));
    write_sample_megatron(prefix, type);
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.type(), type);
    ASSERT_EQ(ds.sequences(), 3);
    EXPECT_EQ(ds.documents(), 4);  // Megatron's document index: 0, 1, 2, 3
    EXPECT_EQ(ds.document_index(), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(ds.sequence_size(0), 3);
    EXPECT_EQ(ds.sequence_size(1), 0);
    EXPECT_EQ(ds.sequence_pointer(2), 3 * token_type_size(type));
    const TokenView v = ds.tokens();
    ASSERT_EQ(v.count, 5);
    std::vector<int32_t> all(5);
    v.copy(0, 5, all.data());
    EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 400, 5}));
  }
}

TEST(DataFormat, IndexedDatasetHeaderMatchesMegatronLayout) {
  TempDir dir;
  write_sample_megatron(dir / "d", TokenType::u16);
  const std::string idx = read_bytes(dir / "d.idx");
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  uint64_t version, seqs, docs;
  std::memcpy(&version, idx.data() + 9, 8);
  std::memcpy(&seqs, idx.data() + 18, 8);
  std::memcpy(&docs, idx.data() + 26, 8);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(int(uint8_t(idx[17])), 8);  // uint16
  EXPECT_EQ(seqs, 3u);
  EXPECT_EQ(docs, 4u);
  EXPECT_EQ(fs::file_size(dir / "d.bin"), 10u);
}

TEST(DataFormat, TruncatedBinIsReported) {
  TempDir dir;
  write_sample_megatron(dir / "d", TokenType::u16);
  fs::resize_file(dir / "d.bin", 6);
  const std::string e = error_of([&] { IndexedDataset ds(dir / "d"); });
  EXPECT_NE(e.find("d.idx: index says 3 sequences ending at byte 10 but d.bin has 6 bytes"), std::string::npos) << e;
}

TEST(DataFormat, OversizedBinIsReported) {
  TempDir dir;
  write_sample_megatron(dir / "d", TokenType::u16);
  write_bytes(dir / "d.bin", read_bytes(dir / "d.bin") + "xx");
  const std::string e = error_of([&] { IndexedDataset ds(dir / "d"); });
  EXPECT_NE(e.find("but d.bin has 12 bytes (index and data do not match)"), std::string::npos) << e;
}

TEST(DataFormat, CorruptIndexIsReported) {
  TempDir dir;
  write_sample_megatron(dir / "d", TokenType::u16);
  const std::string good = read_bytes(dir / "d.idx");
  const auto with = [&](size_t at, std::string bytes) {
    std::string s = good;
    s.replace(at, bytes.size(), bytes);
    write_bytes(dir / "d.idx", s);
    return error_of([&] { IndexedDataset ds(dir / "d"); });
  };
  EXPECT_NE(with(0, "XXIDIDX").find("not a Megatron index"), std::string::npos);
  EXPECT_NE(with(9, std::string("\x02", 1)).find("index version 2, only version 1"), std::string::npos);
  EXPECT_NE(with(17, std::string("\x06", 1)).find("d.idx: token dtype code 6 is not supported (allowed: 1 uint8,"), std::string::npos);
  EXPECT_NE(with(18, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)).find("18446744073709551615 sequences and 4 documents, more than"),
            std::string::npos);
  EXPECT_NE(with(17, std::string("\x63", 1)).find("token dtype code 99 is not supported"), std::string::npos);
  // A pointer that skips bytes: sequence 2 claims to start at byte 8 instead of 6.
  const std::string p2 = with(34 + 12 + 16, std::string("\x08", 1));
  EXPECT_NE(p2.find("sequence 2 starts at byte 8 of d.bin but the sequences before it end at byte 6"), std::string::npos) << p2;
  // A negative size.
  EXPECT_NE(with(34, std::string("\xff\xff\xff\xff", 4)).find("sequence 0 has negative size -1"), std::string::npos);
  // Document index out of order.
  EXPECT_NE(with(34 + 12 + 24 + 8, std::string("\x03", 1)).find("document index entry 2 = 2 is out of order"), std::string::npos);
  // Truncated index.
  write_bytes(dir / "d.idx", good.substr(0, good.size() - 5));
  const std::string t = error_of([&] { IndexedDataset ds(dir / "d"); });
  EXPECT_NE(t.find("index says 3 sequences and 4 documents, which take 102 bytes, but the file has 97 (truncated)"),
            std::string::npos) << t;
  write_bytes(dir / "d.idx", good.substr(0, 20));
  EXPECT_NE(error_of([&] { IndexedDataset ds(dir / "d"); }).find("shorter than the 34-byte header"), std::string::npos);
}

TEST(DataFormat, MissingFilesAreReported) {
  TempDir dir;
  EXPECT_NE(error_of([&] { IndexedDataset ds(dir / "none"); }).find("none.idx: cannot open"), std::string::npos);
  write_sample_megatron(dir / "d", TokenType::u16);
  fs::remove(dir / "d.bin");
  EXPECT_NE(error_of([&] { IndexedDataset ds(dir / "d"); }).find("d.bin: cannot open"), std::string::npos);
}

// A FIFO in a dataset's place is refused at once: its open used to wait for a writer forever.
TEST(DataFormat, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  write_sample_megatron(dir / "d", TokenType::u16);
  fs::remove(dir / "d.bin");
  ASSERT_EQ(::mkfifo((dir / "d.bin").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { IndexedDataset ds(dir / "d"); }).find("d.bin: not a regular file"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "t.tok").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { TokenFile f(dir / "t.tok"); }).find("t.tok: not a regular file"), std::string::npos);
}

TEST(DataFormat, TokenFileRoundTrip) {
  TempDir dir;
  const std::vector<int32_t> small = {0, 7, 65535, 3};
  write_token_file(dir / "a.tok", small);
  EXPECT_EQ(fs::file_size(dir / "a.tok"), 1024u + 8u);
  TokenFile a(dir / "a.tok");
  EXPECT_EQ(a.version(), 1);
  std::vector<int32_t> got(4);
  a.tokens().copy(0, 4, got.data());
  EXPECT_EQ(got, small);

  const std::vector<int32_t> big = {70000, 1};  // beyond uint16: version 2 (uint32 tokens)
  write_token_file(dir / "b.tok", big);
  TokenFile b(dir / "b.tok");
  EXPECT_EQ(b.version(), 2);
  got.resize(2);
  b.tokens().copy(0, 2, got.data());
  EXPECT_EQ(got, big);
}

TEST(DataFormat, CorruptTokenFileIsReported) {
  TempDir dir;
  write_token_file(dir / "a.tok", {1, 2, 3});
  const std::string good = read_bytes(dir / "a.tok");
  write_bytes(dir / "a.tok", good.substr(0, good.size() - 2));
  EXPECT_NE(error_of([&] { TokenFile f(dir / "a.tok"); })
                .find("a.tok: header says 3 tokens (1030 bytes with the header) but the file has 1028 bytes (truncated)"),
            std::string::npos);
  write_bytes(dir / "a.tok", good.substr(0, 100));
  EXPECT_NE(error_of([&] { TokenFile f(dir / "a.tok"); }).find("shorter than the 1024-byte header"), std::string::npos);
  std::string bad = good;
  bad[0] = 'x';
  write_bytes(dir / "a.tok", bad);
  EXPECT_NE(error_of([&] { TokenFile f(dir / "a.tok"); }).find("not an llm.c token file"), std::string::npos);
  bad = good;
  bad[4] = 3;
  write_bytes(dir / "a.tok", bad);
  EXPECT_NE(error_of([&] { TokenFile f(dir / "a.tok"); }).find("token file version 3 is not supported"), std::string::npos);
}
