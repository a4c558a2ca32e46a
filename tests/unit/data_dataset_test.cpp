// TokenDataset and BlendedDataset: format detection, deterministic sampling keyed by index,
// epochs as permutations of windows, disjoint train/val, blend weights, vocabulary checks; the
// targets left out after an end-of-document token (data.eod_mask_loss) and their count.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/unit/test_util.h"
#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loss_mask.h"
#include "data/mapped_file.h"
#include "data/token_dataset.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "launcher/checkpointing.h"

namespace fs = std::filesystem;
using namespace trellis;
using trellis::testing::TempDir;
using trellis::testing::error_of;

namespace {

constexpr int32_t kMod = 251;
// A Megatron dataset whose stream token p is p % kMod, split over documents of varied length.
void write_counting_megatron(const std::string& prefix, int64_t n) {
  IndexedDatasetWriter w(prefix, TokenType::u16);
  int64_t p = 0;
  for (int64_t len = 1; p < n; ++len) {
    std::vector<int32_t> doc;
    for (int64_t k = 0; k < len && p < n; ++k, ++p) doc.push_back(int32_t(p % kMod));
    w.add_document(doc);
  }
  w.finish();
}

DatasetOptions options(int64_t seq_len, uint64_t seed, int64_t model_vocab = 0) {
  DatasetOptions o;
  o.seq_len = seq_len;
  o.seed = seed;
  o.model_vocab = model_vocab;
  return o;
}

}  // namespace

TEST(DataDataset, OpensEitherFormatByMagic) {
  TempDir dir;
  write_counting_megatron(dir / "m", 1000);
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[size_t(i)] = i % kMod;
  write_token_file(dir / "t.tok", toks);
  write_token_file(dir / "llmc_val.bin", toks);
  for (const std::string& p : {dir / "m", dir / "m.idx", dir / "m.bin"}) EXPECT_EQ(TokenDataset(p, options(8, 1)).format(), "megatron");
  for (const std::string& p : {dir / "t", dir / "t.tok", dir / "llmc_val.bin"}) EXPECT_EQ(TokenDataset(p, options(8, 1)).format(), "llmc");
  // Both formats hold the same stream, so they give the same samples.
  TokenDataset a(dir / "m", options(8, 1)), b(dir / "t", options(8, 1));
  std::vector<int32_t> ia(8), ta(8), ib(8), tb(8);
  for (int64_t i = 0; i < 50; ++i) {
    a.sample(Split::train, i, ia.data(), ta.data());
    b.sample(Split::train, i, ib.data(), tb.data());
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(ta, tb);
  }
  EXPECT_NE(error_of([&] { TokenDataset d(dir / "nothing", options(8, 1)); }).find("no dataset there"), std::string::npos);
  std::ofstream(dir / "junk.txt") << "hello there";
  EXPECT_NE(error_of([&] { TokenDataset d(dir / "junk.txt", options(8, 1)); }).find("neither a Megatron dataset"),
            std::string::npos);
}

// The identity a checkpoint records: the file's name, its size and a checksum of the ids in order,
// whatever type stores them; any change to the ids, a swap across the scan's chunks too, changes it.
TEST(DataDataset, IdentityChecksumsTheIdsInOrder) {
  TempDir dir;
  const int64_t n = 200000;  // over three of the scan's chunks of 65536
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[size_t(i)] = int32_t((i * 7) % kMod);
  write_token_file(dir / "a.tok", toks);
  IndexedDatasetWriter wide(dir / "w", TokenType::i32);
  wide.add_document(toks);
  wide.finish();
  const std::string a = TokenDataset(dir / "a.tok", options(8, 1)).identity();
  EXPECT_EQ(a.substr(0, std::string("a.tok: 200000 tokens, checksum ").size()), "a.tok: 200000 tokens, checksum ") << a;
  EXPECT_EQ(a.size(), std::string("a.tok: 200000 tokens, checksum ").size() + 16) << a;
  const std::string w = TokenDataset(dir / "w", options(8, 1)).identity();
  EXPECT_EQ(w.substr(w.find(", checksum")), a.substr(a.find(", checksum"))) << "same ids as u16 and as i32";
  std::swap(toks[10], toks[150000]);
  write_token_file(dir / "a.tok", toks);
  const std::string swapped = TokenDataset(dir / "a.tok", options(8, 1)).identity();
  EXPECT_NE(swapped, a);
  EXPECT_EQ(swapped.size(), a.size());
  std::swap(toks[10], toks[150000]);
  write_token_file(dir / "a.tok", toks);
  EXPECT_EQ(TokenDataset(dir / "a.tok", options(8, 1)).identity(), a);
  // A checkpoint written before identities held checksums is compared by names and sizes (a
  // blend's sources were joined by ", " then).
  const std::string now = "a.tok: 5 tokens, checksum 0123456789abcdef; b.tok: 7 tokens, checksum fedcba9876543210";
  EXPECT_TRUE(same_data_identity("a.tok: 5 tokens, b.tok: 7 tokens", now));
  EXPECT_FALSE(same_data_identity("a.tok: 5 tokens, b.tok: 8 tokens", now));
  EXPECT_TRUE(same_data_identity(now, now));
  EXPECT_FALSE(same_data_identity("a.tok: 5 tokens, checksum 0123456789abcdee; b.tok: 7 tokens, checksum fedcba9876543210", now));
}

