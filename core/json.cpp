// A strict recursive-descent JSON parser (RFC 8259), typed access to its values, and quoting.
#include "core/json.h"

#include <charconv>
#include <cstdio>

#include "core/checkpoint.h"  // CheckpointError, thrown when no source is named
#include "core/error.h"

namespace trellis {
namespace {

void append_code_point(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class JsonParser {
 public:
  // `source` names the text in UserErrors; nullptr reports CheckpointErrors instead.
  JsonParser(std::string_view s, const std::string* source) : s_(s), source_(source) {}

  JsonValue parse_document() {
    JsonValue v = value();
    skip_ws();
    if (i_ != s_.size()) err("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void err(const std::string& what) const {
    if (source_) throw UserError(*source_ + ": invalid JSON at byte " + std::to_string(i_) + ": " + what);
    throw CheckpointError("JSON offset " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) err(std::string("expected '") + c + "'");
  }
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  JsonValue value() {
    skip_ws();
    if (i_ >= s_.size()) err("unexpected end of text");
    JsonValue v;
    v.begin = i_;
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      if (++depth_ > 64) err("nesting deeper than 64");
      ++i_;
      if (c == '{') {
        v.kind = JsonValue::Kind::kObject;
        if (!eat('}')) {
          do {
            skip_ws();
            if (i_ >= s_.size() || s_[i_] != '"') err("expected a string key");
            std::string key = string();
            expect(':');
            v.members.emplace_back(std::move(key), value());
          } while (eat(','));
          expect('}');
        }
      } else {
        v.kind = JsonValue::Kind::kArray;
        if (!eat(']')) {
          do v.items.push_back(value());
          while (eat(','));
          expect(']');
        }
      }
      --depth_;
    } else if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.text = string();
    } else if (c == '-' || digit(c)) {
      v.kind = JsonValue::Kind::kNumber;
      number();
      v.text = std::string(s_.substr(v.begin, i_ - v.begin));
    } else if (literal("true")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = JsonValue::Kind::kBool;
    } else if (!literal("null")) {
      err("unexpected character");
    }
    v.end = i_;
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  void number() {
    auto digits = [&] {
      if (i_ >= s_.size() || !digit(s_[i_])) err("malformed number");
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    };
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') ++i_;
    else digits();
    if (i_ < s_.size() && s_[i_] == '.') ++i_, digits();
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) err("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      const int d = digit(h)                 ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
      if (d < 0) err("bad \\u escape");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) err("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) err("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) err("unterminated string");
      switch (const char e = s_[i_++]) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) err("unpaired surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!literal("\\u")) err("unpaired surrogate");
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) err("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_code_point(out, cp);
          break;
        }
        default: err("bad escape");
      }
    }
  }

  std::string_view s_;
  const std::string* source_;
  size_t i_ = 0;
  int depth_ = 0;
};

[[noreturn]] void json_type_error(const JsonValue& v, const char* want) {
  throw CheckpointError("JSON offset " + std::to_string(v.begin) + ": expected " + want);
}

}  // namespace

JsonValue parse_json(std::string_view text) { return JsonParser(text, nullptr).parse_document(); }

JsonValue parse_json(std::string_view text, const std::string& source) {
  return JsonParser(text, &source).parse_document();
}

const JsonValue* JsonValue::find(std::string_view key) const {
  // The last of a repeated key, as Python's json and JavaScript read it.
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    if (it->first == key) return &it->second;
  return nullptr;
}

const JsonValue& JsonValue::at(std::string_view key) const {
  if (const JsonValue* v = find(key)) return *v;
  throw CheckpointError("JSON offset " + std::to_string(begin) + ": no member \"" + std::string(key) + "\"");
}

int64_t JsonValue::as_int() const {
  int64_t v = 0;
  if (kind == Kind::kNumber) {
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  }
  json_type_error(*this, "an integer");
}

double JsonValue::as_double() const {
  double v = 0;
  if (kind == Kind::kNumber) {
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  }
  json_type_error(*this, "a number");
}

const std::string& JsonValue::as_string() const {
  if (kind != Kind::kString) json_type_error(*this, "a string");
  return text;
}

bool JsonValue::as_bool() const {
  if (kind != Kind::kBool) json_type_error(*this, "true or false");
  return boolean;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);  // UTF-8 passes through unchanged
        }
    }
  }
  return out + "\"";
}

}  // namespace trellis
