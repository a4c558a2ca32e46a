// GPT model tests on the CPU: parameter count, gradients against finite differences,
// activation checkpointing (bitwise-equal gradients), dropout determinism, layout-independent init.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops.h"
#include "data/synthetic_dataset.h"
#include "models/gpt.h"
#include "tests/unit/gpt_test_util.h"

using namespace trellis;
using namespace trellis::gpt_testing;

namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.vocab_size = 50;  // padded to 128: the padding must not matter
  c.seq_len = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 16;
  return c;
}

}  // namespace

TEST(GPT, Gpt2SmallParameterCount) {
  GPTConfig c;  // defaults are GPT-2 small
  EXPECT_EQ(c.parameter_count(), 124439808);
  EXPECT_EQ(c.padded_vocab(), 50304);
  int64_t stored = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) stored += s.shape.numel();
  // Padding adds (50304 - 50257) rows of 768 to the token embedding.
  EXPECT_EQ(stored, 124439808 + 47 * 768);
}

TEST(GPT, InitializationIsKeyedByNameAndIndex) {
  ParameterSpec s{"h.0.attn.qkv.w", {48, 16}, Init::normal, 0.02f, true};
  ParameterSpec other = s;
  other.name = "h.1.attn.qkv.w";
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < 768; ++i) {
    float v = initial_value(1, s, i);
    EXPECT_EQ(v, initial_value(1, s, i));  // a shard drawing index i gets the same value
    EXPECT_NE(v, initial_value(1, other, i));
    sum += v;
    sq += double(v) * v;
  }
  EXPECT_NEAR(sum / 768, 0.0, 0.003);
  EXPECT_NEAR(std::sqrt(sq / 768), 0.02, 0.003);
}

// Every parameter's gradient against central finite differences of the loss, on a few elements
// of each tensor. f32 throughout: eps = 3e-3 (1e-3 for embeddings) keeps the truncation and
// rounding errors near 1e-3.
void check_gradients_against_finite_differences(const GPTConfig& c) {
  Runtime rt(RuntimeOptions{});
  const int64_t B = 2;
  GPT model(rt, c, B);
  model.initialize(3);
  // Larger weights than GPT-2's init so every gradient is well above f32 noise.
  Tensor values = model.params().flat_values();
  for (int64_t i = 0; i < values.numel(); ++i) values.ptr<float>()[i] *= 5.0f;
  // But QK-norm's weights of 1 and 0.5 (the q and k heads' scales): at 5 each the normed heads' logits
  // (25 sqrt(hd) at most) turn the softmax too sharply for the finite differences' steps.
  for (const Parameter& p : model.params().all())
    if (p.spec.name.ends_with("_norm.w"))
      for (int64_t i = 0; i < p.spec.shape.numel(); ++i) p.value.ptr<float>()[i] = p.spec.name.ends_with("q_norm.w") ? 1.0f : 0.5f;
  Batch batch = make_batch(c, B);
  StepContext ctx;
  Result r = run(model, batch, B, ctx);
  int checked = 0;
  for (const Parameter& p : model.params().all()) {
    const int64_t n = p.spec.shape.numel();
    // The embeddings feed LayerNorm directly with a small norm, so a smaller step stays linear.
    const bool embedding = p.spec.name == "wte" || p.spec.name == "wpe";
    const float eps = embedding ? 1e-3f : 3e-3f;
    for (int64_t k = 0; k < 3; ++k) {
      int64_t i = (k * 7919 + 13) % n;
      if (p.spec.name == "wte") i = batch.tokens[size_t(k)] * c.d_model + k;  // a row that is used
      if (p.spec.name == "lm_head.w") i %= c.vocab_size * c.d_model;         // not a padding row
      float* w = p.value.ptr<float>() + i;
      const float saved = *w;
      *w = saved + eps;
      double up = loss_only(model, batch, B, ctx);
      *w = saved - eps;
      double down = loss_only(model, batch, B, ctx);
      *w = saved;
      double fd = (up - down) / (2 * eps);
      double an = r.grads[size_t(p.offset + i)];
      EXPECT_NEAR(an, fd, 2e-3 + 2e-2 * std::fabs(fd)) << p.spec.name << "[" << i << "]";
      ++checked;
    }
  }
  // Three elements of every tensor: 12 a block (2 fewer with RMSNorm, 4 fewer without linear biases, 2
  // more with QK-norm), wte, wpe (not with RoPE), lnf's two (one with RMSNorm) and an untied head's.
  const int norm_biases = c.rmsnorm ? 0 : 1, linear_biases = c.bias ? 4 : 0, qk_norms = c.qk_norm ? 2 : 0;
  EXPECT_EQ(checked, 3 * (int(c.n_layers) * (6 + linear_biases + qk_norms + 2 * norm_biases) + (c.rope ? 1 : 2) + 1 +
                          norm_biases + (c.tied_head ? 0 : 1)));
}

