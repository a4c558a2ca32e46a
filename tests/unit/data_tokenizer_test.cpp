// Tokenizers: byte and char round trips, GPT-2 byte-level BPE on a small vocabulary this test
// writes itself (vocab.json + merges.txt), the pre-tokenization patterns and Unicode classes, BPE
// merge order, a hand-written SentencePiece-style tokenizer.json, and vocabulary files.
// (tests/e2e/hf_tokenizer_test.py checks tokenizer.json files against the tokenizers library.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/unit/test_util.h"
#include "data/bpe.h"
#include "data/hf_tokenizer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace fs = std::filesystem;
using namespace trellis;
using trellis::testing::TempDir;
using trellis::testing::error_of;

namespace {

// vocab.json: every byte (id = byte value, in GPT-2's byte-to-unicode form, non-ASCII written as
// \u escapes like the real file) plus the merged tokens he=256, ll=257, hell=258, Ġw=259.
void write_small_gpt2(const std::string& vocab_path, const std::string& merges_path) {
  std::string json = "{";
  const auto& b2u = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string tok;
    const uint32_t cp = b2u[size_t(b)];
    if (cp == '"' || cp == '\\') tok = std::string("\\") + char(cp);
    else if (cp < 0x80) tok = std::string(1, char(cp));
    else {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      tok = buf;
    }
    json += "\"" + tok + "\": " + std::to_string(b) + ", ";
  }
  json += "\"he\": 256, \"ll\": 257, \"hell\": 258, \"\\u0120w\": 259}";
  std::ofstream(vocab_path) << json;
  std::ofstream(merges_path) << "#version: 0.2\nh e\nl l\nhe ll\n\xC4\xA0 w\n";
}

}  // namespace

TEST(DataTokenizer, ByteRoundTrip) {
  const auto tok = make_byte_tokenizer();
  const std::string text = "Hello, wörld!\n\t\x01\xff";
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'H');
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_NE(error_of([&] { tok->decode({256}); }).find("token id 256 is not a byte"), std::string::npos);
}

TEST(DataTokenizer, CharRoundTripAndSortedVocabulary) {
  const auto tok = make_char_tokenizer({"hello ", "wörld\n"});
  // Sorted code points: \n, ' ', d, e, h, l, o, r, w, ö
  EXPECT_EQ(tok->vocab_size(), 10);
  EXPECT_EQ(tok->encode("\n"), std::vector<int32_t>{0});
  EXPECT_EQ(tok->encode("ö"), std::vector<int32_t>{9});
  EXPECT_EQ(tok->encode("hello wörld\n").size(), 12u);
  EXPECT_EQ(tok->decode(tok->encode("world hello wörld")), "world hello wörld");
  const std::string e = error_of([&] { tok->encode("hex"); });
  EXPECT_NE(e.find("character \"x\" (U+0078) at byte 2 is not in the vocabulary"), std::string::npos) << e;
}

TEST(DataTokenizer, Gpt2Pretokenize) {
  using V = std::vector<std::string>;
  const auto gpt2_pretokenize = [](const std::string& t) { return pretokenize(t, SplitPattern::kGpt2); };
  EXPECT_EQ(gpt2_pretokenize("hello world"), (V{"hello", " world"}));
  EXPECT_EQ(gpt2_pretokenize("it's  ok\n"), (V{"it", "'s", " ", " ok", "\n"}));
  EXPECT_EQ(gpt2_pretokenize("Hello 123 !!x"), (V{"Hello", " 123", " !!", "x"}));
  EXPECT_EQ(gpt2_pretokenize("we'll they're I'd 'quote'"),
            (V{"we", "'ll", " they", "'re", " I", "'d", " '", "quote", "'"}));
  EXPECT_EQ(gpt2_pretokenize("a\n\nb  "), (V{"a", "\n", "\n", "b", "  "}));
  EXPECT_EQ(gpt2_pretokenize("a\n\n b"), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(gpt2_pretokenize(" café—x"), (V{" café", "—", "x"}));
  // Exact classes beyond Latin-1: CJK punctuation is not a letter, Arabic-Indic digits are numbers.
  EXPECT_EQ(gpt2_pretokenize("中文，好 ٣٤x"), (V{"中文", "，", "好", " ٣٤", "x"}));
}

TEST(DataTokenizer, Llama3AndQwen2Pretokenize) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pretokenize("x 1234567 (hi) it'S\n\n  y", SplitPattern::kLlama3),
            (V{"x", " ", "123", "456", "7", " (", "hi", ")", " it", "'S", "\n\n", " ", " y"}));
  EXPECT_EQ(pretokenize("1234 \t\nA", SplitPattern::kQwen2), (V{"1", "2", "3", "4", " \t\n", "A"}));
  EXPECT_EQ(split_pattern_of_regex("\\w+"), std::nullopt);
}

