// tokenize: what a vocabulary makes of a text, and back (to check a tokenizer before preparing data).
//   tokenize (--vocab PREFIX.vocab.json | --tokenizer-model DIR|tokenizer.json) [--decode] [TEXT]
// Encodes TEXT (else standard input) and prints the ids on one line; with --decode reads
// whitespace-separated ids and prints their text. Bad input prints one line "error: ..." and exits 1.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

const char* kUsage =
    "usage: tokenize (--vocab PREFIX.vocab.json | --tokenizer-model DIR|tokenizer.json) [--decode] [TEXT]\n"
    "Prints the token ids of TEXT (else standard input) on one line; --decode reads ids and prints their text.\n"
    "--vocab is the vocabulary prepare_data wrote beside a dataset; --tokenizer-model a Hugging Face tokenizer.json.\n";

int run(int argc, char** argv) {
  std::string vocab, model, text;
  bool decode = false, have_text = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--decode") {
      decode = true;
    } else if (arg == "--vocab" || arg == "--tokenizer-model") {
      if (i + 1 >= argc) throw UserError(arg + " needs a value (see --help)");
      (arg == "--vocab" ? vocab : model) = argv[++i];
    } else if (arg.rfind("--", 0) == 0) {
      throw UserError("unknown option " + arg + " (see --help)");
    } else if (have_text) {
      throw UserError("give one TEXT (quote it), or none to read standard input");
    } else {
      text = arg;
      have_text = true;
    }
  }
  if (vocab.empty() == model.empty()) throw UserError("give one of --vocab or --tokenizer-model (see --help)");
  const std::unique_ptr<Tokenizer> tok = vocab.empty() ? load_hf_tokenizer(model) : load_vocabulary(vocab);
  if (!have_text) text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  if (!decode) {
    const std::vector<int32_t> ids = tok->encode(text);
    for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
    std::printf("\n");
    return 0;
  }
  std::vector<int32_t> ids;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    char* end = nullptr;
    const long id = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || id < 0 || id > INT32_MAX) throw UserError("--decode: \"" + word + "\" is not a token id");
    ids.push_back(int32_t(id));
  }
  const std::string out = tok->decode(ids);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::run_tool(trellis::run, argc, argv); }
