// What core/comm.cpp needs from the NCCL half of a Communicator: creation over an MPI
// communicator, one enqueue function per operation (each returns the cudaEvent_t, as void*,
// recorded on the comm stream after the op), and the compute-stream wait. Plain C++ declarations.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <span>

#include "core/comm.h"

namespace trellis {
class Runtime;
}

namespace trellis::gpu {

// Collective over `comm` (rank 0 makes the NCCL unique id and broadcasts it over MPI).
NcclComm* nccl_create(MPI_Comm comm, Runtime& rt);
void nccl_destroy(NcclComm* c);  // waits for the comm stream first
// Whether sums of float tensors and gathers go through peer memory (set up on the first of them).
bool nccl_uses_peer(const NcclComm* c);

// Each op: the comm stream waits for the compute stream's current work, the op is enqueued on
// the comm stream, and an event recorded after it is returned.
void* nccl_all_reduce(NcclComm* c, const Tensor& x, ReduceOp op);
void* nccl_reduce_scatter(NcclComm* c, const Tensor& out, const Tensor& in, ReduceOp op);
void* nccl_all_gather(NcclComm* c, const Tensor& out, const Tensor& in);
void* nccl_broadcast(NcclComm* c, const Tensor& x, int root);
// Either side may be null (a plain send or recv); both are posted in one NCCL group.
void* nccl_send_recv(NcclComm* c, const Tensor* send, int dst, const Tensor* recv, int src);
// Every op in one NCCL group, in the order given.
void* nccl_batch_p2p(NcclComm* c, std::span<const P2POp> ops);
// Counts and displacements in elements, `size` entries each (grouped sends and receives).
void* nccl_all_to_allv(NcclComm* c, const Tensor& out, const Tensor& in, const int64_t* send_counts,
                       const int64_t* send_displs, const int64_t* recv_counts, const int64_t* recv_displs);
// Collective: direct gathers into `region` on the peer path (peer_collectives.h); else nothing.
void nccl_share_gather_target(NcclComm* c, const Tensor& region);
void nccl_drop_gather_target(NcclComm* c, const Tensor& region);
// The compute stream waits for `event` (no host wait); the event goes back to the pool.
void nccl_wait(NcclComm* c, void* event);
// True (and the event recycled) once `event` has passed; never blocks.
bool nccl_query(NcclComm* c, void* event);
// Returns an op's event to c's pool without waiting on it: for a handle whose completion a later
// op's implies (every device collective runs on the one comm stream, in issue order).
void nccl_release(NcclComm* c, void* event);

}  // namespace trellis::gpu
