// Element types chosen at run time, and the host-side bf16/f16 <-> f32 conversions.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/host_device.h"

namespace trellis {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

std::string_view dtype_name(DType t);
// Parses "f32"/"fp32"/"float32", "bf16", "f16"/"fp16"; returns false when unknown.
bool parse_dtype(std::string_view s, DType& out);

// Storage types for 16-bit floats on the host; bit-compatible with __nv_bfloat16 / __half.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float to_float(float x) { return x; }
inline float to_float(bf16_t x) { return bits_to_f32(uint32_t(x.bits) << 16); }
float to_float(f16_t x);

// Round to nearest even, NaN kept NaN.
inline bf16_t to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{uint16_t(u >> 16)};
}
f16_t to_f16(float f);

// A split fp32 master weight (AdamW on bf16 parameters, core/ops.h): the bf16 parameter is the high
// half of (master bits + 0x8000), 16 more bits keep the low half. So the parameter is the master
// rounded to bf16 (ties away from zero, where round-to-nearest-even goes to the even neighbour)
// and the pair is the master, exactly, in 4 bytes instead of 6 (a NaN: a quiet NaN of its sign).
// On bits, for host and device code (the CUDA AdamW); then on values.
TRELLIS_HD uint32_t join_master_bits(uint16_t hi, uint16_t lo) { return ((uint32_t(hi) << 16) | lo) - 0x8000u; }
TRELLIS_HD void split_master_bits(uint32_t u, uint16_t& hi, uint16_t& lo) {
  u = (u & 0x7fffffffu) > 0x7f800000u ? (u & 0x80000000u) | 0x7fc00000u : u;  // NaN stays NaN (no carry)
  u += 0x8000u;
  hi = uint16_t(u >> 16);
  lo = uint16_t(u);
}
inline float join_master(bf16_t hi, uint16_t lo) { return bits_to_f32(join_master_bits(hi.bits, lo)); }
inline void split_master(float master, bf16_t& hi, uint16_t& lo) { split_master_bits(f32_to_bits(master), hi.bits, lo); }

template <typename T> inline T from_float(float f);
template <> inline float from_float<float>(float f) { return f; }
template <> inline bf16_t from_float<bf16_t>(float f) { return to_bf16(f); }
template <> inline f16_t from_float<f16_t>(float f) { return to_f16(f); }

// Rounds a float to the precision of a dtype (identity for f32).
float round_to(DType t, float f);

}  // namespace trellis
