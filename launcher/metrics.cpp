// JSON-lines metrics: a minimal JSON object writer and the file it goes to.
#include "launcher/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"

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

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  auto fail = [&](const std::string& reason) {
    return UserError("log.metrics_file = " + path + ": cannot open for writing: " + reason);
  };
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw fail(ec.message());
  }
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw fail(std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsFile::write(const JsonObject& obj) {
  if (file_ == nullptr) return;
  const std::string line = obj.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace trellis
