// Mixture of experts on the CPU: the routing ops against hand-worked cases and references, their
// backwards against finite differences, and a GPT with expert blocks: gradients against finite
// differences, activation checkpointing bitwise, the balancing loss's gradient, parameter counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/ops.h"
#include "data/synthetic_dataset.h"
#include "models/gpt.h"
#include "tests/unit/gpt_test_util.h"

using namespace trellis;
using namespace trellis::gpt_testing;

namespace {

Runtime& rt() {
  static Runtime r{RuntimeOptions{}};
  return r;
}

template <typename T> Tensor host(std::vector<T>& v, DType t, Shape s) {
  EXPECT_EQ(int64_t(v.size()), s.numel());
  return Tensor(v.data(), t, Device::CPU(), s);
}

// Routing outputs for N tokens, E experts, K choices, `cap` slots per expert (0: dropless, packed).
struct Routing {
  int64_t N, E, K, cap, S;
  bool renormalize = true;  // the gates divided by the chosen probabilities' sum
  std::vector<float> probs, lse, gate, counts;
  std::vector<int32_t> expert, slot, slot_token;
  Routing(int64_t n, int64_t e, int64_t k, int64_t c)
      : N(n), E(e), K(k), cap(c), S(c > 0 ? e * c : n * k), probs(size_t(n * e)), lse(size_t(n)), gate(size_t(n * k)),
        counts(size_t(e)), expert(size_t(n * k)), slot(size_t(n * k)), slot_token(size_t(S)) {}
  void route(std::vector<float>& logits) {
    moe_route(rt(), host(probs, DType::f32, {N, E}), host(lse, DType::f32, {N}), host(expert, DType::i32, {N, K}),
              host(gate, DType::f32, {N, K}), host(slot, DType::i32, {N, K}), host(slot_token, DType::i32, {S}),
              host(counts, DType::f32, {E}), host(logits, DType::f32, {N, E}), renormalize, cap == 0);
  }
};

std::vector<float> random_vector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

}  // namespace

// Four tokens, three experts, two choices each, two slots per expert: first choices take slots
// first, in token order; a choice that finds its expert full is dropped.
TEST(MoE, RoutingFollowsPriorityAndCapacity) {
  std::vector<float> logits = {
      3, 2, 0,  // token 0: experts 0, 1
      3, 0, 2,  // token 1: 0, 2
      3, 1, 2,  // token 2: 0 (full: dropped), 2
      1, 1, 0,  // token 3: 0 and 1 tie: 0 first (dropped), then 1
  };
  Routing r(4, 3, 2, 2);
  r.route(logits);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 0, 2, 0, 2, 0, 1}));
  // First choices: token 0 -> slot 0 of expert 0, token 1 -> slot 1, token 2 and 3 dropped.
  // Second choices: token 0 -> expert 1 slot 0 (2), token 1 -> expert 2 slot 0 (4), token 2 -> expert
  // 2 slot 1 (5), token 3 -> expert 1 slot 1 (3).
  EXPECT_EQ(r.slot, (std::vector<int32_t>{0, 2, 1, 4, -1, 5, -1, 3}));
  EXPECT_EQ(r.slot_token, (std::vector<int32_t>{0, 2, 1, 7, 3, 5}));
  EXPECT_EQ(r.counts, (std::vector<float>{4, 2, 2}));
  for (int64_t n = 0; n < 4; ++n) {
    double sum = 0, exps = 0;
    for (int64_t e = 0; e < 3; ++e) {
      sum += r.probs[size_t(n * 3 + e)];
      exps += std::exp(double(logits[size_t(n * 3 + e)]));
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    EXPECT_NEAR(r.lse[size_t(n)], std::log(exps), 1e-6);
    // top_k = 2: the chosen probabilities renormalized.
    const double p0 = r.probs[size_t(n * 3 + r.expert[size_t(n * 2)])], p1 = r.probs[size_t(n * 3 + r.expert[size_t(n * 2 + 1)])];
    EXPECT_NEAR(r.gate[size_t(n * 2)], p0 / (p0 + p1), 1e-6);
    EXPECT_NEAR(r.gate[size_t(n * 2 + 1)], p1 / (p0 + p1), 1e-6);
  }
  // top_k = 1: the gate is the probability itself; empty slots are -1.
  Routing one(4, 3, 1, 3);
  one.route(logits);
  EXPECT_EQ(one.slot, (std::vector<int32_t>{0, 1, 2, -1}));
  EXPECT_EQ(one.slot_token, (std::vector<int32_t>{0, 1, 2, -1, -1, -1, -1, -1, -1}));
  EXPECT_FLOAT_EQ(one.gate[0], one.probs[0]);
}

