// Just enough JSON for vocabulary files (GPT-2's vocab.json and our <prefix>.vocab.json):
// a parser into a small value tree, and string escaping for writers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trellis::data_json {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string string;                                    // UTF-8
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in file order

  // The member named `key`, or nullptr.
  const JsonValue* find(const std::string& key) const;
};

// Parses `text`; a UserError names `source` and the byte offset of the problem.
JsonValue parse_json(const std::string& text, const std::string& source);
// `s` as a quoted JSON string (control characters and quotes escaped, UTF-8 kept as is).
std::string json_quote(const std::string& s);

// UTF-8 helpers shared by the tokenizers.
void append_utf8(std::string& out, uint32_t cp);
// Decodes the code point at s[i], advancing i; invalid bytes decode as U+FFFD, one byte each.
uint32_t next_utf8(const std::string& s, size_t& i);
std::vector<uint32_t> decode_utf8(const std::string& s);

}  // namespace trellis::data_json
