// Collectives of two ranks of one node whose GPUs reach each other directly (NVLink or PCIe peer
// access), without NCCL's kernels: each rank's copy engine pushes its data into the peer's receive
// slots (CUDA IPC), and the receiver adds (sums) or copies (gathers) each arrived chunk into place.
// The data then moves without holding SMs, so GEMMs beside it keep their speed; NCCL kernels beside
// a GEMM cost it about as much time as they hide (docs/benchmarks.md, seventh session). Plain C++
// declarations; used by nccl_comm.cpp.
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include "core/tensor.h"

namespace trellis {
struct CudaState;
}

namespace trellis::gpu {

struct PeerCollectives;

// Collectives over `comm`. Null on every rank unless the group is two ranks on one node whose GPUs
// have peer access to each other and the driver has stream memory operations.
PeerCollectives* peer_collectives_create(MPI_Comm comm, CudaState& cs);
// Waits until the peer has taken everything this rank pushed, then frees. Every op enqueued must
// have been matched by the peer (as for any collective).
void peer_collectives_destroy(PeerCollectives* p);
// Sums of f32, bf16 and f16 (a + b is the same on both ranks: addition of two commutes exactly).
bool peer_sums(DType t, bool sum);

// Each op is enqueued on `stream` (and on an internal copy stream forked from it); both ranks call
// it with the same sizes and dtype, in the same order as their other ops on this pair. Once
// `stream` has passed the op, this rank's inputs have been read and its outputs written.
// x = x of this rank + x of the peer, in place. Inside a shared target (below), with an even count,
// each rank sums one half and copies it straight into the peer's x.
void peer_all_reduce(PeerCollectives* p, const Tensor& x, cudaStream_t stream);
// out (n elements) = block rank of in + the peer's block rank of its in (in: 2n elements). `out`
// may be this rank's block of `in`.
void peer_reduce_scatter(PeerCollectives* p, const Tensor& out, const Tensor& in, cudaStream_t stream);
// out (2n elements): block rank = in (n elements), the other block = the peer's in. `in` may be
// this rank's block of `out`. Any dtype: bytes are moved. Into a shared target (below) the peer's
// copy engine writes its block straight into `out` (no slots: at the copy engine's full speed).
void peer_all_gather(PeerCollectives* p, const Tensor& out, const Tensor& in, cudaStream_t stream);

// Collective: `region` (device memory that stays allocated until dropped) becomes a target of
// direct gathers. Both ranks share regions of the same size at the same point of their programs
// and gather into the same places of them (each rank decides by its own `out`).
void peer_share_target(PeerCollectives* p, const Tensor& region);
// Ends that, on both ranks at the same point; waits for what is in flight.
void peer_drop_target(PeerCollectives* p, const Tensor& region);

}  // namespace trellis::gpu
