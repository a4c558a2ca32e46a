// GPT-2 byte-level BPE: the hand-written pre-tokenizer, merging by rank, and decoding.
#include "data/gpt2_bpe.h"

#include <climits>

#include "core/error.h"
#include "core/json.h"
#include "data/utf8.h"

namespace trellis {

namespace {

bool is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool is_digit(uint32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE);
}
bool is_letter(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c < 0x100)  // Latin-1: exact
    return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  if (c >= 0x2000 && c <= 0x206F) return false;  // General Punctuation (spaces, dashes, quotes)
  if (c >= 0x3000 && c <= 0x3003) return false;  // CJK space and punctuation
  if (c == 0xFFFD) return false;
  return !is_space(c) && !is_digit(c);  // approximation: the rest counts as letters
}
bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

}  // namespace

std::vector<std::string> gpt2_pretokenize(const std::string& text) {
  std::vector<uint32_t> cp;
  std::vector<size_t> at;  // byte offset of each code point, plus the end
  for (size_t i = 0; i < text.size();) {
    at.push_back(i);
    cp.push_back(next_utf8(text, i));
  }
  at.push_back(text.size());
  const size_t n = cp.size();
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    const uint32_t c = cp[i];
    if (c == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
      const uint32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    if (end == i) {  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
      const size_t start = (c == ' ' && i + 1 < n) ? i + 1 : i;
      for (bool (*cls)(uint32_t) : {is_letter, is_digit, is_other}) {
        if (!cls(cp[start])) continue;
        end = start;
        while (end < n && cls(cp[end])) ++end;
        break;
      }
    }
    if (end == i) {  // '\s+(?!\S)', then '\s+'
      end = i;
      while (end < n && is_space(cp[end])) ++end;
      if (end < n && end - i >= 2) --end;  // leave the last space to the word that follows
    }
    pieces.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::vector<std::pair<std::string, int32_t>> vocab,
                                   std::vector<std::pair<std::string, std::string>> merges, const std::string& source)
    : source_(source), vocab_(std::move(vocab)), merges_(std::move(merges)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    // Ids index tables sized by the largest one: a stray huge id must be an error, not an allocation failure.
    if (id < 0 || id >= (1 << 24))
      throw UserError(source_ + ": token " + json_quote(tok) + " has id " + std::to_string(id) +
                      " (allowed: 0 to 16777215)");
    if (!token_to_id_.emplace(tok, id).second) throw UserError(source_ + ": token " + json_quote(tok) + " appears twice");
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) throw UserError(source_ + ": the vocabulary is empty");
  id_to_token_.resize(size_t(max_id) + 1);
  has_id_.assign(size_t(max_id) + 1, false);
  for (const auto& [tok, id] : vocab_) {
    if (has_id_[size_t(id)]) throw UserError(source_ + ": id " + std::to_string(id) + " is given to two tokens");
    id_to_token_[size_t(id)] = tok;
    has_id_[size_t(id)] = true;
  }
  for (size_t r = 0; r < merges_.size(); ++r) rank_.emplace(merges_[r].first + " " + merges_[r].second, int32_t(r));
  const auto& b2u = gpt2_byte_to_unicode();
  for (uint32_t b = 0; b < 256; ++b) unicode_to_byte_[b2u[b]] = uint8_t(b);
}

void Gpt2BpeTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  const auto& b2u = gpt2_byte_to_unicode();
  std::vector<std::string> word;
  for (char ch : piece) {
    std::string sym;
    append_utf8(sym, b2u[uint8_t(ch)]);
    word.push_back(std::move(sym));
  }
  while (word.size() > 1) {  // merge the lowest-ranked adjacent pair, everywhere, until none is left
    int32_t best = INT32_MAX;
    size_t best_at = 0;
    for (size_t k = 0; k + 1 < word.size(); ++k) {
      const auto it = rank_.find(word[k] + " " + word[k + 1]);
      if (it != rank_.end() && it->second < best) { best = it->second; best_at = k; }
    }
    if (best == INT32_MAX) break;
    const std::string a = word[best_at], b = word[best_at + 1];
    std::vector<std::string> merged;
    for (size_t k = 0; k < word.size();) {
      if (k + 1 < word.size() && word[k] == a && word[k + 1] == b) {
        merged.push_back(a + b);
        k += 2;
      } else {
        merged.push_back(word[k++]);
      }
    }
    word = std::move(merged);
  }
  for (const std::string& sym : word) {
    const auto it = token_to_id_.find(sym);
    if (it == token_to_id_.end())
      throw UserError(source_ + ": the vocabulary has no token " + json_quote(sym) + " (needed to encode " +
                      json_quote(piece) + ")");
    out.push_back(it->second);
  }
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  for (const std::string& piece : gpt2_pretokenize(text)) encode_piece(piece, ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= id_to_token_.size() || !has_id_[size_t(id)])
      throw UserError(source_ + ": token id " + std::to_string(id) + " is not in the vocabulary");
    const std::string& tok = id_to_token_[size_t(id)];
    for (size_t i = 0; i < tok.size();) {
      const uint32_t cp = next_utf8(tok, i);
      const auto it = unicode_to_byte_.find(cp);
      if (it != unicode_to_byte_.end()) out += char(it->second);
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
