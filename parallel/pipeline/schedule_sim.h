// Runs every stage's instruction list of a pipeline schedule together on a simulated clock, with
// no communication, and reports deadlock, violated dependencies, makespan, idle time and how
// many activations each stage holds. Model: each stage executes its list in order; forward and
// backward take fixed times (the same for every chunk, or given per virtual stage); a send never
// blocks (the engine posts it asynchronously) and is issued when the stage reaches it; a receive
// completes once the matching send has been issued, and the stage waits for it otherwise.
// Transfers take no time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace trellis {

struct SimCosts {
  SimCosts() = default;
  SimCosts(int64_t f, int64_t b) : forward(f), backward(b) {}

  int64_t forward = 1;   // time units of one forward of one chunk
  int64_t backward = 2;  // time units of one backward of one chunk
  // Per virtual stage (c*p + r for chunk c of stage r), e.g. measured times: when not empty (both
  // then hold p*v entries), they replace forward and backward, so imbalanced stages can be timed.
  std::vector<int64_t> stage_forward, stage_backward;

  int64_t forward_of(int virtual_stage) const {
    return stage_forward.empty() ? forward : stage_forward[size_t(virtual_stage)];
  }
  int64_t backward_of(int virtual_stage) const {
    return stage_backward.empty() ? backward : stage_backward[size_t(virtual_stage)];
  }
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
  // Per stage, per instruction of its list: when its event happens. forward / backward: the time
  // it ends; send: the time it is issued; receive: the time its message was sent (when it can
  // match); reduce_grads / optimizer_step: the stage's clock. -1 for what never ran (deadlock).
  std::vector<std::vector<int64_t>> event_time;

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

// ---- Communication batches (what the engine posts, and a check under NCCL semantics) ----

// One rank's step as the engine executes it: a sequence of steps, each either one compute
// instruction (forward, backward, reduce_grads, optimizer_step) or a batch of point-to-point
// instructions (send_* / recv_*) posted together as one operation (one NCCL group).
using StepPlan = std::vector<std::vector<Instruction>>;

// For each stage, its plan for `schedule` (build_schedule's lists, m micro-batches, v chunks).
// Point-to-point operations run in order on one stream per rank, so each rank's batches are
// ordered by when their messages flow in the ideal timeline (simulate_schedule with `costs`):
// every transfer goes in the batch of its send's issue time, on both sides, within a batch in a
// fixed order (kind, virtual stage, micro-batch), and the batch is posted before the first compute
// that ends after that time. Within a batch the order is the same on both sides of every pair.
// Throws UserError if the schedule deadlocks or breaks a rule in the simulator.
std::vector<StepPlan> plan_communication(const std::vector<std::vector<Instruction>>& schedule, int m, int v,
                                         const SimCosts& costs = {});

struct BatchCheck {
  bool deadlock = false;
  std::vector<std::string> stuck;   // when deadlocked: each stuck stage's next batch and compute
  std::vector<std::string> errors;  // malformed plans: missing/duplicate ops, order mismatches
  bool ok() const { return !deadlock && errors.empty(); }
  std::string report() const;
};

// Executes `plans` (one per stage, for `schedule`'s shape: p = plans.size(), m, v) under a model
// of in-order point-to-point execution and reports deadlock. Every instruction of schedule[r]
// must appear in plans[r] exactly once, computes in list order. Model, per rank: the host posts
// batches and computes in plan order without blocking. `device` (NCCL): the batches run in post
// order on one comm stream; a batch starts when the previous one has completed and every compute
// posted before it has completed (the engine orders the comm stream after the compute stream);
// it completes when, for every op in it, the peer's batch holding the counterpart has started
// (a send completes only together with its receive). Computes run in order on the compute
// stream; a forward waits for the batch receiving its input, a backward for the batch receiving
// its output gradient and the batch sending its forward's output (the engine frees that buffer
// at backward), reduce_grads for every batch. Host (`device` false, MPI): a batch completes
// once every counterpart is posted (host program order reached it), and a compute runs once its
// batches have completed. Also checked: per ordered pair of ranks, the i-th send matches the i-th
// receive (NCCL matches in order, without tags); a send is posted after the compute producing its
// data, a receive before the compute consuming it.
BatchCheck check_batches(const std::vector<std::vector<Instruction>>& schedule, const std::vector<StepPlan>& plans,
                         int m, int v, bool device);

}  // namespace trellis
