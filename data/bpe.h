// A BPE vocabulary and merge table, shared by GPT-2's tokenizer and Hugging Face's tokenizer.json:
// a word, given as its initial symbols, is merged pair by pair, the lowest-ranked pair first (the
// leftmost among equal ones), which is what GPT-2's encoder and Hugging Face tokenizers compute.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trellis {

class BpeModel {
 public:
  // `vocab`: token -> id; `merges`: pairs in rank order. UserError naming `source` for a bad id, a
  // token given twice, or a merge whose parts or result are not tokens of the vocabulary.
  BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source);

  int32_t id_of(const std::string& token) const;  // -1 if it is not a token
  bool has_id(int32_t id) const { return id >= 0 && size_t(id) < has_id_.size() && has_id_[size_t(id)]; }
  const std::string& token_of(int32_t id) const { return id_to_token_[size_t(id)]; }
  int64_t id_count() const { return int64_t(id_to_token_.size()); }  // the largest id + 1
  // Merges the symbols (token ids) of one word in place.
  void merge(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank, result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
};

}  // namespace trellis
