// JSON-lines metrics: a minimal JSON object writer and the file it goes to.
#include "launcher/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace trellis {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void JsonObject::add_key(std::string_view key) {
  if (!body_.empty()) body_ += ',';
  body_ += json_quote(key);
  body_ += ':';
}

JsonObject& JsonObject::add(std::string_view key, double v) {
  add_key(key);
  body_ += json_number(v);
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, int64_t v) {
  add_key(key);
  body_ += std::to_string(v);
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, bool v) {
  add_key(key);
  body_ += v ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, std::string_view v) {
  add_key(key);
  body_ += json_quote(v);
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, const std::vector<int64_t>& v) {
  add_key(key);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) body_ += ',';
    body_ += std::to_string(v[i]);
  }
  body_ += ']';
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, const std::vector<double>& v) {
  add_key(key);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) body_ += ',';
    body_ += json_number(v[i]);
  }
  body_ += ']';
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, const JsonObject& v) {
  const std::string nested = v.str();  // read first: v may be *this
  add_key(key);
  body_ += nested;
  return *this;
}

namespace {

UserError cannot_write(const std::string& path, const std::string& reason) {
  return UserError("log.metrics_file = " + path + ": cannot open for writing: " + reason);
}

// Whether a line of an earlier metrics file stays when a run resumes after step `after`: a record
// of a step up to it, or one without a step; not a later step's, nor a line that does not parse
// (the torn last line of a killed run).
bool kept_on_resume(const std::string& line, int64_t after) {
  try {
    const JsonValue record = parse_json(line);
    const JsonValue* step = record.find("step");
    return !step || step->as_int() <= after;
  } catch (const std::exception&) {  // parse_json's CheckpointError
    return false;
  }
}

bool is_start_record(const std::string& line) {
  try {
    const JsonValue record = parse_json(line);
    const JsonValue* event = record.find("event");
    return event && event->kind == JsonValue::Kind::kString && event->text == "start";
  } catch (const std::exception&) {  // parse_json's CheckpointError
    return false;
  }
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw cannot_write(path, ec.message());
  }
  file_ = std::fopen(path.c_str(), "a");  // creates it, changes nothing in an existing one
  if (file_ == nullptr) throw cannot_write(path, std::strerror(errno));
}

void MetricsFile::begin(std::optional<int64_t> resumed_after) {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string aside;  // where the earlier file now is, if there was one
  const bool earlier = fs::is_regular_file(path_, ec) && fs::file_size(path_, ec) > 0 && !ec;  // not /dev/null, say
  if (earlier) {
    std::string first;
    std::getline(std::ifstream(path_) >> std::ws, first);
    if (!is_start_record(first))
      throw UserError("log.metrics_file = " + path_ +
                      " exists and is not a Trellis metrics file (its first line is not a start record); "
                      "refusing to replace it: choose another path");
    for (int n = 1; aside.empty() || fs::exists(fs::symlink_status(aside, ec)); ++n)  // a dangling link is taken too
      aside = path_ + "." + std::to_string(n);
    fs::rename(path_, aside, ec);
    if (ec) throw cannot_write(path_, "cannot move the earlier metrics to " + aside + ": " + ec.message());
  }
  file_ = std::fopen(path_.c_str(), "w");  // a new file: the earlier one is kept whole in `aside`
  if (file_ == nullptr) throw cannot_write(path_, std::strerror(errno));
  if (aside.empty()) return;
  if (!resumed_after) {
    std::printf("note: log.metrics_file = %s held an earlier run's metrics; they are now in %s\n", path_.c_str(),
                aside.c_str());
    return;
  }
  // Resumed: this file starts with what the earlier run logged up to the checkpoint (its records of
  // later steps are replaced by this run's), so it reads as one run.
  std::ifstream in(aside);
  for (std::string line; std::getline(in, line);) {
    if (!kept_on_resume(line, *resumed_after)) continue;
    line.push_back('\n');
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) throw cannot_write(path_, std::strerror(errno));
  }
  std::fflush(file_);
  std::printf("note: log.metrics_file = %s continues the earlier metrics up to step %lld (the earlier file is now "
              "%s)\n",
              path_.c_str(), (long long)*resumed_after, aside.c_str());
}

MetricsFile::~MetricsFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsFile::write(const JsonObject& obj) {
  if (file_ == nullptr) return;
  const std::string line = obj.str() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  // Training goes on (the console has the same numbers), but the user hears of it once.
  if (!ok && !write_failed_) {
    write_failed_ = true;
    std::printf("warning: log.metrics_file = %s: cannot write (%s); its records stop here, training goes on\n",
                path_.c_str(), std::strerror(errno));
  }
}

}  // namespace trellis
