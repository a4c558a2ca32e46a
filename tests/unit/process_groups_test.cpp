// The rank layout and group arithmetic, without MPI: every world size 1..64 and every
// factorization (tensor, pipeline, expert) that fits, plus the UserError messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/process_groups.h"

namespace trellis {
namespace {

constexpr GroupKind kAllKinds[] = {GroupKind::tensor, GroupKind::data, GroupKind::pipeline,
                                   GroupKind::embedding, GroupKind::expert, GroupKind::expert_data};

std::vector<Layout> all_layouts(int world) {
  std::vector<Layout> out;
  for (int t = 1; t <= world; ++t)
    for (int p = 1; t * p <= world; ++p) {
      if (world % (t * p) != 0) continue;
      const int d = world / (t * p);
      for (int e = 1; e <= d; ++e)
        if (d % e == 0) out.push_back(make_layout(world, t, p, e));
    }
  return out;
}

std::string describe(const Layout& l) {
  std::string s = "tensor ";  // built by appending: GCC 12 warns (falsely) on "lit" + to_string()
  s += std::to_string(l.tensor);
  s += " data ";
  s += std::to_string(l.data);
  s += " pipeline ";
  s += std::to_string(l.pipeline);
  s += " expert ";
  s += std::to_string(l.expert);
  return s;
}

void check_layout(const Layout& l) {
  const int W = l.world();
  const int T = l.tensor, D = l.data, P = l.pipeline, E = l.expert;
  SCOPED_TRACE(describe(l));

  // coords_of / rank_of round trip, and the expert split of the data index.
  for (int r = 0; r < W; ++r) {
    RankCoords c = coords_of(r, l);
    ASSERT_EQ(rank_of(c.tensor, c.data, c.pipeline, l), r);
    ASSERT_LT(c.tensor, T);
    ASSERT_LT(c.data, D);
    ASSERT_LT(c.pipeline, P);
    ASSERT_EQ(c.expert_data * E + c.expert, c.data);
  }

  const int expected_size[] = {T, D, P, P > 1 ? 2 : 1, E, D / E};
  for (GroupKind k : kAllKinds) {
    SCOPED_TRACE(group_kind_name(k));
    auto groups = group_members(k, l);
    std::vector<int> seen(size_t(W), 0);
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& g = groups[gi];
      ASSERT_EQ(int(g.size()), expected_size[int(k)]);
      ASSERT_TRUE(std::is_sorted(g.begin(), g.end()));  // group rank order = world rank order
      for (size_t i = 0; i < g.size(); ++i) {
        const int r = g[i];
        ASSERT_GE(r, 0);
        ASSERT_LT(r, W);
        ++seen[size_t(r)];
        ASSERT_EQ(group_index(k, r, l), int(gi));
        RankCoords c = coords_of(r, l), c0 = coords_of(g[0], l);
        // Members agree on what the group fixes, and the group rank is the right coordinate.
        switch (k) {
          case GroupKind::tensor:
            ASSERT_EQ(r, g[0] + int(i));  // adjacent world ranks
            ASSERT_EQ(c.tensor, int(i));
            break;
          case GroupKind::data:
            ASSERT_EQ(c.tensor, c0.tensor);
            ASSERT_EQ(c.pipeline, c0.pipeline);
            ASSERT_EQ(c.data, int(i));
            break;
          case GroupKind::pipeline:
            ASSERT_EQ(c.tensor, c0.tensor);
            ASSERT_EQ(c.data, c0.data);
            ASSERT_EQ(c.pipeline, int(i));
            break;
          case GroupKind::embedding:
            ASSERT_EQ(c.tensor, c0.tensor);
            ASSERT_EQ(c.data, c0.data);
            ASSERT_EQ(c.pipeline, i == 0 ? 0 : P - 1);
            break;
          case GroupKind::expert:
            ASSERT_EQ(c.tensor, c0.tensor);
            ASSERT_EQ(c.pipeline, c0.pipeline);
            ASSERT_EQ(c.data, c0.data + int(i));  // consecutive data ranks
            ASSERT_EQ(c.expert, int(i));
            break;
          case GroupKind::expert_data:
            ASSERT_EQ(c.tensor, c0.tensor);
            ASSERT_EQ(c.pipeline, c0.pipeline);
            ASSERT_EQ(c.expert, c0.expert);
            ASSERT_EQ(c.expert_data, int(i));
            break;
        }
      }
    }
    for (int r = 0; r < W; ++r) {
      const bool member_expected = k != GroupKind::embedding || coords_of(r, l).pipeline == 0 ||
                                   coords_of(r, l).pipeline == P - 1;
      ASSERT_EQ(seen[size_t(r)], member_expected ? 1 : 0) << "rank " << r;
      if (!member_expected) {
        ASSERT_EQ(group_index(k, r, l), -1);
      }
    }
  }

