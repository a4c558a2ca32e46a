// Tensor-parallel parameter shards: each shard initializes to exactly its slice of the full
// parameter, so the t shards put back together (group by group, rank by rank) are the full tensor
// bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/parameters.h"

namespace trellis {
namespace {

std::vector<float> initialized(const ParameterSpec& spec, uint64_t seed) {
  Runtime rt(RuntimeOptions{});
  ParameterStore store(rt, {spec}, DType::f32);
  store.initialize(seed);
  const float* v = store[0].value.ptr<float>();
  return std::vector<float>(v, v + spec.shape.numel());
}

// The full tensor rebuilt from the shards of a (rows, cols) or (rows) parameter, written
// independently of TensorSplit::global_index: along `dim`, for each group, the ranks' pieces in
// rank order.
std::vector<float> concatenate(const std::vector<std::vector<float>>& shards, const Shape& local, int dim, int groups) {
  const int64_t rows = local[0], cols = local.rank == 2 ? local[1] : 1;
  std::vector<float> full;
  if (dim == 0) {
    const int64_t piece = rows / groups * cols;
    for (int g = 0; g < groups; ++g)
      for (const std::vector<float>& s : shards) full.insert(full.end(), s.begin() + g * piece, s.begin() + (g + 1) * piece);
  } else {
    const int64_t piece = cols / groups;
    for (int64_t i = 0; i < rows; ++i)
      for (int g = 0; g < groups; ++g)
        for (const std::vector<float>& s : shards)
          full.insert(full.end(), s.begin() + i * cols + g * piece, s.begin() + i * cols + (g + 1) * piece);
  }
  return full;
}

void expect_shards_make_the_full_tensor(const ParameterSpec& full, int dim, int groups) {
  const std::vector<float> want = initialized(full, 7);
  for (int t : {1, 2, 4}) {
    SCOPED_TRACE(full.name + " dim " + std::to_string(dim) + " groups " + std::to_string(groups) + " parts " +
                 std::to_string(t));
    std::vector<std::vector<float>> shards;
    Shape local;
    for (int r = 0; r < t; ++r) {
      const ParameterSpec s = shard_spec(full, dim, t, r, groups);
      EXPECT_EQ(s.global_shape(), full.shape);
      local = s.shape;
      shards.push_back(initialized(s, 7));
      for (int64_t i = 0; i < s.shape.numel(); ++i) ASSERT_EQ(shards.back()[size_t(i)], initial_value(7, s, i));
    }
    EXPECT_EQ(local[dim] * t, full.shape[dim]);
    const std::vector<float> got = concatenate(shards, local, dim, groups);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

TEST(ParameterShards, RowsAndColumnsConcatenateToTheFullParameter) {
  const ParameterSpec w{"h.0.mlp.fc.w", {24, 36}, Init::normal, 0.02f, true};
  for (int groups : {1, 3}) {
    expect_shards_make_the_full_tensor(w, 0, groups);
    expect_shards_make_the_full_tensor(w, 1, groups);
  }
}

TEST(ParameterShards, GroupedBiasConcatenatesToTheFullParameter) {
  const ParameterSpec b{"h.0.attn.qkv.b", {36}, Init::normal, 0.02f, false};
  for (int groups : {1, 3}) expect_shards_make_the_full_tensor(b, 0, groups);
}

TEST(ParameterShards, QkvShardHoldsItsHeadsOfQKAndV) {
  // C = 8, 4 heads of 2, t = 2: rank 1 holds heads 2-3 of q, k and v: full rows 4-7, 12-15, 20-23.
  const ParameterSpec full{"qkv.w", {24, 8}, Init::normal, 0.02f, true};
  const ParameterSpec s = shard_spec(full, 0, 2, 1, 3);
  EXPECT_EQ(s.shape, (Shape{12, 8}));
  const int64_t rows[] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23};
  for (int64_t j = 0; j < 12; ++j)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(s.split.global_index(s.shape, j * 8 + c), rows[j] * 8 + c);
}

TEST(ParameterShards, GroupedQueryQkvShardHoldsItsQueryAndKeyValueHeads) {
  // Grouped-query attention: 4 query heads of 2 on 2 key-value heads (q twice as wide as k: first_units
  // 2), t = 2: rank 1 holds query heads 2-3 (full rows 4-7) and key-value head 1 (k row 10-11, v 14-15).
  const ParameterSpec full{"qkv.w", {16, 8}, Init::normal, 0.02f, true};
  const ParameterSpec s = shard_spec(full, 0, 2, 1, 3, 2);
  EXPECT_EQ(s.shape, (Shape{8, 8}));
  EXPECT_EQ(s.global_shape(), full.shape);
  const int64_t rows[] = {4, 5, 6, 7, 10, 11, 14, 15};
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(s.split.global_index(s.shape, j * 8 + c), rows[j] * 8 + c);
  // Each shard initializes to its rows of the full tensor.
  const std::vector<float> whole = initialized(full, 7), mine = initialized(s, 7);
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t c = 0; c < 8; ++c) ASSERT_EQ(mine[size_t(j * 8 + c)], whole[size_t(rows[j] * 8 + c)]);
}

TEST(ParameterShards, ReplicatedIsTheDefault) {
  const ParameterSpec w{"w", {4, 6}, Init::normal, 0.02f, true};
  EXPECT_TRUE(w.split.replicated());
  EXPECT_EQ(w.global_shape(), w.shape);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(w.split.global_index(w.shape, i), i);
}

}  // namespace
}  // namespace trellis