TEST(GPT, GradientsMatchFiniteDifferences) { check_gradients_against_finite_differences(tiny_config()); }

// Rotary positions instead of the learned table: q and k turned after the qkv GEMM, their gradients
// turned back before it.
TEST(GPT, RotaryPositionsGradientsMatchFiniteDifferences) {
  GPTConfig c = tiny_config();
  c.rope = true;
  c.rope_theta = 100.0;  // a head of 8 dims at 8 positions: angles that turn well past a right angle
  check_gradients_against_finite_differences(c);
}

// SwiGLU MLPs: fc [gate | up] twice as wide, silu(gate) * up into proj.
TEST(GPT, SwigluGradientsMatchFiniteDifferences) {
  GPTConfig c = tiny_config();
  c.swiglu = true;
  check_gradients_against_finite_differences(c);
}

// A SwiGLU model's fc is 8C wide: GPT-2 small's count plus 4C^2 + 4C per block.
TEST(GPT, SwigluParameterCount) {
  GPTConfig c;
  c.swiglu = true;
  EXPECT_EQ(c.parameter_count(), 124439808 + 12 * (4 * 768 * 768 + 4 * 768));
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) n += s.shape.numel();
  EXPECT_EQ(n, c.parameter_count() + (c.padded_vocab() - c.vocab_size) * c.d_model);
}

// model.ffn_hidden_size: an MLP width that is not 4C (nor a multiple of C), GELU and SwiGLU.
TEST(GPT, MlpWidthGradientsMatchFiniteDifferences) {
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "SwiGLU" : "GELU");
    GPTConfig c = tiny_config();
    c.swiglu = swiglu;
    c.ffn_hidden = 40;
    check_gradients_against_finite_differences(c);
  }
}

// RMSNorm (model.norm = rmsnorm): a weight only in ln1, ln2 and lnf; with the rest of Llama's block
// (SwiGLU of width 40, rotary positions) too.
TEST(GPT, RmsnormGradientsMatchFiniteDifferences) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "with SwiGLU and rotary positions" : "GPT-2 otherwise");
    GPTConfig c = tiny_config();
    c.rmsnorm = true;
    c.swiglu = c.rope = llama;
    c.ffn_hidden = llama ? 40 : 0;
    check_gradients_against_finite_differences(c);
  }
}

TEST(GPT, RmsnormParameterCount) {
  GPTConfig c;
  c.rmsnorm = true;
  EXPECT_EQ(c.parameter_count(), 124439808 - (2 * 12 + 1) * 768);  // no bias in 25 norms
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) {
    EXPECT_FALSE(s.name.ends_with("ln1.b") || s.name.ends_with("ln2.b") || s.name == "lnf.b") << s.name;
    n += s.shape.numel();
  }
  EXPECT_EQ(n, c.parameter_count() + (c.padded_vocab() - c.vocab_size) * c.d_model);
}

