// GPT-2 forward for generation: the training ops on (B, n, C) activations, attention through the
// KV cache ops, the head on the last position only; host-side sampling and the decode loop.
#include "models/gpt_inference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/ops.h"
#include "core/philox.h"
#include "models/gpt.h"

namespace trellis {

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

Tensor rows2d(const Tensor& t) { return t.view({t.rows(), t.cols()}); }

// One rank holds every expert, and generation routes without dropping (moe.dropless), so a token's
// output does not depend on the others in the batch (training's capacity drops choices).
GPTConfig inference_config(GPTConfig c) {
  c.moe.expert_parallel = 1;
  c.moe.dropless = c.moe.experts > 0;
  return c;
}

void linear(Runtime& rt, const Tensor& y, const Tensor& x, const Parameter& w, const Parameter* b) {
  MatmulOptions o;
  o.trans_b = true;
  o.bias = b ? &b->value : nullptr;
  matmul(rt, rows2d(y), rows2d(x), w.value, o);
}

}  // namespace

GPTInference::GPTInference(Runtime& rt, const GPTConfig& cfg, int64_t batch, int64_t max_len)
    : rt_(rt), cfg_(inference_config(cfg)), B_(batch), max_len_(max_len),
      params_(rt, GPT::parameter_specs(cfg_), cfg.dtype) {
  TRELLIS_CHECK(batch > 0 && max_len > 0 && max_len <= cfg.seq_len,
                "GPTInference: max_len " + std::to_string(max_len) + " must be in [1, seq_len = " +
                    std::to_string(cfg.seq_len) + "]");
  const size_t e = dtype_size(cfg.dtype), C = size_t(cfg.d_model), BT = size_t(batch * max_len);
  const size_t Ckv = size_t(cfg.kv_heads() * cfg.head_dim());  // grouped-query attention caches fewer heads
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    k_cache_.emplace_back(rt.allocator(), BT * Ckv * e, "k cache");
    v_cache_.emplace_back(rt.allocator(), BT * Ckv * e, "v cache");
  }
  const size_t Vp = size_t(cfg.padded_vocab()), Bs = size_t(batch);
  acts_ = Arena(rt.allocator(),
                aligned(BT * 4) + 2 * aligned(BT * C * e) + aligned(BT * C * e) + 2 * aligned(BT * 4) +
                    aligned(Bs * C * e) + aligned(Bs * Vp * e) + aligned(Bs * Vp * 4),
                "inference activations");
  // ln + stats, qkv (+ QK-norm's stats), att, branch, r, ln2 + stats, h, g; a block with experts their
  // tensors instead of h, g
  // What MoEMLP::forward takes on one rank: what training keeps for backward, and the router's logits.
  const size_t experts = cfg.moe.experts > 0 ? MoEMLP::kept_bytes(cfg_.moe, cfg.d_model, cfg.dtype, int64_t(BT)) +
                                                   aligned(BT * size_t(cfg.moe.experts) * 4)
                                             : 0;
  work_ = Arena(rt.allocator(),
                aligned(BT * C * e) * 4 + aligned(BT * size_t(cfg.attention_width()) * e) +
                    aligned(BT * size_t(cfg.qkv_width()) * e) + aligned(BT * size_t(cfg.n_heads + cfg.kv_heads()) * 4) +
                    aligned(BT * size_t(cfg.fc_width()) * e) +
                    aligned(BT * size_t(cfg.mlp_width()) * e) + 4 * aligned(BT * 4) +
                    experts,
                "inference workspace");
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    experts_.emplace_back();
    if (cfg_.moe.in_layer(l))
      experts_.back().emplace(cfg_.moe, cfg_.dtype, MoEMLP::params_of(params_, cfg_.moe, int(l), 0), nullptr);
  }
}

std::vector<float> GPTInference::prefill(const std::vector<int32_t>& tokens, int64_t n) {
  pos_ = 0;
  return forward(tokens, n);
}

std::vector<float> GPTInference::step(const std::vector<int32_t>& tokens) { return forward(tokens, 1); }

