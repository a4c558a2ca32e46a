// What one rank of a layout sends a training step, by process group, estimated before launching it
// (`train_gpt --plan` and `--layouts`): the bytes the step record's comm_bytes counts (ring
// algorithms: an all-reduce of S bytes 2(n-1)/n S, a reduce-scatter or all-gather (n-1)/n S), from
// the collectives the model, the pipeline schedule and ZeRO issue. tests/e2e/comm_bytes_test.py
// holds it against runs. Not counted: the per-step scalars (loss, norm) and ZeRO's bucket padding.
#pragma once
#include <cstdint>

#include "core/process_groups.h"
#include "launcher/comm_tally.h"
#include "launcher/train_config.h"
#include "models/gpt.h"
#include "parallel/tensor/context.h"

namespace trellis {

struct RankCommPlan {
  double tensor = 0, data = 0, pipeline = 0, embedding = 0, expert = 0, expert_data = 0;
  // Rounded to bytes, in the tally's group order: printed as a run's closing lines print what it sent.
  CommTally::ByKind by_kind() const;
};

// Pipeline rank `stage` of `layout` (every tensor, data and expert rank of a stage alike), with
// `accumulation` micro-batches a step per data rank.
RankCommPlan plan_rank_comm(const Config& cfg, const GPTConfig& mc, const Layout& layout, int stage,
                            const TensorParallelContext& tp, int64_t accumulation);

}  // namespace trellis