TEST(DataDataset, SamplesAreWindowsKeyedByIndex) {
  TempDir dir;
  write_counting_megatron(dir / "m", 10000);
  const int64_t T = 16;
  TokenDataset ds(dir / "m", options(T, 7));
  EXPECT_EQ(ds.tokens(), 10000);
  EXPECT_EQ(ds.split_tokens(Split::train), 9000);
  EXPECT_EQ(ds.windows(Split::train), 9000 / 17 - 1);  // one window of slack for the epoch shift
  EXPECT_EQ(ds.vocab_size(), kMod);  // no vocabulary file: the largest id + 1
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  const int64_t shift = ds.sample_start(Split::train, 0) % (T + 1);  // the grid offset of epoch 0
  for (int64_t i = 0; i < 100; ++i) {
    ds.sample(Split::train, i, in.data(), tg.data());
    const int64_t start = ds.sample_start(Split::train, i);
    EXPECT_EQ(start % (T + 1), shift);
    EXPECT_LE(start + T + 1, 9000);  // inside the train split
    for (int64_t k = 0; k < T; ++k) {
      EXPECT_EQ(in[size_t(k)], (start + k) % kMod);
      EXPECT_EQ(tg[size_t(k)], (start + k + 1) % kMod);
    }
  }
  // Same index, same sample, whatever was asked before and whichever object answers: a
  // micro-batch of 2 starting at 2k holds exactly samples 2k and 2k + 1.
  TokenDataset again(dir / "m", options(T, 7));
  for (int64_t i : {0, 5, 523, 524, 100000}) EXPECT_EQ(ds.sample_start(Split::train, i), again.sample_start(Split::train, i));
  std::vector<int32_t> batch(static_cast<size_t>(2 * T)), batch_t(static_cast<size_t>(2 * T)), one(static_cast<size_t>(T)), one_t(static_cast<size_t>(T));
  for (int64_t k = 0; k < 20; ++k) {
    for (int64_t j = 0; j < 2; ++j) again.sample(Split::train, 2 * k + j, batch.data() + j * T, batch_t.data() + j * T);
    for (int64_t j = 0; j < 2; ++j) {
      ds.sample(Split::train, 2 * k + j, one.data(), one_t.data());
      EXPECT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + j * T));
      EXPECT_TRUE(std::equal(one_t.begin(), one_t.end(), batch_t.begin() + j * T));
    }
  }
  // Another seed, another order.
  TokenDataset other(dir / "m", options(T, 8));
  int same = 0;
  for (int64_t i = 0; i < 100; ++i) same += other.sample_start(Split::train, i) == ds.sample_start(Split::train, i);
  EXPECT_LT(same, 10);
}

