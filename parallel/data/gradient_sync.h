// Data-parallel gradient reduction (ZeRO stage 0): the flat gradient buffer is cut into buckets
// at parameter boundaries, in backward order; a bucket is all-reduced (summed) over the data group
// as soon as every gradient in it is final, overlapping the rest of backward. Gradients are
// already scaled by 1/(global tokens), so the sum is the exact global mean. With a 16-bit reduce
// dtype a bucket is cast into a 16-bit copy, reduced in that copy (half the bytes on the wire) and
// cast back: cheaper communication for one rounding of each rank's gradient.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"
#include "core/tensor.h"

namespace trellis {

// What the pipeline engine drives during a step's backward: a reduction of the gradients over the
// data group (GradientSync here; ZeRO stages 1-3 in parallel/zero/streaming.h).
class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  // True: ready() after every micro-batch's backward (gradients that live in streamed slots);
  // false: only after the last one of each chunk, when the gradients are final for the step.
  virtual bool every_micro_batch() const { return false; }
  // Before the first backward that reports.
  virtual void begin() = 0;
  // Gradients in [begin, end) of the flat layout are complete for this micro-batch; `final`: for
  // the step (the chunk's last backward).
  virtual void ready(int64_t begin, int64_t end, bool final) = 0;
  // Starts what is left and waits for all of it (on the device: the compute stream waits).
  virtual void finish() = 0;
};

class GradientSync final : public GradientReduction {
 public:
  // param_ranges: [begin, end) element ranges of the parameters, in buffer order.
  // reduce_dtype: the gradients' own dtype, or bf16/f16 to reduce in a 16-bit copy.
  // own_bucket: one parameter's range that gets a bucket to itself (none when empty), so it can be
  // reduced apart from its neighbours (EmbeddingRowExchange's token embedding).
  // expert: per parameter range, whether it is an expert's (expert parallelism: held by the ranks of
  // `expert_data` only, so summed over that group; buckets hold experts' or others', never both).
  GradientSync(Runtime& rt, Communicator& data_group, const Tensor& flat_grads,
               const std::vector<std::pair<int64_t, int64_t>>& param_ranges, size_t bucket_bytes,
               DType reduce_dtype, std::pair<int64_t, int64_t> own_bucket = {0, 0},
               const std::vector<bool>& expert = {}, Communicator* expert_data = nullptr);
  ~GradientSync() override;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Call before the backward whose gradients are to be reduced (the last micro-batch of a step).
  void begin() override;
  // Gradients in [begin, end) are final: start the reduction of buckets that became complete.
  void ready(int64_t begin, int64_t end, bool final = true) override;
  // Starts what is left and waits for all buckets (on the device: the compute stream waits).
  void finish() override;
  // Waits for the bucket of exactly [begin, end) (started by ready()), as finish() would.
  void wait_for(int64_t begin, int64_t end);

  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;
    int64_t ready = 0;
    Communicator* comm = nullptr;  // the data group, or the expert-data group for experts' buckets
    bool started = false;
    bool completed = false;  // waited for (and cast back) this step
    CommHandle handle;
  };
  // What the buckets' all-reduces sum: the 16-bit copy, else the gradients.
  const Tensor& reduced() const { return wire_.defined() ? wire_ : grads_; }
  void start(Bucket& b);
  void complete(Bucket& b);  // waits for b's reduction, cast back from the 16-bit copy

  Runtime& rt_;
  Communicator& comm_;
  Tensor grads_;
  Buffer wire_buf_;  // the 16-bit copy, when the reduce dtype differs from the gradients'
  Tensor wire_;
  std::vector<Bucket> buckets_;  // in backward order: the last parameters first
};

}  // namespace trellis
