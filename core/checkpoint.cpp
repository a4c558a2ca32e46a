// Checkpoint storage: the atomic writer (temp dir, CRC32C while writing, fsync, rename), the
// verifying reader, latest-valid lookup and pruning. Manifests are read with core/json.h.
#include "core/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/crc32c.h"

namespace fs = std::filesystem;

namespace trellis {
namespace {

constexpr size_t kIoChunk = size_t{8} << 20;  // write buffer and read chunk
constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "trellis-checkpoint";

[[noreturn]] void fail(const std::string& what) { throw CheckpointError("checkpoint: " + what); }
[[noreturn]] void fail_errno(const std::string& action, const std::string& path, int err) {
  fail(action + " " + path + ": " + std::strerror(err));
}

// Owns a file descriptor; close() reports errors, the destructor ignores them.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept { std::swap(fd_, o.fd_); return *this; }
  int get() const { return fd_; }
  void close(const std::string& path) {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) fail_errno("cannot close", path, errno);
  }

 private:
  int fd_;
};

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_errno("cannot write", path, errno);
    }
    if (w == 0) fail("cannot write " + path + ": short write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes into p, updating *crc; fails on a read error or early end of file.
void read_all(int fd, char* p, size_t n, uint32_t* crc, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, std::min(n, kIoChunk));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_errno("cannot read", path, errno);
    }
    if (r == 0) fail(path + ": unexpected end of file (truncated)");
    *crc = crc32c_update(*crc, p, static_cast<size_t>(r));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void fsync_dir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("cannot open directory", path, errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail_errno("cannot fsync directory", path, errno);
  fd.close(path);
}

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// This host's name reduced to [A-Za-z0-9-], so it contains no '.' and splits cleanly.
const std::string& host_token() {
  static const std::string token = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return std::string("localhost");
    std::string t(buf);
    for (char& c : t)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) c = '-';
    return t;
  }();
  return token;
}

bool name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

bool valid_blob_name(std::string_view name) {
  if (name.empty() || name.size() > 1024 || name == kManifest) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view comp = name.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (comp.empty() || comp[0] == '.' || !std::all_of(comp.begin(), comp.end(), name_char_ok)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The pieces of a temporary directory name ".tmp.[old.]<base>.<host>.<pid>".
struct TempName {
  std::string base, host;
  long pid = 0;
  bool old = false;  // a replaced checkpoint moved aside, not one being written
};
std::optional<TempName> parse_temp_name(std::string_view n) {
  if (n.substr(0, 5) != ".tmp.") return std::nullopt;
  n.remove_prefix(5);
  const bool old = n.substr(0, 4) == "old.";
  if (old) n.remove_prefix(4);
  const size_t first = n.find('.'), last = n.rfind('.');
  if (first == std::string_view::npos || first == last) return std::nullopt;
  TempName t{std::string(n.substr(0, first)), std::string(n.substr(first + 1, last - first - 1)), 0, old};
  const std::string_view pid = n.substr(last + 1);
  const auto [ptr, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), t.pid);
  if (ec != std::errc() || ptr != pid.data() + pid.size() || t.pid <= 0 || t.host.empty()) return std::nullopt;
  return t;
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

// A temporary dir of this host whose writer has died (the only ones that may be touched).
std::optional<TempName> abandoned_temp(const std::string& path) {
  auto tn = parse_temp_name(fs::path(path).filename().string());
  if (!tn || tn->host != host_token() || process_alive(tn->pid)) return std::nullopt;
  return tn;
}

}  // namespace

// Step dirs newest first (the resume picks the first valid one).
std::vector<std::pair<int64_t, std::string>> list_step_dirs(const std::string& root,
                                                            std::vector<std::string>* temp_dirs) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  if (!fs::exists(root, ec)) return steps;
  fs::directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ec2;
    if (!it->is_directory(ec2)) continue;
    if (const auto step = parse_checkpoint_dir_name(name)) steps.emplace_back(*step, it->path().string());
    else if (temp_dirs && parse_temp_name(name)) temp_dirs->push_back(it->path().string());
  }
  if (ec) fail("cannot list " + root + ": " + ec.message());
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return steps;
}

void restore_interrupted_swaps(const std::string& root, bool any_writer) {
  std::vector<std::string> temps;
  list_step_dirs(root, &temps);
  for (const std::string& t : temps) {
    const auto tn = any_writer ? parse_temp_name(fs::path(t).filename().string()) : abandoned_temp(t);
    if (!tn || !tn->old) continue;
    // Never over anything (rename would replace an empty directory): RENAME_NOREPLACE, or where
    // the filesystem lacks it, a plain rename after the check. A failure is left alone: another
    // rank of this host may have restored it first.
    const std::string final_dir = join(root, tn->base);
    bool moved = ::renameat2(AT_FDCWD, t.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) == 0;
    if (!moved && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) {
      struct stat st;
      moved = ::lstat(final_dir.c_str(), &st) != 0 && errno == ENOENT && ::rename(t.c_str(), final_dir.c_str()) == 0;
    }
    if (moved) {
      try {
        fsync_dir(root);
      } catch (const CheckpointError&) {
      }
    }
  }
}

