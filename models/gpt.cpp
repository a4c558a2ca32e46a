// GPT-2 forward/backward, one chunk of blocks of one micro-batch at a time: embedding, blocks, and
// a head processed in row chunks so the full (B*T, vocab) logits never exist at once.
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

GPTPart GPTPart::of_rank(const GPTConfig& cfg, int p, int v, int rank) {
  const std::vector<LayerRange> all = GPT::pipeline_partition(cfg, p * v);
  GPTPart part;
  for (int c = 0; c < v; ++c) part.chunks.push_back(chunk_of_rank(all, p, rank, c));
  part.embedding = rank == 0;
  part.head = rank == p - 1;
  return part;
}

GPT::StageCosts GPT::stage_costs(const GPTConfig& cfg) {
  const int64_t C = cfg.d_model, T = cfg.seq_len;
  StageCosts s;
  s.block = 72 * C * C + 12 * T * C;
  s.head = 6 * C * cfg.padded_vocab() + 8 * C;
  s.embedding = 8 * C;
  return s;
}

std::vector<LayerRange> GPT::pipeline_partition(const GPTConfig& cfg, int chunks) {
  const StageCosts s = stage_costs(cfg);
  return partition_layers(std::vector<int64_t>(size_t(cfg.n_layers), s.block), chunks, s.embedding, s.head);
}

std::vector<ParameterSpec> GPT::parameter_specs(const GPTConfig& cfg, const GPTPart& part) {
  const int64_t C = cfg.d_model;
  std::vector<ParameterSpec> specs;
  // The head reads the token embedding too (tied), so the last stage holds a copy.
  if (part.embedding || part.head) specs.push_back({"wte", {cfg.padded_vocab(), C}, Init::normal, 0.02f, true});
  if (part.embedding) specs.push_back({"wpe", {cfg.seq_len, C}, Init::normal, 0.01f, true});
  for (const LayerRange& r : part.chunks)
    for (int l = r.first; l < r.second; ++l) TransformerBlock::append_specs(cfg, l, specs);
  if (part.head) {
    specs.push_back({"lnf.w", {C}, Init::ones, 0, false});
    specs.push_back({"lnf.b", {C}, Init::zeros, 0, false});
  }
  return specs;
}

ActivationBytes GPT::activation_bytes(const GPTConfig& cfg, const GPTPart& part, int64_t B, int64_t T) {
  const size_t e = dtype_size(cfg.dtype), btc = aligned(size_t(B * T * cfg.d_model) * e);
  const size_t bt4 = aligned(size_t(B * T) * 4);
  ActivationBytes a;
  for (size_t c = 0; c < part.chunks.size(); ++c) {
    const size_t layers = size_t(part.chunks[c].second - part.chunks[c].first);
    // Chunk input, the blocks' outputs and kept tensors; tokens (embedding); final LayerNorm
    // output and statistics (head).
    size_t kept = btc * (layers + 1) + TransformerBlock::kept_bytes(cfg, B, T) * layers;
    if (part.has_embedding(int(c))) kept += bt4;
    if (part.has_head(int(c))) kept += btc + 2 * bt4;
    a.kept = std::max(a.kept, kept);
  }
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, B * T);
  const size_t head = aligned(size_t(chunk * cfg.padded_vocab()) * e) + aligned(size_t(chunk) * 4) * 2;
  a.work = std::max(TransformerBlock::work_bytes(cfg, B, T), part.head ? head : size_t(0)) + btc;  // + dropout copy
  return a;
}

ActivationBytes GPT::activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T) {
  return activation_bytes(cfg, GPTPart::whole(cfg), B, T);
}

GPT::GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch, const GPTPart& part, int slots)
    : rt_(rt), cfg_(cfg), micro_batch_(micro_batch), part_(part), params_(rt, parameter_specs(cfg, part), cfg.dtype) {
  TRELLIS_CHECK(!part.chunks.empty() && slots >= 1, "GPT: no chunk or no slot");
  for (const LayerRange& r : part.chunks) {
    TRELLIS_CHECK(r.first < r.second && r.second <= cfg.n_layers, "GPT: bad layer range");
    chunk_begin_.push_back(blocks_.size());
    for (int l = r.first; l < r.second; ++l) {
      blocks_.emplace_back(cfg_, l, block_params(params_, l));
      block_ranges_.push_back(range_of("h." + std::to_string(l) + "."));
    }
  }
  chunk_begin_.push_back(blocks_.size());
  if (part.head) lnf_range_ = range_of("lnf.");
  if (part.embedding || part.head) wte_range_ = range_of("wte");
  if (part.embedding) wpe_range_ = range_of("wpe");
  const ActivationBytes a = activation_bytes(cfg, part, micro_batch, cfg.seq_len);
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) s.acts = Arena(rt.allocator(), a.kept, "activations (kept for backward)");
  work_ = Arena(rt.allocator(), a.work, "activation workspace");
}

