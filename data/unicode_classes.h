// Unicode character classes of the tokenizers' pre-tokenization patterns: \p{L}, \p{N} and \s,
// and canonical composition (NFC), exact for every code point of the Unicode version
// unicode_classes.inc names.
#pragma once
#include <cstdint>
#include <string>

namespace trellis {

bool is_unicode_letter(uint32_t cp);  // general category L*
bool is_unicode_number(uint32_t cp);  // general category N*
bool is_unicode_space(uint32_t cp);   // the White_Space property (regex \s)

// `text` in Normalization Form C (UAX #15: canonical decomposition, canonical order, canonical
// composition). Ill-formed UTF-8 bytes pass through unchanged, each blocking like a starter.
std::string to_nfc(const std::string& text);

}  // namespace trellis
