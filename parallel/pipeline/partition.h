// Splitting a model's layers into contiguous pipeline chunks (virtual stages), balanced by cost.
// Pure function, no model knowledge: the caller gives each layer's cost and the extra cost of the
// first chunk (e.g. the embedding) and of the last (e.g. final norm, head and loss).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace trellis {

// Layers [begin, end) of one chunk.
using LayerRange = std::pair<int, int>;

// Splits layers 0..n-1 (n = layer_costs.size()) into `parts` contiguous, non-empty chunks in
// order. Chunk 0 also costs first_extra, chunk parts-1 last_extra. The split minimizes the most
// expensive chunk (the pipeline runs at the pace of its slowest stage); among those, it minimizes
// the sum of squared chunk costs (so the other chunks are balanced too); among those, earlier
// chunks get fewer layers (under 1F1B they hold more micro-batches' activations). Requires
// 1 <= parts <= n (fatal otherwise: validate_schedule_shape reports it to the user first).
std::vector<LayerRange> partition_layers(const std::vector<int64_t>& layer_costs, int parts, int64_t first_extra,
                                         int64_t last_extra);

// Chunk c of rank r when `chunks` (p * v of them, in virtual-stage order) are spread over p ranks
// with v chunks each: global virtual stage c * p + r.
inline LayerRange chunk_of_rank(const std::vector<LayerRange>& chunks, int p, int rank, int c) {
  return chunks[std::size_t(c * p + rank)];
}

}  // namespace trellis