// --- names -------------------------------------------------------------------------------

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_checkpoint_dir_name(std::string_view name) {
  if (name.substr(0, 5) != "step_" || name.size() < 13) return std::nullopt;
  int64_t step = 0;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(b, e, step);
  if (ec != std::errc() || ptr != e || *b == '-' || *b == '+' || checkpoint_dir_name(step) != name) return std::nullopt;
  return step;
}

// --- writer --------------------------------------------------------------------------------

namespace {

// Blob files under one directory: names checked, subdirectories created, each blob buffered,
// checksummed while written and fsynced when it ends. CheckpointWriter writes its own temporary
// directory with one; CheckpointPartWriter writes into another writer's.
struct BlobFiles {
  std::string dir;
  std::vector<BlobInfo> blobs;
  std::vector<std::string> subdirs;  // under dir, relative
  // The blob being written.
  bool open = false;
  Fd fd;
  std::string path;
  BlobInfo cur;
  uint32_t chunk_crc = 0;  // of the bytes of cur's last chunk so far
  std::vector<char> buf;
  size_t buf_used = 0;

  // The blob's checksum and its chunks' over the next n bytes (cur.bytes already counts them).
  void checksum(const char* p, size_t n, uint64_t at) {
    cur.crc32c = crc32c_update(cur.crc32c, p, n);
    while (n > 0) {
      const size_t in_chunk = size_t(at % kIoChunk), take = std::min(n, kIoChunk - in_chunk);
      chunk_crc = crc32c_update(chunk_crc, p, take);
      if (in_chunk + take == kIoChunk) {
        cur.chunk_crc32c.push_back(chunk_crc);
        chunk_crc = 0;
      }
      p += take;
      at += take;
      n -= take;
    }
  }

  // A valid name not used yet; returns the subdirectories it implies ("rank00003").
  std::vector<std::string> check_new_name(const std::string& name) const {
    if (!valid_blob_name(name)) fail("bad blob name '" + name + "' (use [A-Za-z0-9._-] components joined by '/')");
    for (const BlobInfo& b : blobs)
      if (b.name == name) fail("blob " + name + " added twice");
    std::vector<std::string> parents;
    for (size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
      parents.push_back(name.substr(0, slash));
    return parents;
  }
  void begin(const std::string& name, std::string dtype, std::vector<int64_t> shape) {
    if (open) fail("begin_blob(" + name + ") while blob " + cur.name + " is still open");
    for (const std::string& rel : check_new_name(name)) {
      if (std::find(subdirs.begin(), subdirs.end(), rel) != subdirs.end()) continue;
      const std::string sub = join(dir, rel);
      if (::mkdir(sub.c_str(), 0755) != 0) fail_errno("cannot create directory", sub, errno);
      subdirs.push_back(rel);
    }
    path = join(dir, name);
    fd = Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_errno("cannot create", path, errno);
    cur = BlobInfo{name, 0, std::move(dtype), std::move(shape), 0, kIoChunk, {}};
    chunk_crc = 0;
    if (buf.size() != kIoChunk) buf.resize(kIoChunk);
    buf_used = 0;
    open = true;
  }
  void write(const void* data, size_t bytes) {
    if (!open) fail("write() with no open blob");
    if (bytes > 0 && data == nullptr) fail("write() of " + std::to_string(bytes) + " bytes from nullptr");
    const char* p = static_cast<const char*>(data);
    uint64_t at = cur.bytes;
    cur.bytes += bytes;
    while (bytes > 0) {
      // Checksum each piece just before it is written or buffered, while it is in cache.
      if (buf_used == 0 && bytes >= kIoChunk) {
        checksum(p, kIoChunk, at);
        at += kIoChunk;
        write_all(fd.get(), p, kIoChunk, path);
        p += kIoChunk;
        bytes -= kIoChunk;
        continue;
      }
      const size_t take = std::min(bytes, kIoChunk - buf_used);
      checksum(p, take, at);
      at += take;
      std::memcpy(buf.data() + buf_used, p, take);
      buf_used += take;
      p += take;
      bytes -= take;
      if (buf_used == kIoChunk) flush();
    }
  }
  void end() {
    if (!open) fail("end_blob() with no open blob");
    flush();
    if (::fsync(fd.get()) != 0) fail_errno("cannot fsync", path, errno);
    fd.close(path);
    open = false;
    if (cur.bytes % kIoChunk != 0) cur.chunk_crc32c.push_back(chunk_crc);
    if (cur.chunk_crc32c.size() < 2) cur.chunk_crc32c.clear();  // one chunk: the blob's checksum is its
    cur.chunk_bytes = cur.chunk_crc32c.empty() ? 0 : kIoChunk;
    blobs.push_back(std::move(cur));
  }
  void flush() {
    write_all(fd.get(), buf.data(), buf_used, path);
    buf_used = 0;
  }
  // The subdirectories' entries, deepest first (the caller fsyncs dir itself).
  void fsync_subdirs() const {
    for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) fsync_dir(join(dir, *it));
  }
  void close_quietly() noexcept {
    open = false;
    fd = Fd();
  }
};

}  // namespace

struct CheckpointWriter::State {
  std::string root, final_dir, tmp_dir, base;
  std::string meta = "{}";
  BlobFiles files;    // in tmp_dir
  bool done = false;  // committed or failed: no further calls

