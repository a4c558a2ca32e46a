// AdamW over contiguous runs of the flat buffers (a handful of launches per step).
#include "parallel/zero/optimizer.h"

namespace trellis {

ZeroOptimizer::ZeroOptimizer(Runtime& rt, ParameterStore& params) : rt_(rt), params_(params) {
  const int64_t n = params.numel();
  if (params.dtype() == DType::f32) {
    master_ = params.flat_values();
  } else {
    master_buf_ = Buffer(rt.allocator(), size_t(n) * 4, "fp32 master weights");
    master_ = master_buf_.tensor(DType::f32, {n});
    cast(rt, master_, params.flat_values());
  }
  m_buf_ = Buffer(rt.allocator(), size_t(n) * 4, "Adam first moments");
  v_buf_ = Buffer(rt.allocator(), size_t(n) * 4, "Adam second moments");
  m_ = m_buf_.tensor(DType::f32, {n});
  v_ = v_buf_.tensor(DType::f32, {n});
  fill(rt, m_, 0.0f);
  fill(rt, v_, 0.0f);
  for (const Parameter& p : params.all()) {
    const int64_t numel = p.spec.shape.numel();
    if (!runs_.empty() && runs_.back().decay == p.spec.decay && runs_.back().offset + runs_.back().numel == p.offset)
      runs_.back().numel += numel;
    else
      runs_.push_back({p.offset, numel, p.spec.decay});
  }
}

void ZeroOptimizer::step(const AdamWHyper& h, float grad_scale) {
  const bool separate_master = params_.dtype() != DType::f32;
  Tensor grads = params_.flat_grads(), values = params_.flat_values();
  for (const Run& r : runs_) {
    AdamWHyper hr = h;
    if (!r.decay) hr.weight_decay = 0.0f;
    Tensor out = separate_master ? values.slice(r.offset, {r.numel}) : Tensor();
    adamw_step(rt_, master_.slice(r.offset, {r.numel}), m_.slice(r.offset, {r.numel}), v_.slice(r.offset, {r.numel}),
               grads.slice(r.offset, {r.numel}), out, hr, grad_scale);
  }
}

size_t ZeroOptimizer::state_bytes() const { return master_buf_.bytes() + m_buf_.bytes() + v_buf_.bytes(); }

}  // namespace trellis
