// BPE merging with a priority queue of candidate pairs over a linked list of symbols: O(n log n)
// in the word's length, so a document that is one word (SentencePiece-style models) stays fast.
#include "data/bpe.h"

#include <queue>

#include "core/error.h"
#include "core/json.h"

namespace trellis {

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    // Ids index tables sized by the largest one: a stray huge id must be an error, not an allocation failure.
    if (id < 0 || id >= (1 << 24))
      throw UserError(source + ": token " + json_quote(tok) + " has id " + std::to_string(id) +
                      " (allowed: 0 to 16777215)");
    if (!token_to_id_.emplace(tok, id).second) throw UserError(source + ": token " + json_quote(tok) + " appears twice");
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) throw UserError(source + ": the vocabulary is empty");
  id_to_token_.resize(size_t(max_id) + 1);
  has_id_.assign(size_t(max_id) + 1, false);
  for (const auto& [tok, id] : vocab) {
    if (has_id_[size_t(id)]) throw UserError(source + ": id " + std::to_string(id) + " is given to two tokens");
    id_to_token_[size_t(id)] = tok;
    has_id_[size_t(id)] = true;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t ia = id_of(a), ib = id_of(b), im = id_of(a + b);
    if (ia < 0 || ib < 0 || im < 0)
      throw UserError(source + ": merge " + std::to_string(r + 1) + " (" + json_quote(a) + " " + json_quote(b) + ") needs " +
                      json_quote(ia < 0 ? a : ib < 0 ? b : a + b) + ", which is not in the vocabulary");
    merges_.emplace(pair_key(ia, ib), Merge{int32_t(r), im});  // a repeated pair keeps its first rank
  }
}

int32_t BpeModel::id_of(const std::string& token) const {
  const auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int32_t n = int32_t(symbols.size());
  if (n < 2) return;
  std::vector<int32_t> next(symbols.size()), prev(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    prev[size_t(i)] = i - 1;
  }
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  std::vector<bool> gone(symbols.size(), false);
  const auto offer = [&](int32_t left) {
    const int32_t right = left < 0 ? -1 : next[size_t(left)];
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[size_t(left)], symbols[size_t(right)]));
    if (it != merges_.end())
      queue.push({it->second.rank, left, right, symbols[size_t(left)], symbols[size_t(right)], it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // A candidate is stale once either symbol was merged into another.
    if (gone[size_t(c.left)] || gone[size_t(c.right)] || next[size_t(c.left)] != c.right ||
        symbols[size_t(c.left)] != c.left_id || symbols[size_t(c.right)] != c.right_id)
      continue;
    symbols[size_t(c.left)] = c.result;
    gone[size_t(c.right)] = true;
    next[size_t(c.left)] = next[size_t(c.right)];
    if (next[size_t(c.left)] >= 0) prev[size_t(next[size_t(c.left)])] = c.left;
    offer(prev[size_t(c.left)]);
    offer(c.left);
  }
  std::vector<int32_t> merged;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) merged.push_back(symbols[size_t(i)]);
  symbols = std::move(merged);
}

}  // namespace trellis
