// The mixed-precision AdamW optimizer over a flat parameter buffer. Stage 0: every rank holds the
// full fp32 master weights and moments. Stage 1 (over a data group of N > 1 ranks): the flat
// buffers are padded with zeros to N·s elements (ParameterStore's pad_multiple = N) and data rank r
// owns the contiguous slice [r·s, (r+1)·s): its fp32 master weights (16-bit parameters; fp32
// parameters are their own master), Adam moments and reduced gradients. Gradients are
// reduce-scattered (summed) into the slice once per step, each rank updates its slice, and the
// updated parameters are all-gathered into every rank's full buffer.
#pragma once
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/ops.h"
#include "core/parameters.h"

namespace trellis {

// The slice of a flat buffer of n elements that rank `rank` of `ranks` owns: the buffer padded to
// ranks·size elements, size = ceil(n / ranks); [begin, end) = [rank·size, (rank+1)·size) ∩ [0, n)
// are its real elements (the last ranks' slices may end in padding, or be all padding).
struct ShardRange {
  int64_t size = 0, begin = 0, end = 0;
  int64_t numel() const { return end - begin; }
};
ShardRange shard_range(int64_t n, int ranks, int rank);

class ZeroOptimizer {
 public:
  // `data`: the data group the state is sharded over when stage >= 1 (stage 1 with one data rank
  // is stage 0). The parameter store must be padded to a multiple of the data size then.
  ZeroOptimizer(Runtime& rt, ParameterStore& params, Communicator* data = nullptr, int stage = 0);

  bool sharded() const { return data_ != nullptr; }
  const ShardRange& shard() const { return shard_; }
  // Stage 1: reduce-scatters (sums) the full gradient buffer over the data group into this rank's
  // slice. Call once per step, after backward and every other gradient reduction.
  void reduce_gradients();
  // The reduced gradients of this rank's slice: of the whole buffer at stage 0, else the
  // intersections of the views `grads` (into the flat gradient buffer) with the slice.
  std::vector<Tensor> owned_grads(const std::vector<Tensor>& grads) const;

  // One AdamW step on the owned slice; grads are multiplied by grad_scale first (loss-scale and
  // clipping factor). Weight decay applies only to parameters whose spec says decay (the 2-D
  // weights). Stage 1 then all-gathers the parameters.
  void step(const AdamWHyper& h, float grad_scale);

  // Bytes of optimizer state (master copy if any, m, v, and the reduced gradient slice) held here.
  size_t state_bytes() const;
  // Model-state bytes (parameters, f32 gradients, optimizer state) that a rank holding n parameters
  // of `dtype` keeps at `stage` over `data_size` ranks: what the store and this class allocate.
  static int64_t model_state_bytes(int64_t n, DType dtype, int stage, int data_size);
  // Optimizer state of the owned slice: shard().size elements each (whole buffers at stage 0).
  Tensor master() const { return master_; }
  bool has_separate_master() const { return master_buf_.bytes() > 0; }
  Tensor first_moments() const { return m_; }
  Tensor second_moments() const { return v_; }
  // The whole-buffer copy (numel elements) of a state tensor above: at stage 1 all-gathered into
  // `scratch` (collective over the data group), else the tensor itself.
  Tensor gather(const Tensor& owned, Buffer& scratch) const;
  // Sets a state tensor above from its whole-buffer copy (numel elements).
  void scatter(const Tensor& whole, const Tensor& owned) const;

 private:
  struct Run { int64_t offset, numel; bool decay; };  // contiguous parameters with one decay flag, in the slice
  Runtime& rt_;
  ParameterStore& params_;
  Communicator* data_;
  ShardRange shard_;
  Buffer master_buf_, m_buf_, v_buf_, grad_buf_;
  Tensor master_, m_, v_, grads_;
  std::vector<Run> runs_;
};

}  // namespace trellis