// Dropless, the same logits: no choice is dropped, and expert e's rows follow the experts before it
// (4 of expert 0, then 2 and 2), in the same priority order.
TEST(MoE, DroplessRoutingPacksEveryChoice) {
  std::vector<float> logits = {3, 2, 0, 3, 0, 2, 3, 1, 2, 1, 1, 0};
  Routing r(4, 3, 2, 0);
  r.route(logits);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 0, 2, 0, 2, 0, 1}));
  // First choices: tokens 0-3 -> expert 0's rows 0-3. Second choices: token 0 -> expert 1's first
  // row (4), token 1 -> expert 2's (6), token 2 -> expert 2's second (7), token 3 -> expert 1's (5).
  EXPECT_EQ(r.slot, (std::vector<int32_t>{0, 4, 1, 6, 2, 7, 3, 5}));
  EXPECT_EQ(r.slot_token, (std::vector<int32_t>{0, 2, 4, 6, 1, 7, 3, 5}));
  EXPECT_EQ(r.counts, (std::vector<float>{4, 2, 2}));
  // An expert no token chose has no rows: top 1 of 4, the first three tokens on expert 0.
  std::vector<float> four = {3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 3};
  Routing one(4, 4, 1, 0);
  one.route(four);
  EXPECT_EQ(one.slot, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(one.slot_token, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(one.counts, (std::vector<float>{3, 0, 0, 1}));
}

// The rows a rank's experts are planned for: the slots with a capacity or on one rank; dropless with
// expert parallelism the most they can receive, each of the group's tokens choosing min(top_k, local
// experts) of them.
TEST(MoE, ExpertRowsBoundTheDroplessExchange) {
  MoEConfig m;
  m.experts = 8;
  m.top_k = 2;
  m.capacity_factor = 1.0;
  m.expert_parallel = 2;
  EXPECT_EQ(m.expert_rows(100), 8 * 25);  // capacity 25 each, on every rank
  m.dropless = true;
  EXPECT_EQ(m.expert_rows(100), 2 * 100 * 2);  // 4 local experts: both choices of 200 tokens
  m.expert_parallel = 8;
  EXPECT_EQ(m.expert_rows(100), 8 * 100 * 1);  // one local expert: each token once at most
  m.expert_parallel = 1;
  EXPECT_EQ(m.expert_rows(100), m.slots(100));
  EXPECT_EQ(m.slots(100), 200);
}

// Dispatch and combine against the definitions, with a dropped choice and empty slots.
TEST(MoE, DispatchAndCombineMatchReference) {
  const int64_t N = 5, E = 3, K = 2, cap = 3, C = 4, S = E * cap;
  std::vector<float> logits = random_vector(size_t(N * E), 1, 2.0f);
  Routing r(N, E, K, cap);
  r.route(logits);
  std::vector<float> x = random_vector(size_t(N * C), 2), xe(size_t(S * C), 7.0f);
  moe_dispatch(rt(), host(xe, DType::f32, {S, C}), host(x, DType::f32, {N, C}), host(r.slot_token, DType::i32, {S}), K);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(xe[size_t(s * C + c)], r.slot_token[size_t(s)] < 0 ? 0.0f : x[size_t(r.slot_token[size_t(s)] / K * C + c)]);
  std::vector<float> ye = random_vector(size_t(S * C), 3), res = random_vector(size_t(N * C), 4), out(size_t(N * C));
  moe_combine(rt(), host(out, DType::f32, {N, C}), host(ye, DType::f32, {S, C}), host(r.slot, DType::i32, {N, K}),
              host(r.gate, DType::f32, {N, K}), host(res, DType::f32, {N, C}));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double want = res[size_t(n * C + c)];
      for (int64_t k = 0; k < K; ++k)
        if (r.slot[size_t(n * K + k)] >= 0) want += double(r.gate[size_t(n * K + k)]) * ye[size_t(r.slot[size_t(n * K + k)] * C + c)];
      EXPECT_NEAR(out[size_t(n * C + c)], want, 1e-5);
    }
  // The dispatch's backward is the sum of a token's slots' gradients.
  std::vector<float> dx(size_t(N * C), 1.0f);
  moe_dispatch_backward(rt(), host(dx, DType::f32, {N, C}), host(ye, DType::f32, {S, C}), host(r.slot, DType::i32, {N, K}), true);
  for (int64_t n = 0; n < N; ++n) {
    double want = 1.0;
    for (int64_t k = 0; k < K; ++k)
      if (r.slot[size_t(n * K + k)] >= 0) want += ye[size_t(r.slot[size_t(n * K + k)] * C)];
    EXPECT_NEAR(dx[size_t(n * C)], want, 1e-5);
  }
}

