// GPT-2 block forward/backward built from core ops, with activation checkpointing.
#include "models/transformer_block.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/nvtx.h"
#include "parallel/tensor/mappings.h"

namespace trellis {

namespace {

Tensor rows2d(const Tensor& t) { return t.view({t.rows(), t.cols()}); }

// y = x W^T + b, for x (N, in), W (out, in). With gelu_input: y = gelu(x W^T + b), *gelu_input = x W^T + b.
// With residual: y = residual + x W^T + b, rounded once.
void linear_forward(Runtime& rt, const Tensor& y, const Tensor& x, const Parameter& w, const Parameter* b,
                    const Tensor* gelu_input = nullptr, const Tensor* residual = nullptr) {
  MatmulOptions o;
  o.trans_b = true;
  o.bias = b ? &b->value : nullptr;
  o.gelu_input = gelu_input;
  const Tensor res = residual ? rows2d(*residual) : Tensor();
  o.residual = residual ? &res : nullptr;
  matmul(rt, rows2d(y), rows2d(x), w.value, o);
}

// dx = dy W (written) and the parameter gradients (weight_and_bias_grad; without the bias's with
// bias_elsewhere; b null: no bias). With gelu_grad_of = &h where x = gelu(h): dx = (dy W) * gelu'(h).
void linear_backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, const Parameter& w,
                     const Parameter* b, const Tensor* gelu_grad_of = nullptr, bool bias_elsewhere = false) {
  if (bias_elsewhere) weight_grad(rt, w, dy, x);
  else weight_and_bias_grad(rt, w, b, dy, x);
  MatmulOptions o;
  o.gelu_grad_of = gelu_grad_of;
  if (dx.defined()) matmul(rt, rows2d(dx), rows2d(dy), w.value, o);
}

// grad_accumulates for a layer norm's weight and bias (none with RMSNorm), which one op writes together.
bool layernorm_grads_accumulate(const Parameter& w, const Parameter* b) {
  const bool aw = grad_accumulates(w);
  TRELLIS_CHECK(!b || grad_accumulates(*b) == aw, "internal: " + w.spec.name + " and its bias differ in freshness");
  return aw;
}


// Through the column-parallel layer when there is one (t > 1), else the plain linear (row-parallel
// forwards: row_forward below, which returns the all-reduce in flight).
template <class Parallel>
void linear_forward(Runtime& rt, const std::optional<Parallel>& par, const Tensor& y, const Tensor& x,
                    const Parameter& w, const Parameter* b, Arena& work) {
  if (par) par->forward(rt, y, x, work);
  else linear_forward(rt, y, x, w, b);
}

template <class Parallel>
void linear_backward(Runtime& rt, const std::optional<Parallel>& par, const Tensor& dx, const Tensor& dy,
                     const Tensor& x, const Parameter& w, const Parameter* b, Arena& work) {
  if (par) par->backward(rt, dx, dy, x, work);
  else linear_backward(rt, dx, dy, x, w, b);
}

}  // namespace

void TransformerBlock::check_tensor_parallel(const GPTConfig& cfg, int tensor) {
  if (tensor < 1) throw UserError("parallel.tensor = " + std::to_string(tensor) + " must be at least 1");
  if (cfg.n_heads % tensor != 0)
    throw UserError("tensor parallelism splits the attention heads: model.n_heads = " + std::to_string(cfg.n_heads) +
                    " must be divisible by parallel.tensor = " + std::to_string(tensor));
  if (cfg.kv_heads() % tensor != 0)
    throw UserError("tensor parallelism splits the key-value heads: model.n_kv_heads = " +
                    std::to_string(cfg.kv_heads()) + " must be divisible by parallel.tensor = " + std::to_string(tensor));
  if (cfg.mlp_width() % tensor != 0)
    throw UserError(std::string("tensor parallelism splits the MLP: its hidden width ") +
                    (cfg.ffn_hidden > 0 ? "model.ffn_hidden_size = " : "4 x model.d_model = ") +
                    std::to_string(cfg.mlp_width()) + " must be divisible by parallel.tensor = " +
                    std::to_string(tensor));
  if (cfg.moe.experts > 0 && cfg.moe.expert_width(cfg.d_model) % tensor != 0)  // the shared MLP's is a multiple
    throw UserError(std::string("tensor parallelism splits each expert's MLP: its hidden width ") +
                    (cfg.moe.ffn_hidden > 0 ? "moe.ffn_hidden_size = " : "4 x model.d_model = ") +
                    std::to_string(cfg.moe.expert_width(cfg.d_model)) + " must be divisible by parallel.tensor = " +
                    std::to_string(tensor));
}

