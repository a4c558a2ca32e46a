// GPT-2 forward/backward, one chunk of blocks of one micro-batch at a time: embedding, blocks, and
// a head processed in row chunks so the full (B*T, vocab) logits never exist at once.
#include "models/gpt.h"

#include <algorithm>

#include "core/nvtx.h"
#include "core/ops.h"
#include "parallel/tensor/mappings.h"

namespace trellis {

namespace {

constexpr int64_t kHeadChunkRows = 8192;
// Bucket ids: -1 wte, -2 wpe, -3 the final LayerNorm, -4 an untied head (negative: kept whole at
// every ZeRO stage), l block l (its experts, under expert parallelism, a bucket of their own with the same id).
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

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
  const int64_t C = cfg.d_model, T = cfg.seq_len, A = cfg.attention_width();
  StageCosts s;
  const int64_t attention = (cfg.qkv_width() + A) * C;  // qkv and proj: 4C^2 with as many key-value heads
  s.block = 6 * (attention + (cfg.fc_width() + cfg.mlp_width()) * C) + 12 * T * A;  // 72 C^2 + ... with GELU
  s.head = 6 * C * cfg.padded_vocab() + 8 * C;
  s.embedding = 8 * C;
  // Each token's rows through an expert-sized MLP: its routed slots, and the shared MLP's width.
  const double expert_rows = cfg.moe.rows_per_token() + double(cfg.moe.shared_experts);
  const int64_t expert_mlp = 6 * (cfg.moe.expert_fc_width(C) + cfg.moe.expert_width(C)) * C;  // fc and proj, 3 passes
  s.moe_block = 6 * attention + 12 * T * A + 6 * cfg.moe.experts * C + int64_t(expert_rows * double(expert_mlp));
  return s;
}

std::vector<LayerRange> GPT::pipeline_partition(const GPTConfig& cfg, int chunks) {
  if (!cfg.stage_layers.empty()) {  // listed by the config (validated there: parse_stage_layers)
    TRELLIS_CHECK(int(cfg.stage_layers.size()) == chunks, "pipeline_partition: stage_layers has " +
                                                               std::to_string(cfg.stage_layers.size()) +
                                                               " entries for " + std::to_string(chunks) + " chunks");
    std::vector<LayerRange> out;
    int begin = 0;
    for (int n : cfg.stage_layers) {
      TRELLIS_CHECK(n >= 1, "pipeline_partition: an empty stage in stage_layers");
      out.emplace_back(begin, begin + n);
      begin += n;
    }
    TRELLIS_CHECK(begin == int(cfg.n_layers), "pipeline_partition: stage_layers sums to " + std::to_string(begin) +
                                                  ", not model.n_layers = " + std::to_string(cfg.n_layers));
    return out;
  }
  const StageCosts s = stage_costs(cfg);
  std::vector<int64_t> blocks;
  for (int64_t l = 0; l < cfg.n_layers; ++l) blocks.push_back(cfg.moe.in_layer(l) ? s.moe_block : s.block);
  return partition_layers(blocks, chunks, s.embedding, s.head);
}

void GPT::check_tensor_parallel(const GPTConfig& cfg, int tensor) {
  TransformerBlock::check_tensor_parallel(cfg, tensor);
  if (cfg.padded_vocab() % tensor != 0)
    throw UserError("tensor parallelism splits the vocabulary: model.vocab_size = " + std::to_string(cfg.vocab_size) +
                    ", padded to " + std::to_string(cfg.padded_vocab()) + " (a multiple of " +
                    std::to_string(kVocabPadMultiple) + "), must be divisible by parallel.tensor = " +
                    std::to_string(tensor));
}

std::vector<ParameterSpec> GPT::parameter_specs(const GPTConfig& cfg, const GPTPart& part,
                                                const TensorParallelContext& tp, int expert_rank) {
  const int64_t C = cfg.d_model;
  TRELLIS_CHECK(cfg.experts_match_model(), "GPT: the experts' MLP is not the model's (GPTConfig::set_expert_mlp)");
  if (tp.active()) check_tensor_parallel(cfg, tp.size);
  std::vector<ParameterSpec> specs;
  // A tied head reads the token embedding too, so the last stage holds a copy (of the same
  // vocabulary shard).
  // ZeRO buckets of their own (kept whole at every stage): wte (the same bucket on the first and
  // last stage, so their pieces match for the tied sum), wpe, the final LayerNorm, an untied head.
  auto vocab_rows = [&](ParameterSpec s) { return tp.active() ? shard_spec(s, 0, tp.size, tp.rank) : s; };
  ParameterSpec wte{"wte", {cfg.padded_vocab(), C}, Init::normal, 0.02f, true};
  wte.bucket = -1;
  if (part.embedding || (part.head && cfg.tied_head)) specs.push_back(vocab_rows(wte));
  if (part.embedding && !cfg.rope) {  // rotary positions need no table
    specs.push_back({"wpe", {cfg.seq_len, C}, Init::normal, 0.01f, true});
    specs.back().bucket = -2;
  }
  for (const LayerRange& r : part.chunks)
    for (int l = r.first; l < r.second; ++l) {
      const size_t first = specs.size();
      TransformerBlock::append_specs(cfg, l, specs, tp, expert_rank);
      for (size_t i = first; i < specs.size(); ++i) {
        specs[i].bucket = l;  // one ZeRO bucket, streamable
        // Under expert parallelism the block's experts (its last parameters) are a bucket of their
        // own, sharded over the expert-data group.
        specs[i].expert = cfg.moe.expert_parallel > 1 && MoEMLP::is_expert_parameter(specs[i].name);
      }
    }
  if (part.head) {
    specs.push_back({"lnf.w", {C}, Init::ones, 0, false});
    specs.back().bucket = -3;
    if (!cfg.rmsnorm) {  // RMSNorm has no bias
      specs.push_back({"lnf.b", {C}, Init::zeros, 0, false});
      specs.back().bucket = -3;
    }
    if (!cfg.tied_head) {
      ParameterSpec head{"lm_head.w", {cfg.padded_vocab(), C}, Init::normal, 0.02f, true};
      head.bucket = -4;
      specs.push_back(vocab_rows(head));
    }
  }
  return specs;
}

ActivationBytes GPT::activation_bytes(const GPTConfig& cfg, const GPTPart& part, int64_t B, int64_t T,
                                      const TensorParallelContext& tp) {
  // rows: this rank's token rows (all of them unless sequence parallel); full: one (B*T, C) tensor.
  const int64_t N = B * T, rows = tp.sharded_tokens() ? token_shard_rows(N, tp.size) : N;
  const size_t e = dtype_size(cfg.dtype), btc = aligned(size_t(rows * cfg.d_model) * e);
  const size_t full = tp.sharded_tokens() ? aligned(size_t(N * cfg.d_model) * e) : 0;
  const size_t bt4 = aligned(size_t(N) * 4), rows4 = aligned(size_t(rows) * 4);
  ActivationBytes a;
  for (size_t c = 0; c < part.chunks.size(); ++c) {
    const size_t layers = size_t(part.chunks[c].second - part.chunks[c].first);
    // Chunk input, the blocks' outputs and kept tensors; tokens (embedding); final LayerNorm
    // output and statistics (head).
    size_t kept = btc * (layers + 1);
    for (int l = part.chunks[c].first; l < part.chunks[c].second; ++l)
      kept += TransformerBlock::kept_bytes(cfg, B, T, tp, cfg.moe.in_layer(l));
    if (part.has_embedding(int(c))) kept += bt4;
    if (cfg.document_eod >= 0) kept += bt4;  // the document starts
    if (cfg.document_positions && part.has_embedding(int(c))) kept += bt4;  // and the positions in them
    if (part.has_head(int(c))) kept += btc + 2 * rows4;
    a.kept = std::max(a.kept, kept);
  }
  // The head: logits of one row chunk (this rank's vocabulary columns), losses, the
  // cross-entropy's row statistics, and with sequence parallelism the gathered LayerNorm output.
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, N);
  const size_t head = aligned(size_t(chunk * (cfg.padded_vocab() / tp.size)) * e) + aligned(size_t(chunk) * 4) * 4 + full;
  // + the embedding's dropout copy and, with sequence parallelism, its full (B*T, C) sum.
  a.work = std::max(TransformerBlock::work_bytes(cfg, B, T, tp), part.head ? head : size_t(0)) + btc + full;
  return a;
}