// J = sum dout . combine(ye, gates(logits)) + a * balancing loss + z * z-loss: the analytic gradients
// of ye (combine backward) and of the logits (combine and router backward) against central
// differences; with the gates renormalized over the chosen experts and without.
class MoEGates : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Renormalize, MoEGates, ::testing::Bool());

TEST_P(MoEGates, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, E = 4, K = 2, cap = 4, C = 3, S = E * cap;
  const bool renormalize = GetParam();
  const float aux_scale = 0.7f, z_scale = 0.3f;
  std::vector<float> logits = random_vector(size_t(N * E), 5, 3.0f), ye = random_vector(size_t(S * C), 6);
  std::vector<float> dout = random_vector(size_t(N * C), 7);
  // The two router losses by their definitions (the z-loss from the logits, not from route's lse).
  auto balancing_loss = [&](const Routing& r) {
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) {
      double mean_p = 0;
      for (int64_t n = 0; n < N; ++n) mean_p += r.probs[size_t(n * E + e)] / double(N);
      aux += double(E) * (r.counts[size_t(e)] / double(N * K)) * mean_p;
    }
    return aux;
  };
  auto z_loss = [&](const std::vector<float>& lg) {
    double z = 0;
    for (int64_t n = 0; n < N; ++n) {
      double exps = 0;
      for (int64_t e = 0; e < E; ++e) exps += std::exp(double(lg[size_t(n * E + e)]));
      z += std::log(exps) * std::log(exps) / double(N);
    }
    return z;
  };
  auto objective = [&](std::vector<float>& lg, std::vector<float>& y) {
    Routing r(N, E, K, cap);
    r.renormalize = renormalize;
    r.route(lg);
    std::vector<float> out(size_t(N * C));
    moe_combine(rt(), host(out, DType::f32, {N, C}), host(y, DType::f32, {S, C}), host(r.slot, DType::i32, {N, K}),
                host(r.gate, DType::f32, {N, K}));
    double j = 0;
    for (size_t i = 0; i < out.size(); ++i) j += double(dout[i]) * out[i];
    return j + aux_scale * balancing_loss(r) + z_scale * z_loss(lg);
  };
  Routing r(N, E, K, cap);
  r.renormalize = renormalize;
  r.route(logits);
  ASSERT_NE(std::count(r.slot.begin(), r.slot.end(), -1), 0) << "the case should drop a choice";
  // Renormalized, a token's kept gates sum to 1; else they are its chosen probabilities.
  EXPECT_NEAR(r.gate[0] + r.gate[1], renormalize ? 1.0 : r.probs[size_t(r.expert[0])] + r.probs[size_t(r.expert[1])], 1e-6);
  // The log's statistics (added to what stats held): the balancing loss and the z-loss as the
  // objective computes them, and the dropped choices.
  std::vector<float> stats = {1.0f, 1.0f, 1.0f};
  moe_statistics(rt(), host(stats, DType::f32, {3}), host(r.probs, DType::f32, {N, E}), host(r.lse, DType::f32, {N}),
                 host(r.counts, DType::f32, {E}), K, cap);
  EXPECT_NEAR(stats[0] - 1.0f, balancing_loss(r), 1e-5);
  EXPECT_NEAR(stats[2] - 1.0f, z_loss(logits), 1e-4);
  EXPECT_GT(z_loss(logits), 1.0) << "the case's logits should give a z-loss well above 0";
  EXPECT_EQ(stats[1] - 1.0f, float(std::count(r.slot.begin(), r.slot.end(), -1)));
  std::vector<float> dye(size_t(S * C)), dgate(size_t(N * K)), dlogits(size_t(N * E));
  moe_combine_backward(rt(), host(dye, DType::f32, {S, C}), host(dgate, DType::f32, {N, K}), host(dout, DType::f32, {N, C}),
                       host(ye, DType::f32, {S, C}), host(r.slot, DType::i32, {N, K}), host(r.slot_token, DType::i32, {S}),
                       host(r.gate, DType::f32, {N, K}));
  moe_router_backward(rt(), host(dlogits, DType::f32, {N, E}), host(dgate, DType::f32, {N, K}), host(r.probs, DType::f32, {N, E}),
                      host(r.lse, DType::f32, {N}), host(r.expert, DType::i32, {N, K}), host(r.gate, DType::f32, {N, K}),
                      host(r.counts, DType::f32, {E}), aux_scale, z_scale, renormalize);
  const float eps = 1e-3f;
  auto central = [&](float& v, std::vector<float>& lg, std::vector<float>& y) {
    const float saved = v;
    v = saved + eps;
    const double up = objective(lg, y);
    v = saved - eps;
    const double down = objective(lg, y);
    v = saved;
    return (up - down) / (2 * eps);
  };
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(dlogits[i], central(logits[i], logits, ye), 2e-3) << "logit " << i;
  for (size_t i = 0; i < ye.size(); ++i) EXPECT_NEAR(dye[i], central(ye[i], logits, ye), 2e-3) << "slot value " << i;
}