  std::string users_files;  // after commit: where the replaced checkpoint's files of a user went
  void cleanup() noexcept {
    done = true;
    files.close_quietly();
    std::error_code ec;
    if (!tmp_dir.empty()) fs::remove_all(tmp_dir, ec);
  }
  // Runs f; any exception removes the temporary directory first.
  template <class F>
  auto guarded(F&& f) {
    if (done) fail("writer for " + final_dir + " was already committed or failed");
    try {
      return f();
    } catch (...) {
      cleanup();
      throw;
    }
  }
};

namespace {
std::unique_ptr<CheckpointWriter::State> make_writer_state(const std::string& final_dir_in) {
  auto s = std::make_unique<CheckpointWriter::State>();
  s->final_dir = strip_trailing_slashes(final_dir_in);
  const fs::path fp(s->final_dir);
  s->base = fp.filename().string();
  if (s->base.empty() || s->base == "." || s->base == "..")
    fail("bad checkpoint directory name '" + final_dir_in + "'");
  s->root = fp.has_parent_path() ? fp.parent_path().string() : std::string(".");
  s->tmp_dir = join(s->root, ".tmp." + s->base + "." + host_token() + "." + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(s->root, ec);
  if (ec) fail("cannot create directory " + s->root + ": " + ec.message());
  fs::remove_all(s->tmp_dir, ec);  // left by a dead writer that had our pid
  if (::mkdir(s->tmp_dir.c_str(), 0755) != 0) fail_errno("cannot create directory", s->tmp_dir, errno);
  s->files.dir = s->tmp_dir;
  return s;
}
}  // namespace

CheckpointWriter::CheckpointWriter(std::unique_ptr<State> s) : s_(std::move(s)) {}

CheckpointWriter::CheckpointWriter(const std::string& root, int64_t step) {
  if (step < 0) fail("negative step " + std::to_string(step));
  s_ = make_writer_state(join(root, checkpoint_dir_name(step)));
}

CheckpointWriter CheckpointWriter::at_path(const std::string& final_dir) {
  return CheckpointWriter(make_writer_state(final_dir));
}

CheckpointWriter::CheckpointWriter(CheckpointWriter&&) noexcept = default;

CheckpointWriter::~CheckpointWriter() {
  if (s_ && !s_->done) s_->cleanup();
}

const std::string& CheckpointWriter::users_files_set_aside() const {
  if (!s_) fail("use of a moved-from writer");
  return s_->users_files;
}

const std::string& CheckpointWriter::final_dir() const { return s_->final_dir; }
const std::string& CheckpointWriter::temp_dir() const { return s_->tmp_dir; }

void CheckpointWriter::begin_blob(const std::string& name, std::string dtype, std::vector<int64_t> shape) {
  if (!s_) fail("use of a moved-from writer");
  s_->guarded([&] { s_->files.begin(name, std::move(dtype), std::move(shape)); });
}

void CheckpointWriter::write(const void* data, size_t bytes) {
  if (!s_) fail("use of a moved-from writer");
  s_->guarded([&] { s_->files.write(data, bytes); });
}

void CheckpointWriter::end_blob() {
  if (!s_) fail("use of a moved-from writer");
  s_->guarded([&] { s_->files.end(); });
}

void CheckpointWriter::add_blob(const std::string& name, const void* data, size_t bytes, std::string dtype,
                                std::vector<int64_t> shape) {
  begin_blob(name, std::move(dtype), std::move(shape));
  write(data, bytes);
  end_blob();
}

void CheckpointWriter::add_written_blob(const BlobInfo& blob) {
  if (!s_) fail("use of a moved-from writer");
  State& s = *s_;
  s.guarded([&] {
    if (s.files.open) fail("add_written_blob(" + blob.name + ") while blob " + s.files.cur.name + " is still open");
    const std::vector<std::string> parents = s.files.check_new_name(blob.name);
    // Sizes only: its writer checksummed it, and reading it back here would serialize the save.
    const std::string path = join(s.tmp_dir, blob.name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) fail_errno("cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) fail(path + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) != blob.bytes)
      fail(path + ": size " + std::to_string(st.st_size) + " bytes, its writer reported " + std::to_string(blob.bytes));
    for (const std::string& rel : parents)  // fsynced again by commit()
      if (std::find(s.files.subdirs.begin(), s.files.subdirs.end(), rel) == s.files.subdirs.end())
        s.files.subdirs.push_back(rel);
    s.files.blobs.push_back(blob);
  });
}

void CheckpointWriter::set_meta(std::string json_object_text) {
  if (!s_) fail("use of a moved-from writer");
  State& s = *s_;
  s.guarded([&] {
    JsonValue v;
    try {
      v = parse_json(json_object_text);
    } catch (const CheckpointError& e) {
      fail(std::string("meta is not valid JSON: ") + e.what());
    }
    if (v.kind != JsonValue::Kind::kObject) fail("meta must be a JSON object");
    s.meta = json_object_text.substr(v.begin, v.end - v.begin);
  });
}

std::string CheckpointWriter::commit() {
  if (!s_) fail("use of a moved-from writer");
  State& s = *s_;
  return s.guarded([&] {
    if (s.files.open) fail("commit() while blob " + s.files.cur.name + " is still open");
    std::string m = "{\n  \"format\": \"" + std::string(kFormat) + "\",\n  \"format_version\": " +
                    std::to_string(kCheckpointFormatVersion) + ",\n  \"checksum\": \"crc32c\",\n  \"blobs\": [";
    for (size_t i = 0; i < s.files.blobs.size(); ++i) {
      const BlobInfo& b = s.files.blobs[i];
      m += i ? ",\n    " : "\n    ";
      m += "{\"name\": " + json_quote(b.name) + ", \"bytes\": " + std::to_string(b.bytes) +
           ", \"dtype\": " + json_quote(b.dtype) + ", \"shape\": [";
      for (size_t d = 0; d < b.shape.size(); ++d) m += (d ? ", " : "") + std::to_string(b.shape[d]);
      m += "], \"crc32c\": \"" + crc32c_hex(b.crc32c) + "\"";
      if (!b.chunk_crc32c.empty()) {
        m += ", \"chunk_bytes\": " + std::to_string(b.chunk_bytes) + ", \"chunk_crc32c\": [";
        for (size_t c = 0; c < b.chunk_crc32c.size(); ++c) m += (c ? ", \"" : "\"") + crc32c_hex(b.chunk_crc32c[c]) + "\"";
        m += "]";
      }
      m += "}";
    }
    m += s.files.blobs.empty() ? "],\n" : "\n  ],\n";
    m += "  \"meta_crc32c\": \"" + crc32c_hex(crc32c(s.meta.data(), s.meta.size())) + "\",\n  \"meta\": " + s.meta +
         "\n}\n";
    const std::string mpath = join(s.tmp_dir, kManifest);
    Fd fd(::open(mpath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_errno("cannot create", mpath, errno);
    write_all(fd.get(), m.data(), m.size(), mpath);
    if (::fsync(fd.get()) != 0) fail_errno("cannot fsync", mpath, errno);
    fd.close(mpath);
    s.files.fsync_subdirs();
    fsync_dir(s.tmp_dir);

    // Publish. Over an existing checkpoint, swap atomically (RENAME_EXCHANGE) so there is never
    // a moment without one; where the filesystem cannot, move the old one aside first.
    struct stat st;
    const bool replacing = ::lstat(s.final_dir.c_str(), &st) == 0;
    if (!replacing) {
      if (::rename(s.tmp_dir.c_str(), s.final_dir.c_str()) != 0)
        fail_errno("cannot rename " + s.tmp_dir + " to", s.final_dir, errno);
    } else if (!S_ISDIR(st.st_mode)) {
      fail(s.final_dir + " exists and is not a directory");
    } else if (::renameat2(AT_FDCWD, s.tmp_dir.c_str(), AT_FDCWD, s.final_dir.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        fail_errno("cannot exchange " + s.tmp_dir + " with", s.final_dir, errno);
      const std::string aside =
          join(s.root, ".tmp.old." + s.base + "." + host_token() + "." + std::to_string(::getpid()));
      std::error_code ec;
      fs::remove_all(aside, ec);
      if (::rename(s.final_dir.c_str(), aside.c_str()) != 0)
        fail_errno("cannot move " + s.final_dir + " aside to", aside, errno);
      if (::rename(s.tmp_dir.c_str(), s.final_dir.c_str()) != 0) {
        const int err = errno;
        ::rename(aside.c_str(), s.final_dir.c_str());  // put the old one back
        fail_errno("cannot rename " + s.tmp_dir + " to", s.final_dir, err);
      }
      s.tmp_dir = aside;  // cleanup() below removes the old checkpoint
    }
    fsync_dir(s.root);
    // The temporary path now holds the replaced checkpoint, if any. A user's files in it are set
    // aside with it; where that fails the old checkpoint stays there (prune sets it aside later).
    if (replacing) {
      try {
        const std::string moved = set_aside_users_files(s.tmp_dir, s.base);
        if (!moved.empty()) s.users_files = "moved to " + moved;
        s.tmp_dir.clear();  // removed, or renamed aside with the user's files
      } catch (const CheckpointError& e) {
        s.users_files = "left in " + s.tmp_dir + " (" + e.what() + ")";
        s.tmp_dir.clear();
      }
    }
    s.cleanup();
    return s.final_dir;
  });
}

// --- part writer ---------------------------------------------------------------------------

struct CheckpointPartWriter::State {
  BlobFiles files;
  bool done = false;  // finished or failed: no further calls

  template <class F>
  auto guarded(F&& f) {
    if (done) fail("part writer for " + files.dir + " was already finished or failed");
    try {
      return f();
    } catch (...) {
      done = true;
      files.close_quietly();  // the files go with the owner's temporary directory
      throw;
    }
  }
};

CheckpointPartWriter::CheckpointPartWriter(const std::string& temp_dir) : s_(std::make_unique<State>()) {
  s_->files.dir = strip_trailing_slashes(temp_dir);
}

CheckpointPartWriter::~CheckpointPartWriter() = default;

void CheckpointPartWriter::begin_blob(const std::string& name, std::string dtype, std::vector<int64_t> shape) {
  s_->guarded([&] { s_->files.begin(name, std::move(dtype), std::move(shape)); });
}

void CheckpointPartWriter::write(const void* data, size_t bytes) {
  s_->guarded([&] { s_->files.write(data, bytes); });
}

void CheckpointPartWriter::end_blob() {
  s_->guarded([&] { s_->files.end(); });
}

void CheckpointPartWriter::add_blob(const std::string& name, const void* data, size_t bytes, std::string dtype,
                                    std::vector<int64_t> shape) {
  begin_blob(name, std::move(dtype), std::move(shape));
  write(data, bytes);
  end_blob();
}

std::vector<BlobInfo> CheckpointPartWriter::finish() {
  return s_->guarded([&] {
    if (s_->files.open) fail("finish() while blob " + s_->files.cur.name + " is still open");
    // The entries this process created, from here (on a shared filesystem the owner's fsyncs at
    // commit may not cover another client's creations).
    s_->files.fsync_subdirs();
    fsync_dir(s_->files.dir);
    s_->done = true;
    return std::move(s_->files.blobs);
  });
}

// --- reader --------------------------------------------------------------------------------

CheckpointReader CheckpointReader::open(const std::string& step_dir, CheckpointVerify verify) {
  CheckpointReader r;
  r.dir_ = strip_trailing_slashes(step_dir);
  const std::string mpath = join(r.dir_, kManifest);
  std::string text;
  {
    // O_NONBLOCK: a FIFO in its place must not block the open (the check below refuses it); it
    // changes nothing for a regular file's reads.
    Fd fd(::open(mpath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) fail(mpath + ": missing (incomplete checkpoint or not a checkpoint)");
      fail_errno("cannot open", mpath, errno);
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) fail_errno("cannot stat", mpath, errno);
    if (!S_ISREG(st.st_mode) || st.st_size > (int64_t{1} << 30)) fail(mpath + ": not a regular file of sane size");
    text.resize(static_cast<size_t>(st.st_size));
    uint32_t unused = 0;
    read_all(fd.get(), text.data(), text.size(), &unused, mpath);
  }
  JsonValue m;
  try {
    m = parse_json(text);
    if (m.kind != JsonValue::Kind::kObject) throw CheckpointError("not a JSON object");
    const JsonValue* format = m.find("format");
    if (!format || format->kind != JsonValue::Kind::kString || format->text != kFormat)
      throw CheckpointError("not a Trellis checkpoint manifest (format != \"trellis-checkpoint\")");
    const JsonValue* version = m.find("format_version");
    if (!version) throw CheckpointError("no format_version");
    if (version->as_int() < 1 || version->as_int() > kCheckpointFormatVersion)
      throw CheckpointError("format_version " + version->text + " is not supported (this build reads 1.." +
                            std::to_string(kCheckpointFormatVersion) + ")");
    const JsonValue* checksum = m.find("checksum");
    if (!checksum || checksum->kind != JsonValue::Kind::kString || checksum->text != "crc32c")
      throw CheckpointError("unsupported checksum (expected \"crc32c\")");
    auto parse_crc = [](const JsonValue* v, const char* what) {
      uint32_t c = 0;
      if (!v) throw CheckpointError(std::string("no ") + what);
      const std::string& t = v->as_string();
      const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), c, 16);
      if (t.size() != 8 || ec != std::errc() || ptr != t.data() + t.size())
        throw CheckpointError(std::string("bad ") + what + " '" + t + "'");
      return c;
    };
    const JsonValue* blobs = m.find("blobs");
    if (!blobs || blobs->kind != JsonValue::Kind::kArray) throw CheckpointError("no blobs array");
    for (const JsonValue& b : blobs->items) {
      BlobInfo info;
      const JsonValue* name = b.find("name");
      const JsonValue* bytes = b.find("bytes");
      const JsonValue* dtype = b.find("dtype");
      if (!name || !bytes || !dtype) throw CheckpointError("a blob lacks name, bytes or dtype");
      info.name = name->as_string();
      if (!valid_blob_name(info.name)) throw CheckpointError("bad blob name '" + info.name + "'");
      for (const BlobInfo& other : r.blobs_)
        if (other.name == info.name) throw CheckpointError("blob " + info.name + " listed twice");
      if (bytes->as_int() < 0) throw CheckpointError("negative size for " + info.name);
      info.bytes = static_cast<uint64_t>(bytes->as_int());
      info.dtype = dtype->as_string();
      if (const JsonValue* shape = b.find("shape")) {
        if (shape->kind != JsonValue::Kind::kArray) throw CheckpointError("shape of " + info.name + " is not an array");
        for (const JsonValue& d : shape->items) {
          info.shape.push_back(d.as_int());
          if (info.shape.back() < 0) throw CheckpointError("negative dimension in the shape of " + info.name);
        }
      }
      info.crc32c = parse_crc(b.find("crc32c"), "crc32c");
      if (const JsonValue* chunks = b.find("chunk_crc32c")) {
        const JsonValue* chunk_bytes = b.find("chunk_bytes");
        if (!chunk_bytes || chunk_bytes->as_int() <= 0 || chunk_bytes->as_int() % 8 != 0 ||
            chunk_bytes->as_int() > (int64_t{1} << 30) ||
            chunks->kind != JsonValue::Kind::kArray)
          throw CheckpointError("chunk checksums of " + info.name + " without a chunk_bytes of 8 bytes to 1 GiB, a multiple of 8");
        info.chunk_bytes = uint64_t(chunk_bytes->as_int());
        for (const JsonValue& c : chunks->items) info.chunk_crc32c.push_back(parse_crc(&c, "chunk_crc32c"));
        if (info.chunk_crc32c.size() != (info.bytes + info.chunk_bytes - 1) / info.chunk_bytes)
          throw CheckpointError(std::to_string(info.chunk_crc32c.size()) + " chunk checksums for the " +
                                std::to_string(info.bytes) + " bytes of " + info.name);
      }
      r.blobs_.push_back(std::move(info));
    }
    const JsonValue* meta = m.find("meta");
    if (!meta || meta->kind != JsonValue::Kind::kObject) throw CheckpointError("no meta object");
    r.meta_ = text.substr(meta->begin, meta->end - meta->begin);
    if (crc32c(r.meta_.data(), r.meta_.size()) != parse_crc(m.find("meta_crc32c"), "meta_crc32c"))
      throw CheckpointError("meta checksum mismatch (manifest damaged)");
  } catch (const CheckpointError& e) {
    fail(mpath + ": " + e.what());
  }

  std::vector<char> buf(verify == CheckpointVerify::kFull ? kIoChunk : 0);
  for (const BlobInfo& b : r.blobs_) {
    const std::string path = join(r.dir_, b.name);
    Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));  // as the manifest's
    if (fd.get() < 0) fail_errno("cannot open", path, errno);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) fail_errno("cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) fail(path + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) != b.bytes)
      fail(path + ": size " + std::to_string(st.st_size) + " bytes, manifest says " + std::to_string(b.bytes) +
           (static_cast<uint64_t>(st.st_size) < b.bytes ? " (truncated)" : ""));
    if (verify != CheckpointVerify::kFull) continue;
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    // Read in the chunks' size where the blob has chunk checksums, each checked too.
    const uint64_t piece = b.chunk_crc32c.empty() ? kIoChunk : b.chunk_bytes;
    if (buf.size() < piece) buf.resize(size_t(piece));
    uint32_t crc = 0;
    for (uint64_t at = 0; at < b.bytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(b.bytes - at, piece));
      read_all(fd.get(), buf.data(), n, &crc, path);
      if (!b.chunk_crc32c.empty() && crc32c(buf.data(), n) != b.chunk_crc32c[size_t(at / piece)])
        fail(path + ": checksum mismatch in bytes " + std::to_string(at) + " to " + std::to_string(at + n) +
             " (the manifest's chunk checksum)");
      at += n;
    }
    if (crc != b.crc32c)
      fail(path + ": checksum mismatch (crc32c " + crc32c_hex(crc) + ", manifest says " + crc32c_hex(b.crc32c) + ")");
  }
  return r;
}

