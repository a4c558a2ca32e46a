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

}  // namespace trellis
