// GPT split into pipeline parts, run by hand on one process (each part's chunk output copied into
// the next part's input, gradients passed back): the loss and every block's and norm's gradient
// are bitwise those of the whole model; the tied embedding's gradients of the first and last
// stage add up to the whole model's (untied, the head's lm_head.w is the last stage's alone and
// every gradient is bitwise the whole model's). Also: several micro-batches in flight in separate slots.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "core/ops.h"
#include "data/synthetic_dataset.h"
#include "models/gpt.h"

namespace trellis {
namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.vocab_size = 50;
  c.seq_len = 8;
  c.n_layers = 4;
  c.n_heads = 2;
  c.d_model = 16;
  c.dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  Tensor t(int64_t B, int64_t T) { return Tensor(tokens.data(), DType::i32, Device::CPU(), {B, T}); }
  Tensor y(int64_t B, int64_t T) { return Tensor(targets.data(), DType::i32, Device::CPU(), {B, T}); }
};

Batch batch(const GPTConfig& c, int64_t first, int64_t B) {
  SyntheticDataset data("synthetic", c.vocab_size, c.seq_len, 3);
  Batch b;
  data.batch(Split::train, first, B, b.tokens, b.targets);
  return b;
}

std::map<std::string, std::vector<float>> grads_by_name(GPT& m) {
  std::map<std::string, std::vector<float>> out;
  for (const Parameter& p : m.params().all()) out[p.spec.name].assign(p.grad.ptr<float>(), p.grad.ptr<float>() + p.grad.numel());
  return out;
}

// Runs one micro-batch through `parts` (pipeline ranks, in order, each with v chunks): forwards
// through virtual stages 0..p*v-1, then backwards. Returns the loss sum.
float run_pipeline(std::vector<std::unique_ptr<GPT>>& parts, int v, Batch& b, int64_t B, const StepContext& ctx) {
  const GPTConfig& c = parts[0]->config();
  const int p = int(parts.size());
  float loss = 0;
  Tensor loss_t(&loss, DType::f32, Device::CPU(), {1});
  std::vector<float> carry(size_t(B * c.seq_len * c.d_model));
  Tensor carry_t(carry.data(), DType::f32, Device::CPU(), {B, c.seq_len, c.d_model});
  std::vector<std::pair<int, int>> done;  // (rank, slot) per virtual stage
  Runtime rt(RuntimeOptions{});
  for (int s = 0; s < p * v; ++s) {
    GPT& m = *parts[size_t(s % p)];
    const int slot = m.acquire_slot(s / p);
    if (s > 0) copy(rt, m.slot_input(slot), carry_t);
    Tensor out = m.forward_chunk(slot, ctx, b.t(B, c.seq_len), b.y(B, c.seq_len), float(1.0 / double(B * c.seq_len)),
                                 loss_t, true);
    if (s + 1 < p * v) copy(rt, carry_t, out);
    done.emplace_back(s % p, slot);
  }
  for (int s = p * v; s-- > 0;) parts[size_t(done[size_t(s)].first)]->backward_chunk(done[size_t(s)].second, carry_t);
  return loss;
}

void check_split(int p, int v, bool tied = true) {
  Runtime rt(RuntimeOptions{});
  GPTConfig c = tiny();
  c.tied_head = tied;
  const int64_t B = 2;
  StepContext ctx;
  ctx.seed = 4;
  ctx.step = 2;
  ctx.sample_offset = 6;
  Batch b = batch(c, 6, B);

  GPT whole(rt, c, B);
  whole.initialize(9);
  whole.params().zero_grads();
  float whole_loss = 0;
  whole.forward_backward(ctx, b.t(B, c.seq_len), b.y(B, c.seq_len), float(1.0 / double(B * c.seq_len)),
                         Tensor(&whole_loss, DType::f32, Device::CPU(), {1}));
  auto want = grads_by_name(whole);

  std::vector<std::unique_ptr<GPT>> parts;
  for (int r = 0; r < p; ++r) {
    parts.push_back(std::make_unique<GPT>(rt, c, B, GPTPart::of_rank(c, p, v, r), v));
    parts.back()->initialize(9);
    parts.back()->params().zero_grads();
  }
  const float loss = run_pipeline(parts, v, b, B, ctx);
  EXPECT_EQ(loss, whole_loss);

  std::map<std::string, int> seen;
  std::vector<float> wte_sum(want["wte"].size(), 0.0f);
  for (auto& part : parts) {
    for (auto& [name, g] : grads_by_name(*part)) {
      ++seen[name];
      if (name == "wte") {
        for (size_t i = 0; i < g.size(); ++i) wte_sum[i] += g[i];
      } else {
        EXPECT_EQ(g, want[name]) << name << " (p=" << p << ", v=" << v << ")";
      }
    }
    // Initial values are those of the whole model.
    for (const Parameter& prm : part->params().all())
      for (int64_t i = 0; i < prm.value.numel(); i += 37)
        ASSERT_EQ(prm.value.ptr<float>()[i], whole.params().get(prm.spec.name).value.ptr<float>()[i]) << prm.spec.name;
  }
  for (const auto& [name, g] : want) EXPECT_EQ(seen[name], name == "wte" && p > 1 && tied ? 2 : 1) << name;
  EXPECT_EQ(want.count("lm_head.w"), tied ? 0u : 1u);
  for (size_t i = 0; i < wte_sum.size(); ++i) ASSERT_NEAR(wte_sum[i], want["wte"][i], 1e-7 + 1e-5 * std::fabs(want["wte"][i]));
}