BlockParams BlockParams::of(const ParameterStore& ps, const GPTConfig& cfg, int layer, int expert_rank) {
  const std::string p = "h." + std::to_string(layer) + ".";
  BlockParams b;
  b.ln1_w = &ps.get(p + "ln1.w");
  b.ln1_b = cfg.rmsnorm ? nullptr : &ps.get(p + "ln1.b");
  b.qkv_w = &ps.get(p + "attn.qkv.w");
  b.qkv_b = cfg.has_qkv_bias() ? &ps.get(p + "attn.qkv.b") : nullptr;  // model.bias = false: none, unless qkv_bias
  b.q_norm_w = cfg.qk_norm ? &ps.get(p + "attn.q_norm.w") : nullptr;
  b.k_norm_w = cfg.qk_norm ? &ps.get(p + "attn.k_norm.w") : nullptr;
  b.proj_w = &ps.get(p + "attn.proj.w");
  b.proj_b = cfg.bias ? &ps.get(p + "attn.proj.b") : nullptr;
  b.ln2_w = &ps.get(p + "ln2.w");
  b.ln2_b = cfg.rmsnorm ? nullptr : &ps.get(p + "ln2.b");
  if (cfg.moe.in_layer(layer)) {
    b.moe = MoEMLP::params_of(ps, cfg.moe, layer, expert_rank);
  } else {
    b.fc_w = &ps.get(p + "mlp.fc.w");
    b.fc_b = cfg.bias ? &ps.get(p + "mlp.fc.b") : nullptr;
    b.fc_proj_w = &ps.get(p + "mlp.proj.w");
    b.fc_proj_b = cfg.bias ? &ps.get(p + "mlp.proj.b") : nullptr;
  }
  return b;
}

void TransformerBlock::append_specs(const GPTConfig& cfg, int layer, std::vector<ParameterSpec>& out,
                                    const TensorParallelContext& tp, int expert_rank) {
  const int64_t C = cfg.d_model;
  const std::string p = "h." + std::to_string(layer) + ".";
  const float resid_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layers));  // GPT-2's scaled projections
  // The full parameters; under tensor parallelism each split one is replaced by this rank's shard
  // (initialized as the matching slice of the full tensor: keyed by name and global index).
  const int t = tp.size, r = tp.rank;
  if (t > 1) check_tensor_parallel(cfg, t);
  auto column = [&](ParameterSpec s, int groups = 1, int first_units = 1) {
    return t > 1 ? shard_spec(s, 0, t, r, groups, first_units) : s;
  };
  auto row = [&](ParameterSpec s) { return t > 1 ? shard_spec(s, 1, t, r) : s; };
  out.push_back({p + "ln1.w", {C}, Init::ones, 0, false});
  if (!cfg.rmsnorm) out.push_back({p + "ln1.b", {C}, Init::zeros, 0, false});
  // qkv is [q | k | v], split as 3 groups so that rank r holds the query heads [r H/t, (r+1) H/t) and
  // the key-value heads they read; with grouped-query attention q is H / Hkv times as wide as k.
  const int q_units = int(cfg.n_heads / cfg.kv_heads());
  out.push_back(column({p + "attn.qkv.w", {cfg.qkv_width(), C}, Init::normal, 0.02f, true}, 3, q_units));
  if (cfg.has_qkv_bias())
    out.push_back(column({p + "attn.qkv.b", {cfg.qkv_width()}, Init::zeros, 0, false}, 3, q_units));
  if (cfg.qk_norm) {  // one weight for all heads: replicated under tensor parallelism
    out.push_back({p + "attn.q_norm.w", {cfg.head_dim()}, Init::ones, 0, false});
    out.push_back({p + "attn.k_norm.w", {cfg.head_dim()}, Init::ones, 0, false});
  }
  out.push_back(row({p + "attn.proj.w", {C, cfg.attention_width()}, Init::normal, resid_std, true}));
  if (cfg.bias) out.push_back({p + "attn.proj.b", {C}, Init::zeros, 0, false});
  out.push_back({p + "ln2.w", {C}, Init::ones, 0, false});
  if (!cfg.rmsnorm) out.push_back({p + "ln2.b", {C}, Init::zeros, 0, false});
  if (cfg.moe.in_layer(layer)) {
    MoEMLP::append_specs(cfg.moe, C, cfg.n_layers, layer, expert_rank, out, t, r);
    return;
  }
  // SwiGLU's fc is [gate | up], split as 2 groups so that each rank holds matching columns of both.
  const int fc_groups = cfg.swiglu ? 2 : 1;
  out.push_back(column({p + "mlp.fc.w", {cfg.fc_width(), C}, Init::normal, 0.02f, true}, fc_groups));
  if (cfg.bias) out.push_back(column({p + "mlp.fc.b", {cfg.fc_width()}, Init::zeros, 0, false}, fc_groups));
  out.push_back(row({p + "mlp.proj.w", {C, cfg.mlp_width()}, Init::normal, resid_std, true}));
  if (cfg.bias) out.push_back({p + "mlp.proj.b", {C}, Init::zeros, 0, false});
}

