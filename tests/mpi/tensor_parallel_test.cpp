// Tensor parallelism on the CPU under mpirun, f32. The mappings are checked on small integers
// (exact). The layers (the linear ones, the vocabulary-parallel embedding and cross-entropy) are
// checked against the full layer: every rank builds the full parameters
// from the same seed (replicated specs) and its shards (split specs), runs the full layer and the
// parallel one forward and backward, and compares its outputs and gradients with the matching
// slices of the full layer's. Not bitwise: the row-parallel output and the column-parallel input
// gradient are sums of t partial GEMMs, added in another order than one GEMM over all of K adds.
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
#include "parallel/tensor/layers.h"
#include "parallel/tensor/mappings.h"
#include "parallel/tensor/vocab_parallel.h"

namespace trellis {
namespace {

using namespace tp_test;

void fill_normal(HostTensor& x, const std::string& name) {
  const ParameterSpec s{name, x.t.shape, Init::normal, 1.0f};
  for (int64_t i = 0; i < x.t.numel(); ++i) x[i] = initial_value(99, s, i);
}

// ---- mappings, on small integers ----

TEST(TensorParallelMappings, ForwardAndBackwardOfEachPair) {
  Runtime rt(RuntimeOptions{});
  auto tp = Communicator::create(MPI_COMM_WORLD, rt, "tensor");
  const int t = tp->size(), r = tp->rank();
  const int64_t n = 3, cols = 5;  // rows of one shard
  auto v = [](int rank, int64_t i) { return float((rank * 7 + i * 3) % 11 - 5); };
  HostTensor full({n * t, cols}), shard({n, cols});

  // copy_to_tensor_region: backward sums; reduce_from_tensor_region: forward sums.
  for (int64_t i = 0; i < full.t.numel(); ++i) full[i] = v(r, i);
  EXPECT_EQ(copy_to_tensor_region_forward(full.t).data, full.t.data);
  copy_to_tensor_region_backward(*tp, full.t).wait();
  for (int64_t i = 0; i < full.t.numel(); ++i) {
    float sum = 0;
    for (int k = 0; k < t; ++k) sum += v(k, i);
    ASSERT_EQ(full[i], sum);
  }
  for (int64_t i = 0; i < full.t.numel(); ++i) full[i] = v(r, i);
  reduce_from_tensor_region_forward(*tp, full.t).wait();
  for (int64_t i = 0; i < full.t.numel(); ++i) {
    float sum = 0;
    for (int k = 0; k < t; ++k) sum += v(k, i);
    ASSERT_EQ(full[i], sum);
  }
  EXPECT_EQ(reduce_from_tensor_region_backward(full.t).data, full.t.data);

  // Forward gathers / scatters shards; reduce-scatter sums block r of every rank's full tensor.
  for (int64_t i = 0; i < n * cols; ++i) shard[i] = v(r, i);
  for (auto gather : {gather_from_token_shards_forward, scatter_to_token_shards_backward,
                      reduce_scatter_to_token_shards_backward}) {
    gather(*tp, full.t, shard.t).wait();
    for (int64_t i = 0; i < full.t.numel(); ++i) ASSERT_EQ(full[i], v(int(i / (n * cols)), i % (n * cols)));
  }
  const Tensor own = scatter_to_token_shards_forward(*tp, full.t);
  EXPECT_EQ(own.data, full.t.slice(r * n * cols, {n, cols}).data);
  EXPECT_EQ(own.shape, (Shape{n, cols}));
  for (auto reduce_scatter : {gather_from_token_shards_backward, reduce_scatter_to_token_shards_forward}) {
    for (int64_t i = 0; i < full.t.numel(); ++i) full[i] = v(r, i);
    reduce_scatter(*tp, shard.t, full.t).wait();
    for (int64_t i = 0; i < n * cols; ++i) {
      float sum = 0;
      for (int k = 0; k < t; ++k) sum += v(k, r * n * cols + i);
      ASSERT_EQ(shard[i], sum);
    }
  }
}

TEST(TensorParallelMappings, TokenRowsMustDivide) {
  EXPECT_EQ(token_shard_rows(12, 4), 3);
  try {
    token_shard_rows(6, 4);
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "sequence parallelism needs the token rows (micro_batch x seq_len = 6) divisible by "
                           "parallel.tensor = 4");
  }
}

// ---- layers against the full layer ----

constexpr int64_t B = 2, T = 6, C = 16, N = B * T;  // N divisible by t = 2 and 4

// The full layers' parameters (replicated) and this rank's shards of them.
std::vector<ParameterSpec> full_specs() {
  // Biases drawn, not zero, so that a bias counted t times (or never) shows.
  return {{"fc.w", {4 * C, C}, Init::normal, 0.3f, true},    {"fc.b", {4 * C}, Init::normal, 0.3f},
          {"proj.w", {C, 4 * C}, Init::normal, 0.3f, true},  {"proj.b", {C}, Init::normal, 0.3f},
          {"qkv.w", {3 * C, C}, Init::normal, 0.3f, true},   {"qkv.b", {3 * C}, Init::normal, 0.3f}};
}
std::vector<ParameterSpec> shard_specs(int t, int r) {
  const std::vector<ParameterSpec> f = full_specs();
  return {shard_spec(f[0], 0, t, r), shard_spec(f[1], 0, t, r), shard_spec(f[2], 1, t, r),
          f[3],                      shard_spec(f[4], 0, t, r, 3), shard_spec(f[5], 0, t, r, 3)};
}

void linear_forward(Runtime& rt, const Tensor& y, const Tensor& x, const Parameter& w, const Parameter& b) {
  MatmulOptions o;
  o.trans_b = true;
  o.bias = &b.value;
  matmul(rt, y, x, w.value, o);
}

void linear_backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, const Parameter& w,
                     const Parameter& b) {
  MatmulOptions acc;
  acc.trans_a = true;
  acc.accumulate = true;
  matmul(rt, w.grad, dy, x, acc);
  bias_backward(rt, b.grad, dy);
  matmul(rt, dx, dy, w.value);
}

