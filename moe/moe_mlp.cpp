// The mixture-of-experts MLP: router GEMM, routing, dispatch, the experts' GEMMs, combine, and back.
#include "moe/moe_mlp.h"

#include <cmath>
#include <string>

#include "core/nvtx.h"
#include "parallel/tensor/layers.h"
#include "parallel/tensor/mappings.h"

namespace trellis {

namespace {

std::string expert_prefix(int layer, int64_t j) {
  return "h." + std::to_string(layer) + ".moe.experts." + std::to_string(j) + ".";
}

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Rows [first, first + n) of a (rows, cols) tensor.
Tensor rows_of(const Tensor& t, int64_t first, int64_t n) { return t.slice(first * t.cols(), {n, t.cols()}); }

}  // namespace

void MoEMLP::append_specs(const MoEConfig& moe, int64_t C, int64_t n_layers, int layer, int expert_rank,
                          std::vector<ParameterSpec>& out, int t, int r) {
  // Column-split fc (SwiGLU's [gate | up] as 2 groups, so a rank holds matching columns of both),
  // row-split proj (replicated with t = 1), as the dense MLP's.
  const int fc_groups = moe.swiglu ? 2 : 1;
  auto column = [&](ParameterSpec s) { return t > 1 ? shard_spec(s, 0, t, r, fc_groups) : s; };
  auto row = [&](ParameterSpec s) { return t > 1 ? shard_spec(s, 1, t, r) : s; };
  const float resid_std = 0.02f / std::sqrt(2.0f * float(n_layers));  // as the dense MLP's projection
  // One MLP of hidden width F: fc (F or SwiGLU's 2F, C), proj (C, F), their biases where the model has them.
  auto mlp = [&](const std::string& p, int64_t F) {
    const int64_t fc = (moe.swiglu ? 2 : 1) * F;
    out.push_back(column({p + "fc.w", {fc, C}, Init::normal, 0.02f, true}));
    if (moe.bias) out.push_back(column({p + "fc.b", {fc}, Init::zeros, 0, false}));
    out.push_back(row({p + "proj.w", {C, F}, Init::normal, resid_std, true}));
    if (moe.bias) out.push_back({p + "proj.b", {C}, Init::zeros, 0, false});
  };
  out.push_back({"h." + std::to_string(layer) + ".moe.router.w", {moe.experts, C}, Init::normal, 0.02f, true});
  // The shared MLP is dense: before the experts, in the block's bucket with the router.
  if (moe.shared_experts > 0) mlp("h." + std::to_string(layer) + ".moe.shared.", moe.shared_width(C));
  if (moe.shared_gate) out.push_back({"h." + std::to_string(layer) + ".moe.shared_gate.w", {1, C}, Init::normal, 0.02f, true});
  const int64_t first = int64_t(expert_rank) * moe.local_experts();
  for (int64_t j = first; j < first + moe.local_experts(); ++j) mlp(expert_prefix(layer, j), moe.expert_width(C));
}

MoEParams MoEMLP::params_of(const ParameterStore& ps, const MoEConfig& moe, int layer, int expert_rank) {
  auto mlp = [&](const std::string& p) -> ExpertParams {
    return {&ps.get(p + "fc.w"), moe.bias ? &ps.get(p + "fc.b") : nullptr, &ps.get(p + "proj.w"),
            moe.bias ? &ps.get(p + "proj.b") : nullptr};
  };
  MoEParams p;
  p.router_w = &ps.get("h." + std::to_string(layer) + ".moe.router.w");
  if (moe.shared_experts > 0) p.shared = mlp("h." + std::to_string(layer) + ".moe.shared.");
  if (moe.shared_gate) p.shared_gate_w = &ps.get("h." + std::to_string(layer) + ".moe.shared_gate.w");
  const int64_t first = int64_t(expert_rank) * moe.local_experts();
  for (int64_t j = first; j < first + moe.local_experts(); ++j) p.experts.push_back(mlp(expert_prefix(layer, j)));
  return p;
}

MoEMLP::MoEMLP(const MoEConfig& moe, DType dtype, const MoEParams& p, Communicator* group, Communicator* tensor,
               bool sequence_parallel)
    : moe_(moe), dtype_(dtype), p_(p), group_(group), tensor_(tensor && tensor->size() > 1 ? tensor : nullptr),
      sequence_parallel_(sequence_parallel && tensor_), host_counts_(size_t(moe.experts * moe.expert_parallel)) {
  const int t = tensor_ ? tensor_->size() : 1;
  auto check = [&](const ExpertParams& e) {
    TRELLIS_CHECK(e.fc_w->spec.split.parts == t && e.proj_w->spec.split.parts == t,
                  "MoEMLP: " + e.fc_w->spec.name + " is not split over the tensor group of " + std::to_string(t));
    TRELLIS_CHECK(t == 1 || e.fc_w->spec.split.groups == (moe_.swiglu ? 2 : 1),
                  "MoEMLP: " + e.fc_w->spec.name + (moe_.swiglu ? " must be split in 2 groups (gate, up)" : " must be split whole"));
    TRELLIS_CHECK((e.fc_b != nullptr) == moe_.bias && (e.proj_b != nullptr) == moe_.bias,
                  "MoEMLP: " + e.fc_w->spec.name + (moe_.bias ? " has no biases" : " has biases the model has not"));
  };
  if (has_shared()) check(p_.shared);
  TRELLIS_CHECK(!p_.shared_gate_w || (has_shared() && !moe_.bias),
                "MoEMLP: a shared gate needs a shared MLP without biases (moe.shared_experts > 0, model.bias = false)");
  for (const ExpertParams& e : p_.experts) check(e);
  const int G = group_ ? group_->size() : 1;
  TRELLIS_CHECK(G == moe_.expert_parallel && int64_t(p_.experts.size()) == moe_.local_experts(),
                "MoEMLP: an expert group of " + std::to_string(G) + " ranks holding " +
                    std::to_string(p_.experts.size()) + " experts each, for moe.experts = " +
                    std::to_string(moe_.experts) + " over expert_parallel = " + std::to_string(moe_.expert_parallel));
}

void MoEMLP::tensor_sum(const Tensor& t) const {
  if (tensor_) tensor_->all_reduce(t);
}

std::vector<const Parameter*> MoEMLP::parameters() const {
  std::vector<const Parameter*> out{p_.router_w};
  if (has_shared()) out.insert(out.end(), {p_.shared.fc_w, p_.shared.fc_b, p_.shared.proj_w, p_.shared.proj_b});
  out.push_back(p_.shared_gate_w);
  for (const ExpertParams& e : p_.experts) out.insert(out.end(), {e.fc_w, e.fc_b, e.proj_w, e.proj_b});
  std::erase(out, nullptr);  // the biases a model without them leaves out
  return out;
}

Tensor MoEMLP::exchange(const Tensor& in, Arena& arena, const MoESaved& s, bool back) const {
  if (!group_ || group_->size() == 1) return in;
  if (!moe_.dropless) {  // E x capacity slots each way, a block of them per rank
    Tensor out = arena.take(in.dtype, in.shape);
    group_->all_to_all(out, in);
    return out;
  }
  // Dropless: as many rows to and from each rank as the routing gave (back: the reverse).
  const std::vector<int64_t>& send = back ? s.recv_rows : s.send_rows;
  const std::vector<int64_t>& recv = back ? s.send_rows : s.recv_rows;
  Communicator::AllToAllvPlan plan;
  int64_t sent = 0, received = 0;
  for (size_t r = 0; r < send.size(); ++r) {
    plan.send_counts.push_back(send[r] * in.cols());
    plan.send_displs.push_back(sent * in.cols());
    plan.recv_counts.push_back(recv[r] * in.cols());
    plan.recv_displs.push_back(received * in.cols());
    sent += send[r];
    received += recv[r];
  }
  TRELLIS_CHECK(sent == in.rows(), "MoEMLP: an exchange of " + std::to_string(in.rows()) + " rows sends " +
                                       std::to_string(sent));
  Tensor out = arena.take(in.dtype, {received, in.cols()});
  group_->all_to_allv(out, in, plan);
  return out;
}

namespace {

// The local experts' copies of one parameter (their values or gradients) as a strided batch: expert
// 0's tensor and the distance in elements to the next expert's. The store lays every expert's
// parameters out alike, one expert after the other, so that distance is the same between any two.
struct ExpertTensors {
  Tensor first;
  int64_t stride = 0;
  // The batch from local expert j on.
  Tensor from(int64_t j) const { return first.shifted(j * stride); }
};

ExpertTensors expert_tensors(const std::vector<ExpertParams>& experts, const Parameter* ExpertParams::*member,
                             bool grad) {
  auto tensor = [&](size_t j) -> const Tensor& { return grad ? (experts[j].*member)->grad : (experts[j].*member)->value; };
  const Tensor& t0 = tensor(0);
  const int64_t e = int64_t(dtype_size(t0.dtype));
  auto distance = [&](size_t j) { return (static_cast<const char*>(tensor(j).data) - static_cast<const char*>(t0.data)) / e; };
  const int64_t stride = experts.size() > 1 ? distance(1) : 0;
  for (size_t j = 1; j < experts.size(); ++j)
    TRELLIS_CHECK(distance(j) == int64_t(j) * stride,
                  "MoEMLP: the experts' copies of " + (experts[j].*member)->spec.name + " are not evenly spaced");
  return {t0, stride};
}

// Whether a step's gradient of local experts [j, j + n)'s copies of one parameter accumulates (the
// same for all: they are written by the same ops).
bool experts_accumulate(const std::vector<ExpertParams>& experts, const Parameter* ExpertParams::*member, int64_t j,
                        int64_t n) {
  const bool first = grad_accumulates(*(experts[size_t(j)].*member));
  for (int64_t i = j + 1; i < j + n; ++i)
    TRELLIS_CHECK(grad_accumulates(*(experts[size_t(i)].*member)) == first, "MoEMLP: the experts' gradients disagree on accumulating");
  return first;
}

}  // namespace

template <class F>
void MoEMLP::for_each_run(const MoESaved& s, F f) const {
  const int64_t El = moe_.local_experts(), G = moe_.expert_parallel;
  if (moe_.dropless) {  // one expert of one source rank at a time, its packed rows (none: nothing to run)
    int64_t row = 0;
    for (size_t i = 0; i < s.expert_rows.size(); ++i) {
      if (s.expert_rows[i] > 0) f(ExpertRun{int64_t(i) % El, 1, row, s.expert_rows[i]});
      row += s.expert_rows[i];
    }
    return;
  }
  // Expert layout: [source rank][local expert][capacity] rows: per source rank, one batch of GEMMs
  // over the local experts, expert j's slots j x capacity rows after the source's first.
  const int64_t cap = s.xe.rows() / (G * El);
  for (int64_t src = 0; src < G; ++src) f(ExpertRun{0, El, src * El * cap, cap});
}

// Batch options over a run's experts: their rows `rows` apart (rows of `cols_a` and `cols_out`
// columns); the caller sets the parameter copies' strides (ExpertTensors::stride).
MatmulOptions MoEMLP::over_experts(const ExpertRun& run, int64_t cols_a, int64_t cols_out) const {
  MatmulOptions o;
  o.batch = run.experts;
  o.stride_a = run.rows * cols_a;
  o.stride_out = run.rows * cols_out;
  o.rows_vary = moe_.dropless;  // each step's counts
  return o;
}

void MoEMLP::experts_forward(Runtime& rt, const MoESaved& s) const {
  const ExpertTensors fc_w = expert_tensors(p_.experts, &ExpertParams::fc_w, false),
                      proj_w = expert_tensors(p_.experts, &ExpertParams::proj_w, false);
  const ExpertTensors fc_b = moe_.bias ? expert_tensors(p_.experts, &ExpertParams::fc_b, false) : ExpertTensors(),
                      proj_b = moe_.bias ? expert_tensors(p_.experts, &ExpertParams::proj_b, false) : ExpertTensors();
  const int64_t C = s.xe.cols(), H = s.he.cols(), F = s.ge.cols();
  for_each_run(s, [&](const ExpertRun& run) {
    const int64_t row = run.row, rows = run.experts * run.rows;
    const Tensor h = rows_of(s.he, row, run.rows), g = rows_of(s.ge, row, run.rows);
    // GELU: g = gelu(h) in the fc GEMM's epilogue (h kept for backward). SwiGLU: h = [gate | up], then
    // g = silu(gate) * up over every expert's rows of the run at once.
    MatmulOptions fc = over_experts(run, C, H);
    fc.trans_b = true;
    fc.stride_b = fc_w.stride;
    const Tensor fc_b0 = moe_.bias ? fc_b.from(run.expert) : Tensor();
    if (moe_.bias) {
      fc.bias = &fc_b0;
      fc.stride_bias = fc_b.stride;
    }
    if (moe_.swiglu) {
      matmul(rt, h, rows_of(s.xe, row, run.rows), fc_w.from(run.expert), fc);
      swiglu_forward(rt, rows_of(s.ge, row, rows), rows_of(s.he, row, rows));
    } else {
      fc.gelu_input = &h;
      matmul(rt, g, rows_of(s.xe, row, run.rows), fc_w.from(run.expert), fc);
    }
    MatmulOptions proj = over_experts(run, F, C);
    proj.trans_b = true;
    proj.stride_b = proj_w.stride;
    const Tensor proj_b0 = moe_.bias ? proj_b.from(run.expert) : Tensor();
    if (moe_.bias && first_tensor_rank()) {  // once in the sum over the tensor group
      proj.bias = &proj_b0;
      proj.stride_bias = proj_b.stride;
    }
    matmul(rt, rows_of(s.ye, row, run.rows), g, proj_w.from(run.expert), proj);
  });
}

void MoEMLP::experts_backward(Runtime& rt, const Tensor& dxe, const Tensor& dye, const MoESaved& s) const {
  const ExpertTensors fc_w = expert_tensors(p_.experts, &ExpertParams::fc_w, false),
                      proj_w = expert_tensors(p_.experts, &ExpertParams::proj_w, false),
                      fc_dw = expert_tensors(p_.experts, &ExpertParams::fc_w, true),
                      proj_dw = expert_tensors(p_.experts, &ExpertParams::proj_w, true);
  const int64_t C = s.xe.cols(), H = s.he.cols(), F = s.ge.cols();
  // Weight gradients: dW (out, in) += dy^T x over each expert's rows, a batch over the run's experts.
  auto weight_grads = [&](const ExpertRun& run, const ExpertTensors& dw, const Parameter* ExpertParams::*member,
                          const Tensor& dy, const Tensor& x) {
    MatmulOptions o;
    o.batch = run.experts;
    o.trans_a = true;
    o.rows_vary = moe_.dropless;
    o.accumulate = experts_accumulate(p_.experts, member, run.expert, run.experts);
    o.stride_a = run.rows * dy.cols();
    o.stride_b = run.rows * x.cols();
    o.stride_out = dw.stride;
    matmul(rt, dw.from(run.expert), dy, x, o);
  };
  // Bias gradients: the column sums of each expert's rows, a batch over the run's experts.
  auto bias_grads = [&](const ExpertRun& run, const Parameter* ExpertParams::*member, const Tensor& dy) {
    const ExpertTensors db = expert_tensors(p_.experts, member, true);
    bias_backward(rt, db.from(run.expert), dy, experts_accumulate(p_.experts, member, run.expert, run.experts),
                  run.experts, db.stride);
  };
  // dh is written over what is no longer read: GELU's over ge (not needed after the projection's
  // gradient); SwiGLU's dg = dy W_proj over ge, then dh = [dgate | dup] over he, in place.
  for_each_run(s, [&](const ExpertRun& run) {
    // The run's rows of every expert (the bias sums), and its first expert's (a batch's first problem).
    const int64_t row = run.row, rows = run.experts * run.rows;
    const Tensor dy0 = rows_of(dye, row, run.rows), g0 = rows_of(s.ge, row, run.rows),
                 h0 = rows_of(s.he, row, run.rows), x0 = rows_of(s.xe, row, run.rows);
    const Tensor dh = moe_.swiglu ? rows_of(s.he, row, rows) : rows_of(s.ge, row, rows), dh0 = rows_of(dh, 0, run.rows);
    weight_grads(run, proj_dw, &ExpertParams::proj_w, dy0, g0);
    if (moe_.bias) bias_grads(run, &ExpertParams::proj_b, rows_of(dye, row, rows));
    MatmulOptions dg = over_experts(run, C, F);  // GELU: dh = (dy W_proj) * gelu'(h), over g
    dg.stride_b = proj_w.stride;
    if (!moe_.swiglu) dg.gelu_grad_of = &h0;
    matmul(rt, g0, dy0, proj_w.from(run.expert), dg);
    if (moe_.swiglu) swiglu_backward(rt, dh, rows_of(s.ge, row, rows), dh);
    weight_grads(run, fc_dw, &ExpertParams::fc_w, dh0, x0);
    if (moe_.bias) bias_grads(run, &ExpertParams::fc_b, dh);
    MatmulOptions dx = over_experts(run, H, C);
    dx.stride_b = fc_w.stride;
    matmul(rt, rows_of(dxe, row, run.rows), dh0, fc_w.from(run.expert), dx);
  });
  // Dropless, an expert no token of the expert group chose has no run: its gradients are zero
  // (written where fresh).
  const size_t El = p_.experts.size();
  for (size_t j = 0; j < El && moe_.dropless; ++j) {
    int64_t rows = 0;
    for (size_t i = j; i < s.expert_rows.size(); i += El) rows += s.expert_rows[i];
    if (rows > 0) continue;
    const ExpertParams& e = p_.experts[j];
    for (const Parameter* p : {e.fc_w, e.fc_b, e.proj_w, e.proj_b})
      if (p && !grad_accumulates(*p)) fill(rt, p->grad, 0.0f);
  }
}

void MoEMLP::shared_hidden(Runtime& rt, const Tensor& x, MoESaved& s, Arena& keep) const {
  // This tensor rank's columns of the fc output (SwiGLU: [gate | up]) and of the hidden width.
  const int64_t H = p_.shared.fc_w->spec.shape[0], F = p_.shared.proj_w->spec.shape[1];
  s.hs = keep.take(dtype_, {x.rows(), H});
  s.gs = keep.take(dtype_, {x.rows(), F});
  MatmulOptions fc;
  fc.trans_b = true;
  if (p_.shared.fc_b) fc.bias = &p_.shared.fc_b->value;
  if (moe_.swiglu) {
    matmul(rt, s.hs, x, p_.shared.fc_w->value, fc);
    swiglu_forward(rt, s.gs, s.hs);
  } else {
    fc.gelu_input = &s.hs;
    matmul(rt, s.gs, x, p_.shared.fc_w->value, fc);
  }
  if (p_.shared_gate_w) {
    s.gz = keep.take(DType::f32, {x.rows(), 1});
    MatmulOptions gate;
    gate.trans_b = true;
    matmul(rt, s.gz, x, p_.shared_gate_w->value, gate);
  }
}

void MoEMLP::shared_output(Runtime& rt, const Tensor& out, const MoESaved& s, Arena& temp) const {
  MatmulOptions proj;
  proj.trans_b = true;
  proj.residual = &out;
  if (p_.shared.proj_b && first_tensor_rank()) proj.bias = &p_.shared.proj_b->value;  // once in the tensor group's sum
  Tensor hidden = s.gs;
  if (p_.shared_gate_w) {  // sigmoid(z) (gs W^T) = (sigmoid(z) gs) W^T, row by row
    hidden = temp.take(dtype_, s.gs.shape);
    sigmoid_gate_rows(rt, hidden, s.gs, s.gz);
  }
  matmul(rt, out, hidden, p_.shared.proj_w->value, proj);
}

Tensor MoEMLP::shared_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x, const MoESaved& s,
                               Arena& work) const {
  const Tensor dh = moe_.swiglu ? s.hs : s.gs;  // where the fc output's gradient goes
  Tensor dgz;
  if (!p_.shared_gate_w) {
    weight_and_bias_grad(rt, *p_.shared.proj_w, p_.shared.proj_b, dout, s.gs);
    // gs is read: its rows take GELU's dh = (dout W_proj) * gelu'(hs), or SwiGLU's dg = dout W_proj,
    // whose dh = [dgate | dup] goes over hs.
    MatmulOptions dg;
    if (!moe_.swiglu) dg.gelu_grad_of = &s.hs;
    matmul(rt, s.gs, dout, p_.shared.proj_w->value, dg);
    if (moe_.swiglu) swiglu_backward(rt, dh, s.gs, s.hs);
  } else {
    // proj's input was sigmoid(z) gs: its gradient dout W_proj goes through the gate (dz, a part per
    // tensor rank's columns), then the activation.
    const Tensor gated = work.take(dtype_, s.gs.shape);
    sigmoid_gate_rows(rt, gated, s.gs, s.gz);
    weight_and_bias_grad(rt, *p_.shared.proj_w, p_.shared.proj_b, dout, gated);
    matmul(rt, gated, dout, p_.shared.proj_w->value, MatmulOptions());
    Tensor dz = work.take(DType::f32, s.gz.shape);
    sigmoid_gate_rows_backward(rt, gated, dz, gated, s.gs, s.gz);
    tensor_sum(dz);
    if (moe_.swiglu) swiglu_backward(rt, dh, gated, s.hs);
    else gelu_backward(rt, dh, gated, s.hs);
    dgz = dz;
    if (dtype_ != DType::f32) {
      dgz = work.take(dtype_, dz.shape);
      cast(rt, dgz, dz);
    }
    weight_grad(rt, *p_.shared_gate_w, dgz, x);
  }
  weight_and_bias_grad(rt, *p_.shared.fc_w, p_.shared.fc_b, dh, x);
  MatmulOptions acc;
  acc.accumulate = true;
  matmul(rt, dx, dh, p_.shared.fc_w->value, acc);
  return dgz;
}

