// GPT-2 forward/backward over one micro-batch: embedding, blocks, and a head processed in row
// chunks so the full (B*T, vocab) logits never exist at once.
#include "models/gpt.h"

#include <algorithm>

#include "core/nvtx.h"
#include "core/ops.h"

namespace trellis {

namespace {

constexpr int64_t kHeadChunkRows = 8192;
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

BlockParams block_params(const ParameterStore& ps, int layer) {
  const std::string p = "h." + std::to_string(layer) + ".";
  return BlockParams{&ps.get(p + "ln1.w"),      &ps.get(p + "ln1.b"),      &ps.get(p + "attn.qkv.w"),
                     &ps.get(p + "attn.qkv.b"), &ps.get(p + "attn.proj.w"), &ps.get(p + "attn.proj.b"),
                     &ps.get(p + "ln2.w"),      &ps.get(p + "ln2.b"),      &ps.get(p + "mlp.fc.w"),
                     &ps.get(p + "mlp.fc.b"),   &ps.get(p + "mlp.proj.w"), &ps.get(p + "mlp.proj.b")};
}

}  // namespace

std::vector<ParameterSpec> GPT::parameter_specs(const GPTConfig& cfg) {
  const int64_t C = cfg.d_model;
  std::vector<ParameterSpec> specs;
  specs.push_back({"wte", {cfg.padded_vocab(), C}, Init::normal, 0.02f, true});
  specs.push_back({"wpe", {cfg.seq_len, C}, Init::normal, 0.01f, true});
  for (int l = 0; l < cfg.n_layers; ++l) TransformerBlock::append_specs(cfg, l, specs);
  specs.push_back({"lnf.w", {C}, Init::ones, 0, false});
  specs.push_back({"lnf.b", {C}, Init::zeros, 0, false});
  return specs;
}

ActivationBytes GPT::activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T) {
  const size_t e = dtype_size(cfg.dtype), btc = aligned(size_t(B * T * cfg.d_model) * e);
  const size_t bt4 = aligned(size_t(B * T) * 4);
  ActivationBytes a;
  // Block inputs/outputs (L + 1), the blocks' kept tensors, final LayerNorm output and stats.
  a.kept = btc * size_t(cfg.n_layers + 1) + TransformerBlock::kept_bytes(cfg, B, T) * size_t(cfg.n_layers) +
           btc + 2 * bt4;
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, B * T);
  const size_t head = aligned(size_t(chunk * cfg.padded_vocab()) * e) + aligned(size_t(chunk) * 4) * 2 + btc;
  a.work = std::max(TransformerBlock::work_bytes(cfg, B, T), head) + btc;  // + embedding dropout copy
  return a;
}

GPT::GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch)
    : rt_(rt), cfg_(cfg), micro_batch_(micro_batch), params_(rt, parameter_specs(cfg), cfg.dtype) {
  for (int l = 0; l < cfg.n_layers; ++l) blocks_.emplace_back(cfg_, l, block_params(params_, l));
  saved_.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) block_ranges_.push_back(range_of("h." + std::to_string(l) + "."));
  lnf_range_ = range_of("lnf.");
  wte_range_ = range_of("wte");
  wpe_range_ = range_of("wpe");
  ActivationBytes a = activation_bytes(cfg, micro_batch, cfg.seq_len);
  acts_ = Arena(rt.allocator(), a.kept, "activations (kept for backward)");
  work_ = Arena(rt.allocator(), a.work, "activation workspace");
  dres_buf_ = Buffer(rt.allocator(), size_t(micro_batch * cfg.seq_len * cfg.d_model) * dtype_size(cfg.dtype),
                     "residual gradient");
}

DropoutKey GPT::embedding_dropout_key(const StepContext& ctx, int64_t T) const {
  DropoutKey k;
  k.seed = ctx.seed;
  k.stream = uint64_t(ctx.step) << 24;  // layer slot 0: the embedding
  k.seq_local = T;
  k.seq_global = T;
  k.seq_offset = ctx.sample_offset * T;
  return k;
}

