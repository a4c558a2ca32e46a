// Several datasets mixed by weight, keyed by global sample index like each of them. Sources are
// assigned Megatron's way, greedily to the source furthest behind its share, within blocks of
// 1024 samples that all repeat the same assignment: so the counts track the weights to 1/1024
// per block, and the within-source index of sample i is O(1) (block * per-block count + the
// count earlier in the block), with no scan over earlier samples.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/token_dataset.h"

namespace trellis {

class BlendedDataset : public SampleSource {
 public:
  static constexpr int64_t kBlock = 1024;
  // Weights need not sum to 1; each must be > 0. Every source must have the same seq_len.
  BlendedDataset(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights);

  void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const override;
  int64_t vocab_size() const override { return vocab_size_; }  // the largest of the sources'
  int64_t seq_len() const override { return sources_[0]->seq_len(); }
  std::string identity() const override;  // the sources', in order
  std::string target_mask() const override;  // the sources' that leave targets out

  int64_t sources() const { return int64_t(sources_.size()); }
  // Which source sample `index` comes from, and its index within that source.
  int64_t source_of(int64_t index) const { return assignment_[size_t(index % kBlock)]; }
  int64_t index_in_source(int64_t index) const;

 private:
  std::vector<std::unique_ptr<SampleSource>> sources_;
  std::vector<int32_t> assignment_;  // (kBlock) source of each position in a block
  std::vector<int64_t> before_;      // (kBlock) samples of the same source earlier in the block
  std::vector<int64_t> per_block_;   // (sources) samples of each source in a block
  int64_t vocab_size_ = 0;
};

// Opens what a config names: "PATH" (one dataset) or Megatron's blend "W1 PATH1 W2 PATH2 ...".
std::unique_ptr<SampleSource> open_dataset(const std::string& spec, const DatasetOptions& options);

}  // namespace trellis