// Biases on qkv alone (model.qkv_bias, Qwen2's): the 12 qkv biases of GPT-2 small are the only ones
// of its linear layers, and the specs hold exactly the counted parameters.
TEST(GPT, QkvBiasParameterCount) {
  GPTConfig c;
  c.bias = false;
  c.qkv_bias = true;
  const int64_t no_linear_biases = 124439808 - 12 * (3 * 768 + 768 + 4 * 768 + 768);
  EXPECT_EQ(c.parameter_count(), no_linear_biases + 12 * 3 * 768);
  int64_t n = 0, qkv_biases = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) {
    EXPECT_FALSE(s.name.ends_with("proj.b") || s.name.ends_with("fc.b")) << s.name;
    qkv_biases += s.name.ends_with("attn.qkv.b");
    n += s.shape.numel();
  }
  EXPECT_EQ(qkv_biases, 12);
  EXPECT_EQ(n, c.parameter_count() + (c.padded_vocab() - c.vocab_size) * c.d_model);
}

// Grouped-query attention (model.n_kv_heads): multi-query (1 key-value head of 2), and 2 of 4 with
// Llama's block (RMSNorm, SwiGLU, rotary positions, an untied head).
TEST(GPT, GroupedQueryAttentionGradientsMatchFiniteDifferences) {
  GPTConfig c = tiny_config();
  c.n_kv_heads = 1;
  check_gradients_against_finite_differences(c);
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.rmsnorm = c.swiglu = c.rope = true;
  c.tied_head = false;
  check_gradients_against_finite_differences(c);
}

// Qwen3's attention: QK-norm (each q and k head RMS-normed by a weight of its own kind before the
// rotary turn), heads of a size apart from d_model / n_heads (model.head_dim: 4 heads of 6 at d_model
// 16, so q is 24 wide and attn.proj maps 24 back to 16), and the two with grouped-query attention.
TEST(GPT, QkNormAndHeadSizeGradientsMatchFiniteDifferences) {
  GPTConfig c = tiny_config();
  c.rope = true;
  c.rope_theta = 100.0;
  c.qk_norm = true;
  check_gradients_against_finite_differences(c);
  c.n_heads = 4;
  c.head_size = 6;
  check_gradients_against_finite_differences(c);
  c.n_kv_heads = 2;
  c.rmsnorm = c.swiglu = true;
  c.bias = false;
  c.tied_head = false;
  check_gradients_against_finite_differences(c);
}

// Qwen3 0.6B's shape: 28 blocks of d_model 1024, 16 heads of 128 (q 2048 wide), 8 key-value heads,
// QK-norm, SwiGLU of 3072, no biases, tied: the 0.6B of its name, 596,049,920 parameters.
TEST(GPT, QkNormAndHeadSizeParameterCount) {
  GPTConfig c;
  c.vocab_size = 151936;
  c.seq_len = 40960;
  c.n_layers = 28;
  c.n_heads = 16;
  c.n_kv_heads = 8;
  c.d_model = 1024;
  c.head_size = 128;
  c.qk_norm = c.rope = c.rmsnorm = c.swiglu = true;
  c.bias = false;
  c.ffn_hidden = 3072;
  EXPECT_EQ(c.attention_width(), 2048);
  EXPECT_EQ(c.qkv_width(), 2048 + 2 * 8 * 128);
  EXPECT_EQ(c.parameter_count(), 596049920);
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) n += s.shape.numel();
  EXPECT_EQ(n, c.parameter_count() + c.padding_parameter_count());
}

// With K key-value heads of hd dims qkv is (C + 2 K hd, C): GPT-2 small with 4 of its 12 heads has
// 2 x 8 x 64 fewer rows a block (and biases).
TEST(GPT, GroupedQueryAttentionParameterCount) {
  GPTConfig c;
  c.n_kv_heads = 4;
  EXPECT_EQ(c.qkv_width(), 768 + 2 * 4 * 64);
  EXPECT_EQ(c.parameter_count(), 124439808 - 12 * (2 * 8 * 64) * (768 + 1));
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) n += s.shape.numel();
  EXPECT_EQ(n, c.parameter_count() + c.padding_parameter_count());
  c.n_kv_heads = 12;  // as many as heads: multi-head attention
  EXPECT_EQ(c.parameter_count(), 124439808);
}

// No biases in the linear layers (model.bias = false): alone, and with the rest of Llama's
// architecture (RMSNorm of eps 1e-6, SwiGLU, rotary positions, an untied head, 2 key-value heads of 4).
TEST(GPT, BiasFreeGradientsMatchFiniteDifferences) {
  GPTConfig c = tiny_config();
  c.bias = false;
  check_gradients_against_finite_differences(c);
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.rmsnorm = c.swiglu = c.rope = true;
  c.tied_head = false;
  c.norm_eps = 1e-6;
  check_gradients_against_finite_differences(c);
}

