// The mixed-precision AdamW optimizer over the parameter store's buckets (core/parameters.h).
// Stage 0: every rank holds the full fp32 master weights and moments. Stages 1-3 (over a data
// group of N > 1 ranks): every bucket is padded to a multiple of N and data rank r owns piece r of
// each: its fp32 master weights (16-bit parameters, split beside bf16 ones; fp32 parameters are their own master), Adam
// moments and reduced gradients, concatenated bucket after bucket ("owned" buffers of
// owned_numel() elements). The reductions (parallel/data/gradient_sync.h at stage 0,
// parallel/zero/streaming.h at stages 1-3) leave the summed gradients there; each rank updates
// its pieces, and the updated parameters are all-gathered into every rank's buckets, except the
// buckets that stage 3 streams (gathered just in time before each use).
//
// Offload (zero.offload = "cpu" or "nvme"): the master weights and moments live in host memory
// (or in files on a local disk that the kernel pages them to) and AdamW
// runs on the host's cores (core/cpu's vectorized, threaded AdamW: the same arithmetic as the
// CPU backend); each bucket's reduced gradient piece comes down to a pinned staging buffer and
// its updated parameters go back up. The device keeps only the parameters and gradients.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/compute_fence.h"
#include "core/ops.h"
#include "core/parameters.h"

