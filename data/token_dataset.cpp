// Opening a tokenized corpus (format detection, vocabulary checks) and sampling windows from it.
#include "data/token_dataset.h"

#include "core/philox.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "data/permutation.h"
#include "data/tokenizer.h"

namespace trellis {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string strip(const std::string& s, const std::string& suffix) { return s.substr(0, s.size() - suffix.size()); }

// 1e-12 or 0.99999999 as written, not rounded to six decimals.
std::string fraction_text(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", f);
  return buf;
}

bool is_megatron_index(const std::string& path) { return read_file_head(path, 9) == std::string("MMIDIDX\0\0", 9); }
bool is_token_file(const std::string& path) {
  const std::string h = read_file_head(path, 4);
  int32_t magic = 0;
  if (h.size() == 4) std::memcpy(&magic, h.data(), 4);
  return magic == kTokenFileMagic;
}

}  // namespace

TokenDataset::TokenDataset(const std::string& path, const DatasetOptions& options) : opt_(options) {
  if (opt_.seq_len < 1) throw UserError(path + ": seq_len must be at least 1");
  if (!(opt_.val_fraction >= 0 && opt_.val_fraction < 1))
    throw UserError(path + ": the validation fraction must be in [0, 1), got " + fraction_text(opt_.val_fraction));
  std::string megatron_prefix, token_path;
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw UserError(path + ": is a directory; a dataset is named by its prefix (PREFIX.idx + PREFIX.bin) or its file");
  if (file_exists(path)) {
    if (ends_with(path, ".idx") || is_megatron_index(path)) megatron_prefix = ends_with(path, ".idx") ? strip(path, ".idx") : path;
    else if (ends_with(path, ".bin") && file_exists(strip(path, ".bin") + ".idx")) megatron_prefix = strip(path, ".bin");
    else if (is_token_file(path)) token_path = path;
    else
      throw UserError(path + ": neither a Megatron dataset (.idx with a .bin) nor an llm.c token file "
                             "(no MMIDIDX or 20240520 magic)");
  } else if (file_exists(path + ".idx")) {
    megatron_prefix = path;
  } else if (file_exists(path + ".tok")) {
    token_path = path + ".tok";
  } else if (file_exists(path + ".bin") && is_token_file(path + ".bin")) {
    token_path = path + ".bin";
  } else {
    throw UserError(path + ": no dataset there (looked for " + path + ", " + path + ".idx + .bin and " + path + ".tok)");
  }
  if (!megatron_prefix.empty()) {
    indexed_ = std::make_unique<IndexedDataset>(megatron_prefix);
    view_ = indexed_->tokens();
    format_ = "megatron";
    data_path_ = megatron_prefix + ".bin";
  } else {
    token_file_ = std::make_unique<TokenFile>(token_path);
    view_ = token_file_->tokens();
    format_ = "llmc";
    data_path_ = token_path;
  }

  // The vocabulary: what the stored file says, checked against the model and against every token.
  int64_t stored = 0;
  bool mask_written = false;  // the vocabulary file says prepare_data wrote a loss mask beside the data
  const std::string vpath = vocabulary_path(data_path_);
  if (file_exists(vpath)) {
    vocab_file_ = vpath;
    const VocabularyFacts facts = read_vocabulary_facts(vpath);
    stored = facts.vocab_size;
    mask_written = facts.loss_mask;
    if (opt_.model_vocab > 0 && stored > opt_.model_vocab)
      throw UserError(vpath + ": the data's vocabulary has " + std::to_string(stored) +
                      " tokens but model.vocab_size = " + std::to_string(opt_.model_vocab) +
                      " (set model.vocab_size >= " + std::to_string(stored) + ")");
  }
  int64_t limit = stored;
  if (opt_.model_vocab > 0 && (limit == 0 || opt_.model_vocab < limit)) limit = opt_.model_vocab;
  const TokenScan scan = scan_tokens(view_, limit);
  if (scan.first_bad >= 0) {
    const std::string where = data_path_ + ": token " + std::to_string(scan.first_bad) + " (id " + std::to_string(scan.bad_id) + ")";
    if (scan.bad_id < 0) throw UserError(where + " is negative: corrupt data");
    if (stored > 0 && scan.bad_id >= stored)
      throw UserError(where + " is outside the vocabulary of " + std::to_string(stored) + " in " + vpath +
                      ": corrupt data, or a vocabulary file that does not belong to it");
    throw UserError(where + " is >= model.vocab_size = " + std::to_string(opt_.model_vocab) +
                    " (the data needs a vocabulary of at least " + std::to_string(scan.max_id + 1) + ")");
  }
  vocab_size_ = stored > 0 ? stored : scan.max_id + 1;
  checksum_ = scan.checksum;
  if (const std::string mpath = loss_mask_path(data_path_); file_exists(mpath))
    loss_mask_ = std::make_unique<LossMaskFile>(mpath, view_.count, checksum_);
  else if (mask_written)
    throw UserError(mpath + " is missing: " + vpath + " says the data was written with that loss mask (prepare_data "
                    "--json-keys PROMPT,RESPONSE); copy it beside the data, as without it the loss would count the "
                    "prompts too");

  train_tokens_ = int64_t(double(view_.count) * (1.0 - opt_.val_fraction));
  if (opt_.whole_documents) {
    if (!indexed_)
      throw UserError(data_path_ + ": data.packing = \"documents\" needs the documents' lengths, which a Megatron "
                      "dataset's index holds; this is an llm.c token file (prepare_data --format megatron writes one)");
    pack_documents();
  }
  const auto too_small = [&](Split s, const char* name) {
    return UserError(data_path_ + ": the " + name + " split has " + std::to_string(split_tokens(s)) +
                     " tokens, fewer than one sample of model.seq_len + 1 = " + std::to_string(opt_.seq_len + 1) +
                     " (of " + std::to_string(view_.count) + " tokens in all, data.val_fraction = " +
                     fraction_text(opt_.val_fraction) + " of them for validation; allowed: a split of at least one "
                     "sample: more data, a shorter model.seq_len, another data.val_fraction" +
                     (s == Split::val ? std::string(", or log.val_every = 0") : std::string()) + ")");
  };
  if (opt_.whole_documents && opt_.need_val && opt_.val_fraction > 0 && windows(Split::val) == 0)
    throw UserError(data_path_ + ": no document of 2 tokens or more starts in the last data.val_fraction = " +
                    fraction_text(opt_.val_fraction) + " of the tokens (after token " +
                    std::to_string(int64_t(double(view_.count) * (1.0 - opt_.val_fraction))) + " of " +
                    std::to_string(view_.count) + "; data.packing = \"documents\"): there is no validation sample "
                    "(allowed: more documents, a larger data.val_fraction, or log.val_every = 0)");
  if (windows(Split::train) == 0) throw too_small(Split::train, "train");
  // A mask that keeps no target of the training split would train nothing (a step's loss 0).
  if (loss_mask_ && loss_mask_->kept(1, split_tokens(Split::train)) == 0)
    throw UserError(loss_mask_->path() + ": keeps no target in the training split (its first " +
                    std::to_string(split_tokens(Split::train)) + " tokens): nothing to learn");
  if (opt_.need_val && opt_.val_fraction > 0 && windows(Split::val) == 0) throw too_small(Split::val, "validation");
}

