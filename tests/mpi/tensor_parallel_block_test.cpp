// A tensor-parallel TransformerBlock against the full block, on the CPU under mpirun, f32, with
// residual and attention dropout on and off, the forward whole and in two halves of the samples
// (the batch split). Every rank builds the full block (t = 1) and its shard of the
// tensor-parallel block from the same seed, runs both forward and backward on the same input and
// output gradient, and compares the output, the input gradient and every parameter gradient it
// holds with the matching slice of the full block's: the full activation without sequence
// parallelism, its own token rows with it (after summing the LayerNorm gradients over the tensor
// group, as the trainer does once per step). GELU and SwiGLU MLPs; checkpointing none, selective, full and
// elementwise; tensor 2, and
// on 4 ranks tensor 4 and tensor 2 x data 2.
//
// Not bitwise: the row-parallel outputs and the column-parallel input gradients are sums of t
// partial GEMMs over K/t, added in another order than one GEMM over all of K; with sequence
// parallelism the LayerNorm gradients are sums of t partial column sums. Everything else (the
// per-head attention, the dropout masks, the elementwise ops) is the same arithmetic, so the
// differences stay at f32 rounding, well inside the tolerance of tensor_parallel_test; a wrong
// dropout mask, head or shard would be off by O(1).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/parameters.h"
#include "core/process_groups.h"
#include "tests/mpi/tensor_parallel_util.h"
#include "models/transformer_block.h"