// Runs the MLP (fc column-parallel, GELU, proj row-parallel) and the qkv projection
// (column-parallel, groups = 3) both ways and compares every value this rank holds.
// comm_chunks > 1: proj's forward computes and all-reduces its output in that many row blocks.
void check_layers(Runtime& rt, Communicator& tp, bool sp, int comm_chunks = 1) {
  const int t = tp.size(), r = tp.rank();
  SCOPED_TRACE("tensor " + std::to_string(t) + (sp ? " with" : " without") + " sequence parallelism, " +
               std::to_string(comm_chunks) + " communication chunks");
  Arena work(rt.allocator(), 1 << 20, "tensor parallel test");
  ParameterStore full(rt, full_specs(), DType::f32), part(rt, shard_specs(t, r), DType::f32);
  full.initialize(5);
  part.initialize(5);
  HostTensor x({N, C}), dy({N, C}), dqkv({N, 3 * C});
  fill_normal(x, "x");
  fill_normal(dy, "dy");
  fill_normal(dqkv, "dqkv");

  // The full layers.
  HostTensor h({N, 4 * C}), g({N, 4 * C}), y({N, C}), dg({N, 4 * C}), dx({N, C});
  HostTensor qkv({N, 3 * C}), dx_qkv({N, C});
  linear_forward(rt, h.t, x.t, full[0], full[1]);
  gelu_forward(rt, g.t, h.t);
  linear_forward(rt, y.t, g.t, full[2], full[3]);
  linear_backward(rt, dg.t, dy.t, g.t, full[2], full[3]);
  gelu_backward(rt, dg.t, dg.t, h.t);
  linear_backward(rt, dx.t, dg.t, x.t, full[0], full[1]);
  linear_forward(rt, qkv.t, x.t, full[4], full[5]);
  linear_backward(rt, dx_qkv.t, dqkv.t, x.t, full[4], full[5]);

  // The parallel layers. With sequence parallelism the input, the output, their gradients and
  // the input gradient are this rank's token rows; without, they are full.
  const ColumnParallelLinear fc(tp, part[0], &part[1], sp), qkv_proj(tp, part[4], &part[5], sp);
  const RowParallelLinear proj(tp, part[2], &part[3], sp, comm_chunks);
  const int64_t rows = sp ? N / t : N;
  const Tensor x_in = sp ? scatter_to_token_shards_forward(tp, x.t) : x.t;
  const Tensor dy_in = sp ? scatter_to_token_shards_forward(tp, dy.t) : dy.t;
  HostTensor h_l({N, 4 * C / t}), g_l({N, 4 * C / t}), y_l({rows, C}), dg_l({N, 4 * C / t}), dx_l({rows, C});
  HostTensor qkv_l({N, 3 * C / t}), dqkv_part({N, 3 * C / t}), dx_qkv_l({rows, C});
  fc.forward(rt, h_l.t, x_in, work);
  gelu_forward(rt, g_l.t, h_l.t);
  proj.forward(rt, y_l.t, g_l.t, work);
  proj.backward(rt, dg_l.t, dy_in, g_l.t, work);
  gelu_backward(rt, dg_l.t, dg_l.t, h_l.t);
  fc.backward(rt, dx_l.t, dg_l.t, x_in, work);
  qkv_proj.forward(rt, qkv_l.t, x_in, work);
  const std::vector<float> dqkv_mine = slice_of(dqkv.t, 1, t, r, 3);  // this rank's heads' gradient
  std::copy(dqkv_mine.begin(), dqkv_mine.end(), dqkv_part.data.begin());
  qkv_proj.backward(rt, dx_qkv_l.t, dqkv_part.t, x_in, work);

  // Activations: column outputs are column slices, row outputs and input gradients token rows.
  const int rows_index = sp ? r : 0, rows_parts = sp ? t : 1;
  expect_close(h_l.t, slice_of(h.t, 1, t, r), "fc output");
  expect_close(qkv_l.t, slice_of(qkv.t, 1, t, r, 3), "qkv output");
  expect_close(y_l.t, slice_of(y.t, 0, rows_parts, rows_index), "proj output");
  expect_close(dg_l.t, slice_of(dg.t, 1, t, r), "fc output gradient");
  expect_close(dx_l.t, slice_of(dx.t, 0, rows_parts, rows_index), "fc input gradient");
  expect_close(dx_qkv_l.t, slice_of(dx_qkv.t, 0, rows_parts, rows_index), "qkv input gradient");
  for (size_t i = 0; i < part.size(); ++i) {
    expect_close(part[i].value, slice_of(full[i].value, part[i].spec), part[i].spec.name + " value");
    expect_close(part[i].grad, slice_of(full[i].grad, part[i].spec), part[i].spec.name + " gradient");
  }
}