std::optional<int64_t> CheckpointReader::step() const {
  return parse_checkpoint_dir_name(fs::path(dir_).filename().string());
}

std::vector<std::string> CheckpointReader::blob_names() const {
  std::vector<std::string> names;
  for (const BlobInfo& b : blobs_) names.push_back(b.name);
  return names;
}

bool CheckpointReader::has_blob(const std::string& name) const {
  return std::any_of(blobs_.begin(), blobs_.end(), [&](const BlobInfo& b) { return b.name == name; });
}

const BlobInfo& CheckpointReader::blob_info(const std::string& name) const {
  for (const BlobInfo& b : blobs_)
    if (b.name == name) return b;
  fail(dir_ + ": no blob named " + name);
}

size_t CheckpointReader::blob_size(const std::string& name) const { return blob_info(name).bytes; }

namespace {

// Blob b's file (a regular file of the manifest's size), opened for a sequential read.
Fd open_blob(const BlobInfo& b, const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));  // as the manifest's
  if (fd.get() < 0) fail_errno("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail_errno("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) fail(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) != b.bytes)
    fail(path + ": size " + std::to_string(st.st_size) + " bytes, manifest says " + std::to_string(b.bytes));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  return fd;
}

void check_crc(const BlobInfo& b, uint32_t crc, const std::string& path) {
  if (crc != b.crc32c)
    fail(path + ": checksum mismatch (crc32c " + crc32c_hex(crc) + ", manifest says " + crc32c_hex(b.crc32c) + ")");
}

}  // namespace