void MoEMLP::forward(Runtime& rt, const Tensor& out, const Tensor& x_in, const Tensor* residual, MoESaved& s,
                     Arena& keep, Arena& temp, const Tensor& stats) const {
  NvtxRange r("moe_forward");
  const Tensor x = gathered(x_in.view({x_in.rows(), x_in.cols()}), temp);
  const int64_t N = x.rows(), C = x.cols(), E = moe_.experts, K = moe_.top_k, S = moe_.slots(N);
  Tensor logits = temp.take(DType::f32, {N, E});
  MatmulOptions o;
  o.trans_b = true;
  matmul(rt, logits, x, p_.router_w->value, o);
  s.probs = keep.take(DType::f32, {N, E});
  s.lse = keep.take(DType::f32, {N});
  s.expert = keep.take(DType::i32, {N, K});
  s.gate = keep.take(DType::f32, {N, K});
  s.slot = keep.take(DType::i32, {N, K});
  s.slot_token = keep.take(DType::i32, {S});
  s.counts = keep.take(DType::f32, {E});
  moe_route(rt, s.probs, s.lse, s.expert, s.gate, s.slot, s.slot_token, s.counts, logits, moe_.renormalize,
            moe_.dropless);
  if (stats.defined()) moe_statistics(rt, stats, s.probs, s.lse, s.counts, K, moe_.capacity(N));
  if (moe_.dropless) read_expert_rows(rt, s);
  const bool exchanged = group_ && group_->size() > 1;
  Tensor routed = exchanged ? temp.take(dtype_, {S, C}) : keep.take(dtype_, {S, C});
  moe_dispatch(rt, routed, x, s.slot_token, K);
  s.xe = exchange(routed, keep, s, false);
  // This rank's experts' rows; this tensor rank's columns of their fc output (SwiGLU: [gate | up])
  // and hidden width.
  const int64_t R = s.xe.rows();
  s.he = keep.take(dtype_, {R, p_.experts[0].fc_w->spec.shape[0]});
  s.ge = keep.take(dtype_, {R, p_.experts[0].proj_w->spec.shape[1]});
  Tensor ye = exchanged ? temp.take(dtype_, {R, C}) : keep.take(dtype_, {R, C});
  s.ye = ye;
  experts_forward(rt, s);
  s.ye = exchange(ye, keep, s, true);  // back in routing order, for the combine
  if (has_shared()) shared_hidden(rt, x, s, keep);
  if (!out.defined()) return;
  if (sequence_parallel_) {  // the partial sums of every token, reduce-scattered into this rank's rows
    TRELLIS_CHECK(!residual, "MoEMLP: the residual add of sequence parallelism is the block's");
    const Tensor full = temp.take(dtype_, {N, C});
    moe_combine(rt, full, s.ye, s.slot, s.gate, Tensor());
    if (has_shared()) shared_output(rt, full, s, temp);
    reduce_scatter_to_token_shards_forward(*tensor_, out.view({out.rows(), C}), full).wait();
    return;
  }
  // Under tensor parallelism the outputs are partial sums: rank 0 adds the residual, the group sums.
  const Tensor res = residual && first_tensor_rank() ? residual->view({N, C}) : Tensor();
  moe_combine(rt, out.view({N, C}), s.ye, s.slot, s.gate, res);
  if (has_shared()) shared_output(rt, out.view({N, C}), s, temp);
  tensor_sum(out);
}

