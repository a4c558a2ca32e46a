// The token embedding's gradient under data parallelism (ZeRO stage 0, one pipeline stage): its
// all-reduce would otherwise start only after the embedding backward, the last op of backward, and
// run with nothing beside it. The classifier's part of that gradient is final once the last
// micro-batch's forward has run, so its bucket is all-reduced as backward begins; what the last
// micro-batch's embedding backward adds (its rows of the residual gradient, scattered by token) is
// gathered from every data rank instead, and every rank scatters all ranks' rows, in rank order,
// into the reduced gradient. At GPT-2 shapes and a few data ranks the gathered rows are far fewer
// bytes than the (vocabulary x d_model) f32 gradient.
#pragma once
#include <cstdint>
#include <utility>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"
#include "core/tensor.h"
#include "parallel/data/gradient_sync.h"

namespace trellis {

class EmbeddingRowExchange {
 public:
  // wte_range: the token embedding's range in the gradient buffer, a bucket of its own in `sync`.
  // Rows of a micro-batch: (B, T, C) of `dtype`, tokens (B, T) i32.
  EmbeddingRowExchange(Runtime& rt, Communicator& data_group, GradientSync& sync, std::pair<int64_t, int64_t> wte_range,
                       int64_t B, int64_t T, int64_t C, DType dtype);

  // Whether gathering the rows moves fewer bytes than all-reducing the gradient (vocab x C f32).
  static bool pays(int data_ranks, int64_t B, int64_t T, int64_t C, DType dtype, int64_t vocab);

  // Starts gathering every data rank's (demb, tokens). Called before the reductions of the buckets
  // that complete after it, so the gather does not queue behind them on the comm stream.
  void gather(const Tensor& demb, const Tensor& tokens);
  // wte_grad += the embedding backward of the gathered rows, in rank order, after the gradient's own
  // reduction (started by the caller's ready() of wte_range). The vocabulary shard as in
  // embedding_backward.
  void add_rows(const Tensor& wte_grad, int64_t vocab_begin, int64_t vocab_size);

 private:
  Runtime& rt_;
  Communicator& comm_;
  GradientSync& sync_;
  std::pair<int64_t, int64_t> wte_range_;
  Buffer rows_buf_, tokens_buf_;
  Tensor rows_, tokens_;  // all ranks' rows (N B, T, C) and tokens (N B, T)
  CommHandle rows_gathered_, tokens_gathered_;
  bool gathering_ = false;
};

}  // namespace trellis
