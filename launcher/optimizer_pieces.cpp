// Reassembling per-rank optimizer state: pieces -> stage shard (the store's bucket plan for the
// data size that wrote them) -> whole model (by parameter name).
#include "launcher/optimizer_pieces.h"

#include <algorithm>
#include <cstring>

#include "core/parameters.h"
#include "core/process_groups.h"
#include "launcher/whole_model.h"

namespace trellis {

std::vector<char> whole_from_pieces(const GPTConfig& model, const PieceLayout& l, size_t elem_size,
                                    const std::function<std::vector<char>(int world_rank, int64_t numel)>& read,
                                    const std::function<bool(const std::string& name)>& needed) {
  GPTConfig split = model;
  split.stage_layers = l.stage_layers;
  split.moe.expert_parallel = l.expert;
  const WholeModelLayout layout(split, l.pipeline, l.virtual_stages, l.tensor);
  const Layout ranks{l.tensor, l.pipeline, l.data};
  const int G = l.expert;  // data rank d holds expert rank d % G's experts, their pieces as rank d / G
  const size_t e = elem_size;
  std::vector<char> whole(size_t(layout.whole_numel()) * e);
  for (int pr = 0; pr < l.pipeline; ++pr) {
    const std::vector<ParameterSpec>& stage = layout.stage[size_t(pr)];
    if (std::none_of(stage.begin(), stage.end(), [&](const ParameterSpec& p) { return needed(p.name); })) continue;
    for (int tr = 0; tr < l.tensor; ++tr) {
      // The stage's parts of tensor rank tr (one per expert rank): each holds the other parameters
      // (the same buckets on every expert rank) and its own experts.
      std::vector<std::vector<ParameterBucket>> buckets;
      std::vector<std::vector<char>> shard;
      for (int g = 0; g < G; ++g) {
        buckets.push_back(plan_buckets(layout.shard_of(pr, tr * G + g), l.data, l.data / G));
        shard.emplace_back(size_t(layout.shard_numel(pr, tr * G + g)) * e);
      }
      int64_t owned = 0;
      for (const ParameterBucket& b : buckets[0]) owned += b.piece;
      for (int d = 0; d < l.data; ++d) {
        const std::vector<char> pieces = read(rank_of(tr, d, pr, ranks), owned);
        // Bucket b's piece i holds its elements [i * piece, (i + 1) * piece), padding past numel.
        int64_t at = 0, first = 0;  // in the pieces; the bucket's first element in the part
        for (const ParameterBucket& b : buckets[size_t(d % G)]) {
          const int64_t i = b.expert ? d / G : d;
          const int64_t real = std::clamp<int64_t>(b.numel - i * b.piece, 0, b.piece);
          for (int g = 0; g < G && real > 0; ++g)  // the others' pieces are every part's
            if (b.expert ? g == d % G : true)
              std::memcpy(shard[size_t(g)].data() + size_t(first + i * b.piece) * e, pieces.data() + size_t(at) * e,
                          size_t(real) * e);
          at += b.piece;
          first += b.numel;
        }
      }
      for (int g = 0; g < G; ++g) place_shard(layout, pr, tr * G + g, shard[size_t(g)].data(), whole, e);
    }
  }
  return whole;
}

}  // namespace trellis