std::vector<float> GPTInference::forward(const std::vector<int32_t>& tokens, int64_t n) {
  const int64_t B = B_, C = cfg_.d_model, Vp = cfg_.padded_vocab();
  TRELLIS_CHECK(n > 0 && int64_t(tokens.size()) == B * n, "GPTInference: expected " + std::to_string(B * n) +
                                                               " tokens, got " + std::to_string(tokens.size()));
  TRELLIS_CHECK(pos_ + n <= max_len_, "GPTInference: position " + std::to_string(pos_ + n) + " beyond max_len " +
                                          std::to_string(max_len_));
  const DType dt = cfg_.dtype;
  const ParameterStore& ps = params_;
  acts_.reset();
  Tensor tok = acts_.take(DType::i32, {B, n});
  copy(rt_, tok, Tensor(const_cast<int32_t*>(tokens.data()), DType::i32, Device::CPU(), {B, n}));
  Tensor x = acts_.take(dt, {B, n, C}), y = acts_.take(dt, {B, n, C});
  const Tensor wpe = cfg_.rope ? Tensor() : ps.get("wpe").value.slice(pos_ * C, {n, C});
  embedding_forward(rt_, x, tok, ps.get("wte").value, wpe);
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    auto P = [&](const char* name) -> const Parameter& { return ps.get(p + name); };
    auto bias = [&](const char* name) { return value_or_empty(ps.find(p + name)); };  // none with RMSNorm
    work_.reset();
    const AttentionHeads heads(int(cfg_.n_heads), int(cfg_.kv_heads()), cfg_.sliding_window);
    const int64_t Ckv = cfg_.kv_heads() * cfg_.head_dim();
    Tensor kc = k_cache_[size_t(l)].tensor(dt, {B, max_len_, Ckv});
    Tensor vc = v_cache_[size_t(l)].tensor(dt, {B, max_len_, Ckv});
    Tensor ln = work_.take(dt, {B, n, C});
    Tensor mean = work_.take(DType::f32, {B * n}), rstd = work_.take(DType::f32, {B * n});
    layernorm_forward(rt_, ln, mean, rstd, x, P("ln1.w").value, bias("ln1.b"), float(cfg_.norm_eps), cfg_.rmsnorm);
    Tensor qkv = work_.take(dt, {B, n, cfg_.qkv_width()});
    linear(rt_, qkv, ln, P("attn.qkv.w"), ps.find(p + "attn.qkv.b"));  // none with model.bias = false
    if (cfg_.qk_norm) {  // in place: no backward reads the unnormed qkv
      Tensor qk_rstd = work_.take(DType::f32, {B * n, cfg_.n_heads + cfg_.kv_heads()});
      qk_norm_forward(rt_, qkv, qk_rstd, qkv, P("attn.q_norm.w").value, P("attn.k_norm.w").value, heads,
                      float(cfg_.norm_eps));
    }
    // Cached k turned. LongRoPE's factors follow the sequence so far, as transformers' do: the short
    // ones until it passes the original context, the long ones for the positions after (the cached
    // keys keep their turn).
    if (cfg_.rope) rotary_embedding(rt_, qkv, heads, cfg_.rotary(pos_ + n), pos_);
    kv_cache_append(rt_, kc, vc, qkv, pos_, heads);
    Tensor att = work_.take(dt, {B, n, cfg_.attention_width()});
    attention_with_cache(rt_, att, qkv, kc, vc, pos_, heads);
    Tensor branch = work_.take(dt, {B, n, C});
    linear(rt_, branch, att, P("attn.proj.w"), ps.find(p + "attn.proj.b"));
    Tensor r = work_.take(dt, {B, n, C});
    add(rt_, r, x, branch);
    Tensor ln2 = work_.take(dt, {B, n, C});
    Tensor mean2 = work_.take(DType::f32, {B * n}), rstd2 = work_.take(DType::f32, {B * n});
    layernorm_forward(rt_, ln2, mean2, rstd2, r, P("ln2.w").value, bias("ln2.b"), float(cfg_.norm_eps), cfg_.rmsnorm);
    if (experts_[size_t(l)]) {  // y = r + the experts' gated sum
      MoESaved saved;
      experts_[size_t(l)]->forward(rt_, y, ln2, &r, saved, work_, work_);
      std::swap(x, y);
      continue;
    }
    Tensor h = work_.take(dt, {B, n, cfg_.fc_width()}), g = work_.take(dt, {B, n, cfg_.mlp_width()});
    linear(rt_, h, ln2, P("mlp.fc.w"), ps.find(p + "mlp.fc.b"));
    if (cfg_.swiglu) swiglu_forward(rt_, g, h);
    else gelu_forward(rt_, g, h);
    linear(rt_, branch, g, P("mlp.proj.w"), ps.find(p + "mlp.proj.b"));
    add(rt_, y, r, branch);
    std::swap(x, y);
  }
  // Final norm and the head on the last position of each sequence.
  Tensor lnf = acts_.take(dt, {B, n, C});
  Tensor mean = acts_.take(DType::f32, {B * n}), rstd = acts_.take(DType::f32, {B * n});
  layernorm_forward(rt_, lnf, mean, rstd, x, ps.get("lnf.w").value, value_or_empty(ps.find("lnf.b")), float(cfg_.norm_eps),
                    cfg_.rmsnorm);
  Tensor last = acts_.take(dt, {B, C});
  for (int64_t b = 0; b < B; ++b) copy(rt_, last.slice(b * C, {C}), lnf.slice((b * n + n - 1) * C, {C}));
  Tensor logits = acts_.take(dt, {B, Vp});
  MatmulOptions o;
  o.trans_b = true;
  matmul(rt_, logits, last, ps.get(cfg_.tied_head ? "wte" : "lm_head.w").value, o);
  Tensor logits32 = logits;
  if (dt != DType::f32) {
    logits32 = acts_.take(DType::f32, {B, Vp});
    cast(rt_, logits32, logits);
  }
  std::vector<float> host(size_t(B * Vp));
  copy(rt_, Tensor(host.data(), DType::f32, Device::CPU(), {B, Vp}), logits32);
  rt_.synchronize();
  pos_ += n;
  return host;
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& opt, uint64_t step, uint64_t row) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  // Highest logit first; ties go to the lower id, so the order is total and runs repeat.
  auto higher = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (opt.temperature <= 0.0f || opt.top_k == 1) return *std::min_element(ids.begin(), ids.end(), higher);
  const int64_t k = opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
  std::vector<double> p(static_cast<size_t>(k));
  const double mx = logits[ids[0]];
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) sum += p[size_t(i)] = std::exp((double(logits[ids[size_t(i)]]) - mx) / opt.temperature);
  const double u = double(philox_uniform(philox_word(opt.seed, step, row))) * sum;
  double c = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    c += p[size_t(i)];
    if (u < c) return ids[size_t(i)];
  }
  return ids[size_t(k - 1)];
}

