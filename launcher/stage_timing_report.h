// Per-stage compute times of a step for the metrics record: every pipeline rank's StageTiming
// (parallel/pipeline/stage_timing.h) gathered to rank 0 of the pipeline group, by virtual stage.
#pragma once
#include "core/comm.h"
#include "launcher/metrics.h"
#include "parallel/pipeline/stage_timing.h"

namespace trellis {

// Collective over `pipeline` (every rank calls it with its own timing, v chunks each). On the
// group's rank 0: {"forward_ms": [...], "backward_ms": [...], "micro_batches": m}, the step's
// summed ms per virtual stage (chunk c of pipeline rank r is virtual stage c*p + r) over its m
// micro-batches; an empty object on the other ranks.
JsonObject gather_stage_timing(const StageTiming& local, const Communicator& pipeline);

}  // namespace trellis