ActivationBytes GPT::activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T) {
  return activation_bytes(cfg, GPTPart::whole(cfg), B, T);
}

GPT::GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch, const GPTPart& part, int slots,
         const TensorParallelContext& tp, const StoreSharding& sharding, Communicator* experts)
    : rt_(rt), cfg_(cfg), micro_batch_(micro_batch), part_(part), tp_(tp),
      params_(rt, parameter_specs(cfg, part, tp, experts ? experts->rank() : 0), cfg.dtype, sharding, cfg.grad_dtype) {
  TRELLIS_CHECK((experts ? experts->size() : 1) == cfg.moe.expert_parallel || cfg.moe.experts == 0,
                "GPT: the expert group's size is not moe.expert_parallel");
  TRELLIS_CHECK(!part.chunks.empty() && slots >= 1, "GPT: no chunk or no slot");
  for (const LayerRange& r : part.chunks) {
    TRELLIS_CHECK(r.first < r.second && r.second <= cfg.n_layers, "GPT: bad layer range");
    chunk_begin_.push_back(blocks_.size());
    for (int l = r.first; l < r.second; ++l) {
      blocks_.emplace_back(cfg_, l, BlockParams::of(params_, cfg_, l, experts ? experts->rank() : 0), tp_, experts);
      block_ranges_.push_back(range_of("h." + std::to_string(l) + "."));
      block_buckets_.push_back(params_.bucket_of_block(l));
      experts_buckets_.push_back(params_.experts_bucket_of_block(l));
    }
  }
  chunk_begin_.push_back(blocks_.size());
  for (const TransformerBlock& b : blocks_)
    for (const Parameter* p : b.first_written_grads()) params_.write_first(*p);
  if (part.head) lnf_range_ = range_of("lnf.");
  if (part.embedding || (part.head && cfg_.tied_head)) wte_range_ = range_of("wte");
  if (part.head) head_range_ = cfg_.tied_head ? wte_range_ : range_of("lm_head.");
  if (part.embedding && !cfg_.rope) wpe_range_ = range_of("wpe");
  if (part.embedding && tp_.active())
    vocab_embedding_.emplace(*tp_.group, params_.get("wte"), wpe(), cfg_.padded_vocab(),
                             tp_.sequence_parallel);
  const ActivationBytes a = activation_bytes(cfg, part, micro_batch, cfg.seq_len, tp_);
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) s.acts = Arena(rt.allocator(), a.kept, "activations (kept for backward)");
  work_ = Arena(rt.allocator(), a.work, "activation workspace");
}

