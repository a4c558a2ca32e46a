// Checkpoint storage: CRC32C and JSON basics, blob and meta round trips, corruption and
// truncation detection naming the file, latest-valid lookup, pruning, that failed or abandoned
// writes leave no partial step directory, and blobs written into a writer's temporary directory
// by others (per-rank state) registered, verified, pruned and cleaned up like its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/crc32c.h"
#include "core/parameters.h"
#include "launcher/whole_model.h"

namespace fs = std::filesystem;

namespace trellis {
namespace {

// A fresh directory under the system temp dir, removed (permissions restored) afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("trellis_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : v) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return v;
}

// Names (not paths) of the entries of dir, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(offset);
  f.write(&c, 1);
}

std::string write_simple(const std::string& root, int64_t step, const std::string& meta = "{}") {
  const std::vector<char> data = pattern(1000 + static_cast<size_t>(step), static_cast<unsigned>(step));
  CheckpointWriter w(root, step);
  w.add_blob("params.bin", data.data(), data.size(), "u8", {static_cast<int64_t>(data.size())});
  w.set_meta(meta);
  return w.commit();
}

// Expects `f` to throw CheckpointError whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no CheckpointError thrown";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  const std::vector<char> big = pattern(100003, 7);
  const uint32_t whole = crc32c(big.data(), big.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{99999}}) {
    uint32_t c = crc32c_update(0, big.data(), cut);
    EXPECT_EQ(crc32c_update(c, big.data() + cut, big.size() - cut), whole) << cut;
  }
}

