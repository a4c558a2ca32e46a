// Checkpoint storage. A checkpoint is a directory <root>/step_<8-digit step>/ holding named binary
// blobs (one file each, e.g. "params.bin" or "rank00003/adam_m.bin") and manifest.json: format
// version, each blob's name, size, dtype, shape and CRC32C, and a caller-supplied `meta` JSON
// object. Writes are atomic (temporary directory, fsync, rename), reads verify sizes and
// checksums, and every failure is a CheckpointError with one line naming the path and the reason.
//
// CRC32C rather than SHA-256: the threat is torn writes and bit rot, not tampering, and CRC32C
// runs at several GB/s with the SSE4.2 instruction (SHA-256 is ~0.5 GB/s without SHA-NI), so
// checksumming while writing a multi-GB blob costs little next to the disk.
//
// manifest.json:
//   {"format": "trellis-checkpoint", "format_version": 1, "checksum": "crc32c",
//    "blobs": [{"name": "params.bin", "bytes": 24, "dtype": "f32", "shape": [2, 3],
//               "crc32c": "1a2b3c4d"}, ...],
//    "meta_crc32c": "...", "meta": {...caller's object, verbatim...}}
// A blob of more than one 8 MiB chunk also lists each chunk's CRC32C ("chunk_bytes": 8388608,
// "chunk_crc32c": [...]), so a reader that needs part of it (a pipeline stage's tensors, one
// expert rank's) reads and verifies only the chunks holding that part. Manifests without them
// (written before they existed, or by a CheckpointPartWriter) are read whole, as before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"

namespace trellis {

// Saving or loading a checkpoint failed (no space, no permission, corrupt or missing file...).
// The message is one line naming the file and the reason. Writers clean up before throwing, so
// the caller can report it and keep training.
class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& what) : std::runtime_error(what) {}
};

inline constexpr int kCheckpointFormatVersion = 1;

// "step_00000042" (at least 8 digits); parse returns nullopt for any other name.
std::string checkpoint_dir_name(int64_t step);
std::optional<int64_t> parse_checkpoint_dir_name(std::string_view name);
// The step dirs under root (step, path), newest first; with temp_dirs, also the writers' temporary
// dirs there. Throws CheckpointError if root exists but cannot be listed.
std::vector<std::pair<int64_t, std::string>> list_step_dirs(const std::string& root,
                                                            std::vector<std::string>* temp_dirs = nullptr);
// Manifests and meta are read with JsonValue / parse_json from core/json.h (included above).

struct BlobInfo {
  std::string name;
  uint64_t bytes = 0;
  std::string dtype;
  std::vector<int64_t> shape;
  uint32_t crc32c = 0;
  // The CRC32C of each chunk_bytes of the blob (the last may be shorter); empty: none recorded.
  uint64_t chunk_bytes = 0;
  std::vector<uint32_t> chunk_crc32c;
};