void MoEMLP::backward(Runtime& rt, const Tensor& dx_in, const Tensor& dout_in, const Tensor& x_in, const MoESaved& s,
                      float aux_scale, float z_scale, Arena& work) const {
  NvtxRange r("moe_backward");
  // With sequence parallelism x, dout and dx are this rank's token rows: the layer runs on all of them.
  const Tensor x = gathered(x_in.view({x_in.rows(), x_in.cols()}), work);
  const Tensor dout = gathered(dout_in.view({dout_in.rows(), dout_in.cols()}), work);
  const Tensor dx = sequence_parallel_ ? work.take(dtype_, x.shape) : dx_in.view(x.shape);
  const int64_t N = x.rows(), C = x.cols(), E = moe_.experts, K = moe_.top_k;
  Tensor dye = work.take(dtype_, s.ye.shape);  // in routing order
  Tensor dgate = work.take(DType::f32, {N, K});
  moe_combine_backward(rt, dye, dgate, dout, s.ye, s.slot, s.slot_token, s.gate);
  tensor_sum(dgate);  // each rank's outputs are a part of the sum the gates weigh
  const Tensor dye_experts = exchange(dye, work, s, false);
  Tensor dxe = work.take(dtype_, s.xe.shape);  // in expert order
  experts_backward(rt, dxe, dye_experts, s);
  moe_dispatch_backward(rt, dx, exchange(dxe, work, s, true), s.slot, false);
  const Tensor dgz = has_shared() ? shared_backward(rt, dx, dout, x, s, work) : Tensor();
  // Each rank's fc shard gives a part; the router's (and the shared gate's) part below is the same on
  // every rank (added once to the parts that sequence parallelism reduce-scatters).
  if (!sequence_parallel_) tensor_sum(dx);
  // The router: dlogits (f32) through the gates, the softmax, the balancing loss and the z-loss; then its GEMMs.
  Tensor dlogits = work.take(DType::f32, {N, E});
  moe_router_backward(rt, dlogits, dgate, s.probs, s.lse, s.expert, s.gate, s.counts, aux_scale, z_scale,
                      moe_.renormalize);
  Tensor dl = dlogits;
  if (dtype_ != DType::f32) {
    dl = work.take(dtype_, {N, E});
    cast(rt, dl, dlogits);
  }
  weight_grad(rt, *p_.router_w, dl, x);
  MatmulOptions acc;
  acc.accumulate = true;
  if (!sequence_parallel_ || first_tensor_rank()) {
    matmul(rt, dx, dl, p_.router_w->value, acc);
    if (dgz.defined()) matmul(rt, dx, dgz, p_.shared_gate_w->value, acc);
  }
  if (sequence_parallel_) reduce_scatter_to_token_shards_forward(*tensor_, dx_in.view({dx_in.rows(), C}), dx).wait();
}