size_t GPT::activation_peak() const {
  size_t sum = work_.peak();
  for (const Slot& s : slots_) sum += s.acts.peak();
  return sum;
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

int GPT::acquire_slot(int chunk, int64_t B, int64_t T) {
  if (B < 0) B = micro_batch_;
  if (T < 0) T = cfg_.seq_len;
  TRELLIS_CHECK(chunk >= 0 && chunk < int(part_.chunks.size()), "GPT: no chunk " + std::to_string(chunk));
  TRELLIS_CHECK(B <= micro_batch_ && T <= cfg_.seq_len, "micro-batch larger than the model was built for");
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.chunk >= 0) continue;
    s.chunk = chunk;
    s.acts.reset();
    s.blocks.assign(chunk_begin_[size_t(chunk) + 1] - chunk_begin_[size_t(chunk)], BlockSaved{});
    s.tokens = part_.has_embedding(chunk) ? s.acts.take(DType::i32, {B, T}) : Tensor();
    s.input = s.acts.take(cfg_.dtype, {B, T, cfg_.d_model});
    s.out = s.lnf = s.lnf_mean = s.lnf_rstd = Tensor();
    return int(i);
  }
  TRELLIS_FATAL("GPT: all " + std::to_string(slots_.size()) + " activation slots are in use");
}

Tensor GPT::slot_input(int slot) const { return slots_.at(size_t(slot)).input; }

void GPT::release_slot(int slot) { slots_.at(size_t(slot)).chunk = -1; }

Tensor GPT::forward_chunk(int slot, const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                          const Tensor& loss_sum, bool backward) {
  Slot& s = slots_.at(size_t(slot));
  TRELLIS_CHECK(s.chunk >= 0, "forward_chunk on a free slot");
  const int64_t B = s.input.size(0), T = s.input.size(1), C = cfg_.d_model;
  const DType dt = cfg_.dtype;
  s.ctx = ctx;
  work_.reset();
  Tensor x = s.input;
  if (part_.has_embedding(s.chunk)) {
    NvtxRange r("embedding_forward");
    TRELLIS_CHECK(tokens.size(0) == B && tokens.size(1) == T, "tokens do not match the slot's micro-batch");
    copy(rt_, s.tokens, tokens);
    embedding_forward(rt_, x, s.tokens, params_.get("wte").value, params_.get("wpe").value);
    if (ctx.training && cfg_.dropout > 0.0f) dropout_forward(rt_, x, x, cfg_.dropout, embedding_dropout_key(ctx, T));
  }
  const size_t first = chunk_begin_[size_t(s.chunk)];
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    Tensor y = s.acts.take(dt, {B, T, C});
    blocks_[first + i].forward(rt_, ctx, x, y, s.blocks[i], s.acts, work_);
    work_.reset();
    x = y;
  }
  s.out = x;
  if (!part_.has_head(s.chunk)) return s.out;
  s.lnf = s.acts.take(dt, {B * T, C});
  s.lnf_mean = s.acts.take(DType::f32, {B * T});
  s.lnf_rstd = s.acts.take(DType::f32, {B * T});
  layernorm_forward(rt_, s.lnf, s.lnf_mean, s.lnf_rstd, x, params_.get("lnf.w").value, params_.get("lnf.b").value);
  head(s, targets, dloss, loss_sum, backward);
  return Tensor();
}

