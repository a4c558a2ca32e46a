// prepare_data: tokenizes text files into a dataset the trainer reads, plus its vocabulary.
//   prepare_data --input a.txt [--input b.txt] --output PREFIX --tokenizer byte|char|gpt2|hf
//                [--vocab vocab.json --merges merges.txt] [--tokenizer-model DIR|tokenizer.json]
//                [--format megatron|llmc] [--append-eod [--eod-token TEXT]]
//                [--documents-split file|lines] [--force]
// writes PREFIX.bin + PREFIX.idx (megatron, the default) or PREFIX.tok (llmc), and
// PREFIX.vocab.json. Existing outputs of PREFIX are replaced only with --force (which removes all
// four, so no stale file of the other format is left beside the new data). Bad input prints one
// line "error: ..." and exits 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/hf_tokenizer.h"
#include "data/mapped_file.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

struct Args {
  std::vector<std::string> inputs;
  std::string output, tokenizer, vocab, merges, tokenizer_model, format = "megatron", split = "file", eod_token;
  bool force = false;       // replace PREFIX's existing outputs
  bool append_eod = false;  // end each document with the end-of-document token
};

const char* kUsage =
    "usage: prepare_data --input FILE [--input FILE ...] --output PREFIX --tokenizer byte|char|gpt2|hf\n"
    "                    [--vocab vocab.json --merges merges.txt] [--tokenizer-model DIR|tokenizer.json]\n"
    "                    [--format megatron|llmc] [--append-eod [--eod-token TEXT]]\n"
    "                    [--documents-split file|lines] [--force]\n"
    "--tokenizer hf reads a Hugging Face tokenizer.json (BPE: GPT-2, Llama 2 and 3, Mistral, ...); each\n"
    "document becomes the ids transformers' tokenizer(text) gives, its special tokens included.\n"
    "--append-eod ends every document with the end-of-document token, as Megatron's preprocessing does:\n"
    "<|endoftext|> for gpt2, the eos_token of tokenizer_config.json beside the tokenizer.json for hf,\n"
    "or the token --eod-token names.\n"
    "--force replaces existing outputs of PREFIX (without it, prepare_data refuses to).\n";

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
                                          "--documents-split"};
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
  return a;
}

// Bytes that are not part of a valid UTF-8 sequence (the char tokenizer reads each as U+FFFD).
int64_t invalid_utf8_bytes(const std::string& text) {
  int64_t bad = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    if (next_utf8(text, i) == 0xFFFD && i - at != 3) ++bad;  // a real U+FFFD takes 3 bytes
  }
  return bad;
}

// The documents of one text: the whole file, or each line with its newline.
std::vector<std::string> documents(const std::string& text, const std::string& split) {
  if (split == "file") return text.empty() ? std::vector<std::string>{} : std::vector<std::string>{text};
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    nl = nl == std::string::npos ? text.size() : nl + 1;
    docs.push_back(text.substr(pos, nl - pos));
    pos = nl;
  }
  return docs;
}

// Tokenizes the texts into PREFIX's dataset and vocabulary files.
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

// `eod`: the token ending every document, or -1.
void write_outputs(const Args& a, const std::vector<std::string>& texts, const Tokenizer& tok, int32_t eod) {
  int64_t total = 0, docs = 0;
  std::string data_path;
  std::unique_ptr<IndexedDatasetWriter> writer;
  std::vector<int32_t> stream;  // llmc: everything, written at the end
  if (a.format == "megatron") {
    writer = std::make_unique<IndexedDatasetWriter>(a.output, best_token_type(tok.vocab_size()));
    data_path = a.output + ".bin/.idx";
  } else {
    data_path = a.output + ".tok";
  }
  for (size_t f = 0; f < texts.size(); ++f) {
    int64_t file_tokens = 0;
    for (const std::string& doc : documents(texts[f], a.split)) {
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(doc);
      } catch (const UserError& e) {
        throw UserError(a.inputs[f] + ": " + e.what());
      }
      if (eod >= 0) ids.push_back(eod);
      file_tokens += int64_t(ids.size());
      ++docs;
      if (writer) writer->add_document(ids);
      else stream.insert(stream.end(), ids.begin(), ids.end());
    }
    std::printf("%s: %zu bytes -> %lld tokens\n", a.inputs[f].c_str(), texts[f].size(), (long long)file_tokens);
    total += file_tokens;
  }
  if (writer) writer->finish();
  else write_token_file(a.output + ".tok", stream);
  const std::string vocab_path = a.output + ".vocab.json";
  save_vocabulary(tok, vocab_path);
  const std::string ending = eod >= 0 ? ", each ending in token " + std::to_string(eod) + " (data.eod_token, for data.document_mask and data.eod_mask_loss)" : "";
  std::printf("wrote %s: %lld tokens in %lld documents%s; vocabulary (%s, %lld tokens) in %s\n", data_path.c_str(),
              (long long)total, (long long)docs, ending.c_str(), tok.kind().c_str(), (long long)tok.vocab_size(),
              vocab_path.c_str());
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // The outputs must not replace an input: prepare_data never destroys what it reads.
  const std::vector<std::string> outputs = {a.output + ".bin", a.output + ".idx", a.output + ".tok",
                                           a.output + ".vocab.json"};
  for (const std::string& in : a.inputs)
    for (const std::string& out : outputs) {
      std::error_code ec;
      if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec))
        throw UserError("--output " + a.output + " would overwrite the input " + in + " (choose another prefix)");
    }
  // Where the outputs go, before the inputs are read and tokenized.
  if (a.output.back() == '/') throw UserError("--output " + a.output + ": a prefix, not a directory (e.g. data/corpus)");
  // Existing outputs: never replaced silently (a run may be reading them, or they are someone's
  // data); with --force all of PREFIX's are removed, so a reader cannot pick a stale one, but only
  // once the inputs are read and tokenizable (a bad input must not cost the old dataset).
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
  std::vector<std::string> texts;
  for (const std::string& in : a.inputs) {
    texts.push_back(read_text_file(in));
    if (texts.back().empty()) throw UserError(in + ": is empty: there is nothing to tokenize");
    if (a.tokenizer == "char")
      if (const int64_t bad = invalid_utf8_bytes(texts.back()))
        std::printf("warning: %s: %lld bytes are not UTF-8 and become U+FFFD (is it a text file?)\n", in.c_str(),
                    (long long)bad);
  }

  std::unique_ptr<Tokenizer> tok = a.tokenizer == "byte"   ? make_byte_tokenizer()
                                   : a.tokenizer == "char" ? make_char_tokenizer(texts)
                                   : a.tokenizer == "hf"   ? load_hf_tokenizer(a.tokenizer_model)
                                                           : load_gpt2_tokenizer(a.vocab, a.merges);
  const int32_t eod = eod_id(a, *tok);  // before anything is removed
  for (const std::string& out : existing) {
    std::error_code ec;
    if (!std::filesystem::remove(out, ec) || ec)
      throw UserError("--output " + a.output + ": cannot remove " + out + ": " + (ec ? ec.message() : "?"));
  }
  // From here on a failure removes what this run wrote: no partial dataset is left to be read.
  try {
    write_outputs(a, texts, *tok, eod);
  } catch (...) {
    for (const std::string& out : outputs) {
      std::error_code ec;
      std::filesystem::remove(out, ec);
    }
    throw;
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  return trellis::run_tool(trellis::run, argc, argv,
                           "out of memory (the inputs are held in memory while they are tokenized: split them, or give "
                           "prepare_data more memory)");
}