// Without linear biases GPT-2 small loses 12 x (3C + C + 4C + C) parameters, and no spec is a bias
// but the norms'.
TEST(GPT, BiasFreeParameterCount) {
  GPTConfig c;
  c.bias = false;
  EXPECT_EQ(c.parameter_count(), 124439808 - 12 * 9 * 768);
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) {
    EXPECT_TRUE(!s.name.ends_with(".b") || s.name.ends_with("ln1.b") || s.name.ends_with("ln2.b") || s.name == "lnf.b")
        << s.name;
    n += s.shape.numel();
  }
  EXPECT_EQ(n, c.parameter_count() + c.padding_parameter_count());
}

// An untied head (model.tie_embeddings = false): lm_head.w of its own, alone and with Llama's block.
TEST(GPT, UntiedHeadGradientsMatchFiniteDifferences) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "with Llama's block" : "GPT-2 otherwise");
    GPTConfig c = tiny_config();
    c.tied_head = false;
    c.rmsnorm = c.swiglu = c.rope = llama;
    check_gradients_against_finite_differences(c);
  }
}

// Untied, the vocabulary's parameters count twice, wte's padding rows and lm_head.w's are stored,
// lm_head.w comes last, and the model FLOPs leave out the lookup table (its N counts the head).
TEST(GPT, UntiedHeadParameterCount) {
  GPTConfig c;
  c.tied_head = false;
  EXPECT_EQ(c.parameter_count(), 124439808 + 50257 * 768);
  EXPECT_EQ(c.padding_parameter_count(), 2 * 47 * 768);
  const std::vector<ParameterSpec> specs = GPT::parameter_specs(c);
  EXPECT_EQ(specs.back().name, "lm_head.w");
  EXPECT_EQ(specs.back().shape[0], c.padded_vocab());
  int64_t n = 0;
  for (const ParameterSpec& s : specs) n += s.shape.numel();
  EXPECT_EQ(n, c.parameter_count() + c.padding_parameter_count());
  GPTConfig tied;
  EXPECT_EQ(c.flops_per_token(), tied.flops_per_token());
}

// A sliding window counts attention over its W keys (12 L C W), one as long as the sequence over T.
TEST(GPT, SlidingWindowFlops) {
  GPTConfig c, w;
  w.sliding_window = 256;
  EXPECT_EQ(c.flops_per_token() - w.flops_per_token(), 12.0 * 12 * 768 * (1024 - 256));
  w.sliding_window = 1024;
  EXPECT_EQ(w.flops_per_token(), c.flops_per_token());
}

// A width F makes fc (F, C) (SwiGLU (2F, C)) and proj (C, F). GPT-2 small at F = 4C is unchanged; with
// SwiGLU at F = 8/3 x C = 2048 its MLP weights are GELU's 8C^2 again, the biases 1024 more a block.
TEST(GPT, MlpWidthParameterCount) {
  GPTConfig c;
  c.ffn_hidden = 3072;
  EXPECT_EQ(c.parameter_count(), 124439808);
  c.swiglu = true;
  c.ffn_hidden = 2048;
  EXPECT_EQ(c.parameter_count(), 124439808 + 12 * ((3 * 2048 - 2 * 3072) * 768 + (2 * 2048 - 3072)));
  int64_t n = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) n += s.shape.numel();
  EXPECT_EQ(n, c.parameter_count() + (c.padded_vocab() - c.vocab_size) * c.d_model);
}

// A RoPE model has no position table: its parameters are GPT-2's less wpe, and its loss depends on
// the order of the tokens only through the rotations.
TEST(GPT, RotaryPositionsHaveNoTable) {
  GPTConfig c;
  c.rope = true;
  EXPECT_EQ(c.parameter_count(), 124439808 - 1024 * 768);
  for (const ParameterSpec& s : GPT::parameter_specs(c)) EXPECT_NE(s.name, "wpe");
}

