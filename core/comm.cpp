// Communicator: argument checks, the MPI path for host tensors, and dispatch of device tensors
// to the NCCL half (core/cuda/nccl_comm.cpp).
#include "core/comm.h"

#include <climits>
#include <utility>

#include "core/runtime.h"
#include "core/watchdog.h"

#if TRELLIS_HAVE_CUDA
#include "core/cuda/nccl_comm.h"
#endif

namespace trellis {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f16: case DType::bf16: return MPI_UINT16_T;  // moved as bits; reduced by our ops
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI has no 16-bit float types: reduce them in f32 and round back (same as NCCL's result up to
// the reduction order).
template <typename T, bool kMax>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = to_float(a[i]), y = to_float(b[i]);
    b[i] = from_float<T>(kMax ? (x > y ? x : y) : x + y);
  }
}

int as_int(int64_t n, const char* what, const Communicator& c) {
  TRELLIS_CHECK(n >= 0 && n <= INT_MAX, c.name() + " communicator: " + what + " = " + std::to_string(n) +
                                            " elements does not fit an MPI count (int)");
  return int(n);
}

}  // namespace

// ---- CommHandle ----

CommHandle::~CommHandle() { wait(); }

CommHandle::CommHandle(CommHandle&& o) noexcept
    : comm_(o.comm_), op_(o.op_), requests_(std::move(o.requests_)), counts_(std::move(o.counts_)), nccl_(o.nccl_),
      event_(o.event_) {
  o.requests_.clear();
  o.event_ = nullptr;
}

CommHandle& CommHandle::operator=(CommHandle&& o) noexcept {
  if (this != &o) {
    wait();
    comm_ = o.comm_;
    op_ = o.op_;
    requests_ = std::move(o.requests_);
    counts_ = std::move(o.counts_);
    nccl_ = o.nccl_;
    event_ = o.event_;
    o.requests_.clear();
    o.event_ = nullptr;
  }
  return *this;
}

void CommHandle::wait() {
  if (!requests_.empty()) {
    static const std::string nowhere;
    Watchdog::Guard g(comm_ ? comm_->watchdog() : nullptr, op_, comm_ ? comm_->where() : nowhere);
    TRELLIS_MPI_CHECK(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
    counts_.clear();
  }
  if (event_) {
#if TRELLIS_HAVE_CUDA
    gpu::nccl_wait(nccl_, event_);
#endif
    event_ = nullptr;
  }
}

void CommHandle::absorb(CommHandle&& later) {
  TRELLIS_CHECK(this != &later && counts_.empty() && later.counts_.empty(),
                "CommHandle::absorb: not for itself or all_to_allv (MPI reads its counts until completion)");
  if (!comm_) {  // an empty handle takes over what `later` waits for, and its name
    comm_ = later.comm_;
    op_ = later.op_;
  }
  requests_.insert(requests_.end(), later.requests_.begin(), later.requests_.end());
  later.requests_.clear();
  if (later.event_) {
#if TRELLIS_HAVE_CUDA
    if (event_) gpu::nccl_release(nccl_, event_);
#endif
    event_ = later.event_;
    nccl_ = later.nccl_;
    later.event_ = nullptr;
  }
}

bool CommHandle::test() {
  if (!requests_.empty()) {
    int done = 0;
    TRELLIS_MPI_CHECK(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) return false;
    requests_.clear();
    counts_.clear();
  }
  if (event_) {
#if TRELLIS_HAVE_CUDA
    if (!gpu::nccl_query(nccl_, event_)) return false;
#endif
    event_ = nullptr;
  }
  return true;
}

// ---- construction ----

std::unique_ptr<Communicator> Communicator::create(MPI_Comm comm, Runtime& rt, const std::string& name) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->name_ = name;
  c->device_ = rt.device();
  c->watchdog_ = rt.watchdog();
  TRELLIS_MPI_CHECK(MPI_Comm_dup(comm, &c->comm_));
  // Return codes instead of MPI's own abort, so that our checks name the call and the rank.
  TRELLIS_MPI_CHECK(MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN));
  TRELLIS_MPI_CHECK(MPI_Comm_rank(c->comm_, &c->rank_));
  TRELLIS_MPI_CHECK(MPI_Comm_size(c->comm_, &c->size_));
  c->where_ = "communicator " + name + " (rank " + std::to_string(c->rank_) + " of " + std::to_string(c->size_) + ")";
  TRELLIS_MPI_CHECK(MPI_Op_create(&half_reduce<bf16_t, false>, 1, &c->half_ops_[0]));
  TRELLIS_MPI_CHECK(MPI_Op_create(&half_reduce<bf16_t, true>, 1, &c->half_ops_[1]));
  TRELLIS_MPI_CHECK(MPI_Op_create(&half_reduce<f16_t, false>, 1, &c->half_ops_[2]));
  TRELLIS_MPI_CHECK(MPI_Op_create(&half_reduce<f16_t, true>, 1, &c->half_ops_[3]));
