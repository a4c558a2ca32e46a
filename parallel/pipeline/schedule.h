// Pipeline schedules as data: for each stage (pipeline rank), the ordered list of instructions
// it executes in one training step. Pure functions, no communication; the engine runs any list,
// and tests/unit/pipeline_schedule_test.cpp checks every list with the simulator
// (schedule_sim.h) for deadlock, dependencies, bubble and activation memory.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace trellis {

enum class ScheduleKind {
  gpipe,        // all forwards, then all backwards
  one_f_one_b,  // PipeDream-flush: warm-up forwards, then one forward one backward, cool-down
  interleaved,  // Megatron's interleaved 1F1B over v model chunks per rank
};

// "gpipe", "1f1b", "interleaved" (the values of parallel.schedule).
const char* schedule_kind_name(ScheduleKind k);
// Throws UserError naming parallel.schedule for any other string.
ScheduleKind parse_schedule_kind(std::string_view name);

enum class PipeOp {
  recv_forward,   // activation of (micro_batch, chunk) from the previous virtual stage
  forward,
  send_forward,   // output activation to the next virtual stage
  recv_backward,  // gradient of this chunk's output from the next virtual stage
  backward,
  send_backward,  // gradient of this chunk's input to the previous virtual stage
  reduce_grads,   // once, after the last backward: start data-parallel/embedding reduction
  optimizer_step, // once, last
};
const char* pipe_op_name(PipeOp op);

// With p ranks and v chunks per rank, chunk c on rank r is global virtual stage c*p + r, so the
// last rank's chunk c sends its output to rank 0's chunk c+1. reduce_grads and optimizer_step
// concern no micro-batch: their micro_batch and chunk are -1.
struct Instruction {
  PipeOp op;
  int micro_batch = -1;  // 0..m-1
  int chunk = -1;        // 0..v-1 (0 when not interleaved)

  bool operator==(const Instruction&) const = default;
};
// e.g. "forward(mb 3, chunk 1)" or "optimizer_step".
std::string to_string(const Instruction& in);

// Checks that a schedule of this kind exists for p stages, m micro-batches per step (on each
// data-parallel rank: train.global_batch / (train.micro_batch x data-parallel size)), v chunks
// per rank and n_layers transformer blocks. Throws UserError with one line naming the keys.
// Layers need not divide evenly (splitting them is the stage partition's job): only every
// model chunk needs at least one, n_layers >= p*v.
void validate_schedule_shape(ScheduleKind kind, int p, int m, int v, int n_layers);

// For each stage 0..p-1, its instruction list for one step. Throws UserError when the shape does
// not fit (the checks of validate_schedule_shape without the layer count).
std::vector<std::vector<Instruction>> build_schedule(ScheduleKind kind, int p, int m, int v);

}  // namespace trellis
