// GPT-2 block forward/backward built from core ops, with activation checkpointing.
#include "models/transformer_block.h"

#include <cmath>

#include "core/nvtx.h"

namespace trellis {

namespace {

Tensor rows2d(const Tensor& t) { return t.view({t.rows(), t.cols()}); }

// y = x W^T + b, for x (N, in), W (out, in).
void linear_forward(Runtime& rt, const Tensor& y, const Tensor& x, const Parameter& w, const Parameter& b) {
  MatmulOptions o;
  o.trans_b = true;
  o.bias = &b.value;
  matmul(rt, rows2d(y), rows2d(x), w.value, o);
}

// dx = dy W (written), dW += dy^T x, db += column sums of dy.
void linear_backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, const Parameter& w,
                     const Parameter& b) {
  MatmulOptions acc;
  acc.trans_a = true;
  acc.accumulate = true;
  matmul(rt, w.grad, rows2d(dy), rows2d(x), acc);
  bias_backward(rt, b.grad, rows2d(dy));
  if (dx.defined()) matmul(rt, rows2d(dx), rows2d(dy), w.value);
}

}  // namespace

void TransformerBlock::append_specs(const GPTConfig& cfg, int layer, std::vector<ParameterSpec>& out) {
  const int64_t C = cfg.d_model;
  const std::string p = "h." + std::to_string(layer) + ".";
  const float resid_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layers));  // GPT-2's scaled projections
  out.push_back({p + "ln1.w", {C}, Init::ones, 0, false});
  out.push_back({p + "ln1.b", {C}, Init::zeros, 0, false});
  out.push_back({p + "attn.qkv.w", {3 * C, C}, Init::normal, 0.02f, true});
  out.push_back({p + "attn.qkv.b", {3 * C}, Init::zeros, 0, false});
  out.push_back({p + "attn.proj.w", {C, C}, Init::normal, resid_std, true});
  out.push_back({p + "attn.proj.b", {C}, Init::zeros, 0, false});
  out.push_back({p + "ln2.w", {C}, Init::ones, 0, false});
  out.push_back({p + "ln2.b", {C}, Init::zeros, 0, false});
  out.push_back({p + "mlp.fc.w", {4 * C, C}, Init::normal, 0.02f, true});
  out.push_back({p + "mlp.fc.b", {4 * C}, Init::zeros, 0, false});
  out.push_back({p + "mlp.proj.w", {C, 4 * C}, Init::normal, resid_std, true});
  out.push_back({p + "mlp.proj.b", {C}, Init::zeros, 0, false});
}

namespace {
// Mask streams: (step, layer slot, site); sites 1 and 2 are the residual branches, 3 attention.
uint64_t dropout_stream(const StepContext& ctx, int layer, int site) {
  return (uint64_t(ctx.step) << 24) | (uint64_t(layer + 1) << 4) | uint64_t(site);
}
}  // namespace

DropoutKey TransformerBlock::dropout_key(const StepContext& ctx, int site, int64_t T) const {
  DropoutKey k;
  k.seed = ctx.seed;
  k.stream = dropout_stream(ctx, layer_, site);
  k.seq_local = T;
  k.seq_global = T;
  k.seq_offset = ctx.sample_offset * T;
  return k;
}

AttentionDropout TransformerBlock::attention_dropout(const StepContext& ctx) const {
  AttentionDropout d;
  if (!ctx.training) return d;
  d.p = cfg_.attention_dropout;
  d.seed = ctx.seed;
  d.stream = dropout_stream(ctx, layer_, 3);
  d.sample_offset = ctx.sample_offset;
  return d;
}

void TransformerBlock::attention_part(Runtime& rt, const StepContext& ctx, BlockSaved& s, Arena& a) const {
  const int64_t B = s.x.size(0), T = s.x.size(1), C = cfg_.d_model;
  s.att = a.take(cfg_.dtype, {B, T, C});
  s.lse = a.take(DType::f32, {B, cfg_.n_heads, T});
  attention_forward(rt, s.att, s.lse, s.qkv, int(cfg_.n_heads), attention_dropout(ctx));
}

void TransformerBlock::forward_into(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y,
                                    BlockSaved& s, Arena& keep, Arena& temp, bool keep_attention,
                                    bool keep_rest) const {
  const int64_t B = x.size(0), T = x.size(1), C = cfg_.d_model;
  const DType dt = cfg_.dtype;
  const bool drop = ctx.training && cfg_.dropout > 0.0f;
  Arena& rest = keep_rest ? keep : temp;
  s.x = x;
  s.ln1 = rest.take(dt, {B, T, C});
  s.ln1_mean = rest.take(DType::f32, {B * T});
  s.ln1_rstd = rest.take(DType::f32, {B * T});
  layernorm_forward(rt, s.ln1, s.ln1_mean, s.ln1_rstd, x, p_.ln1_w->value, p_.ln1_b->value);
  s.qkv = rest.take(dt, {B, T, 3 * C});
  linear_forward(rt, s.qkv, s.ln1, *p_.qkv_w, *p_.qkv_b);
  attention_part(rt, ctx, s, keep_attention ? keep : temp);
  Tensor branch = temp.take(dt, {B, T, C});
  linear_forward(rt, branch, s.att, *p_.proj_w, *p_.proj_b);
  if (drop) dropout_forward(rt, branch, branch, cfg_.dropout, dropout_key(ctx, 1, T));
  s.r = rest.take(dt, {B, T, C});
  add(rt, s.r, x, branch);
  s.ln2 = rest.take(dt, {B, T, C});
  s.ln2_mean = rest.take(DType::f32, {B * T});
  s.ln2_rstd = rest.take(DType::f32, {B * T});
  layernorm_forward(rt, s.ln2, s.ln2_mean, s.ln2_rstd, s.r, p_.ln2_w->value, p_.ln2_b->value);
  s.h = rest.take(dt, {B, T, 4 * C});
  linear_forward(rt, s.h, s.ln2, *p_.fc_w, *p_.fc_b);
  s.g = rest.take(dt, {B, T, 4 * C});
  gelu_forward(rt, s.g, s.h);
  linear_forward(rt, branch, s.g, *p_.fc_proj_w, *p_.fc_proj_b);
  if (drop) dropout_forward(rt, branch, branch, cfg_.dropout, dropout_key(ctx, 2, T));
  add(rt, y, s.r, branch);
}