TransformerBlock::TransformerBlock(const GPTConfig& cfg, int layer, const BlockParams& p,
                                   const TensorParallelContext& tp, Communicator* experts)
    : cfg_(cfg), layer_(layer), p_(p), tp_(tp) {
  if (p_.moe.router_w) {
    moe_.emplace(cfg.moe, cfg.dtype, p_.moe, experts, tp_.active() ? tp_.group : nullptr, tp_.sharded_tokens());
  }
  if (!tp_.active()) return;
  TRELLIS_CHECK(tp_.group != nullptr && tp_.group->size() == tp_.size && tp_.group->rank() == tp_.rank,
                "TransformerBlock: the tensor-parallel context's group does not match its size " +
                    std::to_string(tp_.size) + " and rank " + std::to_string(tp_.rank));
  check_tensor_parallel(cfg, tp_.size);
  // The layers check that each parameter is this rank's part of the split they expect.
  Communicator& g = *tp_.group;
  const bool sp = tp_.sequence_parallel;
  qkv_.emplace(g, *p_.qkv_w, p_.qkv_b, sp);
  TRELLIS_CHECK(p_.qkv_w->spec.split.groups == 3 && p_.qkv_w->spec.split.first_units == cfg.n_heads / cfg.kv_heads(),
                p_.qkv_w->spec.name + " must be split in 3 groups (q, k, v)");
  proj_.emplace(g, *p_.proj_w, p_.proj_b, sp, tp_.comm_chunks);
  if (moe_) return;  // its experts are split over the group inside MoEMLP
  fc_.emplace(g, *p_.fc_w, p_.fc_b, sp);
  TRELLIS_CHECK(p_.fc_w->spec.split.groups == (cfg.swiglu ? 2 : 1),
                p_.fc_w->spec.name + (cfg.swiglu ? " must be split in 2 groups (gate, up)" : " must be split whole"));
  fc_proj_.emplace(g, *p_.fc_proj_w, p_.fc_proj_b, sp, tp_.comm_chunks);
}

std::vector<const Parameter*> TransformerBlock::first_written_grads() const {
  std::vector<const Parameter*> out{p_.ln1_w,    p_.ln1_b,  p_.qkv_w,  p_.qkv_b,  p_.q_norm_w,
                                    p_.k_norm_w, p_.proj_w, p_.proj_b, p_.ln2_w, p_.ln2_b};
  if (moe_) {
    for (const Parameter* q : moe_->parameters()) out.push_back(q);
  } else {
    out.insert(out.end(), {p_.fc_w, p_.fc_b, p_.fc_proj_w, p_.fc_proj_b});
  }
  std::erase(out, nullptr);  // the biases RMSNorm and model.bias = false leave out
  return out;
}

std::vector<const Parameter*> TransformerBlock::tensor_partial_grads() const {
  std::vector<const Parameter*> out;
  if (tp_.sharded_tokens()) out = {p_.ln1_w, p_.ln1_b, p_.ln2_w, p_.ln2_b};
  if (tp_.active()) out.insert(out.end(), {p_.q_norm_w, p_.k_norm_w});
  std::erase(out, nullptr);  // RMSNorm's missing biases, no QK-norm
  return out;
}

namespace {
// Mask streams: (step, layer slot, site); sites 1 and 2 are the residual branches, 3 attention.
uint64_t dropout_stream(const StepContext& ctx, int layer, int site) {
  return (uint64_t(ctx.step) << 24) | (uint64_t(layer + 1) << 4) | uint64_t(site);
}
}  // namespace

TransformerBlock::Tokens TransformerBlock::tokens_of(const StepContext& ctx, const Tensor& x) const {
  const int64_t C = cfg_.d_model;
  if (!tp_.sharded_tokens()) {
    TRELLIS_CHECK(x.dim() == 3 && x.size(2) == C, "TransformerBlock: input " + x.str() + " is not (B, T, " +
                                                      std::to_string(C) + ")");
    return {x.size(0), x.size(1), x.size(0) * x.size(1), 0};
  }
  TRELLIS_CHECK(ctx.seq_len > 0, "TransformerBlock: with sequence parallelism StepContext::seq_len must be set");
  const int64_t rows = x.rows(), N = rows * tp_.size;
  TRELLIS_CHECK(x.cols() == C && N % ctx.seq_len == 0,
                "TransformerBlock: input " + x.str() + " is not one of " + std::to_string(tp_.size) +
                    " token shards of (B * " + std::to_string(ctx.seq_len) + ", " + std::to_string(C) + ")");
  return {N / ctx.seq_len, ctx.seq_len, rows, tp_.rank * rows};
}

// The global row of local row i is sample_offset * T + row_offset + i (DropoutKey with
// seq_local = seq_global = T reduces to i + seq_offset): the full layout's mask, or its rows.
DropoutKey TransformerBlock::dropout_key(const StepContext& ctx, int site, const Tokens& n) const {
  DropoutKey k;
  k.seed = ctx.seed;
  k.stream = dropout_stream(ctx, layer_, site);
  k.seq_local = n.T;
  k.seq_global = n.T;
  k.seq_offset = ctx.sample_offset * n.T + n.row_offset;
  return k;
}

AttentionDropout TransformerBlock::attention_dropout(const StepContext& ctx) const {
  AttentionDropout d;
  if (!ctx.training) return d;
  d.p = cfg_.attention_dropout;
  d.seed = ctx.seed;
  d.stream = dropout_stream(ctx, layer_, 3);
  d.sample_offset = ctx.sample_offset;
  if (tp_.active()) {
    d.head_offset = int64_t(tp_.rank) * (cfg_.n_heads / tp_.size);
    d.global_heads = cfg_.n_heads;
  }
  return d;
}