#if TRELLIS_HAVE_CUDA
  if (rt.device().is_cuda()) c->nccl_ = gpu::nccl_create(c->comm_, rt);
#endif
  return c;
}

Communicator::~Communicator() {
#if TRELLIS_HAVE_CUDA
  gpu::nccl_destroy(nccl_);
#endif
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // too late to free anything; the process is ending
  for (MPI_Op& op : half_ops_)
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

bool Communicator::peer_path_active() const {
#if TRELLIS_HAVE_CUDA
  return nccl_ && gpu::nccl_uses_peer(nccl_);
#else
  return false;
#endif
}

void Communicator::share_gather_target(const Tensor& region) {
#if TRELLIS_HAVE_CUDA
  if (nccl_ && on_device(region, "share_gather_target")) gpu::nccl_share_gather_target(nccl_, region);
#else
  (void)region;
#endif
}

void Communicator::drop_gather_target(const Tensor& region) {
#if TRELLIS_HAVE_CUDA
  if (nccl_ && on_device(region, "drop_gather_target")) gpu::nccl_drop_gather_target(nccl_, region);
#else
  (void)region;
#endif
}

CommHandle Communicator::handle(const char* op) const {
  CommHandle h;
  h.comm_ = this;
  h.op_ = op;
  return h;
}

void Communicator::queue_on_device(CommHandle& h) const {
  h.nccl_ = nccl_;
  if (watchdog_) watchdog_->device_collective(h.op_, where_);
}

// ---- checks ----

void Communicator::fail(const char* op, const std::string& what) const {
  TRELLIS_FATAL(name_ + " communicator (rank " + std::to_string(rank_) + "/" + std::to_string(size_) + ") " + op +
                ": " + what);
}

bool Communicator::on_device(const Tensor& t, const char* op) const {
  if (t.device.is_cpu()) return false;
  if (!nccl_)
    fail(op, t.str() + " is device memory, but this communicator has no NCCL (runtime on " + device_.str() + ")");
  if (t.device != device_) fail(op, t.str() + " is not on this runtime's device " + device_.str());
  return true;
}

namespace {
std::string pair_text(const Tensor& a, const Tensor& b) { return a.str() + " and " + b.str(); }
}  // namespace

void Communicator::count(size_t bytes, int64_t parts) {
  if (size_ == 1) return;
  traffic_.bytes += uint64_t(bytes) / uint64_t(size_) * uint64_t(parts) +
                    uint64_t(bytes) % uint64_t(size_) * uint64_t(parts) / uint64_t(size_);
  traffic_.ops += 1;
}

// ---- operations ----

CommHandle Communicator::all_reduce_async(const Tensor& x, ReduceOp op) {
  CommHandle h = handle("all_reduce");
  count(x.nbytes(), 2 * int64_t(size_ - 1));
  if (on_device(x, "all_reduce")) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_all_reduce(nccl_, x, op);
#endif
    return h;
  }
  MPI_Op mop = op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
  if (x.dtype == DType::bf16) mop = half_ops_[op == ReduceOp::sum ? 0 : 1];
  if (x.dtype == DType::f16) mop = half_ops_[op == ReduceOp::sum ? 2 : 3];
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data, as_int(x.numel(), "all_reduce count", *this),
                                   mpi_type(x.dtype), mop, comm_, &h.requests_[0]));
  return h;
}

CommHandle Communicator::reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) {
  if (out.dtype != in.dtype || in.numel() != out.numel() * size_)
    fail("reduce_scatter", "in must have size() = " + std::to_string(size_) + " times out's elements, same dtype: " +
                               pair_text(in, out));
  CommHandle h = handle("reduce_scatter");
  count(in.nbytes(), size_ - 1);
  bool dev = on_device(in, "reduce_scatter");
  if (on_device(out, "reduce_scatter") != dev) fail("reduce_scatter", "mixed host/device: " + pair_text(in, out));
  if (dev) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_reduce_scatter(nccl_, out, in, op);
#endif
    return h;
  }
  MPI_Op mop = op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
  if (in.dtype == DType::bf16) mop = half_ops_[op == ReduceOp::sum ? 0 : 1];
  if (in.dtype == DType::f16) mop = half_ops_[op == ReduceOp::sum ? 2 : 3];
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, as_int(out.numel(), "reduce_scatter count", *this),
                                              mpi_type(in.dtype), mop, comm_, &h.requests_[0]));
  return h;
}

