// UTF-8 encoding and decoding shared by the tokenizers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trellis {

void append_utf8(std::string& out, uint32_t cp);
// Decodes the code point at s[i], advancing i; invalid bytes decode as U+FFFD, one byte each.
uint32_t next_utf8(const std::string& s, size_t& i);
std::vector<uint32_t> decode_utf8(const std::string& s);
// Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF.
bool is_valid_utf8(const std::string& s);
// The length of the well-formed sequence at s[i] (1 to 4 bytes), or 0 where s[i] begins none.
size_t valid_utf8_length(const std::string& s, size_t i);
// `s` with each maximal ill-formed part replaced by one U+FFFD (what Rust's from_utf8_lossy and
// Python's errors="replace" do).
std::string utf8_lossy(const std::string& s);

}  // namespace trellis