void MoEMLP::read_expert_rows(Runtime& rt, MoESaved& s) const {
  const int64_t E = moe_.experts, El = moe_.local_experts();
  const int G = group_ ? group_->size() : 1, g = group_ ? group_->rank() : 0;
  // This rank's counts go to its block of host_counts_; a pageable host copy returns once the
  // routing before it is done (core/cuda/gpu_ops.cpp).
  const Tensor mine(host_counts_.data() + size_t(g * E), DType::f32, Device::CPU(), {E});
  copy(rt, mine, s.counts);
  // Every choice has a row: a count that does not add up (non-finite router logits) would leave
  // rows unplaced and the GEMMs reading past them.
  int64_t rows = 0;
  for (int64_t e = 0; e < E; ++e) rows += int64_t(host_counts_[size_t(g * E + e)]);
  TRELLIS_CHECK(rows == s.slot_token.numel(),
                "MoEMLP: dropless routing placed " + std::to_string(rows) + " of " +
                    std::to_string(s.slot_token.numel()) + " choices (non-finite router logits?)");
  // Every rank's counts (G x E, on the host): what each rank sends to each, and the rows of this
  // rank's experts from each, [source][local expert].
  if (G > 1) group_->all_gather(Tensor(host_counts_.data(), DType::f32, Device::CPU(), {G * E}), mine);
  auto count = [&](int64_t rank, int64_t e) { return int64_t(host_counts_[size_t(rank * E + e)]); };
  s.expert_rows.clear();
  s.send_rows.assign(size_t(G), 0);
  s.recv_rows.assign(size_t(G), 0);
  for (int64_t r = 0; r < G; ++r)
    for (int64_t j = 0; j < El; ++j) {
      s.send_rows[size_t(r)] += count(g, r * El + j);
      s.recv_rows[size_t(r)] += count(r, g * El + j);
      s.expert_rows.push_back(count(r, g * El + j));
    }
}