size_t GPT::activation_peak() const {
  size_t sum = work_.peak();
  for (const Slot& s : slots_) sum += s.acts.peak();
  return sum;
}

int64_t GPT::rows_of(int64_t B, int64_t T) const {
  return tp_.sharded_tokens() ? token_shard_rows(B * T, tp_.size) : B * T;
}

int64_t GPT::vocab_begin() const { return vocab_shard_begin(tp_.rank, tp_.size, cfg_.padded_vocab()); }

// Keyed by global token row, as the blocks' masks: with sequence parallelism this rank's rows
// start at rank * rows.
DropoutKey GPT::embedding_dropout_key(const StepContext& ctx, int64_t rows) const {
  DropoutKey k;
  k.seed = ctx.seed;
  k.stream = uint64_t(ctx.step) << 24;  // layer slot 0: the embedding
  k.seq_local = ctx.seq_len;
  k.seq_global = ctx.seq_len;
  k.seq_offset = ctx.sample_offset * ctx.seq_len + (tp_.sharded_tokens() ? tp_.rank * rows : 0);
  return k;
}

Shape GPT::activation_shape(int64_t B, int64_t T) const {
  return tp_.sharded_tokens() ? Shape{rows_of(B, T), cfg_.d_model} : Shape{B, T, cfg_.d_model};
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
    s.input = s.acts.take(cfg_.dtype, activation_shape(B, T));
    s.out = s.lnf = s.lnf_mean = s.lnf_rstd = s.positions = Tensor();
    s.B = B;
    s.T = T;
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
  const int64_t B = s.B, T = s.T, C = cfg_.d_model, rows = rows_of(B, T);
  const DType dt = cfg_.dtype;
  s.ctx = ctx;
  s.ctx.seq_len = T;  // the blocks' token shards do not show it
  s.ctx.moe_aux_scale = cfg_.moe.aux_loss_coef * dloss * float(B * T) * ctx.target_share;
  s.ctx.moe_z_scale = cfg_.moe.z_loss_coef * dloss * float(B * T) * ctx.target_share;
  work_.reset();
  if (cfg_.document_eod >= 0) {  // every chunk's attention masks by document
    TRELLIS_CHECK(tokens.defined() && tokens.size(0) == B && tokens.size(1) == T,
                  "document masking: a chunk's forward needs its micro-batch's tokens");
    s.ctx.doc_starts = s.acts.take(DType::i32, {B, T});
    s.positions = cfg_.document_positions && part_.has_embedding(s.chunk) ? s.acts.take(DType::i32, {B, T}) : Tensor();
    document_starts(rt_, s.ctx.doc_starts, tokens, int32_t(cfg_.document_eod), s.positions);
  }
  Tensor x = s.input;
  if (part_.has_embedding(s.chunk)) {
    NvtxRange r("embedding_forward");
    TRELLIS_CHECK(tokens.size(0) == B && tokens.size(1) == T, "tokens do not match the slot's micro-batch");
    copy(rt_, s.tokens, tokens);
    embed(s.tokens, s.positions, x);
    if (ctx.training && cfg_.dropout > 0.0f)
      dropout_forward(rt_, x, x, cfg_.dropout, embedding_dropout_key(s.ctx, rows));
  }
  const size_t first = chunk_begin_[size_t(s.chunk)];
  PendingOutput pending;  // each block's output all-reduces, waited for by the next as it goes
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    Tensor y = s.acts.take(dt, activation_shape(B, T));
    before_block(first + i, first, first + s.blocks.size(), true);
    blocks_[first + i].forward(rt_, s.ctx, x, y, s.blocks[i], s.acts, work_, &pending);
    after_block(first + i, true);
    work_.reset();
    x = y;
  }
  pending.wait();
  s.out = x;
  if (!part_.has_head(s.chunk)) return s.out;
  s.lnf = s.acts.take(dt, {rows, C});
  s.lnf_mean = s.acts.take(DType::f32, {rows});
  s.lnf_rstd = s.acts.take(DType::f32, {rows});
  layernorm_forward(rt_, s.lnf, s.lnf_mean, s.lnf_rstd, x, params_.get("lnf.w").value,
                    value_or_empty(params_.find("lnf.b")), float(cfg_.norm_eps), cfg_.rmsnorm);  // no bias with RMSNorm
  // The head needs every token row: with sequence parallelism the shards are gathered, and this
  // rank's part of dL/d(lnf) is reduce-scattered back (the shards' sum); without, the parts are
  // summed over the tensor group (copy_to_tensor_region's backward).
  Tensor full = s.lnf;
  if (tp_.sharded_tokens()) {
    full = work_.take(dt, {B * T, C});
    gather_from_token_shards_forward(*tp_.group, full, s.lnf).wait();
  }
  head(full, targets, dloss, loss_sum, backward);
  if (backward && tp_.sharded_tokens()) gather_from_token_shards_backward(*tp_.group, s.lnf, full).wait();
  else if (backward && tp_.active()) copy_to_tensor_region_backward(*tp_.group, s.lnf).wait();
  work_.reset();
  return Tensor();
}

