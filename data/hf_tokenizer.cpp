// tokenizer.json's pipeline: added tokens split out, then per segment the normalizer, the
// pre-tokenizer and the BPE model; the post-processor's special tokens around the result; and the
// decoder chain back to text.
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "data/bpe.h"
#include "data/mapped_file.h"
#include "data/pretokenize.h"
#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace trellis {

namespace {

using Kind = JsonValue::Kind;

// tokenizer.json's key path in error lines, e.g. "pre_tokenizer.pretokenizers[1]".
struct Where {
  std::string source, key;
  Where operator/(const std::string& k) const { return {source, key.empty() ? k : key + "." + k}; }
  Where operator[](size_t i) const { return {source, key + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const { throw UserError(source + ": " + key + ": " + what); }
};

// (`key` by value, not a reference a temporary string binds to: what a returned reference may outlive.)
const JsonValue& need(const JsonValue& v, std::string_view key, Kind kind, const Where& w) {
  const JsonValue* m = v.find(key);
  if (!m || m->kind != kind) {
    static const char* const kNames[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    (w / std::string(key)).fail(m ? std::string("must be ") + kNames[int(kind)] : "is missing");
  }
  return *m;
}
bool flag(const JsonValue& v, const std::string& key, const Where& w, bool otherwise = false) {
  const JsonValue* m = v.find(key);
  if (!m || m->kind == Kind::kNull) return otherwise;
  if (m->kind != Kind::kBool) (w / key).fail("must be true or false");
  return m->boolean;
}
std::string text_or_empty(const JsonValue& v, const std::string& key, const Where& w) {
  const JsonValue* m = v.find(key);
  if (!m || m->kind == Kind::kNull) return "";
  if (m->kind != Kind::kString) (w / key).fail("must be a string");
  return m->text;
}
// A whole number from 0 to 16777215 (a token id, or a count).
int32_t small_number(const JsonValue& v, const Where& w, const char* what = "a token id") {
  const bool ok = v.kind == Kind::kNumber && v.text.find_first_not_of("0123456789") == std::string::npos &&
                  v.text.size() <= 8 && std::stoi(v.text) < (1 << 24);
  if (!ok) w.fail(std::string("must be ") + what + " (0 to 16777215)");
  return std::stoi(v.text);
}
// A "type" of the supported list, else one line naming what is supported.
std::string type_of(const JsonValue& v, const Where& w, const std::string& supported) {
  if (v.kind != Kind::kObject) w.fail("must be an object or null");
  const std::string type = need(v, "type", Kind::kString, w).text;
  if (("," + supported + ",").find("," + type + ",") == std::string::npos)
    (w / "type").fail("\"" + type + "\" is not supported (supported: " + supported + ")");
  return type;
}
// The steps of a component that may be one step or a Sequence of them under `list_key`.
std::vector<std::pair<const JsonValue*, Where>> steps_of(const JsonValue* v, const Where& w, const std::string& list_key) {
  std::vector<std::pair<const JsonValue*, Where>> steps;
  if (!v || v->kind == Kind::kNull) return steps;
  if (v->kind == Kind::kObject && v->find("type") && v->find("type")->text == "Sequence") {
    const JsonValue& list = need(*v, list_key, Kind::kArray, w);
    for (size_t i = 0; i < list.items.size(); ++i) steps.emplace_back(&list.items[i], (w / list_key)[i]);
  } else {
    steps.emplace_back(v, w);
  }
  return steps;
}
// A Replace's {"String": s} pattern (regex patterns are refused).
std::string string_pattern(const JsonValue& step, const Where& w) {
  const JsonValue& p = need(step, "pattern", Kind::kObject, w);
  const JsonValue* s = p.find("String");
  if (!s || s->kind != Kind::kString) (w / "pattern").fail("only a {\"String\": ...} pattern is supported");
  return s->text;
}
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

enum class Prepend { kAlways, kFirst, kNever };

struct NormalizeStep {
  enum class Type { kPrepend, kReplace, kNfc } type;
  std::string a, b;
};
struct PreTokenizeStep {
  enum class Type { kSplit, kByteLevel, kMetaspace, kDigits } type;
  SplitPattern pattern = SplitPattern::kGpt2;
  bool add_prefix_space = false, use_regex = false, split = false, individual_digits = false;
  std::string replacement;
  Prepend prepend = Prepend::kNever;
};
struct DecodeStep {
  enum class Type { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } type;
  std::string a, b;
  size_t start = 0, stop = 0;
  Prepend prepend = Prepend::kNever;
};
struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip, rstrip, normalized;
};
// A piece of text on its way through the pipeline; `at_start`: it begins the encoded text (what
// Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::string text;
  bool at_start;
};

// Added tokens of one kind (matched on raw or on normalized text) by their first byte.
struct AddedTokenIndex {
  bool empty = true;
  std::vector<std::vector<const AddedToken*>> by_first_byte = std::vector<std::vector<const AddedToken*>>(256);
};

class HfBpeTokenizer : public Tokenizer {
 public:
  HfBpeTokenizer(const JsonValue& json, std::string text, const std::string& source);
  std::string kind() const override { return "hf_bpe"; }
  int64_t vocab_size() const override { return int64_t(id_to_token_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::vector<int32_t> encode_parts(const std::vector<std::string>& texts, std::vector<size_t>& starts) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int32_t token_id(const std::string& token) const override {
    for (const AddedToken& a : added_)
      if (a.content == token) return a.id;
    return bpe_->id_of(token);
  }
  std::string to_json() const override {
    return "{\"kind\": \"hf_bpe\", \"vocab_size\": " + std::to_string(vocab_size()) + ", \"source\": " +
           json_quote(source_) + ",\n \"tokenizer\": " + text_ + "}\n";
  }

 private:
  void read_added_tokens(const JsonValue* list, const Where& w);
  void read_normalizer(const JsonValue* v, const Where& w);
  void read_pre_tokenizer(const JsonValue* v, const Where& w);
  void read_model(const JsonValue& v, const Where& w);
  void read_post_processor(const JsonValue* v, const Where& w);
  void read_decoder(const JsonValue* v, const Where& w);
  void encode_segment(std::string text, bool at_start, std::vector<int32_t>& out) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  std::string text_, source_;
  std::vector<AddedToken> added_;
  std::unique_ptr<AddedTokenIndex> raw_added_, normalized_added_;  // into added_ (which no longer grows)
  std::vector<NormalizeStep> normalizer_;
  std::vector<PreTokenizeStep> pre_tokenizer_;
  std::vector<DecodeStep> decoder_;
  std::unique_ptr<BpeModel> bpe_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_ = -1;
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's special tokens
  std::vector<std::string> id_to_token_;  // added tokens over the model's
  std::vector<bool> has_id_;
};

HfBpeTokenizer::HfBpeTokenizer(const JsonValue& json, std::string text, const std::string& source)
    : text_(std::move(text)), source_(source) {
  const Where w{source, ""};
  if (json.kind != Kind::kObject) throw UserError(source + ": a tokenizer.json must be a JSON object");
  read_model(need(json, "model", Kind::kObject, w), w / "model");
  read_added_tokens(json.find("added_tokens"), w / "added_tokens");
  read_normalizer(json.find("normalizer"), w / "normalizer");
  read_pre_tokenizer(json.find("pre_tokenizer"), w / "pre_tokenizer");
  read_post_processor(json.find("post_processor"), w / "post_processor");
  read_decoder(json.find("decoder"), w / "decoder");
  raw_added_ = std::make_unique<AddedTokenIndex>();
  normalized_added_ = std::make_unique<AddedTokenIndex>();
  for (const AddedToken& a : added_) {
    AddedTokenIndex& index = a.normalized ? *normalized_added_ : *raw_added_;
    index.by_first_byte[uint8_t(a.content[0])].push_back(&a);
    index.empty = false;
  }
}

void HfBpeTokenizer::read_model(const JsonValue& v, const Where& w) {
  type_of(v, w, "BPE");
  if (const JsonValue* d = v.find("dropout"); d && d->kind != Kind::kNull) (w / "dropout").fail("BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!text_or_empty(v, key, w).empty()) (w / key).fail("is not supported (only null or \"\")");
  std::vector<std::pair<std::string, int32_t>> vocab;
  const Where wv = w / "vocab";
  for (const auto& [tok, id] : need(v, "vocab", Kind::kObject, w).members) vocab.emplace_back(tok, small_number(id, wv / tok));
  std::vector<std::pair<std::string, std::string>> merges;
  const JsonValue& list = need(v, "merges", Kind::kArray, w);
  for (size_t i = 0; i < list.items.size(); ++i) {
    const JsonValue& m = list.items[i];
    if (m.kind == Kind::kArray && m.items.size() == 2 && m.items[0].kind == Kind::kString && m.items[1].kind == Kind::kString) {
      merges.emplace_back(m.items[0].text, m.items[1].text);
      continue;
    }
    const size_t sp = m.kind == Kind::kString ? m.text.find(' ') : std::string::npos;
    if (sp == std::string::npos || m.text.find(' ', sp + 1) != std::string::npos)
      (w / "merges")[i].fail("must be \"left right\" or [\"left\", \"right\"]");
    merges.emplace_back(m.text.substr(0, sp), m.text.substr(sp + 1));
  }
  bpe_ = std::make_unique<BpeModel>(vocab, merges, source_ + ": model");
  byte_fallback_ = flag(v, "byte_fallback", w);
  fuse_unk_ = flag(v, "fuse_unk", w);
  ignore_merges_ = flag(v, "ignore_merges", w);
  if (const std::string unk = text_or_empty(v, "unk_token", w); !unk.empty()) {
    unk_ = bpe_->id_of(unk);
    if (unk_ < 0) (w / "unk_token").fail(json_quote(unk) + " is not in the vocabulary");
  }
  id_to_token_.resize(size_t(bpe_->id_count()));
  has_id_.assign(id_to_token_.size(), false);
  for (int32_t id = 0; id < bpe_->id_count(); ++id)
    if (bpe_->has_id(id)) {
      id_to_token_[size_t(id)] = bpe_->token_of(id);
      has_id_[size_t(id)] = true;
    }
}

void HfBpeTokenizer::read_added_tokens(const JsonValue* list, const Where& w) {
  if (!list || list->kind == Kind::kNull) return;
  if (list->kind != Kind::kArray) w.fail("must be an array");
  for (size_t i = 0; i < list->items.size(); ++i) {
    const JsonValue& t = list->items[i];
    const Where wt = w[i];
    if (t.kind != Kind::kObject) wt.fail("must be an object");
    AddedToken a{need(t, "content", Kind::kString, wt).text, small_number(need(t, "id", Kind::kNumber, wt), wt / "id"),
                 flag(t, "lstrip", wt), flag(t, "rstrip", wt), flag(t, "normalized", wt)};
    if (a.content.empty()) (wt / "content").fail("must not be empty");
    if (flag(t, "single_word", wt)) (wt / "single_word").fail("true is not supported");
    if (size_t(a.id) >= id_to_token_.size()) {
      id_to_token_.resize(size_t(a.id) + 1);
      has_id_.resize(size_t(a.id) + 1, false);
    }
    id_to_token_[size_t(a.id)] = a.content;
    has_id_[size_t(a.id)] = true;
    added_.push_back(std::move(a));
  }
}

void HfBpeTokenizer::read_normalizer(const JsonValue* v, const Where& w) {
  for (const auto& [step, ws] : steps_of(v, w, "normalizers")) {
    const std::string type = type_of(*step, ws, "NFC,Prepend,Replace,Sequence");
    using T = NormalizeStep::Type;
    if (type == "NFC") normalizer_.push_back({T::kNfc, "", ""});
    else if (type == "Prepend") normalizer_.push_back({T::kPrepend, need(*step, "prepend", Kind::kString, ws).text, ""});
    else if (type == "Replace") normalizer_.push_back({T::kReplace, string_pattern(*step, ws), need(*step, "content", Kind::kString, ws).text});
    else ws.fail("a Sequence inside a Sequence is not supported");
  }
  // An added token matched on normalized text is matched here on the raw text: the same only where
  // no normalizer runs.
  for (size_t i = 0; i < added_.size(); ++i)
    if (added_[i].normalized && !normalizer_.empty())
      (Where{w.source, "added_tokens"}[i] / "normalized")
          .fail("true is not supported together with a normalizer (" + json_quote(added_[i].content) + ")");
}

Prepend prepend_scheme(const JsonValue& step, const Where& w) {
  const JsonValue* p = step.find("prepend_scheme");
  if (!p) return flag(step, "add_prefix_space", w, true) ? Prepend::kAlways : Prepend::kNever;  // older files
  if (p->kind == Kind::kString && p->text == "always") return Prepend::kAlways;
  if (p->kind == Kind::kString && p->text == "first") return Prepend::kFirst;
  if (p->kind == Kind::kString && p->text == "never") return Prepend::kNever;
  (w / "prepend_scheme").fail("must be \"always\", \"first\" or \"never\"");
}

void HfBpeTokenizer::read_pre_tokenizer(const JsonValue* v, const Where& w) {
  for (const auto& [step, ws] : steps_of(v, w, "pretokenizers")) {
    const std::string type = type_of(*step, ws, "ByteLevel,Metaspace,Digits,Split,Sequence");
    if (!pre_tokenizer_.empty() && pre_tokenizer_.back().type == PreTokenizeStep::Type::kByteLevel)
      ws.fail("a step after ByteLevel is not supported");
    PreTokenizeStep s{};
    if (type == "ByteLevel") {
      s.type = PreTokenizeStep::Type::kByteLevel;
      s.add_prefix_space = flag(*step, "add_prefix_space", ws);
      s.use_regex = flag(*step, "use_regex", ws, true);
    } else if (type == "Metaspace") {
      s.type = PreTokenizeStep::Type::kMetaspace;
      s.replacement = need(*step, "replacement", Kind::kString, ws).text;
      if (decode_utf8(s.replacement).size() != 1) (ws / "replacement").fail("must be one character");
      s.prepend = prepend_scheme(*step, ws);
      s.split = flag(*step, "split", ws, true);
    } else if (type == "Digits") {
      s.type = PreTokenizeStep::Type::kDigits;
      s.individual_digits = flag(*step, "individual_digits", ws);
    } else if (type == "Split") {
      s.type = PreTokenizeStep::Type::kSplit;
      const JsonValue& p = need(*step, "pattern", Kind::kObject, ws);
      const JsonValue* regex = p.find("Regex");
      const std::optional<SplitPattern> pattern =
          regex && regex->kind == Kind::kString ? split_pattern_of_regex(regex->text) : std::nullopt;
      if (!pattern) (ws / "pattern").fail("only GPT-2's, Llama 3's and Qwen2's regex are supported");
      s.pattern = *pattern;
      if (text_or_empty(*step, "behavior", ws) != "Isolated") (ws / "behavior").fail("only \"Isolated\" is supported");
      if (flag(*step, "invert", ws)) (ws / "invert").fail("true is not supported");
    } else {
      ws.fail("a Sequence inside a Sequence is not supported");
    }
    pre_tokenizer_.push_back(s);
  }
}

void HfBpeTokenizer::read_post_processor(const JsonValue* v, const Where& w) {
  for (const auto& [step, ws] : steps_of(v, w, "processors")) {
    const std::string type = type_of(*step, ws, "ByteLevel,TemplateProcessing,BertProcessing,RobertaProcessing,Sequence");
    std::vector<int32_t> before, after;
    if (type == "TemplateProcessing") {
      const JsonValue& specials = need(*step, "special_tokens", Kind::kObject, ws);
      const JsonValue& single = need(*step, "single", Kind::kArray, ws);
      bool seen_sequence = false;
      for (size_t i = 0; i < single.items.size(); ++i) {
        const JsonValue& item = single.items[i];
        const Where wi = (ws / "single")[i];
        if (item.kind == Kind::kObject && item.find("Sequence")) {
          seen_sequence = true;
        } else if (const JsonValue* sp = item.kind == Kind::kObject ? item.find("SpecialToken") : nullptr) {
          const std::string name = need(*sp, "id", Kind::kString, wi / "SpecialToken").text;
          const JsonValue* entry = specials.find(name);
          if (!entry || entry->kind != Kind::kObject) (ws / "special_tokens").fail("has no entry " + json_quote(name));
          const Where wn = ws / "special_tokens" / name;
          const JsonValue& ids = need(*entry, "ids", Kind::kArray, wn);
          for (size_t k = 0; k < ids.items.size(); ++k)
            (seen_sequence ? after : before).push_back(small_number(ids.items[k], (wn / "ids")[k]));
        } else {
          wi.fail("must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
      }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      for (const char* key : {"cls", "sep"}) {
        const JsonValue& pair = need(*step, key, Kind::kArray, ws);
        if (pair.items.size() != 2) (ws / key).fail("must be [token, id]");
        (std::string(key) == "cls" ? before : after).push_back(small_number(pair.items[1], (ws / key)[1]));
      }
    } else if (type == "Sequence") {
      ws.fail("a Sequence inside a Sequence is not supported");
    }
    prefix_.insert(prefix_.begin(), before.begin(), before.end());
    suffix_.insert(suffix_.end(), after.begin(), after.end());
  }
  for (int32_t id : prefix_)
    if (size_t(id) >= has_id_.size() || !has_id_[size_t(id)]) w.fail("token id " + std::to_string(id) + " is not in the vocabulary");
  for (int32_t id : suffix_)
    if (size_t(id) >= has_id_.size() || !has_id_[size_t(id)]) w.fail("token id " + std::to_string(id) + " is not in the vocabulary");
}

void HfBpeTokenizer::read_decoder(const JsonValue* v, const Where& w) {
  for (const auto& [step, ws] : steps_of(v, w, "decoders")) {
    const std::string type = type_of(*step, ws, "ByteLevel,Metaspace,Replace,ByteFallback,Fuse,Strip,Sequence");
    DecodeStep d{};
    if (type == "ByteLevel") {
      d.type = DecodeStep::Type::kByteLevel;
    } else if (type == "Metaspace") {
      d.type = DecodeStep::Type::kMetaspace;
      d.a = need(*step, "replacement", Kind::kString, ws).text;
      d.prepend = prepend_scheme(*step, ws);
    } else if (type == "Replace") {
      d.type = DecodeStep::Type::kReplace;
      d.a = string_pattern(*step, ws);
      d.b = need(*step, "content", Kind::kString, ws).text;
    } else if (type == "ByteFallback") {
      d.type = DecodeStep::Type::kByteFallback;
    } else if (type == "Fuse") {
      d.type = DecodeStep::Type::kFuse;
    } else if (type == "Strip") {
      d.type = DecodeStep::Type::kStrip;
      d.a = need(*step, "content", Kind::kString, ws).text;
      d.start = size_t(small_number(need(*step, "start", Kind::kNumber, ws), ws / "start", "a count"));
      d.stop = size_t(small_number(need(*step, "stop", Kind::kNumber, ws), ws / "stop", "a count"));
    } else {
      ws.fail("a Sequence inside a Sequence is not supported");
    }
    decoder_.push_back(d);
  }
}

// Splits `segments` (text, or an added token's id) on the added tokens of one kind, leftmost-longest.
struct Segment {
  std::string text;
  int32_t id;  // an added token's, else -1
  bool at_start;
};

std::vector<Segment> split_added(const std::vector<Segment>& segments, const AddedTokenIndex& tokens) {
  if (tokens.empty) return segments;
  const auto& by_first_byte = tokens.by_first_byte;
  std::vector<Segment> out;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg);
      continue;
    }
    const std::string& s = seg.text;
    size_t from = 0;
    for (size_t at = 0; at < s.size(); ++at) {
      const AddedToken* best = nullptr;
      for (const AddedToken* t : by_first_byte[uint8_t(s[at])])
        if (s.compare(at, t->content.size(), t->content) == 0 && (!best || t->content.size() > best->content.size())) best = t;
      if (!best) continue;
      // lstrip / rstrip: the whitespace beside the token belongs to it.
      size_t begin = at, end = at + best->content.size();
      while (best->lstrip && begin > from) {
        size_t prev = begin - 1;
        while (prev > from && (uint8_t(s[prev]) & 0xC0) == 0x80) --prev;  // the previous code point's first byte
        size_t k = prev;
        if (!is_unicode_space(next_utf8(s, k))) break;
        begin = prev;
      }
      while (best->rstrip && end < s.size()) {
        size_t k = end;
        if (!is_unicode_space(next_utf8(s, k))) break;
        end = k;
      }
      if (begin > from) out.push_back({s.substr(from, begin - from), -1, seg.at_start && from == 0});
      out.push_back({"", best->id, false});
      from = end;
      at = end - 1;
    }
    if (from < s.size()) out.push_back({s.substr(from), -1, seg.at_start && from == 0});
  }
  return out;
}

std::vector<int32_t> HfBpeTokenizer::encode(const std::string& text) const {
  std::vector<size_t> starts;
  return encode_parts({text}, starts);
}

std::vector<int32_t> HfBpeTokenizer::encode_parts(const std::vector<std::string>& texts, std::vector<size_t>& starts) const {
  std::vector<int32_t> ids = prefix_;
  starts.clear();
  for (const std::string& text : texts) {
    starts.push_back(starts.empty() ? 0 : ids.size());
    for (const Segment& seg : split_added(split_added({{text, -1, true}}, *raw_added_), *normalized_added_)) {
      if (seg.id >= 0) ids.push_back(seg.id);
      else encode_segment(seg.text, seg.at_start, ids);
    }
  }
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

// One pre-tokenizer step on one piece: the pieces it becomes (`p` may be changed on the way).
std::vector<std::string> pre_tokenize(const PreTokenizeStep& s, Piece& p) {
  std::vector<std::string> parts;
  switch (s.type) {
    case PreTokenizeStep::Type::kSplit: return pretokenize(p.text, s.pattern);
    case PreTokenizeStep::Type::kByteLevel:
      if (s.add_prefix_space && p.text.rfind(' ', 0) != 0) p.text = " " + p.text;
      parts = s.use_regex ? pretokenize(p.text, SplitPattern::kGpt2) : std::vector<std::string>{p.text};
      for (std::string& part : parts) part = to_byte_level(part);
      return parts;
    case PreTokenizeStep::Type::kMetaspace: {
      const std::string& r = s.replacement;
      replace_all(p.text, " ", r);
      const bool prepend = s.prepend == Prepend::kAlways || (s.prepend == Prepend::kFirst && p.at_start);
      if (prepend && p.text.rfind(r, 0) != 0) p.text = r + p.text;
      if (!s.split) return {p.text};
      for (size_t at = 0; at < p.text.size();) {  // each replacement begins a piece
        const size_t from = at + (p.text.compare(at, r.size(), r) == 0 ? r.size() : 0);
        const size_t next_at = std::min(p.text.find(r, from), p.text.size());
        parts.push_back(p.text.substr(at, next_at - at));
        at = next_at;
      }
      return parts;
    }
    case PreTokenizeStep::Type::kDigits:  // runs of digits (or each digit alone) and runs of the rest
      for (size_t at = 0; at < p.text.size();) {
        size_t end = at;
        const bool digit = is_unicode_number(next_utf8(p.text, end));
        if (!digit || !s.individual_digits)
          for (size_t k = end; k < p.text.size() && is_unicode_number(next_utf8(p.text, k)) == digit;) end = k;
        parts.push_back(p.text.substr(at, end - at));
        at = end;
      }
      return parts;
  }
  return parts;
}

void HfBpeTokenizer::encode_segment(std::string text, bool at_start, std::vector<int32_t>& out) const {
  for (const NormalizeStep& n : normalizer_) {
    if (n.type == NormalizeStep::Type::kNfc) text = to_nfc(text);
    else if (n.type == NormalizeStep::Type::kReplace) replace_all(text, n.a, n.b);
    else if (!text.empty()) text = n.a + text;
  }
  std::vector<Piece> pieces{{std::move(text), at_start}};
  for (const PreTokenizeStep& s : pre_tokenizer_) {
    std::vector<Piece> next;
    for (Piece& p : pieces) {
      std::vector<std::string> parts = pre_tokenize(s, p);
      for (size_t k = 0; k < parts.size(); ++k)
        if (!parts[k].empty()) next.push_back({std::move(parts[k]), p.at_start && k == 0});
    }
    pieces = std::move(next);
  }
  for (const Piece& p : pieces)
    if (!p.text.empty()) encode_word(p.text, out);
}

void HfBpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges_)
    if (const int32_t id = bpe_->id_of(word); id >= 0) {
      out.push_back(id);
      return;
    }
  std::vector<int32_t> symbols;
  bool last_unknown = false;
  for (size_t i = 0; i < word.size();) {
    const size_t at = i;
    next_utf8(word, i);
    const std::string ch = word.substr(at, i - at);
    if (const int32_t id = bpe_->id_of(ch); id >= 0) {
      symbols.push_back(id);
      last_unknown = false;
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char b : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        if (const int32_t id = bpe_->id_of(name); id >= 0) bytes.push_back(id);
      }
      if (bytes.size() == ch.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        last_unknown = false;
        continue;
      }
    }
    if (unk_ < 0)
      throw UserError(source_ + ": the vocabulary has no token for " + json_quote(ch) +
                      " and the model has no byte_fallback or unk_token");
    if (!(fuse_unk_ && last_unknown)) symbols.push_back(unk_);
    last_unknown = true;
  }
  bpe_->merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::string HfBpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= has_id_.size() || !has_id_[size_t(id)])
      throw UserError(source_ + ": token id " + std::to_string(id) + " is not in the vocabulary");
    tokens.push_back(id_to_token_[size_t(id)]);
  }
  if (decoder_.empty()) {  // the library joins the tokens with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecodeStep& d : decoder_) {
    switch (d.type) {
      case DecodeStep::Type::kByteLevel: {  // one token of text; a token with a character outside the map stays as it is
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mapped;
          bool all = true;
          for (size_t i = 0; i < t.size() && all;) {
            const uint32_t c = next_utf8(t, i);
            const int byte = byte_of_byte_level(c);
            all = byte >= 0;
            if (all) mapped += char(byte);
          }
          bytes += all ? mapped : t;
        }
        tokens = {utf8_lossy(bytes)};
        break;
      }
      case DecodeStep::Type::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], d.a, " ");
          if (i == 0 && d.prepend != Prepend::kNever && tokens[i].rfind(' ', 0) == 0) tokens[i].erase(0, 1);
        }
        break;
      case DecodeStep::Type::kReplace:
        for (std::string& t : tokens) replace_all(t, d.a, d.b);
        break;
      case DecodeStep::Type::kByteFallback: {  // runs of <0xXX> become their text, or U+FFFD per byte if not UTF-8
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        const auto flush = [&] {
          if (!run_len) return;
          if (is_valid_utf8(run)) out.push_back(run);
          else
            for (size_t k = 0; k < run_len; ++k) out.push_back("\xEF\xBF\xBD");
          run.clear();
          run_len = 0;
        };
        for (const std::string& t : tokens) {
          unsigned byte = 0;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(uint8_t(t[3])) &&
              std::isxdigit(uint8_t(t[4])) && std::sscanf(t.c_str() + 3, "%2x", &byte) == 1) {
            run += char(byte);
            ++run_len;
          } else {
            flush();
            out.push_back(t);
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecodeStep::Type::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {all};
        break;
      }
      case DecodeStep::Type::kStrip:
        for (std::string& t : tokens) {
          for (size_t k = 0; k < d.start && !d.a.empty() && t.rfind(d.a, 0) == 0; ++k) t.erase(0, d.a.size());
          for (size_t k = 0; k < d.stop && !d.a.empty() && t.size() >= d.a.size() &&
                             t.compare(t.size() - d.a.size(), d.a.size(), d.a) == 0;
               ++k)
            t.erase(t.size() - d.a.size());
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> hf_tokenizer_from_json(const JsonValue& json, std::string text, const std::string& source) {
  return std::make_unique<HfBpeTokenizer>(json, std::move(text), source);
}

std::string hf_eos_token(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  const std::string file = (dir / "tokenizer_config.json").string();
  if (!fs::exists(file, ec)) return "";
  const JsonValue config = parse_json(read_text_file(file), file);
  const JsonValue* eos = config.kind == Kind::kObject ? config.find("eos_token") : nullptr;
  if (eos && eos->kind == Kind::kObject) eos = eos->find("content");
  return eos && eos->kind == Kind::kString ? eos->text : "";
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "tokenizer.json").string();
    if (!fs::exists(file, ec)) {
      const bool sp = fs::exists(fs::path(path) / "tokenizer.model", ec);
      throw UserError(path + ": has no tokenizer.json" +
                      (sp ? std::string(" (its tokenizer.model, SentencePiece's, is not read: save the tokenizer with "
                                        "transformers' AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR), which "
                                        "writes tokenizer.json)")
                          : std::string(" (a GPT-2 vocab.json and merges.txt are read by --tokenizer gpt2)")));
    }
  }
  std::string text = read_text_file(file);
  const JsonValue json = parse_json(text, file);
  return hf_tokenizer_from_json(json, std::move(text), file);
}

}  // namespace trellis
