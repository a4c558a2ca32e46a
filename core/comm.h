// Communicator: collectives and point-to-point on one group of ranks, MPI for host tensors and
// NCCL for device tensors, each with an async form returning a CommHandle to wait on.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace trellis {

class Communicator;
class Runtime;
class Watchdog;
struct NcclComm;  // the NCCL half (core/cuda/nccl_comm.cpp); opaque here

enum class ReduceOp { sum, max };

// One point-to-point operation of a batch (Communicator::batch_p2p_async): send `tensor` to
// `peer`, or receive into it from `peer`.
struct P2POp {
  enum Kind { send, recv } kind;
  Tensor tensor;
  int peer;
};

// A pending operation. Host tensors: wait() completes the MPI requests (the data is then in
// place). Device tensors: the operation runs on the runtime's comm stream, and wait() makes the
// COMPUTE stream wait for it (no host wait): every op enqueued on the compute stream afterwards
// sees the result. A handle destroyed without wait() waits. Wait before the Communicator goes.
class CommHandle {
 public:
  CommHandle() = default;  // nothing pending
  ~CommHandle();
  CommHandle(CommHandle&& o) noexcept;
  CommHandle& operator=(CommHandle&& o) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;

  void wait();
  // Never blocks: true once the operation has completed, and then nothing is pending (as after
  // wait()). Host tensors: MPI_Testall. Device tensors: the op's event on the comm stream has
  // passed (cudaEventQuery), so its buffers may be reused by any stream without a wait.
  bool test();
  bool pending() const { return !requests_.empty() || event_ != nullptr; }
  // Takes over `later`, so that one wait() completes both. `later` must have been issued after this
  // handle's operation (and not be all_to_allv's, whose counts MPI reads): on the device the later
  // op's completion implies this one's (the one comm stream runs them in issue order), so only its
  // event is kept and the compute stream waits once.
  void absorb(CommHandle&& later);

 private:
  friend class Communicator;
  const Communicator* comm_ = nullptr;  // for the watchdog's message: what a host wait is for
  const char* op_ = "";
  std::vector<MPI_Request> requests_;
  std::vector<int> counts_;  // all_to_allv counts/displacements MPI reads until completion
  NcclComm* nccl_ = nullptr;
  void* event_ = nullptr;  // cudaEvent_t recorded on the comm stream after the op
};

// One group of ranks. Peers and roots are ranks within this group. Every rank of the group must
// issue the same operations in the same order (device ops of all communicators share the one
// comm stream, so they also run in that order). Tensors are contiguous; host tensors go through
// MPI, device tensors (on the runtime's GPU) through NCCL. Element counts per MPI call must fit
// in an int. Host sums and maxima of bf16/f16 use our own MPI_Op (computed in f32, rounded back).
// Misuse (shapes, dtypes, devices that do not match) and any MPI/NCCL/CUDA failure abort every
// rank through trellis::fatal, naming the communicator and the operation.
class Communicator {
 public:
  // Collective over `comm` (which it dup's). With a CUDA runtime it also builds an NCCL
  // communicator (unique id made by rank 0 and broadcast over MPI). `name` appears in messages.
  // The runtime must outlive the Communicator; destroy it before MPI_Finalize.
  static std::unique_ptr<Communicator> create(MPI_Comm comm, Runtime& rt, const std::string& name = "world");
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm mpi_comm() const { return comm_; }
  const std::string& name() const { return name_; }
  bool has_nccl() const { return nccl_ != nullptr; }
  // True once the first device all-reduce, reduce-scatter or all-gather has set up the two-rank
  // peer path (core/cuda/peer_collectives.h): sums of float tensors and gathers then bypass NCCL.
  bool peer_path_active() const;

