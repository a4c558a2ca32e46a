// prepare_data: tokenizes text files into a dataset the trainer reads, plus its vocabulary.
//   prepare_data --input a.txt [--input b.txt] --output PREFIX --tokenizer byte|char|gpt2|hf
//                [--vocab vocab.json --merges merges.txt] [--tokenizer-model DIR|tokenizer.json]
//                [--format megatron|llmc] [--append-eod [--eod-token TEXT]]
//                [--documents-split file|lines] [--json-keys KEY | --json-keys PROMPT,RESPONSE] [--force]
//                [--block-bytes N]
// reads the inputs a block at a time, encodes each block's documents on every core (OpenMP) and
// writes them in order: PREFIX.bin + PREFIX.idx (megatron, the default) or PREFIX.tok (llmc), and
// PREFIX.vocab.json; with --json-keys PROMPT,RESPONSE also PREFIX.lossmask (data/loss_mask.h: the
// loss counts the responses' tokens only). Existing outputs of PREFIX are replaced only with
// --force (which removes them all, so no stale file of the other format or an old loss mask is left
// beside the new data). Bad input prints one line "error: ..." and exits 1.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "data/indexed_dataset.h"
#include "data/hf_tokenizer.h"
#include "data/loss_mask.h"
#include "data/mapped_file.h"
#include "data/token_file.h"
#include "data/token_view.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

struct Args {
  std::vector<std::string> inputs;
  std::vector<std::string> json_keys;  // JSON Lines inputs: the text's key, or the prompt's and the response's
  std::string output, tokenizer, vocab, merges, tokenizer_model, format = "megatron", split = "file", eod_token;
  bool force = false;       // replace PREFIX's existing outputs
  bool append_eod = false;  // end each document with the end-of-document token
  size_t block_bytes = size_t(64) << 20;  // input read and encoded at a time
};

