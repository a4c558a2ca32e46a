// The pipeline engine: runs one stage's instruction list (schedule.h) for one step. It moves
// activations and their gradients between ranks of the pipeline group and calls into the stage
// model through StageModel, so it knows nothing of GPT. Sends are posted asynchronously (the
// schedules deadlock with blocking sends); a gradient buffer goes back to the pool as soon as its
// send is seen complete (CommHandle::test at each batch and before the pool grows; no host wait).
// Transfers are posted in batches that cannot deadlock on an in-order NCCL stream (see run_step).
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
#include "parallel/pipeline/schedule_sim.h"

namespace trellis {

class GradientReduction;  // parallel/data/gradient_sync.h

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
  GradientReduction* data = nullptr;  // over the data group; null when it is one rank
  bool overlap = true;  // start buckets during the last backward of each chunk (always when every_micro_batch)
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
  // reduction and then sums the tied gradients over their group. Transfers are posted in batches,
  // each one operation (Communicator::batch_p2p_async: one NCCL group on the GPU), in the order of
  // plan_for(list): on the GPU point-to-point operations run in order on one communication stream
  // and a send completes only once its receiver's batch runs, and that plan is checked free of
  // deadlock under exactly this model (check_batches, tests/unit/pipeline_schedule_test.cpp). The
  // same plan runs on the CPU (MPI), where it cannot deadlock either (the host model is weaker).
  void run_step(const std::vector<Instruction>& list, StageModel& model, const PipelineReduction& reduction);
  // Forward only (validation) over m micro-batches, one at a time through every chunk.
  void run_forward(int m, StageModel& model);

  // The most (micro-batch, chunk) pairs whose forward is done and backward is not, over `list`:
  // how many saved states the model needs.
  static int peak_in_flight(const std::vector<Instruction>& list);
  // How the engine runs `list` on rank r of p with v chunks: when `list` is rank r's list of a
  // built-in schedule (build_schedule of some kind, m = forwards / v), that schedule's
  // plan_communication; otherwise one batch per run of consecutive transfers, in list order.
  static StepPlan plan_for(const std::vector<Instruction>& list, int p, int r, int v);

  // Transfer buffers (received activations, gradients) allocated so far, each of `shape`: the pool
  // only grows, so this is its peak over all steps run.
  int buffer_count() const { return int(grad_bufs_.size()); }

 private:
  struct GradBuffer {
    Buffer buf;
    Tensor t;
    bool busy = false;
    std::shared_ptr<CommHandle> send;  // pending send of this buffer: free once it is complete
  };
  using Handle = std::shared_ptr<CommHandle>;  // shared when a send and a recv were posted together
  int key(int mb, int chunk) const { return mb * v_ + chunk; }
  bool first_virtual(int chunk) const { return chunk * p_ + r_ == 0; }
  bool last_virtual(int chunk) const { return chunk * p_ + r_ == p_ * v_ - 1; }
  GradBuffer* acquire_grad();
  void reclaim_sent();  // buffers whose send has completed back to the pool; never blocks
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
  std::map<int, GradBuffer*> inputs_;  // received activations, copied into the model at forward
  std::vector<Instruction> planned_list_;  // the list plan_ was made for
  StepPlan plan_;
};

}  // namespace trellis