TEST(Crc32c, MatchesBitwiseReference) {
  auto reference = [](const char* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<unsigned char>(p[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  const std::vector<char> data = pattern(40000, 11);
  // Lengths and misalignments around the 3 x 4 KiB interleaved blocks of the fast path.
  for (size_t off : {size_t{0}, size_t{1}, size_t{5}})
    for (size_t n : {size_t{0}, size_t{7}, size_t{12287}, size_t{12288}, size_t{12289}, size_t{24576 + 13},
                     size_t{39990}})
      EXPECT_EQ(crc32c(data.data() + off, n), reference(data.data() + off, n)) << off << " " << n;
}

TEST(Json, ParsesValuesAndRejectsGarbage) {
  const JsonValue v =
      parse_json(R"( {"a": [1, -2.5e3, true, null], "s": "x\"\n\u00e9\ud83d\ude00", "big": 9007199254740993} )");
  ASSERT_EQ(v.kind, JsonValue::Kind::kObject);
  EXPECT_EQ(v.find("a")->items.size(), 4u);
  EXPECT_EQ(v.find("a")->items[0].as_int(), 1);
  EXPECT_EQ(v.find("a")->items[1].as_double(), -2500.0);
  EXPECT_TRUE(v.find("a")->items[2].boolean);
  EXPECT_EQ(v.find("s")->as_string(), "x\"\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("big")->as_int(), 9007199254740993);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(parse_json(R"({"k": 1, "k": 2})").find("k")->as_int(), 2);  // the last of a repeated key, as Python's
  EXPECT_THROW(v.find("a")->items[1].as_int(), CheckpointError);
  for (const char* bad : {"", "{", "{\"a\":}", "[1,]", "01", "{\"a\":1} x", "\"\\u12g4\"", "\"\\udc00\"", "tru",
                          "\"a\nb\""})
    EXPECT_THROW(parse_json(bad), CheckpointError) << bad;
}

TEST(Checkpoint, DirNames) {
  EXPECT_EQ(checkpoint_dir_name(42), "step_00000042");
  EXPECT_EQ(parse_checkpoint_dir_name("step_00000042"), 42);
  EXPECT_EQ(parse_checkpoint_dir_name(checkpoint_dir_name(123456789)), 123456789);
  for (const char* bad : {"step_42", "step_000000042", "step_0000004x", "step_-0000042", "xstep_00000042", ""})
    EXPECT_FALSE(parse_checkpoint_dir_name(bad).has_value()) << bad;
}

TEST(Checkpoint, BlobsRoundTrip) {
  TempDir tmp;
  const std::vector<char> params = pattern((size_t{20} << 20) + 3, 1);  // > the 8 MiB write buffer
  const std::vector<char> adam = pattern(12345, 2);
  const std::vector<char> streamed = pattern((size_t{9} << 20) + 11, 3);
  CheckpointWriter w(tmp.str(), 5);
  w.add_blob("params.bin", params.data(), params.size(), "f32", {4, 7});
  w.add_blob("rank00003/adam_m.bin", adam.data(), adam.size(), "bf16", {12345});
  w.add_blob("empty.bin", nullptr, 0);
  w.begin_blob("rank00003/streamed.bin", "u8");
  for (size_t off = 0, piece = 1; off < streamed.size(); off += piece, piece = piece * 3 + 1)
    w.write(streamed.data() + off, std::min(piece, streamed.size() - off));
  w.end_blob();
  const std::string dir = w.commit();
  EXPECT_EQ(dir, tmp.sub("step_00000005"));
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000005"});  // no temp dir left

  const CheckpointReader r = CheckpointReader::open(dir);
  EXPECT_EQ(r.step(), 5);
  EXPECT_EQ(r.blob_names(),
            (std::vector<std::string>{"params.bin", "rank00003/adam_m.bin", "empty.bin", "rank00003/streamed.bin"}));
  EXPECT_EQ(r.blob_info("params.bin").dtype, "f32");
  EXPECT_EQ(r.blob_info("params.bin").shape, (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(r.blob_info("empty.bin").dtype, "bytes");
  EXPECT_TRUE(r.blob_info("empty.bin").shape.empty());
  EXPECT_EQ(r.meta(), "{}");
  for (const auto& [name, want] : std::vector<std::pair<std::string, const std::vector<char>*>>{
           {"params.bin", &params}, {"rank00003/adam_m.bin", &adam}, {"rank00003/streamed.bin", &streamed}}) {
    ASSERT_EQ(r.blob_size(name), want->size());
    std::vector<char> got(want->size());
    r.read_blob(name, got.data(), got.size());
    EXPECT_TRUE(got == *want) << name;
  }
  r.read_blob("empty.bin", nullptr, 0);
  std::vector<char> small(10);
  expect_error([&] { r.read_blob("params.bin", small.data(), small.size()); }, {"params.bin", "asked for 10"});
  expect_error([&] { r.blob_size("nope.bin"); }, {"nope.bin"});
}

TEST(Checkpoint, MetaRoundTrip) {
  TempDir tmp;
  const std::string meta =
      R"({"step": 1000, "loss": 2.718281828459045, "time": "2024-05-01T12:00:00Z", "version": "0.3.1",)"
      R"( "config": "[model]\nd_model = 64\nname = \"tiny\"\n", "scaler": {"scale": 65536, "good_steps": 17},)"
      R"( "data_position": 123456789012345, "rng": [1, 2, 3]})";
  CheckpointWriter w(tmp.str(), 1000);
  w.set_meta("  \n" + meta + "\n ");  // surrounding whitespace is dropped
  const CheckpointReader r = CheckpointReader::open(w.commit());
  EXPECT_EQ(r.meta(), meta);
  const JsonValue m = parse_json(r.meta());
  EXPECT_EQ(m.find("step")->as_int(), 1000);
  EXPECT_EQ(m.find("loss")->as_double(), 2.718281828459045);
  EXPECT_EQ(m.find("config")->as_string(), "[model]\nd_model = 64\nname = \"tiny\"\n");
  EXPECT_EQ(m.find("scaler")->find("good_steps")->as_int(), 17);
  EXPECT_EQ(m.find("data_position")->as_int(), 123456789012345);
  EXPECT_TRUE(r.blob_names().empty());
}

TEST(Checkpoint, BadMetaAndNamesThrowAndCleanUp) {
  TempDir tmp;
  for (const char* meta : {"[1, 2]", "{\"a\": }", "not json"}) {
    CheckpointWriter w(tmp.str(), 1);
    expect_error([&] { w.set_meta(meta); }, {"meta"});
    EXPECT_TRUE(entries(tmp.str()).empty()) << meta;  // the failure removed the temp dir
    expect_error([&] { w.commit(); }, {"already committed or failed"});
  }
  const char x = 'x';
  for (const char* name : {"../evil.bin", ".hidden", "a//b", "manifest.json", "a/./b", "sp ace", "", "dir/"}) {
    CheckpointWriter w(tmp.str(), 1);
    expect_error([&] { w.add_blob(name, &x, 1); }, {"bad blob name"});
    EXPECT_TRUE(entries(tmp.str()).empty()) << name;
  }
  CheckpointWriter w(tmp.str(), 1);
  w.add_blob("a.bin", &x, 1);
  expect_error([&] { w.add_blob("a.bin", &x, 1); }, {"a.bin", "twice"});
  EXPECT_TRUE(entries(tmp.str()).empty());
}

TEST(Checkpoint, CorruptByteIsDetectedAndNamed) {
  TempDir tmp;
  const std::string dir = write_simple(tmp.str(), 3);
  flip_byte(dir + "/params.bin", 500);
  expect_error([&] { CheckpointReader::open(dir); }, {dir + "/params.bin", "checksum mismatch"});
  // A sizes-only open passes, but reading the blob still catches it.
  const CheckpointReader r = CheckpointReader::open(dir, CheckpointVerify::kSizes);
  std::vector<char> buf(r.blob_size("params.bin"));
  expect_error([&] { r.read_blob("params.bin", buf.data(), buf.size()); }, {"params.bin", "checksum mismatch"});
  // So does reading it in chunks, after the last one.
  size_t seen = 0;
  expect_error([&] { r.read_blob_chunks("params.bin", [&](uint64_t, const char*, size_t n) { seen += n; }); },
               {"params.bin", "checksum mismatch"});
  EXPECT_EQ(seen, buf.size());
}

// read_blob_chunks gives the blob's bytes in order, in chunks of the read size (8 MiB) and a tail.
TEST(Checkpoint, BlobReadInChunks) {
  TempDir tmp;
  const std::vector<char> params = pattern((size_t{20} << 20) + 3, 4);
  CheckpointWriter w(tmp.str(), 2);
  w.add_blob("params.bin", params.data(), params.size());
  w.add_blob("empty.bin", nullptr, 0);
  const CheckpointReader r = CheckpointReader::open(w.commit());
  std::vector<char> got;
  std::vector<size_t> sizes;
  r.read_blob_chunks("params.bin", [&](uint64_t at, const char* data, size_t n) {
    EXPECT_EQ(at, got.size());
    got.insert(got.end(), data, data + n);
    sizes.push_back(n);
  });
  EXPECT_EQ(got, params);
  EXPECT_EQ(sizes, (std::vector<size_t>{size_t{8} << 20, size_t{8} << 20, (size_t{4} << 20) + 3}));
  int calls = 0;
  r.read_blob_chunks("empty.bin", [&](uint64_t, const char*, size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// A blob of more than one 8 MiB chunk records each chunk's checksum (written in pieces that straddle
// the chunks, and whole); read_blob_ranges reads only the chunks its ranges touch, each verified
// first: a flipped byte in chunk 2 fails a range that touches it, not one before it. A one-chunk blob
// records none; neither does a part writer's report, and such a blob is read whole.
TEST(Checkpoint, ChunkChecksumsLetRangesReadOnlyTheirChunks) {
  TempDir tmp;
  const size_t MiB = size_t{1} << 20;
  const std::vector<char> params = pattern(20 * MiB + 3, 9), small = pattern(1000, 10);
  CheckpointWriter w(tmp.str(), 2);
  w.begin_blob("params.bin");
  for (size_t at = 0; at < params.size(); at += 3 * MiB + 5)
    w.write(params.data() + at, std::min(3 * MiB + 5, params.size() - at));
  w.end_blob();
  w.add_blob("small.bin", small.data(), small.size());
  const std::string dir = w.commit();
  {
    const CheckpointReader r = CheckpointReader::open(dir);
    const BlobInfo& b = r.blob_info("params.bin");
    ASSERT_EQ(b.chunk_crc32c.size(), 3u);
    EXPECT_EQ(b.chunk_bytes, 8 * MiB);
    EXPECT_EQ(b.chunk_crc32c[2], crc32c(params.data() + 16 * MiB, 4 * MiB + 3));
    EXPECT_TRUE(r.blob_info("small.bin").chunk_crc32c.empty());
  }
  flip_byte(dir + "/params.bin", std::streamoff(17 * MiB));
  const CheckpointReader r = CheckpointReader::open(dir, CheckpointVerify::kSizes);
  // Two ranges in chunks 0 and 1 (one straddling them): their bytes, in order, in pieces.
  const std::vector<std::pair<uint64_t, uint64_t>> early = {{100, 200}, {8 * MiB - 10, 8 * MiB + 30}};
  std::vector<char> got;
  uint64_t last = 0;
  r.read_blob_ranges("params.bin", early, [&](uint64_t at, const char* data, size_t n) {
    EXPECT_GE(at, last);
    last = at + n;
    got.insert(got.end(), data, data + n);
  });
  std::vector<char> want(params.begin() + 100, params.begin() + 200);
  want.insert(want.end(), params.begin() + 8 * MiB - 10, params.begin() + 8 * MiB + 30);
  EXPECT_EQ(got, want);
  size_t seen = 0;
  expect_error([&] { r.read_blob_ranges("params.bin", {{16 * MiB + 5, 16 * MiB + 9}},
                                        [&](uint64_t, const char*, size_t n) { seen += n; }); },
               {"params.bin", "checksum mismatch in bytes 16777216 to 20971523"});
  EXPECT_EQ(seen, 0u) << "nothing of a damaged chunk is handed out";
  // The report of a part writer carries no chunk checksums: read whole, checked at the end.
  CheckpointWriter w2(tmp.sub("two"), 3);
  {
    CheckpointPartWriter part(w2.temp_dir());
    part.add_blob("rank00001/state.bin", params.data(), params.size());
    BlobInfo info = part.finish().at(0);
    info.chunk_crc32c.clear();
    info.chunk_bytes = 0;
    w2.add_written_blob(info);
  }
  const CheckpointReader r2 = CheckpointReader::open(w2.commit());
  got.clear();
  r2.read_blob_ranges("rank00001/state.bin", {{16 * MiB + 5, 16 * MiB + 9}},
                      [&](uint64_t, const char* data, size_t n) { got.insert(got.end(), data, data + n); });
  EXPECT_EQ(got, std::vector<char>(params.begin() + 16 * MiB + 5, params.begin() + 16 * MiB + 9));
  // A manifest whose chunk checksum alone is wrong fails a full verification (its blob is sound).
  CheckpointWriter w3(tmp.sub("three"), 4);
  w3.add_blob("params.bin", params.data(), params.size());
  const std::string dir3 = w3.commit();
  std::string text;
  {
    std::ifstream in(dir3 + "/manifest.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string first = crc32c_hex(crc32c(params.data(), 8 * MiB));
  const size_t at = text.find("\"chunk_crc32c\": [\"" + first);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  text.replace(text.find(first, at), 8, first == "00000000" ? "00000001" : "00000000");
  std::ofstream(dir3 + "/manifest.json") << text;
  EXPECT_NO_THROW(CheckpointReader::open(dir3, CheckpointVerify::kSizes));
  expect_error([&] { CheckpointReader::open(dir3); }, {"params.bin", "checksum mismatch in bytes 0 to 8388608"});
}

// A rank that wants one tensor of a whole-model blob (a pipeline stage's, an expert rank's) reads
// only the chunks holding it: damage elsewhere in the blob does not stop it, and the tensor it wants
// comes whole; wanting the damaged tensor fails with one line.
TEST(Checkpoint, WholeTensorsStreamReadsOnlyTheChunksOfTheWantedOnes) {
  TempDir tmp;
  const int64_t M = int64_t{1} << 20;
  const std::vector<ParameterSpec> whole = {{"a", {3 * M}}, {"b", {M}}, {"c", {2 * M}}};  // 12, 4, 8 MiB of f32
  const std::vector<char> blob = pattern(size_t(24 * M), 11);
  CheckpointWriter w(tmp.str(), 4);
  w.add_blob("params.bin", blob.data(), blob.size(), "f32", {6 * M});
  const std::string dir = w.commit();
  flip_byte(dir + "/params.bin", 5);  // in "a", chunk 0
  const CheckpointReader r = CheckpointReader::open(dir, CheckpointVerify::kSizes);
  std::vector<char> c(size_t(8 * M));
  stream_whole_tensors(r, "params.bin", whole, 4, [](const std::string& t) { return t == "c"; },
                       [&](const std::string& t, uint64_t at, const char* bytes, size_t n) {
                         ASSERT_EQ(t, "c");
                         std::memcpy(c.data() + at, bytes, n);
                       });
  EXPECT_EQ(c, std::vector<char>(blob.begin() + 16 * M, blob.end()));
  expect_error([&] { stream_whole_tensors(r, "params.bin", whole, 4, [](const std::string& t) { return t == "a"; },
                                          [](const std::string&, uint64_t, const char*, size_t) {}); },
               {"params.bin", "checksum mismatch in bytes 0 to 8388608"});
}

TEST(Checkpoint, TruncatedBlobIsDetected) {
  TempDir tmp;
  const std::string dir = write_simple(tmp.str(), 3);
  fs::resize_file(dir + "/params.bin", 100);
  expect_error([&] { CheckpointReader::open(dir, CheckpointVerify::kSizes); }, {dir + "/params.bin", "truncated"});
  expect_error([&] { CheckpointReader::open(dir); }, {"params.bin", "truncated"});
}

TEST(Checkpoint, MissingOrDamagedManifestIsDetected) {
  TempDir tmp;
  const std::string dir = write_simple(tmp.str(), 3, R"({"loss": 1.25})");
  const std::string manifest = dir + "/manifest.json";
  std::string text;
  {
    std::ifstream f(manifest);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  // A changed meta value, a missing blob file, garbage, and no manifest at all.
  auto rewrite = [&](const std::string& t) { std::ofstream(manifest, std::ios::trunc) << t; };
  std::string changed = text;
  changed.replace(changed.find("1.25"), 4, "1.75");
  rewrite(changed);
  expect_error([&] { CheckpointReader::open(dir); }, {"manifest.json", "meta checksum mismatch"});
  rewrite(text);
  EXPECT_NO_THROW(CheckpointReader::open(dir));
  rewrite(text.substr(0, text.size() / 2));
  expect_error([&] { CheckpointReader::open(dir); }, {"manifest.json", "JSON"});
  rewrite(text);
  std::string negative = text;  // write_simple's shape is [1003]
  negative.replace(negative.find("[1003]"), 6, "[-1003]");
  rewrite(negative);
  expect_error([&] { CheckpointReader::open(dir); }, {"manifest.json", "negative dimension in the shape of params.bin"});
  rewrite(text);
  fs::rename(dir + "/params.bin", dir + "/moved.bin");
  expect_error([&] { CheckpointReader::open(dir); }, {"params.bin", "No such file"});
  fs::remove(manifest);
  expect_error([&] { CheckpointReader::open(dir); }, {manifest, "missing"});
}

TEST(Checkpoint, LatestValidSkipsCorruptNewerOne) {
  TempDir tmp;
  EXPECT_FALSE(latest_valid_checkpoint(tmp.sub("does_not_exist")).has_value());
  EXPECT_FALSE(latest_valid_checkpoint(tmp.str()).has_value());
  for (int64_t step : {10, 20, 30, 9}) write_simple(tmp.str(), step);
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000030"));
  flip_byte(tmp.sub("step_00000030/params.bin"), 3);
  fs::create_directories(tmp.sub("step_00000040"));  // no manifest: a crashed non-atomic copy
  std::string why;
  EXPECT_EQ(latest_valid_checkpoint(tmp.str(), &why), tmp.sub("step_00000020"));
  EXPECT_NE(why.find("step_00000040/manifest.json"), std::string::npos) << why;
  EXPECT_NE(why.find("step_00000030/params.bin: checksum mismatch"), std::string::npos) << why;
  // The sizes-only check does not read the data, so it accepts step 30.
  EXPECT_EQ(latest_valid_checkpoint(tmp.str(), nullptr, CheckpointVerify::kSizes), tmp.sub("step_00000030"));
}

TEST(Checkpoint, LeftoverTempDirIsIgnoredAndPruned) {
  TempDir tmp;
  write_simple(tmp.str(), 10);
  // A writer that dies mid-checkpoint (no destructor runs) leaves its temp dir behind.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointWriter w(tmp.str(), 20);
    const std::vector<char> data = pattern(5000, 9);
    w.add_blob("params.bin", data.data(), data.size());
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  CheckpointWriter live(tmp.str(), 30);  // a writer still in progress in this process
  std::ofstream(tmp.sub("notes.txt")) << "user file";
  fs::create_directories(tmp.sub("step_1"));            // not our naming pattern
  fs::create_directories(tmp.sub(".tmp.something"));    // neither
  const std::vector<std::string> names = entries(tmp.str());
  ASSERT_EQ(names.size(), 6u);
  const std::string dead_tmp = names[1];  // after ".tmp.something"
  EXPECT_EQ(dead_tmp.rfind(".tmp.step_00000020.", 0), 0u) << dead_tmp;
  EXPECT_EQ(dead_tmp.substr(dead_tmp.rfind('.') + 1), std::to_string(child));

  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000010"));
  const std::vector<std::string> removed = prune_checkpoints(tmp.str(), 5);
  EXPECT_EQ(removed, std::vector<std::string>{tmp.sub(dead_tmp)});
  const std::string live_tmp = fs::path(live.temp_dir()).filename().string();
  EXPECT_EQ(entries(tmp.str()),
            (std::vector<std::string>{".tmp.something", live_tmp, "notes.txt", "step_00000010", "step_1"}));
  live.commit();
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000030"));
}

// Without RENAME_EXCHANGE (NFS) a swap over an existing checkpoint is two renames. A writer killed
// between them leaves the old checkpoint moved aside and its replacement in its temp dir, with no
// step dir: the next listing puts the old one back (it is not pruned as a leftover).
TEST(Checkpoint, SwapInterruptedBetweenItsRenamesIsRestored) {
  TempDir tmp;
  write_simple(tmp.str(), 10, R"({"v": 1})");
  const pid_t child = ::fork();  // the writer, dead by the time the directory is read
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointWriter w(tmp.str(), 10);
    const std::vector<char> data = pattern(2000, 3);
    w.add_blob("params.bin", data.data(), data.size());
    // What the fallback does first, then the kill: the old one moved aside.
    const std::string dir = w.temp_dir(), name = fs::path(dir).filename().string();
    const std::string aside = tmp.sub(".tmp.old." + name.substr(5));
    ::_exit(::rename(tmp.sub("step_00000010").c_str(), aside.c_str()) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::vector<std::string> before = entries(tmp.str());
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].rfind(".tmp.old.step_00000010.", 0), 0u) << before[0];
  EXPECT_EQ(before[1].rfind(".tmp.step_00000010.", 0), 0u) << before[1];

  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000010"));
  EXPECT_EQ(CheckpointReader::open(tmp.sub("step_00000010")).meta(), R"({"v": 1})");
  EXPECT_EQ(prune_checkpoints(tmp.str(), 5), std::vector<std::string>{tmp.sub(before[1])});
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000010"});
}

// What the restore must leave alone, unless its caller holds the directory's lock (any_writer):
// the aside dir of a live writer, of a writer on another host, and one whose step dir exists.
TEST(Checkpoint, SwapRestoreLeavesLiveOtherHostAndReplacedOnesAlone) {
  TempDir tmp;
  std::string host;
  {
    CheckpointWriter probe(tmp.str(), 99);  // ".tmp.step_00000099.<host>.<pid>"
    const std::string name = fs::path(probe.temp_dir()).filename().string();
    host = name.substr(19, name.rfind('.') - 19);
  }
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  auto aside = [&](int64_t step, const std::string& h, long pid) {
    const std::string dir = write_simple(tmp.str(), step);
    const std::string to = tmp.sub(".tmp.old." + fs::path(dir).filename().string() + "." + h + "." + std::to_string(pid));
    fs::rename(dir, to);
    return fs::path(to).filename().string();
  };
  const std::string live = aside(10, host, ::getpid());
  const std::string other = aside(11, "otherhost", dead);
  const std::string replaced = aside(12, host, dead);
  write_simple(tmp.str(), 12);
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000012"));
  EXPECT_EQ(entries(tmp.str()), (std::vector<std::string>{live, other, replaced, "step_00000012"}));
  EXPECT_EQ(prune_checkpoints(tmp.str(), 5), std::vector<std::string>{tmp.sub(replaced)});  // a dead writer's leftover
  restore_interrupted_swaps(tmp.str(), true);  // as the lock's holder
  EXPECT_EQ(entries(tmp.str()), (std::vector<std::string>{"step_00000010", "step_00000011", "step_00000012"}));
}

TEST(Checkpoint, PruneKeepsNewestK) {
  TempDir tmp;
  for (int64_t step = 1; step <= 5; ++step) write_simple(tmp.str(), step);
  std::ofstream(tmp.sub("notes.txt")) << "user file";
  EXPECT_TRUE(prune_checkpoints(tmp.str(), 0).empty());  // keep <= 0: keep all
  EXPECT_EQ(prune_checkpoints(tmp.str(), 3).size(), 2u);
  EXPECT_EQ(entries(tmp.str()),
            (std::vector<std::string>{"notes.txt", "step_00000003", "step_00000004", "step_00000005"}));
  // A damaged newest one does not count toward K and is left for inspection.
  fs::resize_file(tmp.sub("step_00000005/params.bin"), 1);
  EXPECT_EQ(prune_checkpoints(tmp.str(), 2), std::vector<std::string>{});
  EXPECT_EQ(prune_checkpoints(tmp.str(), 1), std::vector<std::string>{tmp.sub("step_00000003")});
  EXPECT_EQ(entries(tmp.str()), (std::vector<std::string>{"notes.txt", "step_00000004", "step_00000005"}));
  EXPECT_TRUE(prune_checkpoints(tmp.sub("does_not_exist"), 1).empty());
}

TEST(Checkpoint, UnwritableDirectoryThrowsAndLeavesNothing) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (see NotADirectory test)";
  TempDir tmp;
  write_simple(tmp.str(), 1);
  fs::permissions(tmp.str(), fs::perms::owner_read | fs::perms::owner_exec);
  expect_error([&] { CheckpointWriter w(tmp.str(), 2); }, {tmp.str(), "Permission denied"});
  fs::permissions(tmp.str(), fs::perms::owner_all);
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000001"});
}

TEST(Checkpoint, RootUnderAFileThrowsNotADirectory) {
  TempDir tmp;
  std::ofstream(tmp.sub("file")) << "x";
  expect_error([&] { CheckpointWriter w(tmp.sub("file/sub"), 2); }, {tmp.sub("file"), "Not a directory"});
  expect_error([&] { CheckpointWriter::at_path(tmp.sub("file/export")); }, {"Not a directory"});
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"file"});
}

TEST(Checkpoint, WriteErrorMidBlobThrowsAndCleansUp) {
  // RLIMIT_FSIZE makes write() fail with EFBIG part way, like a full disk (works as root too).
  TempDir tmp;
  write_simple(tmp.str(), 1);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::vector<char> big = pattern(size_t{20} << 20, 4);
  {
    CheckpointWriter w(tmp.str(), 2);
    expect_error([&] { w.add_blob("params.bin", big.data(), big.size()); }, {"params.bin", "File too large"});
    EXPECT_FALSE(fs::exists(w.temp_dir()));
    expect_error([&] { w.commit(); }, {"already committed or failed"});
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000001"});
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000001"));
}

TEST(Checkpoint, AbandonedWriterLeavesNothing) {
  TempDir tmp;
  {
    CheckpointWriter w(tmp.str(), 4);
    const char x = 1;
    w.add_blob("a.bin", &x, 1);
    EXPECT_TRUE(fs::exists(w.temp_dir()));
    CheckpointWriter moved = std::move(w);
    EXPECT_TRUE(fs::exists(moved.temp_dir()));
  }
  EXPECT_TRUE(entries(tmp.str()).empty());
}

TEST(Checkpoint, CommitOverExistingReplacesIt) {
  TempDir tmp;
  const std::vector<char> a = pattern(3000, 1), b = pattern(7000, 2);
  {
    CheckpointWriter w(tmp.str(), 7);
    w.add_blob("a.bin", a.data(), a.size());
    w.set_meta(R"({"v": 1})");
    w.commit();
  }
  CheckpointWriter w(tmp.str(), 7);
  w.add_blob("b.bin", b.data(), b.size());
  w.set_meta(R"({"v": 2})");
  EXPECT_EQ(CheckpointReader::open(tmp.sub("step_00000007")).meta(), R"({"v": 1})");  // old one intact until commit
  EXPECT_EQ(w.commit(), tmp.sub("step_00000007"));
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000007"});  // old one and temp dir removed
  const CheckpointReader r = CheckpointReader::open(tmp.sub("step_00000007"));
  EXPECT_EQ(r.meta(), R"({"v": 2})");
  EXPECT_EQ(r.blob_names(), std::vector<std::string>{"b.bin"});
  EXPECT_EQ(entries(tmp.sub("step_00000007")), (std::vector<std::string>{"b.bin", "manifest.json"}));
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A user's files inside a checkpoint (not its manifest, not a blob it lists, not named as a state
// blob) survive a commit that replaces it: the old checkpoint's own files go, and its directory with
// theirs is renamed to step_X.user-files (.2 the next time), which is no checkpoint.
TEST(Checkpoint, CommitOverExistingSetsTheUsersFilesAside) {
  TempDir tmp;
  const std::string dir = write_simple(tmp.str(), 7);
  fs::create_directories(dir + "/eval");
  fs::create_directories(dir + "/rank00000");
  std::ofstream(dir + "/notes.txt") << "mine";
  std::ofstream(dir + "/eval/scores.json") << "{}";
  std::ofstream(dir + "/rank00000/adam_m.bin") << "a state blob's name: the checkpoint's own";
  fs::create_symlink("notes.txt", dir + "/link");
  fs::create_directories(dir + "/later/empty");  // an empty directory of the user's is theirs too
  EXPECT_EQ(files_no_checkpoint_writes(dir),
            (std::vector<std::string>{"eval/scores.json", "later/empty/", "link", "notes.txt"}));
  for (int round = 1; round <= 2; ++round) {
    const std::vector<char> data = pattern(100, round);
    CheckpointWriter w(tmp.str(), 7);
    w.add_blob("params.bin", data.data(), data.size());
    w.set_meta(R"({"v": 2})");
    EXPECT_EQ(w.commit(), dir);
    const std::string aside = tmp.sub(round == 1 ? "step_00000007.user-files" : "step_00000007.user-files.2");
    EXPECT_EQ(w.users_files_set_aside(),
              "moved to " + aside + " (eval/scores.json, later/empty/, link, ... (4 in all))");
    EXPECT_EQ(entries(dir), (std::vector<std::string>{"manifest.json", "params.bin"}));
    EXPECT_EQ(entries(aside), (std::vector<std::string>{"eval", "later", "link", "notes.txt"}));
    EXPECT_TRUE(fs::is_directory(aside + "/later/empty"));
    EXPECT_EQ(read_text(aside + "/notes.txt"), "mine");
    EXPECT_EQ(read_text(aside + "/eval/scores.json"), "{}");
    EXPECT_TRUE(fs::is_symlink(aside + "/link"));
    fs::create_directories(dir + "/eval");  // the same again, for round 2
    std::ofstream(dir + "/notes.txt") << "mine";
    std::ofstream(dir + "/eval/scores.json") << "{}";
    fs::create_symlink("notes.txt", dir + "/link");
    fs::create_directories(dir + "/later/empty");
  }
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), dir);
  // Without such files the replaced checkpoint is removed whole, as before.
  fs::remove_all(dir + "/eval");
  fs::remove_all(dir + "/later");
  fs::remove(dir + "/notes.txt");
  fs::remove(dir + "/link");
  CheckpointWriter w(tmp.str(), 7);
  w.set_meta("{}");
  w.commit();
  EXPECT_EQ(w.users_files_set_aside(), "");
  EXPECT_EQ(entries(tmp.str()), (std::vector<std::string>{"step_00000007", "step_00000007.user-files",
                                                          "step_00000007.user-files.2"}));
}

// Pruning sets a step checkpoint holding a user's files aside instead of removing it, and a replaced
// checkpoint its writer died before setting aside (a temp dir with a manifest) too.
// set_aside_users_files removes a checkpoint's files by name and its directories by rmdir: a user's
// file inside a rank directory keeps that directory (set aside with it); without one the directory
// is gone and nothing is reported.
TEST(Checkpoint, SettingAsideRemovesOnlyTheCheckpointsFiles) {
  TempDir tmp;
  const std::string dir = write_simple(tmp.str(), 3);
  fs::create_directories(dir + "/rank00001");
  std::ofstream(dir + "/rank00001/master.bin") << "a state blob's name";
  std::ofstream(dir + "/rank00001/profile.txt") << "mine";
  EXPECT_EQ(set_aside_users_files(dir, "step_00000003"),
            tmp.sub("step_00000003.user-files") + " (rank00001/profile.txt)");
  EXPECT_EQ(entries(tmp.sub("step_00000003.user-files")), (std::vector<std::string>{"rank00001"}));
  EXPECT_EQ(entries(tmp.sub("step_00000003.user-files/rank00001")), (std::vector<std::string>{"profile.txt"}));
  const std::string plain = write_simple(tmp.str(), 4);
  fs::create_directories(plain + "/rank00000");
  std::ofstream(plain + "/rank00000/adam_v.bin") << "a state blob's name";
  EXPECT_EQ(set_aside_users_files(plain, "step_00000004"), "");
  EXPECT_FALSE(fs::exists(plain));
}

TEST(Checkpoint, PruneSetsTheUsersFilesAside) {
  TempDir tmp;
  for (int64_t step = 1; step <= 3; ++step) write_simple(tmp.str(), step);
  fs::create_directories(tmp.sub("step_00000001/eval"));
  std::ofstream(tmp.sub("step_00000001/eval/notes.txt")) << "mine";
  std::vector<std::string> aside;
  EXPECT_EQ(prune_checkpoints(tmp.str(), 1, 3, &aside), std::vector<std::string>{tmp.sub("step_00000002")});
  EXPECT_EQ(aside, std::vector<std::string>{tmp.sub("step_00000001") + " -> " + tmp.sub("step_00000001.user-files") +
                                            " (eval/notes.txt)"});
  EXPECT_EQ(entries(tmp.str()), (std::vector<std::string>{"step_00000001.user-files", "step_00000003"}));
  EXPECT_EQ(entries(tmp.sub("step_00000001.user-files")), std::vector<std::string>{"eval"});
  EXPECT_EQ(read_text(tmp.sub("step_00000001.user-files/eval/notes.txt")), "mine");

  // A dead writer's temp dir holding a whole checkpoint (the replaced one, after the swap) and notes.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointWriter w(tmp.str(), 9);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = tmp.sub(entries(tmp.str())[0]);  // ".tmp.step_00000009.<host>.<pid>" sorts first
  ASSERT_TRUE(fs::is_directory(dead)) << dead;
  fs::copy(tmp.sub("step_00000003"), dead, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::ofstream(dead + "/notes.txt") << "mine";
  aside.clear();
  EXPECT_TRUE(prune_checkpoints(tmp.str(), 1, 3, &aside).empty());
  EXPECT_EQ(aside, std::vector<std::string>{dead + " -> " + tmp.sub("step_00000009.user-files") + " (notes.txt)"});
  EXPECT_EQ(entries(tmp.sub("step_00000009.user-files")), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(latest_valid_checkpoint(tmp.str()), tmp.sub("step_00000003"));
}

TEST(Checkpoint, WeightsOnlyExportAtPath) {
  TempDir tmp;
  const std::vector<char> p = pattern(4096, 5);
  CheckpointWriter w = CheckpointWriter::at_path(tmp.sub("exports/model_final/"));
  w.add_blob("params.bin", p.data(), p.size(), "f32", {1024});
  w.set_meta(R"({"kind": "weights"})");
  EXPECT_EQ(w.commit(), tmp.sub("exports/model_final"));
  const CheckpointReader r = CheckpointReader::open(tmp.sub("exports/model_final"));
  EXPECT_FALSE(r.step().has_value());
  std::vector<char> got(p.size());
  r.read_blob("params.bin", got.data(), got.size());
  EXPECT_TRUE(got == p);
  EXPECT_EQ(entries(tmp.sub("exports")), std::vector<std::string>{"model_final"});
}

// Writes `data` as `name` under dir with plain file I/O, as another process would; its BlobInfo.
BlobInfo write_outside(const std::string& dir, const std::string& name, const std::vector<char>& data) {
  fs::create_directories((fs::path(dir) / name).parent_path());
  std::ofstream(fs::path(dir) / name, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  return BlobInfo{name, data.size(), "f32", {static_cast<int64_t>(data.size() / 4)}, crc32c(data.data(), data.size()), 0, {}};
}

TEST(Checkpoint, BlobsWrittenByOthersAreRegisteredVerifiedAndPruned) {
  TempDir tmp;
  const std::vector<char> params = pattern(4000, 1), m1 = pattern((size_t{9} << 20) + 4, 2), v1 = pattern(400, 3),
                          m2 = pattern(804, 4);
  for (int64_t step : {1, 2}) {
    CheckpointWriter w(tmp.str(), step);
    w.add_blob("params", params.data(), params.size(), "f32", {1000});
    CheckpointPartWriter part(w.temp_dir());  // as rank 1 would, into rank 0's directory
    part.add_blob("rank00001/adam_m.bin", m1.data(), m1.size(), "f32", {static_cast<int64_t>(m1.size() / 4)});
    part.begin_blob("rank00001/adam_v.bin", "f32", {100});
    for (size_t off = 0; off < v1.size(); off += 7) part.write(v1.data() + off, std::min<size_t>(7, v1.size() - off));
    part.end_blob();
    const std::vector<BlobInfo> written = part.finish();
    ASSERT_EQ(written.size(), 2u);
    EXPECT_EQ(written[0].crc32c, crc32c(m1.data(), m1.size()));
    EXPECT_EQ(written[1].crc32c, crc32c(v1.data(), v1.size()));
    for (const BlobInfo& b : written) w.add_written_blob(b);
    w.add_written_blob(write_outside(w.temp_dir(), "rank00002/adam_m.bin", m2));
    w.set_meta(R"({"optimizer_state": "per_rank"})");
    w.commit();
  }
  const std::string dir = tmp.sub("step_00000002");
  const CheckpointReader r = CheckpointReader::open(dir, CheckpointVerify::kFull);
  EXPECT_EQ(r.blob_names(), (std::vector<std::string>{"params", "rank00001/adam_m.bin", "rank00001/adam_v.bin",
                                                      "rank00002/adam_m.bin"}));
  EXPECT_EQ(r.blob_info("rank00002/adam_m.bin").crc32c, crc32c(m2.data(), m2.size()));
  EXPECT_EQ(r.blob_info("rank00002/adam_m.bin").shape, std::vector<int64_t>{201});
  std::ifstream manifest(dir + "/manifest.json");
  const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"rank00002/adam_m.bin\", \"bytes\": 804, \"dtype\": \"f32\", \"shape\": [201], \"crc32c\": \"" +
                      crc32c_hex(crc32c(m2.data(), m2.size())) + "\""),
            std::string::npos)
      << text;
  for (const auto& [name, want] : std::vector<std::pair<std::string, const std::vector<char>*>>{
           {"rank00001/adam_m.bin", &m1}, {"rank00001/adam_v.bin", &v1}, {"rank00002/adam_m.bin", &m2}}) {
    std::vector<char> got(want->size());
    r.read_blob(name, got.data(), got.size());
    EXPECT_TRUE(got == *want) << name;
  }
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"manifest.json", "params", "rank00001", "rank00002"}));
  // A damaged per-rank blob fails the full check, naming it.
  flip_byte(tmp.sub("step_00000001/rank00001/adam_v.bin"), 10);
  expect_error([&] { CheckpointReader::open(tmp.sub("step_00000001")); }, {"rank00001/adam_v.bin", "checksum mismatch"});
  // Pruning removes a checkpoint with its rank directories.
  EXPECT_EQ(prune_checkpoints(tmp.str(), 1), std::vector<std::string>{tmp.sub("step_00000001")});
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000002"});
}

TEST(Checkpoint, RegisteringAMissingOrWrongSizeBlobThrowsAndCleansUp) {
  TempDir tmp;
  const std::vector<char> data = pattern(100, 1);
  {
    CheckpointWriter w(tmp.str(), 1);
    BlobInfo missing{"rank00001/adam_m.bin", 100, "f32", {25}, 0, 0, {}};
    expect_error([&] { w.add_written_blob(missing); }, {w.temp_dir() + "/rank00001/adam_m.bin", "No such file"});
    EXPECT_FALSE(fs::exists(w.temp_dir()));
    expect_error([&] { w.commit(); }, {"already committed or failed"});
  }
  {
    CheckpointWriter w(tmp.str(), 1);
    BlobInfo short_one = write_outside(w.temp_dir(), "rank00001/adam_m.bin", data);
    short_one.bytes = 99;
    expect_error([&] { w.add_written_blob(short_one); }, {"rank00001/adam_m.bin", "size 100 bytes", "reported 99"});
    EXPECT_FALSE(fs::exists(w.temp_dir()));
  }
  {
    CheckpointWriter w(tmp.str(), 1);
    const BlobInfo b = write_outside(w.temp_dir(), "rank00001/adam_m.bin", data);
    w.add_written_blob(b);
    expect_error([&] { w.add_written_blob(b); }, {"rank00001/adam_m.bin", "twice"});
  }
  {
    CheckpointWriter w(tmp.str(), 1);
    expect_error([&] { w.add_written_blob(BlobInfo{"../escape.bin", 0, "f32", {}, 0, 0, {}}); }, {"bad blob name"});
  }
  EXPECT_TRUE(entries(tmp.str()).empty());
}

TEST(Checkpoint, UncommittedWriterRemovesBlobsWrittenByOthers) {
  TempDir tmp;
  const std::vector<char> data = pattern(1000, 1);
  write_simple(tmp.str(), 1);
  {
    CheckpointWriter w(tmp.str(), 2);
    CheckpointPartWriter part(w.temp_dir());
    part.add_blob("rank00003/adam_m.bin", data.data(), data.size());
    w.add_written_blob(part.finish().at(0));
    write_outside(w.temp_dir(), "rank00004/adam_m.bin", data);  // written, never registered
    EXPECT_TRUE(fs::exists(w.temp_dir() + "/rank00003/adam_m.bin"));
  }
  EXPECT_EQ(entries(tmp.str()), std::vector<std::string>{"step_00000001"});
}

TEST(Checkpoint, PartWriterOutsideTheSharedDirectoryThrows) {
  // A rank that does not see the owner's temporary directory (not on a shared filesystem).
  TempDir tmp;
  const char x = 1;
  CheckpointPartWriter part(tmp.sub(".tmp.step_00000001.otherhost.123"));
  expect_error([&] { part.add_blob("rank00001/adam_m.bin", &x, 1); },
               {"cannot create directory", "rank00001", "No such file or directory"});
  expect_error([&] { part.finish(); }, {"already finished or failed"});
  EXPECT_TRUE(entries(tmp.str()).empty());
}

}  // namespace
}  // namespace trellis
