// Dynamic loss scale bookkeeping (host side; the overflow flag comes from the gradient norm).
#include "parallel/zero/loss_scaler.h"

#include <algorithm>

namespace trellis {

LossScaler::LossScaler(const LossScalerConfig& c)
    : cfg_(c), scale_(c.enabled ? std::max(c.initial_scale, c.min_scale) : 1.0), hysteresis_left_(c.hysteresis) {}

bool LossScaler::update(bool overflow) {
  if (!cfg_.enabled) return !overflow;
  if (overflow) {
    ++skipped_;
    clean_steps_ = 0;
    if (--hysteresis_left_ <= 0) {
      scale_ = std::max(scale_ / 2.0, cfg_.min_scale);
      hysteresis_left_ = cfg_.hysteresis;
    }
    return false;
  }
  if (++clean_steps_ >= cfg_.window) {
    scale_ *= 2.0;
    clean_steps_ = 0;
    hysteresis_left_ = cfg_.hysteresis;
  }
  return true;
}

}  // namespace trellis
