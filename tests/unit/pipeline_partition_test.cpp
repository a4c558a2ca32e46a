// The stage partition: every layer in exactly one non-empty contiguous chunk, the most expensive
// chunk as cheap as possible (against brute force over every split), then the squares balanced;
// and GPT's cost model on known shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "models/gpt.h"
#include "parallel/pipeline/partition.h"

namespace trellis {
namespace {

struct Best {
  int64_t max = std::numeric_limits<int64_t>::max();
  double squares = std::numeric_limits<double>::infinity();
};

// Every split of n layers into `parts` non-empty contiguous chunks.
void each_split(int n, int parts, const std::function<void(const std::vector<LayerRange>&)>& f) {
  std::vector<LayerRange> cur;
  std::function<void(int)> rec = [&](int begin) {
    if (int(cur.size()) == parts - 1) {
      cur.emplace_back(begin, n);
      f(cur);
      cur.pop_back();
      return;
    }
    for (int e = begin + 1; e <= n - (parts - 1 - int(cur.size())); ++e) {
      cur.emplace_back(begin, e);
      rec(e);
      cur.pop_back();
    }
  };
  rec(0);
}

std::vector<int64_t> chunk_costs(const std::vector<LayerRange>& split, const std::vector<int64_t>& layers, int64_t first,
                                 int64_t last) {
  std::vector<int64_t> out;
  for (size_t j = 0; j < split.size(); ++j) {
    int64_t c = (j == 0 ? first : 0) + (j + 1 == split.size() ? last : 0);
    for (int l = split[j].first; l < split[j].second; ++l) c += layers[size_t(l)];
    out.push_back(c);
  }
  return out;
}

TEST(PipelinePartition, OptimalAgainstBruteForce) {
  std::mt19937 rng(7);
  for (int n = 1; n <= 9; ++n)
    for (int parts = 1; parts <= n; ++parts)
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<int64_t> layers(static_cast<size_t>(n));
        for (auto& c : layers) c = trial == 0 ? 10 : int64_t(rng() % 20 + 1);
        const int64_t first = trial < 2 ? 0 : int64_t(rng() % 30), last = trial < 2 ? 15 : int64_t(rng() % 30);
        Best best;
        each_split(n, parts, [&](const std::vector<LayerRange>& s) {
          const auto c = chunk_costs(s, layers, first, last);
          best.max = std::min(best.max, *std::max_element(c.begin(), c.end()));
        });
        each_split(n, parts, [&](const std::vector<LayerRange>& s) {
          const auto c = chunk_costs(s, layers, first, last);
          if (*std::max_element(c.begin(), c.end()) != best.max) return;
          double sq = 0;
          for (int64_t x : c) sq += double(x) * double(x);
          best.squares = std::min(best.squares, sq);
        });
        const std::vector<LayerRange> got = partition_layers(layers, parts, first, last);
        ASSERT_EQ(int(got.size()), parts);
        int next = 0;
        for (const LayerRange& r : got) {  // every layer once, in order, no empty chunk
          EXPECT_EQ(r.first, next);
          EXPECT_LT(r.first, r.second);
          next = r.second;
        }
        EXPECT_EQ(next, n);
        const auto c = chunk_costs(got, layers, first, last);
        double sq = 0;
        for (int64_t x : c) sq += double(x) * double(x);
        EXPECT_EQ(*std::max_element(c.begin(), c.end()), best.max) << "n=" << n << " parts=" << parts;
        EXPECT_DOUBLE_EQ(sq, best.squares) << "n=" << n << " parts=" << parts;
      }
}

TEST(PipelinePartition, EqualLayersSplitEvenlyAndEarlierChunksGetFewerOnTies) {
  const std::vector<int64_t> eight(8, 100);
  EXPECT_EQ(partition_layers(eight, 4, 1, 10), (std::vector<LayerRange>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  // 7 layers over 2: 3 + 4 and 4 + 3 cost the same without extras; the first chunk gets fewer.
  EXPECT_EQ(partition_layers(std::vector<int64_t>(7, 1), 2, 0, 0), (std::vector<LayerRange>{{0, 3}, {3, 7}}));
  // A head worth 1.5 layers: the last chunk gives up layers to the others.
  EXPECT_EQ(partition_layers(std::vector<int64_t>(6, 2), 2, 0, 3), (std::vector<LayerRange>{{0, 4}, {4, 6}}));
}

TEST(PipelinePartition, GptCostModel) {
  GPTConfig c;  // GPT-2 small: the head (6 C V) costs about 4.5 blocks
  const GPT::StageCosts s = GPT::stage_costs(c);
  EXPECT_EQ(s.block, 72 * 768 * 768 + 12 * 1024 * 768);
  EXPECT_EQ(s.head, 6 * 768 * 50304 + 8 * 768);
  // The last stage carries the head: it gets one block, the others share the rest evenly.
  EXPECT_EQ(GPT::pipeline_partition(c, 4), (std::vector<LayerRange>{{0, 3}, {3, 7}, {7, 11}, {11, 12}}));
  EXPECT_EQ(GPT::pipeline_partition(c, 2), (std::vector<LayerRange>{{0, 8}, {8, 12}}));
  // Interleaved: rank r holds virtual stages r, p + r, ...
  const GPTPart r1 = GPTPart::of_rank(c, 2, 2, 1);
  ASSERT_EQ(r1.chunks.size(), 2u);
  const auto all = GPT::pipeline_partition(c, 4);
  EXPECT_EQ(r1.chunks[0], all[1]);
  EXPECT_EQ(r1.chunks[1], all[3]);
  EXPECT_FALSE(r1.embedding);
  EXPECT_TRUE(r1.head);
}

TEST(PipelinePartition, ListedByTheConfig) {
  GPTConfig c;  // 12 blocks
  c.stage_layers = {1, 3, 6, 2};
  EXPECT_EQ(GPT::pipeline_partition(c, 4), (std::vector<LayerRange>{{0, 1}, {1, 4}, {4, 10}, {10, 12}}));
  // Interleaved p = 2, v = 2: rank 0 holds virtual stages 0 and 2, rank 1 stages 1 and 3.
  const GPTPart r0 = GPTPart::of_rank(c, 2, 2, 0), r1 = GPTPart::of_rank(c, 2, 2, 1);
  EXPECT_EQ(r0.chunks, (std::vector<LayerRange>{{0, 1}, {4, 10}}));
  EXPECT_EQ(r1.chunks, (std::vector<LayerRange>{{1, 4}, {10, 12}}));
  c.stage_layers = {12};
  EXPECT_EQ(GPT::pipeline_partition(c, 1), (std::vector<LayerRange>{{0, 12}}));
}

}  // namespace
}  // namespace trellis
