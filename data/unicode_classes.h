// Unicode character classes of the tokenizers' pre-tokenization patterns: \p{L}, \p{N} and \s,
// exact for every code point of the Unicode version unicode_classes.inc names.
#pragma once
#include <cstdint>

namespace trellis {

bool is_unicode_letter(uint32_t cp);  // general category L*
bool is_unicode_number(uint32_t cp);  // general category N*
bool is_unicode_space(uint32_t cp);   // the White_Space property (regex \s)

}  // namespace trellis
