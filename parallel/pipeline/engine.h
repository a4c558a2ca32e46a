// The pipeline engine: runs one stage's instruction list (schedule.h) for one step. It moves
// activations and their gradients between ranks of the pipeline group and calls into the stage
// model through StageModel, so it knows nothing of GPT. Sends are posted asynchronously and
// waited only when their buffer is to be reused (the schedules deadlock with blocking sends).
// On the GPU a send immediately followed by a receive is posted as one group (see run_step).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"
#include "parallel/pipeline/schedule.h"

namespace trellis {

class GradientSync;

// One rank's share of the model as the engine sees it: v chunks, each run on one micro-batch at a
// time. Between forward and backward of a (micro-batch, chunk) the model keeps what backward needs.
class StageModel {
 public:
  // Called with [begin, end) ranges of the flat gradient buffer that are final for this step.
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;

  virtual ~StageModel() = default;
  // Reserves the saved state of (mb, chunk) and returns where its input activation, received from
  // the previous virtual stage, goes. It stays valid until backward or discard of (mb, chunk).
  virtual Tensor input(int mb, int chunk) = 0;
  // Forward of (mb, chunk); the first virtual stage reads its own data (no input() call), the last
  // computes the loss (and, when training, the loss gradient). Returns the output activation for
  // the next virtual stage (valid until backward or discard), undefined at the last one.
  virtual Tensor forward(int mb, int chunk, bool training) = 0;
  // grad holds the gradient of (mb, chunk)'s output on entry (its content is ignored at the last
  // virtual stage) and that of its input on return. Adds the parameter gradients, reports final
  // ranges to `ready` (when given) and releases the saved state.
  virtual void backward(int mb, int chunk, const Tensor& grad, const GradsReady& ready) = 0;
  // Releases the saved state of (mb, chunk) after a forward without backward.
  virtual void discard(int mb, int chunk) = 0;
};

// Gradient reduction at the end of a step (reduce_grads).
struct PipelineReduction {
  GradientSync* data = nullptr;  // data-parallel all-reduce; null when the data group is one rank
  bool overlap = true;           // start buckets during the last backward of each chunk
  Communicator* tied = nullptr;  // group summing tied parameters' gradients (embedding group)
  std::vector<Tensor> tied_grads;  // e.g. the word embedding's gradient on the first and last stage
};

class PipelineEngine {
 public:
  // `pipeline`: this rank's pipeline group (rank r = stage r); v chunks per rank; activations and
  // gradients crossing stages have `shape` and `dtype`.
  PipelineEngine(Runtime& rt, Communicator& pipeline, int v, const Shape& shape, DType dtype);
  ~PipelineEngine();

  // Runs `list` (this rank's instructions for one training step) up to optimizer_step, which is
  // left to the caller (it needs the global gradient norm). reduce_grads waits for the data-parallel
  // reduction and then sums the tied gradients over their group. On the GPU, point-to-point
  // operations run in order on one communication stream and a send there completes only once
  // its receiver's recv runs, so a send directly followed by a receive is posted as one group (as
  // Megatron's batched p2p): without it both neighbours of 1F1B's steady state send first and
  // wait for each other. This is enough for GPipe and 1F1B but not for the interleaved lists
  // (a stream-level model of the schedules deadlocks when m > p), which the trainer refuses on
  // the GPU. On the CPU (MPI) sends never block and nothing is grouped: grouping would make the
  // receive's wait also wait for the send, which deadlocks the interleaved lists there too.
  void run_step(const std::vector<Instruction>& list, StageModel& model, const PipelineReduction& reduction);
  // Forward only (validation) over m micro-batches, one at a time through every chunk.
  void run_forward(int m, StageModel& model);

  // The most (micro-batch, chunk) pairs whose forward is done and backward is not, over `list`:
  // how many saved states the model needs.
  static int peak_in_flight(const std::vector<Instruction>& list);

 private:
  struct GradBuffer {
    Buffer buf;
    Tensor t;
    bool busy = false;
    std::shared_ptr<CommHandle> send;  // pending send of this buffer, waited before reuse
  };
  using Handle = std::shared_ptr<CommHandle>;  // shared when a send and a recv were posted together
  int key(int mb, int chunk) const { return mb * v_ + chunk; }
  bool first_virtual(int chunk) const { return chunk * p_ + r_ == 0; }
  bool last_virtual(int chunk) const { return chunk * p_ + r_ == p_ * v_ - 1; }
  GradBuffer* acquire_grad();
  void release_all_sends();

  Runtime& rt_;
  Communicator& comm_;
  int p_, r_, v_;
  int next_, prev_;  // peers in the pipeline group (ring: the last rank feeds rank 0's next chunk)
  Shape shape_;
  DType dtype_;
  std::vector<std::unique_ptr<GradBuffer>> grad_bufs_;
  // Per (mb, chunk) in flight.
  std::map<int, Handle> recv_fwd_, recv_bwd_, send_fwd_;
  std::map<int, Tensor> outputs_;
  std::map<int, GradBuffer*> grads_;
};

}  // namespace trellis