namespace trellis {
namespace {

using namespace tp_test;

// B = 3 (N = 24: token shards cross samples) runs each block's forward whole, B = 4 in two halves of
// the samples (the batch split).
constexpr int64_t T = 8, C = 16, H = 4;
constexpr int kLayer = 1;

GPTConfig test_config(Checkpointing ck, float dropout = 0.1f, bool swiglu = false, int64_t ffn_hidden = 0,
                      int64_t kv_heads = 0, bool bias = true) {
  GPTConfig cfg;
  cfg.n_kv_heads = kv_heads;
  cfg.bias = bias;
  cfg.swiglu = swiglu;
  cfg.ffn_hidden = ffn_hidden;
  cfg.vocab_size = 64;
  cfg.seq_len = T;
  cfg.n_layers = 2;
  cfg.n_heads = H;
  cfg.d_model = C;
  cfg.dropout = dropout;
  cfg.attention_dropout = dropout;
  cfg.dtype = DType::f32;
  cfg.checkpointing = ck;
  return cfg;
}

// Every parameter drawn (biases and LayerNorms too, so that a bias added t times, or a LayerNorm
// gradient not summed, shows): keyed by (seed, name, global index), so a shard is the matching
// slice of the full parameter.
void draw_parameters(ParameterStore& ps) {
  for (const Parameter& p : ps.all()) {
    ParameterSpec s = p.spec;
    s.init = Init::normal;
    s.std = 0.2f;
    const bool ln_weight = s.name.find(".ln") != std::string::npos && s.name.back() == 'w';
    for (int64_t i = 0; i < p.value.numel(); ++i)
      p.value.ptr<float>()[i] = initial_value(17, s, i) + (ln_weight ? 1.0f : 0.0f);
  }
  ps.zero_grads();
}

std::vector<float> normal(const std::string& name, int64_t n, int data_rank) {
  const ParameterSpec s{name + "." + std::to_string(data_rank), {n}, Init::normal, 1.0f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = initial_value(99, s, i);
  return v;
}

// Block output, input gradient and the parameter store, after one forward and backward.
struct Run {
  Run(Runtime& rt, const std::vector<ParameterSpec>& specs) : params(rt, specs, DType::f32) {}
  ParameterStore params;
  std::vector<float> y, dx;
  size_t keep_peak = 0, work_peak = 0;
};

// Runs `block` on x (full or a token shard) with output gradient dy. The arenas have exactly the
// sizes kept_bytes / work_bytes claim, so an under-estimate fails (fatally: Arena::take).
void run_block(Runtime& rt, const GPTConfig& cfg, const TensorParallelContext& tp, const StepContext& ctx, int64_t B,
               const std::vector<float>& x_in, const std::vector<float>& dy_in, Shape act, Run& out) {
  const TransformerBlock block(cfg, kLayer, BlockParams::of(out.params, cfg, kLayer), tp);
  Arena keep(rt.allocator(), std::max<size_t>(TransformerBlock::kept_bytes(cfg, B, T, tp), 256), "kept");
  Arena work(rt.allocator(), TransformerBlock::work_bytes(cfg, B, T, tp), "work");
  HostTensor x(act, x_in), y(act), dres(act, dy_in);
  BlockSaved saved;
  block.forward(rt, ctx, x.t, y.t, saved, keep, work);
  work.reset();
  block.backward(rt, ctx, dres.t, saved, work);
  out.y = values(y.t);
  out.dx = values(dres.t);
  out.keep_peak = keep.peak();
  out.work_peak = work.peak();
}

// Without dropout the residual adds are the projections' GEMM epilogues (rank 0's, before the all-reduce).
void check_block(Runtime& rt, ProcessGroups& pg, Checkpointing ck, bool sp, int64_t B, float dropout, bool swiglu,
                 int64_t ffn_hidden, int64_t kv_heads = 0, bool bias = true) {
  const int64_t N = B * T;
  Communicator& tensor = pg.tensor();
  const int t = tensor.size(), r = tensor.rank(), d = pg.coords().data;
  const char* ck_name = ck == Checkpointing::none        ? "none"
                        : ck == Checkpointing::full        ? "full"
                        : ck == Checkpointing::selective   ? "selective"
                                                           : "elementwise";
  SCOPED_TRACE("tensor " + std::to_string(t) + " x data " + std::to_string(pg.layout().data) +
               (sp ? " with" : " without") + " sequence parallelism, checkpointing " + ck_name + ", micro-batch " +
               std::to_string(B) + ", dropout " + std::to_string(dropout) + (swiglu ? ", SwiGLU" : "") +
               (ffn_hidden ? ", MLP width " + std::to_string(ffn_hidden) : "") +
               (kv_heads ? ", " + std::to_string(kv_heads) + " key-value heads" : "") + (bias ? "" : ", no biases"));
  const GPTConfig cfg = test_config(ck, dropout, swiglu, ffn_hidden, kv_heads, bias);
  StepContext ctx;
  ctx.seed = 1234;
  ctx.step = 3;
  ctx.sample_offset = 5 + d * B;  // data ranks: other samples, other masks
  ctx.training = true;
  ctx.seq_len = T;
  const std::vector<float> x = normal("x", N * C, d), dy = normal("dy", N * C, d);

  // The full block (checkpointing none: the reference for every mode).
  std::vector<ParameterSpec> full_specs;
  TransformerBlock::append_specs(cfg, kLayer, full_specs);
  Run full(rt, full_specs);
  draw_parameters(full.params);
  run_block(rt, test_config(Checkpointing::none, dropout, swiglu, ffn_hidden, kv_heads, bias), {}, ctx, B, x, dy,
            {B, T, C}, full);

  // This rank's part of the tensor-parallel block.
  const TensorParallelContext tp = TensorParallelContext::of(tensor, sp, 1, /*split_batch=*/true);
  std::vector<ParameterSpec> specs;
  TransformerBlock::append_specs(cfg, kLayer, specs, tp);
  Run part(rt, specs);
  draw_parameters(part.params);
  const int64_t rows = sp ? N / t : N;
  auto mine = [&](const std::vector<float>& v) {  // this rank's token rows of a full activation
    return std::vector<float>(v.begin() + (sp ? r * rows * C : 0), v.begin() + (sp ? r * rows * C : 0) + rows * C);
  };
  const Shape act = sp ? Shape{rows, C} : Shape{B, T, C};
  run_block(rt, cfg, tp, ctx, B, mine(x), mine(dy), act, part);
  EXPECT_LE(part.keep_peak, TransformerBlock::kept_bytes(cfg, B, T, tp));
  EXPECT_LE(part.work_peak, TransformerBlock::work_bytes(cfg, B, T, tp));

  // Under sequence parallelism the LayerNorm gradients are partial: sum them over the group.
  const TransformerBlock block(cfg, kLayer, BlockParams::of(part.params, cfg, kLayer), tp);
  const std::vector<const Parameter*> partial = block.tensor_partial_grads();
  EXPECT_EQ(partial.size(), sp ? 4u : 0u);
  for (const Parameter* p : partial) {
    EXPECT_NE(p->spec.name.find(".ln"), std::string::npos) << p->spec.name;
    tensor.all_reduce(p->grad);
  }

  expect_close(HostTensor(act, part.y).t, mine(full.y), "block output");
  expect_close(HostTensor(act, part.dx).t, mine(full.dx), "block input gradient");
  ASSERT_EQ(part.params.size(), full.params.size());
  for (size_t i = 0; i < part.params.size(); ++i) {
    const Parameter &p = part.params[i], &f = full.params[i];
    ASSERT_EQ(p.spec.name, f.spec.name);
    ASSERT_EQ(p.spec.global_shape(), f.spec.shape) << p.spec.name;
    EXPECT_EQ(values(p.value), slice_of(f.value, p.spec)) << p.spec.name << " value";
    expect_close(p.grad, slice_of(f.grad, p.spec), p.spec.name + " gradient");
  }
}

TEST(TensorParallelBlock, SpecsAreTheShardsOfTheFullBlock) {
  const GPTConfig cfg = test_config(Checkpointing::none);
  std::vector<ParameterSpec> full;
  TransformerBlock::append_specs(cfg, kLayer, full);
  const int t = 2, r = 1;
  std::vector<ParameterSpec> part;
  TransformerBlock::append_specs(cfg, kLayer, part, TensorParallelContext{nullptr, t, r, false});
  ASSERT_EQ(part.size(), full.size());
  auto split_of = [](const std::string& name) -> TensorSplit {
    if (name.ends_with("qkv.w") || name.ends_with("qkv.b")) return {0, 2, 1, 3};
    if (name.ends_with("fc.w") || name.ends_with("fc.b")) return {0, 2, 1, 1};
    if (name.ends_with("attn.proj.w") || name.ends_with("mlp.proj.w")) return {1, 2, 1, 1};
    return {};
  };
  for (size_t i = 0; i < full.size(); ++i) {
    const TensorSplit want = split_of(full[i].name), got = part[i].split;
    EXPECT_EQ(part[i].name, full[i].name);
    EXPECT_EQ(part[i].global_shape(), full[i].shape) << full[i].name;
    EXPECT_TRUE(got.dim == want.dim && got.parts == want.parts && got.index == want.index &&
                got.groups == want.groups && got.first_units == want.first_units)
        << full[i].name;
    EXPECT_EQ(part[i].init, full[i].init) << full[i].name;
    EXPECT_EQ(part[i].std, full[i].std) << full[i].name;
  }
}

TEST(TensorParallelBlock, HeadsMustDivide) {
  GPTConfig cfg = test_config(Checkpointing::none);
  std::vector<ParameterSpec> specs;
  try {
    TransformerBlock::append_specs(cfg, 0, specs, TensorParallelContext{nullptr, 3, 0, false});
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "tensor parallelism splits the attention heads: model.n_heads = 4 must be divisible by "
                           "parallel.tensor = 3");
  }
  cfg.n_kv_heads = 2;  // key-value heads split too
  try {
    TransformerBlock::check_tensor_parallel(cfg, 4);
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "tensor parallelism splits the key-value heads: model.n_kv_heads = 2 must be divisible by "
                           "parallel.tensor = 4");
  }
  cfg.n_kv_heads = 0;
  cfg.n_heads = 16;
  cfg.d_model = 18;  // not a multiple of the heads: only the MLP check catches it
  try {
    TransformerBlock::check_tensor_parallel(cfg, 16);
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "tensor parallelism splits the MLP: its hidden width 4 x model.d_model = 72 must be "
                           "divisible by parallel.tensor = 16");
  }
  cfg.d_model = 16;
  cfg.ffn_hidden = 40;  // a width of its own
  try {
    TransformerBlock::check_tensor_parallel(cfg, 16);
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "tensor parallelism splits the MLP: its hidden width model.ffn_hidden_size = 40 must be "
                           "divisible by parallel.tensor = 16");
  }
}

