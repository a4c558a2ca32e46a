// export_hf: writes a trained model as a Hugging Face GPT-2 model directory (config.json and
// model.safetensors, f32), which transformers' GPT2LMHeadModel.from_pretrained(DIR) loads.
//   export_hf SOURCE OUT_DIR
// SOURCE is a checkpoint (a step_X directory, or a checkpoint.dir: its newest valid one) or a weight
// export (model.json + params.f32, from --export-weights or --dump-grads); OUT_DIR is new or empty.
// The mapping is launcher/hf_gpt2.h's. Bad input prints one line "error: ..." and exits 1.
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "launcher/checkpointing.h"
#include "launcher/model_files.h"
#include "launcher/hf_gpt2.h"
#include "launcher/trained_model.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

const char* kUsage = "usage: export_hf SOURCE OUT_DIR  (SOURCE: a checkpoint, a checkpoint.dir or a weight export)";

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
  if (src.shape.rope)
    throw UserError(src.dir + ": the model has rotary positions (model.position_embedding = rope); a Hugging Face GPT-2 "
                    "has a learned position table");
  if (src.shape.swiglu)
    throw UserError(src.dir + ": the model has SwiGLU MLPs (model.mlp = swiglu); a Hugging Face GPT-2 has GELU ones");
  if (src.shape.kv_heads() != src.shape.n_heads)
    throw UserError(src.dir + ": the model has grouped-query attention (model.n_kv_heads = " +
                    std::to_string(src.shape.kv_heads()) + "); a Hugging Face GPT-2 has as many key-value heads as heads");
  if (!src.shape.bias)
    throw UserError(src.dir + ": the model has no biases in its linear layers (model.bias = false); a Hugging Face GPT-2 "
                    "has them");
  if (src.shape.rmsnorm)
    throw UserError(src.dir + ": the model has RMSNorm (model.norm = rmsnorm); a Hugging Face GPT-2 has LayerNorm");
  if (src.shape.moe.experts > 0)
    throw UserError(src.dir + ": the model has mixture-of-experts blocks (moe.experts = " +
                    std::to_string(src.shape.moe.experts) + "); a Hugging Face GPT-2 has none");
  const std::vector<float> values = src.read_f32();
  check_export_dir_free("export_hf", out);  // creates it: only once the source has been read
  write_hf_gpt2(src.shape, values, out);
  std::printf("export_hf: wrote %s/model.safetensors and config.json (GPT-2, %lld layers, d_model %lld, vocabulary %lld) "
              "from %s\n",
              out.c_str(), (long long)src.shape.n_layers, (long long)src.shape.d_model, (long long)src.shape.vocab_size,
              src.dir.c_str());
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  return trellis::run_tool(trellis::run, argc, argv,
                           "out of memory: export_hf holds the model's parameters as f32 in host memory");
}
