// train_gpt --plan: what a layout would hold on each rank and compute each step, printed without
// training, for any world size (a study of layouts for 64 GPUs runs on a laptop).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/process_groups.h"
#include "launcher/comm_plan.h"
#include "launcher/memory_plan.h"
#include "launcher/resolved_run.h"
#include "launcher/train_config.h"

namespace trellis {

// A config planned on `world` ranks: each pipeline stage's memory per rank and what a rank sends a step.
struct StagePlans {
  Config cfg;               // as planned: a GPU config on a machine without one is planned as on GPUs (bf16)
  bool gpu_target = false;  // train.device is cuda or auto
  bool gpu_here = false;    // ... and this machine has a GPU
  Resolved res;
  Layout layout;
  std::vector<RankMemoryPlan> stages;  // by pipeline stage
  std::vector<RankCommPlan> comm;      // by pipeline stage
  size_t largest() const;              // the largest stage's device bytes
  int largest_stage() const;
};

// Throws UserError when the layout does not fit the world or the model (the lines a run would give).
StagePlans plan_stages(const Config& cfg, int world);

// What --plan prints the fit against: --device-memory GIB when given (> 0), else this machine's
// first GPU's free memory where there is one; none (0 bytes) otherwise.
struct MemoryBudget {
  size_t bytes = 0;
  std::string where;        // names it in the output
  double peak_flops = 0;    // this machine's GPU's, when the budget is its memory
};
MemoryBudget memory_budget(const StagePlans& plans, double device_memory_gib);

// Prints the plan of `cfg` on `world` ranks to stdout. Throws UserError when the layout does not
// fit the world or the model (the same lines a run would give).
void print_plan(const Config& cfg, int world, double device_memory_gib);

}  // namespace trellis
