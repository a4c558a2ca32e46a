// GPT-2 byte-level BPE: pieces of GPT-2's pattern, each byte one symbol, merged by rank.
#include "data/gpt2_bpe.h"

#include "core/error.h"
#include "core/json.h"
#include "data/pretokenize.h"
#include "data/utf8.h"

namespace trellis {

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::vector<std::pair<std::string, int32_t>> vocab,
                                   std::vector<std::pair<std::string, std::string>> merges, const std::string& source)
    : source_(source), vocab_(std::move(vocab)), merges_(std::move(merges)), bpe_(vocab_, merges_, source_) {
  for (int b = 0; b < 256; ++b) byte_ids_[size_t(b)] = bpe_.id_of(to_byte_level(std::string(1, char(b))));
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids, word;
  for (const std::string& piece : pretokenize(text, SplitPattern::kGpt2)) {
    word.clear();
    for (char ch : piece) {
      const int32_t id = byte_ids_[uint8_t(ch)];
      if (id < 0)
        throw UserError(source_ + ": the vocabulary has no token " + json_quote(to_byte_level(std::string(1, ch))) +
                        " (needed to encode " + json_quote(piece) + ")");
      word.push_back(id);
    }
    bpe_.merge(word);
    ids.insert(ids.end(), word.begin(), word.end());
  }
  return ids;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (!bpe_.has_id(id)) throw UserError(source_ + ": token id " + std::to_string(id) + " is not in the vocabulary");
    const std::string& tok = bpe_.token_of(id);
    for (size_t i = 0; i < tok.size();) {
      const uint32_t cp = next_utf8(tok, i);
      const int byte = byte_of_byte_level(cp);
      if (byte >= 0) out += char(byte);
      else append_utf8(out, cp);
    }
  }
  return out;
}

std::string Gpt2BpeTokenizer::to_json() const {
  std::string s = "{\"kind\": \"gpt2_bpe\", \"vocab_size\": " + std::to_string(vocab_size()) + ",\n \"vocab\": {";
  for (size_t k = 0; k < vocab_.size(); ++k)
    s += (k ? ", " : "") + json_quote(vocab_[k].first) + ": " + std::to_string(vocab_[k].second);
  s += "},\n \"merges\": [";
  for (size_t k = 0; k < merges_.size(); ++k) s += (k ? ", " : "") + json_quote(merges_[k].first + " " + merges_[k].second);
  return s + "]}\n";
}

}  // namespace trellis
