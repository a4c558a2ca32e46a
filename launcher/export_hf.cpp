// export_hf: writes a trained model as a Hugging Face GPT-2 or Llama model directory (config.json and
// model.safetensors, f32), which transformers' GPT2LMHeadModel / LlamaForCausalLM.from_pretrained(DIR)
// loads; and tokenizer.json where the training data was prepared with one (prepare_data --tokenizer hf).
//   export_hf SOURCE OUT_DIR
// SOURCE is a checkpoint (a step_X directory, or a checkpoint.dir: its newest valid one) or a weight
// export (model.json + params.f32, from --export-weights or --dump-grads); OUT_DIR is new or empty.
// The mappings are launcher/hf_model.h's. Bad input prints one line "error: ..." and exits 1.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"
#include "launcher/checkpointing.h"
#include "launcher/model_files.h"
#include "launcher/hf_model.h"
#include "launcher/trained_model.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

const char* kUsage = "usage: export_hf SOURCE OUT_DIR  (SOURCE: a checkpoint, a checkpoint.dir or a weight export)";

// The tokenizer.json of the source: the Hugging Face tokenizer its training data was prepared with
// (prepare_data --tokenizer hf), or a Hugging Face source directory's own. False if there is none.
bool write_tokenizer(const StoredModel& src, const std::string& out) {
  std::string json;
  std::error_code ec;
  if (const std::string vocab = training_vocabulary_path(src); !vocab.empty() && std::filesystem::exists(vocab, ec))
    json = embedded_hf_tokenizer(vocab);
  else if (const auto own = std::filesystem::path(src.dir) / "tokenizer.json"; !src.config && std::filesystem::exists(own, ec))
    json = read_text_file(own.string());
  if (json.empty()) return false;
  write_file(out + "/tokenizer.json", json.data(), json.size());
  return true;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  for (const std::string& a : args)
    if (!a.empty() && a[0] == '-') throw UserError("unknown option " + a + " (" + kUsage + ")");
  if (args.size() != 2) throw UserError(std::string("expected SOURCE and OUT_DIR (") + kUsage + ")");
  const std::string& out = args[1];
  check_export_outside_checkpoints("export_hf", out);
  const StoredModel src = open_stored_model(args[0], "exporting");
  if (const std::string why = hf_family_mismatch(src.shape); !why.empty()) throw UserError(src.dir + ": " + why);
  const std::vector<float> values = src.read_f32();
  check_export_dir_free("export_hf", out);  // creates it: only once the source has been read
  write_hf_model(src.shape, values, out);
  const bool tokenizer = write_tokenizer(src, out);
  std::printf("export_hf: wrote %s/model.safetensors%s and config.json (%s, %lld layers, d_model %lld, vocabulary %lld) "
              "from %s\n",
              out.c_str(), tokenizer ? ", tokenizer.json" : "", hf_family_name(src.shape), (long long)src.shape.n_layers, (long long)src.shape.d_model,
              (long long)src.shape.vocab_size, src.dir.c_str());
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  return trellis::run_tool(trellis::run, argc, argv,
                           "out of memory: export_hf holds the model's parameters as f32 in host memory");
}