TEST(TensorParallelBlock, DropoutIsOn) {
  // The masks this test relies on are really drawn: the training output differs from inference.
  RuntimeOptions opt;
  opt.cpu_threads = 1;
  Runtime rt(opt);
  const GPTConfig cfg = test_config(Checkpointing::none);
  const int64_t B = 3, N = B * T;
  std::vector<ParameterSpec> specs;
  TransformerBlock::append_specs(cfg, kLayer, specs);
  ParameterStore ps(rt, specs, DType::f32);
  draw_parameters(ps);
  const TransformerBlock block(cfg, kLayer, BlockParams::of(ps, cfg, kLayer));
  Arena keep(rt.allocator(), TransformerBlock::kept_bytes(cfg, B, T), "kept");
  Arena work(rt.allocator(), TransformerBlock::work_bytes(cfg, B, T), "work");
  HostTensor x({B, T, C}, normal("x", N * C, 0)), y_train({B, T, C}), y_eval({B, T, C});
  BlockSaved s;
  StepContext ctx;
  ctx.seed = 1234;
  ctx.step = 3;
  block.forward(rt, ctx, x.t, y_train.t, s, keep, work);
  keep.reset();
  work.reset();
  ctx.training = false;
  block.forward(rt, ctx, x.t, y_eval.t, s, keep, work);
  int differ = 0;
  for (size_t i = 0; i < y_train.data.size(); ++i) differ += y_train.data[i] != y_eval.data[i];
  EXPECT_GT(differ, int(y_train.data.size()) / 2);
}

