// Megatron's paired communication mappings over the tensor-parallel group, each a forward and the
// backward that is its adjoint. Functions that communicate return the CommHandle of their
// collective: wait() on it at once, or later to overlap compute with it.
//
// Sequence parallelism shards the token rows: the (B*T) flattened rows of a (B, T, C) activation
// are cut into t contiguous blocks, rank r holding rows [r*N/t, (r+1)*N/t). With B = 1 this is
// Megatron's sequence sharding; with our batch-major layout every all-gather and reduce-scatter
// stays one contiguous block per rank. "full" tensors have N rows, "shard" tensors N/t, same
// columns; any leading shape (rows = all but the last dimension).
#pragma once
#include <cstdint>

#include "core/comm.h"
#include "core/tensor.h"

namespace trellis {

// N / parts, the rows of one token shard. UserError when parts does not divide N (the config
// check calls it too, so a bad micro_batch x seq_len is reported before the first step).
int64_t token_shard_rows(int64_t rows, int parts);

// ---- tensor-parallel region without sequence parallelism (activations replicated) ----

// Entering a column-parallel region: forward identity; backward sums the input gradient (each
// rank holds the part coming from its own output columns).
inline const Tensor& copy_to_tensor_region_forward(const Tensor& x) { return x; }
CommHandle copy_to_tensor_region_backward(Communicator& tensor, const Tensor& dx);

// Leaving a row-parallel region: forward sums the partial outputs; backward identity.
CommHandle reduce_from_tensor_region_forward(Communicator& tensor, const Tensor& y);
inline const Tensor& reduce_from_tensor_region_backward(const Tensor& dy) { return dy; }

// ---- sequence parallelism: token shards ----

// Full -> own shard: forward returns this rank's (N/t, C) block of rows (a view, no copy);
// backward all-gathers.
Tensor scatter_to_token_shards_forward(Communicator& tensor, const Tensor& full);
CommHandle scatter_to_token_shards_backward(Communicator& tensor, const Tensor& dfull, const Tensor& dshard);

// Shards -> full, before a column-parallel layer: forward all-gathers; backward reduce-scatters
// (sums) the full gradient into the shard.
CommHandle gather_from_token_shards_forward(Communicator& tensor, const Tensor& full, const Tensor& shard);
CommHandle gather_from_token_shards_backward(Communicator& tensor, const Tensor& dshard, const Tensor& dfull);

// Partial sums -> summed shard, after a row-parallel layer: forward reduce-scatters; backward
// all-gathers.
CommHandle reduce_scatter_to_token_shards_forward(Communicator& tensor, const Tensor& shard, const Tensor& full);
CommHandle reduce_scatter_to_token_shards_backward(Communicator& tensor, const Tensor& dfull, const Tensor& dshard);

}  // namespace trellis
