// The flat token file of llm.c / nanoGPT: a header of 256 int32 (magic 20240520, version,
// token count), then the tokens: version 1 = uint16 (GPT-2 sized vocabularies), 2 = uint32.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/mapped_file.h"
#include "data/token_view.h"

namespace trellis {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr size_t kTokenFileHeaderBytes = 256 * 4;

class TokenFile {
 public:
  // Maps and validates `path`; a UserError names the file and what is wrong.
  explicit TokenFile(const std::string& path);
  TokenView tokens() const { return view_; }
  int version() const { return version_; }

 private:
  MappedFile file_;
  int version_ = 1;
  TokenView view_;
};

// Writes an llm.c token file as its tokens come: version 1 (uint16) when `wide` is false, else 2;
// the header's count is written at finish().
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, bool wide);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  void add(const std::vector<int32_t>& tokens);
  void finish();

 private:
  std::string path_;
  bool wide_;
  std::FILE* file_ = nullptr;
  int64_t count_ = 0;
};

// Writes `tokens` as an llm.c token file (version 1 if every id fits uint16, else version 2).
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace trellis