Tensor MoEMLP::gathered(const Tensor& rows, Arena& arena) const {
  if (!sequence_parallel_) return rows;
  const Tensor full = arena.take(rows.dtype, {rows.rows() * tensor_->size(), rows.cols()});
  gather_from_token_shards_forward(*tensor_, full, rows).wait();
  return full;
}

size_t MoEMLP::kept_bytes(const MoEConfig& moe, int64_t C, DType dtype, int64_t N, int t) {
  const int64_t E = moe.experts, K = moe.top_k, S = moe.slots(N), R = moe.expert_rows(N);
  const size_t e = dtype_size(dtype);
  return aligned(size_t(N * E) * 4) + aligned(size_t(N) * 4) + 3 * aligned(size_t(N * K) * 4) + aligned(size_t(S) * 4) +
         aligned(size_t(E) * 4) +
         aligned(size_t(R * C) * e) + aligned(size_t(S * C) * e) + aligned(size_t(R * moe.expert_fc_width(C) / t) * e) +
         aligned(size_t(R * moe.expert_width(C) / t) * e) +  // xe, ye, he, ge
         aligned(size_t(N * (moe.swiglu ? 2 : 1) * moe.shared_width(C) / t) * e) +
         aligned(size_t(N * moe.shared_width(C) / t) * e) +  // the shared MLP's hs, gs
         (moe.shared_gate ? aligned(size_t(N) * 4) : 0);     // and its gate's logits
}