// data.eod_mask_loss: the target after each EOD input is -1, the rest as the dataset gives them,
// and count_targets counts what is left over any run of samples.
TEST(DataDataset, EodLossMaskLeavesOutTheTargetAfterEachEod) {
  TempDir dir;
  write_counting_megatron(dir / "m", 10000);
  const int64_t T = 16;
  const int32_t eod = 7;  // the stream is p % 251: every 251st token
  auto plain = std::make_unique<TokenDataset>(dir / "m", options(T, 7));
  const TokenDataset& ds = *plain;
  EodLossMask masked(std::make_unique<TokenDataset>(dir / "m", options(T, 7)), eod);
  EXPECT_EQ(masked.vocab_size(), ds.vocab_size());
  EXPECT_EQ(masked.seq_len(), T);
  EXPECT_EQ(masked.identity(), ds.identity());
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T)), min(static_cast<size_t>(T)),
      mtg(static_cast<size_t>(T));
  int64_t kept = 0, left_out = 0;
  for (int64_t i = 0; i < 300; ++i) {
    ds.sample(Split::train, i, in.data(), tg.data());
    masked.sample(Split::train, i, min.data(), mtg.data());
    EXPECT_EQ(in, min);
    for (size_t k = 0; k < size_t(T); ++k) {
      EXPECT_EQ(mtg[k], in[k] == eod ? -1 : tg[k]) << "sample " << i << " position " << k;
      (mtg[k] < 0 ? left_out : kept) += 1;
    }
  }
  EXPECT_GT(left_out, 10);  // 300 x 16 tokens hold ~19 of the 251 ids' one
  EXPECT_EQ(count_targets(masked, Split::train, 0, 300), kept);
  EXPECT_EQ(count_targets(ds, Split::train, 0, 300), 300 * T);
  EXPECT_EQ(count_targets(masked, Split::train, 100, 200) + count_targets(masked, Split::train, 0, 100), kept);
  EXPECT_EQ(count_targets(masked, Split::train, 5, 0), 0);
}

// A dataset's loss mask (PREFIX.lossmask, prepare_data --json-keys PROMPT,RESPONSE): the targets it
// marks 0 are -1, the identity names it, and a mask that does not fit the data is refused.
TEST(DataDataset, LossMaskFileLeavesOutTheTargetsItMarks) {
  TempDir dir;
  write_counting_megatron(dir / "m", 10000);
  const int64_t T = 16;
  const TokenDataset plain(dir / "m", options(T, 7));
  std::vector<uint8_t> keep(10000);
  for (size_t p = 0; p < keep.size(); ++p) keep[p] = (p / 5) % 3 == 0;  // runs of 5 kept, 10 left out
  write_loss_mask(loss_mask_path(dir / "m.bin"), keep, plain.checksum());
  EXPECT_EQ(loss_mask_path(dir / "m.idx"), std::string(dir / "m.lossmask"));
  const TokenDataset masked(dir / "m", options(T, 7));
  EXPECT_TRUE(plain.target_mask().empty());
  EXPECT_EQ(masked.target_mask(), "those m.lossmask marks (33.4% of the tokens)");
  EXPECT_EQ(masked.identity().rfind(plain.identity() + ", loss mask ", 0), 0u) << masked.identity();
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T)), min(static_cast<size_t>(T)),
      mtg(static_cast<size_t>(T));
  int64_t kept = 0;
  for (int64_t i = 0; i < 200; ++i) {
    plain.sample(Split::train, i, in.data(), tg.data());
    masked.sample(Split::train, i, min.data(), mtg.data());
    EXPECT_EQ(in, min);
    const int64_t start = masked.sample_start(Split::train, i);
    for (int64_t k = 0; k < T; ++k) {
      EXPECT_EQ(mtg[size_t(k)], keep[size_t(start + k + 1)] ? tg[size_t(k)] : -1) << "sample " << i << " position " << k;
      kept += mtg[size_t(k)] >= 0;
    }
  }
  EXPECT_EQ(count_targets(masked, Split::train, 0, 200), kept);
  // A mask of other data (another length, or the same length of other tokens), a file that is no
  // mask, a mark other than 0 or 1, no target in the training split: one line each.
  write_loss_mask(dir / "m.lossmask", keep, plain.checksum() ^ 1);
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); })
                .find("m.lossmask: a loss mask made for tokens of checksum "),
            std::string::npos);
  keep.pop_back();
  write_loss_mask(dir / "m.lossmask", keep, plain.checksum());
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); })
                .find("m.lossmask: a loss mask of 9999 tokens beside data of 10000 tokens: it belongs to other data"),
            std::string::npos);
  std::ofstream(std::string(dir / "m.lossmask"), std::ios::binary) << "not a mask";
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); }).find("m.lossmask: not a loss mask (no TRLMASK1 header)"),
            std::string::npos);
  keep.push_back(2);
  write_loss_mask(dir / "m.lossmask", keep, plain.checksum());
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); })
                .find("m.lossmask: token 9999 is marked 2 (allowed: 0 or 1): corrupt loss mask"),
            std::string::npos);
  std::fill(keep.begin(), keep.begin() + 9000, 0);  // targets in the validation split only
  keep.back() = 1;
  write_loss_mask(dir / "m.lossmask", keep, plain.checksum());
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); })
                .find("m.lossmask: keeps no target in the training split (its first 9000 tokens): nothing to learn"),
            std::string::npos);
  // Data whose vocabulary says a mask was written with it, the mask not copied beside it: refused.
  std::filesystem::remove(dir / "m.lossmask");
  save_vocabulary(*make_byte_tokenizer(), dir / "m.vocab.json", /*loss_mask=*/true);
  EXPECT_NE(error_of([&] { TokenDataset(dir / "m", options(T, 7)); })
                .find("m.lossmask is missing: " + std::string(dir / "m.vocab.json") +
                      " says the data was written with that loss mask"),
            std::string::npos);
  save_vocabulary(*make_byte_tokenizer(), dir / "m.vocab.json");
  EXPECT_TRUE(TokenDataset(dir / "m", options(T, 7)).target_mask().empty());
}

