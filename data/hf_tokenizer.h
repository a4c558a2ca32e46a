// Hugging Face tokenizer.json files of the BPE kind, read without Python: the byte-level ones
// (GPT-2, Llama 3, Qwen2-style patterns) and the SentencePiece-style ones with byte fallback
// (Llama 2, Mistral). What is read, and computed as the tokenizers library computes it:
//   added_tokens     split out first (leftmost-longest; lstrip / rstrip), each its own id
//   normalizer       none, NFC, Prepend, Replace (a string), or a Sequence of them
//   pre_tokenizer    none, ByteLevel, Metaspace, Digits, Split (GPT-2's, Llama 3's or Qwen2's
//                    pattern, Isolated), or a Sequence of them
//   model            BPE: vocab, merges (either form), byte_fallback, unk_token, fuse_unk, ignore_merges
//   post_processor   none, ByteLevel, TemplateProcessing, Bert/RobertaProcessing, or a Sequence
//   decoder          none, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, or a Sequence
// encode(text) is transformers' tokenizer(text).input_ids (special tokens added). Anything else
// (another model type, another normalizer such as NFKC, another regex, BPE dropout) is refused with one line
// naming the key. Where the library would drop a character it has no token for (no byte fallback,
// no unk_token), encode refuses instead.
#pragma once
#include <memory>
#include <string>

#include "core/json.h"
#include "data/tokenizer.h"

namespace trellis {

// `path`: a tokenizer.json, or a directory holding one.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);
// The eos_token of the tokenizer_config.json beside a tokenizer.json (`path`: the file or its
// directory), as transformers saves it (a string, or {"content": ...}); "" where there is none.
std::string hf_eos_token(const std::string& path);
// `json` parsed from `text` (the tokenizer's own JSON, kept verbatim in the vocabulary file).
std::unique_ptr<Tokenizer> hf_tokenizer_from_json(const JsonValue& json, std::string text, const std::string& source);

}  // namespace trellis
