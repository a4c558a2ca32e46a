// The greedy weighted assignment of samples to sources, and parsing a data path spec.
#include "data/blended_dataset.h"

#include <cmath>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"

namespace trellis {

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights)
    : sources_(std::move(sources)) {
  if (sources_.empty()) throw UserError("blended dataset: no sources");
  if (weights.size() != sources_.size())
    throw UserError("blended dataset: " + std::to_string(sources_.size()) + " sources but " +
                    std::to_string(weights.size()) + " weights");
  double total = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w))
      throw UserError("blended dataset: every weight must be a finite number > 0, got " + std::to_string(w));
    total += w;
  }
  for (const auto& s : sources_) {
    if (s->seq_len() != sources_[0]->seq_len())
      throw UserError("blended dataset: sources have different seq_len (" + std::to_string(s->seq_len()) + " and " +
                      std::to_string(sources_[0]->seq_len()) + ")");
    vocab_size_ = std::max(vocab_size_, s->vocab_size());
  }
  const size_t k = sources_.size();
  per_block_.assign(k, 0);
  assignment_.resize(kBlock);
  before_.resize(kBlock);
  for (int64_t r = 0; r < kBlock; ++r) {  // give sample r to the source furthest below its share
    size_t best = 0;
    double best_error = -1e300;
    for (size_t s = 0; s < k; ++s) {
      const double error = weights[s] / total * double(r + 1) - double(per_block_[s]);
      if (error > best_error) { best_error = error; best = s; }
    }
    assignment_[size_t(r)] = int32_t(best);
    before_[size_t(r)] = per_block_[best]++;
  }
}

int64_t BlendedDataset::index_in_source(int64_t index) const {
  TRELLIS_CHECK(index >= 0, "negative sample index " + std::to_string(index));
  const int64_t r = index % kBlock;
  return (index / kBlock) * per_block_[size_t(assignment_[size_t(r)])] + before_[size_t(r)];
}

void BlendedDataset::sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const {
  sources_[size_t(source_of(index))]->sample(split, index_in_source(index), inputs, targets);
}

std::string BlendedDataset::identity() const {
  std::string s;
  for (const auto& src : sources_) s += (s.empty() ? "" : "; ") + src->identity();
  return s;
}

std::string BlendedDataset::target_mask() const {
  std::string s;
  bool all = true;  // every source leaves some out
  for (const auto& src : sources_) {
    const std::string m = src->target_mask();
    if (!m.empty()) s += (s.empty() ? "" : "; ") + m;
    all &= !m.empty();
  }
  return s.empty() || all ? s : s + "; every target of the other sources";
}

std::unique_ptr<SampleSource> open_dataset(const std::string& spec, const DatasetOptions& options) {
  // A path with spaces in it: one dataset when the whole text names one (a file, or a Megatron prefix).
  std::error_code ec;
  auto file = [&](const std::string& p) { return std::filesystem::is_regular_file(p, ec); };
  if (spec.find_first_of(" \t") != std::string::npos &&
      (file(spec) || file(spec + ".idx") || file(spec + ".bin") || file(spec + ".tok")))
    return std::make_unique<TokenDataset>(spec, options);
  std::istringstream in(spec);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.size() == 1) return std::make_unique<TokenDataset>(words[0], options);
  if (words.empty() || words.size() % 2 != 0)
    throw UserError("data path \"" + spec + "\": expected PATH or WEIGHT PATH WEIGHT PATH ...");
  std::vector<std::unique_ptr<SampleSource>> sources;
  std::vector<double> weights;
  // One token id must mean one thing in every source: the vocabulary files that are there agree.
  std::string first_vocab, first_vocab_text;
  for (size_t i = 1; i < words.size(); i += 2) {
    const std::string vocab = vocabulary_path(words[i]);
    std::error_code ec;
    if (!std::filesystem::exists(vocab, ec)) continue;
    const std::string text = vocabulary_without_mask_flag(read_text_file(vocab));  // masked or not, the same ids
    if (first_vocab.empty()) {
      first_vocab = vocab;
      first_vocab_text = text;
    } else if (text != first_vocab_text) {
      throw UserError("data path \"" + spec + "\": " + first_vocab + " and " + vocab +
                      " differ: a blend's sources must share one vocabulary (tokenize them with one prepare_data run, "
                      "or one tokenizer)");
    }
  }
  for (size_t i = 0; i < words.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(words[i].c_str(), &end);
    if (end == words[i].c_str() || *end != '\0')
      throw UserError("data path \"" + spec + "\": \"" + words[i] + "\" is not a weight (expected WEIGHT PATH pairs; " +
                      "a single path with spaces is taken whole only when it exists)");
    weights.push_back(w);
    sources.push_back(std::make_unique<TokenDataset>(words[i + 1], options));
  }
  return std::make_unique<BlendedDataset>(std::move(sources), std::move(weights));
}

}  // namespace trellis
