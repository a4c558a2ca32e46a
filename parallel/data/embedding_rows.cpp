// Gathered embedding rows instead of a second all-reduce of the token embedding's gradient.
#include "parallel/data/embedding_rows.h"

#include "core/error.h"
#include "core/nvtx.h"
#include "core/ops.h"

namespace trellis {

EmbeddingRowExchange::EmbeddingRowExchange(Runtime& rt, Communicator& data_group, GradientSync& sync,
                                           std::pair<int64_t, int64_t> wte_range, int64_t B, int64_t T, int64_t C,
                                           DType dtype)
    : rt_(rt), comm_(data_group), sync_(sync), wte_range_(wte_range) {
  const int64_t n = comm_.size();
  rows_buf_ = Buffer(rt.allocator(), size_t(n * B * T * C) * dtype_size(dtype), "gathered embedding rows");
  tokens_buf_ = Buffer(rt.allocator(), size_t(n * B * T) * dtype_size(DType::i32), "gathered embedding tokens");
  rows_ = rows_buf_.tensor(dtype, {n * B, T, C});
  tokens_ = tokens_buf_.tensor(DType::i32, {n * B, T});
}

bool EmbeddingRowExchange::pays(int data_ranks, int64_t B, int64_t T, int64_t C, DType dtype, int64_t vocab) {
  const double gathered = double(data_ranks) * double(B * T) * (double(C) * double(dtype_size(dtype)) + 4.0);
  return data_ranks > 1 && gathered < double(vocab) * double(C) * 4.0;
}

void EmbeddingRowExchange::gather(const Tensor& demb, const Tensor& tokens) {
  TRELLIS_CHECK(demb.numel() * comm_.size() == rows_.numel() && tokens.numel() * comm_.size() == tokens_.numel() &&
                    demb.dtype == rows_.dtype && tokens.dtype == DType::i32,
                "EmbeddingRowExchange: rows " + demb.str() + " or tokens " + tokens.str() + " do not match its buffers");
  rows_gathered_ = comm_.all_gather_async(rows_.view({rows_.numel()}), demb.view({demb.numel()}));
  tokens_gathered_ = comm_.all_gather_async(tokens_.view({tokens_.numel()}), tokens.view({tokens.numel()}));
  gathering_ = true;
}

void EmbeddingRowExchange::add_rows(const Tensor& wte_grad, int64_t vocab_begin, int64_t vocab_size) {
  NvtxRange r("embedding_row_exchange");
  TRELLIS_CHECK(gathering_, "EmbeddingRowExchange::add_rows before gather");
  gathering_ = false;
  rows_gathered_.wait();
  tokens_gathered_.wait();
  sync_.wait_for(wte_range_.first, wte_range_.second);
  embedding_backward(rt_, wte_grad, Tensor(), rows_, tokens_, vocab_begin, vocab_size);
}

}  // namespace trellis