TEST(TensorParallelLayers, MatchTheFullLayers) {
  RuntimeOptions opt;
  opt.cpu_threads = 1;
  Runtime rt(opt);
  const int W = world_size();
  for (int t = 2; t <= W; t *= 2) {
    if (W % t != 0) continue;
    ProcessGroups pg(MPI_COMM_WORLD, make_layout(W, t, 1), rt);  // tensor x data when t < W
    for (bool sp : {false, true}) check_layers(rt, pg.tensor(), sp);
    check_layers(rt, pg.tensor(), false, 3);  // N = 12 rows: blocks of 4
  }
}

// ---- the vocabulary-parallel embedding and cross-entropy against the full ones ----

constexpr int64_t kVocab = 50, kPadded = 64;  // the table's last 14 rows belong to no token

std::vector<int32_t> tokens_of(int64_t n) {  // every shard gets some
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((i * 13 + 5) % kVocab);  // 12 tokens: 48 among them
  return v;
}

void check_vocab_embedding(Runtime& rt, Communicator& tp, bool sp) {
  const int t = tp.size(), r = tp.rank();
  SCOPED_TRACE("tensor " + std::to_string(t) + (sp ? " with" : " without") + " sequence parallelism");
  Arena work(rt.allocator(), 1 << 20, "vocab parallel test");
  const ParameterSpec wte{"wte", {kPadded, C}, Init::normal, 0.3f, true}, wpe{"wpe", {T, C}, Init::normal, 0.3f};
  ParameterStore full(rt, {wte, wpe}, DType::f32), part(rt, {shard_spec(wte, 0, t, r), wpe}, DType::f32);
  full.initialize(7);
  part.initialize(7);
  full.zero_grads();
  part.zero_grads();
  std::vector<int32_t> tok = tokens_of(N);
  const Tensor tokens(tok.data(), DType::i32, Device::CPU(), {B, T});
  HostTensor x({B, T, C}), dy({B, T, C});
  fill_normal(dy, "dy");
  embedding_forward(rt, x.t, tokens, full[0].value, full[1].value);
  embedding_backward(rt, full[0].grad, full[1].grad, dy.t, tokens);

  const VocabParallelEmbedding emb(tp, part[0], &part[1], kPadded, sp);
  EXPECT_EQ(emb.vocab_begin(), r * kPadded / t);
  const int64_t rows = sp ? N / t : N;
  const Shape act = sp ? Shape{rows, C} : Shape{B, T, C};
  HostTensor x_l(act), dy_l(act, std::vector<float>(dy.data.begin() + (sp ? r * rows * C : 0),
                                                    dy.data.begin() + (sp ? r * rows * C : 0) + rows * C));
  emb.forward(rt, x_l.t, tokens, work);
  emb.backward(rt, dy_l.t, tokens, work);
  expect_close(x_l.t, slice_of(x.t.view({N, C}), 0, sp ? t : 1, sp ? r : 0), "embedding output");
  expect_close(part[0].grad, slice_of(full[0].grad, part[0].spec), "wte gradient (this rank's rows)");
  expect_close(part[1].grad, values(full[1].grad), "wpe gradient");
}