// Each split's documents (a document is validation data when it starts at or after the token the
// fraction names) packed into samples of seq_len + 1 tokens: a document longer than that gives
// samples of one full piece each and its rest is packed as a document; the rest, longest first
// (earlier ones first among equals), each go into the fullest sample with room for them, else a new
// one. Samples of one token (no target) are dropped. Deterministic: every rank packs alike.
void TokenDataset::pack_documents() {
  const int64_t L = opt_.seq_len + 1;
  const std::vector<int64_t>& docs = indexed_->document_index();
  std::vector<Piece> split_docs[2];
  // FNV-1a over the documents' lengths and the packing's name: the samples follow both.
  uint64_t h = 1469598103934665603ull;
  for (const char c : std::string("best fit decreasing")) h = (h ^ uint8_t(c)) * 1099511628211ull;
  int64_t at = 0, seq = 0;  // the stream position of sequence `seq`
  for (size_t d = 0; d + 1 < docs.size(); ++d) {
    int64_t n = 0;
    for (; seq < docs[d + 1]; ++seq) n += indexed_->sequence_size(seq);
    for (int k = 0; k < 8; ++k) h = (h ^ ((uint64_t(n) >> (8 * k)) & 0xff)) * 1099511628211ull;
    if (n > 0) split_docs[at >= train_tokens_ ? 1 : 0].push_back({at, n});
    at += n;
  }
  documents_checksum_ = h;
  const int64_t val_begin = split_docs[1].empty() ? view_.count : split_docs[1].front().start;
  int64_t real = 0;
  auto add_sample = [&](const Piece* first, const Piece* last) {
    int64_t n = 0;
    for (const Piece* p = first; p != last; ++p) n += p->length;
    if (n < 2) return;  // one token alone has no target
    packed_.insert(packed_.end(), first, last);
    std::sort(packed_.end() - (last - first), packed_.end(), [](const Piece& a, const Piece& b) { return a.start < b.start; });
    run_first_.push_back(int64_t(packed_.size()));
    real += n;
  };
  for (int split = 0; split < 2; ++split) {
    std::vector<Piece>& items = split_docs[split];  // packed in place of the documents
    for (Piece& doc : items) {
      if (doc.length <= L) continue;
      ++cut_documents_;
      for (; doc.length > L; doc.start += L, doc.length -= L) {
        const Piece full{doc.start, L, false};
        add_sample(&full, &full + 1);
      }
      doc.rest = true;
    }
    std::stable_sort(items.begin(), items.end(), [](const Piece& a, const Piece& b) { return a.length > b.length; });
    std::vector<int64_t> sample_of(items.size()), free_room;
    std::set<std::pair<int64_t, int64_t>> room;  // (tokens free, sample) of the samples with room left
    for (size_t i = 0; i < items.size(); ++i) {
      auto fit = room.lower_bound({items[i].length, int64_t(0)});
      int64_t s = int64_t(free_room.size());
      if (fit != room.end()) {
        s = fit->second;
        room.erase(fit);
      } else {
        free_room.push_back(L);
      }
      free_room[size_t(s)] -= items[i].length;
      if (free_room[size_t(s)] > 0) room.insert({free_room[size_t(s)], s});
      sample_of[i] = s;
    }
    // The items grouped by sample (a counting sort), each sample then added.
    std::vector<int64_t> first(free_room.size() + 1, 0);
    for (int64_t s : sample_of) ++first[size_t(s) + 1];
    for (size_t s = 1; s < first.size(); ++s) first[s] += first[s - 1];
    std::vector<Piece> grouped(items.size());
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (size_t i = 0; i < items.size(); ++i) grouped[size_t(next[size_t(sample_of[i])]++)] = items[i];
    for (size_t s = 0; s + 1 < first.size(); ++s) add_sample(grouped.data() + first[s], grouped.data() + first[s + 1]);
    if (split == 0) train_runs_ = runs();
  }
  train_tokens_ = val_begin;
  padding_share_ = runs() == 0 ? 0.0 : 1.0 - double(real) / double(runs() * L);
}

