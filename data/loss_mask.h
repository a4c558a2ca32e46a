// Which targets a sample's loss counts; the loss is the mean over the targets kept (-1 marks a
// target left out: no loss, no gradient). Two sources of such marks:
//  - data.eod_mask_loss (Megatron's --eod-mask-loss): the target after an end-of-document token is
//    the next document's first token, which nothing before it predicts (EodLossMask);
//  - a dataset's loss mask, PREFIX.lossmask beside its tokens (prepare_data --json-keys
//    prompt,response writes it for supervised fine-tuning): a header naming the tokens it was made
//    for (their count and checksum), then one byte per token of the stream, 1 where the token is
//    to be predicted (a response's), 0 where it is context only (a prompt's).
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/mapped_file.h"
#include "data/sample_source.h"

namespace trellis {

// The samples of `inner`, with target -1 wherever the input is `eod`.
class EodLossMask : public SampleSource {
 public:
  EodLossMask(std::unique_ptr<SampleSource> inner, int32_t eod) : inner_(std::move(inner)), eod_(eod) {}
  void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const override;
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t seq_len() const override { return inner_->seq_len(); }
  std::string identity() const override { return inner_->identity(); }
  int64_t distinct_samples(Split s) const override { return inner_->distinct_samples(s); }
  std::string target_mask() const override;

 private:
  std::unique_ptr<SampleSource> inner_;
  int32_t eod_;
};

// The targets (not -1) of samples [first, first + count) of `split`: what the mean loss over them
// divides by. Draws the samples, so every rank gets the same count for the same samples, whatever
// part of them it trains on.
int64_t count_targets(const SampleSource& data, Split split, int64_t first, int64_t count);

// PREFIX.lossmask for a dataset file (PREFIX.bin, .idx or .tok).
std::string loss_mask_path(const std::string& dataset_path);
// Writes a loss mask as its marks come (0 or 1 per token of the stream); finish() writes the header,
// naming the tokens by their checksum (scan_tokens's, data/token_view.h).
class LossMaskWriter {
 public:
  explicit LossMaskWriter(const std::string& path);
  ~LossMaskWriter();
  LossMaskWriter(const LossMaskWriter&) = delete;
  LossMaskWriter& operator=(const LossMaskWriter&) = delete;
  // `left_out` tokens marked 0, then `kept` marked 1.
  void add(size_t left_out, size_t kept);
  void add(const std::vector<uint8_t>& keep);
  void finish(uint64_t token_checksum);
  int64_t tokens() const { return tokens_; }
  int64_t kept() const { return kept_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t tokens_ = 0, kept_ = 0;
};
// A whole loss mask at once: `keep` holds 0 or 1 per token of the stream whose checksum is
// `token_checksum`.
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& keep, uint64_t token_checksum);

// A loss mask read back, checked against the stream it belongs to: `tokens` ids with checksum
// `token_checksum` (UserError naming the file).
class LossMaskFile {
 public:
  LossMaskFile(const std::string& path, int64_t tokens, uint64_t token_checksum);
  // Whether token p of the stream is a target the loss counts.
  bool keeps(int64_t p) const { return bytes_[p] != 0; }
  int64_t kept() const { return kept_; }  // tokens marked 1
  int64_t kept(int64_t begin, int64_t end) const;  // of tokens [begin, end)
  uint64_t checksum() const { return checksum_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  const uint8_t* bytes_ = nullptr;
  int64_t kept_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace trellis