namespace trellis {

class ZeroOptimizer {
 public:
  // `data`: the data group the state is sharded over when stage >= 1 (stage >= 1 with one data
  // rank is stage 0). The store must then be sharded over it (StoreSharding: shards = its size).
  // `offload`: where the offloaded master weights and moments live (host memory, or files on a
  // local disk: core/file_allocator.h), AdamW on the host (above); null: on the device.
  // `expert_data`: under expert parallelism, the group the experts' buckets are sharded over
  // (StoreSharding::expert_shards), needed when sharded and the store has experts' buckets.
  ZeroOptimizer(Runtime& rt, ParameterStore& params, Communicator* data = nullptr, int stage = 0,
                std::unique_ptr<Allocator> offload = nullptr, Communicator* expert_data = nullptr);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  int stage() const { return stage_; }
  bool offloaded() const { return host_alloc_ != nullptr; }
  bool sharded() const { return data_ != nullptr; }
  int64_t owned_numel() const { return owned_numel_; }
  // Sharded: the group bucket b's pieces are spread over (the data group, or for experts' buckets
  // the expert-data group), and this rank's piece of it.
  Communicator& group_of(int b) const;
  int64_t rank_in_group(int b) const;
  // Where bucket b's piece starts in the owned buffers.
  int64_t owned_offset(int b) const { return owned_at_[size_t(b)]; }
  // The reduced gradients of bucket b's piece (f32, or unsharded the store's own): where the
  // reductions leave them.
  Tensor owned_grads(int b) const;
  // The reduced gradients of element ranges of the flat layout this rank holds: the ranges
  // themselves at stage 0, else their intersections with this rank's pieces.
  std::vector<Tensor> owned_grads(const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  // The same, grouped by the bucket holding them.
  std::vector<std::vector<Tensor>> owned_grads_by_bucket(const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  // Stages >= 2: zeroes the reduced gradients (a step's reductions of streamed blocks accumulate
  // into them). At stage 1 each bucket's one reduce-scatter a step overwrites its piece.
  void zero_owned_grads();

  // One AdamW step on the owned pieces; grads are multiplied by grad_scale first (loss-scale and
  // clipping factor), or the step's values come from h.scalars (core/step_scalars.h). Weight decay applies only to parameters whose spec says decay (the 2-D
  // weights). Sharded: each bucket every rank keeps whole is all-gathered as soon as its piece is
  // updated, while the next buckets update.
  void step(const AdamWHyper& h, float grad_scale);

  // Bytes of optimizer state (master copy if any, m, v, and the reduced gradient pieces) held on
  // the device, and in host memory (offloaded: the master, the moments and the staging buffers).
  size_t state_bytes() const;
  size_t host_state_bytes() const;
  // Model-state bytes a rank holding n parameters of `dtype` keeps at `stage` over `data_size`
  // ranks by the ZeRO accounting: parameters 2 or 4 bytes (stage 3: / N), gradients 4 (or 2 with
  // 16-bit `grad_dtype`; stages 2-3: 4 / N), master (f16: 4, bf16: the 2 low bytes) + moments 8 (stages 1-3: / N); padding and
  // the buckets that stay whole and the streaming slots are not in it.
  // Offloaded, the master and the moments are not on the device: `offload` leaves them out.
  // `experts`: how many of the n are experts' parameters under expert parallelism; at stages >= 1
  // they are sharded (and at stages 2-3 streamed) over the expert-data group's `expert_data` ranks
  // as the others are over the data group; with one rank there, kept whole (with their f32 reduced
  // piece, the whole bucket).
  static int64_t model_state_bytes(int64_t n, DType dtype, int stage, int data_size, bool offload = false,
                                   DType grad_dtype = DType::f32, int64_t experts = 0, int expert_data = 1);
  // What offload keeps off the device for those n parameters, over N at stages >= 1: the master
  // (bf16: the split halves; f16: f32 plus the f16 output; f32: f32) and the moments. Of it, what
  // stays in pinned host memory whatever the offload target (the copy of the parameters that goes
  // up each step: bf16 and f16 2 bytes, f32 the master's 4); the rest may live in files (nvme).
  static int64_t offloaded_state_bytes(int64_t n, DType dtype, int stage, int data_size);
  static int64_t offloaded_pinned_bytes(int64_t n, DType dtype, int stage, int data_size);
  // The two pinned staging buffers of offload: the largest bucket's gradient piece each (f32 when
  // sharded over N > 1 ranks, else the store's grad_dtype).
  static int64_t offload_staging_bytes(int64_t largest_bucket, int stage, int data_size, DType grad_dtype);
  // Optimizer state of the owned pieces (owned_numel elements each); master only if separate.
  bool has_separate_master() const { return params_.dtype() != DType::f32; }
  // The f32 master weights: a view of them for f16 parameters; for bf16 ones (split masters: the
  // parameters are their high halves, 16 more bits each are kept here, core/dtype.h) joined into
  // `host`. Undefined when the parameters are f32 (their own master).
  Tensor master_values(std::vector<char>& host) const;
  // Sets them from owned_numel f32 values (host or device); split, the owned parameters too.
  void set_master(const Tensor& owned);
  Tensor first_moments() const { return m_; }
  Tensor second_moments() const { return v_; }
  // The whole stage's copy (params.numel() elements, the parameters in order without padding) is
  // what checkpoints and weight exports hold. Sets an owned state tensor above from it (host or
  // device memory).
  void scatter(const Tensor& whole, const Tensor& owned) const;
  // The parameters as that copy: a view of the store when it is neither sharded nor streamed,
  // else assembled bucket by bucket in `host` (stage 3: all-gathered over the data group, a
  // collective), so no whole-stage buffer is ever allocated on the device.
  Tensor whole_values(std::vector<char>& host) const;
  // Sets the parameters from that copy (host or device memory): each rank takes what it holds; its
  // master weights become the new parameters.
  void set_values(const Tensor& whole);

 private:
  // A contiguous part of one bucket's piece (piece-relative) and its runs of one decay flag: one
  // AdamW launch.
  struct Span { int bucket; int64_t offset, numel; AdamWRuns runs; };
  // f(bucket, tensor) for each part of `ranges` this rank holds, range by range, bucket by bucket.
  template <typename F>
  void for_each_owned(const std::vector<std::pair<int64_t, int64_t>>& ranges, F&& f) const;
  // Real elements of bucket b's piece: [0, n) of it.
  int64_t owned_real(int b) const;
  bool split_master() const;
  // The master weights (if separate) equal to the owned parameters.
  void reset_master();
  // Offloaded: queues the copy of bucket b's gradient piece into staging buffer `slot` (spans
  // [first, end) of spans_ are b's) and records its fence.
  void fetch_grads(size_t first, size_t end, int slot);
  // Offloaded: AdamW of those spans on the host from `slot`, the parameters copied back up.
  void step_on_host(size_t first, size_t end, int slot, const AdamWHyper& h, float grad_scale);
  Runtime& rt_;
  ParameterStore& params_;
  Communicator* data_;
  Communicator* expert_data_;
  int stage_;
  int64_t owned_numel_ = 0;
  std::vector<int64_t> owned_at_;   // per bucket
  std::vector<int64_t> whole_at_;   // per bucket: where its real elements start in a whole copy
  std::unique_ptr<Allocator> host_alloc_;  // offloaded: host (or file-backed) memory for the state
  Buffer master_buf_, m_buf_, v_buf_, grad_buf_;
  // master_: undefined for f32 parameters (their own master); the low halves of split masters for
  // bf16 ones (raw bits in a bf16-typed tensor, never read as numbers). Offloaded, f32 parameters
  // get an f32 master too: the host's copy of them.
  Tensor master_, m_, v_, grads_;
  // Offloaded: the owned parameters as the host holds them, pinned for the copies up (bf16: the
  // split masters' high halves; f16: AdamW's output; f32: master_ itself), and two pinned buffers
  // of one bucket's gradient piece: the next bucket's comes down while the host updates this one.
  Buffer host_values_buf_, staging_buf_[2], host_scalars_buf_;
  Tensor host_values_, staging_[2], host_scalars_;
  std::unique_ptr<ComputeFence> fetched_[2];
  std::vector<Span> spans_;
  std::vector<size_t> first_span_;  // per bucket, and one past the last
};

}  // namespace trellis