int64_t TokenDataset::window(Split split, int64_t index) const {
  TRELLIS_CHECK(index >= 0, "negative sample index " + std::to_string(index));
  const int64_t w = windows(split);
  if (w == 0) throw UserError(data_path_ + ": there is no validation data (validation fraction 0)");
  const uint64_t epoch = uint64_t(index / w);
  const uint64_t stream = (uint64_t(split == Split::train ? 1 : 2) << 48) | (epoch & ((uint64_t(1) << 48) - 1));
  return permute_index(index % w, w, opt_.seed, stream);
}

int64_t TokenDataset::window_start(Split split, int64_t index) const {
  const int64_t w = window(split, index), L = opt_.seq_len + 1;
  int64_t shift = 0;
  if (split == Split::train && split_tokens(split) >= 2 * L) {
    const uint64_t stream = (uint64_t(1) << 48) | (uint64_t(index / windows(split)) & ((uint64_t(1) << 48) - 1));
    shift = int64_t(philox_word(opt_.seed, stream ^ (uint64_t(0x5eed) << 52), 0) % uint64_t(L));
  }
  return split_begin(split) + shift + w * L;
}

int64_t TokenDataset::packed_sample(Split split, int64_t index) const {
  return (split == Split::train ? 0 : train_runs_) + window(split, index);
}

