// Byte and character tokenizers, reading GPT-2's vocab.json/merges.txt, and vocabulary files.
#include "data/tokenizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "data/gpt2_bpe.h"
#include "data/hf_tokenizer.h"
#include "data/mapped_file.h"
#include "data/utf8.h"

namespace trellis {

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = uint8_t(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 0 || id > 255) throw UserError("byte tokenizer: token id " + std::to_string(id) + " is not a byte");
      s += char(id);
    }
    return s;
  }
  std::string to_json() const override { return "{\"kind\": \"byte\", \"vocab_size\": 256}\n"; }
};

class CharTokenizer : public Tokenizer {
 public:
  explicit CharTokenizer(std::vector<uint32_t> chars) : chars_(std::move(chars)) {
    for (size_t i = 0; i < chars_.size(); ++i) index_.emplace_back(chars_[i], int32_t(i));
    std::sort(index_.begin(), index_.end());
  }
  std::string kind() const override { return "char"; }
  int64_t vocab_size() const override { return int64_t(chars_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      const size_t at = i;
      const uint32_t cp = next_utf8(text, i);
      const auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(cp, INT32_MIN));
      if (it == index_.end() || it->first != cp)
        throw UserError("char tokenizer: character " + json_quote(text.substr(at, i - at)) + " (U+" + hex(cp) +
                        ") at byte " + std::to_string(at) + " is not in the vocabulary");
      ids.push_back(it->second);
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 0 || id >= int32_t(chars_.size()))
        throw UserError("char tokenizer: token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(chars_.size()));
      append_utf8(s, chars_[size_t(id)]);
    }
    return s;
  }
  std::string to_json() const override {
    std::string s = "{\"kind\": \"char\", \"vocab_size\": " + std::to_string(chars_.size()) + ", \"chars\": [";
    for (size_t i = 0; i < chars_.size(); ++i) {
      std::string c;
      append_utf8(c, chars_[i]);
      s += (i ? ", " : "") + json_quote(c);
    }
    return s + "]}\n";
  }

 private:
  static std::string hex(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%04X", v);
    return buf;
  }
  std::vector<uint32_t> chars_;
  std::vector<std::pair<uint32_t, int32_t>> index_;  // sorted by code point
};

std::vector<std::pair<std::string, std::string>> read_merges(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string::npos || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      throw UserError(path + ":" + std::to_string(line_no) + ": expected a merge \"left right\", got " +
                      (line.size() > 80 ? json_quote(line.substr(0, 80)) + "... (" + std::to_string(line.size()) + " bytes)"
                                        : json_quote(line)));
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return merges;
}

// v's value when it is a JSON number with an integral value ("3", "3.0", "3e0"), else nullopt.
std::optional<int64_t> whole_number(const JsonValue& v) {
  double d = 0;
  if (v.kind != JsonValue::Kind::kNumber) return std::nullopt;
  const auto [ptr, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), d);
  if (ec != std::errc() || d != std::trunc(d) || std::fabs(d) > 9.0e18) return std::nullopt;
  return int64_t(d);
}

std::vector<std::pair<std::string, int32_t>> vocab_from_json(const JsonValue& v, const std::string& source) {
  if (v.kind != JsonValue::Kind::kObject) throw UserError(source + ": the vocabulary must be a JSON object {token: id}");
  std::vector<std::pair<std::string, int32_t>> out;
  for (const auto& [tok, id] : v.members) {
    const std::optional<int64_t> n = whole_number(id);
    if (!n || *n != int32_t(*n)) throw UserError(source + ": the id of token " + json_quote(tok) + " is not an integer");
    out.emplace_back(tok, int32_t(*n));
  }
  return out;
}

const JsonValue& member(const JsonValue& v, std::string_view key, JsonValue::Kind kind, const std::string& path) {
  const JsonValue* m = v.find(key);
  if (!m || m->kind != kind) throw UserError(path + ": missing or mistyped \"" + std::string(key) + "\"");
  return *m;
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> make_char_tokenizer(const std::vector<std::string>& texts) {
  std::set<uint32_t> seen;
  for (const std::string& t : texts)
    for (size_t i = 0; i < t.size();) seen.insert(next_utf8(t, i));
  return std::make_unique<CharTokenizer>(std::vector<uint32_t>(seen.begin(), seen.end()));
}

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& vocab_json_path, const std::string& merges_path) {
  const JsonValue v = parse_json(read_text_file(vocab_json_path), vocab_json_path);
  return std::make_unique<Gpt2BpeTokenizer>(vocab_from_json(v, vocab_json_path), read_merges(merges_path),
                                            vocab_json_path);
}

namespace {
constexpr char kMaskFlag[] = "\"loss_mask\": true, ";  // right after the file's opening brace
}  // namespace

