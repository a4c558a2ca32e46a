// Synthetic token streams drawn from a counter-based RNG keyed by (seed, split, sample index).
#include "data/synthetic_dataset.h"

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace trellis {

namespace {
constexpr double kFollowProbability = 0.9;
uint32_t draw(uint64_t seed, uint64_t stream, uint64_t index) { return philox_word(seed, stream, index); }
}  // namespace

SyntheticDataset::SyntheticDataset(std::string kind, int64_t vocab_size, int64_t seq_len, uint64_t seed)
    : kind_(std::move(kind)), vocab_(vocab_size), seq_len_(seq_len), seed_(seed) {
  TRELLIS_CHECK(kind_ == "synthetic" || kind_ == "random", "unknown synthetic data kind " + kind_);
  successor_.resize(size_t(vocab_));
  for (int64_t i = 0; i < vocab_; ++i) successor_[size_t(i)] = int32_t(i);
  for (int64_t i = vocab_ - 1; i > 0; --i) {  // Fisher-Yates from the seed
    int64_t j = int64_t(draw(seed_, 0xdada, uint64_t(i)) % uint64_t(i + 1));
    std::swap(successor_[size_t(i)], successor_[size_t(j)]);
  }
}

void SyntheticDataset::sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const {
  const uint64_t stream = (split == Split::train ? 1ull : 2ull) << 40 | uint64_t(index);
  const uint64_t n = uint64_t(seq_len_ + 1);
  int32_t prev = int32_t(draw(seed_, stream, 0) % uint64_t(vocab_));
  for (uint64_t t = 0; t < n; ++t) {
    int32_t tok = prev;
    if (t > 0) {
      const uint32_t coin = draw(seed_, stream, 2 * t);
      const uint32_t other = draw(seed_, stream, 2 * t + 1);
      const bool follow = kind_ == "synthetic" && double(coin >> 8) / 16777216.0 < kFollowProbability;
      tok = follow ? successor_[size_t(prev)] : int32_t(other % uint64_t(vocab_));
    }
    if (t < n - 1) inputs[t] = tok;
    if (t > 0) targets[t - 1] = tok;
    prev = tok;
  }
}

void SyntheticDataset::batch(Split split, int64_t first, int64_t count, std::vector<int32_t>& inputs,
                             std::vector<int32_t>& targets) const {
  inputs.resize(size_t(count * seq_len_));
  targets.resize(size_t(count * seq_len_));
  for (int64_t i = 0; i < count; ++i)
    sample(split, first + i, inputs.data() + i * seq_len_, targets.data() + i * seq_len_);
}

double SyntheticDataset::entropy_floor() const {
  const double V = double(vocab_);
  if (kind_ == "random") return std::log(V);
  // The successor has probability p + (1 - p)/V, every other token (1 - p)/V.
  const double p = kFollowProbability, hit = p + (1 - p) / V, miss = (1 - p) / V;
  return -(hit * std::log(hit) + (V - 1) * miss * std::log(miss));
}

}  // namespace trellis
