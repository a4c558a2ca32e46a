// The vocabulary-parallel embedding and cross-entropy: ops from core, collectives from the mappings.
#include "parallel/tensor/vocab_parallel.h"

#include <string>

#include "core/ops.h"
#include "parallel/tensor/mappings.h"

namespace trellis {

VocabParallelEmbedding::VocabParallelEmbedding(Communicator& tensor, const Parameter& wte, const Parameter* wpe,
                                               int64_t padded_vocab, bool sequence_parallel)
    : tensor_(&tensor), wte_(&wte), wpe_(wpe), padded_vocab_(padded_vocab), sp_(sequence_parallel) {
  const int t = tensor.size();
  const TensorSplit& s = wte.spec.split;
  TRELLIS_CHECK(padded_vocab % t == 0 && wte.value.size(0) == padded_vocab / t &&
                    (t == 1 || (s.dim == 0 && s.parts == t && s.index == tensor.rank())),
                "VocabParallelEmbedding: " + wte.spec.name + " " + wte.value.str() + " is not rank " +
                    std::to_string(tensor.rank()) + "'s row shard of a " + std::to_string(padded_vocab) +
                    "-row table over " + std::to_string(t) + " ranks");
  TRELLIS_CHECK(!wpe || wpe->spec.split.replicated(), "VocabParallelEmbedding: " + (wpe ? wpe->spec.name : "") +
                                                         " must be replicated");
}

void VocabParallelEmbedding::forward(Runtime& rt, const Tensor& x, const Tensor& tokens, Arena& work,
                                     const Tensor& positions) const {
  const Tensor wpe = wpe_ && tensor_->rank() == 0 ? wpe_->value : Tensor();
  if (!sp_) {
    embedding_forward(rt, x, tokens, wte_->value, wpe, vocab_begin(), padded_vocab_, positions);
    reduce_from_tensor_region_forward(*tensor_, x).wait();
    return;
  }
  const Tensor full = work.take(x.dtype, {tokens.size(0), tokens.size(1), x.cols()});
  embedding_forward(rt, full, tokens, wte_->value, wpe, vocab_begin(), padded_vocab_, positions);
  reduce_scatter_to_token_shards_forward(*tensor_, x, full).wait();
}

void VocabParallelEmbedding::backward(Runtime& rt, const Tensor& dx, const Tensor& tokens, Arena& work,
                                      const Tensor& positions) const {
  Tensor dfull = dx;
  if (sp_) {  // every rank's lookups need the gradient of every token row
    dfull = work.take(dx.dtype, {tokens.size(0), tokens.size(1), dx.cols()});
    reduce_scatter_to_token_shards_backward(*tensor_, dfull, dx).wait();
  }
  embedding_backward(rt, wte_->grad, wpe_ ? wpe_->grad : Tensor(), dfull, tokens, vocab_begin(), padded_vocab_,
                     positions);
}

void vocab_parallel_cross_entropy(Runtime& rt, Communicator& tensor, const Tensor& losses, const Tensor& logits,
                                  const Tensor& targets, const Tensor& stats, int64_t vocab, int64_t vocab_begin,
                                  float dloss, bool backward) {
  const int64_t n = logits.size(0);
  TRELLIS_CHECK(stats.numel() >= 3 * n && stats.dtype == DType::f32,
                "vocab_parallel_cross_entropy: stats " + stats.str() + " must hold 3 x " + std::to_string(n) + " f32");
  const Tensor row_max = stats.slice(0, {n}), sums = stats.slice(n, {2 * n});
  const Tensor row_sum = sums.slice(0, {n}), target_logit = sums.slice(n, {n});
  vocab_parallel_xent_max(rt, row_max, logits, vocab, vocab_begin);
  tensor.all_reduce(row_max, ReduceOp::max);
  vocab_parallel_xent_sum_exp(rt, row_sum, target_logit, logits, targets, row_max, vocab, vocab_begin);
  tensor.all_reduce(sums);  // the sums of exp and the target logits: one message
  vocab_parallel_xent_loss_and_grad(rt, losses, backward ? logits : Tensor(), logits, targets, row_max, row_sum,
                                    target_logit, vocab, vocab_begin, dloss);
}

}  // namespace trellis
