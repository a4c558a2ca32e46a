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
  split.moe.expert_parallel = 1;  // per-rank pieces are written without expert parallelism (ZeRO refuses it)
  const WholeModelLayout layout(split, l.pipeline, l.virtual_stages, l.tensor);
  const Layout ranks{l.tensor, l.pipeline, l.data};
  const size_t e = elem_size;
  std::vector<char> whole(size_t(layout.whole_numel()) * e);
  for (int pr = 0; pr < l.pipeline; ++pr) {
    const std::vector<ParameterSpec>& stage = layout.stage[size_t(pr)];
    if (std::none_of(stage.begin(), stage.end(), [&](const ParameterSpec& p) { return needed(p.name); })) continue;
    for (int tr = 0; tr < l.tensor; ++tr) {
      const std::vector<ParameterBucket> buckets = plan_buckets(layout.shard_of(pr, tr), l.data);
      int64_t owned = 0;
      for (const ParameterBucket& b : buckets) owned += b.piece;
      std::vector<char> shard(size_t(layout.shard_numel(pr, tr)) * e);
      for (int d = 0; d < l.data; ++d) {
        const std::vector<char> pieces = read(rank_of(tr, d, pr, ranks), owned);
        // Bucket b's piece d holds its elements [d * piece, (d + 1) * piece), padding past numel.
        int64_t at = 0, first = 0;  // in the pieces; the bucket's first element in the shard
        for (const ParameterBucket& b : buckets) {
          const int64_t real = std::clamp<int64_t>(b.numel - d * b.piece, 0, b.piece);
          if (real > 0)
            std::memcpy(shard.data() + size_t(first + d * b.piece) * e, pieces.data() + size_t(at) * e, size_t(real) * e);
          at += b.piece;
          first += b.numel;
        }
      }
      place_shard(layout, pr, tr, shard.data(), whole, e);
    }
  }
  return whole;
}

}  // namespace trellis
