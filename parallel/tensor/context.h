// This rank's place in the tensor-parallel group, passed explicitly to the model code built on it
// (no globals). The default, size 1, is no tensor parallelism: layers take their plain paths.
#pragma once
#include "core/comm.h"

namespace trellis {

struct TensorParallelContext {
  Communicator* group = nullptr;   // the tensor group (ProcessGroups::tensor()); may be null when size == 1
  int size = 1;                    // t
  int rank = 0;                    // this rank's index in the group
  bool sequence_parallel = false;  // activations outside the tensor-parallel regions are token shards
  // Row-parallel forwards without sequence parallelism run their GEMM and all-reduce in this many
  // row chunks, each chunk's all-reduce overlapping the next chunk's GEMM (parallel.tensor_comm_chunks).
  int comm_chunks = 1;
  // Without sequence parallelism, blocks run their forward in two halves of the micro-batch's samples
  // (when it has an even number), so the all-reduce that ends one half's attention or MLP runs while
  // the other half computes (parallel.tensor_split_batch).
  bool split_batch = false;

  bool active() const { return size > 1; }
  // Whether activations between the tensor-parallel regions are this rank's token shard (rows
  // [rank*N/t, (rank+1)*N/t) of the flattened (N, C) activation); with t = 1 they never are.
  bool sharded_tokens() const { return sequence_parallel && size > 1; }

  static TensorParallelContext of(Communicator& group, bool sequence_parallel, int comm_chunks = 1,
                                  bool split_batch = false) {
    return {&group, group.size(), group.rank(), sequence_parallel, comm_chunks, split_batch};
  }
};

}  // namespace trellis