namespace {

GPTConfig moe_config() {
  GPTConfig c;
  c.vocab_size = 50;
  c.seq_len = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 16;
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.layer_freq = 1;
  return c;
}

// Mixtral's experts: SwiGLU without biases (the model's MLP kind), of width 24 (not 4C).
GPTConfig mixtral(GPTConfig c) {
  c.swiglu = true;
  c.bias = false;
  c.moe.ffn_hidden = 24;
  c.set_expert_mlp();
  return c;
}

}  // namespace

// Every parameter of a GPT whose blocks both have four experts (top 2, capacity for every token, no
// balancing loss: the loss is the reported one) against central differences; without and with a
// shared MLP two experts wide; GPT-2's experts and Mixtral's; the shared MLP gated (Qwen2-MoE's, the
// GELU one without biases).
class MoEShared : public ::testing::TestWithParam<std::tuple<int64_t, bool, bool>> {};
INSTANTIATE_TEST_SUITE_P(SharedExperts, MoEShared,
                         ::testing::Values(std::make_tuple(0, false, false), std::make_tuple(0, true, false),
                                           std::make_tuple(2, false, false), std::make_tuple(2, true, false),
                                           std::make_tuple(2, false, true), std::make_tuple(2, true, true)));

TEST_P(MoEShared, GptGradientsMatchFiniteDifferences) {
  GPTConfig c = moe_config();
  c.moe.capacity_factor = 2.0;  // every token fits: a step of eps cannot move a choice across the capacity
  c.moe.aux_loss_coef = 0.0f;
  c.moe.shared_experts = std::get<0>(GetParam());
  if (std::get<1>(GetParam())) c = mixtral(c);
  c.moe.shared_gate = std::get<2>(GetParam());
  if (c.moe.shared_gate) {
    c.bias = false;
    c.set_expert_mlp();
  }
  const int64_t B = 2;
  GPT model(rt(), c, B);
  // Seed 3 puts one of Mixtral's token choices within a step of eps of a tie (a central difference of
  // -24 against the gradient's -7.04, which eps / 4 to eps / 64 reproduce): 4 has none.
  model.initialize(std::get<1>(GetParam()) ? 4 : 3);
  Tensor values = model.params().flat_values();
  for (int64_t i = 0; i < values.numel(); ++i) values.ptr<float>()[i] *= 5.0f;
  const Batch batch = make_batch(c, B);
  StepContext ctx;
  const Result r = run(model, batch, B, ctx);
  int checked = 0, experts = 0, shared = 0, gate = 0;
  for (const Parameter& p : model.params().all()) {
    const int64_t n = p.spec.shape.numel();
    const bool embedding = p.spec.name == "wte" || p.spec.name == "wpe";
    const float eps = embedding ? 1e-3f : 3e-3f;
    for (int64_t k = 0; k < 3; ++k) {
      int64_t i = (k * 7919 + 13) % n;
      if (p.spec.name == "wte") i = batch.tokens[size_t(k)] * c.d_model + k;
      float* w = p.value.ptr<float>() + i;
      const float saved = *w;
      *w = saved + eps;
      const double up = loss_only(model, batch, B, ctx);
      *w = saved - eps;
      const double down = loss_only(model, batch, B, ctx);
      *w = saved;
      const double fd = (up - down) / (2 * eps), an = r.grads[size_t(p.offset + i)];
      EXPECT_NEAR(an, fd, 3e-3 + 2e-2 * std::fabs(fd)) << p.spec.name << "[" << i << "]";
      ++checked;
      if (p.spec.name.find(".moe.") != std::string::npos && std::fabs(an) > 1e-3) ++experts;
      if (p.spec.name.find(".moe.shared.") != std::string::npos && std::fabs(an) > 1e-3) ++shared;
      if (p.spec.name.find(".moe.shared_gate.") != std::string::npos && std::fabs(an) > 1e-3) ++gate;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(experts, 20) << "the experts' and routers' gradients should mostly be non-zero";
  EXPECT_EQ(shared > 0, c.moe.shared_experts > 0) << shared << " shared MLP gradients checked non-zero";
  EXPECT_EQ(gate > 0, c.moe.shared_gate) << gate << " shared gate gradients checked non-zero";
}

// Dropless routing computes what a capacity for every token (moe.experts / moe.top_k) does, its rows
// packed instead of in slots: the same loss and gradients to f32 rounding (the GEMMs run on other row
// blocks), with GPT-2's experts and with Mixtral's under Qwen2-MoE's gated shared MLP, the balancing
// loss and the z-loss on.
TEST(MoE, DroplessMatchesCapacityForEveryToken) {
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "Mixtral's experts, gated shared MLP" : "GPT-2's experts");
    std::vector<Result> results;
    for (bool dropless : {false, true}) {
      GPTConfig c = moe_config();
      c.moe.z_loss_coef = 0.1f;
      if (swiglu) {
        c = mixtral(c);
        c.moe.shared_experts = 1;
        c.moe.shared_gate = true;
      }
      c.moe.capacity_factor = 2.0;  // experts / top_k: every token fits
      c.moe.dropless = dropless;
      GPT model(rt(), c, 2);
      model.initialize(5);
      results.push_back(run(model, make_batch(c, 2), 2, StepContext{}));
    }
    EXPECT_NEAR(results[1].loss, results[0].loss, 1e-6 * std::fabs(results[0].loss));
    ASSERT_EQ(results[1].grads.size(), results[0].grads.size());
    float largest = 0, worst = 0;
    for (size_t i = 0; i < results[0].grads.size(); ++i) {
      largest = std::max(largest, std::fabs(results[0].grads[i]));
      worst = std::max(worst, std::fabs(results[1].grads[i] - results[0].grads[i]));
    }
    EXPECT_GT(largest, 0.0f);
    EXPECT_LE(worst, 1e-5f * largest);
  }
}

