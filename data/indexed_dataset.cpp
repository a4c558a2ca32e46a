// Reading and writing Megatron's indexed dataset, refusing any index that does not match its data.
#include "data/indexed_dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace trellis {

namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
std::string num(int64_t v) { return std::to_string(v); }
std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
}  // namespace

IndexedDataset::IndexedDataset(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  MappedFile idx(idx_path);
  const uint8_t* p = idx.data();
  if (idx.size() < kHeaderBytes)
    throw UserError(idx_path + ": truncated: " + num(int64_t(idx.size())) + " bytes, shorter than the " +
                    num(kHeaderBytes) + "-byte header of a Megatron index");
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    throw UserError(idx_path + ": not a Megatron index (the file does not start with \"MMIDIDX\")");
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1)
    throw UserError(idx_path + ": index version " + std::to_string(version) + ", only version 1 is supported");
  type_ = TokenType(p[17]);
  if (token_type_size(type_) == 0 || type_ == TokenType::u32)
    throw UserError(idx_path + ": token dtype code " + num(p[17]) +
                    " is not supported (allowed: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  const uint64_t seqs = load<uint64_t>(p + 18), docs = load<uint64_t>(p + 26);
  if (seqs > (uint64_t(1) << 40) || docs > (uint64_t(1) << 40))
    throw UserError(idx_path + ": index says " + std::to_string(seqs) + " sequences and " + std::to_string(docs) +
                    " documents, more than an index can hold (2^40 each): the header is damaged");
  const uint64_t need = kHeaderBytes + seqs * 4 + seqs * 8 + docs * 8;
  if (idx.size() != need)
    throw UserError(idx_path + ": index says " + num(int64_t(seqs)) + " sequences and " + num(int64_t(docs)) +
                    " documents, which take " + num(int64_t(need)) + " bytes, but the file has " +
                    num(int64_t(idx.size())) + (idx.size() < need ? " (truncated)" : ""));
  sizes_.resize(seqs);
  pointers_.resize(seqs);
  doc_idx_.resize(docs);
  if (seqs) std::memcpy(sizes_.data(), p + kHeaderBytes, seqs * 4);
  if (seqs) std::memcpy(pointers_.data(), p + kHeaderBytes + seqs * 4, seqs * 8);
  if (docs) std::memcpy(doc_idx_.data(), p + kHeaderBytes + seqs * 12, docs * 8);

  bin_ = MappedFile(bin_path);
  const int64_t elem = token_type_size(type_);
  int64_t end = 0;  // sequences must lie back to back from byte 0, as Megatron writes them
  for (uint64_t i = 0; i < seqs; ++i) {
    if (sizes_[i] < 0) throw UserError(idx_path + ": sequence " + num(int64_t(i)) + " has negative size " + num(sizes_[i]));
    if (pointers_[i] != end)
      throw UserError(idx_path + ": sequence " + num(int64_t(i)) + " starts at byte " + num(pointers_[i]) +
                      " of " + base_name(bin_path) + " but the sequences before it end at byte " + num(end) +
                      " (pointers must be contiguous and increasing)");
    end += int64_t(sizes_[i]) * elem;
  }
  if (end != int64_t(bin_.size()))
    throw UserError(idx_path + ": index says " + num(int64_t(seqs)) + " sequences ending at byte " + num(end) + " but " +
                    base_name(bin_path) + " has " + num(int64_t(bin_.size())) + " bytes" +
                    (end > int64_t(bin_.size()) ? " (truncated data?)" : " (index and data do not match)"));
  for (uint64_t d = 0; d < docs; ++d) {
    const int64_t v = doc_idx_[d];
    if (v < 0 || v > int64_t(seqs) || (d > 0 && v < doc_idx_[d - 1]) || (d == 0 && v != 0))
      throw UserError(idx_path + ": document index entry " + num(int64_t(d)) + " = " + num(v) +
                      " is out of order or outside [0, " + num(int64_t(seqs)) + "]");
  }
  stream_ = TokenView{bin_.data(), end / elem, type_};
}

TokenType best_token_type(int64_t vocab_size) { return vocab_size < 65500 ? TokenType::u16 : TokenType::i32; }

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenType type) : prefix_(prefix), type_(type) {
  if (type != TokenType::u16 && type != TokenType::i32 && type != TokenType::u8)
    throw UserError("indexed dataset writer: unsupported dtype " + token_type_name(type));
  const std::string path = prefix + ".bin";
  bin_ = std::fopen(path.c_str(), "wb");
  if (!bin_) throw UserError(path + ": cannot create: " + std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) std::fclose(bin_);
}

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& tokens) {
  TRELLIS_CHECK(bin_ != nullptr, "add_document after finish");
  std::vector<uint8_t> bytes;
  if (const int64_t bad = store_tokens(tokens, type_, bytes); bad >= 0)
    throw UserError(prefix_ + ".bin: token id " + num(tokens[size_t(bad)]) + " does not fit dtype " + token_type_name(type_));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), bin_) != bytes.size())
    throw UserError(prefix_ + ".bin: write failed: " + std::strerror(errno));
  sizes_.push_back(int32_t(tokens.size()));
  tokens_ += int64_t(tokens.size());
}

void IndexedDatasetWriter::finish() {
  if (!bin_) return;
  const bool closed = std::fclose(bin_) == 0;
  bin_ = nullptr;
  if (!closed) throw UserError(prefix_ + ".bin: write failed: " + std::strerror(errno));
  const uint64_t seqs = sizes_.size(), docs = seqs + 1;
  std::vector<uint8_t> out(kHeaderBytes + seqs * 12 + docs * 8);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 9);
  const uint64_t version = 1;
  std::memcpy(p + 9, &version, 8);
  p[17] = uint8_t(type_);
  std::memcpy(p + 18, &seqs, 8);
  std::memcpy(p + 26, &docs, 8);
  p += kHeaderBytes;
  if (seqs) std::memcpy(p, sizes_.data(), seqs * 4);
  p += seqs * 4;
  int64_t offset = 0;
  for (uint64_t i = 0; i < seqs; ++i, p += 8) {
    std::memcpy(p, &offset, 8);
    offset += int64_t(sizes_[i]) * token_type_size(type_);
  }
  for (uint64_t d = 0; d < docs; ++d, p += 8) {
    const int64_t v = int64_t(d);
    std::memcpy(p, &v, 8);
  }
  write_file(prefix_ + ".idx", out.data(), out.size());
}

}  // namespace trellis
