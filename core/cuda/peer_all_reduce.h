// Sum all-reduce of two ranks of one node whose GPUs reach each other directly (NVLink or PCIe
// peer access), without NCCL's kernels: each rank's copy engine pushes its tensor into the peer's
// receive slots (CUDA IPC), and a short add kernel sums each arrived chunk into place. The
// collective then holds no SMs while the data moves, so GEMMs beside it keep their speed; NCCL
// kernels beside a GEMM cost it about as much time as they hide (docs/benchmarks.md, seventh
// session). Plain C++ declarations; used by nccl_comm.cpp.
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include "core/tensor.h"

namespace trellis {
struct CudaState;
}

namespace trellis::gpu {

struct PeerAllReduce;

// Collective over `comm`. Null on every rank unless the group is two ranks on one node whose GPUs
// have peer access to each other and the driver has stream memory operations.
PeerAllReduce* peer_all_reduce_create(MPI_Comm comm, CudaState& cs);
// Waits until the peer has taken everything this rank pushed, then frees. Every op enqueued must
// have been matched by the peer (as for any collective).
void peer_all_reduce_destroy(PeerAllReduce* p);
// Sums of f32, bf16 and f16 (a + b is the same on both ranks: addition of two commutes exactly).
bool peer_all_reduce_handles(const Tensor& x, bool sum);
// x = x of this rank + x of the peer, in place, enqueued on `stream` (and on an internal copy
// stream forked from it). Both ranks must call with the same size and dtype, in the same order.
void peer_all_reduce(PeerAllReduce* p, const Tensor& x, cudaStream_t stream);

}  // namespace trellis::gpu
