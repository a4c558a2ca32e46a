// Pre-tokenization: the regular-expression splits that byte-level BPE tokenizers apply before
// merging, matched by hand (no regex engine), and GPT-2's byte-to-code-point alphabet.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

enum class SplitPattern {
  // GPT-2's 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama 3's (tiktoken cl100k's): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2's: Llama 3's with \p{N} one digit at a time.
  kQwen2,
};

// The pieces of `text` (in order, together the whole text). Exact for every code point of the
// Unicode version data/unicode_classes.inc names.
std::vector<std::string> pretokenize(const std::string& text, SplitPattern pattern);

// The pattern a tokenizer.json Split's regex spells, or nullopt for any other regex.
std::optional<SplitPattern> split_pattern_of_regex(const std::string& regex);

// The 256-entry byte -> code point map of GPT-2 (printable bytes map to themselves).
const std::vector<uint32_t>& gpt2_byte_to_unicode();
// `bytes` with each byte written as its code point of that map (UTF-8).
std::string to_byte_level(const std::string& bytes);
// The byte that map writes as `cp`, or -1 for a code point outside it.
int byte_of_byte_level(uint32_t cp);

}  // namespace trellis