CommHandle Communicator::all_gather_async(const Tensor& out, const Tensor& in) {
  if (out.dtype != in.dtype || out.numel() != in.numel() * size_)
    fail("all_gather", "out must have size() = " + std::to_string(size_) + " times in's elements, same dtype: " +
                           pair_text(out, in));
  CommHandle h = handle("all_gather");
  count(out.nbytes(), size_ - 1);
  bool dev = on_device(in, "all_gather");
  if (on_device(out, "all_gather") != dev) fail("all_gather", "mixed host/device: " + pair_text(out, in));
  if (dev) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_all_gather(nccl_, out, in);
#endif
    return h;
  }
  int n = as_int(in.numel(), "all_gather count", *this);
  // In place (as NCCL allows): `in` is this rank's block of `out`.
  const bool in_place = in.data == static_cast<char*>(out.data) + size_t(rank_) * size_t(n) * dtype_size(in.dtype);
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, n, mpi_type(in.dtype), out.data, n,
                                   mpi_type(in.dtype), comm_, &h.requests_[0]));
  return h;
}

CommHandle Communicator::broadcast_async(const Tensor& x, int root) {
  if (root < 0 || root >= size_) fail("broadcast", "root " + std::to_string(root) + " out of range");
  CommHandle h = handle("broadcast");
  count(x.nbytes(), size_ - 1);
  if (on_device(x, "broadcast")) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_broadcast(nccl_, x, root);
#endif
    return h;
  }
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Ibcast(x.data, as_int(x.numel(), "broadcast count", *this), mpi_type(x.dtype), root, comm_,
                               &h.requests_[0]));
  return h;
}

CommHandle Communicator::send_async(const Tensor& x, int peer) {
  if (peer < 0 || peer >= size_) fail("send", "peer " + std::to_string(peer) + " out of range");
  CommHandle h = handle("send");
  count(x.nbytes(), size_);
  if (on_device(x, "send")) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_send_recv(nccl_, &x, peer, nullptr, -1);
#endif
    return h;
  }
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Isend(x.data, as_int(x.numel(), "send count", *this), mpi_type(x.dtype), peer, 0, comm_,
                              &h.requests_[0]));
  return h;
}

CommHandle Communicator::recv_async(const Tensor& x, int peer) {
  if (peer < 0 || peer >= size_) fail("recv", "peer " + std::to_string(peer) + " out of range");
  CommHandle h = handle("recv");
  if (on_device(x, "recv")) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_send_recv(nccl_, nullptr, -1, &x, peer);
#endif
    return h;
  }
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Irecv(x.data, as_int(x.numel(), "recv count", *this), mpi_type(x.dtype), peer, 0, comm_,
                              &h.requests_[0]));
  return h;
}

CommHandle Communicator::send_recv_async(const Tensor& send, int dst, const Tensor& recv, int src) {
  if (dst < 0 || dst >= size_ || src < 0 || src >= size_)
    fail("send_recv", "peers " + std::to_string(dst) + ", " + std::to_string(src) + " out of range");
  CommHandle h = handle("send_recv");
  count(send.nbytes(), size_);
  bool dev = on_device(send, "send_recv");
  if (on_device(recv, "send_recv") != dev) fail("send_recv", "mixed host/device: " + pair_text(send, recv));
  if (dev) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_send_recv(nccl_, &send, dst, &recv, src);
#endif
    return h;
  }
  h.requests_.resize(2);
  TRELLIS_MPI_CHECK(MPI_Irecv(recv.data, as_int(recv.numel(), "recv count", *this), mpi_type(recv.dtype), src, 0,
                              comm_, &h.requests_[0]));
  TRELLIS_MPI_CHECK(MPI_Isend(send.data, as_int(send.numel(), "send count", *this), mpi_type(send.dtype), dst, 0,
                              comm_, &h.requests_[1]));
  return h;
}

CommHandle Communicator::batch_p2p_async(std::span<const P2POp> ops) {
  CommHandle h = handle("batch_p2p");
  if (ops.empty()) return h;
  size_t sent = 0;
  for (const P2POp& op : ops) sent += op.kind == P2POp::send ? op.tensor.nbytes() : 0;
  if (sent > 0) count(sent, size_);  // receives alone send nothing
  const bool dev = on_device(ops[0].tensor, "batch_p2p");
  for (const P2POp& op : ops) {
    if (op.peer < 0 || op.peer >= size_) fail("batch_p2p", "peer " + std::to_string(op.peer) + " out of range");
    if (op.kind != P2POp::send && op.kind != P2POp::recv) fail("batch_p2p", "op is neither send nor recv");
    if (on_device(op.tensor, "batch_p2p") != dev)
      fail("batch_p2p", "mixed host/device: " + pair_text(ops[0].tensor, op.tensor));
  }
  if (dev) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_batch_p2p(nccl_, ops);
#endif
    return h;
  }
  h.requests_.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.kind == P2POp::recv)
      TRELLIS_MPI_CHECK(MPI_Irecv(op.tensor.data, as_int(op.tensor.numel(), "batch_p2p recv count", *this),
                                  mpi_type(op.tensor.dtype), op.peer, 0, comm_, &h.requests_[i]));
    else
      TRELLIS_MPI_CHECK(MPI_Isend(op.tensor.data, as_int(op.tensor.numel(), "batch_p2p send count", *this),
                                  mpi_type(op.tensor.dtype), op.peer, 0, comm_, &h.requests_[i]));
  }
  return h;
}