// data.packing = documents: every sample holds whole documents (or a full piece of one longer than
// a sample, alone, or its rest), best fit, padded after them (inputs 0, targets -1); the first token
// of a rest and the tokens a loss mask marks 0 are no targets; an epoch of the two splits covers
// every token once, a document is validation data when it starts in the last val_fraction of the
// tokens, two opens pack alike, and an llm.c token file (no document lengths) is refused.
TEST(DataDataset, WholeDocumentsArePackedAndPadded) {
  TempDir dir;
  write_counting_megatron(dir / "m", 3000);  // documents of 1, 2, 3, ... tokens: the last ones longer than a sample
  const int64_t T = 16, L = T + 1;
  DatasetOptions o = options(T, 5);
  o.whole_documents = true;
  std::map<int64_t, int64_t> doc_length;  // by start
  int64_t cut = 0, val_begin = -1;
  for (int64_t p = 0, len = 1; p < 3000; p += len, ++len) {
    doc_length[p] = std::min<int64_t>(len, 3000 - p);
    cut += doc_length[p] > L;
    if (val_begin < 0 && p >= 2700) val_begin = p;
  }
  {  // A loss mask that leaves out every third token's target.
    const TokenDataset plain(dir / "m", options(T, 5));
    std::vector<uint8_t> keep(3000);
    for (size_t p = 0; p < keep.size(); ++p) keep[p] = p % 3 != 0;
    write_loss_mask(dir / "m.lossmask", keep, plain.checksum());
  }
  const TokenDataset ds(dir / "m", o), again(dir / "m", o);
  EXPECT_EQ(ds.split_begin(Split::val), val_begin);
  // The document a token is in: its start and length.
  auto document_of = [&](int64_t p) { return *std::prev(doc_length.upper_bound(p)); };
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  std::vector<int> covered(3000, 0);
  int64_t padded = 0;
  for (Split split : {Split::train, Split::val})
    for (int64_t i = 0; i < ds.windows(split); ++i) {
      ds.sample(split, i, in.data(), tg.data());
      const std::vector<TokenDataset::Piece> pieces = ds.pieces(split, i);
      std::vector<int64_t> at;  // the sample's tokens' stream positions
      std::set<int64_t> rest_starts;
      for (const TokenDataset::Piece& piece : pieces) {
        const auto [start, length] = document_of(piece.start);
        const int64_t offset = piece.start - start;
        // A whole document, or a piece of one: a full sample's worth (alone), or its rest.
        EXPECT_TRUE(offset % L == 0 && offset + piece.length <= length &&
                    (piece.length == L || offset + piece.length == length)) << piece.start;
        EXPECT_EQ(piece.rest, offset > 0 && offset + piece.length == length) << piece.start;
        if (piece.length == L) {
          EXPECT_EQ(pieces.size(), 1u) << piece.start;
        }
        EXPECT_EQ(split == Split::val, start >= val_begin) << start;
        if (piece.rest) rest_starts.insert(piece.start);
        for (int64_t k = 0; k < piece.length; ++k) at.push_back(piece.start + k);
      }
      const int64_t n = int64_t(at.size());
      EXPECT_TRUE(n >= 2 && n <= L) << n;
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(in[size_t(t)], t < n ? at[size_t(t)] % kMod : 0);
        const bool target = t + 1 < n && at[size_t(t + 1)] % 3 != 0 && !rest_starts.count(at[size_t(t + 1)]);
        EXPECT_EQ(tg[size_t(t)], target ? at[size_t(t + 1)] % kMod : -1) << "sample " << i << " position " << t;
      }
      for (int64_t p : at) ++covered[size_t(p)];
      padded += L - n;
      const std::vector<TokenDataset::Piece> same = again.pieces(split, i);
      EXPECT_TRUE(same.size() == pieces.size() && std::equal(same.begin(), same.end(), pieces.begin(),
                  [](const auto& a, const auto& b) { return a.start == b.start && a.length == b.length; }));
    }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), 3000);  // every token once
  EXPECT_NEAR(ds.padding_share(), double(padded) / double((ds.windows(Split::train) + ds.windows(Split::val)) * L), 1e-12);
  EXPECT_LT(ds.padding_share(), 0.02);  // best fit leaves little room
  EXPECT_NE(ds.target_mask().find(", " + std::to_string(cut) + " documents longer than model.seq_len + 1 cut into pieces"),
            std::string::npos) << ds.target_mask();
  EXPECT_NE(ds.identity().find(", documents "), std::string::npos) << ds.identity();
  EXPECT_EQ(ds.distinct_samples(Split::train), ds.windows(Split::train));
  // Each epoch is a permutation of the training samples.
  std::set<int64_t> epoch;
  for (int64_t i = 0; i < ds.windows(Split::train); ++i) epoch.insert(ds.sample_start(Split::train, ds.windows(Split::train) + i));
  EXPECT_EQ(int64_t(epoch.size()), ds.windows(Split::train));
  std::vector<int32_t> toks(3000);
  for (int i = 0; i < 3000; ++i) toks[size_t(i)] = i % kMod;
  write_token_file(dir / "t.tok", toks);
  EXPECT_NE(error_of([&] { TokenDataset d(dir / "t.tok", o); }).find("data.packing = \"documents\" needs the documents' lengths"),
            std::string::npos);
  // Documents all before the validation split's first token: said so.
  write_counting_megatron(dir / "small", 15);
  EXPECT_NE(error_of([&] { TokenDataset d(dir / "small", o); })
                .find("no document of 2 tokens or more starts in the last data.val_fraction = 0.1 of the tokens (after "
                      "token 13 of 15"),
            std::string::npos);
}

