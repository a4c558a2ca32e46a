// Reading tokens of any integer element type; the one-pass vocabulary scan run at open.
#include "data/token_view.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

namespace trellis {

int token_type_size(TokenType t) {
  switch (t) {
    case TokenType::u8: case TokenType::i8: return 1;
    case TokenType::i16: case TokenType::u16: return 2;
    case TokenType::i32: case TokenType::u32: return 4;
    case TokenType::i64: return 8;
    default: return 0;
  }
}

std::string token_type_name(TokenType t) {
  switch (t) {
    case TokenType::u8: return "uint8";
    case TokenType::i8: return "int8";
    case TokenType::i16: return "int16";
    case TokenType::i32: return "int32";
    case TokenType::i64: return "int64";
    case TokenType::f64: return "float64";
    case TokenType::f32: return "float32";
    case TokenType::u16: return "uint16";
    case TokenType::u32: return "uint32";
  }
  return "unknown";
}

namespace {
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void copy_as(const uint8_t* p, int64_t n, int32_t* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = int32_t(load<T>(p + k * int64_t(sizeof(T))));
}
}  // namespace

int64_t TokenView::at(int64_t i) const {
  const uint8_t* p = base + i * token_type_size(type);
  switch (type) {
    case TokenType::u8: return load<uint8_t>(p);
    case TokenType::i8: return load<int8_t>(p);
    case TokenType::i16: return load<int16_t>(p);
    case TokenType::u16: return load<uint16_t>(p);
    case TokenType::i32: return load<int32_t>(p);
    case TokenType::u32: return load<uint32_t>(p);
    case TokenType::i64: return load<int64_t>(p);
    default: return -1;
  }
}

void TokenView::copy(int64_t start, int64_t n, int32_t* out) const {
  const uint8_t* p = base + start * token_type_size(type);
  switch (type) {
    case TokenType::u8: copy_as<uint8_t>(p, n, out); break;
    case TokenType::i8: copy_as<int8_t>(p, n, out); break;
    case TokenType::i16: copy_as<int16_t>(p, n, out); break;
    case TokenType::u16: copy_as<uint16_t>(p, n, out); break;
    case TokenType::i32: copy_as<int32_t>(p, n, out); break;
    case TokenType::u32: copy_as<uint32_t>(p, n, out); break;
    case TokenType::i64: copy_as<int64_t>(p, n, out); break;
    default: std::fill(out, out + n, -1); break;
  }
}

TokenScan scan_tokens(const TokenView& v, int64_t limit) {
  constexpr int64_t kChunk = 1 << 16;
  constexpr uint64_t kPrime = 0x100000001b3ull;  // FNV-1a's, over whole ids instead of bytes
  const int64_t chunks = (v.count + kChunk - 1) / kChunk;
  std::vector<uint64_t> chunk_sums(size_t(std::max<int64_t>(chunks, 0)));
  int64_t max_id = -1, first_bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(max : max_id) reduction(min : first_bad)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(v.count, begin + kChunk);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t id = v.at(i);
      h = (h ^ uint64_t(id)) * kPrime;
      max_id = std::max(max_id, id);
      if ((id < 0 || (limit > 0 && id >= limit)) && i < first_bad) first_bad = i;
    }
    chunk_sums[size_t(c)] = h;
  }
  TokenScan s;
  s.max_id = max_id;
  s.checksum = (0xcbf29ce484222325ull ^ uint64_t(v.count)) * kPrime;
  for (const uint64_t h : chunk_sums) s.checksum = (s.checksum ^ h) * kPrime;  // in order: a reordering changes it
  if (first_bad != INT64_MAX) {
    s.first_bad = first_bad;
    s.bad_id = v.at(first_bad);
  }
  return s;
}

int64_t store_tokens(const std::vector<int32_t>& ids, TokenType type, std::vector<uint8_t>& bytes) {
  const int64_t limit = type == TokenType::u8 ? 256 : type == TokenType::u16 ? 65536 : INT32_MAX;
  const size_t elem = size_t(token_type_size(type));
  bytes.resize(ids.size() * elem);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limit) return int64_t(i);
    if (elem == 1) bytes[i] = uint8_t(ids[i]);
    else if (elem == 2) { const uint16_t v = uint16_t(ids[i]); std::memcpy(&bytes[2 * i], &v, 2); }
    else std::memcpy(&bytes[4 * i], &ids[i], 4);
  }
  return -1;
}

std::string checksum_hex(uint64_t checksum) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)checksum);
  return s;
}

}  // namespace trellis