// Top 1 of 8 experts over 8 tokens leaves some expert without rows: its gradients are written all the
// same (zeros, fresh gradients are not zeroed before a step), so a step after the gradients were
// poisoned gives bitwise the first step's.
TEST(MoE, DroplessExpertWithoutRowsGetsZeroGradients) {
  GPTConfig c = moe_config();
  c.moe.experts = 8;
  c.moe.top_k = 1;
  c.moe.dropless = true;
  GPT model(rt(), c, 1);
  model.initialize(7);
  const Batch batch = make_batch(c, 1);
  const Result first = run(model, batch, 1, StepContext{});
  model.params().check_grads_written();
  int idle = 0;
  for (const Parameter& p : model.params().all()) {
    if (p.spec.name.find(".moe.experts.") == std::string::npos || p.spec.name.find("fc.w") == std::string::npos) continue;
    const float* g = first.grads.data() + p.offset;
    idle += std::all_of(g, g + p.spec.shape.numel(), [](float v) { return v == 0.0f; }) ? 1 : 0;
  }
  EXPECT_GT(idle, 0) << "no expert went without rows: the case is not tested";
  Tensor g = model.params().flat_grads();
  std::fill(g.ptr<float>(), g.ptr<float>() + g.numel(), std::nanf(""));
  const Result again = run(model, batch, 1, StepContext{});
  ASSERT_EQ(again.grads.size(), first.grads.size());
  EXPECT_EQ(0, std::memcmp(again.grads.data(), first.grads.data(), first.grads.size() * 4));
}