TEST(DataDataset, EpochsArePermutationsReshuffledPerEpoch) {
  TempDir dir;
  write_counting_megatron(dir / "m", 5000);
  TokenDataset ds(dir / "m", options(10, 3));
  const int64_t W = ds.windows(Split::train);
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < W; ++i) e0.push_back(ds.sample_start(Split::train, i));
  for (int64_t i = W; i < 2 * W; ++i) e1.push_back(ds.sample_start(Split::train, i));
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  // Each epoch visits every window of its grid exactly once; the grid is shifted per epoch by a
  // seeded offset in [0, seq_len], so windows do not repeat exactly across epochs.
  for (const auto* e : {&e0, &e1}) {
    const int64_t shift = (*e)[0];
    EXPECT_LT(shift, 11);
    for (int64_t w = 0; w < W; ++w) EXPECT_EQ((*e)[size_t(w)], shift + w * 11);
  }
  std::set<int64_t> shifts;
  for (int64_t epoch = 0; epoch < 8; ++epoch) shifts.insert(ds.sample_start(Split::train, epoch * W) % 11);
  EXPECT_GT(shifts.size(), 1u);
}

TEST(DataDataset, TrainAndValidationAreDisjoint) {
  TempDir dir;
  write_counting_megatron(dir / "m", 3000);
  DatasetOptions o = options(12, 1);
  o.val_fraction = 0.2;
  TokenDataset ds(dir / "m", o);
  EXPECT_EQ(ds.split_tokens(Split::train), 2400);
  EXPECT_EQ(ds.split_tokens(Split::val), 600);
  std::set<int64_t> val;
  for (int64_t i = 0; i < 3 * ds.windows(Split::val); ++i) {
    const int64_t s = ds.sample_start(Split::val, i);
    EXPECT_GE(s, 2400);
    EXPECT_LE(s + 13, 3000);
    val.insert(s);
  }
  EXPECT_EQ(int64_t(val.size()), ds.windows(Split::val));
  for (int64_t i = 0; i < 2 * ds.windows(Split::train); ++i) EXPECT_LE(ds.sample_start(Split::train, i) + 13, 2400);

  o.val_fraction = 0.0;
  TokenDataset none(dir / "m", o);
  std::vector<int32_t> in(12), tg(12);
  EXPECT_NE(error_of([&] { none.sample(Split::val, 0, in.data(), tg.data()); }).find("no validation data"), std::string::npos);
  o.seq_len = 3000;
  EXPECT_NE(error_of([&] { TokenDataset d(dir / "m", o); }).find("the train split has 3000 tokens, fewer than one sample"),
            std::string::npos);
}