void GPT::head(Slot& s, const Tensor& targets, float dloss, const Tensor& loss_sum, bool backward) {
  NvtxRange r(backward ? "head_forward_backward" : "head_forward");
  const int64_t N = s.lnf.size(0), C = cfg_.d_model, Vp = cfg_.padded_vocab();
  const Parameter& wte = params_.get("wte");
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, N);
  work_.reset();
  Tensor logits_buf = work_.take(cfg_.dtype, {chunk, Vp});
  Tensor losses_buf = work_.take(DType::f32, {chunk});
  Tensor flat_targets = targets.view({N});
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    Tensor x = s.lnf.slice(r0 * C, {rows, C});
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
      matmul(rt_, wte.grad, logits, x, acc);  // dwte += dlogits^T x
      matmul(rt_, x, logits, wte.value);      // dx = dlogits wte, over x's rows (read above)
    }
    sum_accumulate(rt_, loss_sum, losses);
  }
  work_.reset();
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

void GPT::backward_chunk(int slot, const Tensor& dres, const GradsReady& grads_ready) {
  Slot& s = slots_.at(size_t(slot));
  TRELLIS_CHECK(s.chunk >= 0, "backward_chunk on a free slot");
  auto ready = [&](const std::pair<int64_t, int64_t>& r) {
    if (grads_ready) grads_ready(r.first, r.second);
  };
  const StepContext& ctx = s.ctx;
  const int64_t B = s.input.size(0), T = s.input.size(1), C = cfg_.d_model;
  TRELLIS_CHECK(dres.numel() == B * T * C, "residual gradient does not match the slot's micro-batch");
  if (part_.has_head(s.chunk)) {
    fill(rt_, dres, 0.0f);
    layernorm_backward(rt_, dres, params_.get("lnf.w").grad, params_.get("lnf.b").grad, s.lnf, s.out,
                       params_.get("lnf.w").value, s.lnf_mean, s.lnf_rstd);
    ready(lnf_range_);
  }
  const size_t first = chunk_begin_[size_t(s.chunk)];
  for (size_t i = s.blocks.size(); i-- > 0;) {
    work_.reset();
    blocks_[first + i].backward(rt_, ctx, dres, s.blocks[i], work_);
    ready(block_ranges_[first + i]);
  }
  work_.reset();
  if (part_.has_embedding(s.chunk)) {
    NvtxRange r("embedding_backward");
    Tensor demb = dres;
    if (ctx.training && cfg_.dropout > 0.0f) {
      demb = work_.take(cfg_.dtype, {B, T, C});
      dropout_backward(rt_, demb, dres, cfg_.dropout, embedding_dropout_key(ctx, T));
    }
    embedding_backward(rt_, params_.get("wte").grad, params_.get("wpe").grad, demb, s.tokens);
    ready(wte_range_);
    ready(wpe_range_);
  } else if (part_.has_head(s.chunk)) {
    ready(wte_range_);  // the head's copy: final since this micro-batch's forward
  }
  release_slot(slot);
}

void GPT::forward_backward(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                           const Tensor& loss_sum, const GradsReady& grads_ready) {
  TRELLIS_CHECK(part_.chunks.size() == 1 && part_.embedding && part_.head, "forward_backward needs the whole model");
  const int64_t B = tokens.size(0), T = tokens.size(1), C = cfg_.d_model;
  const int slot = acquire_slot(0, B, T);
  forward_chunk(slot, ctx, tokens, targets, dloss, loss_sum, true);
  const size_t bytes = size_t(micro_batch_ * cfg_.seq_len * C) * dtype_size(cfg_.dtype);
  if (dres_buf_.bytes() < bytes) dres_buf_ = Buffer(rt_.allocator(), bytes, "residual gradient");
  backward_chunk(slot, dres_buf_.tensor(cfg_.dtype, {B, T, C}), grads_ready);
}

void GPT::forward_loss(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum) {
  TRELLIS_CHECK(part_.chunks.size() == 1 && part_.embedding && part_.head, "forward_loss needs the whole model");
  const int slot = acquire_slot(0, tokens.size(0), tokens.size(1));
  forward_chunk(slot, ctx, tokens, targets, 0.0f, loss_sum, false);
  release_slot(slot);
}

Tensor GPT::grads_counted_once() const {
  const Tensor all = params_.flat_grads();
  if (part_.embedding || !part_.head) return all;
  // wte comes first in this part's buffer (parameter_specs), so the rest is contiguous.
  return all.slice(wte_range_.second, {all.numel() - wte_range_.second});
}

Tensor GPT::tied_embedding_grad() const {
  return part_.embedding || part_.head ? params_.get("wte").grad : Tensor();
}

}  // namespace trellis