namespace {
// Part i of `parts` equal parts of a batch-major tensor's leading dimension (B, or the B*T token rows
// of the LayerNorm statistics): the rows of those samples, a view.
Tensor part_of(const Tensor& t, int i, int parts) {
  if (parts == 1 || !t.defined()) return t;
  Shape s = t.shape;
  s.dims[0] /= parts;
  return t.slice(i * s.numel(), s);
}

// Through the row-parallel layer when there is one (its all-reduce in flight), else the plain linear.
CommHandle row_forward(Runtime& rt, const std::optional<RowParallelLinear>& par, const Tensor& y, const Tensor& x,
                       const Parameter& w, const Parameter* b, Arena& work, const Tensor* residual) {
  if (par) return par->forward(rt, y, x, work, residual);
  linear_forward(rt, y, x, w, b, nullptr, residual);
  return {};
}
}  // namespace

BlockSaved BlockSaved::part(int i, int parts) const {
  auto p = [&](const Tensor& t) { return part_of(t, i, parts); };
  TRELLIS_CHECK(parts == 1 || !moe.probs.defined(), "BlockSaved::part: a block with experts runs whole");
  return {p(x),   p(ln1),      p(ln1_mean), p(ln1_rstd), p(qkv),  p(qkv_in), p(qk_rstd), p(att),
          p(lse), p(r),        p(ln2),      p(ln2_mean), p(ln2_rstd), p(h),     p(g),       moe};
}

int TransformerBlock::batch_parts(const Tokens& n) const {
  // Not a block with experts: its routing (an expert's capacity) is over the whole micro-batch.
  return tp_.active() && tp_.split_batch && !tp_.sharded_tokens() && !moe_ && n.B % 2 == 0 ? 2 : 1;
}

StepContext TransformerBlock::part_context(const StepContext& ctx, const Tokens& n, int i, int parts) {
  StepContext c = ctx;
  c.sample_offset += i * n.B / parts;
  c.doc_starts = part_of(ctx.doc_starts, i, parts);
  return c;
}

bool TransformerBlock::residual_in_gemm(const StepContext& ctx) const {
  // Dropout applies to the branch before the add; sequence parallelism adds on token shards, while
  // the row-parallel GEMM writes all rows.
  return !dropout_on(ctx) && !tp_.sharded_tokens();
}

AttentionHeads TransformerBlock::local_heads() const {
  return {int(cfg_.n_heads / tp_.size), int(cfg_.kv_heads() / tp_.size), cfg_.sliding_window};
}

AttentionHeads TransformerBlock::attention_heads(const StepContext& ctx) const {
  AttentionHeads h = local_heads();
  h.doc_starts = ctx.doc_starts;
  return h;
}

void TransformerBlock::attention_part(Runtime& rt, const StepContext& ctx, BlockSaved& s, Arena& a) const {
  // qkv holds this rank's heads: (B, T, qkv_width/t).
  const int64_t B = s.qkv.size(0), T = s.qkv.size(1), t = tp_.size, A = cfg_.attention_width() / t,
                H = cfg_.n_heads / t;
  s.att = a.take(cfg_.dtype, {B, T, A});
  s.lse = a.take(DType::f32, {B, H, T});
  // In the parts forward ran in, so a recomputation repeats its arithmetic exactly.
  const Tokens n = tokens_of(ctx, s.x);
  const int parts = batch_parts(n);
  for (int i = 0; i < parts; ++i) {
    const BlockSaved p = s.part(i, parts);
    const StepContext c = part_context(ctx, n, i, parts);
    attention_forward(rt, p.att, p.lse, p.qkv, attention_heads(c), attention_dropout(c));
  }
}

void TransformerBlock::attention_input(Runtime& rt, const BlockSaved& s) const {
  if (cfg_.qk_norm)
    qk_norm_forward(rt, s.qkv, s.qk_rstd, s.qkv_in, p_.q_norm_w->value, p_.k_norm_w->value, local_heads(),
                    float(cfg_.norm_eps));
  // Rotary positions turn q and k in place: attention and its backward read the turned ones.
  if (cfg_.rope) rotary_embedding(rt, s.qkv, local_heads(), cfg_.rotary());
}

void TransformerBlock::qkv_again(Runtime& rt, BlockSaved& s, Arena& a) const {
  s.qkv = a.take(cfg_.dtype, s.qkv_in.shape);
  attention_input(rt, s);
}