// Recomputing a block with experts (full) or its attention (selective) or its layer norms
// (elementwise) gives bitwise the same gradients; so does a second block without experts.
TEST(MoE, CheckpointingGivesBitwiseEqualGradients) {
  for (bool swiglu : {false, true}) {
  SCOPED_TRACE(swiglu ? "Mixtral's experts" : "GPT-2's experts");
  std::vector<Result> results;
  for (Checkpointing mode :
       {Checkpointing::none, Checkpointing::full, Checkpointing::selective, Checkpointing::elementwise}) {
    GPTConfig c = moe_config();
    c.n_layers = 3;
    c.moe.layer_freq = 2;  // blocks 0 and 2
    c.moe.z_loss_coef = 0.1f;  // its gradient reads the recomputed lse
    c.moe.shared_experts = 1;  // and the shared MLP's recomputed hidden rows
    c.dropout = 0.1f;
    c.checkpointing = mode;
    if (swiglu) c = mixtral(c);
    c.moe.shared_gate = swiglu;  // Qwen2-MoE's gate on it: its recomputed logits
    GPT model(rt(), c, 2);
    model.initialize(5);
    StepContext ctx;
    ctx.seed = 11;
    ctx.step = 3;
    results.push_back(run(model, make_batch(c, 2), 2, ctx));
  }
  for (size_t m = 1; m < results.size(); ++m) {
    EXPECT_EQ(results[m].loss, results[0].loss);
    ASSERT_EQ(results[m].grads.size(), results[0].grads.size());
    EXPECT_EQ(0, std::memcmp(results[m].grads.data(), results[0].grads.data(), results[0].grads.size() * 4)) << "mode " << m;
  }
  }
}

