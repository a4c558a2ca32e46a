// Metrics as JSON lines: JsonObject builds one object, MetricsFile appends one per line.
#pragma once
#include <optional>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"  // json_quote

namespace trellis {

// A JSON object built key by key, in insertion order. Doubles are written with "%.17g" so they
// read back exactly; NaN and infinities become null. Keys are not checked for duplicates.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, double v);
  JsonObject& add(std::string_view key, int64_t v);
  JsonObject& add(std::string_view key, bool v);
  JsonObject& add(std::string_view key, std::string_view v);
  JsonObject& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  JsonObject& add(std::string_view key, const std::vector<int64_t>& v);
  JsonObject& add(std::string_view key, const std::vector<double>& v);
  JsonObject& add(std::string_view key, const JsonObject& v);
  // Other integer types (int, size_t, ...), which would otherwise be ambiguous.
  template <std::integral I>
    requires(!std::same_as<I, bool> && !std::same_as<I, int64_t>)
  JsonObject& add(std::string_view key, I v) {
    return add(key, static_cast<int64_t>(v));
  }

  std::string str() const { return "{" + body_ + "}"; }
  bool empty() const { return body_.empty(); }

 private:
  void add_key(std::string_view key);
  std::string body_;
};

// A double as JSON: "%.17g", or null for NaN and infinities.
std::string json_number(double v);

// One JSON object per line, flushed after each. An empty path disables it (write does nothing).
class MetricsFile {
 public:
  // Creates missing parent directories and checks that the file can be written, without changing
  // it. Throws UserError "log.metrics_file = <path>: cannot open for writing: <reason>".
  explicit MetricsFile(const std::string& path);
  // Starts this run's records; nothing is lost. A file already at the path must be a metrics file
  // (its first line a start record; else UserError) and is moved whole to <path>.N (the first free
  // N). A resumed run then starts the new file with that file's records up to step
  // `resumed_after`, so it reads as one run, and appends after them.
  void begin(std::optional<int64_t> resumed_after);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void write(const JsonObject& obj);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool write_failed_ = false;  // warned once
};

}  // namespace trellis
