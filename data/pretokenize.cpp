// The pre-tokenization patterns matched by hand: at each position the first alternative of the
// pattern that matches wins, as in the regex engines Hugging Face and tiktoken use.
#include "data/pretokenize.h"

#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace trellis {

namespace {

bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }
bool is_other(uint32_t c) { return !is_unicode_space(c) && !is_unicode_letter(c) && !is_unicode_number(c); }

// Lower case of an ASCII letter; U+017F (long s) folds to 's' as a case-insensitive regex folds it.
uint32_t fold(uint32_t c) { return c == 0x17F ? 's' : (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// The length of a contraction 's 't 're 've 'm 'll 'd at cp[i], or 0.
size_t contraction(const std::vector<uint32_t>& cp, size_t i, bool any_case) {
  const size_t n = cp.size();
  if (cp[i] != '\'' || i + 1 >= n) return 0;
  const auto c = [&](size_t k) { return k < n ? (any_case ? fold(cp[k]) : cp[k]) : 0; };
  const uint32_t a = c(i + 1), b = c(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t run_of(const std::vector<uint32_t>& cp, size_t from, bool (*cls)(uint32_t), size_t max_len = SIZE_MAX) {
  size_t end = from;
  while (end < cp.size() && end - from < max_len && cls(cp[end])) ++end;
  return end;
}

// \s+(?!\S), then \s+, at a whitespace code point cp[i]: the end of the match.
size_t trailing_space(const std::vector<uint32_t>& cp, size_t i) {
  const size_t end = run_of(cp, i, is_unicode_space);
  return end < cp.size() && end - i >= 2 ? end - 1 : end;  // leave the last space to the word that follows
}

size_t gpt2_match(const std::vector<uint32_t>& cp, size_t i) {
  if (const size_t len = contraction(cp, i, false)) return i + len;
  const size_t start = (cp[i] == ' ' && i + 1 < cp.size()) ? i + 1 : i;  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  for (bool (*cls)(uint32_t) : {is_unicode_letter, is_unicode_number, is_other})
    if (cls(cp[start])) return run_of(cp, start, cls);
  return trailing_space(cp, i);
}

size_t llama3_match(const std::vector<uint32_t>& cp, size_t i, size_t max_digits) {
  const size_t n = cp.size();
  if (const size_t len = contraction(cp, i, true)) return i + len;
  const uint32_t c = cp[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_newline(c) && !is_unicode_letter(c) && !is_unicode_number(c) && i + 1 < n && is_unicode_letter(cp[i + 1]))
    return run_of(cp, i + 1, is_unicode_letter);
  if (is_unicode_letter(c)) return run_of(cp, i, is_unicode_letter);
  if (is_unicode_number(c)) return run_of(cp, i, is_unicode_number, max_digits);  // \p{N}{1,3} or \p{N}
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t start = (c == ' ' && i + 1 < n && is_other(cp[i + 1])) ? i + 1 : i;
  if (is_other(cp[start])) return run_of(cp, run_of(cp, start, is_other), is_newline);
  // \s*[\r\n]+: the whitespace up to and including its last newline
  const size_t end = run_of(cp, i, is_unicode_space);
  for (size_t k = end; k > i; --k)
    if (is_newline(cp[k - 1])) return k;
  return trailing_space(cp, i);
}

}  // namespace

std::vector<std::string> pretokenize(const std::string& text, SplitPattern pattern) {
  std::vector<uint32_t> cp;
  std::vector<size_t> at;  // byte offset of each code point, plus the end
  for (size_t i = 0; i < text.size();) {
    at.push_back(i);
    cp.push_back(next_utf8(text, i));
  }
  at.push_back(text.size());
  std::vector<std::string> pieces;
  for (size_t i = 0; i < cp.size();) {
    const size_t end = pattern == SplitPattern::kGpt2     ? gpt2_match(cp, i)
                       : pattern == SplitPattern::kLlama3 ? llama3_match(cp, i, 3)
                                                          : llama3_match(cp, i, 1);
    pieces.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

std::optional<SplitPattern> split_pattern_of_regex(const std::string& regex) {
  static const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const std::string kHead = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)";
  static const std::string kTail = R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == kGpt2) return SplitPattern::kGpt2;
  if (regex == kHead + R"(\p{N}{1,3})" + kTail) return SplitPattern::kLlama3;
  if (regex == kHead + R"(\p{N})" + kTail) return SplitPattern::kQwen2;
  return std::nullopt;
}

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

int byte_of_byte_level(uint32_t cp) {
  static const std::vector<int> table = [] {
    std::vector<int> t(0x200, -1);  // the map's code points are below U+0144
    const auto& b2u = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; ++b) t[b2u[size_t(b)]] = b;
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

std::string to_byte_level(const std::string& bytes) {
  const auto& b2u = gpt2_byte_to_unicode();
  std::string out;
  for (char ch : bytes) append_utf8(out, b2u[uint8_t(ch)]);
  return out;
}

}  // namespace trellis