// The balancing loss and the router z-loss are not part of the reported loss; the gradient of each is
// linear in its coefficient, moves the routers' (and, through a router's input, everything below it),
// and leaves what lies above the last router alone: the last block's experts and the final layer norm.
TEST(MoE, BalancingAndZLossGradients) {
  for (float MoEConfig::*coef_of : {&MoEConfig::aux_loss_coef, &MoEConfig::z_loss_coef}) {
    const char* which = coef_of == &MoEConfig::aux_loss_coef ? "balancing loss" : "z-loss";
    std::vector<Result> results;
    std::vector<std::string> names;
    for (float coef : {0.0f, 0.5f, 1.0f}) {
      GPTConfig c = moe_config();
      c.moe.*coef_of = coef;
      GPT model(rt(), c, 2);
      model.initialize(5);
      results.push_back(run(model, make_batch(c, 2), 2, StepContext{}));
      if (names.empty())
        for (const Parameter& p : model.params().all())
          for (int64_t i = 0; i < p.spec.shape.numel(); ++i) names.push_back(p.spec.name);
    }
    EXPECT_EQ(results[1].loss, results[0].loss) << which;
    int routers = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const double g0 = results[0].grads[i], g1 = results[1].grads[i], g2 = results[2].grads[i];
      EXPECT_NEAR(g2 - g0, 2 * (g1 - g0), 1e-6 + 1e-3 * std::fabs(g2 - g0)) << which << ": " << names[i];
      if (names[i].rfind("h.1.moe.experts.", 0) == 0 || names[i].rfind("lnf.", 0) == 0) {
        ASSERT_EQ(g1, g0) << which << ": " << names[i];
      } else if (names[i].find(".moe.router.") != std::string::npos && g1 != g0) {
        ++routers;
      }
    }
    EXPECT_GT(routers, 0) << which;
  }
}

TEST(MoE, ParameterCounts) {
  GPTConfig c;  // GPT-2 small with 8 experts in every other block, top 2
  c.moe.experts = 8;
  c.moe.top_k = 2;
  c.moe.layer_freq = 2;
  const int64_t C = 768, mlp = 8 * C * C + 5 * C;
  EXPECT_EQ(c.parameter_count(), 124439808 + 6 * (8 * C + 7 * mlp));
  EXPECT_EQ(c.active_parameter_count(), 124439808 + 6 * (8 * C + mlp));
  int64_t stored = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) stored += s.shape.numel();
  EXPECT_EQ(stored, c.parameter_count() + 47 * C);
  // Expert rank 1 of 2 holds experts 4..7 of each block with experts.
  c.moe.expert_parallel = 2;
  int64_t held = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c, GPTPart::whole(c), {}, 1)) {
    held += s.shape.numel();
    if (s.name.find(".experts.") != std::string::npos) {
      EXPECT_GE(s.name[s.name.find(".experts.") + 9], '4') << s.name;
    }
  }
  EXPECT_EQ(held, c.parameter_count() + 47 * C - 6 * 4 * mlp);
  // Two shared experts: one MLP of 2 x 4C in each of the 6 blocks with experts, active for every token.
  c.moe.expert_parallel = 1;
  c.moe.shared_experts = 2;
  const int64_t shared = 16 * C * C + 9 * C;
  EXPECT_EQ(c.parameter_count(), 124439808 + 6 * (8 * C + 7 * mlp + shared));
  EXPECT_EQ(c.active_parameter_count(), 124439808 + 6 * (8 * C + mlp + shared));
  stored = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) stored += s.shape.numel();
  EXPECT_EQ(stored, c.parameter_count() + 47 * C);
}

