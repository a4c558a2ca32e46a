// ZeRO stages 1-3 during a step: every bucket's gradients are reduce-scattered (summed) over the
// data group into this rank's piece (ZeroOptimizer::owned_grads), on the communication stream,
// overlapping the rest of backward.
//   Stage 1: each bucket once per step, as soon as its gradients are final.
//   Stage 2: a transformer block's gradients exist only in one of two slots, bound just before
//            its backward and reduce-scattered right after it, after every micro-batch (added to
//            the piece), so no full gradient buffer is kept. The other buckets (embeddings, final
//            LayerNorm) stay whole and are reduced as at stage 1.
//   Stage 3: also a block's parameters: all-gathered from the pieces into one of two slots just
//            before its forward and its backward, the next block's gathered meanwhile.
// Under expert parallelism a block's experts are a bucket of their own, cut over the expert-data
// group (ZeroOptimizer::group_of): streamed the same way through two slots of their own (when that
// group has one rank, kept whole and reduced as at stage 1).
// A slot is reused only once the compute stream has waited for its last reduction (no host wait).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/parameters.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/zero/block_hooks.h"
#include "parallel/zero/optimizer.h"

namespace trellis {

class ZeroStreaming final : public GradientReduction, public BlockHooks {
 public:
  // The optimizer must be sharded (stage >= 1), with `params` its store.
  ZeroStreaming(Runtime& rt, ParameterStore& params, ZeroOptimizer& optimizer);

  bool every_micro_batch() const override { return stage_ >= 2; }
  void begin() override;
  void ready(int64_t begin, int64_t end, bool final) override;
  void finish() override;
  // Stage 1: finish() calls f(b) for every bucket b, in the order their reductions started, right
  // after the compute stream has waited for b's reduction: work on a final piece (the gradient
  // norm's squares) then runs while later buckets still reduce.
  void on_reduced(std::function<void(int bucket)> f);

  void before_forward(int bucket, int next) override;
  void after_forward(int bucket) override;
  void before_backward(int bucket, int next) override;
  void after_backward(int bucket) override;

  // The parameters changed (optimizer step, checkpoint load): gathered copies are stale.
  void parameters_changed();
  // Bytes of the slots and receive buffers.
  size_t buffer_bytes() const;
  // What buffer_bytes() will be, before the store exists: for the largest streamed bucket of each
  // kind (`block` elements of a block's, `experts` of a block's experts, 0 if none is streamed),
  // cut over `shards` / `expert_shards` ranks, with `dtype` parameters.
  static size_t planned_bytes(int64_t block, int64_t experts, int stage, int shards, int expert_shards, DType dtype);

 private:
  struct GradSlot {
    Buffer buf, recv_buf;
    Tensor grads, recv;  // a block's padded gradients; this rank's piece of their sum
    int bound = -1;      // the bucket whose backward writes it now
    int reducing = -1;   // the bucket whose reduce-scatter into recv is pending
    CommHandle handle;
    uint64_t started = 0;  // when the reduction started (oldest first)
  };
  struct ValueSlot {
    Buffer buf;
    Tensor values;
    int bucket = -1;  // the bucket gathered (or being gathered) into it
    bool in_use = false;
    CommHandle gather;
  };
  // The slots of one kind of bucket: the blocks', or their experts'.
  struct Pool {
    std::vector<GradSlot> grads;
    std::vector<ValueSlot> values;
  };
  struct Progress {
    int64_t ready = 0;  // elements reported ready since the last reduction
    bool started = false;
    CommHandle handle;
  };
  void start_whole(int b);  // a bucket kept whole: its padded gradients into the piece
  void retire(GradSlot& s);  // waits for the slot's reduction and adds it into the piece
  Pool& pool_of(int bucket);
  ValueSlot* value_slot_of(int bucket);
  ValueSlot* free_value_slot(int bucket, int keep);  // in bucket's pool
  void start_gather(ValueSlot& s, int bucket);
  void acquire_values(int bucket, int next);
  void release_values(int bucket);

  Runtime& rt_;
  ParameterStore& params_;
  ZeroOptimizer& optimizer_;
  int stage_;
  std::vector<Progress> progress_;  // per bucket
  std::vector<int> started_;        // buckets in the order their reductions started this step
  std::function<void(int)> on_reduced_;
  Pool pools_[2];  // the blocks' buckets, their experts'
  uint64_t clock_ = 0;
};

}  // namespace trellis
