// A flat run of integer tokens of some on-disk element type, read as int32 ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trellis {

// Element types, numbered as Megatron's indexed dataset numbers them.
enum class TokenType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8, u32 = 100 };

// Bytes per element; 0 for codes that are not a token type we read (floats, unknown codes).
int token_type_size(TokenType t);
std::string token_type_name(TokenType t);

struct TokenView {
  const uint8_t* base = nullptr;  // first token (may be unaligned)
  int64_t count = 0;
  TokenType type = TokenType::u16;

  int64_t at(int64_t i) const;
  // out[k] = at(start + k) for k < n.
  void copy(int64_t start, int64_t n, int32_t* out) const;
};

// What one pass over the tokens finds: the largest id and the first position of an id outside
// [0, limit) (-1 if none; limit <= 0 checks only for negative ids), and a 64-bit checksum of the
// ids in order (the same for the same ids whatever their on-disk type).
struct TokenScan {
  int64_t max_id = -1;
  int64_t first_bad = -1;
  int64_t bad_id = 0;
  uint64_t checksum = 0;
};
TokenScan scan_tokens(const TokenView& v, int64_t limit);
// The ids as elements of `type` (u8, u16, i32 or u32) in `bytes`, little-endian as the files hold
// them; returns the index of the first id outside [0, the type's limit), or -1 when all fit.
int64_t store_tokens(const std::vector<int32_t>& ids, TokenType type, std::vector<uint8_t>& bytes);

// A 64-bit checksum as 16 lowercase hex digits (as logs and error lines show them).
std::string checksum_hex(uint64_t checksum);

}  // namespace trellis