TEST(DataTokenizer, UnicodeClassesAndLossyUtf8) {
  EXPECT_TRUE(is_unicode_letter(U'ǅ') && is_unicode_letter(U'中') && !is_unicode_letter(U'，') && !is_unicode_letter('1'));
  EXPECT_TRUE(is_unicode_number(U'٣') && is_unicode_number(U'½') && is_unicode_number(U'²') && !is_unicode_number('x'));
  EXPECT_TRUE(is_unicode_space(0x3000) && is_unicode_space(0x85) && !is_unicode_space(0x200B));
  // One U+FFFD for each maximal ill-formed part: a cut 3-byte character is one, a stray byte another.
  EXPECT_EQ(utf8_lossy("a\xE6\x97" "b\x80"), "a\uFFFDb\uFFFD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate is not UTF-8
  EXPECT_TRUE(is_valid_utf8("日本") && !is_valid_utf8("\xC0\xAF"));
}

// NFC against Python's unicodedata.normalize("NFC", ...): composition, a singleton, Hangul both
// ways, canonical reordering before composing, and blocked marks left apart.
TEST(DataTokenizer, NormalizationFormC) {
  EXPECT_EQ(to_nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(to_nfc("\u212B"), "\u00C5");                         // the Angstrom sign, a singleton
  EXPECT_EQ(to_nfc("\u1100\u1161\u11A8"), "\uAC01");             // jamo L V T
  EXPECT_EQ(to_nfc("\uAC00\u11A8"), "\uAC01");                    // LV + T
  EXPECT_EQ(to_nfc("a\u0301\u0323"), "\u1EA1\u0301");            // reordered: dot below first
  EXPECT_EQ(to_nfc("\u1E9B\u0323"), "\u1E9B\u0323");             // long s with dot: no composite
  EXPECT_EQ(to_nfc("q\u0307\u0323"), "q\u0323\u0307");           // reordered, nothing composes
  EXPECT_EQ(to_nfc("\u00C5\u0301x"), "\u01FAx");
  EXPECT_EQ(to_nfc("plain ascii and caf\u00e9"), "plain ascii and caf\u00e9");
  EXPECT_EQ(to_nfc("e\xC0\xAF\u0301"), "e\xC0\xAF\u0301");    // ill-formed bytes kept, and they block
}

TEST(DataTokenizer, BpeMergesLowestRankFirst) {
  // a=0 b=1 c=2 ab=3 bc=4 abc=5; "b c" outranks "a b", so "abc" merges as a (bc), and "ab c" never forms.
  const BpeModel bpe({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}},
                     "test");
  std::vector<int32_t> word{0, 1, 2};
  bpe.merge(word);
  EXPECT_EQ(word, (std::vector<int32_t>{0, 4}));
  word = {0, 1, 0, 1};
  bpe.merge(word);
  EXPECT_EQ(word, (std::vector<int32_t>{3, 3}));
  const std::string e = error_of([] { BpeModel({{"a", 0}}, {{"a", "a"}}, "test"); });
  EXPECT_NE(e.find("merge 1 (\"a\" \"a\") needs \"aa\", which is not in the vocabulary"), std::string::npos) << e;
}

// A SentencePiece-style tokenizer.json written by hand: Prepend/Replace, byte fallback, <s> first.
TEST(DataTokenizer, HfSentencePieceStyleJson) {
  std::string vocab = "\"<unk>\": 0, \"<s>\": 1, \"\u2581\": 2, \"h\": 3, \"i\": 4, \"hi\": 5, \"\u2581hi\": 6";
  for (int b = 0; b < 256; ++b) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), ", \"<0x%02X>\": %d", b, 7 + b);
    vocab += buf;
  }
  const std::string json =
      "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true}],"
      " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\u2581\"},"
      "   {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]},"
      " \"pre_tokenizer\": null,"
      " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
      "   {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
      " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"},"
      "   \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
      "   {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
      " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", \"vocab\": {" + vocab +
      "}, \"merges\": [\"h i\", [\"\u2581\", \"hi\"]]}}";
  const auto tok = hf_tokenizer_from_json(parse_json(json, "t.json"), json, "t.json");
  EXPECT_EQ(tok->kind(), "hf_bpe");
  EXPECT_EQ(tok->vocab_size(), 263);
  // "hi hé": ▁hi ▁ h <0xC3> <0xA9> (é is not a token: its bytes), <s> first.
  EXPECT_EQ(tok->encode("hi hé"), (std::vector<int32_t>{1, 6, 2, 3, 7 + 0xC3, 7 + 0xA9}));
  EXPECT_EQ(tok->decode({6, 2, 3, 7 + 0xC3, 7 + 0xA9}), "hi hé");
  EXPECT_EQ(tok->decode({6, 7 + 0xC3}), "hi\uFFFD");  // a cut character: U+FFFD per byte, as the library does
  // A prompt and its response encoded apart: <s> once, at the start; the response's ids begin after
  // the prompt's (each part gets the normalizer's prepended space, as encoding it alone does).
  std::vector<size_t> starts;
  EXPECT_EQ(tok->encode_parts({"hi", "hi hé"}, starts), (std::vector<int32_t>{1, 6, 6, 2, 3, 7 + 0xC3, 7 + 0xA9}));
  EXPECT_EQ(starts, (std::vector<size_t>{0, 2}));
  const auto bytes = make_byte_tokenizer();  // no special tokens: the parts' encodings one after the other
  EXPECT_EQ(bytes->encode_parts({"ab", "c"}, starts), (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(starts, (std::vector<size_t>{0, 2}));
  TempDir dir;
  save_vocabulary(*tok, dir / "v.json");
  EXPECT_EQ(load_vocabulary(dir / "v.json")->encode("hi hé"), tok->encode("hi hé"));
  const std::string bad = "{\"model\": {\"type\": \"Unigram\"}}";
  const std::string e = error_of([&] { hf_tokenizer_from_json(parse_json(bad, "u.json"), bad, "u.json"); });
  EXPECT_NE(e.find("u.json: model.type: \"Unigram\" is not supported (supported: BPE)"), std::string::npos) << e;
}

TEST(DataTokenizer, Gpt2BpeOnSmallVocabulary) {
  TempDir dir;
  write_small_gpt2(dir / "vocab.json", dir / "merges.txt");
  const auto tok = load_gpt2_tokenizer(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(tok->vocab_size(), 260);
  // "hello" -> h e l l o -> he l l o -> he ll o -> hell o; " world" -> Ġw o r l d.
  EXPECT_EQ(tok->encode("hello world"), (std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tok->decode({258, 'o', 259, 'o', 'r', 'l', 'd'}), "hello world");
  // Spaces become Ġ (byte 0x20 is id 32), a non-ASCII char is its UTF-8 bytes.
  EXPECT_EQ(tok->encode(" é"), (std::vector<int32_t>{32, 0xC3, 0xA9}));
  for (const std::string text : {"hello  world\n\nhe said: 'well!' 42", "héllo wörld ☃ ", "\t x \x01"})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  // Merges apply by rank: "hell" only after "he" and "ll".
  EXPECT_EQ(tok->encode("shell"), (std::vector<int32_t>{'s', 258}));
}

TEST(DataTokenizer, VocabularyFilesRoundTrip) {
  TempDir dir;
  write_small_gpt2(dir / "vocab.json", dir / "merges.txt");
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(make_byte_tokenizer());
  toks.push_back(make_char_tokenizer({"ab\"\\\n\x01 ☃"}));
  toks.push_back(load_gpt2_tokenizer(dir / "vocab.json", dir / "merges.txt"));
  const std::string text = "ab \"\\\n☃\x01" "ba";
  for (const auto& tok : toks) {
    const std::string path = dir / (tok->kind() + ".vocab.json");
    save_vocabulary(*tok, path);
    const auto back = load_vocabulary(path);
    EXPECT_EQ(back->kind(), tok->kind());
    EXPECT_EQ(back->vocab_size(), tok->vocab_size());
    EXPECT_EQ(read_vocabulary_facts(path).vocab_size, tok->vocab_size());
    EXPECT_FALSE(read_vocabulary_facts(path).loss_mask);
    EXPECT_EQ(back->encode(text), tok->encode(text)) << tok->kind();
    EXPECT_EQ(back->decode(back->encode(text)), text) << tok->kind();
    // Data written with a loss mask says so in its vocabulary, which still reads as before.
    save_vocabulary(*tok, path, /*loss_mask=*/true);
    EXPECT_TRUE(read_vocabulary_facts(path).loss_mask);
    EXPECT_EQ(read_vocabulary_facts(path).vocab_size, tok->vocab_size());
    EXPECT_EQ(load_vocabulary(path)->encode(text), tok->encode(text)) << tok->kind();
  }
  EXPECT_EQ(vocabulary_path("/d/corpus"), "/d/corpus.vocab.json");
  EXPECT_EQ(vocabulary_path("/d/corpus.bin"), "/d/corpus.vocab.json");
  EXPECT_EQ(vocabulary_path("/d/corpus.tok"), "/d/corpus.vocab.json");
}

TEST(DataTokenizer, BadVocabularyFilesAreReported) {
  TempDir dir;
  std::ofstream(dir / "a.json") << "{\"kind\": \"char\", \"vocab_size\": 3, \"chars\": [\"a\", \"b\"]}";
  EXPECT_NE(error_of([&] { load_vocabulary(dir / "a.json"); }).find("\"vocab_size\" says 3 but the vocabulary has 2"),
            std::string::npos);
  std::ofstream(dir / "b.json") << "{\"kind\": \"words\"}";
  EXPECT_NE(error_of([&] { load_vocabulary(dir / "b.json"); }).find("unknown vocabulary kind \"words\""), std::string::npos);
  std::ofstream(dir / "c.json") << "{\"kind\": \"byte\", ";
  EXPECT_NE(error_of([&] { load_vocabulary(dir / "c.json"); }).find("c.json: invalid JSON at byte"), std::string::npos);
  std::ofstream(dir / "merges.txt") << "#version: 0.2\nh e x\n";
  std::ofstream(dir / "vocab.json") << "{\"h\": 0, \"e\": 1}";
  EXPECT_NE(error_of([&] { load_gpt2_tokenizer(dir / "vocab.json", dir / "merges.txt"); }).find("merges.txt:2: expected a merge"),
            std::string::npos);
  std::ofstream(dir / "merges.txt") << "h e\n";
  EXPECT_NE(error_of([&] { load_gpt2_tokenizer(dir / "vocab.json", dir / "merges.txt"); })
                .find("merge 1 (\"h\" \"e\") needs \"he\", which is not in the vocabulary"),
            std::string::npos);
  std::ofstream(dir / "merges.txt") << "\n";
  const auto tok = load_gpt2_tokenizer(dir / "vocab.json", dir / "merges.txt");
  EXPECT_NE(error_of([&] { tok->encode("hex"); }).find("the vocabulary has no token \"x\" (needed to encode \"hex\")"),
            std::string::npos);
}