TEST(TensorParallelBlock, MatchesTheFullBlock) {
  RuntimeOptions opt;
  opt.cpu_threads = 1;
  Runtime rt(opt);
  const int W = world_size();
  for (int t = 2; t <= W; t *= 2) {
    if (W % t != 0) continue;
    ProcessGroups pg(MPI_COMM_WORLD, make_layout(W, t, 1), rt);  // tensor x data when t < W
    for (bool sp : {false, true})
      for (Checkpointing ck : {Checkpointing::none, Checkpointing::selective, Checkpointing::full,
                               Checkpointing::elementwise})
        for (int64_t B : {2, 3, 4})
          for (float dropout : {0.1f, 0.0f})
            for (bool swiglu : {false, true})  // SwiGLU at a width F = 40 that is not a multiple of C
              check_block(rt, pg, ck, sp, B, dropout, swiglu, swiglu ? 40 : 0);
    // Grouped-query attention: 2 key-value heads for the 4 query heads, split over the group.
    if (2 % t == 0)
      for (bool sp : {false, true})
        for (Checkpointing ck : {Checkpointing::none, Checkpointing::selective, Checkpointing::elementwise})
          for (int64_t B : {3, 4}) check_block(rt, pg, ck, sp, B, 0.1f, false, 0, 2);
    // No linear biases (the row-parallel layers add none on rank 0), with and without dropout (the
    // residual in the GEMM epilogue alone).
    for (bool sp : {false, true})
      for (float dropout : {0.1f, 0.0f})
        for (int64_t B : {3, 4}) check_block(rt, pg, Checkpointing::none, sp, B, dropout, true, 40, 0, false);
  }
}

}  // namespace
}  // namespace trellis