std::vector<TokenDataset::Piece> TokenDataset::pieces(Split split, int64_t index) const {
  if (!opt_.whole_documents) return {{window_start(split, index), opt_.seq_len + 1, false}};
  const size_t r = size_t(packed_sample(split, index));
  return std::vector<Piece>(packed_.begin() + run_first_[r], packed_.begin() + run_first_[r + 1]);
}

int64_t TokenDataset::sample_start(Split split, int64_t index) const {
  if (!opt_.whole_documents) return window_start(split, index);
  return packed_[size_t(run_first_[size_t(packed_sample(split, index))])].start;
}

std::string TokenDataset::identity() const {
  std::string id = std::filesystem::path(data_path_).filename().string() + ": " + std::to_string(view_.count) +
                   " tokens, checksum " + checksum_hex(checksum_);
  if (loss_mask_) id += ", loss mask " + checksum_hex(loss_mask_->checksum());
  if (opt_.whole_documents) id += ", documents " + checksum_hex(documents_checksum_);
  return id;
}

std::string TokenDataset::target_mask() const {
  std::string what;
  char share[32];
  if (opt_.whole_documents) {
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * padding_share_);
    what = "the padding after each sample's whole documents (data.packing = documents: " +
           std::to_string(runs()) + " samples, " + share + " of their tokens padding, " +
           std::to_string(cut_documents_) + " documents longer than model.seq_len + 1 cut into pieces)";
  }
  if (loss_mask_) {
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * double(loss_mask_->kept()) / double(view_.count));
    what += (what.empty() ? "" : "; ") + std::string("those ") +
            std::filesystem::path(loss_mask_->path()).filename().string() + " marks (" + share + " of the tokens)";
  }
  return what;
}

void TokenDataset::sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const {
  const int64_t T = opt_.seq_len;
  if (!opt_.whole_documents) {
    const int64_t start = window_start(split, index);
    view_.copy(start, T, inputs);
    view_.copy(start + 1, T, targets);
    if (loss_mask_)
      for (int64_t t = 0; t < T; ++t)
        if (!loss_mask_->keeps(start + 1 + t)) targets[t] = -1;
    return;
  }
  // The packed documents back to back, then padding: read by nothing before it, its targets none.
  std::fill(inputs, inputs + T, 0);
  std::fill(targets, targets + T, -1);
  const size_t r = size_t(packed_sample(split, index));
  int64_t at = 0;  // where the piece begins in the sample (at most T: the samples hold T + 1 tokens)
  for (int64_t i = run_first_[r]; i < run_first_[r + 1]; ++i) {
    const Piece& p = packed_[size_t(i)];
    view_.copy(p.start, std::min(p.length, T - at), inputs + at);
    // Token k of the piece is the target of position at + k - 1: none for the sample's first token,
    // nor for a cut document's rest's first, whose context is in another sample.
    const int64_t first = p.rest || at == 0 ? 1 : 0;
    view_.copy(p.start + first, p.length - first, targets + at + first - 1);
    if (loss_mask_)
      for (int64_t k = first; k < p.length; ++k)
        if (!loss_mask_->keeps(p.start + k)) targets[at + k - 1] = -1;
    at += p.length;
  }
}

}  // namespace trellis
