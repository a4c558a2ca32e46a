// Dynamic loss scaling for fp16 (the defaults users know from DeepSpeed and Megatron): on an
// overflow the step is skipped and, once `hysteresis` overflows have been seen since the scale
// last changed, the scale is halved; after `window` clean steps in a row it doubles. It never is
// below the minimum, also at the start.
#pragma once
#include <cstdint>

namespace trellis {

struct LossScalerConfig {
  bool enabled = false;  // fp16 only; otherwise the scale stays 1
  double initial_scale = 65536.0;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  double min_scale = 1.0;
};

// What a checkpoint keeps of the scaler.
struct LossScalerState {
  double scale = 1.0;
  int64_t clean_steps = 0, hysteresis_left = 0, skipped = 0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& c);
  float scale() const { return float(scale_); }
  // Records whether this step's gradients overflowed; returns true if the step may be applied.
  bool update(bool overflow);
  int64_t skipped() const { return skipped_; }
  bool at_minimum() const { return scale_ <= cfg_.min_scale; }
  LossScalerState state() const { return {scale_, clean_steps_, hysteresis_left_, skipped_}; }
  void restore(const LossScalerState& s) {
    scale_ = s.scale;
    clean_steps_ = s.clean_steps;
    hysteresis_left_ = s.hysteresis_left;
    skipped_ = s.skipped;
  }

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t hysteresis_left_;
  int64_t skipped_ = 0;
};

}  // namespace trellis
