// Balanced contiguous partition by dynamic programming: first the smallest possible maximum chunk
// cost, then, under that bound, the smallest sum of squares.
#include "parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace trellis {

std::vector<LayerRange> partition_layers(const std::vector<int64_t>& layer_costs, int parts, int64_t first_extra,
                                         int64_t last_extra) {
  const int n = int(layer_costs.size());
  TRELLIS_CHECK(parts >= 1 && parts <= n, "partition_layers: " + std::to_string(n) + " layers into " +
                                              std::to_string(parts) + " chunks");
  std::vector<int64_t> prefix(size_t(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + layer_costs[size_t(i)];
  // Cost of chunk j holding layers [b, e).
  auto cost = [&](int j, int b, int e) {
    return prefix[size_t(e)] - prefix[size_t(b)] + (j == 0 ? first_extra : 0) + (j == parts - 1 ? last_extra : 0);
  };
  // Suffix tables over (first chunk j, first layer i) of chunks j..parts-1 covering layers i..n-1:
  // the smallest maximum cost, then (under a bound) the smallest sum of squares and its first cut.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  auto at = [&](int j, int i) { return size_t(j) * size_t(n + 1) + size_t(i); };
  std::vector<int64_t> best_max(size_t(parts + 1) * size_t(n + 1), kNone);
  best_max[at(parts, n)] = 0;
  for (int j = parts - 1; j >= 0; --j)
    for (int i = 0; i < n; ++i)
      for (int e = i + 1; e <= n - (parts - 1 - j); ++e) {
        const int64_t rest = best_max[at(j + 1, e)];
        if (rest == kNone) continue;
        best_max[at(j, i)] = std::min(best_max[at(j, i)], std::max(cost(j, i, e), rest));
      }
  const int64_t bound = best_max[at(0, 0)];

  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best_sq(best_max.size(), kInf);
  std::vector<int> cut(best_max.size(), -1);
  best_sq[at(parts, n)] = 0;
  for (int j = parts - 1; j >= 0; --j)
    for (int i = 0; i < n; ++i)
      for (int e = i + 1; e <= n - (parts - 1 - j); ++e) {  // fewest layers first: strict < keeps it
        const int64_t c = cost(j, i, e);
        if (c > bound || best_sq[at(j + 1, e)] == kInf) continue;
        const double sq = double(c) * double(c) + best_sq[at(j + 1, e)];
        // A relative margin so that rounding never breaks a tie in favour of more layers first.
        if (sq < best_sq[at(j, i)] * (1 - 1e-12)) {
          best_sq[at(j, i)] = sq;
          cut[at(j, i)] = e;
        }
      }
  std::vector<LayerRange> out;
  for (int j = 0, i = 0; j < parts; ++j) {
    const int e = cut[at(j, i)];
    TRELLIS_CHECK(e > i, "partition_layers: no split found");
    out.emplace_back(i, e);
    i = e;
  }
  return out;
}

}  // namespace trellis
