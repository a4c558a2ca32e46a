// A small recursive-descent JSON parser and UTF-8 encoding helpers.
#include "data/json.h"

#include <cstdlib>

#include "core/error.h"

namespace trellis::data_json {

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

uint32_t next_utf8(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t b = byte(i);
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + size_t(len) > s.size()) { ++i; return 0xFFFD; }
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) {
    if ((byte(i + size_t(k)) >> 6) != 2) { ++i; return 0xFFFD; }
    cp = (cp << 6) | (byte(i + size_t(k)) & 0x3F);
  }
  i += size_t(len);
  return cp;
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(next_utf8(s, i));
  return out;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const uint8_t u = uint8_t(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else out += c;
  }
  return out + "\"";
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : s_(text), src_(source) {}

  JsonValue document() {
    JsonValue v = value();
    skip();
    if (i_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw UserError(src_ + ": invalid JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) { ++i_; return true; }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) == 0) { i_ += w.size(); return true; }
    return false;
  }

  JsonValue value() {
    if (++depth_ > 64) fail("nested too deeply");
    skip();
    if (i_ >= s_.size()) fail("unexpected end of input");
    JsonValue v;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = JsonValue::Kind::object;
      if (!eat('}')) {
        do {
          skip();
          if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
          std::string key = string();
          expect(':');
          v.object.emplace_back(std::move(key), value());
        } while (eat(','));
        expect('}');
      }
    } else if (c == '[') {
      ++i_;
      v.kind = JsonValue::Kind::array;
      if (!eat(']')) {
        do v.array.push_back(value());
        while (eat(','));
        expect(']');
      }
    } else if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.string = string();
    } else if (literal("true")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = JsonValue::Kind::boolean;
    } else if (literal("null")) {
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.kind = JsonValue::Kind::number;
      v.number = std::strtod(begin, &end);
      if (end == begin) fail("bad number");
      i_ += size_t(end - begin);
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    --depth_;
    return v;
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {  // surrogate pair
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
  }

  const std::string& s_;
  const std::string& src_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

JsonValue parse_json(const std::string& text, const std::string& source) { return Parser(text, source).document(); }

}  // namespace trellis::data_json