  // Previous / next stage: same tensor and data index, one stage away, -1 at the ends.
  for (int r = 0; r < W; ++r) {
    RankCoords c = coords_of(r, l);
    const int prev = pipeline_prev_rank(r, l), next = pipeline_next_rank(r, l);
    if (c.pipeline == 0) {
      ASSERT_EQ(prev, -1);
    } else {
      ASSERT_EQ(prev, r - T * D);
      ASSERT_EQ(pipeline_next_rank(prev, l), r);
    }
    if (c.pipeline == P - 1) {
      ASSERT_EQ(next, -1);
    } else {
      ASSERT_EQ(next, r + T * D);
      ASSERT_EQ(pipeline_prev_rank(next, l), r);
    }
  }
}

TEST(ProcessGroups, EveryFactorizationUpTo64) {
  int layouts = 0;
  for (int world = 1; world <= 64; ++world) {
    for (const Layout& l : all_layouts(world)) {
      ASSERT_EQ(l.world(), world);
      check_layout(l);
      if (HasFatalFailure()) return;
      ++layouts;
    }
  }
  EXPECT_GT(layouts, 1000);
}

TEST(ProcessGroups, RankOrderTensorFastestThenDataThenPipeline) {
  Layout l = make_layout(16, 2, 2, 2);  // D = 4
  EXPECT_EQ(l.data, 4);
  EXPECT_EQ(rank_of(1, 0, 0, l), 1);
  EXPECT_EQ(rank_of(0, 1, 0, l), 2);
  EXPECT_EQ(rank_of(0, 0, 1, l), 8);
  EXPECT_EQ(group_members(GroupKind::tensor, l)[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(group_members(GroupKind::data, l)[0], (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(group_members(GroupKind::pipeline, l)[0], (std::vector<int>{0, 8}));
  EXPECT_EQ(group_members(GroupKind::embedding, l)[0], (std::vector<int>{0, 8}));
  EXPECT_EQ(group_members(GroupKind::expert, l)[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(group_members(GroupKind::expert, l)[1], (std::vector<int>{4, 6}));
  EXPECT_EQ(group_members(GroupKind::expert_data, l)[0], (std::vector<int>{0, 4}));
  EXPECT_EQ(group_members(GroupKind::expert_data, l)[1], (std::vector<int>{2, 6}));
  Layout three = make_layout(6, 1, 3, 1);
  EXPECT_EQ(group_members(GroupKind::embedding, three)[1], (std::vector<int>{1, 5}));
  EXPECT_EQ(group_index(GroupKind::embedding, 3, three), -1);  // middle stage
}

std::string user_error(int world, int t, int p, int e) {
  try {
    make_layout(world, t, p, e);
  } catch (const UserError& err) {
    return err.what();
  }
  return "";
}

TEST(ProcessGroups, UserErrors) {
  EXPECT_EQ(user_error(8, 3, 1, 1),
            "parallel.tensor = 3 times parallel.pipeline = 1 does not divide the world size 8 (number of ranks)");
  EXPECT_EQ(user_error(8, 2, 3, 1),
            "parallel.tensor = 2 times parallel.pipeline = 3 does not divide the world size 8 (number of ranks)");
  EXPECT_EQ(user_error(8, 2, 1, 3),
            "parallel.expert = 3 does not divide the data-parallel size 4 (world 8 / (parallel.tensor 2 * "
            "parallel.pipeline 1))");
  EXPECT_EQ(user_error(4, 0, 1, 1), "parallel.tensor = 0 must be at least 1");
  EXPECT_EQ(user_error(4, 1, -1, 1), "parallel.pipeline = -1 must be at least 1");
  EXPECT_EQ(user_error(4, 1, 1, 0), "parallel.expert = 0 must be at least 1");
  EXPECT_EQ(user_error(2, 4, 1, 1),
            "parallel.tensor = 4 times parallel.pipeline = 1 does not divide the world size 2 (number of ranks)");
  EXPECT_EQ(user_error(4, 2, 2, 1), "");
}

}  // namespace
}  // namespace trellis
