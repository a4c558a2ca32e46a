// TensorBoard event files, written by hand: no TensorFlow, no protobuf library. A file is a
// sequence of TFRecords, each holding one serialized tensorflow.Event; TensorBoard (and its
// EventAccumulator) reads scalars from them as it reads those of any other framework.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trellis {

// The CRC stored in TFRecord framing: crc32c rotated right by 15 bits plus 0xa282ead8.
uint32_t tfrecord_masked_crc(const void* data, size_t n);

// Writes scalars to <dir>/events.out.tfevents.<unix time>.<hostname>.<pid>.trellis. An empty dir
// disables it (every call does nothing). The first record is the file_version event
// ("brain.Event:2"); each scalar() is one Event {wall_time, step, summary {tag, simple_value}}
// and the file is flushed after every call, so a killed run keeps all it logged.
class TensorBoardWriter {
 public:
  // Creates dir and its missing parents. Throws UserError
  // "log.tensorboard_dir = <dir>: cannot create the directory: <reason>" or
  // "log.tensorboard_dir = <dir>: cannot open <file> for writing: <reason>".
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  bool enabled() const { return file_ != nullptr; }
  // The event file's path; empty when disabled.
  const std::string& path() const { return path_; }

  // One scalar (stored as float32, as TensorBoard's simple_value is) at a step.
  void scalar(const std::string& tag, int64_t step, double value);
  // Several scalars of one step in one Event (one record, one flush).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace trellis
