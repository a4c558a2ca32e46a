// The vocabulary-parallel ends of a GPT under tensor parallelism (Megatron): the token embedding split
// by vocabulary rows, and the cross-entropy of logits split by vocabulary columns. Neither ever holds
// the whole vocabulary on one rank; the per-row statistics (and the embedding's sum) cross the group.
#pragma once
#include <cstdint>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/parameters.h"
#include "core/runtime.h"

namespace trellis {

// The first row of rank `rank`'s shard of a `padded_vocab`-row table split over `parts` ranks.
inline int64_t vocab_shard_begin(int rank, int parts, int64_t padded_vocab) { return rank * (padded_vocab / parts); }

// wte (Vp/t, C), TensorSplit dim 0: rank r holds the rows of vocabulary [r Vp/t, (r+1) Vp/t) of the
// padded vocabulary Vp. wpe (T_max, C) replicated, or null (no position table: rotary positions).
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Communicator& tensor, const Parameter& wte, const Parameter* wpe, int64_t padded_vocab,
                         bool sequence_parallel);

  int64_t vocab_begin() const { return vocab_shard_begin(tensor_->rank(), tensor_->size(), padded_vocab_); }

  // x = wte[tokens] + wpe[positions], tokens (B, T) i32. Each rank looks up the tokens of its shard
  // (zeros for the others) and rank 0 adds the positions, so the sum over the group holds them once:
  // an all-reduce into the full x (B, T, C), or with sequence parallelism a reduce-scatter into this
  // rank's token shard x (B T / t, C) from a full (B, T, C) tensor of `work`. positions: each token's
  // row of wpe (embedding_forward's; undefined: t).
  void forward(Runtime& rt, const Tensor& x, const Tensor& tokens, Arena& work, const Tensor& positions = {}) const;
  // wte.grad (the shard's rows) += and wpe.grad += the lookups' gradients, from dx: the full (B, T, C)
  // gradient (the same on every rank), or with sequence parallelism this rank's token shard,
  // all-gathered into `work` first. wpe's gradient comes from the full dx, so it is equal on every
  // rank and needs no reduction over the group.
  void backward(Runtime& rt, const Tensor& dx, const Tensor& tokens, Arena& work, const Tensor& positions = {}) const;

 private:
  Communicator* tensor_;
  const Parameter* wte_;
  const Parameter* wpe_;  // null: none
  int64_t padded_vocab_;
  bool sp_;
};

// The softmax cross-entropy of (rows, Vp/t) logits, this rank's vocabulary columns starting at
// vocab_begin (vocab: the real vocabulary; padded columns count for nothing), in three passes with
// two all-reduces over the group: the row maxima (MAX), then the rows' sums of exp and the target's
// logit (one SUM over one buffer). losses (rows, f32) come out the same on every rank; with backward,
// logits are overwritten by dlogits = dloss (softmax - onehot) on the shard. stats: f32 scratch of
// 3 x rows.
void vocab_parallel_cross_entropy(Runtime& rt, Communicator& tensor, const Tensor& losses, const Tensor& logits,
                                  const Tensor& targets, const Tensor& stats, int64_t vocab, int64_t vocab_begin,
                                  float dloss, bool backward);

}  // namespace trellis