  // x = op over ranks of x, in place.
  void all_reduce(const Tensor& x, ReduceOp op = ReduceOp::sum) { all_reduce_async(x, op).wait(); }
  CommHandle all_reduce_async(const Tensor& x, ReduceOp op = ReduceOp::sum);
  // out (n elements) = block `rank()` of op over ranks of in (size() * n elements).
  void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(out, in, op).wait();
  }
  CommHandle reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum);
  // out (size() * n elements) = concatenation over ranks of in (n elements).
  // `in` may be this rank's block of `out` (in place).
  void all_gather(const Tensor& out, const Tensor& in) { all_gather_async(out, in).wait(); }
  CommHandle all_gather_async(const Tensor& out, const Tensor& in);
  // x = x of `root`, on every rank.
  void broadcast(const Tensor& x, int root) { broadcast_async(x, root).wait(); }
  CommHandle broadcast_async(const Tensor& x, int root);
  // Point to point with `peer`. A send and a recv between the same two ranks in both directions
  // at once must use send_recv (posted together), or they may deadlock on large messages.
  void send(const Tensor& x, int peer) { send_async(x, peer).wait(); }
  CommHandle send_async(const Tensor& x, int peer);
  void recv(const Tensor& x, int peer) { recv_async(x, peer).wait(); }
  CommHandle recv_async(const Tensor& x, int peer);
  // Sends `send` to `dst` and receives `recv` from `src`, posted as one operation.
  void send_recv(const Tensor& send, int dst, const Tensor& recv, int src) { send_recv_async(send, dst, recv, src).wait(); }
  CommHandle send_recv_async(const Tensor& send, int dst, const Tensor& recv, int src);
  // Every op of `ops` posted as one operation: on device tensors one NCCL group (ncclGroupStart /
  // ncclGroupEnd) on the comm stream, which completes once every op in it has been matched; on
  // host tensors MPI_Irecv / MPI_Isend each, completed by one waitall. All tensors on the host or
  // all on this runtime's device. Between two ranks, sends and receives match in the order posted
  // (also within a batch), whatever the batch boundaries. An empty batch is a no-op.
  void batch_p2p(std::span<const P2POp> ops) { batch_p2p_async(ops).wait(); }
  CommHandle batch_p2p_async(std::span<const P2POp> ops);
  // Block j of in (n / size() elements) goes to rank j; out's block j comes from rank j.
  void all_to_all(const Tensor& out, const Tensor& in) { all_to_all_async(out, in).wait(); }
  CommHandle all_to_all_async(const Tensor& out, const Tensor& in);
  // Uneven all-to-all; counts and displacements per peer (size() entries each), in elements.
  struct AllToAllvPlan {
    std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  };
  void all_to_allv(const Tensor& out, const Tensor& in, const AllToAllvPlan& plan) { all_to_allv_async(out, in, plan).wait(); }
  CommHandle all_to_allv_async(const Tensor& out, const Tensor& in, const AllToAllvPlan& plan);
  // Collective, for device memory that all-gathers or all-reduces will write into (ZeRO's
  // parameters, stage 0's gradients): on the two-rank peer path the peer's block of such a gather is
  // then copied straight into `region` (the copy engines at full speed, without the receive slots),
  // and an all-reduce there sums half on each rank (a reduce-scatter, then such a gather). Every
  // rank shares a region of the same size at the same point and gathers into the same places of it;
  // drop it (every rank, no gather into it pending) before its memory goes. Host memory, or no
  // peer path: nothing.
  void share_gather_target(const Tensor& region);
  void drop_gather_target(const Tensor& region);
  // Host barrier over the group (MPI); does not order GPU streams.
  void barrier();
  CommHandle barrier_async();
  // What this rank has sent through the group since it was made, counted as the ring algorithms
  // move it: an all-reduce of S bytes sends 2 (n-1)/n S, a reduce-scatter (of S in) or an
  // all-gather (of S out) and a broadcast (n-1)/n S, an all-to-all what goes to the other ranks,
  // point to point what it sends. The same count over NCCL, MPI or the peer path, and for a
  // device op from when it is queued. `ops`: the operations that sent. A group of one rank sends
  // nothing.
  struct Traffic {
    uint64_t bytes = 0, ops = 0;
  };
  Traffic traffic() const { return traffic_; }
  // "communicator data (rank 1 of 4)": where an operation waits, for messages.
  const std::string& where() const { return where_; }
  // Non-null when the runtime watches waits (parallel.collective_timeout_s).
  Watchdog* watchdog() const { return watchdog_; }

 private:
  Communicator() = default;
  // An empty handle for operation `op` of this communicator (named if a host wait times out).
  CommHandle handle(const char* op) const;
  // Device ops: the handle's NCCL half, and the op reported to the watchdog as queued on the GPU.
  void queue_on_device(CommHandle& h) const;
  // Validates that t is host memory or memory of this runtime's GPU; true for device.
  bool on_device(const Tensor& t, const char* op) const;
  [[noreturn]] void fail(const char* op, const std::string& what) const;
  // Adds one operation's bytes to traffic_: `bytes` x `parts` / size() (parts = size() for a whole).
  void count(size_t bytes, int64_t parts);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string name_, where_;
  Device device_;
  NcclComm* nccl_ = nullptr;
  Watchdog* watchdog_ = nullptr;
  Traffic traffic_;
  MPI_Op half_ops_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // bf16/f16 x sum/max
};

}  // namespace trellis