// Writes one checkpoint. Blobs go to <root>/.tmp.step_X.<host>.<pid>/; commit() writes the
// manifest, fsyncs every file and directory and renames the temporary directory to
// <root>/step_X, atomically replacing an existing one. Any failure throws CheckpointError and
// removes the temporary directory; so does destroying the writer without commit().
class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& root, int64_t step);  // creates root and the temp dir
  // A checkpoint at an arbitrary final directory (e.g. a weights-only export for inference).
  static CheckpointWriter at_path(const std::string& final_dir);
  ~CheckpointWriter();
  CheckpointWriter(CheckpointWriter&&) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&&) = delete;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // One blob from host memory. `name` is a relative path of [A-Za-z0-9._-] components joined by
  // '/' (none starting with '.'), unique within the checkpoint; "manifest.json" is reserved.
  void add_blob(const std::string& name, const void* data, size_t bytes, std::string dtype = "bytes",
                std::vector<int64_t> shape = {});
  // The same in pieces (e.g. copied off the GPU chunk by chunk): begin, write..., end.
  void begin_blob(const std::string& name, std::string dtype = "bytes", std::vector<int64_t> shape = {});
  void write(const void* data, size_t bytes);
  void end_blob();
  // A blob another writer put in temp_dir() (a CheckpointPartWriter, e.g. on another rank):
  // recorded in the manifest as `blob` says, after checking that its file is there with that size
  // (the checksum is the other writer's: verifying it would read the blob here).
  void add_written_blob(const BlobInfo& blob);
  // The caller's metadata: the text of one JSON object, stored verbatim (default "{}").
  void set_meta(std::string json_object_text);
  // Publishes the checkpoint; returns the final directory. The writer is done afterwards. Where it
  // replaced a checkpoint holding files no checkpoint writes, those are set aside with it
  // (set_aside_users_files) and users_files_set_aside() says where ("moved to DIR (files)", or
  // "left in TEMP_DIR (why)" where that failed: a later prune sets it aside), else it is "".
  std::string commit();
  const std::string& users_files_set_aside() const;

  const std::string& final_dir() const;
  const std::string& temp_dir() const;

  struct State;

 private:
  explicit CheckpointWriter(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// Verification depth for opening a checkpoint.
enum class CheckpointVerify {
  kSizes,  // manifest parses and is consistent, every blob file exists with the recorded size
  kFull,   // ...and every blob's CRC32C matches (reads every byte)
};

// Writes blobs into the temporary directory of a CheckpointWriter that another process owns: with
// sharded state every rank writes its own blobs ("rank00003/adam_m.bin") into one checkpoint, so
// the directory must be on a filesystem all of them see. Each blob is checksummed while written
// and fsynced; finish() fsyncs the directories and returns what was written, for the owner to pass
// to add_written_blob before commit() (which it must do only once every part has finished). A
// failure throws CheckpointError; files already written go with the owner's temporary directory.
class CheckpointPartWriter {
 public:
  explicit CheckpointPartWriter(const std::string& temp_dir);
  ~CheckpointPartWriter();
  CheckpointPartWriter(const CheckpointPartWriter&) = delete;
  CheckpointPartWriter& operator=(const CheckpointPartWriter&) = delete;

  // As CheckpointWriter's (names are relative to temp_dir).
  void add_blob(const std::string& name, const void* data, size_t bytes, std::string dtype = "bytes",
                std::vector<int64_t> shape = {});
  void begin_blob(const std::string& name, std::string dtype = "bytes", std::vector<int64_t> shape = {});
  void write(const void* data, size_t bytes);
  void end_blob();
  // The blobs written, in order. The writer is done afterwards.
  std::vector<BlobInfo> finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

class CheckpointReader {
 public:
  // Verifies the manifest and (kFull) every size and checksum; throws CheckpointError naming
  // the bad file. With kSizes the checksums are still checked by read_blob.
  static CheckpointReader open(const std::string& step_dir, CheckpointVerify verify = CheckpointVerify::kFull);

  const std::string& dir() const { return dir_; }
  std::optional<int64_t> step() const;  // from the directory name, if it is step_X
  const std::string& meta() const { return meta_; }  // the caller's JSON object text
  std::vector<std::string> blob_names() const;       // in manifest (= write) order
  bool has_blob(const std::string& name) const;
  const BlobInfo& blob_info(const std::string& name) const;  // throws if absent
  size_t blob_size(const std::string& name) const;
  // Reads the whole blob into dst (bytes must equal its size), checksumming while reading;
  // throws CheckpointError on a size or checksum mismatch (dst is then unspecified).
  void read_blob(const std::string& name, void* dst, size_t bytes) const;
  // The same in chunks, for a reader that keeps only parts: f(offset, bytes, n) for each chunk in
  // order. The checksum covers every byte and is checked after the last chunk (throws then: what
  // f kept must not be used).
  void read_blob_chunks(const std::string& name, const std::function<void(uint64_t, const char*, size_t)>& f) const;
  // Byte ranges [begin, end) of a blob (sorted, not overlapping): f(offset, bytes, n) for each
  // piece of them in order. With chunk checksums only the chunks holding them are read, each
  // verified before f sees it; without, the whole blob is streamed as read_blob_chunks does (and
  // its checksum checked after the last piece: what f kept must not be used if that throws).
  void read_blob_ranges(const std::string& name, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                        const std::function<void(uint64_t, const char*, size_t)>& f) const;

 private:
  std::string dir_;
  std::string meta_;
  std::vector<BlobInfo> blobs_;
};

// Where the filesystem has no RENAME_EXCHANGE (NFS), a commit over an existing checkpoint is two
// renames; a writer killed between them leaves the replaced checkpoint at
// .tmp.old.step_X.<host>.<pid> and no step_X. This moves such ones back (never over anything), so
// the step is not lost; the replacement, in the writer's .tmp.step_X... dir, is pruned as any
// abandoned one. Only those of dead writers on this host, unless any_writer: then all, which only
// a caller that holds the directory's lock (no writer can be live) may ask. latest_valid_checkpoint
// and prune_checkpoints call it first.
void restore_interrupted_swaps(const std::string& root, bool any_writer);

// The newest <root>/step_X whose checkpoint opens with `verify`, or nullopt (also when root does
// not exist). Corrupt ones are skipped, one line each ("step_X: reason") appended to
// *why_skipped, newline-separated; .tmp.* directories are ignored. Throws CheckpointError if
// root exists but cannot be listed.
std::optional<std::string> latest_valid_checkpoint(const std::string& root, std::string* why_skipped = nullptr,
                                                   CheckpointVerify verify = CheckpointVerify::kFull);

// A checkpoint as a user names it: `path` itself when it holds a manifest or is no directory
// (opening it then says what is wrong), else the newest valid checkpoint in that directory (a
// checkpoint.dir), or nullopt when there is none; skipped ones as latest_valid_checkpoint says.
std::optional<std::string> checkpoint_named_by(const std::string& path, std::string* why_skipped = nullptr);

// The files under checkpoint `dir` that no checkpoint writes (a user's notes, an evaluation's
// output), relative to it, sorted: all but its manifest, the blobs the manifest lists and, whether
// or not the manifest can be read, files named as Trellis's state blobs ("params", "adam_m",
// "rank00003/master.bin": launcher/checkpointing.cpp); and empty directories but rankNNNNN ones,
// listed as "name/". Links are listed as named, not followed.
// Throws CheckpointError if `dir` cannot be listed whole: then nothing under it may be removed.
std::vector<std::string> files_no_checkpoint_writes(const std::string& dir);

// Removes a checkpoint (pruned, or replaced by a commit) without touching a user's files: its
// manifest first, then the files a checkpoint writes, each by name, then its directories with an
// rmdir, which fails where anything else is (even a file written meanwhile). A directory left so is
// renamed to <its parent>/<base>.user-files (.user-files.2, ... where taken): no checkpoint any more,
// the user's files in it. Returns "that path (the files)", or "" when the directory is gone.
// Throws CheckpointError where it cannot list, remove or rename.
std::string set_aside_users_files(const std::string& dir, const std::string& base);

// Keeps the newest `keep` step dirs that pass a kSizes check and removes every step dir older
// than the oldest kept one (corrupt dirs newer than that are left for inspection); keep <= 0
// removes no step dir. Also removes .tmp.* dirs left by dead writers on this host. Touches
// only names matching step_X and .tmp.[old.]step_X.<host>.<pid>. Returns the removed paths.
// Only checkpoints at or before `up_to_step` take part: newer ones (left by an abandoned run that
// was resumed from an earlier step) are never counted or removed. A step dir (or a replaced
// checkpoint a dead writer left in its temp dir) holding files no checkpoint writes is set aside
// (set_aside_users_files) instead, named in *set_aside ("step_X -> step_X.user-files (notes.txt)").
std::vector<std::string> prune_checkpoints(const std::string& root, int keep,
                                           int64_t up_to_step = std::numeric_limits<int64_t>::max(),
                                           std::vector<std::string>* set_aside = nullptr);

}  // namespace trellis