TEST(GPTStages, TwoStagesMatchTheWholeModel) { check_split(2, 1); }
TEST(GPTStages, FourStagesMatchTheWholeModel) { check_split(4, 1); }
TEST(GPTStages, InterleavedChunksMatchTheWholeModel) { check_split(2, 2); }
TEST(GPTStages, UntiedHeadStagesMatchTheWholeModel) {
  check_split(2, 1, false);
  check_split(2, 2, false);
}

int64_t counted(const GPT& m) {
  int64_t n = 0;
  for (auto [begin, end] : m.grads_counted_once()) n += end - begin;
  return n;
}

TEST(GPTStages, NormCountsTheTiedEmbeddingOnce) {
  Runtime rt(RuntimeOptions{});
  const GPTConfig c = tiny();
  GPT first(rt, c, 2, GPTPart::of_rank(c, 2, 1, 0)), last(rt, c, 2, GPTPart::of_rank(c, 2, 1, 1));
  EXPECT_EQ(counted(first), first.params().numel());
  EXPECT_EQ(counted(last), last.params().numel() - c.padded_vocab() * c.d_model);
  EXPECT_EQ(first.tied_embedding().size(), 1u);
  EXPECT_EQ(last.tied_embedding().size(), 1u);
  GPT middle(rt, c, 2, GPTPart::of_rank(c, 4, 1, 1));
  EXPECT_TRUE(middle.tied_embedding().empty());
  EXPECT_EQ(counted(middle), middle.params().numel());
}

// Untied, the last stage holds lm_head.w and no copy of wte: nothing to sum between the stages,
// and each stage's norm counts all it holds.
TEST(GPTStages, UntiedHeadHasNoEmbeddingCopy) {
  Runtime rt(RuntimeOptions{});
  GPTConfig c = tiny();
  c.tied_head = false;
  GPT first(rt, c, 2, GPTPart::of_rank(c, 2, 1, 0)), last(rt, c, 2, GPTPart::of_rank(c, 2, 1, 1));
  EXPECT_TRUE(first.params().find("wte") && !first.params().find("lm_head.w"));
  EXPECT_TRUE(!last.params().find("wte") && last.params().find("lm_head.w"));
  EXPECT_EQ(counted(first), first.params().numel());
  EXPECT_EQ(counted(last), last.params().numel());
  EXPECT_TRUE(first.tied_embedding().empty());
  EXPECT_TRUE(last.tied_embedding().empty());
}

// Two micro-batches in flight (GPipe order: both forwards, then both backwards) give the
// gradients of running them one after the other.
TEST(GPTStages, SlotsKeepMicroBatchesApart) {
  Runtime rt(RuntimeOptions{});
  const GPTConfig c = tiny();
  const int64_t B = 2;
  Batch b0 = batch(c, 0, B), b1 = batch(c, 2, B);
  StepContext ctx0, ctx1;
  ctx0.seed = ctx1.seed = 1;
  ctx0.step = ctx1.step = 1;
  ctx1.sample_offset = 2;
  const float dloss = 0.01f;

  GPT seq(rt, c, B);
  seq.initialize(3);
  seq.params().zero_grads();
  float l_seq = 0;
  Tensor ls(&l_seq, DType::f32, Device::CPU(), {1});
  seq.forward_backward(ctx0, b0.t(B, c.seq_len), b0.y(B, c.seq_len), dloss, ls);
  seq.forward_backward(ctx1, b1.t(B, c.seq_len), b1.y(B, c.seq_len), dloss, ls);

  GPT two(rt, c, B, GPTPart::whole(c), 2);
  two.initialize(3);
  two.params().zero_grads();
  float l_two = 0;
  Tensor lt(&l_two, DType::f32, Device::CPU(), {1});
  const int s0 = two.acquire_slot(0), s1 = two.acquire_slot(0);
  two.forward_chunk(s0, ctx0, b0.t(B, c.seq_len), b0.y(B, c.seq_len), dloss, lt, true);
  two.forward_chunk(s1, ctx1, b1.t(B, c.seq_len), b1.y(B, c.seq_len), dloss, lt, true);
  std::vector<float> dres(size_t(B * c.seq_len * c.d_model));
  Tensor d(dres.data(), DType::f32, Device::CPU(), {B, c.seq_len, c.d_model});
  two.backward_chunk(s0, d);
  two.backward_chunk(s1, d);
  EXPECT_EQ(l_two, l_seq);
  auto a = grads_by_name(seq), g = grads_by_name(two);
  for (auto& [name, v] : a)
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(g[name][i], v[i], 1e-7 + 1e-5 * std::fabs(v[i])) << name << "[" << i << "]";
}

}  // namespace
}  // namespace trellis