void GPT::embed(const Tensor& tokens, const Tensor& positions, const Tensor& x) {
  if (vocab_embedding_) vocab_embedding_->forward(rt_, x, tokens, work_, positions);
  else embedding_forward(rt_, x, tokens, params_.get("wte").value, wpe() ? wpe()->value : Tensor(), 0, 0, positions);
}

void GPT::cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, const Tensor& stats,
                        float dloss, bool backward) {
  const int64_t V = cfg_.vocab_size;
  if (tp_.active()) {
    vocab_parallel_cross_entropy(rt_, *tp_.group, losses, logits, targets, stats, V, vocab_begin(), dloss, backward);
  } else if (backward) {
    softmax_cross_entropy_backward(rt_, logits, losses, logits, targets, V, dloss);  // in place
  } else {
    softmax_cross_entropy_forward(rt_, losses, logits, targets, V);
  }
}

void GPT::head(const Tensor& lnf, const Tensor& targets, float dloss, const Tensor& loss_sum, bool backward) {
  NvtxRange r(backward ? "head_forward_backward" : "head_forward");
  const Parameter& w = head_weight();
  const int64_t N = lnf.size(0), C = cfg_.d_model, Vl = w.value.size(0);  // Vl: this rank's vocabulary columns
  const int64_t chunk = std::min<int64_t>(kHeadChunkRows, N);
  Tensor logits_buf = work_.take(cfg_.dtype, {chunk, Vl});
  Tensor losses_buf = work_.take(DType::f32, {chunk});
  Tensor stats_buf = work_.take(DType::f32, {3 * chunk});
  Tensor flat_targets = targets.view({N});
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    Tensor x = lnf.slice(r0 * C, {rows, C});
    Tensor logits = logits_buf.slice(0, {rows, Vl});
    Tensor losses = losses_buf.slice(0, {rows});
    Tensor tgt = flat_targets.slice(r0, {rows});
    MatmulOptions o;
    o.trans_b = true;
    matmul(rt_, logits, x, w.value, o);
    cross_entropy(losses, logits, tgt, stats_buf.slice(0, {3 * rows}), dloss, backward);
    if (backward) {
      MatmulOptions acc;
      acc.trans_a = true;
      acc.accumulate = true;
      matmul(rt_, w.grad, logits, x, acc);  // dW += dlogits^T x
      matmul(rt_, x, logits, w.value);      // dx = dlogits W, over x's rows (read above)
    }
    sum_accumulate(rt_, loss_sum, losses);
  }
}

