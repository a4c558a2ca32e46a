// UTF-8 encoding and decoding shared by the tokenizers.
#include "data/utf8.h"

namespace trellis {

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

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4 bytes), or 0 when there is none;
// then `subpart` is the length of its maximal well-formed start (at least 1), which one U+FFFD replaces.
size_t utf8_sequence(const std::string& s, size_t i, size_t& subpart) {
  const uint8_t b = uint8_t(s[i]);
  subpart = 1;
  if (b < 0x80) return 1;
  const size_t len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (len == 0) return 0;
  // The second byte's range (Unicode Table 3-7): no overlong forms, surrogates or code points past U+10FFFF.
  const uint8_t lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
  const uint8_t hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const uint8_t c = uint8_t(s[i + k]);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    subpart = k + 1;
  }
  return len;
}

}  // namespace

size_t valid_utf8_length(const std::string& s, size_t i) {
  size_t subpart = 0;
  return utf8_sequence(s, i, subpart);
}

bool is_valid_utf8(const std::string& s) {
  size_t subpart = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence(s, i, subpart);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_lossy(const std::string& s) {
  std::string out;
  size_t subpart = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence(s, i, subpart);
    if (len) out.append(s, i, len);
    else out += "\xEF\xBF\xBD";
    i += len ? len : subpart;
  }
  return out;
}

}  // namespace trellis
