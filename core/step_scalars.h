// The values of one optimizer step that AdamW reads where it runs (f32, on the parameters' device),
// so that the host never waits for the gradient norm inside a step and a step can be replayed as
// a CUDA graph. The host copies in what it knows before the step (learning rate, bias corrections,
// loss scale, clipping threshold); adamw_step_scalars (core/ops.h) adds, from the step's loss and
// sum of squared gradients, the gradient scale and whether the step is applied.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace trellis {

enum StepScalar : int64_t {
  kLr,               // this step's learning rate
  kBiasCorrection1,  // 1 - beta1^t, t the number of applied steps including this one
  kBiasCorrection2,  // 1 - beta2^t
  kLossScale,        // the gradients are the mean loss's times it: fp16's loss scale (else 1), times
                     // the share of the step's targets kept (data.eod_mask_loss; dloss is per token)
  kMaxNorm,          // train.grad_clip (<= 0: no clipping)
  kGradScale,        // out: gradients are multiplied by it (clipping and 1 / loss scale)
  kApply,            // out: 1, or 0 when the loss or the gradient norm is not finite (the step is skipped)
  kStepScalarCount
};

// kBiasCorrection1/2 of step t (1-based): rounded to f32 from double.
inline float bias_correction(float beta, int64_t t) { return float(1.0 - std::pow(double(beta), double(t))); }

// kGradScale and kApply from the host's values in s, the loss summed over the step's tokens and the
// sum of squared gradients (both f32, as accumulated). In double, as the host computed it before,
// so CPU and GPU agree bitwise.
TRELLIS_HD void finish_step_scalars(float* s, float loss_sum, float norm_sq) {
#if defined(__CUDA_ARCH__)
  using ::isfinite, ::sqrt;
#else
  using std::isfinite, std::sqrt;
#endif
  const double loss_scale = double(s[kLossScale]), max_norm = double(s[kMaxNorm]);
  const double norm = sqrt(double(norm_sq)) / loss_scale;
  const bool finite = isfinite(double(loss_sum)) && isfinite(norm);
  const double clip = max_norm > 0 && norm > max_norm ? max_norm / norm : 1.0;
  s[kGradScale] = float(clip / loss_scale);
  s[kApply] = finite ? 1.0f : 0.0f;
}

}  // namespace trellis
