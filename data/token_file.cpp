// Reading and writing llm.c token files, refusing a header that does not match the file size.
#include "data/token_file.h"

#include <algorithm>
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

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens) {
  if (tokens.size() > size_t(INT32_MAX))
    throw UserError(path + ": " + std::to_string(tokens.size()) + " tokens do not fit the int32 count of an llm.c token file");
  int32_t max_id = -1;
  for (int32_t t : tokens) {
    if (t < 0) throw UserError(path + ": negative token id " + std::to_string(t));
    max_id = std::max(max_id, t);
  }
  const int version = max_id < 65536 ? 1 : 2;
  const size_t elem = version == 1 ? 2 : 4;
  std::vector<uint8_t> out(kTokenFileHeaderBytes + tokens.size() * elem, 0);
  const int32_t header[3] = {kTokenFileMagic, version, int32_t(tokens.size())};
  std::memcpy(out.data(), header, sizeof(header));
  uint8_t* p = out.data() + kTokenFileHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (version == 1) { const uint16_t v = uint16_t(tokens[i]); std::memcpy(p + 2 * i, &v, 2); }
    else std::memcpy(p + 4 * i, &tokens[i], 4);
  }
  write_file(path, out.data(), out.size());
}

}  // namespace trellis