const char* kUsage =
    "usage: prepare_data --input FILE [--input FILE ...] --output PREFIX --tokenizer byte|char|gpt2|hf\n"
    "                    [--vocab vocab.json --merges merges.txt] [--tokenizer-model DIR|tokenizer.json]\n"
    "                    [--format megatron|llmc] [--append-eod [--eod-token TEXT]]\n"
    "                    [--documents-split file|lines] [--json-keys KEY | --json-keys PROMPT,RESPONSE]\n"
    "                    [--force] [--block-bytes N]\n"
    "--tokenizer hf reads a Hugging Face tokenizer.json (BPE: GPT-2, Llama 2 and 3, Mistral, ...); each\n"
    "document becomes the ids transformers' tokenizer(text) gives, its special tokens included.\n"
    "--append-eod ends every document with the end-of-document token, as Megatron's preprocessing does:\n"
    "<|endoftext|> for gpt2, the eos_token of tokenizer_config.json beside the tokenizer.json for hf,\n"
    "or the token --eod-token names.\n"
    "--json-keys reads JSON Lines: each line an object, one document. With one key, its string is the\n"
    "document (Megatron's --json-keys text). With two, PROMPT's string then RESPONSE's, encoded apart (the\n"
    "tokenizer's special tokens at the document's ends), for supervised fine-tuning: PREFIX.lossmask then\n"
    "marks the response's tokens (and the end-of-document token) as the only targets training learns.\n"
    "--force replaces existing outputs of PREFIX (without it, prepare_data refuses to).\n"
    "The inputs are read a block of whole lines at a time (--block-bytes, default 64 MiB) and each\n"
    "block's documents encoded on every core (OMP_NUM_THREADS limits them); the output depends on neither.\n";

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--force" || flag == "--append-eod") {
      (flag == "--force" ? a.force : a.append_eod) = true;
      continue;
    }
    static const char* const kValued[] = {"--input", "--output", "--tokenizer", "--vocab", "--merges", "--tokenizer-model", "--eod-token", "--format",
                                          "--documents-split", "--json-keys", "--block-bytes"};
    if (std::find(std::begin(kValued), std::end(kValued), flag) == std::end(kValued))
      throw UserError("unknown option " + flag + " (see --help)");
    if (i + 1 >= argc) throw UserError(flag + " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--input") a.inputs.push_back(value);
    else if (flag == "--output") a.output = value;
    else if (flag == "--tokenizer") a.tokenizer = value;
    else if (flag == "--vocab") a.vocab = value;
    else if (flag == "--merges") a.merges = value;
    else if (flag == "--tokenizer-model") a.tokenizer_model = value;
    else if (flag == "--eod-token") a.eod_token = value;
    else if (flag == "--format") a.format = value;
    else if (flag == "--documents-split") a.split = value;
    else if (flag == "--block-bytes") {
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || n < 1)
        throw UserError("--block-bytes must be a positive number of bytes, got \"" + value + "\"");
      a.block_bytes = size_t(n);
    }
    else if (flag == "--json-keys") {
      a.json_keys.clear();
      for (size_t at = 0; at <= value.size();) {
        const size_t comma = std::min(value.find(',', at), value.size());
        a.json_keys.push_back(value.substr(at, comma - at));
        at = comma + 1;
      }
    }
    else throw UserError("unknown option " + flag + " (see --help)");
  }
  if (a.inputs.empty()) throw UserError("no --input given (see --help)");
  if (a.output.empty()) throw UserError("no --output PREFIX given (see --help)");
  if (a.tokenizer != "byte" && a.tokenizer != "char" && a.tokenizer != "gpt2" && a.tokenizer != "hf")
    throw UserError("--tokenizer must be byte, char, gpt2 or hf, got \"" + a.tokenizer + "\"");
  if (a.tokenizer == "gpt2" && (a.vocab.empty() || a.merges.empty()))
    throw UserError("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
  if (a.tokenizer != "gpt2" && (!a.vocab.empty() || !a.merges.empty()))
    throw UserError("--vocab and --merges are for --tokenizer gpt2 only");
  if (a.tokenizer == "hf" && a.tokenizer_model.empty())
    throw UserError("--tokenizer hf needs --tokenizer-model (a directory with tokenizer.json, or the file)");
  if (a.tokenizer != "hf" && !a.tokenizer_model.empty()) throw UserError("--tokenizer-model is for --tokenizer hf only");
  if (!a.eod_token.empty() && !a.append_eod) throw UserError("--eod-token names the token --append-eod appends: give both");
  if (a.append_eod && a.tokenizer != "gpt2" && a.tokenizer != "hf")
    throw UserError("--append-eod needs a vocabulary with an end-of-document token (--tokenizer gpt2 or hf), not " + a.tokenizer);
  if (a.format != "megatron" && a.format != "llmc") throw UserError("--format must be megatron or llmc, got \"" + a.format + "\"");
  if (a.split != "file" && a.split != "lines")
    throw UserError("--documents-split must be file or lines, got \"" + a.split + "\"");
  if (!a.json_keys.empty()) {
    std::string keys;
    for (const std::string& key : a.json_keys) keys += (keys.empty() ? "" : ",") + key;
    const bool empty_key = std::find(a.json_keys.begin(), a.json_keys.end(), "") != a.json_keys.end();
    if (a.json_keys.size() > 2 || empty_key || (a.json_keys.size() == 2 && a.json_keys[0] == a.json_keys[1]))
      throw UserError("--json-keys takes one key (the text's) or two different ones (PROMPT,RESPONSE), got \"" + keys + "\"");
    if (a.split == "lines") throw UserError("--documents-split is for text inputs: with --json-keys each line is a document");
  }
  return a;
}

// Bytes that are not part of a valid UTF-8 sequence (the char tokenizer reads each as U+FFFD).
int64_t invalid_utf8_bytes(std::string_view text) {
  int64_t bad = 0;
  const std::string s(text);
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    if (next_utf8(s, i) == 0xFFFD && i - at != 3) ++bad;  // a real U+FFFD takes 3 bytes
  }
  return bad;
}

// One document as read: its bytes in the input (the whole file, a line with its newline, or a
// JSON line) and where it is, for errors ("file", or "file:line").
struct RawDocument {
  std::string_view bytes;
  int64_t line = 0;  // 0: the whole file
};

// An input's documents, a batch at a time, read in blocks: a corpus larger than the memory is
// never held whole (a whole-file document is, as it must be to be encoded).
class InputReader {
 public:
  InputReader(const std::string& path, const Args& a) : path_(path), a_(a) {
    const int fd = open_regular_file(path);
    file_ = fdopen(fd, "rb");
    if (!file_) {
      close(fd);
      throw UserError(path + ": cannot open: " + std::strerror(errno));
    }
  }
  ~InputReader() { std::fclose(file_); }
  InputReader(const InputReader&) = delete;
  InputReader& operator=(const InputReader&) = delete;

