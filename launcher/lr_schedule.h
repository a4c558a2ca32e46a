// Learning rate: linear warm-up from 0 to lr over warmup_steps, then cosine decay to min_lr at
// the last step (steps are 1-based).
#pragma once
#include <cmath>
#include <cstdint>

namespace trellis {

inline double learning_rate(int64_t step, int64_t total_steps, int64_t warmup, double lr, double min_lr) {
  if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
  if (total_steps <= warmup) return lr;
  double progress = double(step - warmup) / double(total_steps - warmup);
  if (progress > 1.0) progress = 1.0;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace trellis