// The blocks with experts: multiples of layer_freq from moe.first_dense_layers on.
TEST(MoE, BlocksWithExperts) {
  MoEConfig m;
  m.experts = 4;
  for (int64_t freq : {1, 2, 3})
    for (int64_t first : {0, 1, 2, 3, 5})
      for (int64_t n : {1, 6, 7, 10}) {
        m.layer_freq = freq;
        m.first_dense = first;
        int64_t count = 0;
        for (int64_t l = 0; l < n; ++l) count += m.in_layer(l);
        EXPECT_EQ(m.layers(n), count) << "freq " << freq << ", first " << first << ", " << n << " layers";
        EXPECT_EQ(m.in_layer(first > 0 ? first - 1 : -1), false);
      }
  m.layer_freq = 1;
  m.first_dense = 0;
  EXPECT_TRUE(m.every_block());
  m.first_dense = 1;
  EXPECT_FALSE(m.every_block());
}

// Mixtral's shape at d_model 768: no linear biases, SwiGLU experts of width 1000 (and dense SwiGLU
// MLPs of width 2048 between), 8 experts in every other block with one shared expert of the same
// width; its parameter specs: the counts, an expert's fc [gate | up] 2000 rows, no bias anywhere.
TEST(MoE, ParameterCountsOfSwigluExperts) {
  GPTConfig c;
  c.swiglu = true;
  c.bias = false;
  c.ffn_hidden = 2048;
  c.moe.experts = 8;
  c.moe.top_k = 2;
  c.moe.layer_freq = 2;
  c.moe.shared_experts = 1;
  c.moe.ffn_hidden = 1000;
  c.set_expert_mlp();
  const int64_t C = 768, L = 12, V = 50257, T = 1024;
  const int64_t attention = 4 * C * C + 4 * C, dense = 3 * 2048 * C, expert = 3 * 1000 * C;  // norms: 2 x 2C
  const int64_t base = V * C + T * C + 2 * C;  // wte, wpe, lnf
  EXPECT_EQ(c.parameter_count(), base + L * attention + 6 * dense + 6 * (8 * C + 9 * expert));
  EXPECT_EQ(c.active_parameter_count(), base + L * attention + 6 * dense + 6 * (8 * C + 3 * expert));
  int64_t stored = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(c)) {
    stored += s.shape.numel();
    EXPECT_TRUE(s.name.find(".b") == std::string::npos || s.name.find("ln") != std::string::npos) << s.name;
    if (s.name == "h.0.moe.experts.3.fc.w") {
      EXPECT_EQ(s.shape[0], 2000);
    }
    if (s.name == "h.0.moe.shared.proj.w") {
      EXPECT_EQ(s.shape[1], 1000);
    }
  }
  EXPECT_EQ(stored, c.parameter_count() + 47 * C);
  // Split over a tensor group of 2: the fc rows in 2 groups, so a rank holds matching gate and up rows.
  TensorParallelContext tp;
  tp.size = 2;
  tp.rank = 1;
  for (const ParameterSpec& s : GPT::parameter_specs(c, GPTPart::whole(c), tp))
    if (s.name == "h.2.moe.experts.0.fc.w") {
      EXPECT_TRUE(s.shape[0] == 1000 && s.split.groups == 2) << s.shape.str();
    }
  // Qwen2-MoE's gate on the shared MLP: one (1, C) row a block with experts, replicated over a tensor group.
  c.moe.shared_gate = true;
  EXPECT_EQ(c.parameter_count(), base + L * attention + 6 * dense + 6 * (8 * C + 9 * expert + C));
  bool gate_seen = false;
  for (const ParameterSpec& s : GPT::parameter_specs(c, GPTPart::whole(c), tp))
    if (s.name == "h.2.moe.shared_gate.w") {
      gate_seen = true;
      EXPECT_TRUE(s.shape[0] == 1 && s.shape[1] == C && s.split.parts == 1) << s.shape.str();
    }
  EXPECT_TRUE(gate_seen);
  c.moe.shared_gate = false;
  // The experts' MLP must be the model's.
  c.moe.swiglu = false;
  EXPECT_DEATH(GPT::parameter_specs(c), "the experts' MLP is not the model's");
}