void TransformerBlock::forward(Runtime& rt, const StepContext& ctx, const Tensor& x, const Tensor& y,
                               BlockSaved& s, Arena& keep, Arena& temp) const {
  NvtxRange r("block_forward");
  const bool keep_all = cfg_.checkpointing == Checkpointing::none;
  const bool keep_rest = cfg_.checkpointing != Checkpointing::full;
  forward_into(rt, ctx, x, y, s, keep, temp, keep_all, keep_rest);
}

void TransformerBlock::backward(Runtime& rt, const StepContext& ctx, const Tensor& dres, BlockSaved& s,
                                Arena& work) const {
  NvtxRange r("block_backward");
  const int64_t B = s.x.size(0), T = s.x.size(1), C = cfg_.d_model;
  const DType dt = cfg_.dtype;
  const bool drop = ctx.training && cfg_.dropout > 0.0f;
  if (cfg_.checkpointing == Checkpointing::full) {
    NvtxRange rr("recompute_block");
    Tensor y = work.take(dt, {B, T, C});
    forward_into(rt, ctx, s.x, y, s, work, work, false, false);
  } else if (cfg_.checkpointing == Checkpointing::selective) {
    NvtxRange rr("recompute_attention");
    attention_part(rt, ctx, s, work);
  }
  // MLP branch: y = r + drop(fc_proj(gelu(fc(ln2(r))))).
  Tensor dbranch = dres;
  if (drop) {
    dbranch = work.take(dt, {B, T, C});
    dropout_backward(rt, dbranch, dres, cfg_.dropout, dropout_key(ctx, 2, T));
  }
  Tensor dg = work.take(dt, {B, T, 4 * C});
  linear_backward(rt, dg, dbranch, s.g, *p_.fc_proj_w, *p_.fc_proj_b);
  gelu_backward(rt, dg, dg, s.h);
  Tensor dln = work.take(dt, {B, T, C});
  linear_backward(rt, dln, dg, s.ln2, *p_.fc_w, *p_.fc_b);
  layernorm_backward(rt, dres, p_.ln2_w->grad, p_.ln2_b->grad, dln, s.r, p_.ln2_w->value, s.ln2_mean, s.ln2_rstd);
  // Attention branch: r = x + drop(proj(attn(ln1(x)))). dres now holds dL/dr.
  if (drop) dropout_backward(rt, dbranch, dres, cfg_.dropout, dropout_key(ctx, 1, T));
  Tensor datt = work.take(dt, {B, T, C});
  linear_backward(rt, datt, dbranch, s.att, *p_.proj_w, *p_.proj_b);
  Tensor dqkv = work.take(dt, {B, T, 3 * C});
  attention_backward(rt, dqkv, datt, s.qkv, s.att, s.lse, int(cfg_.n_heads), attention_dropout(ctx));
  linear_backward(rt, dln, dqkv, s.ln1, *p_.qkv_w, *p_.qkv_b);
  layernorm_backward(rt, dres, p_.ln1_w->grad, p_.ln1_b->grad, dln, s.x, p_.ln1_w->value, s.ln1_mean, s.ln1_rstd);
}

namespace {
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t TransformerBlock::kept_bytes(const GPTConfig& cfg, int64_t B, int64_t T) {
  const size_t e = dtype_size(cfg.dtype), btc = size_t(B * T * cfg.d_model) * e, bt = size_t(B * T) * 4;
  const size_t attention = aligned(btc) + aligned(size_t(B * cfg.n_heads * T) * 4);
  // ln1 + stats, qkv, r, ln2 + stats, h, g
  const size_t rest = aligned(btc) * 3 + aligned(3 * btc) + aligned(4 * btc) * 2 + aligned(bt) * 4;
  switch (cfg.checkpointing) {
    case Checkpointing::none: return attention + rest;
    case Checkpointing::selective: return rest;
    case Checkpointing::full: return 0;
  }
  return 0;
}

size_t TransformerBlock::work_bytes(const GPTConfig& cfg, int64_t B, int64_t T) {
  const size_t e = dtype_size(cfg.dtype), btc = size_t(B * T * cfg.d_model) * e;
  GPTConfig everything = cfg;
  everything.checkpointing = Checkpointing::none;
  const size_t forward = kept_bytes(everything, B, T) + 2 * aligned(btc);  // recompute, branch, y
  const size_t backward = aligned(btc) * 3 + aligned(4 * btc) + aligned(3 * btc);
  return forward + backward;
}

}  // namespace trellis
