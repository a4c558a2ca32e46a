// The whole model's flat layout (one rank's parameter order: wte, wpe, h.0 ... h.L-1, lnf) and
// moving pipeline stages' flat tensors (parameters, master weights, Adam moments) to and from it.
// Checkpoints and weight exports are written in this layout, so they do not depend on the
// pipeline size: a run can resume with another one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/parameters.h"
#include "core/runtime.h"
#include "models/gpt.h"

namespace trellis {

struct WholeModelLayout {
  // p pipeline ranks with v chunks each (p = 1: the whole model on one rank).
  WholeModelLayout(const GPTConfig& cfg, int p, int v);

  std::vector<ParameterSpec> whole;               // the whole model's parameters, in buffer order
  std::vector<std::vector<ParameterSpec>> stage;  // each pipeline rank's parameters, in buffer order
  int64_t whole_numel() const;
  int64_t stage_numel(int rank) const;
  int pipeline() const { return int(stage.size()); }
};

// Pipeline rank 0 gets the whole-model host copy (bytes, in t's dtype) of the flat tensors `t` of
// every rank of `pipeline`; every other rank sends its `t` and gets an empty vector. The token
// embedding is taken from the first stage (the last one holds an identical copy). Collective over
// `pipeline` (which may be null when there is one stage).
std::vector<char> gather_whole(Runtime& rt, Communicator* pipeline, const WholeModelLayout& layout, const Tensor& t);

// Fills this pipeline rank's flat tensor `t` from a whole-model host copy (bytes in t's dtype).
void scatter_whole(Runtime& rt, const WholeModelLayout& layout, int rank, const std::vector<char>& whole,
                   const Tensor& t);

}  // namespace trellis