  // The next documents, whole lines of about `budget` bytes (at least one line); false at the end.
  // They point into this reader's buffer, valid until the next call.
  bool next(std::vector<RawDocument>& batch, size_t budget) {
    batch.clear();
    const bool whole_file = a_.json_keys.empty() && a_.split == "file";
    buffer_.swap(carry_);  // the part of a line the last block ended in
    carry_.clear();
    bool newline = false;  // the carry holds none: only the bytes read after it are searched
    while (!eof_ && (whole_file || buffer_.size() < budget || !newline)) {
      const size_t at = buffer_.size(), want = std::max<size_t>(budget, 1);
      buffer_.resize(at + want);
      const size_t got = std::fread(buffer_.data() + at, 1, want, file_);
      buffer_.resize(at + got);
      newline = newline || std::memchr(buffer_.data() + at, '\n', got) != nullptr;
      if (got < want) {
        if (std::ferror(file_)) throw UserError(path_ + ": read failed: " + std::strerror(errno));
        eof_ = true;
      }
    }
    if (!eof_) {  // the last line continues in the next block
      const size_t cut = buffer_.rfind('\n') + 1;
      carry_.assign(buffer_, cut, std::string::npos);
      buffer_.resize(cut);
    }
    std::string_view text(buffer_);
    // A UTF-8 byte order mark before the first JSON line is no part of it.
    if (line_ == 0 && !a_.json_keys.empty() && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    if (whole_file) {
      if (!text.empty()) batch.push_back({text, 0});
      return !batch.empty();
    }
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      nl = nl == std::string_view::npos ? text.size() : nl + 1;
      const std::string_view line = text.substr(pos, nl - pos);
      pos = nl;
      ++line_;
      if (!a_.json_keys.empty() && line.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;  // blank
      batch.push_back({line, line_});
    }
    return !batch.empty() || !eof_ || !carry_.empty();
  }
  std::string where(const RawDocument& d) const { return d.line ? path_ + ":" + std::to_string(d.line) : path_; }

 private:
  std::string path_;
  const Args& a_;
  std::FILE* file_ = nullptr;
  std::string buffer_, carry_;
  bool eof_ = false;
  int64_t line_ = 0;
};

// A document's texts: the whole of it, or with --json-keys the strings its JSON line names (with
// PROMPT,RESPONSE the prompt's and the response's, encoded apart).
std::vector<std::string> document_texts(const RawDocument& d, const Args& a, const std::string& where) {
  if (a.json_keys.empty()) return {std::string(d.bytes)};
  const JsonValue v = parse_json(d.bytes, where);
  if (v.kind != JsonValue::Kind::kObject) throw UserError(where + ": not a JSON object (--json-keys reads one a line)");
  std::vector<std::string> texts;
  for (const std::string& key : a.json_keys) {
    const JsonValue* m = v.find(key);
    if (m == nullptr || m->kind != JsonValue::Kind::kString)
      throw UserError(where + ": " + (m ? "the member \"" + key + "\" is not a string" : "no member \"" + key + "\"") +
                      " (--json-keys names the strings to read)");
    texts.push_back(m->text);
  }
  return texts;
}

// What one document becomes; `error` set instead where it cannot (the first, in order, is reported).
struct EncodedDocument {
  std::vector<int32_t> ids;
  size_t response_start = 0;  // with a prompt and a response: where the response's tokens begin
  bool empty_response = false;
  std::string error;
};

// Runs `each(k)` for k in [0, n) on every core, in any order; then the first failure (lowest k)
// is thrown as it was: a UserError's line, out of memory, or another exception's message.
void parallel_for(size_t n, const std::function<void(size_t)>& each) {
  enum Failure : uint8_t { kNone, kUser, kMemory, kOther };
  std::vector<Failure> failed(n, kNone);
  std::vector<std::string> message(n);
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t k = 0; k < int64_t(n); ++k) {
    try {  // nothing may leave an OpenMP region by an exception
      each(size_t(k));
    } catch (const UserError& e) {
      failed[size_t(k)] = kUser;
      message[size_t(k)] = e.what();
    } catch (const std::bad_alloc&) {
      failed[size_t(k)] = kMemory;
    } catch (const std::exception& e) {
      failed[size_t(k)] = kOther;
      message[size_t(k)] = e.what();
    } catch (...) {
      failed[size_t(k)] = kOther;
      message[size_t(k)] = "an exception of unknown type";
    }
  }
  for (size_t k = 0; k < n; ++k) {
    if (failed[k] == kUser) throw UserError(message[k]);
    if (failed[k] == kMemory) throw std::bad_alloc();
    if (failed[k] == kOther) throw std::runtime_error(message[k]);
  }
}