TEST(GPT, PaddedVocabularyGetsNoGradient) {
  for (bool tied : {true, false}) {
    Runtime rt(RuntimeOptions{});
    GPTConfig c = tiny_config();
    c.tied_head = tied;
    GPT model(rt, c, 2);
    model.initialize(3);
    Result r = run(model, make_batch(c, 2), 2, StepContext{});
    for (const char* name : {"wte", "lm_head.w"}) {
      const Parameter* p = model.params().find(name);
      if (!p) continue;
      for (int64_t i = c.vocab_size * c.d_model; i < c.padded_vocab() * c.d_model; ++i)
        ASSERT_EQ(r.grads[size_t(p->offset + i)], 0.0f) << name;
    }
  }
}

// The blocks' gradients are not zeroed between steps but overwritten by their first write
// (ParameterStore::write_first): with every gradient poisoned (NaN) after a step, the next step's
// gradients are bitwise those of a fresh model, the others zeroed as before; a backward that skipped
// a fresh gradient would be caught by check_grads_written.
TEST(GPT, FreshGradientsAreOverwrittenNotAccumulated) {
  Runtime rt(RuntimeOptions{});
  GPTConfig c = tiny_config();
  GPT model(rt, c, 2);
  model.initialize(3);
  const Batch batch = make_batch(c, 2);
  const Result first = run(model, batch, 2, StepContext{});
  model.params().check_grads_written();
  int first_written = 0;
  for (const Parameter& p : model.params().all()) first_written += p.first_write ? 1 : 0;
  EXPECT_EQ(first_written, 12 * c.n_layers);  // each block's linears and LayerNorms
  Tensor g = model.params().flat_grads();
  std::fill(g.ptr<float>(), g.ptr<float>() + g.numel(), std::nanf(""));
  const Result again = run(model, batch, 2, StepContext{});
  ASSERT_EQ(again.grads.size(), first.grads.size());
  EXPECT_EQ(0, std::memcmp(again.grads.data(), first.grads.data(), first.grads.size() * 4));
  model.params().zero_grads();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(model.params().check_grads_written(), "was not written in this step");
}

// Activation checkpointing must not change a single bit of the gradients on the CPU, with dropout on.
TEST(GPT, CheckpointingGivesBitwiseEqualGradients) {
  Runtime rt(RuntimeOptions{});
  const int64_t B = 2;
  // rotary: the recomputed forward turns q and k again; SwiGLU's g; QK-norm: what attention reads is
  // normed and turned again in every mode's backward (it is not kept).
  for (int variant : {0, 1, 2, 3, 4}) {
  const bool rope = variant == 1 || variant == 4, swiglu = variant == 2 || variant == 3, wide = variant == 3,
             qk_norm = variant == 4;
  SCOPED_TRACE(qk_norm ? "QK-norm, rotary positions"
               : rope ? "rotary positions"
               : wide ? "SwiGLU of width 40, RMSNorm"
               : swiglu ? "SwiGLU" : "learned positions, GELU");
  std::vector<Result> results;
  for (Checkpointing mode :
       {Checkpointing::none, Checkpointing::full, Checkpointing::selective, Checkpointing::elementwise}) {
    GPTConfig c = tiny_config();
    c.rope = rope;
    c.qk_norm = qk_norm;
    c.swiglu = swiglu;
    c.ffn_hidden = wide ? 40 : 0;
    c.rmsnorm = wide;  // the recomputed norms
    c.dropout = 0.1f;
    c.attention_dropout = 0.1f;  // recomputed attention must redraw the same mask
    c.checkpointing = mode;
    GPT model(rt, c, B);
    model.initialize(5);
    StepContext ctx;
    ctx.seed = 11;
    ctx.step = 3;
    results.push_back(run(model, make_batch(c, B), B, ctx));
  }
  for (size_t m = 1; m < results.size(); ++m) {
    EXPECT_EQ(results[m].loss, results[0].loss);
    ASSERT_EQ(results[m].grads.size(), results[0].grads.size());
    EXPECT_EQ(0, std::memcmp(results[m].grads.data(), results[0].grads.data(), results[0].grads.size() * 4)) << "mode " << m;
  }
  }
  // And checkpointing keeps less: full < selective < none, full < elementwise < none.
  GPTConfig c = tiny_config();
  c.checkpointing = Checkpointing::none;
  size_t none = GPT::activation_bytes(c, 8, 8).kept;
  c.checkpointing = Checkpointing::selective;
  size_t selective = GPT::activation_bytes(c, 8, 8).kept;
  c.checkpointing = Checkpointing::elementwise;
  size_t elementwise = GPT::activation_bytes(c, 8, 8).kept;
  c.checkpointing = Checkpointing::full;
  size_t full = GPT::activation_bytes(c, 8, 8).kept;
  EXPECT_LT(full, selective);
  EXPECT_LT(selective, none);
  EXPECT_LT(full, elementwise);
  EXPECT_LT(elementwise, none);
  // QK-norm keeps qkv's linear output and the norms' statistics, not also the normed qkv.
  c.checkpointing = Checkpointing::none;
  c.qk_norm = c.rope = true;
  const size_t stats = size_t(8 * 8 * (c.n_heads + c.kv_heads())) * 4;
  EXPECT_LE(GPT::activation_bytes(c, 8, 8).kept, none + c.n_layers * ((stats + 255) / 256 * 256));
}

