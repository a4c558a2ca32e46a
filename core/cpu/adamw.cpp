// CPU AdamW step on f32 master weights, optionally writing the updated weights in another dtype, or on
// split masters (bf16 parameters and the low halves beside them); gradients f32, bf16 or f16.
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

// One AdamW step over one run (one weight decay), on gradients of type G (f32, or 16-bit under train.grad_dtype).
// This step's values: from h and grad_scale, or from h.scalars.
struct StepValues {
  float lr, bc1, bc2, grad_scale;
};

template <typename G>
void adamw_one_run(const Tensor& master, const Tensor& m, const Tensor& v, const G* pg, const Tensor& params_out,
                   const AdamWHyper& h, float decay, const StepValues& sv) {
  const int64_t n = master.numel();
  float *pm = m.ptr<float>(), *pv = v.ptr<float>();
  // Everything by value: pointers and hyperparameters the compiler must otherwise reload after
  // each store would keep the loops below from vectorizing.
  const float beta1 = h.beta1, beta2 = h.beta2, lr = sv.lr, eps = h.eps, bc1 = sv.bc1, bc2 = sv.bc2;
  const float grad_scale = sv.grad_scale;
  auto update = [=](int64_t i, float w) {
    const float g = load(pg, i) * grad_scale;
    const float mi = beta1 * pm[i] + (1.0f - beta1) * g;
    const float vi = beta2 * pv[i] + (1.0f - beta2) * g * g;
    const float mhat = mi / bc1, vhat = vi / bc2;
    pm[i] = mi;
    pv[i] = vi;
    return w - lr * (mhat / (std::sqrt(vhat) + eps) + decay * w);
  };
  if (master.dtype == DType::bf16) {  // split masters: high halves in params_out, low halves in master
    auto* hi = reinterpret_cast<uint16_t*>(params_out.ptr<bf16_t>());
    auto* lo = static_cast<uint16_t*>(master.data);
    // Vectorized (simd, a private copy of `update`, sqrt without errno: core/CMakeLists.txt, and
    // split_master_bits's NaN test a select); each element's arithmetic is unchanged. It is the
    // host's AdamW under zero.offload, where its speed sets the step's.
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelMin) firstprivate(hi, lo, update)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h16 = hi[i], l16 = lo[i];
      split_master_bits(f32_to_bits(update(i, bits_to_f32(join_master_bits(h16, l16)))), h16, l16);
      hi[i] = h16;
      lo[i] = l16;
    }
    return;
  }
  float* pw = master.ptr<float>();
  auto step = [&](auto tag, void* out) {
    using T = decltype(tag);
    T* po = static_cast<T*>(out);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float w = update(i, pw[i]);
      pw[i] = w;
      if (po) store(po, i, w);
    }
  };
  if (!params_out.defined()) {
    step(float{}, nullptr);
    return;
  }
  dispatch_float(params_out.dtype, "adamw_step", [&](auto tag) { step(tag, params_out.data); });
}

}  // namespace

void adamw_step_scalars(Runtime&, const Tensor& scalars, const Tensor& loss_sum, const Tensor& norm_sq) {
  finish_step_scalars(scalars.ptr<float>(), *loss_sum.ptr<float>(), *norm_sq.ptr<float>());
}

void adamw_step(Runtime&, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params_out, const AdamWHyper& h, float grad_scale, const AdamWRuns* runs) {
  StepValues sv{h.lr, bias_correction(h.beta1, h.step), bias_correction(h.beta2, h.step), grad_scale};
  if (h.scalars.defined()) {  // host memory on this backend
    const float* s = h.scalars.ptr<float>();
    if (s[kApply] == 0.0f) return;
    sv = StepValues{s[kLr], s[kBiasCorrection1], s[kBiasCorrection2], s[kGradScale]};
  }
  dispatch_float(grad.dtype, "adamw_step", [&](auto gtag) {
    using G = decltype(gtag);
    if (!runs) {
      adamw_one_run(master, m, v, grad.ptr<G>(), params_out, h, h.weight_decay, sv);
      return;
    }
    int64_t begin = 0;  // run by run, each with or without weight decay
    for (size_t i = 0; i < runs->ends.size(); ++i) {
      const int64_t n = runs->ends[i] - begin;
      adamw_one_run(master.slice(begin, {n}), m.slice(begin, {n}), v.slice(begin, {n}), grad.ptr<G>() + begin,
                    params_out.defined() ? params_out.slice(begin, {n}) : Tensor(), h,
                    runs->decays[i] ? h.weight_decay : 0.0f, sv);
      begin = runs->ends[i];
    }
  });
}

}  // namespace trellis::cpu