// The char tokenizer's vocabulary: every code point of every document's texts (a first pass).
std::unique_ptr<Tokenizer> char_vocabulary(const Args& a) {
  std::vector<uint8_t> seen(0x200000, 0);  // next_utf8 decodes up to 21 bits (no range check: as the char tokenizer reads)
  std::vector<RawDocument> batch;
  for (const std::string& in : a.inputs) {
    InputReader reader(in, a);
    int64_t bad = 0;
    while (reader.next(batch, a.block_bytes)) {
      for (const RawDocument& d : batch) bad += invalid_utf8_bytes(d.bytes);
      std::vector<std::vector<std::string>> texts(batch.size());
      parallel_for(batch.size(), [&](size_t k) { texts[k] = document_texts(batch[k], a, reader.where(batch[k])); });
      for (const auto& doc : texts)
        for (const std::string& t : doc)
          for (size_t i = 0; i < t.size();) seen[next_utf8(t, i)] = 1;
    }
    if (bad > 0)
      std::printf("warning: %s: %lld bytes are not UTF-8 and become U+FFFD (is it a text file?)\n", in.c_str(),
                  (long long)bad);
  }
  std::string chars;
  for (uint32_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) append_utf8(chars, cp);
  return make_char_tokenizer({chars});
}

// The end-of-document token's id for --append-eod, else -1.
int32_t eod_id(const Args& a, const Tokenizer& tok) {
  if (!a.append_eod) return -1;
  std::string name = a.eod_token;
  if (name.empty()) name = a.tokenizer == "gpt2" ? "<|endoftext|>" : hf_eos_token(a.tokenizer_model);
  if (name.empty())
    throw UserError("--append-eod: " + a.tokenizer_model + " has no tokenizer_config.json with an eos_token; name the "
                    "token with --eod-token (e.g. \"</s>\")");
  const int32_t id = tok.token_id(name);
  if (id < 0) throw UserError("--append-eod: \"" + name + "\" is not a token of the vocabulary (--eod-token names another)");
  return id;
}