void check_vocab_cross_entropy(Runtime& rt, Communicator& tp, bool backward) {
  const int t = tp.size(), r = tp.rank();
  SCOPED_TRACE("tensor " + std::to_string(t) + (backward ? ", forward and backward" : ", forward"));
  const float dloss = 0.25f;
  HostTensor logits({N, kPadded}), losses({N});
  fill_normal(logits, "logits");
  std::vector<int32_t> tgt = tokens_of(N);
  const Tensor targets(tgt.data(), DType::i32, Device::CPU(), {N});
  HostTensor logits_l({N, kPadded / t}, slice_of(logits.t, 1, t, r)), losses_l({N}), stats({3 * N});
  const std::vector<float> mine = logits_l.data;
  if (backward) softmax_cross_entropy_backward(rt, logits.t, losses.t, logits.t, targets, kVocab, dloss);
  else softmax_cross_entropy_forward(rt, losses.t, logits.t, targets, kVocab);
  vocab_parallel_cross_entropy(rt, tp, losses_l.t, logits_l.t, targets, stats.t, kVocab, r * kPadded / t, dloss,
                               backward);
  expect_close(losses_l.t, losses.data, "losses");
  if (backward) expect_close(logits_l.t, slice_of(logits.t, 1, t, r), "dlogits (this rank's columns)");
  else EXPECT_EQ(logits_l.data, mine) << "forward alone must leave the logits";
}

TEST(TensorParallelVocab, MatchesTheFullEmbeddingAndCrossEntropy) {
  RuntimeOptions opt;
  opt.cpu_threads = 1;
  Runtime rt(opt);
  const int W = world_size();
  for (int t = 2; t <= W; t *= 2) {
    if (W % t != 0) continue;
    ProcessGroups pg(MPI_COMM_WORLD, make_layout(W, t, 1), rt);  // tensor x data when t < W
    for (bool sp : {false, true}) check_vocab_embedding(rt, pg.tensor(), sp);
    for (bool backward : {false, true}) check_vocab_cross_entropy(rt, pg.tensor(), backward);
  }
}

}  // namespace
}  // namespace trellis
