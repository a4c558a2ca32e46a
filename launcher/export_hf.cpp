// export_hf: writes a trained model as a Hugging Face GPT-2 model directory (config.json and
// model.safetensors, f32), which transformers' GPT2LMHeadModel.from_pretrained(DIR) loads.
//   export_hf SOURCE OUT_DIR
// SOURCE is a checkpoint (a step_X directory, or a checkpoint.dir: its newest valid one) or a weight
// export (model.json + params.f32, from --export-weights or --dump-grads); OUT_DIR is new or empty.
// The mapping: Trellis's linear weights are (out, in), GPT-2's Conv1D ones (in, out), so they are
// transposed; the token embedding loses its vocabulary padding (the head is tied to it, as in
// GPT-2); GELU is the tanh form ("gelu_new"), layer norms use eps 1e-5. Bad input prints one line
// "error: ..." and exits 1.
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "launcher/checkpointing.h"
#include "launcher/model_files.h"
#include "launcher/trained_model.h"
#include "models/gpt.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

const char* kUsage = "usage: export_hf SOURCE OUT_DIR  (SOURCE: a checkpoint, a checkpoint.dir or a weight export)";

// One tensor of the Hugging Face model: where its values lie in the whole model's flat layout.
struct HfTensor {
  std::string name;
  int64_t rows = 0, cols = 0;  // as Hugging Face stores it (cols = 0: a vector of `rows`)
  int64_t offset = 0;          // in the flat layout
  bool transpose = false;      // stored (cols, rows) there
};

// Trellis name -> GPT-2 name: "h.3.attn.qkv.w" -> "transformer.h.3.attn.c_attn.weight".
std::string hf_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return "transformer." + name + ".weight";
  const size_t dot = name.rfind('.');
  std::string stem = name.substr(0, dot);
  const std::string kind = name.substr(dot + 1) == "w" ? "weight" : "bias";
  const std::pair<const char*, const char*> renames[] = {{"ln1", "ln_1"}, {"ln2", "ln_2"},
                                                         {"attn.qkv", "attn.c_attn"}, {"attn.proj", "attn.c_proj"},
                                                         {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"},
                                                         {"lnf", "ln_f"}};
  for (const auto& [from, to] : renames) {
    const std::string f = from;
    if (stem.size() >= f.size() && stem.compare(stem.size() - f.size(), f.size(), f) == 0) {
      stem.replace(stem.size() - f.size(), f.size(), to);
      break;
    }
  }
  return "transformer." + stem + "." + kind;
}

std::vector<HfTensor> hf_tensors(const GPTConfig& m) {
  std::vector<HfTensor> out;
  int64_t offset = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(m)) {
    HfTensor t{hf_name(s.name), s.shape[0], s.shape.rank == 2 ? s.shape[1] : 0, offset, false};
    if (s.name == "wte") t.rows = m.vocab_size;  // without the padding rows
    else if (s.shape.rank == 2 && s.name != "wpe") {  // (out, in) -> Conv1D's (in, out)
      t.transpose = true;
      std::swap(t.rows, t.cols);
    }
    out.push_back(t);
    offset += s.shape.numel();
  }
  return out;
}

std::string config_json(const GPTConfig& m) {
  const std::string eos = std::to_string(m.vocab_size - 1);
  return "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"vocab_size\":" +
         std::to_string(m.vocab_size) + ",\"n_positions\":" + std::to_string(m.seq_len) + ",\"n_embd\":" +
         std::to_string(m.d_model) + ",\"n_layer\":" + std::to_string(m.n_layers) + ",\"n_head\":" +
         std::to_string(m.n_heads) + ",\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05," +
         "\"resid_pdrop\":0.0,\"embd_pdrop\":0.0,\"attn_pdrop\":0.0,\"initializer_range\":0.02," +
         "\"tie_word_embeddings\":true,\"torch_dtype\":\"float32\",\"bos_token_id\":" + eos +
         ",\"eos_token_id\":" + eos + "}\n";
}

// safetensors: an 8-byte little-endian header length, the JSON header (each tensor's dtype, shape
// and byte range in the data that follows), padded with spaces to 8 bytes, then the data.
std::string safetensors_header(const std::vector<HfTensor>& tensors) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t at = 0;
  for (const HfTensor& t : tensors) {
    const uint64_t bytes = uint64_t(t.rows) * uint64_t(t.cols ? t.cols : 1) * 4;
    std::ostringstream entry;
    entry << ',' << json_quote(t.name) << ":{\"dtype\":\"F32\",\"shape\":[" << t.rows;
    if (t.cols) entry << ',' << t.cols;
    entry << "],\"data_offsets\":[" << at << ',' << at + bytes << "]}";
    h += entry.str();
    at += bytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
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
  const StoredModel src = open_stored_model(args[0], "export_hf", "exporting", true);
  check_export_dir_free("export_hf", out);  // creates it: only once the source is known to be good
  // The parameters as f32 (bf16 and fp16 widen exactly).
  std::vector<char> raw(size_t(src.numel) * dtype_size(src.stored));
  src.read(raw.data());
  std::vector<float> values(size_t(src.numel));
  for (size_t i = 0; i < values.size(); ++i) {
    if (src.stored == DType::f32) std::memcpy(&values[i], raw.data() + 4 * i, 4);
    else if (src.stored == DType::bf16) values[i] = to_float(reinterpret_cast<const bf16_t*>(raw.data())[i]);
    else values[i] = to_float(reinterpret_cast<const f16_t*>(raw.data())[i]);
  }
  raw = {};
  const std::vector<HfTensor> tensors = hf_tensors(src.shape);
  const std::string header = safetensors_header(tensors);
  write_file_atomically(out + "/model.safetensors", [&](const ByteSink& write) {
    const uint64_t n = header.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
    write(len, 8);
    write(header.data(), header.size());
    std::vector<float> t;
    for (const HfTensor& h : tensors) {
      const float* v = values.data() + h.offset;
      if (!h.transpose) {
        write(v, size_t(h.rows) * size_t(h.cols ? h.cols : 1) * 4);
        continue;
      }
      t.resize(size_t(h.rows) * size_t(h.cols));  // stored (cols, rows): element (c, r) -> (r, c)
      for (int64_t c = 0; c < h.cols; ++c)
        for (int64_t r = 0; r < h.rows; ++r) t[size_t(r * h.cols + c)] = v[c * h.rows + r];
      write(t.data(), t.size() * 4);
    }
  });
  const std::string config = config_json(src.shape);
  write_file_atomically(out + "/config.json", [&](const ByteSink& write) { write(config.data(), config.size()); });
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
