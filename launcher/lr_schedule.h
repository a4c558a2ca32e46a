// The learning rate of a step (steps are 1-based): linear warm-up from 0 to lr over warmup steps,
// then optimizer.schedule: cosine or linear decay to min_lr at the last step, constant lr, or
// warmup-stable-decay (lr until the last decay_steps steps, then linear to min_lr at the last step).
// A function of the step and the config alone, so a resumed run continues the same curve.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace trellis {

struct LrSchedule {
  std::string kind = "cosine";  // cosine | linear | constant | wsd
  int64_t total_steps = 1, warmup = 0;
  int64_t decay_steps = 0;  // wsd; 0 = total_steps / 5 (at least 1)
  double lr = 0, min_lr = 0;

  // wsd's last stable step (its lr is lr; the decay's first step is the next one). Negative when
  // decay_steps exceed total_steps: the run starts partway down the decay.
  int64_t decay_start() const {
    const int64_t d = decay_steps > 0 ? decay_steps : std::max<int64_t>(total_steps / 5, 1);
    return total_steps - d;
  }

  double at(int64_t step) const {
    const double warm = warmup > 0 && step <= warmup ? lr * double(step) / double(warmup) : lr;
    if (kind == "constant") return warm;
    if (kind == "wsd") {  // the decay may begin inside the warm-up: the lower of the two
      const int64_t start = decay_start();
      if (step <= start) return warm;
      const double left = double(std::max<int64_t>(total_steps - step, 0)) / double(total_steps - start);
      return std::min(warm, min_lr + (lr - min_lr) * left);
    }
    if (warmup > 0 && step <= warmup) return warm;
    if (total_steps <= warmup) return lr;
    const double progress = std::min(1.0, double(step - warmup) / double(total_steps - warmup));
    if (kind == "linear") return min_lr + (lr - min_lr) * (1.0 - progress);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
  }
};

}  // namespace trellis