void save_vocabulary(const Tokenizer& tok, const std::string& path, bool loss_mask) {
  std::string s = tok.to_json();
  if (loss_mask) s.insert(s.find('{') + 1, kMaskFlag);
  write_file(path, s.data(), s.size());
}

std::string vocabulary_without_mask_flag(std::string text) {
  const size_t brace = text.find('{');
  if (brace != std::string::npos && text.compare(brace + 1, sizeof kMaskFlag - 1, kMaskFlag) == 0)
    text.erase(brace + 1, sizeof kMaskFlag - 1);
  return text;
}

std::unique_ptr<Tokenizer> load_vocabulary(const std::string& path) {
  const std::string text = read_text_file(path);
  const JsonValue v = parse_json(text, path);
  if (v.kind != JsonValue::Kind::kObject) throw UserError(path + ": a vocabulary file must be a JSON object");
  const std::string kind = member(v, "kind", JsonValue::Kind::kString, path).text;
  std::unique_ptr<Tokenizer> tok;
  if (kind == "byte") {
    tok = make_byte_tokenizer();
  } else if (kind == "char") {
    std::vector<uint32_t> chars;
    for (const JsonValue& c : member(v, "chars", JsonValue::Kind::kArray, path).items) {
      const std::vector<uint32_t> cps = c.kind == JsonValue::Kind::kString ? decode_utf8(c.text) : std::vector<uint32_t>{};
      if (cps.size() != 1) throw UserError(path + ": every entry of \"chars\" must be one character");
      chars.push_back(cps[0]);
    }
    tok = std::make_unique<CharTokenizer>(std::move(chars));
  } else if (kind == "gpt2_bpe") {
    std::vector<std::pair<std::string, std::string>> merges;
    for (const JsonValue& m : member(v, "merges", JsonValue::Kind::kArray, path).items) {
      const size_t sp = m.kind == JsonValue::Kind::kString ? m.text.find(' ') : std::string::npos;
      if (sp == std::string::npos) throw UserError(path + ": every merge must be a string \"left right\"");
      merges.emplace_back(m.text.substr(0, sp), m.text.substr(sp + 1));
    }
    tok = std::make_unique<Gpt2BpeTokenizer>(vocab_from_json(member(v, "vocab", JsonValue::Kind::kObject, path), path),
                                             std::move(merges), path);
  } else if (kind == "hf_bpe") {
    const JsonValue& t = member(v, "tokenizer", JsonValue::Kind::kObject, path);
    tok = hf_tokenizer_from_json(t, text.substr(t.begin, t.end - t.begin), path + ": tokenizer");
  } else {
    throw UserError(path + ": unknown vocabulary kind \"" + kind + "\" (expected byte, char, gpt2_bpe or hf_bpe)");
  }
  const JsonValue* size = v.find("vocab_size");
  if (size && size->kind == JsonValue::Kind::kNumber && whole_number(*size) != tok->vocab_size())
    throw UserError(path + ": \"vocab_size\" says " + size->text + " but the vocabulary has " +
                    std::to_string(tok->vocab_size()) + " tokens");
  return tok;
}

std::string embedded_hf_tokenizer(const std::string& path) {
  const std::string text = read_text_file(path);
  const JsonValue v = parse_json(text, path);
  const JsonValue* kind = v.find("kind");
  if (!kind || kind->kind != JsonValue::Kind::kString || kind->text != "hf_bpe") return "";
  const JsonValue& t = member(v, "tokenizer", JsonValue::Kind::kObject, path);
  return text.substr(t.begin, t.end - t.begin);
}

VocabularyFacts read_vocabulary_facts(const std::string& path) {
  const JsonValue v = parse_json(read_text_file(path), path);
  const std::optional<int64_t> size = whole_number(member(v, "vocab_size", JsonValue::Kind::kNumber, path));
  if (!size || *size < 1) throw UserError(path + ": \"vocab_size\" must be a positive integer");
  const JsonValue* mask = v.find("loss_mask");
  if (mask && mask->kind != JsonValue::Kind::kBool) throw UserError(path + ": \"loss_mask\" must be true or false");
  return {*size, mask && mask->boolean};
}

std::vector<int32_t> Tokenizer::encode_parts(const std::vector<std::string>& texts, std::vector<size_t>& starts) const {
  std::vector<int32_t> ids;
  starts.clear();
  for (const std::string& text : texts) {
    starts.push_back(ids.size());
    const std::vector<int32_t> part = encode(text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string dataset_stem(const std::string& dataset_path) {
  std::string stem = dataset_path;
  for (const char* ext : {".idx", ".bin", ".tok"}) {
    const std::string e(ext);
    if (stem.size() > e.size() && stem.compare(stem.size() - e.size(), e.size(), e) == 0) {
      stem.resize(stem.size() - e.size());
      break;
    }
  }
  return stem;
}

std::string vocabulary_path(const std::string& dataset_path) { return dataset_stem(dataset_path) + ".vocab.json"; }

}  // namespace trellis