CommHandle TransformerBlock::attention_half(Runtime& rt, const StepContext& ctx, BlockSaved& s, const Tensor& branch,
                                            Arena& temp) const {
  layernorm_forward(rt, s.ln1, s.ln1_mean, s.ln1_rstd, s.x, p_.ln1_w->value, value_or_empty(p_.ln1_b), float(cfg_.norm_eps),
                      cfg_.rmsnorm);
  // With QK-norm qkv's output is kept apart (the norms' backward reads it), normed into s.qkv.
  linear_forward(rt, qkv_, cfg_.qk_norm ? s.qkv_in : s.qkv, s.ln1, *p_.qkv_w, p_.qkv_b, temp);
  attention_input(rt, s);
  attention_forward(rt, s.att, s.lse, s.qkv, attention_heads(ctx), attention_dropout(ctx));
  if (residual_in_gemm(ctx))  // r = x + proj(att)
    return row_forward(rt, proj_, s.r, s.att, *p_.proj_w, p_.proj_b, temp, &s.x);
  return row_forward(rt, proj_, branch, s.att, *p_.proj_w, p_.proj_b, temp, nullptr);
}

CommHandle TransformerBlock::mlp_half(Runtime& rt, const StepContext& ctx, BlockSaved& s, const Tensor& branch,
                                      const Tensor& y, Arena& keep, Arena& temp) const {
  if (residual_in_gemm(ctx)) {
    layernorm_forward(rt, s.ln2, s.ln2_mean, s.ln2_rstd, s.r, p_.ln2_w->value, value_or_empty(p_.ln2_b), float(cfg_.norm_eps),
                      cfg_.rmsnorm);
  } else {
    if (dropout_on(ctx))
      dropout_forward(rt, branch, branch, cfg_.dropout, dropout_key(ctx, 1, tokens_of(ctx, s.x)));
    // r = x + branch and ln2 = LN(r) in one pass over the rows.
    add_layernorm_forward(rt, s.r, s.ln2, s.ln2_mean, s.ln2_rstd, s.x, branch, p_.ln2_w->value, value_or_empty(p_.ln2_b),
                          float(cfg_.norm_eps), cfg_.rmsnorm);
  }
  if (moe_) {  // y = r + moe(ln2) (the residual added in the combine), or branch = moe(ln2)
    const bool in_gemm = residual_in_gemm(ctx) && y.defined();
    moe_->forward(rt, in_gemm ? y : y.defined() ? branch : Tensor(), s.ln2, in_gemm ? &s.r : nullptr, s.moe, keep, temp,
                  y.defined() ? ctx.moe_stats : Tensor());
    return {};
  }
  if (cfg_.swiglu) {  // h = fc(ln2) = [gate | up], g = silu(gate) * up
    linear_forward(rt, fc_, s.h, s.ln2, *p_.fc_w, p_.fc_b, temp);
    swiglu_forward(rt, s.g, s.h);
  } else if (fc_) {  // g = gelu(h), h = fc(ln2): one GEMM with the GELU as its epilogue, writing both
    fc_->forward(rt, s.g, s.ln2, temp, &s.h);
  } else {
    linear_forward(rt, s.g, s.ln2, *p_.fc_w, p_.fc_b, &s.h);
  }
  if (!y.defined()) return {};
  if (residual_in_gemm(ctx))  // y = r + fc_proj(g)
    return row_forward(rt, fc_proj_, y, s.g, *p_.fc_proj_w, p_.fc_proj_b, temp, &s.r);
  return row_forward(rt, fc_proj_, branch, s.g, *p_.fc_proj_w, p_.fc_proj_b, temp, nullptr);
}

void TransformerBlock::forward_into(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y,
                                    BlockSaved& s, Arena& keep, Arena& temp, bool keep_attention, bool keep_rest,
                                    bool keep_elementwise, PendingOutput* pending) const {
  const Tokens n = tokens_of(ctx, x);
  const int64_t B = n.B, T = n.T, C = cfg_.d_model, t = tp_.size, Al = cfg_.attention_width() / t,
                H = cfg_.n_heads / t;
  // The block's own activations: (B, T, C), or this rank's token rows.
  const Shape act = tp_.sharded_tokens() ? Shape{n.rows, C} : Shape{B, T, C};
  const DType dt = cfg_.dtype;
  Arena& rest = keep_rest ? keep : temp;
  Arena& attention = keep_attention ? keep : temp;
  Arena& elementwise = keep_rest && keep_elementwise ? keep : temp;  // ln1, ln2, g
  s.x = x;
  s.ln1 = elementwise.take(dt, act);
  s.ln1_mean = rest.take(DType::f32, {n.rows});
  s.ln1_rstd = rest.take(DType::f32, {n.rows});
  // With QK-norm what attention reads is made again from qkv_in for backward: not kept.
  s.qkv = (cfg_.qk_norm ? temp : rest).take(dt, {B, T, cfg_.qkv_width() / t});
  if (cfg_.qk_norm) {
    s.qkv_in = rest.take(dt, {B, T, cfg_.qkv_width() / t});
    s.qk_rstd = rest.take(DType::f32, {B, T, (cfg_.n_heads + cfg_.kv_heads()) / t});
  }
  s.att = attention.take(dt, {B, T, Al});
  s.lse = attention.take(DType::f32, {B, H, T});
  s.r = rest.take(dt, act);
  s.ln2 = elementwise.take(dt, act);
  s.ln2_mean = rest.take(DType::f32, {n.rows});
  s.ln2_rstd = rest.take(DType::f32, {n.rows});
  if (!moe_) {
    s.h = rest.take(dt, {B, T, cfg_.fc_width() / t});
    s.g = elementwise.take(dt, {B, T, cfg_.mlp_width() / t});
  }
  // Without dropout (and sequence parallelism) each residual add is its projection's GEMM epilogue
  // (rank 0's under tensor parallelism, before the all-reduce); else branch = projection, then the add.
  const bool in_gemm = residual_in_gemm(ctx);
  const Tensor branch = in_gemm ? Tensor() : temp.take(dt, act);
  // Under the batch split the halves interleave: each all-reduce runs while the other half computes.
  const int parts = batch_parts(n);
  if (pending && parts == 1) pending->wait();
  CommHandle attention_done[2], mlp_done[2];
  for (int i = 0; i < parts; ++i) {
    if (pending) pending->half[i].wait();
    BlockSaved p = s.part(i, parts);
    attention_done[i] = attention_half(rt, part_context(ctx, n, i, parts), p, part_of(branch, i, parts), temp);
  }
  for (int i = 0; i < parts; ++i) {
    attention_done[i].wait();
    BlockSaved p = s.part(i, parts);
    mlp_done[i] = mlp_half(rt, part_context(ctx, n, i, parts), p, part_of(branch, i, parts), part_of(y, i, parts),
                           rest, temp);
    if (parts == 1) s.moe = p.moe;
  }
  if (!y.defined()) return;
  for (int i = 0; i < parts; ++i) {
    if (in_gemm) {
      if (pending) pending->half[i] = std::move(mlp_done[i]);  // else waited for on return
      continue;
    }
    mlp_done[i].wait();
    const StepContext c = part_context(ctx, n, i, parts);
    const Tensor bi = part_of(branch, i, parts), yi = part_of(y, i, parts), ri = part_of(s.r, i, parts);
    if (dropout_on(ctx))
      dropout_forward(rt, bi, bi, cfg_.dropout, dropout_key(c, 2, tokens_of(c, part_of(x, i, parts))));
    add(rt, yi, ri, bi);
  }
}

