#include "data/loss_mask.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/token_view.h"
#include "data/tokenizer.h"

namespace trellis {

namespace {

constexpr char kMagic[8] = {'T', 'R', 'L', 'M', 'A', 'S', 'K', '1'};
// The magic, then the token count and the tokens' checksum (u64s, little-endian).
constexpr size_t kHeader = 24;

void put_u64(uint8_t* at, uint64_t v) {
  for (int k = 0; k < 8; ++k) at[k] = uint8_t(v >> (8 * k));
}
uint64_t get_u64(const uint8_t* at) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= uint64_t(at[k]) << (8 * k);
  return v;
}

}  // namespace

void EodLossMask::sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const {
  inner_->sample(split, index, inputs, targets);
  for (int64_t t = 0, T = seq_len(); t < T; ++t)
    if (inputs[t] == eod_) targets[t] = -1;
}

std::string EodLossMask::target_mask() const {
  const std::string inner = inner_->target_mask();
  return "the one after every token " + std::to_string(eod_) + " left out (data.eod_mask_loss)" +
         (inner.empty() ? "" : "; " + inner);
}

int64_t count_targets(const SampleSource& data, Split split, int64_t first, int64_t count) {
  const int64_t T = data.seq_len();
  std::vector<int32_t> inputs(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  int64_t kept = 0;
  for (int64_t i = first; i < first + count; ++i) {
    data.sample(split, i, inputs.data(), targets.data());
    for (int32_t t : targets) kept += t >= 0;
  }
  return kept;
}

std::string loss_mask_path(const std::string& dataset_path) { return dataset_stem(dataset_path) + ".lossmask"; }

LossMaskWriter::LossMaskWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw UserError(path + ": cannot create: " + std::strerror(errno));
  const uint8_t header[kHeader] = {};  // written at finish()
  if (std::fwrite(header, 1, kHeader, file_) != kHeader) throw UserError(path + ": write failed: " + std::strerror(errno));
}

LossMaskWriter::~LossMaskWriter() {
  if (file_) std::fclose(file_);
}

void LossMaskWriter::add(size_t left_out, size_t kept) {
  std::vector<uint8_t> marks(left_out + kept, 0);
  std::fill(marks.begin() + std::ptrdiff_t(left_out), marks.end(), uint8_t(1));
  add(marks);
}

void LossMaskWriter::add(const std::vector<uint8_t>& keep) {
  TRELLIS_CHECK(file_ != nullptr, "add after finish");
  if (!keep.empty() && std::fwrite(keep.data(), 1, keep.size(), file_) != keep.size())
    throw UserError(path_ + ": write failed: " + std::strerror(errno));
  tokens_ += int64_t(keep.size());
  for (uint8_t k : keep) kept_ += k != 0;
}

void LossMaskWriter::finish(uint64_t token_checksum) {
  if (!file_) return;
  uint8_t header[kHeader];
  std::memcpy(header, kMagic, sizeof kMagic);
  put_u64(header + 8, uint64_t(tokens_));
  put_u64(header + 16, token_checksum);
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, 1, kHeader, file_) == kHeader;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) throw UserError(path_ + ": write failed: " + std::strerror(errno));
}

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& keep, uint64_t token_checksum) {
  LossMaskWriter w(path);
  w.add(keep);
  w.finish(token_checksum);
}

LossMaskFile::LossMaskFile(const std::string& path, int64_t tokens, uint64_t token_checksum) : file_(path) {
  const uint8_t* d = file_.data();
  if (file_.size() < kHeader || std::memcmp(d, kMagic, sizeof kMagic) != 0)
    throw UserError(path + ": not a loss mask (no TRLMASK1 header): remove it, or write it again with prepare_data");
  const uint64_t n = get_u64(d + 8), made_for = get_u64(d + 16);
  if (n != uint64_t(tokens))
    throw UserError(path + ": a loss mask of " + std::to_string(n) + " tokens beside data of " + std::to_string(tokens) +
                    " tokens: it belongs to other data (write both again with prepare_data)");
  if (file_.size() != kHeader + n)
    throw UserError(path + ": " + std::to_string(file_.size()) + " bytes, not the " + std::to_string(kHeader + n) +
                    " a mask of " + std::to_string(n) + " tokens takes: a truncated or damaged file (write it again "
                    "with prepare_data)");
  if (made_for != token_checksum)
    throw UserError(path + ": a loss mask made for tokens of checksum " + checksum_hex(made_for) + " beside data of checksum " +
                    checksum_hex(token_checksum) + ": the data was written again since (write both again with prepare_data)");
  bytes_ = d + kHeader;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the marks
  for (int64_t p = 0; p < tokens; ++p) {
    if (bytes_[p] > 1)
      throw UserError(path + ": token " + std::to_string(p) + " is marked " + std::to_string(bytes_[p]) +
                      " (allowed: 0 or 1): corrupt loss mask");
    kept_ += bytes_[p];
    h = (h ^ bytes_[p]) * 1099511628211ull;
  }
  checksum_ = h;
}

int64_t LossMaskFile::kept(int64_t begin, int64_t end) const {
  int64_t n = 0;
  for (int64_t p = begin; p < end; ++p) n += bytes_[p];
  return n;
}

}  // namespace trellis
