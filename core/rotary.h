// RoPE's rotation frequencies, shared by the CPU and CUDA kernels: pair i of a head of size hd
// turns by theta^(-2i/hd) radians a position, optionally rescaled as Llama 3.1 and 3.2 do
// (transformers' rope_type "llama3"), divided by a factor, position interpolation (rope_type "linear"),
// or by YaRN (rope_type "yarn", with its scaled amplitude), or each pair by a factor of its own
// (LongRoPE, rope_type "longrope": Phi-3's long contexts, also with a scaled amplitude).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace trellis {

// The most pairs a head turns (head_dim <= 256).
constexpr int kMaxRotaryPairs = 128;

struct RotaryFrequencies {
  double theta = 10000.0;
  // Llama 3's scaling: frequencies whose wavelength is longer than original_positions /
  // low_freq_factor are divided by factor, those shorter than original_positions /
  // high_freq_factor kept, and those between blended smoothly. factor = 1: no scaling.
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_positions = 8192.0;
  bool linear = false;  // every frequency divided by factor (Chen et al. 2023's position interpolation)
  // YaRN (Peng et al. 2023; Qwen2.5's and Qwen3's long contexts): pairs below the correction range of
  // beta_fast .. beta_slow rotations over original_positions (its ends rounded outwards, as transformers'
  // truncate) keep their frequency, those above are divided by factor, those between blended linearly;
  // and q and k are scaled by attention_factor (cos and sin times it: YaRN's mscale).
  bool yarn = false;
  double beta_fast = 32.0, beta_slow = 1.0, attention_factor = 1.0;
  // Partial rotary (Phi-3's, GPT-NeoX's partial_rotary_factor; Megatron's --rotary-percent): only the
  // first `dims` of each head turn, as a head of that size would (pairs (i, i + dims/2), frequencies
  // over dims); the rest pass unturned. 0 = the whole head.
  int64_t dims = 0;
  // LongRoPE (Ding et al. 2024; Phi-3's long contexts): pair i's frequency divided by pair_factors[i]
  // (the model's long or short factors, as its context exceeds the original one or not), and q and
  // k scaled by attention_factor.
  bool longrope = false;
  double pair_factors[kMaxRotaryPairs] = {};

  RotaryFrequencies(double base = 10000.0) : theta(base) {}  // implicit: a plain base is unscaled
  bool operator==(const RotaryFrequencies& o) const {  // spelled out: CUDA sources compile as C++17
    bool same = theta == o.theta && factor == o.factor && low_freq_factor == o.low_freq_factor &&
                high_freq_factor == o.high_freq_factor && original_positions == o.original_positions &&
                linear == o.linear && yarn == o.yarn && beta_fast == o.beta_fast && beta_slow == o.beta_slow &&
                attention_factor == o.attention_factor && dims == o.dims && longrope == o.longrope;
    for (int i = 0; i < kMaxRotaryPairs && same; ++i) same = pair_factors[i] == o.pair_factors[i];
    return same;
  }
  bool operator!=(const RotaryFrequencies& o) const { return !(*this == o); }

  // Radians a position for pair i of `half` pairs.
  TRELLIS_HD double inverse_frequency(int64_t i, int64_t half) const {
    const double f = pow(theta, -double(i) / double(half));
    if (longrope) return f / pair_factors[i];
    if (factor == 1.0) return f;
    if (linear) return f / factor;
    if (yarn) {
      // The pair index at which a frequency turns `rotations` times over the original context.
      const double dim = 2.0 * double(half), two_pi = 6.283185307179586;
      double low = floor(dim * log(original_positions / (beta_fast * two_pi)) / (2.0 * log(theta)));
      double high = ceil(dim * log(original_positions / (beta_slow * two_pi)) / (2.0 * log(theta)));
      low = low > 0.0 ? low : 0.0;
      high = high < dim - 1.0 ? high : dim - 1.0;
      if (low == high) high += 0.001;
      double ramp = (double(i) - low) / (high - low);
      ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
      return f / factor * ramp + f * (1.0 - ramp);
    }
    const double wavelength = 6.283185307179586 / f;
    if (wavelength < original_positions / high_freq_factor) return f;
    if (wavelength > original_positions / low_freq_factor) return f / factor;
    const double smooth = (original_positions / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0 - smooth) * f / factor + smooth * f;
  }
  // What cos and sin are scaled by: YaRN's or LongRoPE's attention factor, else 1.
  TRELLIS_HD double amplitude() const { return yarn || longrope ? attention_factor : 1.0; }
  // The turned dims of a head of size hd.
  TRELLIS_HD int64_t turned(int64_t hd) const { return dims > 0 ? dims : hd; }
};

// YaRN's default attention factor for a scaling factor (its mscale: 0.1 ln(factor) + 1, 1 unscaled).
inline double yarn_attention_factor(double factor) { return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0; }
// LongRoPE's default (transformers', for a context `factor` times the original positions):
// sqrt(1 + ln(factor) / ln(original positions)), 1 unscaled.
inline double longrope_attention_factor(double factor, double original_positions) {
  return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original_positions));
}

}  // namespace trellis
