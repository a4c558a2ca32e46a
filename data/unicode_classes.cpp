// Range tables of the Unicode classes, searched by binary search.
#include "data/unicode_classes.h"

#include <algorithm>
#include <iterator>

namespace trellis {

namespace {

struct CodePointRange {
  uint32_t first, last;
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

}  // namespace trellis
