// generate: samples text from trained weights with a KV cache (models/gpt_inference.h).
//   generate MODEL_DIR --prompt TEXT [--prompt TEXT]... [--tokens 200] [--temperature 0.8]
//            [--top-k 40] [--seed 1] [--device auto|cpu|cuda] [--precision auto|fp32|bf16|fp16] [--vocab FILE]
// MODEL_DIR is a step_X directory or a checkpoint.dir (its newest valid checkpoint is used), a
// weight export or a Hugging Face GPT-2 or Llama directory (launcher/trained_model.h). The
// vocabulary is --vocab (a file prepare_data wrote, or a Hugging Face tokenizer.json or its
// directory), else the training data's, else the directory's tokenizer.json. Without one (synthetic
// data; an export without --vocab) prompts are whitespace-separated token ids and ids are printed. Bad input prints one line "error: ..." and exits 1.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "launcher/train_config.h"
#include "launcher/trained_model.h"
#include "models/gpt_inference.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

struct Args {
  std::string checkpoint, device = "auto", precision = "auto", vocab;
  std::vector<std::string> prompts;
  int64_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 1;
  bool help = false;
};

const char* kUsage =
    "usage: generate MODEL_DIR --prompt TEXT [--prompt TEXT]... [--tokens 200] [--temperature 0.8] "
    "[--top-k 40] [--seed 1] [--device auto|cpu|cuda] [--precision auto|fp32|bf16|fp16] [--vocab FILE]";

int64_t to_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) throw UserError(flag + ": not an integer: \"" + v + "\"");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(f + " needs a value (" + kUsage + ")");
      return argv[++i];
    };
    if (f == "--prompt") a.prompts.push_back(value());
    else if (f == "--tokens") a.tokens = to_int(f, value());
    else if (f == "--top-k") a.top_k = to_int(f, value());
    else if (f == "--seed") {
      const int64_t seed = to_int(f, value());
      if (seed < 0) throw UserError(f + ": " + std::to_string(seed) + " is negative (a seed is 0 or more)");
      a.seed = uint64_t(seed);
    }
    else if (f == "--temperature") {
      const std::string v = value();
      char* end = nullptr;
      a.temperature = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') throw UserError(f + ": not a number: \"" + v + "\"");
      if (!std::isfinite(a.temperature) || a.temperature < 0)
        throw UserError(f + " " + v + ": allowed is a finite number >= 0 (0 = always the likeliest token)");
    } else if (f == "--device") a.device = value();
    else if (f == "--precision") a.precision = value();
    else if (f == "--vocab") a.vocab = value();
    else if (f == "-h" || f == "--help") a.help = true;
    else if (!f.empty() && f[0] == '-') throw UserError("unknown option " + f + " (" + kUsage + ")");
    else if (a.checkpoint.empty()) a.checkpoint = f;
    else throw UserError("more than one checkpoint given: " + a.checkpoint + ", " + f);
  }
  if (a.help) return a;
  if (a.checkpoint.empty()) throw UserError(std::string("no model directory given (") + kUsage + ")");
  if (a.prompts.empty()) throw UserError(std::string("no --prompt given (") + kUsage + ")");
  if (a.tokens < 1) throw UserError("--tokens must be >= 1");
  if (a.top_k < 0) throw UserError("--top-k must be >= 0 (0 = the whole vocabulary)");
  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda")
    throw UserError("--device must be auto, cpu or cuda, got \"" + a.device + "\"");
  DType unused = DType::f32;
  if (a.precision != "auto" && !parse_dtype(a.precision, unused))
    throw UserError("--precision must be auto, fp32, bf16 or fp16, got \"" + a.precision + "\"");
  return a;
}

// A Hugging Face tokenizer (a directory holding tokenizer.json, or the file) rather than a
// vocabulary file prepare_data wrote.
bool is_hf_tokenizer(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) || std::filesystem::path(path).filename() == "tokenizer.json";
}