void TransformerBlock::forward(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y,
                               BlockSaved& s, Arena& keep, Arena& temp, PendingOutput* pending) const {
  NvtxRange r("block_forward");
  TRELLIS_CHECK(y.defined(), "TransformerBlock::forward: no output tensor");
  const Checkpointing c = cfg_.checkpointing;
  forward_into(rt, ctx, x, y, s, keep, temp, c == Checkpointing::none || c == Checkpointing::elementwise,
               c != Checkpointing::full, c != Checkpointing::elementwise, pending);
}

void TransformerBlock::backward(Runtime& rt, const StepContext& ctx, const Tensor& dres, BlockSaved& s,
                                Arena& work) const {
  NvtxRange r("block_backward");
  const Tokens n = tokens_of(ctx, s.x);
  const int64_t B = n.B, T = n.T, C = cfg_.d_model, Al = cfg_.attention_width() / tp_.size;
  const Shape act = tp_.sharded_tokens() ? Shape{n.rows, C} : Shape{B, T, C};
  const DType dt = cfg_.dtype;
  const bool drop = dropout_on(ctx);
  // Row by row as forward: the same bits (the statistics are written again, unchanged).
  if (cfg_.qk_norm && cfg_.checkpointing != Checkpointing::full) qkv_again(rt, s, work);
  if (cfg_.checkpointing == Checkpointing::full) {
    // Re-runs the forward up to g (not y, which backward does not need); under tensor parallelism
    // with the same parallel layers, so with sequence parallelism the all-gathers run again.
    NvtxRange rr("recompute_block");
    forward_into(rt, ctx, s.x, Tensor{}, s, work, work, false, false, false);
  } else if (cfg_.checkpointing == Checkpointing::selective) {
    NvtxRange rr("recompute_attention");
    attention_part(rt, ctx, s, work);
  } else if (cfg_.checkpointing == Checkpointing::elementwise) {
    // Row by row as forward computed them (the statistics are written again, unchanged). On the
    // GPU forward's g came from the GEMM's GELU epilogue, so this one may differ in its last bit.
    NvtxRange rr("recompute_elementwise");
    s.ln1 = work.take(dt, act);
    s.ln2 = work.take(dt, act);
    layernorm_forward(rt, s.ln1, s.ln1_mean, s.ln1_rstd, s.x, p_.ln1_w->value, value_or_empty(p_.ln1_b), float(cfg_.norm_eps),
                      cfg_.rmsnorm);
    layernorm_forward(rt, s.ln2, s.ln2_mean, s.ln2_rstd, s.r, p_.ln2_w->value, value_or_empty(p_.ln2_b), float(cfg_.norm_eps),
                      cfg_.rmsnorm);
    if (!moe_) {  // the experts keep their GELU outputs
      s.g = work.take(dt, {B, T, cfg_.mlp_width() / tp_.size});
      if (cfg_.swiglu) swiglu_forward(rt, s.g, s.h);
      else gelu_forward(rt, s.g, s.h);
    }
  }
  // MLP branch: y = r + drop(fc_proj(gelu(fc(ln2(r))))).
  Tensor dbranch = dres;
  if (drop) {
    dbranch = work.take(dt, act);
    dropout_backward(rt, dbranch, dres, cfg_.dropout, dropout_key(ctx, 2, n));
  }
  // Without dropout (and sequence parallelism, whose dres is a token shard), the two projections' output
  // gradients are dres as ln2's backward reads it (fc_proj's) and as it writes it (proj's): their bias
  // gradients (replicated under tensor parallelism) are summed there.
  const bool bias_sums_in_ln2 = !drop && !tp_.sharded_tokens() && !moe_ && cfg_.bias;
  // Under tensor parallelism without sequence parallelism each row-parallel layer's weight gradients
  // run beside the next column-parallel layer's input-gradient all-reduce, with that layer's own.
  const bool defer = fc_proj_ && !tp_.sharded_tokens();
  // GELU: dh = (dbranch W_proj) * gelu'(h), fc_proj's input-gradient GEMM with GELU's backward as its
  // epilogue. SwiGLU: dg = dbranch W_proj, then dh = [dgate | dup] from dg and h.
  Tensor dln = work.take(dt, act);
  Tensor dh = moe_ ? Tensor() : work.take(dt, {B, T, cfg_.fc_width() / tp_.size});
  Tensor dg = cfg_.swiglu && !moe_ ? work.take(dt, {B, T, cfg_.mlp_width() / tp_.size}) : dh;
  const Tensor* gelu_of = cfg_.swiglu ? nullptr : &s.h;
  if (moe_) {
    moe_->backward(rt, dln, dbranch, s.ln2, s.moe, ctx.moe_aux_scale, ctx.moe_z_scale, work);
  } else if (defer) {
    fc_proj_->backward_input(rt, dg, dbranch, gelu_of);
    if (cfg_.swiglu) swiglu_backward(rt, dh, dg, s.h);
    fc_->backward(rt, dln, dh, s.ln2, work, [&] { fc_proj_->weight_grads(rt, dbranch, s.g, bias_sums_in_ln2); });
  } else {
    if (fc_proj_) fc_proj_->backward(rt, dg, dbranch, s.g, work, gelu_of);  // sequence parallel: no bias sums
    else linear_backward(rt, dg, dbranch, s.g, *p_.fc_proj_w, p_.fc_proj_b, gelu_of, bias_sums_in_ln2);
    if (cfg_.swiglu) swiglu_backward(rt, dh, dg, s.h);
    linear_backward(rt, fc_, dln, dh, s.ln2, *p_.fc_w, p_.fc_b, work);
  }
  ResidualColumnSums bias_sums;
  if (bias_sums_in_ln2)
    bias_sums = {p_.fc_proj_b->grad, p_.proj_b->grad, grad_accumulates(*p_.fc_proj_b), grad_accumulates(*p_.proj_b)};
  layernorm_backward(rt, dres, p_.ln2_w->grad, grad_or_empty(p_.ln2_b), dln, s.r, p_.ln2_w->value, s.ln2_mean, s.ln2_rstd,
                     layernorm_grads_accumulate(*p_.ln2_w, p_.ln2_b), bias_sums_in_ln2 ? &bias_sums : nullptr,
                     cfg_.rmsnorm);
  // Attention branch: r = x + drop(proj(attn(ln1(x)))). dres now holds dL/dr.
  if (drop) dropout_backward(rt, dbranch, dres, cfg_.dropout, dropout_key(ctx, 1, n));
  Tensor datt = work.take(dt, {B, T, Al});
  Tensor dqkv = work.take(dt, {B, T, cfg_.qkv_width() / tp_.size});
  const AttentionHeads H = local_heads();
  // QK-norm's backward, in place: the gradient of the normed q and k into that of qkv's output.
  auto qk_norm_backward = [&](const Tensor& d) {
    if (!cfg_.qk_norm) return;
    const bool accumulate = grad_accumulates(*p_.q_norm_w);
    TRELLIS_CHECK(grad_accumulates(*p_.k_norm_w) == accumulate, "internal: the QK-norm weights differ in freshness");
    trellis::qk_norm_backward(rt, d, p_.q_norm_w->grad, p_.k_norm_w->grad, d, s.qkv_in, p_.q_norm_w->value,
                              p_.k_norm_w->value, s.qk_rstd, H, accumulate);
  };
  if (defer) {
    proj_->backward_input(rt, datt, dbranch);
    attention_backward(rt, dqkv, datt, s.qkv, s.att, s.lse, attention_heads(ctx), attention_dropout(ctx));
    if (cfg_.rope) rotary_embedding(rt, dqkv, H, cfg_.rotary(), 0, true);  // to the unturned q, k
    qk_norm_backward(dqkv);
    qkv_->backward(rt, dln, dqkv, s.ln1, work, [&] { proj_->weight_grads(rt, dbranch, s.att, bias_sums_in_ln2); });
  } else {
    if (proj_) proj_->backward(rt, datt, dbranch, s.att, work);
    else linear_backward(rt, datt, dbranch, s.att, *p_.proj_w, p_.proj_b, nullptr, bias_sums_in_ln2);
    attention_backward(rt, dqkv, datt, s.qkv, s.att, s.lse, attention_heads(ctx), attention_dropout(ctx));
    if (cfg_.rope) rotary_embedding(rt, dqkv, H, cfg_.rotary(), 0, true);  // to the unturned q, k
    qk_norm_backward(dqkv);
    linear_backward(rt, qkv_, dln, dqkv, s.ln1, *p_.qkv_w, p_.qkv_b, work);
  }
  layernorm_backward(rt, dres, p_.ln1_w->grad, grad_or_empty(p_.ln1_b), dln, s.x, p_.ln1_w->value, s.ln1_mean, s.ln1_rstd,
                     layernorm_grads_accumulate(*p_.ln1_w, p_.ln1_b), nullptr, cfg_.rmsnorm);
}

