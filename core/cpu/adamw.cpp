// CPU AdamW step on f32 master weights, optionally writing the updated weights in another dtype, or on
// split masters (bf16 parameters and the low halves beside them); gradients f32, bf16 or f16.
#include <cmath>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

// One AdamW step over one run (one weight decay), on gradients of type G (f32, or 16-bit under train.grad_dtype).
template <typename G>
void adamw_one_run(const Tensor& master, const Tensor& m, const Tensor& v, const G* pg, const Tensor& params_out,
                   const AdamWHyper& h, float grad_scale) {
  const int64_t n = master.numel();
  float *pm = m.ptr<float>(), *pv = v.ptr<float>();
  const float bc1 = float(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bc2 = float(1.0 - std::pow(double(h.beta2), double(h.step)));
  // Everything by value: pointers and hyperparameters the compiler must otherwise reload after
  // each store would keep the loops below from vectorizing.
  const float beta1 = h.beta1, beta2 = h.beta2, lr = h.lr, eps = h.eps, decay = h.weight_decay;
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

void adamw_step(Runtime& rt, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params_out, const AdamWHyper& h, float grad_scale, const AdamWRuns* runs) {
  if (runs) {  // run by run, each with or without weight decay
    int64_t begin = 0;
    for (size_t i = 0; i < runs->ends.size(); ++i) {
      const int64_t n = runs->ends[i] - begin;
      AdamWHyper hr = h;
      if (!runs->decays[i]) hr.weight_decay = 0.0f;
      cpu::adamw_step(rt, master.slice(begin, {n}), m.slice(begin, {n}), v.slice(begin, {n}),
                      grad.slice(begin, {n}), params_out.defined() ? params_out.slice(begin, {n}) : Tensor(), hr,
                      grad_scale, nullptr);
      begin = runs->ends[i];
    }
    return;
  }
  dispatch_float(grad.dtype, "adamw_step", [&](auto gtag) {
    using G = decltype(gtag);
    adamw_one_run(master, m, v, grad.ptr<G>(), params_out, h, grad_scale);
  });
}

}  // namespace trellis::cpu