// The vocabulary: --vocab, else the data file's <stem>.vocab.json, else the tokenizer.json of a
// Hugging Face directory; null = token ids.
std::unique_ptr<Tokenizer> vocabulary(const Args& a, const StoredModel& stored) {
  if (!a.vocab.empty()) return is_hf_tokenizer(a.vocab) ? load_hf_tokenizer(a.vocab) : load_vocabulary(a.vocab);
  if (!stored.config) {  // a weight export or a Hugging Face directory
    const std::string file = (std::filesystem::path(stored.dir) / "tokenizer.json").string();
    if (!std::filesystem::exists(file)) return nullptr;
    std::fprintf(stderr, "note: the vocabulary is %s\n", file.c_str());
    return load_hf_tokenizer(file);
  }
  const std::string file = training_vocabulary_path(stored);
  if (file.empty()) return nullptr;  // synthetic data
  if (!std::filesystem::exists(file)) {
    std::fprintf(stderr,
                 "note: no vocabulary file %s (data.path is relative to where training ran; --vocab FILE names "
                 "it); prompts and output are token ids\n",
                 file.c_str());
    return nullptr;
  }
  return load_vocabulary(file);
}

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  for (std::string s; in >> s;) {
    const int64_t id = to_int("token id", s);
    if (id < 0 || id >= vocab)
      throw UserError("token id " + s + " outside the vocabulary [0, " + std::to_string(vocab) + ")");
    ids.push_back(int32_t(id));
  }
  return ids;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.help) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const StoredModel stored = open_stored_model(a.checkpoint, "sampling from");

  const int gpus = cuda_device_count();
  if (a.device == "cuda" && gpus == 0)
    throw UserError(std::string("--device cuda but no CUDA device is available") +
                    (built_with_cuda() ? "" : " (this build has no CUDA backend)"));
  const bool gpu = a.device == "cuda" || (a.device == "auto" && gpus > 0);
  const std::string precision = a.precision != "auto" ? a.precision : (gpu ? "bf16" : "fp32");
  GPTConfig m = stored.shape;
  parse_dtype(precision, m.dtype);

  std::unique_ptr<Tokenizer> tok = vocabulary(a, stored);
  if (tok && tok->vocab_size() > m.vocab_size)
    throw UserError("the vocabulary has " + std::to_string(tok->vocab_size()) + " tokens, the model " +
                    std::to_string(m.vocab_size));
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const std::string& p : a.prompts) {
    try {
      prompts.push_back(tok ? tok->encode(p) : parse_ids(p, m.vocab_size));
    } catch (const UserError& e) {
      throw UserError("--prompt \"" + p + "\": " + e.what() +
                      (tok ? "" : " (without a vocabulary a prompt is token ids: see --vocab)"));
    }
    if (prompts.back().empty()) throw UserError("--prompt \"" + p + "\" has no tokens");
    longest = std::max(longest, prompts.back().size());
  }
  if (a.tokens > m.seq_len)
    throw UserError("--tokens " + std::to_string(a.tokens) + " is more than the model's model.seq_len = " +
                    std::to_string(m.seq_len));
  const int64_t max_len = int64_t(longest) + a.tokens - 1;
  if (max_len > m.seq_len)
    throw UserError("the longest prompt (" + std::to_string(longest) + " tokens) and --tokens " +
                    std::to_string(a.tokens) + " need " + std::to_string(max_len) +
                    " positions; the model has model.seq_len = " + std::to_string(m.seq_len));
  RuntimeOptions ro;
  ro.device = gpu ? Device::CUDA(0) : Device::CPU();
  Runtime rt(ro);
  GPTInference model(rt, m, int64_t(prompts.size()), max_len);
  // The parameters, converted when the checkpoint holds another dtype.
  Tensor values = model.params().flat_values();
  TRELLIS_CHECK(values.numel() == stored.numel, "generate: the model stores " + std::to_string(values.numel()) +
                                                    " parameters, the size check assumed " + std::to_string(stored.numel));
  std::vector<char> host(size_t(stored.numel) * dtype_size(stored.stored));
  stored.read(host.data());
  Tensor src(host.data(), stored.stored, Device::CPU(), values.shape);
  if (stored.stored == m.dtype) {
    copy(rt, values, src);
  } else {
    Buffer staging(rt.allocator(), host.size(), "checkpoint params");
    Tensor dev = staging.tensor(stored.stored, values.shape);
    copy(rt, dev, src);
    cast(rt, values, dev);
  }
  rt.synchronize();

  SamplingOptions so;
  so.temperature = float(a.temperature);
  so.top_k = a.top_k;
  so.seed = a.seed;
  so.vocab = tok ? tok->vocab_size() : 0;  // ids the vocabulary cannot decode are never drawn
  const auto out = generate(model, prompts, a.tokens, so);
  for (size_t b = 0; b < out.size(); ++b) {
    std::printf("=== sample %zu ===\n", b);
    if (tok) std::printf("%s%s\n", a.prompts[b].c_str(), tok->decode(out[b]).c_str());
    else std::printf("prompt: %s\ngenerated: %s\n", join_ids(prompts[b]).c_str(), join_ids(out[b]).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::run_tool(trellis::run, argc, argv); }
