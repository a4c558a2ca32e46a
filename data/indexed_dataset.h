// Megatron's MMapIndexedDataset: <prefix>.idx (the index) and <prefix>.bin (the tokens), read
// through a memory map and validated at open, and a writer that produces the same files.
//   .idx: "MMIDIDX\0\0", version u64 = 1, dtype code u8, sequence count u64, document count u64,
//         sizes int32[sequences], pointers int64[sequences] (byte offsets into .bin),
//         document index int64[documents] (first sequence of each document, then the count).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/mapped_file.h"
#include "data/token_view.h"

namespace trellis {

class IndexedDataset {
 public:
  // Opens <prefix>.idx and <prefix>.bin; a UserError names the file and what is wrong.
  explicit IndexedDataset(const std::string& prefix);

  int64_t sequences() const { return int64_t(sizes_.size()); }
  int64_t documents() const { return int64_t(doc_idx_.size()); }
  int32_t sequence_size(int64_t i) const { return sizes_[size_t(i)]; }
  int64_t sequence_pointer(int64_t i) const { return pointers_[size_t(i)]; }
  const std::vector<int64_t>& document_index() const { return doc_idx_; }
  TokenType type() const { return type_; }
  // All sequences back to back, in index order (the stream nanoGPT-style sampling reads).
  TokenView tokens() const { return stream_; }

 private:
  MappedFile bin_;
  TokenType type_ = TokenType::u16;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_, doc_idx_;
  TokenView stream_;
};

// Writes <prefix>.bin as documents arrive and <prefix>.idx at finish(); one sequence per document.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenType type);
  ~IndexedDatasetWriter();
  void add_document(const std::vector<int32_t>& tokens);
  void finish();
  int64_t tokens_written() const { return tokens_; }

 private:
  std::string prefix_;
  TokenType type_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;
  int64_t tokens_ = 0;
};

// The element type Megatron's preprocessing picks for a vocabulary: uint16 below 65500, else int32.
TokenType best_token_type(int64_t vocab_size);

}  // namespace trellis
