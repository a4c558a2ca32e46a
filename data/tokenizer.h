// Tokenizers that turn text into token ids and back, and the vocabulary file stored next to the
// data (<prefix>.vocab.json) so generation can decode what training read:
//   {"kind": "byte", "vocab_size": 256}
//   {"kind": "char", "vocab_size": N, "chars": ["\n", " ", "!", ...]}        (id = position)
//   {"kind": "gpt2_bpe", "vocab_size": N, "vocab": {"!": 0, ...}, "merges": ["Ġ t", ...]}
//   {"kind": "hf_bpe", "vocab_size": N, "source": PATH, "tokenizer": {...tokenizer.json...}}
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trellis {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  // "byte", "char", "gpt2_bpe" or "hf_bpe"
  virtual int64_t vocab_size() const = 0;
  // UserError if the text holds something the vocabulary cannot express.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Texts that follow each other in one document, encoded apart (a prompt, then its response):
  // the tokenizer's special tokens (a BOS, an EOS) only at the document's start and end. starts[i]
  // is where text i's ids begin (the special tokens before the first text count as its).
  virtual std::vector<int32_t> encode_parts(const std::vector<std::string>& texts, std::vector<size_t>& starts) const;
  // UserError if an id is outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The vocabulary file's content (see the top of this header).
  virtual std::string to_json() const = 0;
  // The id of a whole token given by its text ("<|endoftext|>", "</s>"): -1 where there is none.
  virtual int32_t token_id(const std::string& /*token*/) const { return -1; }
};

// Every byte is a token: vocabulary of 256, any text round-trips exactly.
std::unique_ptr<Tokenizer> make_byte_tokenizer();
// One token per Unicode code point seen in `texts`, ids in code point order.
std::unique_ptr<Tokenizer> make_char_tokenizer(const std::vector<std::string>& texts);
// GPT-2's byte-level BPE from a vocab.json and merges.txt the user supplies (see gpt2_bpe.h).
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& vocab_json_path, const std::string& merges_path);

// Writes / reads a vocabulary file; reading names the file in any error. `loss_mask`: the data
// was written with a loss mask beside it (PREFIX.lossmask), which training then requires.
void save_vocabulary(const Tokenizer& tok, const std::string& path, bool loss_mask = false);
std::unique_ptr<Tokenizer> load_vocabulary(const std::string& path);
// A vocabulary file's text without the flag save_vocabulary adds for a loss mask: what gives the
// ids their meaning (a blend's sources compare it).
std::string vocabulary_without_mask_flag(std::string text);
// The tokenizer.json a vocabulary file of kind hf_bpe embeds, verbatim; "" for another kind.
std::string embedded_hf_tokenizer(const std::string& path);
// What a dataset's vocabulary file says of it, without building the tokenizer: its "vocab_size",
// and whether the data was written with a loss mask.
struct VocabularyFacts {
  int64_t vocab_size = 0;
  bool loss_mask = false;
};
VocabularyFacts read_vocabulary_facts(const std::string& path);

// A dataset's path without its .idx, .bin or .tok: what the files beside it are named from.
std::string dataset_stem(const std::string& dataset_path);
// Where the vocabulary of a dataset lives: <prefix>.vocab.json for a Megatron prefix (or its
// .idx/.bin), <name>.vocab.json for a token file <name>.tok / <name>.bin.
std::string vocabulary_path(const std::string& dataset_path);

}  // namespace trellis
