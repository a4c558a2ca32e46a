// Range tables of the Unicode classes, searched by binary search; NFC from the decomposition and
// combining-class tables, Hangul syllables by arithmetic.
#include "data/unicode_classes.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <vector>

#include "data/utf8.h"

namespace trellis {

namespace {

struct CodePointRange {
  uint32_t first, last;
};
struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second 0: a singleton
  bool composes;               // first + second compose back to cp (not excluded)
};

#include "data/unicode_classes.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], uint32_t cp) {
  const auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                   [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}

}  // namespace

bool is_unicode_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetterRanges, cp);
}

bool is_unicode_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, cp);
}

bool is_unicode_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t cp) {
  const auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                   [](const CombiningClass& c, uint32_t x) { return c.cp < x; });
  return it != std::end(kCombiningClasses) && it->cp == cp ? it->ccc : 0;
}

const Decomposition* decomposition(uint32_t cp) {
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const Decomposition& d, uint32_t x) { return d.cp < x; });
  return it != std::end(kDecompositions) && it->cp == cp ? &*it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V (T)
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + s % kNCount / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = decomposition(cp)) {
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// The primary composite of a pair, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  static const std::unordered_map<uint64_t, uint32_t> pairs = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (const Decomposition& d : kDecompositions)
      if (d.composes) m.emplace(uint64_t(d.first) << 32 | d.second, d.cp);
    return m;
  }();
  const auto it = pairs.find(uint64_t(a) << 32 | b);
  return it == pairs.end() ? 0 : it->second;
}

// NFC of well-formed code points.
void nfc_code_points(const std::vector<uint32_t>& in, std::vector<uint32_t>& out) {
  std::vector<uint32_t> d;
  for (uint32_t cp : in) decompose(cp, d);
  for (size_t i = 0; i < d.size();) {  // canonical order: each run of non-starters sorted by class, stably
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(d.begin() + long(i), d.begin() + long(j),
                       [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j == i ? i + 1 : j;
  }
  long starter = -1;
  uint8_t last = 0;  // the class of the last code point kept after the starter
  for (uint32_t cp : d) {
    const uint8_t cc = combining_class(cp);
    if (starter >= 0) {
      const bool adjacent = out.size() - 1 == size_t(starter);
      if (adjacent || (last != 0 && last < cc))  // not blocked
        if (const uint32_t c = compose(out[size_t(starter)], cp)) {
          out[size_t(starter)] = c;
          continue;
        }
    }
    if (cc == 0) starter = long(out.size());
    last = cc;
    out.push_back(cp);
  }
}

}  // namespace

std::string to_nfc(const std::string& text) {
  bool simple = true;  // below U+0300 every code point is a starter with no decomposition
  for (unsigned char b : text) simple &= b < 0xCC;
  if (simple) return text;
  std::string out;
  std::vector<uint32_t> run, normalized;
  const auto flush = [&] {
    normalized.clear();
    nfc_code_points(run, normalized);
    for (uint32_t cp : normalized) append_utf8(out, cp);
    run.clear();
  };
  for (size_t i = 0; i < text.size();) {
    if (valid_utf8_length(text, i) == 0) {  // an ill-formed byte: kept as it is
      flush();
      out += text[i++];
      continue;
    }
    run.push_back(next_utf8(text, i));
  }
  flush();
  return out;
}

}  // namespace trellis