void GPT::before_block(size_t i, size_t first, size_t end, bool forward) {
  if (!hooks_) return;
  auto call = [&](int bucket, int next) {
    forward ? hooks_->before_forward(bucket, next) : hooks_->before_backward(bucket, next);
  };
  const ptrdiff_t step = forward ? 1 : -1;
  auto in_chunk = [&](ptrdiff_t j) { return j >= ptrdiff_t(first) && j < ptrdiff_t(end); };
  const ptrdiff_t following = ptrdiff_t(i) + step;
  call(block_buckets_[i], in_chunk(following) ? block_buckets_[size_t(following)] : -1);
  if (experts_buckets_[i] < 0) return;
  int next = -1;
  for (ptrdiff_t j = following; next < 0 && in_chunk(j); j += step) next = experts_buckets_[size_t(j)];
  call(experts_buckets_[i], next);
}

void GPT::after_block(size_t i, bool forward) {
  if (!hooks_) return;
  for (int bucket : {block_buckets_[i], experts_buckets_[i]})
    if (bucket >= 0) forward ? hooks_->after_forward(bucket) : hooks_->after_backward(bucket);
}

std::pair<int64_t, int64_t> GPT::range_of(const std::string& prefix) const {
  int64_t begin = -1, end = -1;
  for (const Parameter& p : params_.all()) {
    if (p.spec.name.compare(0, prefix.size(), prefix) != 0) continue;
    if (begin < 0) begin = p.offset;
    TRELLIS_CHECK(end < 0 || end <= p.offset, "parameters of " + prefix + " are out of order");
    end = p.offset + p.spec.shape.numel();
  }
  return {begin, end};
}

void GPT::backward_chunk(int slot, const Tensor& dres_in, const GradsReady& grads_ready) {
  Slot& s = slots_.at(size_t(slot));
  TRELLIS_CHECK(s.chunk >= 0, "backward_chunk on a free slot");
  auto ready = [&](const std::pair<int64_t, int64_t>& r) {
    if (grads_ready && r.first >= 0) grads_ready(r.first, r.second);  // (-1, -1): no such parameters
  };
  const StepContext& ctx = s.ctx;
  const int64_t B = s.B, T = s.T, C = cfg_.d_model, rows = rows_of(B, T);
  TRELLIS_CHECK(dres_in.numel() == rows * C, "residual gradient does not match the slot's micro-batch");
  const Tensor dres = dres_in.view(activation_shape(B, T));
  // The token embedding's reduction starts now and the embedding rows are exchanged (set_embedding_exchange).
  const bool exchange = embedding_exchange_ && grads_ready && part_.has_head(s.chunk) && part_.has_embedding(s.chunk);
  if (exchange) ready(wte_range_);
  if (part_.has_head(s.chunk)) {
    fill(rt_, dres, 0.0f);
    layernorm_backward(rt_, dres, params_.get("lnf.w").grad, grad_or_empty(params_.find("lnf.b")), s.lnf, s.out,
                       params_.get("lnf.w").value, s.lnf_mean, s.lnf_rstd, true, nullptr, cfg_.rmsnorm);
    ready(lnf_range_);
    if (!cfg_.tied_head) ready(head_range_);  // final since this micro-batch's forward
  }
  const size_t first = chunk_begin_[size_t(s.chunk)];
  for (size_t i = s.blocks.size(); i-- > 0;) {
    work_.reset();
    before_block(first + i, first, first + s.blocks.size(), false);
    blocks_[first + i].backward(rt_, ctx, dres, s.blocks[i], work_);
    ready(block_ranges_[first + i]);
    after_block(first + i, false);
  }
  work_.reset();
  if (part_.has_embedding(s.chunk)) {
    NvtxRange r("embedding_backward");
    Tensor demb = dres;
    if (ctx.training && cfg_.dropout > 0.0f) {
      demb = work_.take(cfg_.dtype, dres.shape);
      dropout_backward(rt_, demb, dres, cfg_.dropout, embedding_dropout_key(ctx, rows));
    }
    if (vocab_embedding_) {
      vocab_embedding_->backward(rt_, demb, s.tokens, work_, s.positions);
      ready(wte_range_);
      ready(wpe_range_);
    } else if (exchange) {
      // The rows' gather goes first, then the last bucket's reduction (its wpe now final), which
      // runs while the gathered rows are added into wte's gradient.
      if (wpe()) embedding_backward(rt_, Tensor(), wpe()->grad, demb, s.tokens, 0, 0, s.positions);
      embedding_exchange_->gather(demb, s.tokens);
      ready(wpe_range_);
      embedding_exchange_->add_rows(params_.get("wte").grad, vocab_begin(), cfg_.padded_vocab());
    } else {
      embedding_backward(rt_, params_.get("wte").grad, wpe() ? wpe()->grad : Tensor(), demb, s.tokens, vocab_begin(),
                         cfg_.padded_vocab(), s.positions);
      ready(wte_range_);
      ready(wpe_range_);
    }
  } else if (part_.has_head(s.chunk) && cfg_.tied_head) {
    ready(wte_range_);  // the head's copy: final since this micro-batch's forward
  }
  release_slot(slot);
}