TEST(DataDataset, VocabularyLargerThanTheModelIsRejected) {
  TempDir dir;
  write_counting_megatron(dir / "m", 1000);
  save_vocabulary(*make_byte_tokenizer(), dir / "m.vocab.json");
  TokenDataset ok(dir / "m", options(8, 1, 256));
  EXPECT_EQ(ok.vocab_size(), 256);
  EXPECT_EQ(ok.vocabulary_file(), dir / "m.vocab.json");
  const std::string e = error_of([&] { TokenDataset d(dir / "m", options(8, 1, 100)); });
  EXPECT_NE(e.find("m.vocab.json: the data's vocabulary has 256 tokens but model.vocab_size = 100"),
            std::string::npos) << e;

  // Without a vocabulary file the scan finds the first token the model cannot embed.
  fs::remove(dir / "m.vocab.json");
  const std::string s = error_of([&] { TokenDataset d(dir / "m", options(8, 1, 100)); });
  EXPECT_NE(s.find("m.bin: token 100 (id 100) is >= model.vocab_size = 100"), std::string::npos) << s;

  // A vocabulary file that does not match the data: ids beyond it are corruption.
  save_vocabulary(*make_char_tokenizer({"abc"}), dir / "m.vocab.json");
  const std::string c = error_of([&] { TokenDataset d(dir / "m", options(8, 1, 1000)); });
  EXPECT_NE(c.find("m.bin: token 3 (id 3) is outside the vocabulary of 3 in"), std::string::npos) << c;
}

TEST(DataDataset, BlendingFollowsWeights) {
  TempDir dir;
  write_counting_megatron(dir / "a", 4000);
  write_counting_megatron(dir / "b", 9000);
  write_counting_megatron(dir / "c", 2000);
  const auto blend = open_dataset("0.2 " + (dir / "a") + " 0.5 " + (dir / "b") + " 0.3 " + (dir / "c"), options(8, 5));
  auto* b = dynamic_cast<BlendedDataset*>(blend.get());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->sources(), 3);
  const double w[3] = {0.2, 0.5, 0.3};
  std::vector<int64_t> count(3, 0);
  const int64_t N = 10000;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t s = b->source_of(i);
    // The within-source index is the number of earlier samples that went to the same source.
    EXPECT_EQ(b->index_in_source(i), count[size_t(s)]);
    ++count[size_t(s)];
  }
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(double(count[size_t(s)]) / N, w[s], 0.01) << "source " << s;

  // Sample i of the blend is sample index_in_source(i) of its source.
  TokenDataset bsrc(dir / "b", options(8, 5));
  std::vector<int32_t> in(8), tg(8), in2(8), tg2(8);
  for (int64_t i = 0; i < 200; ++i) {
    if (b->source_of(i) != 1) continue;
    blend->sample(Split::train, i, in.data(), tg.data());
    bsrc.sample(Split::train, b->index_in_source(i), in2.data(), tg2.data());
    EXPECT_EQ(in, in2);
    EXPECT_EQ(tg, tg2);
  }
  EXPECT_NE(error_of([&] { open_dataset("0.5 " + (dir / "a") + " " + (dir / "b"), options(8, 5)); }).find("expected PATH or WEIGHT PATH"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_dataset("x " + (dir / "a") + " 1 " + (dir / "b"), options(8, 5)); }).find("\"x\" is not a weight"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_dataset("0 " + (dir / "a") + " 1 " + (dir / "b"), options(8, 5)); }).find("every weight must be a finite number > 0"),
            std::string::npos);
  // inf drew every sample from its source (the other got none) without a word.
  EXPECT_NE(error_of([&] { open_dataset("1 " + (dir / "a") + " inf " + (dir / "b"), options(8, 5)); }).find("got inf"),
            std::string::npos);
}