// Tokenizes the inputs into PREFIX's dataset and vocabulary files under `prefix` (PREFIX.partial,
// moved into place once whole), a batch of documents at a time, each batch's documents on every
// core and written in order. `eod`: the token ending every document, or -1.
void write_outputs(const Args& a, const std::string& prefix, const Tokenizer& tok, int32_t eod) {
  int64_t total = 0, docs = 0;
  const bool masked = a.json_keys.size() == 2;
  std::string data_path;
  std::unique_ptr<IndexedDatasetWriter> writer;
  std::unique_ptr<TokenFileWriter> token_file;
  if (a.format == "megatron") {
    writer = std::make_unique<IndexedDatasetWriter>(prefix, best_token_type(tok.vocab_size()));
    data_path = a.output + ".bin/.idx";
  } else {
    token_file = std::make_unique<TokenFileWriter>(prefix + ".tok", tok.vocab_size() > 65536);
    data_path = a.output + ".tok";
  }
  // With a prompt and a response: 1 for the response's tokens and the EOD.
  std::unique_ptr<LossMaskWriter> mask = masked ? std::make_unique<LossMaskWriter>(prefix + ".lossmask") : nullptr;
  // Documents with the end-of-document token inside them (data.document_mask and data.eod_mask_loss
  // would cut them there), and responses that are empty; the first of each, for the warnings.
  // Documents the tokenizer already ends with it (--append-eod then doubles it), likewise.
  int64_t eod_inside = 0, eod_ending = 0, empty_responses = 0;
  std::string first_eod_inside, first_eod_ending, first_empty_response;
  std::vector<RawDocument> batch;
  std::vector<EncodedDocument> encoded;
  for (const std::string& in : a.inputs) {
    InputReader reader(in, a);
    int64_t file_tokens = 0, file_docs = 0;
    while (reader.next(batch, a.block_bytes)) {
      encoded.assign(batch.size(), EncodedDocument());
      parallel_for(batch.size(), [&](size_t k) {
        const std::string where = reader.where(batch[k]);
        const std::vector<std::string> texts = document_texts(batch[k], a, where);
        EncodedDocument& e = encoded[k];
        std::vector<size_t> starts;
        try {
          e.ids = tok.encode_parts(texts, starts);
        } catch (const UserError& err) {
          throw UserError(where + ": " + err.what());
        }
        if (masked) {
          e.response_start = starts[1];
          e.empty_response = texts[1].empty();
        }
      });
      for (size_t k = 0; k < batch.size(); ++k) {
        EncodedDocument& e = encoded[k];
        if (eod >= 0 && !e.ids.empty() && std::find(e.ids.begin(), e.ids.end() - 1, eod) != e.ids.end() - 1 &&
            eod_inside++ == 0)
          first_eod_inside = reader.where(batch[k]);
        if (eod >= 0 && !e.ids.empty() && e.ids.back() == eod && eod_ending++ == 0) first_eod_ending = reader.where(batch[k]);
        if (e.empty_response && empty_responses++ == 0) first_empty_response = reader.where(batch[k]);
        if (eod >= 0) e.ids.push_back(eod);
        if (mask) mask->add(e.response_start, e.ids.size() - e.response_start);
        file_tokens += int64_t(e.ids.size());
        if (writer) writer->add_document(e.ids);
        else token_file->add(e.ids);
        e.ids = std::vector<int32_t>();
      }
      file_docs += int64_t(batch.size());
    }
    if (file_docs == 0) throw UserError(in + ": has no JSON line: there is nothing to tokenize");
    std::printf("%s: %lld documents -> %lld tokens\n", in.c_str(), (long long)file_docs, (long long)file_tokens);
    total += file_tokens;
    docs += file_docs;
  }
  if (masked && empty_responses == docs)
    throw UserError("--json-keys " + a.json_keys[0] + "," + a.json_keys[1] + ": every \"" + a.json_keys[1] +
                    "\" is empty: no response to learn");
  if (empty_responses > 0)
    std::printf("warning: %lld of the %lld \"%s\" strings are empty (the first at %s): those examples teach %s\n",
                (long long)empty_responses, (long long)docs, a.json_keys[1].c_str(), first_empty_response.c_str(),
                eod >= 0 ? "only to end right after the prompt" : "nothing");
  if (eod_ending > 0)
    std::printf("warning: %lld documents already end with the end-of-document token %d (the first at %s; the "
                "tokenizer adds it): --append-eod ends them with two\n",
                (long long)eod_ending, eod, first_eod_ending.c_str());
  if (eod_inside > 0)
    std::printf("warning: %lld documents hold the end-of-document token %d inside them (the first at %s): "
                "data.document_mask and data.eod_mask_loss would cut them there (name another token with --eod-token, "
                "e.g. the tokenizer's end of text rather than an end of turn)\n",
                (long long)eod_inside, eod, first_eod_inside.c_str());
  if (writer) writer->finish();
  else token_file->finish();
  save_vocabulary(tok, prefix + ".vocab.json", masked);
  const std::string vocab_path = a.output + ".vocab.json";
  if (mask) {
    if (mask->kept() == 0)
      throw UserError("--json-keys " + a.json_keys[0] + "," + a.json_keys[1] + ": the \"" + a.json_keys[1] +
                      "\" strings encode to no token: no target to learn");
    // The mask names the tokens it was made for by their checksum, as training reads them.
    const uint64_t sum = writer ? scan_tokens(IndexedDataset(prefix).tokens(), 0).checksum
                                : scan_tokens(TokenFile(prefix + ".tok").tokens(), 0).checksum;
    mask->finish(sum);
    std::printf("wrote %s.lossmask: %lld of the %lld tokens are targets to learn (the %s's%s)\n", a.output.c_str(),
                (long long)mask->kept(), (long long)total, a.json_keys[1].c_str(),
                eod >= 0 ? " and the end-of-document tokens" : "");
  }
  const std::string ending = eod >= 0 ? ", each ending in token " + std::to_string(eod) + " (data.eod_token, for data.document_mask and data.eod_mask_loss)" : "";
  std::printf("wrote %s: %lld tokens in %lld documents%s; vocabulary (%s, %lld tokens) in %s\n", data_path.c_str(),
              (long long)total, (long long)docs, ending.c_str(), tok.kind().c_str(), (long long)tok.vocab_size(),
              vocab_path.c_str());
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // The outputs (and the files they are written as first) must not replace an input: prepare_data
  // never destroys what it reads.
  const std::vector<std::string> kExts = {".bin", ".idx", ".tok", ".vocab.json", ".lossmask"};
  std::vector<std::string> outputs, written;
  for (const std::string& ext : kExts) {
    outputs.push_back(a.output + ext);
    written.push_back(a.output + ".partial" + ext);
  }
  written.insert(written.end(), outputs.begin(), outputs.end());
  for (const std::string& in : a.inputs)
    for (const std::string& out : written) {
      std::error_code ec;
      if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec))
        throw UserError("--output " + a.output + " would overwrite the input " + in + " (choose another prefix)");
    }
  // Where the outputs go, before the inputs are read and tokenized.
  if (a.output.back() == '/') throw UserError("--output " + a.output + ": a prefix, not a directory (e.g. data/corpus)");
  // Existing outputs: never replaced silently (a run may be reading them, or they are someone's
  // data); with --force all of PREFIX's are replaced or removed, so a reader cannot pick a stale one,
  // but only once the new dataset is whole under PREFIX.partial (a bad input must not cost the old one).
  std::vector<std::string> existing;
  for (const std::string& out : outputs) {
    std::error_code ec;
    if (!std::filesystem::exists(out, ec)) continue;
    if (!a.force)
      throw UserError("--output " + a.output + ": " + out +
                      " already exists (give another prefix, or --force to replace this prefix's outputs)");
    existing.push_back(out);
  }
  if (const auto parent = std::filesystem::path(a.output).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw UserError("--output " + a.output + ": cannot create " + parent.string() + ": " + ec.message());
  }
  // Every input is there and has bytes, before anything is tokenized.
  for (const std::string& in : a.inputs) {
    size_t size = 0;
    close(open_regular_file(in, &size));
    if (size == 0) throw UserError(in + ": is empty: there is nothing to tokenize");
  }
  std::unique_ptr<Tokenizer> tok = a.tokenizer == "byte"   ? make_byte_tokenizer()
                                   : a.tokenizer == "char" ? char_vocabulary(a)
                                   : a.tokenizer == "hf"   ? load_hf_tokenizer(a.tokenizer_model)
                                                           : load_gpt2_tokenizer(a.vocab, a.merges);
  const int32_t eod = eod_id(a, *tok);
  // Written under PREFIX.partial; a failure removes it, and leaves PREFIX's old outputs as they were.
  const std::string partial = a.output + ".partial";
  // What this run writes, moved into place in this order: the index (or the token file) last, so
  // that a reader finds a dataset only once it is whole, its loss mask and vocabulary beside it.
  std::vector<std::string> exts;
  if (a.json_keys.size() == 2) exts.push_back(".lossmask");
  exts.push_back(".vocab.json");
  for (const char* ext : a.format == "megatron" ? std::vector<const char*>{".bin", ".idx"} : std::vector<const char*>{".tok"})
    exts.push_back(ext);
  const auto remove_partials = [&] {
    for (const std::string& ext : kExts) {
      std::error_code ec;
      std::filesystem::remove(partial + ext, ec);
    }
  };
  // What an interrupted run left (or another run is writing): removed only with --force.
  for (const std::string& ext : kExts) {
    std::error_code ec;
    if (std::filesystem::exists(partial + ext, ec) && !a.force)
      throw UserError("--output " + a.output + ": " + partial + ext + " exists (left by an interrupted prepare_data, or "
                      "one writing this prefix now): --force removes it");
  }
  remove_partials();
  try {
    write_outputs(a, partial, *tok, eod);
  } catch (...) {
    remove_partials();
    throw;
  }
  // Each new file replaces the old one of its name at once (rename); only then are the old outputs
  // this run does not write (another format's, an old loss mask) removed.
  for (const std::string& ext : exts) {
    std::error_code ec;
    std::filesystem::rename(partial + ext, a.output + ext, ec);
    if (ec) throw UserError("--output " + a.output + ": cannot move " + partial + ext + " into place: " + ec.message());
  }
  for (const std::string& out : existing) {
    if (std::find_if(exts.begin(), exts.end(), [&](const std::string& e) { return a.output + e == out; }) != exts.end())
      continue;
    std::error_code ec;
    if (!std::filesystem::remove(out, ec) || ec)
      throw UserError("--output " + a.output + ": cannot remove the old " + out + ": " + (ec ? ec.message() : "?"));
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  return trellis::run_tool(trellis::run, argc, argv,
                           "out of memory (a document is held whole while it is encoded, and with --documents-split "
                           "file a text input is one: split it, use --documents-split lines, or give prepare_data more "
                           "memory)");
}
