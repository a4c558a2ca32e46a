// A tokenized corpus on disk (Megatron .bin/.idx or an llm.c token file) read as one token
// stream, the way nanoGPT samples: the first (1 - val_fraction) of the tokens are the train
// split, the rest validation; each split is cut into non-overlapping windows of seq_len + 1
// tokens (the training grid shifted by a seeded offset every epoch), and sample i reads window
// perm_e(i mod W) of epoch e = i / W, where perm_e is a permutation seeded by (seed, split, e).
// Inputs are the first seq_len tokens, targets the last; where the data has a loss mask
// (PREFIX.lossmask, data/loss_mask.h) the targets it marks 0 are -1 (no target). With
// DatasetOptions::whole_documents the samples are instead whole documents packed at open (best fit,
// longest first, each split apart: a document is validation data when it starts in the last
// val_fraction of the tokens), padded to seq_len + 1.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/loss_mask.h"
#include "data/sample_source.h"
#include "data/token_file.h"

namespace trellis {

struct DatasetOptions {
  int64_t seq_len = 0;
  uint64_t seed = 0;
  double val_fraction = 0.1;
  bool need_val = true;     // a validation split too small for one sample is an error (else only unused)
  int64_t model_vocab = 0;  // the model's vocab_size; 0 skips the check against the model
  // Samples of whole documents (data.packing = documents; a Megatron dataset, whose index holds the
  // documents' lengths): the documents of a split are packed into samples of seq_len + 1 tokens,
  // longest first, each into the fullest sample it fits (best fit decreasing), and each sample is
  // padded after them (targets -1); a document longer than that is cut into sample-sized pieces,
  // its rest packed as a document. false: windows of the token stream, documents cut anywhere.
  bool whole_documents = false;
};

class TokenDataset : public SampleSource {
 public:
  // `path`: a Megatron prefix (or its .idx / .bin), or an llm.c token file (or its name without
  // .tok). The format is found from the files' magic numbers. Opening validates the files, reads
  // <stem>.vocab.json if it is there, and scans every token once: an id that is negative, outside
  // the stored vocabulary or >= options.model_vocab is a UserError naming its position.
  TokenDataset(const std::string& path, const DatasetOptions& options);

  void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const override;
  // The stored vocabulary's size if there is a vocabulary file, else the largest id + 1.
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t seq_len() const override { return opt_.seq_len; }
  // "NAME: N tokens, checksum HEX16", NAME the data file's name (the path may differ between
  // machines), HEX16 the ids' checksum (the scan's at open: a rewrite to the same size shows);
  // with a loss mask, ", loss mask HEX16" after it; with whole documents, ", documents HEX16" (a
  // checksum of their lengths, which decide the samples).
  std::string identity() const override;
  std::string target_mask() const override;
  uint64_t checksum() const { return checksum_; }  // of the ids in order (scan_tokens's)
  int64_t distinct_samples(Split s) const override { return windows(s); }
  // The share of the samples' tokens that is padding (whole documents), else 0; for tests and the log.
  double padding_share() const { return padding_share_; }
  // A run of the token stream: `length` tokens from `start`.
  struct Piece {
    int64_t start = 0;
    int64_t length = 0;
    bool rest = false;  // the rest of a document cut into pieces: its first token is no target
  };
  // The runs sample `index` reads, in order: one window of seq_len + 1 tokens, or with whole
  // documents the documents (and pieces of cut ones) packed into it.
  std::vector<Piece> pieces(Split split, int64_t index) const;

  const std::string& format() const { return format_; }  // "megatron" or "llmc"
  const std::string& data_path() const { return data_path_; }
  const std::string& vocabulary_file() const { return vocab_file_; }  // "" if there is none
  int64_t tokens() const { return view_.count; }
  int64_t split_begin(Split s) const { return s == Split::train ? 0 : train_tokens_; }
  int64_t split_tokens(Split s) const { return s == Split::train ? train_tokens_ : view_.count - train_tokens_; }
  // Samples per epoch of a split. The training grid is shifted by a seeded offset in
  // [0, seq_len] every epoch (so windows do not repeat exactly from epoch to epoch), which costs it
  // one window of slack; validation keeps a fixed grid so every evaluation sees the same windows.
  int64_t windows(Split s) const {
    if (opt_.whole_documents) return s == Split::train ? train_runs_ : runs() - train_runs_;
    const int64_t L = opt_.seq_len + 1, n = split_tokens(s);
    return s == Split::train ? (n >= 2 * L ? n / L - 1 : n / L) : n / L;
  }
  // The first token of sample `index`, relative to the whole stream.
  int64_t sample_start(Split split, int64_t index) const;

 private:
  // Which window (stream) or packed sample (whole documents) sample `index` of `split` reads.
  int64_t window(Split split, int64_t index) const;
  // Stream mode: the first token of sample `index`'s window.
  int64_t window_start(Split split, int64_t index) const;
  // Whole documents: which packed sample sample `index` of `split` reads.
  int64_t packed_sample(Split split, int64_t index) const;
  void pack_documents();
  int64_t runs() const { return int64_t(run_first_.size()) - 1; }
  DatasetOptions opt_;
  std::string format_, data_path_, vocab_file_;
  std::unique_ptr<IndexedDataset> indexed_;
  std::unique_ptr<TokenFile> token_file_;
  std::unique_ptr<LossMaskFile> loss_mask_;  // PREFIX.lossmask, where there is one
  TokenView view_;
  int64_t train_tokens_ = 0, vocab_size_ = 0;
  uint64_t checksum_ = 0;
  // Whole documents: sample r holds packed_[run_first_[r] .. run_first_[r + 1]); the training split's first.
  std::vector<Piece> packed_;
  std::vector<int64_t> run_first_{0};
  int64_t train_runs_ = 0, cut_documents_ = 0;
  uint64_t documents_checksum_ = 0;  // of the documents' lengths, which decide the runs
  double padding_share_ = 0.0;
};

}  // namespace trellis