size_t MoEMLP::work_bytes(const MoEConfig& moe, int64_t C, DType dtype, int64_t N, int t, bool sequence_parallel) {
  const int64_t E = moe.experts, K = moe.top_k, S = moe.slots(N), R = moe.expert_rows(N);
  const size_t e = dtype_size(dtype), slots = aligned(size_t(S * C) * e), rows = aligned(size_t(R * C) * e);
  // forward: logits, the routed rows and the experts' outputs before their exchange; backward: dye,
  // dgate, its exchanged copy, dxe and its copy back, dlogits and its 16-bit copy.
  const size_t forward = aligned(size_t(N * E) * 4) + slots + rows;
  const size_t backward = 2 * slots + 2 * rows + aligned(size_t(N * K) * 4) + aligned(size_t(N * E) * 4) + aligned(size_t(N * E) * e);
  // Sequence parallelism: the gathered input and the full output (forward), the gathered input and
  // output gradient and the full input gradient (backward).
  const size_t full = sequence_parallel ? aligned(size_t(N * C) * e) : 0;
  // The shared gate: the gated hidden rows (forward and backward), dz and its 16-bit copy.
  const size_t gate = moe.shared_gate ? aligned(size_t(N * moe.shared_width(C) / t) * e) + 2 * aligned(size_t(N) * 4) : 0;
  return forward + backward + 5 * full + gate;
}

}  // namespace trellis
