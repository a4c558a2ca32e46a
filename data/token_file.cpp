// Reading and writing llm.c token files, refusing a header that does not match the file size.
#include "data/token_file.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/error.h"

namespace trellis {

TokenFile::TokenFile(const std::string& path) : file_(path) {
  const size_t n = file_.size();
  if (n < kTokenFileHeaderBytes)
    throw UserError(path + ": truncated: " + std::to_string(n) + " bytes, shorter than the 1024-byte header of an llm.c token file");
  int32_t header[3];
  std::memcpy(header, file_.data(), sizeof(header));
  if (header[0] != kTokenFileMagic)
    throw UserError(path + ": not an llm.c token file (magic " + std::to_string(header[0]) + ", expected " +
                    std::to_string(kTokenFileMagic) + ")");
  version_ = header[1];
  if (version_ != 1 && version_ != 2)
    throw UserError(path + ": token file version " + std::to_string(version_) +
                    " is not supported (1 = uint16 tokens, 2 = uint32 tokens)");
  const int64_t count = header[2];
  const int64_t elem = version_ == 1 ? 2 : 4;
  const int64_t need = int64_t(kTokenFileHeaderBytes) + count * elem;
  if (count < 0 || need != int64_t(n))
    throw UserError(path + ": header says " + std::to_string(count) + " tokens (" + std::to_string(need) +
                    " bytes with the header) but the file has " + std::to_string(n) + " bytes" +
                    (need > int64_t(n) ? " (truncated)" : " (trailing bytes: header and data do not match)"));
  view_ = TokenView{file_.data() + kTokenFileHeaderBytes, count, version_ == 1 ? TokenType::u16 : TokenType::u32};
}

TokenFileWriter::TokenFileWriter(const std::string& path, bool wide) : path_(path), wide_(wide) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw UserError(path + ": cannot create: " + std::strerror(errno));
  const std::vector<uint8_t> header(kTokenFileHeaderBytes, 0);  // its count comes at finish()
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size())
    throw UserError(path + ": write failed: " + std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() {
  if (file_) std::fclose(file_);
}

void TokenFileWriter::add(const std::vector<int32_t>& tokens) {
  TRELLIS_CHECK(file_ != nullptr, "add after finish");
  std::vector<uint8_t> bytes;
  if (const int64_t bad = store_tokens(tokens, wide_ ? TokenType::u32 : TokenType::u16, bytes); bad >= 0)
    throw UserError(path_ + ": token id " + std::to_string(tokens[size_t(bad)]) + " does not fit version " +
                    std::to_string(wide_ ? 2 : 1) + " of an llm.c token file");
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    throw UserError(path_ + ": write failed: " + std::strerror(errno));
  count_ += int64_t(tokens.size());
  if (count_ > INT32_MAX)
    throw UserError(path_ + ": " + std::to_string(count_) + " tokens do not fit the int32 count of an llm.c token file");
}

void TokenFileWriter::finish() {
  if (!file_) return;
  const int32_t header[3] = {kTokenFileMagic, wide_ ? 2 : 1, int32_t(count_)};
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, sizeof header, 1, file_) == 1;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) throw UserError(path_ + ": write failed: " + std::strerror(errno));
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens) {
  if (tokens.size() > size_t(INT32_MAX))
    throw UserError(path + ": " + std::to_string(tokens.size()) + " tokens do not fit the int32 count of an llm.c token file");
  int32_t max_id = -1;
  for (int32_t t : tokens) {
    if (t < 0) throw UserError(path + ": negative token id " + std::to_string(t));
    max_id = std::max(max_id, t);
  }
  TokenFileWriter w(path, max_id >= 65536);
  w.add(tokens);
  w.finish();
}

}  // namespace trellis
