// GPT-2's byte-level BPE from a vocab.json and merges.txt: bytes mapped to printable code points,
// text split by GPT-2's pre-tokenization pattern, each piece merged by merge rank.
#pragma once
#include <cstdint>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "data/bpe.h"
#include "data/tokenizer.h"

namespace trellis {

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  // `vocab`: token string (in byte-unicode form) -> id; `merges`: pairs in rank order.
  Gpt2BpeTokenizer(std::vector<std::pair<std::string, int32_t>> vocab,
                   std::vector<std::pair<std::string, std::string>> merges, const std::string& source);

  std::string kind() const override { return "gpt2_bpe"; }
  int64_t vocab_size() const override { return bpe_.id_count(); }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string to_json() const override;
  int32_t token_id(const std::string& token) const override { return bpe_.id_of(token); }

 private:
  std::string source_;
  std::vector<std::pair<std::string, int32_t>> vocab_;  // file order, for saving
  std::vector<std::pair<std::string, std::string>> merges_;
  BpeModel bpe_;
  std::array<int32_t, 256> byte_ids_;  // each byte's symbol's id, -1 where the vocabulary lacks it
};

}  // namespace trellis
