// The NCCL half of a Communicator: ops on device tensors, enqueued on the runtime's comm stream
// after the compute stream's current work, and ordered back into the compute stream by events.
#include "core/cuda/nccl_comm.h"

#include <cstdio>
#include <vector>

#include "core/cuda/cuda_state.h"
#include "core/cuda/peer_collectives.h"
#include "core/profiler.h"

namespace trellis {

struct NcclComm {
  ncclComm_t comm = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;           // the Communicator's, for setting up the peer path
  CudaState* cs = nullptr;
  gpu::PeerCollectives* peer = nullptr;   // two ranks of one node: without NCCL (peer_collectives.h)
  bool peer_checked = false;              // peer set up (or found impossible) on the first collective
  int rank = 0, size = 1;
  cudaEvent_t ready = nullptr;            // recorded on compute before each op
  std::vector<cudaEvent_t> free_events;   // completion events not held by a handle
};

namespace gpu {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  TRELLIS_FATAL("nccl: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

// Orders the comm stream after the compute stream, runs `enqueue`, returns the completion event.
// Inside a trace (log.trace_step) the collective is bracketed by two events on the comm stream and
// recorded as "OP MB" ("nccl all_gather 33.6 MB", "peer all_reduce 16.8 MB": the bytes this rank
// sends or contributes).
template <typename F>
void* run_on_comm_stream(NcclComm* c, const char* op, size_t bytes, F&& enqueue) {
  CUDA_CHECK(cudaEventRecord(c->ready, c->cs->compute));
  CUDA_CHECK(cudaStreamWaitEvent(c->cs->comm, c->ready, 0));
  OpProfiler* tracer = c->cs->profiler && c->cs->profiler->tracing() ? c->cs->profiler : nullptr;
  void* traced_start = tracer ? tracer->take_event() : nullptr;
  if (tracer) CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(traced_start), c->cs->comm));
  enqueue(c->comm, c->cs->comm);
  if (tracer) {
    void* traced_end = tracer->take_event();
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(traced_end), c->cs->comm));
    char label[96];
    std::snprintf(label, sizeof label, "%s %.1f MB", op, double(bytes) / 1e6);
    tracer->add_comm(label, traced_start, traced_end);
  }
  cudaEvent_t done = nullptr;
  if (c->free_events.empty()) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = c->free_events.back();
    c->free_events.pop_back();
  }
  CUDA_CHECK(cudaEventRecord(done, c->cs->comm));
  return done;
}

}  // namespace

NcclComm* nccl_create(MPI_Comm comm, Runtime& rt) {
  auto* c = new NcclComm();
  c->mpi = comm;
  c->cs = &cuda_state(rt);
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &c->rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(comm, &c->size));
  ncclUniqueId id{};
  if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  TRELLIS_MPI_CHECK(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, comm));
  CUDA_CHECK(cudaSetDevice(c->cs->device));
  NCCL_CHECK(ncclCommInitRank(&c->comm, c->size, id, c->rank));
  CUDA_CHECK(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
  return c;
}

void nccl_destroy(NcclComm* c) {
  if (!c) return;
  CUDA_CHECK(cudaSetDevice(c->cs->device));
  CUDA_CHECK(cudaStreamSynchronize(c->cs->comm));
  peer_collectives_destroy(c->peer);
  NCCL_CHECK(ncclCommDestroy(c->comm));
  for (cudaEvent_t e : c->free_events) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaEventDestroy(c->ready));
  delete c;
}

bool nccl_uses_peer(const NcclComm* c) { return c->peer != nullptr; }

namespace {

// The pair's peer path, set up on the group's first all-reduce, reduce-scatter or all-gather: every
// rank of the group reaches that op together.
PeerCollectives* peer_of(NcclComm* c) {
  if (!c->peer_checked) {
    c->peer_checked = true;
    if (c->cs->peer_collectives) c->peer = peer_collectives_create(c->mpi, *c->cs);
  }
  return c->peer;
}

}  // namespace

void* nccl_all_reduce(NcclComm* c, const Tensor& x, ReduceOp op) {
  if (PeerCollectives* peer = peer_of(c); peer && peer_sums(x.dtype, op == ReduceOp::sum))
    return run_on_comm_stream(c, "peer all_reduce", x.nbytes(), [&](ncclComm_t, cudaStream_t s) {
      peer_all_reduce(peer, x, s);
    });
  return run_on_comm_stream(c, "nccl all_reduce", x.nbytes(), [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype), nccl_op(op), comm, s));
  });
}

