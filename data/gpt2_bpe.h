// GPT-2's byte-level BPE: bytes mapped to printable code points, text split by GPT-2's
// pre-tokenization pattern, each piece merged by merge rank, pieces looked up in vocab.json.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace trellis {

// GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched by hand. \p{L}, \p{N} and \s are exact for ASCII and Latin-1, and the General
// Punctuation block and Unicode spaces are classed correctly; any other non-ASCII code point
// counts as a letter (so e.g. CJK punctuation joins the neighbouring word, unlike GPT-2).
std::vector<std::string> gpt2_pretokenize(const std::string& text);

// The 256-entry byte -> code point map of GPT-2 (printable bytes map to themselves).
const std::vector<uint32_t>& gpt2_byte_to_unicode();

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  // `vocab`: token string (in byte-unicode form) -> id; `merges`: pairs in rank order.
  Gpt2BpeTokenizer(std::vector<std::pair<std::string, int32_t>> vocab,
                   std::vector<std::pair<std::string, std::string>> merges, const std::string& source);

  std::string kind() const override { return "gpt2_bpe"; }
  int64_t vocab_size() const override { return int64_t(id_to_token_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string to_json() const override;

 private:
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  std::string source_;
  std::vector<std::pair<std::string, int32_t>> vocab_;  // file order, for saving
  std::vector<std::pair<std::string, std::string>> merges_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<std::string, int32_t> rank_;  // "a b" -> merge rank
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
};

}  // namespace trellis