void CheckpointReader::read_blob(const std::string& name, void* dst, size_t bytes) const {
  const BlobInfo& b = blob_info(name);
  const std::string path = join(dir_, name);
  if (bytes != b.bytes)
    fail(path + ": asked for " + std::to_string(bytes) + " bytes, blob has " + std::to_string(b.bytes));
  Fd fd = open_blob(b, path);
  uint32_t crc = 0;
  read_all(fd.get(), static_cast<char*>(dst), bytes, &crc, path);
  check_crc(b, crc, path);
}

void CheckpointReader::read_blob_chunks(const std::string& name,
                                        const std::function<void(uint64_t, const char*, size_t)>& f) const {
  const BlobInfo& b = blob_info(name);
  const std::string path = join(dir_, name);
  Fd fd = open_blob(b, path);
  std::vector<char> chunk(std::min<uint64_t>(b.bytes, kIoChunk));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < b.bytes;) {
    const size_t n = size_t(std::min<uint64_t>(chunk.size(), b.bytes - at));
    read_all(fd.get(), chunk.data(), n, &crc, path);
    f(at, chunk.data(), n);
    at += n;
  }
  check_crc(b, crc, path);
}

void CheckpointReader::read_blob_ranges(const std::string& name, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                        const std::function<void(uint64_t, const char*, size_t)>& f) const {
  const BlobInfo& b = blob_info(name);
  const std::string path = join(dir_, name);
  for (size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].first > ranges[i].second || ranges[i].second > b.bytes || (i && ranges[i].first < ranges[i - 1].second))
      fail(path + ": read_blob_ranges needs sorted ranges within its " + std::to_string(b.bytes) + " bytes");
  // f(offset, data, n) for the parts of `ranges` within [at, at + n) of the blob, read into data.
  size_t first = 0;  // the ranges wholly before the piece are done
  auto hand_out = [&](uint64_t at, const char* data, size_t n) {
    const uint64_t end = at + n;
    while (first < ranges.size() && ranges[first].second <= at) ++first;
    for (size_t i = first; i < ranges.size() && ranges[i].first < end; ++i) {
      const uint64_t from = std::max(at, ranges[i].first), to = std::min(end, ranges[i].second);
      if (from < to) f(from, data + (from - at), size_t(to - from));
    }
  };
  if (b.chunk_crc32c.empty()) {
    read_blob_chunks(name, hand_out);
    return;
  }
  Fd fd = open_blob(b, path);
  std::vector<char> chunk(size_t(std::min(b.chunk_bytes, b.bytes)));
  int64_t done = -1;  // the last chunk read
  for (const auto& [begin, end] : ranges) {
    if (begin == end) continue;
    for (uint64_t c = std::max<int64_t>(done + 1, int64_t(begin / b.chunk_bytes)); c * b.chunk_bytes < end; ++c) {
      const uint64_t at = c * b.chunk_bytes;
      const size_t n = size_t(std::min(b.chunk_bytes, b.bytes - at));
      for (size_t got = 0; got < n;) {
        const ssize_t r = ::pread(fd.get(), chunk.data() + got, n - got, off_t(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail_errno("cannot read", path, errno);
        if (r == 0) fail(path + ": unexpected end of file (truncated)");
        got += size_t(r);
      }
      if (const uint32_t crc = crc32c(chunk.data(), n); crc != b.chunk_crc32c[c])
        fail(path + ": checksum mismatch in bytes " + std::to_string(at) + " to " + std::to_string(at + n) + " (crc32c " +
             crc32c_hex(crc) + ", manifest says " + crc32c_hex(b.chunk_crc32c[c]) + ")");
      hand_out(at, chunk.data(), n);
      done = int64_t(c);
    }
  }
}

// --- discovery and pruning -----------------------------------------------------------------

std::optional<std::string> latest_valid_checkpoint(const std::string& root, std::string* why_skipped,
                                                   CheckpointVerify verify) {
  restore_interrupted_swaps(root, false);
  for (const auto& [step, path] : list_step_dirs(root)) {
    try {
      CheckpointReader::open(path, verify);
      return path;
    } catch (const CheckpointError& e) {
      if (why_skipped) *why_skipped += (why_skipped->empty() ? "" : "\n") + std::string(e.what());
    }
  }
  return std::nullopt;
}

std::optional<std::string> checkpoint_named_by(const std::string& path, std::string* why_skipped) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kManifest, ec) || !fs::is_directory(path, ec)) return path;
  return latest_valid_checkpoint(path, why_skipped);
}