void GPT::forward_backward(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                           const Tensor& loss_sum, const GradsReady& grads_ready) {
  TRELLIS_CHECK(part_.chunks.size() == 1 && part_.embedding && part_.head, "forward_backward needs the whole model");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int slot = acquire_slot(0, B, T);
  forward_chunk(slot, ctx, tokens, targets, dloss, loss_sum, true);
  const Shape shape = activation_shape(B, T);
  const size_t bytes = size_t(shape.numel()) * dtype_size(cfg_.dtype);
  if (dres_buf_.bytes() < bytes) dres_buf_ = Buffer(rt_.allocator(), bytes, "residual gradient");
  backward_chunk(slot, dres_buf_.tensor(cfg_.dtype, shape), grads_ready);
}

void GPT::forward_loss(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum) {
  TRELLIS_CHECK(part_.chunks.size() == 1 && part_.embedding && part_.head, "forward_loss needs the whole model");
  const int slot = acquire_slot(0, tokens.size(0), tokens.size(1));
  forward_chunk(slot, ctx, tokens, targets, 0.0f, loss_sum, false);
  release_slot(slot);
}

GPT::Ranges GPT::expert_grads() const {
  Ranges runs;
  for (const Parameter& p : params_.all()) {
    if (!p.spec.expert) continue;
    if (tp_.rank != 0 && p.spec.split.replicated()) continue;  // tensor rank 0 counts the proj biases
    const int64_t end = p.offset + p.spec.shape.numel();
    if (!runs.empty() && runs.back().second == p.offset) runs.back().second = end;
    else runs.emplace_back(p.offset, end);
  }
  return runs;
}

GPT::Ranges GPT::grads_counted_once(bool experts) const {
  Ranges runs;  // maximal runs of consecutive counted parameters
  for (const Parameter& p : params_.all()) {
    const bool head_copy = p.spec.name == "wte" && !part_.embedding;
    if (head_copy || (tp_.rank != 0 && p.spec.split.replicated())) continue;
    if (!experts && p.spec.expert) continue;
    const int64_t end = p.offset + p.spec.shape.numel();
    if (!runs.empty() && runs.back().second == p.offset) runs.back().second = end;
    else runs.emplace_back(p.offset, end);
  }
  return runs;
}

GPT::Ranges GPT::tensor_partial_grads() const {
  Ranges out;
  for (const TransformerBlock& b : blocks_)
    for (const Parameter* p : b.tensor_partial_grads()) out.emplace_back(p->offset, p->offset + p->spec.shape.numel());
  if (part_.head && tp_.sharded_tokens()) out.push_back(lnf_range_);  // the final LayerNorm runs on token shards too
  return out;
}

GPT::Ranges GPT::tied_embedding() const {
  if (!cfg_.tied_head || (!part_.embedding && !part_.head)) return {};
  return {wte_range_};
}

const Parameter& GPT::head_weight() const { return params_.get(cfg_.tied_head ? "wte" : "lm_head.w"); }

}  // namespace trellis
