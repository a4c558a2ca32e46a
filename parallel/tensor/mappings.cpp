// The tensor-parallel mappings: each is one collective (or none) on the tensor group.
#include "parallel/tensor/mappings.h"

#include <string>

namespace trellis {

namespace {

// Checks that `shard` is one token shard of `full` over the group.
void check_shard(const Communicator& tensor, const Tensor& full, const Tensor& shard, const char* op) {
  const int64_t rows = token_shard_rows(full.rows(), tensor.size());
  TRELLIS_CHECK(shard.rows() == rows && shard.cols() == full.cols() && shard.dtype == full.dtype,
                std::string(op) + ": " + shard.str() + " is not one of " + std::to_string(tensor.size()) +
                    " token shards of " + full.str());
}

}  // namespace

int64_t token_shard_rows(int64_t rows, int parts) {
  if (rows % parts != 0)
    throw UserError("sequence parallelism needs the token rows (micro_batch x seq_len = " + std::to_string(rows) +
                    ") divisible by parallel.tensor = " + std::to_string(parts));
  return rows / parts;
}

CommHandle copy_to_tensor_region_backward(Communicator& tensor, const Tensor& dx) {
  return tensor.all_reduce_async(dx);
}

CommHandle reduce_from_tensor_region_forward(Communicator& tensor, const Tensor& y) {
  return tensor.all_reduce_async(y);
}

Tensor scatter_to_token_shards_forward(Communicator& tensor, const Tensor& full) {
  const int64_t rows = token_shard_rows(full.rows(), tensor.size());
  return full.slice(tensor.rank() * rows * full.cols(), {rows, full.cols()});
}

CommHandle scatter_to_token_shards_backward(Communicator& tensor, const Tensor& dfull, const Tensor& dshard) {
  check_shard(tensor, dfull, dshard, "scatter_to_token_shards_backward");
  return tensor.all_gather_async(dfull, dshard);
}

CommHandle gather_from_token_shards_forward(Communicator& tensor, const Tensor& full, const Tensor& shard) {
  check_shard(tensor, full, shard, "gather_from_token_shards_forward");
  return tensor.all_gather_async(full, shard);
}

CommHandle gather_from_token_shards_backward(Communicator& tensor, const Tensor& dshard, const Tensor& dfull) {
  check_shard(tensor, dfull, dshard, "gather_from_token_shards_backward");
  return tensor.reduce_scatter_async(dshard, dfull);
}

CommHandle reduce_scatter_to_token_shards_forward(Communicator& tensor, const Tensor& shard, const Tensor& full) {
  check_shard(tensor, full, shard, "reduce_scatter_to_token_shards_forward");
  return tensor.reduce_scatter_async(shard, full);
}

CommHandle reduce_scatter_to_token_shards_backward(Communicator& tensor, const Tensor& dfull, const Tensor& dshard) {
  check_shard(tensor, dfull, dshard, "reduce_scatter_to_token_shards_backward");
  return tensor.all_gather_async(dfull, dshard);
}

}  // namespace trellis