namespace {

const std::regex& rank_dir_name() {
  static const std::regex rank_dir(R"(rank\d{5})");
  return rank_dir;
}

// The entries under `dir`, relative to it: what a checkpoint writes into `ours` (its manifest, the
// blobs it lists, files named as state blobs; not directories) and the rest into `theirs`
// (files_no_checkpoint_writes). Throws CheckpointError where `dir` cannot be listed whole.
void classify_checkpoint_dir(const std::string& dir, std::vector<std::string>* ours, std::vector<std::string>* theirs) {
  static const std::regex state_blob(R"((params|master|adam_m|adam_v)|rank\d{5}/(master|adam_m|adam_v)\.bin)");
  std::optional<CheckpointReader> reader;
  try {
    reader.emplace(CheckpointReader::open(dir, CheckpointVerify::kSizes));
  } catch (const CheckpointError&) {
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code kind, empty;
    const std::string rel = it->path().lexically_relative(dir).generic_string();  // a link as named
    if (it->is_directory(kind) && !it->is_symlink(kind)) {
      // An empty directory no checkpoint makes is the user's too (say, for an evaluation's output).
      if (theirs && fs::is_empty(it->path(), empty) && !empty && !std::regex_match(rel, rank_dir_name()))
        theirs->push_back(rel + "/");
      continue;
    }
    const bool checkpoints = rel == kManifest || std::regex_match(rel, state_blob) || (reader && reader->has_blob(rel));
    if (std::vector<std::string>* to = checkpoints ? ours : theirs) to->push_back(rel);
  }
  if (ec) fail("cannot list " + dir + ": " + ec.message());
  if (ours) std::sort(ours->begin(), ours->end());
  if (theirs) std::sort(theirs->begin(), theirs->end());
}

// Removes what a checkpoint writes under `dir`: its manifest first (so it is never taken for a
// checkpoint again), then its blobs, then its rank directories where that leaves them empty.
// Nothing else is removed, so a file that appears meanwhile stays.
void remove_checkpoint_files(const std::string& dir) {
  std::vector<std::string> ours;
  classify_checkpoint_dir(dir, &ours, nullptr);
  std::error_code ec;
  fs::remove(join(dir, kManifest), ec);
  if (ec) fail("cannot remove " + join(dir, kManifest) + ": " + ec.message());
  for (const std::string& rel : ours)
    if (!fs::remove(join(dir, rel), ec) && ec) fail("cannot remove " + join(dir, rel) + ": " + ec.message());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code kind, ignored;
    if (entry.is_directory(kind) && !entry.is_symlink(kind) &&
        std::regex_match(entry.path().filename().string(), rank_dir_name()))
      fs::remove(entry.path(), ignored);  // an rmdir: fails where a user's file is
  }
}

}  // namespace