Tensor GPT::forward_trunk(const StepContext& ctx, const Tensor& tokens) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = cfg_.d_model;
  TRELLIS_CHECK(B <= micro_batch_ && T <= cfg_.seq_len, "micro-batch larger than the model was built for");
  const DType dt = cfg_.dtype;
  acts_.reset();
  work_.reset();
  Tensor x = acts_.take(dt, {B, T, C});
  {
    NvtxRange r("embedding_forward");
    embedding_forward(rt_, x, tokens, params_.get("wte").value, params_.get("wpe").value);
    if (ctx.training && cfg_.dropout > 0.0f) dropout_forward(rt_, x, x, cfg_.dropout, embedding_dropout_key(ctx, T));
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Tensor y = acts_.take(dt, {B, T, C});
    blocks_[l].forward(rt_, ctx, x, y, saved_[l], acts_, work_);
    work_.reset();
    x = y;
  }
  final_x_ = x;
  lnf_out_ = acts_.take(dt, {B * T, C});
  lnf_mean_ = acts_.take(DType::f32, {B * T});
  lnf_rstd_ = acts_.take(DType::f32, {B * T});
  layernorm_forward(rt_, lnf_out_, lnf_mean_, lnf_rstd_, x, params_.get("lnf.w").value, params_.get("lnf.b").value);
  return lnf_out_;
}

void GPT::head(const Tensor& targets, float dloss, const Tensor& loss_sum, bool backward) {
  NvtxRange r(backward ? "head_forward_backward" : "head_forward");
  const int64_t N = lnf_out_.size(0), C = cfg_.d_model, Vp = cfg_.padded_vocab();
  const Parameter& wte = params_.get("wte");
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, N);
  work_.reset();
  Tensor logits_buf = work_.take(cfg_.dtype, {chunk, Vp});
  Tensor losses_buf = work_.take(DType::f32, {chunk});
  Tensor flat_targets = targets.view({N});
  if (backward) dlnf_ = work_.take(cfg_.dtype, {N, C});
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    Tensor x = lnf_out_.slice(r0 * C, {rows, C});
    Tensor logits = logits_buf.slice(0, {rows, Vp});
    Tensor losses = losses_buf.slice(0, {rows});
    Tensor tgt = flat_targets.slice(r0, {rows});
    MatmulOptions o;
    o.trans_b = true;
    matmul(rt_, logits, x, wte.value, o);
    if (!backward) {
      softmax_cross_entropy_forward(rt_, losses, logits, tgt, cfg_.vocab_size);
    } else {
      softmax_cross_entropy_backward(rt_, logits, losses, logits, tgt, cfg_.vocab_size, dloss);  // in place
      MatmulOptions acc;
      acc.trans_a = true;
      acc.accumulate = true;
      matmul(rt_, wte.grad, logits, x, acc);                      // dwte += dlogits^T x
      matmul(rt_, dlnf_.slice(r0 * C, {rows, C}), logits, wte.value);  // dx = dlogits wte
    }
    sum_accumulate(rt_, loss_sum, losses);
  }
}

std::pair<int64_t, int64_t> GPT::range_of(const std::string& prefix) const {
  int64_t begin = -1, end = -1;
  for (const Parameter& p : params_.all()) {
    if (p.spec.name.compare(0, prefix.size(), prefix) != 0) continue;
    if (begin < 0) begin = p.offset;
    TRELLIS_CHECK(end < 0 || end == p.offset, "parameters of " + prefix + " are not contiguous");
    end = p.offset + p.spec.shape.numel();
  }
  return {begin, end};
}

void GPT::forward_backward(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                           const Tensor& loss_sum, const GradsReady& grads_ready) {
  auto ready = [&](const std::pair<int64_t, int64_t>& r) {
    if (grads_ready) grads_ready(r.first, r.second);
  };
  const int64_t B = tokens.size(0), T = tokens.size(1), C = cfg_.d_model;
  forward_trunk(ctx, tokens);
  head(targets, dloss, loss_sum, true);
  Tensor dres = dres_buf_.tensor(cfg_.dtype, {B, T, C});
  fill(rt_, dres, 0.0f);
  layernorm_backward(rt_, dres, params_.get("lnf.w").grad, params_.get("lnf.b").grad, dlnf_, final_x_,
                     params_.get("lnf.w").value, lnf_mean_, lnf_rstd_);
  ready(lnf_range_);
  for (size_t l = blocks_.size(); l-- > 0;) {
    work_.reset();
    blocks_[l].backward(rt_, ctx, dres, saved_[l], work_);
    ready(block_ranges_[l]);
  }
  work_.reset();
  NvtxRange r("embedding_backward");
  Tensor demb = dres;
  if (ctx.training && cfg_.dropout > 0.0f) {
    demb = work_.take(cfg_.dtype, {B, T, C});
    dropout_backward(rt_, demb, dres, cfg_.dropout, embedding_dropout_key(ctx, T));
  }
  embedding_backward(rt_, params_.get("wte").grad, params_.get("wpe").grad, demb, tokens);
  ready(wte_range_);
  ready(wpe_range_);
}

void GPT::forward_loss(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum) {
  forward_trunk(ctx, tokens);
  head(targets, 0.0f, loss_sum, false);
}

}  // namespace trellis
