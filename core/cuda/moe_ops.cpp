// The CUDA backend's mixture-of-experts ops (core/ops.h): tensors to pointers and sizes for moe.cu.
#include "core/cuda/cuda_state.h"
#include "core/cuda/gpu_ops.h"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

void moe_route(Runtime& rt, const Tensor& probs, const Tensor& lse, const Tensor& expert, const Tensor& gate,
               const Tensor& slot, const Tensor& slot_token, const Tensor& counts, const Tensor& logits,
               bool renormalize, bool dropless) {
  const int64_t N = logits.size(0), E = logits.size(1);
  launch_moe_route(compute_stream(rt), probs.ptr<float>(), lse.ptr<float>(), expert.ptr<int32_t>(), gate.ptr<float>(),
                   slot.ptr<int32_t>(), slot_token.ptr<int32_t>(), counts.ptr<float>(), logits.ptr<float>(), N,
                   int(E), int(expert.size(1)), dropless ? 0 : slot_token.numel() / E, renormalize);
}

void moe_dispatch(Runtime& rt, const Tensor& xe, const Tensor& x, const Tensor& slot_token, int64_t top_k) {
  launch_moe_dispatch(compute_stream(rt), xe.data, x.data, x.dtype, slot_token.ptr<int32_t>(), xe.rows(), xe.cols(),
                      int(top_k));
}

void moe_dispatch_backward(Runtime& rt, const Tensor& dx, const Tensor& dxe, const Tensor& slot, bool accumulate) {
  launch_moe_dispatch_backward(compute_stream(rt), dx.data, dxe.data, dx.dtype, slot.ptr<int32_t>(), slot.size(0),
                               dx.cols(), int(slot.size(1)), accumulate);
}

void moe_combine(Runtime& rt, const Tensor& out, const Tensor& ye, const Tensor& slot, const Tensor& gate,
                 const Tensor& residual) {
  launch_moe_combine(compute_stream(rt), out.data, ye.data, out.dtype, slot.ptr<int32_t>(), gate.ptr<float>(),
                     residual.defined() ? residual.data : nullptr, slot.size(0), out.cols(), int(slot.size(1)));
}

void moe_combine_backward(Runtime& rt, const Tensor& dye, const Tensor& dgate, const Tensor& dout, const Tensor& ye,
                          const Tensor& slot, const Tensor& slot_token, const Tensor& gate) {
  launch_moe_combine_backward(compute_stream(rt), dye.data, dgate.ptr<float>(), dout.data, ye.data, dout.dtype,
                              slot.ptr<int32_t>(), slot_token.ptr<int32_t>(), gate.ptr<float>(), slot.size(0),
                              dye.rows(), dye.cols(), int(slot.size(1)));
}

void moe_router_backward(Runtime& rt, const Tensor& dlogits, const Tensor& dgate, const Tensor& probs,
                         const Tensor& lse, const Tensor& expert, const Tensor& gate, const Tensor& counts,
                         float aux_scale, float z_scale, bool renormalize) {
  const int64_t N = probs.size(0), E = probs.size(1), K = expert.size(1);
  // aux_scale times d(balancing loss)/dprobs[n, e] = E counts[e] / (N N K), and z_scale times the
  // z-loss's 2 / N, as the CPU computes them.
  const float aux = aux_scale * float(E) / (float(N) * float(N) * float(K));
  const float z = z_scale * 2.0f / float(N);
  launch_moe_router_backward(compute_stream(rt), dlogits.ptr<float>(), dgate.ptr<float>(), probs.ptr<float>(),
                             lse.ptr<float>(), expert.ptr<int32_t>(), gate.ptr<float>(), counts.ptr<float>(), aux, z, N,
                             int(E), int(K), renormalize);
}

void moe_statistics(Runtime& rt, const Tensor& stats, const Tensor& probs, const Tensor& lse, const Tensor& counts,
                    int64_t top_k, int64_t capacity) {
  const int64_t E = probs.size(1);
  float* partial = static_cast<float*>(rt.scratch(size_t(2 * E) * sizeof(float)));
  launch_moe_statistics(compute_stream(rt), stats.ptr<float>(), partial, probs.ptr<float>(), lse.ptr<float>(),
                        counts.ptr<float>(), probs.size(0), int(E), int(top_k), capacity);
}

void sigmoid_gate_rows(Runtime& rt, const Tensor& out, const Tensor& x, const Tensor& z) {
  launch_sigmoid_gate_rows(compute_stream(rt), out.data, x.data, x.dtype, z.ptr<float>(), x.rows(), x.cols());
}

void sigmoid_gate_rows_backward(Runtime& rt, const Tensor& dx, const Tensor& dz, const Tensor& dout, const Tensor& x,
                                const Tensor& z) {
  launch_sigmoid_gate_rows_backward(compute_stream(rt), dx.data, dz.ptr<float>(), dout.data, x.data, x.dtype,
                                    z.ptr<float>(), x.rows(), x.cols());
}

}  // namespace trellis::gpu