std::vector<std::string> files_no_checkpoint_writes(const std::string& dir) {
  std::vector<std::string> theirs;
  classify_checkpoint_dir(dir, nullptr, &theirs);
  return theirs;
}

std::string set_aside_users_files(const std::string& dir, const std::string& base) {
  remove_checkpoint_files(dir);
  std::error_code ec;
  if (fs::remove(dir, ec)) return "";  // an rmdir: it succeeds only where nothing is left, so nothing of a user's
  const std::vector<std::string> theirs = files_no_checkpoint_writes(dir);
  const std::string root = fs::path(dir).parent_path().string();
  for (int n = 1; n < 1000; ++n) {
    const std::string to = join(root, base + ".user-files" + (n > 1 ? "." + std::to_string(n) : ""));
    if (::renameat2(AT_FDCWD, dir.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
      fsync_dir(root);
      std::string list;
      for (size_t i = 0; i < theirs.size() && i < 3; ++i) list += (i ? ", " : "") + theirs[i];
      if (theirs.size() > 3) list += ", ... (" + std::to_string(theirs.size()) + " in all)";
      return to + " (" + list + ")";
    }
    if (errno == EEXIST) continue;
    if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {  // no RENAME_NOREPLACE: check, then rename
      struct stat st;
      if (::lstat(to.c_str(), &st) == 0) continue;
      if (::rename(dir.c_str(), to.c_str()) == 0) {
        fsync_dir(root);
        return to + " (" + (theirs.empty() ? std::string("?") : theirs.front()) + (theirs.size() > 1 ? ", ..." : "") + ")";
      }
    }
    fail_errno("cannot move " + dir + " (files no checkpoint writes) to", to, errno);
  }
  fail("cannot set aside " + dir + ": " + base + ".user-files .. .999 are all taken");
}

std::vector<std::string> prune_checkpoints(const std::string& root, int keep, int64_t up_to_step,
                                           std::vector<std::string>* set_aside) {
  std::vector<std::string> temps, doomed;
  restore_interrupted_swaps(root, false);
  auto steps = list_step_dirs(root, &temps);
  std::erase_if(steps, [&](const auto& s) { return s.first > up_to_step; });
  if (keep > 0) {
    int valid = 0;
    size_t i = 0;
    for (; i < steps.size() && valid < keep; ++i) {
      try {
        CheckpointReader::open(steps[i].second, CheckpointVerify::kSizes);
        ++valid;
      } catch (const CheckpointError&) {
      }
    }
    if (valid == keep)
      for (; i < steps.size(); ++i) doomed.push_back(steps[i].second);
  }
  for (const std::string& t : temps)
    if (abandoned_temp(t)) doomed.push_back(t);
  std::string first_error;
  std::vector<std::string> removed;
  for (const std::string& d : doomed) {
    std::error_code ec;
    // A user's files in a step dir, or in a replaced checkpoint its writer died before setting aside
    // (a temp dir with a manifest), stay: only the checkpoint's own files go.
    const std::string name = fs::path(d).filename().string();
    const std::optional<TempName> temp = parse_temp_name(name);
    if (!temp || fs::exists(join(d, kManifest), ec)) {
      try {
        const std::string moved = set_aside_users_files(d, temp ? temp->base : name);
        if (!moved.empty()) {
          if (set_aside) set_aside->push_back(d + " -> " + moved);
          continue;
        }
      } catch (const CheckpointError& e) {
        if (first_error.empty()) first_error = std::string(e.what()).substr(std::strlen("checkpoint: "));
        continue;
      }
    }
    fs::remove_all(d, ec);
    if (!ec) removed.push_back(d);
    else if (first_error.empty()) first_error = "cannot remove " + d + ": " + ec.message();
  }
  if (!first_error.empty()) fail(first_error);
  return removed;
}

}  // namespace trellis
