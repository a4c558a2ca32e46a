// Optimizer state that ZeRO stages >= 1 save per rank (each data rank's pieces of every bucket of
// its stage's tensor-parallel shard, parallel/zero/optimizer.h) put back into the whole model's
// layout (launcher/whole_model.h), so that a run on another layout (tensor, pipeline, virtual
// stages, data size, ZeRO stage) takes its own pieces from it as from a checkpoint written whole.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace trellis {

// The layout whose ranks wrote the pieces: which elements each world rank holds.
struct PieceLayout {
  int tensor = 1, pipeline = 1, virtual_stages = 1, data = 1;
  int expert = 1;  // parallel.expert: the experts' pieces are cut over the data / expert ranks
  std::vector<int> stage_layers;  // blocks per virtual stage, as that run split the model
};

// The whole-model copy (elem_size bytes an element) of one optimizer tensor of `model` written per
// rank under `l`, filled where `needed(parameter name)` (zeros elsewhere). `read(world_rank, numel)`
// returns that rank's blob of numel elements (and throws when it cannot); the blobs of the stages
// that hold nothing needed are not read, the others once each, one at a time.
std::vector<char> whole_from_pieces(const GPTConfig& model, const PieceLayout& l, size_t elem_size,
                                    const std::function<std::vector<char>(int world_rank, int64_t numel)>& read,
                                    const std::function<bool(const std::string& name)>& needed);

}  // namespace trellis
