// How long each forward and backward of one pipeline rank takes in a step, per model chunk: the
// measured stage costs that show imbalance between stages and feed the schedule simulator
// (schedule_sim.h). Each call is bracketed by two PhaseMarks (core/phase_marks.h): events on the
// compute stream on a GPU, so nothing synchronizes during the step; the host clock on the CPU,
// where ops run synchronously.
#pragma once
#include <vector>

#include "core/phase_marks.h"
#include "parallel/pipeline/schedule.h"

namespace trellis {

class Runtime;

// Per chunk of this rank (index = chunk): the step's summed time in ms, and how many calls.
struct StageTiming {
  std::vector<double> forward_ms, backward_ms;
  std::vector<int> forwards, backwards;
};

class StageTimer {
 public:
  // Room for one step of m micro-batches through v chunks: every mark is made here, so timing
  // allocates nothing during a step.
  StageTimer(Runtime& rt, int m, int v);

  // Forgets what was timed before: call once per step, before its first forward.
  void clear();
  // Bracket the forward or backward (`op`) of (mb, chunk).
  void start(PipeOp op, int mb, int chunk);
  void stop(PipeOp op, int mb, int chunk);
  // What was timed since clear(); only after a synchronize that covers the step.
  StageTiming timing() const;

 private:
  // The first of the call's two marks.
  int mark_of(PipeOp op, int mb, int chunk) const;

  int m_, v_;
  PhaseMarks marks_;
  std::vector<bool> timed_;  // per call (mark_of / 2): stopped since clear()
};

}  // namespace trellis
