// The one JSON reader (checkpoint manifests and meta, vocabulary files) and JSON string quoting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis {

// A parsed JSON value.
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // a string's unescaped value, or a number's literal text (exact for int64)
  std::vector<JsonValue> items;                            // array elements
  std::vector<std::pair<std::string, JsonValue>> members;  // object members, in file order
  size_t begin = 0, end = 0;  // this value's span in the parsed text

  const JsonValue* find(std::string_view key) const;  // object member or nullptr
  // The member `key`; throws CheckpointError "JSON offset N: no member \"key\"" where there is none.
  const JsonValue& at(std::string_view key) const;
  // Typed access; a wrong kind, or a non-integer for as_int, throws CheckpointError
  // "JSON offset N: expected ..." (the checkpoint reader's contract; see core/checkpoint.h).
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  bool as_bool() const;
};

// Parses one JSON value (RFC 8259, nesting depth <= 64).
// Throws CheckpointError "JSON offset N: ..." (what checkpoint readers catch).
JsonValue parse_json(std::string_view text);
// The same for user-supplied files: throws UserError "<source>: invalid JSON at byte N: ...".
JsonValue parse_json(std::string_view text, const std::string& source);

// "text" with JSON escapes, quotes included; UTF-8 passes through unchanged.
std::string json_quote(std::string_view s);

}  // namespace trellis