TEST(GPT, DropoutDependsOnStepNotOnRepetition) {
  Runtime rt(RuntimeOptions{});
  GPTConfig c = tiny_config();
  c.dropout = 0.2f;
  c.attention_dropout = 0.2f;
  GPT model(rt, c, 2);
  model.initialize(5);
  Batch batch = make_batch(c, 2);
  StepContext ctx;
  ctx.seed = 1;
  ctx.step = 1;
  Result a = run(model, batch, 2, ctx);
  Result b = run(model, batch, 2, ctx);
  EXPECT_EQ(a.loss, b.loss);
  ctx.step = 2;
  Result d = run(model, batch, 2, ctx);
  EXPECT_NE(a.loss, d.loss);
}

// A micro-batch split differently gives the same summed loss and gradients (up to fp32 rounding):
// samples and dropout masks are keyed by global sample index.
TEST(GPT, MicroBatchSplitDoesNotChangeTheStep) {
  Runtime rt(RuntimeOptions{});
  GPTConfig c = tiny_config();
  c.dropout = 0.1f;
  c.attention_dropout = 0.1f;
  GPT big(rt, c, 4);
  big.initialize(9);
  SyntheticDataset data("synthetic", c.vocab_size, c.seq_len, 3);
  Batch all;
  data.batch(Split::train, 0, 4, all.tokens, all.targets);
  StepContext ctx;
  ctx.seed = 2;
  ctx.step = 1;
  Result whole = run(big, all, 4, ctx);

  GPT small(rt, c, 2);
  small.initialize(9);
  std::vector<double> acc(whole.grads.size(), 0.0);
  double loss = 0;
  for (int half = 0; half < 2; ++half) {
    Batch part;
    data.batch(Split::train, half * 2, 2, part.tokens, part.targets);
    StepContext cx = ctx;
    cx.sample_offset = half * 2;
    Result r = run(small, part, 2, cx);
    loss += r.loss / 2;
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += r.grads[i] / 2;
  }
  EXPECT_NEAR(loss, whole.loss, 1e-6);
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_NEAR(acc[i], whole.grads[i], 1e-6 + 1e-4 * std::fabs(whole.grads[i])) << i;
}

TEST(SyntheticData, IsLearnableAndKeyedByIndex) {
  SyntheticDataset d("synthetic", 64, 16, 1);
  std::vector<int32_t> a_in, a_tg, b_in, b_tg;
  d.batch(Split::train, 5, 3, a_in, a_tg);
  d.batch(Split::train, 6, 1, b_in, b_tg);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(a_in[16 + size_t(t)], b_in[size_t(t)]);  // sample 6 is sample 6
  for (int t = 0; t < 15; ++t) EXPECT_EQ(a_tg[size_t(t)], a_in[size_t(t) + 1]);   // targets are next tokens
  EXPECT_LT(d.entropy_floor(), 0.5 * std::log(64.0));
}
