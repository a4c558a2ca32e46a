// Philox4x32-10 counter-based RNG (Salmon et al., SC'11), usable from host and device code.
// A value depends only on (key, counter), so any shard or recomputation draws the same numbers.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace trellis {

struct Philox4 { uint32_t v[4]; };

TRELLIS_HD uint32_t philox_mulhi(uint32_t a, uint32_t b, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  lo = uint32_t(p);
  return uint32_t(p >> 32);
}

// Four 32-bit random words for counter (c0..c3) under key (k0, k1).
TRELLIS_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int i = 0; i < 10; ++i) {
    uint32_t lo0, lo1;
    uint32_t hi0 = philox_mulhi(0xD2511F53u, c0, lo0);
    uint32_t hi1 = philox_mulhi(0xCD9E8D57u, c2, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 bits, from one 32-bit word.
TRELLIS_HD float philox_uniform(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }

// Word 0 of the block for element `index` of stream `stream` under `seed`.
TRELLIS_HD uint32_t philox_word(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 r = philox4x32(uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32),
                         uint32_t(seed), uint32_t(seed >> 32));
  return r.v[0];
}

// Dropout on the attention probabilities: element (b, h, t, s) (query t, key s) of local sample b
// and local head h is the element (sample_offset + b, head_offset + h, t, s) of the global
// (samples, global_heads, T, T) probability tensor, so every layout and every recomputation draws
// the same mask. One Philox block covers 8 keys of a row as 16-bit uniforms.
struct AttentionDropoutKey {
  uint64_t seed = 0, stream = 0;
  uint32_t threshold = 0;  // dropped when the 16-bit draw < threshold = round(p * 65536); 0: no dropout
  float scale = 1.0f;      // 65536 / (65536 - threshold): exactly 1 / P(keep)
  int64_t sample_offset = 0, head_offset = 0, global_heads = 0, seq_len = 0;
};

// The factor probability (t, s) of (b, h) is multiplied by: 0 (dropped) or scale.
TRELLIS_HD float attention_keep_scale(const AttentionDropoutKey& k, int64_t b, int64_t h, int64_t t, int64_t s) {
  const uint64_t row = (uint64_t(k.sample_offset + b) * uint64_t(k.global_heads) + uint64_t(k.head_offset + h)) *
                           uint64_t(k.seq_len) + uint64_t(t);
  const uint64_t counter = row * uint64_t((k.seq_len + 7) / 8) + uint64_t(s >> 3);
  const Philox4 r = philox4x32(uint32_t(counter), uint32_t(counter >> 32), uint32_t(k.stream),
                               uint32_t(k.stream >> 32), uint32_t(k.seed), uint32_t(k.seed >> 32));
  const uint32_t w = r.v[(s >> 1) & 3];
  const uint32_t u = (s & 1) ? (w >> 16) : (w & 0xFFFFu);
  return u >= k.threshold ? k.scale : 0.0f;
}

}  // namespace trellis