CommHandle Communicator::all_to_all_async(const Tensor& out, const Tensor& in) {
  if (out.dtype != in.dtype || out.numel() != in.numel() || in.numel() % size_ != 0)
    fail("all_to_all", "in and out need the same dtype and element count, a multiple of size() = " +
                           std::to_string(size_) + ": " + pair_text(in, out));
  const int64_t block = in.numel() / size_;
  AllToAllvPlan plan;
  for (int j = 0; j < size_; ++j) {
    plan.send_counts.push_back(block);
    plan.send_displs.push_back(block * j);
  }
  plan.recv_counts = plan.send_counts;
  plan.recv_displs = plan.send_displs;
  if (on_device(in, "all_to_all")) return all_to_allv_async(out, in, plan);
  bool dev_out = on_device(out, "all_to_all");
  if (dev_out) fail("all_to_all", "mixed host/device: " + pair_text(in, out));
  CommHandle h = handle("all_to_all");
  count(in.nbytes(), size_ - 1);
  int n = as_int(block, "all_to_all block", *this);
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Ialltoall(in.data, n, mpi_type(in.dtype), out.data, n, mpi_type(in.dtype), comm_,
                                  &h.requests_[0]));
  return h;
}

CommHandle Communicator::all_to_allv_async(const Tensor& out, const Tensor& in, const AllToAllvPlan& plan) {
  const size_t n = size_t(size_);
  if (out.dtype != in.dtype) fail("all_to_allv", "dtypes differ: " + pair_text(in, out));
  if (plan.send_counts.size() != n || plan.send_displs.size() != n || plan.recv_counts.size() != n ||
      plan.recv_displs.size() != n)
    fail("all_to_allv", "counts and displacements need size() = " + std::to_string(size_) + " entries each");
  for (size_t j = 0; j < n; ++j) {
    if (plan.send_counts[j] < 0 || plan.send_displs[j] < 0 || plan.send_displs[j] + plan.send_counts[j] > in.numel())
      fail("all_to_allv", "send block for peer " + std::to_string(j) + " outside " + in.str());
    if (plan.recv_counts[j] < 0 || plan.recv_displs[j] < 0 || plan.recv_displs[j] + plan.recv_counts[j] > out.numel())
      fail("all_to_allv", "recv block for peer " + std::to_string(j) + " outside " + out.str());
  }
  CommHandle h = handle("all_to_allv");
  int64_t sent = 0;
  for (size_t j = 0; j < n; ++j) sent += j == size_t(rank_) ? 0 : plan.send_counts[j];
  count(size_t(sent) * dtype_size(in.dtype), size_);
  bool dev = on_device(in, "all_to_allv");
  if (on_device(out, "all_to_allv") != dev) fail("all_to_allv", "mixed host/device: " + pair_text(in, out));
  if (dev) {
#if TRELLIS_HAVE_CUDA
    queue_on_device(h);
    h.event_ = gpu::nccl_all_to_allv(nccl_, out, in, plan.send_counts.data(), plan.send_displs.data(),
                                     plan.recv_counts.data(), plan.recv_displs.data());
#endif
    return h;
  }
  // MPI reads these arrays until the operation completes: the handle keeps them.
  h.counts_.resize(4 * n);
  int* sc = h.counts_.data();
  int* sd = sc + n;
  int* rc = sd + n;
  int* rd = rc + n;
  for (size_t j = 0; j < n; ++j) {
    sc[j] = as_int(plan.send_counts[j], "all_to_allv send count", *this);
    sd[j] = as_int(plan.send_displs[j], "all_to_allv send displacement", *this);
    rc[j] = as_int(plan.recv_counts[j], "all_to_allv recv count", *this);
    rd[j] = as_int(plan.recv_displs[j], "all_to_allv recv displacement", *this);
  }
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Ialltoallv(in.data, sc, sd, mpi_type(in.dtype), out.data, rc, rd, mpi_type(in.dtype), comm_,
                                   &h.requests_[0]));
  return h;
}

void Communicator::barrier() { barrier_async().wait(); }

CommHandle Communicator::barrier_async() {
  CommHandle h = handle("barrier");
  h.requests_.resize(1);
  TRELLIS_MPI_CHECK(MPI_Ibarrier(comm_, &h.requests_[0]));
  return h;
}

}  // namespace trellis