void* nccl_reduce_scatter(NcclComm* c, const Tensor& out, const Tensor& in, ReduceOp op) {
  if (PeerCollectives* peer = peer_of(c); peer && peer_sums(in.dtype, op == ReduceOp::sum))
    return run_on_comm_stream(c, "peer reduce_scatter", in.nbytes(), [&](ncclComm_t, cudaStream_t s) {
      peer_reduce_scatter(peer, out, in, s);
    });
  return run_on_comm_stream(c, "nccl reduce_scatter", in.nbytes(), [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclReduceScatter(in.data, out.data, size_t(out.numel()), nccl_type(in.dtype), nccl_op(op), comm, s));
  });
}

void* nccl_all_gather(NcclComm* c, const Tensor& out, const Tensor& in) {
  if (PeerCollectives* peer = peer_of(c))
    return run_on_comm_stream(c, "peer all_gather", in.nbytes(), [&](ncclComm_t, cudaStream_t s) {
      peer_all_gather(peer, out, in, s);
    });
  return run_on_comm_stream(c, "nccl all_gather", in.nbytes(), [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclAllGather(in.data, out.data, size_t(in.numel()), nccl_type(in.dtype), comm, s));
  });
}

void nccl_share_gather_target(NcclComm* c, const Tensor& region) {
  if (PeerCollectives* peer = peer_of(c)) peer_share_target(peer, region);
}

void nccl_drop_gather_target(NcclComm* c, const Tensor& region) {
  if (c->peer) peer_drop_target(c->peer, region);
}

void* nccl_broadcast(NcclComm* c, const Tensor& x, int root) {
  return run_on_comm_stream(c, "nccl broadcast", x.nbytes(), [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclBroadcast(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype), root, comm, s));
  });
}

void* nccl_send_recv(NcclComm* c, const Tensor* send, int dst, const Tensor* recv, int src) {
  const size_t bytes = send ? send->nbytes() : recv->nbytes();
  return run_on_comm_stream(c, "nccl send_recv", bytes, [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    if (send) NCCL_CHECK(ncclSend(send->data, size_t(send->numel()), nccl_type(send->dtype), dst, comm, s));
    if (recv) NCCL_CHECK(ncclRecv(recv->data, size_t(recv->numel()), nccl_type(recv->dtype), src, comm, s));
    NCCL_CHECK(ncclGroupEnd());
  });
}

void* nccl_batch_p2p(NcclComm* c, std::span<const P2POp> ops) {
  size_t bytes = 0;
  for (const P2POp& op : ops) bytes += op.kind == P2POp::send ? op.tensor.nbytes() : 0;
  return run_on_comm_stream(c, "nccl p2p", bytes, [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    for (const P2POp& op : ops) {
      if (op.kind == P2POp::send)
        NCCL_CHECK(ncclSend(op.tensor.data, size_t(op.tensor.numel()), nccl_type(op.tensor.dtype), op.peer, comm, s));
      else
        NCCL_CHECK(ncclRecv(op.tensor.data, size_t(op.tensor.numel()), nccl_type(op.tensor.dtype), op.peer, comm, s));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

void* nccl_all_to_allv(NcclComm* c, const Tensor& out, const Tensor& in, const int64_t* send_counts,
                       const int64_t* send_displs, const int64_t* recv_counts, const int64_t* recv_displs) {
  const size_t esize = dtype_size(in.dtype);
  const ncclDataType_t t = nccl_type(in.dtype);
  size_t bytes = 0;
  for (int peer = 0; peer < c->size; ++peer) bytes += size_t(send_counts[peer]) * esize;
  return run_on_comm_stream(c, "nccl all_to_allv", bytes, [&](ncclComm_t comm, cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < c->size; ++peer) {
      // Zero counts are legal in NCCL, but skipping them saves a connection setup.
      if (send_counts[peer] > 0)
        NCCL_CHECK(ncclSend(static_cast<const char*>(in.data) + size_t(send_displs[peer]) * esize,
                            size_t(send_counts[peer]), t, peer, comm, s));
      if (recv_counts[peer] > 0)
        NCCL_CHECK(ncclRecv(static_cast<char*>(out.data) + size_t(recv_displs[peer]) * esize,
                            size_t(recv_counts[peer]), t, peer, comm, s));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

void nccl_wait(NcclComm* c, void* event) {
  auto e = static_cast<cudaEvent_t>(event);
  CUDA_CHECK(cudaStreamWaitEvent(c->cs->compute, e, 0));
  c->free_events.push_back(e);  // safe to re-record: the wait above captured this recording
}

bool nccl_query(NcclComm* c, void* event) {
  auto e = static_cast<cudaEvent_t>(event);
  const cudaError_t st = cudaEventQuery(e);
  if (st == cudaErrorNotReady) return false;
  CUDA_CHECK(st);
  c->free_events.push_back(e);  // passed: nothing can still depend on this recording
  return true;
}

void nccl_release(NcclComm* c, void* event) { c->free_events.push_back(static_cast<cudaEvent_t>(event)); }

}  // namespace gpu
}  // namespace trellis