// A path with spaces that names one dataset is that dataset, not a blend.
TEST(DataDataset, PathWithSpacesIsOneDataset) {
  TempDir dir;
  write_counting_megatron(dir / "with space", 4000);
  const auto d = open_dataset(dir / "with space", options(8, 5));
  EXPECT_NE(dynamic_cast<TokenDataset*>(d.get()), nullptr);
  EXPECT_NE(error_of([&] { open_dataset(dir / "no such", options(8, 5)); }).find("taken whole only when it exists"),
            std::string::npos);
}

TEST(DataDataset, BlendingNeedsOneVocabulary) {
  TempDir dir;
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[size_t(i)] = i % 3;
  for (const char* name : {"a", "b", "c"}) write_token_file(dir / (std::string(name) + ".tok"), toks);
  save_vocabulary(*make_char_tokenizer({"xyz"}), dir / "a.vocab.json");
  save_vocabulary(*make_char_tokenizer({"zyx"}), dir / "b.vocab.json");  // the same characters, ids alike
  save_vocabulary(*make_char_tokenizer({"xy\n"}), dir / "c.vocab.json");  // id 2 is another character
  EXPECT_NO_THROW(open_dataset("1 " + (dir / "a.tok") + " 1 " + (dir / "b.tok"), options(8, 1)));
  const std::string e = error_of([&] { open_dataset("1 " + (dir / "a.tok") + " 1 " + (dir / "c.tok"), options(8, 1)); });
  EXPECT_NE(e.find("a.vocab.json and " + (dir / "c.vocab.json") + " differ: a blend's sources must share one vocabulary"),
            std::string::npos)
      << e;
  // Fine-tuning data (its vocabulary flagged for the loss mask beside it) blends with unmasked data.
  write_loss_mask(dir / "b.lossmask", std::vector<uint8_t>(1000, 1), TokenDataset(dir / "b.tok", options(8, 1)).checksum());
  save_vocabulary(*make_char_tokenizer({"zyx"}), dir / "b.vocab.json", /*loss_mask=*/true);
  EXPECT_NE(open_dataset("1 " + (dir / "a.tok") + " 1 " + (dir / "b.tok"), options(8, 1))->target_mask().find("b.lossmask"),
            std::string::npos);
}

TEST(DataDataset, TinyShakespeareAtCharLevel) {
  const std::string path = TRELLIS_SOURCE_DIR "/../shared/data/tinyshakespeare.txt";
  if (!file_exists(path)) GTEST_SKIP() << path << " is absent";
  TempDir dir;
  const std::string text = read_text_file(path);
  const auto tok = make_char_tokenizer({text});
  EXPECT_EQ(tok->vocab_size(), 65);
  IndexedDatasetWriter w(dir / "shakespeare", best_token_type(tok->vocab_size()));
  w.add_document(tok->encode(text));
  w.finish();
  save_vocabulary(*tok, dir / "shakespeare.vocab.json");

  TokenDataset ds(dir / "shakespeare", options(64, 1, 65));
  EXPECT_EQ(ds.vocab_size(), 65);
  EXPECT_EQ(ds.tokens(), int64_t(text.size()));
  const auto vocab = load_vocabulary(ds.vocabulary_file());
  std::vector<int32_t> in(64), tg(64);
  ds.sample(Split::val, 3, in.data(), tg.data());
  const std::string decoded = vocab->decode(in);
  EXPECT_EQ(text.substr(size_t(ds.sample_start(Split::val, 3)), 64), decoded);
}