std::vector<std::vector<int32_t>> generate(GPTInference& model, const std::vector<std::vector<int32_t>>& prompts,
                                           int64_t n_new, const SamplingOptions& opt) {
  const int64_t B = model.batch(), Vp = model.config().padded_vocab();
  const int64_t V = opt.vocab > 0 ? std::min(opt.vocab, model.config().vocab_size) : model.config().vocab_size;
  TRELLIS_CHECK(int64_t(prompts.size()) == B, "generate: " + std::to_string(prompts.size()) + " prompts for a batch of " +
                                                  std::to_string(B));
  size_t lo = prompts[0].size(), hi = 0;
  for (const auto& p : prompts) {
    TRELLIS_CHECK(!p.empty(), "generate: an empty prompt");
    lo = std::min(lo, p.size());
    hi = std::max(hi, p.size());
  }
  std::vector<int32_t> first(size_t(B) * lo);
  for (int64_t b = 0; b < B; ++b) std::copy_n(prompts[size_t(b)].begin(), lo, first.begin() + b * int64_t(lo));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<float> logits = model.prefill(first, int64_t(lo));
  std::vector<int32_t> next(static_cast<size_t>(B));
  // Step t feeds position lo + t; rows still inside their prompt take the prompt's token.
  const int64_t steps = int64_t(hi - lo) + n_new;
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prompts[size_t(b)];
      const size_t at = lo + size_t(t);
      if (at < p.size()) {
        next[size_t(b)] = p[at];
      } else {
        next[size_t(b)] = sample_token(logits.data() + b * Vp, V, opt, uint64_t(t), uint64_t(b));
        if (int64_t(out[size_t(b)].size()) < n_new) out[size_t(b)].push_back(next[size_t(b)]);
      }
    }
    if (t + 1 < steps) logits = model.step(next);
  }
  return out;
}

}  // namespace trellis
