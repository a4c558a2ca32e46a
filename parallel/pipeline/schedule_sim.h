// Runs every stage's instruction list of a pipeline schedule together on a simulated clock, with
// no communication, and reports deadlock, violated dependencies, makespan, idle time and how
// many activations each stage holds. Model: each stage executes its list in order; forward and
// backward take fixed times (per model chunk); a send never blocks (the engine posts it
// asynchronously) and is issued when the stage reaches it; a receive completes once the matching
// send has been issued, and the stage waits for it otherwise. Transfers take no time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace trellis {

struct SimCosts {
  int64_t forward = 1;   // time units of one forward of one chunk
  int64_t backward = 2;  // time units of one backward of one chunk
};

struct SimResult {
  bool deadlock = false;
  std::vector<std::string> stuck;   // when deadlocked: each unfinished stage's waiting instruction
  std::vector<std::string> errors;  // broken rules: dependencies, exactly-once, send/recv matching
  int64_t makespan = 0;             // time at which the last stage finishes
  std::vector<int64_t> busy;        // per stage: time spent in forward and backward
  std::vector<int64_t> idle;        // per stage: makespan - busy
  // Per stage: the most (micro-batch, chunk) pairs whose forward is done and backward is not,
  // at any moment; a pair holds 1/v of a stage's activations for one micro-batch.
  std::vector<int> peak_activations;

  bool ok() const { return !deadlock && errors.empty(); }
  std::string report() const;  // errors and stuck instructions, one per line
};

// schedule[r] is stage r's list; m micro-batches, v chunks per stage (as given to build_schedule).
// Checked: forward of (mb, virtual stage s) starts after forward of (mb, s-1) ends and after this
// stage received its input; backward of (mb, s) starts after backward of (mb, s+1) ends, after
// its own forward and after receiving its output gradient; each forward and backward of every
// (mb, chunk) runs exactly once on its stage; sends follow the computation they send; every
// message is received, and between any two stages the receives come in the order of the sends
// (what in-order point-to-point matching, as in NCCL, needs); reduce_grads once after the last
// backward, optimizer_step once, last.
SimResult simulate_schedule(const std::vector<std::vector<Instruction>>& schedule, int m, int v,
                            const SimCosts& costs = {});

}  // namespace trellis
