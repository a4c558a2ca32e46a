// RoPE's rotation frequencies, shared by the CPU and CUDA kernels: pair i of a head of size hd
// turns by theta^(-2i/hd) radians a position, optionally rescaled as Llama 3.1 and 3.2 do
// (transformers' rope_type "llama3") or divided by a factor, position interpolation (rope_type "linear").
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace trellis {

struct RotaryFrequencies {
  double theta = 10000.0;
  // Llama 3's scaling: frequencies whose wavelength is longer than original_positions /
  // low_freq_factor are divided by factor, those shorter than original_positions /
  // high_freq_factor kept, and those between blended smoothly. factor = 1: no scaling.
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_positions = 8192.0;
  bool linear = false;  // every frequency divided by factor (Chen et al. 2023's position interpolation)

  RotaryFrequencies(double base = 10000.0) : theta(base) {}  // implicit: a plain base is unscaled
  bool operator==(const RotaryFrequencies& o) const {  // spelled out: CUDA sources compile as C++17
    return theta == o.theta && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_positions == o.original_positions && linear == o.linear;
  }
  bool operator!=(const RotaryFrequencies& o) const { return !(*this == o); }

  // Radians a position for pair i of `half` pairs.
  TRELLIS_HD double inverse_frequency(int64_t i, int64_t half) const {
    const double f = pow(theta, -double(i) / double(half));
    if (factor == 1.0) return f;
    if (linear) return f / factor;
    const double wavelength = 6.283185307179586 / f;
    if (wavelength < original_positions / high_freq_factor) return f;
    if (wavelength > original_positions / low_freq_factor) return f / factor;
    const double smooth = (original_positions / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0 - smooth) * f / factor + smooth * f;
  }
};

}  // namespace trellis
