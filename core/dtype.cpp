// dtype names and the IEEE half-precision conversions.
#include "core/dtype.h"

#include <cmath>

namespace trellis {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType& out) {
  if (s == "f32" || s == "fp32" || s == "float32") out = DType::f32;
  else if (s == "bf16" || s == "bfloat16") out = DType::bf16;
  else if (s == "f16" || s == "fp16" || s == "float16") out = DType::f16;
  else return false;
  return true;
}

float to_float(f16_t h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t man = h.bits & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    float f = std::ldexp(float(man), -24);  // subnormal
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

f16_t to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16_t{uint16_t(sign | 0x7e00u)};       // NaN
  if (a >= 0x477ff000u) return f16_t{uint16_t(sign | 0x7c00u)};      // overflow -> inf
  if (a < 0x38800000u) {                                             // subnormal or zero
    float v = bits_to_f32(a);
    uint32_t m = uint32_t(std::nearbyint(std::ldexp(v, 24)));        // ties to even
    return f16_t{uint16_t(sign | m)};
  }
  uint32_t exp = (a >> 23) - 112;
  uint32_t man = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;          // round to nearest even
  return f16_t{uint16_t(sign | h)};
}

float round_to(DType t, float f) {
  switch (t) {
    case DType::bf16: return to_float(to_bf16(f));
    case DType::f16: return to_float(to_f16(f));
    default: return f;
  }
}

}  // namespace trellis