namespace {
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t TransformerBlock::kept_bytes(const GPTConfig& cfg, int64_t B, int64_t T, const TensorParallelContext& tp,
                                    bool moe) {
  const int64_t t = tp.size, N = B * T, rows = tp.sharded_tokens() ? token_shard_rows(N, t) : N;
  const size_t e = dtype_size(cfg.dtype);
  const size_t btc = size_t(rows * cfg.d_model) * e;         // the block's own (token-row) activations
  const size_t bt = size_t(rows) * 4;
  const size_t att = size_t(N * (cfg.attention_width() / t)) * e;  // (B, T, H hd / t)
  const size_t attention = aligned(att) + aligned(size_t(B * (cfg.n_heads / t) * T) * 4);
  // qkv, or with QK-norm its linear output and the norms' statistics (qkv made again in backward)
  const size_t qkv = aligned(size_t(N * (cfg.qkv_width() / t)) * e) +
                     (cfg.qk_norm ? aligned(size_t(N * ((cfg.n_heads + cfg.kv_heads()) / t)) * 4) : 0);
  // ln1 + stats, qkv, r, ln2 + stats, h, g; of them ln1, ln2 and g are the element-wise outputs
  const size_t h = aligned(size_t(N * (cfg.fc_width() / t)) * e), g = aligned(size_t(N * (cfg.mlp_width() / t)) * e);
  size_t elementwise = aligned(btc) * 2 + g;
  size_t rest = aligned(btc) * 3 + qkv + h + g + aligned(bt) * 4;
  if (moe) {  // the experts' tensors instead of h and g, none of them recomputed element-wise
    rest += MoEMLP::kept_bytes(cfg.moe, cfg.d_model, cfg.dtype, N, int(t)) - h - g;
    elementwise = aligned(btc) * 2;
  }
  switch (cfg.checkpointing) {
    case Checkpointing::none: return attention + rest;
    case Checkpointing::selective: return rest;
    case Checkpointing::elementwise: return attention + rest - elementwise;
    case Checkpointing::full: return 0;
  }
  return 0;
}

size_t TransformerBlock::work_bytes(const GPTConfig& cfg, int64_t B, int64_t T, const TensorParallelContext& tp) {
  const int64_t t = tp.size, N = B * T, rows = tp.sharded_tokens() ? token_shard_rows(N, t) : N;
  const size_t e = dtype_size(cfg.dtype);
  const size_t btc = size_t(rows * cfg.d_model) * e, datt = size_t(N * (cfg.attention_width() / t)) * e;
  // With sequence parallelism each parallel linear takes full (N, C) tensors from the workspace:
  // forward, the gathered inputs of qkv and fc and the partial sums of the two projections;
  // backward, the gathered output gradients of the projections and the gathered input and its
  // gradient for qkv and fc.
  const size_t gathered = tp.sharded_tokens() ? aligned(size_t(N * cfg.d_model) * e) : 0;
  GPTConfig everything = cfg;
  everything.checkpointing = Checkpointing::none;
  // recompute, branch, y; with QK-norm the qkv attention reads (forward's and backward's, not kept)
  const size_t qkv_again = cfg.qk_norm ? aligned(size_t(N * (cfg.qkv_width() / t)) * e) : 0;
  const size_t forward = kept_bytes(everything, B, T, tp) + 2 * aligned(btc) + 4 * gathered + qkv_again;
  // dbranch, dln, datt, dh (and SwiGLU's dg), dqkv
  const size_t dh = aligned(size_t(N * (cfg.fc_width() / t)) * e) +
                    (cfg.swiglu ? aligned(size_t(N * (cfg.mlp_width() / t)) * e) : 0);
  const size_t dqkv = aligned(size_t(N * (cfg.qkv_width() / t)) * e);
  const size_t backward = aligned(btc) * 2 + aligned(datt) + dh + dqkv + 6 * gathered + qkv_again;
  if (cfg.moe.experts == 0) return forward + backward;
  // A block with experts: its recomputation, and the experts' temporaries of forward and backward.
  const size_t moe = kept_bytes(everything, B, T, tp, true) + 2 * aligned(btc) +
                     MoEMLP::work_bytes(cfg.moe, cfg.d_model, cfg.dtype, N, int(t), tp.sharded_tokens()) + backward;
  return std::max(forward + backward, moe);
}

}  // namespace trellis
