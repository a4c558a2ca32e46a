// Hugging Face GPT-2 directories: the tensor mapping, config.json, safetensors both ways.
#include "launcher/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/checkpoint.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "data/mapped_file.h"
#include "launcher/model_files.h"
#include "models/gpt.h"

namespace trellis {

namespace {

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


}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::exists(fs::path(dir) / "config.json", ec) && fs::exists(fs::path(dir) / "model.safetensors", ec);
}

GPTConfig read_hf_gpt2_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const JsonValue c = parse_json(read_text_file(path), path);
  auto text = [&](const char* key, const char* absent) {
    const JsonValue* v = c.find(key);
    if (!v || v->kind == JsonValue::Kind::kNull) return std::string(absent);
    if (v->kind == JsonValue::Kind::kBool) return std::string(v->boolean ? "true" : "false");
    return v->text;
  };
  auto number = [&](const char* key, int64_t absent) {
    const JsonValue* v = c.find(key);
    if (!v || v->kind == JsonValue::Kind::kNull) return absent;
    try {
      return v->as_int();
    } catch (const CheckpointError&) {
      throw UserError(path + ": " + key + " is not an integer");
    }
  };
  auto refuse = [&](const std::string& what) {
    throw UserError(path + ": " + what + "; Trellis computes GPT-2 with the tanh GELU (gelu_new), layer-norm eps "
                    "1e-5, MLP width 4 x n_embd and the head tied to the token embedding");
  };
  if (text("model_type", "gpt2") != "gpt2") refuse("model_type is \"" + text("model_type", "") + "\", not gpt2");
  if (text("activation_function", "gelu_new") != "gelu_new")
    refuse("activation_function is \"" + text("activation_function", "") + "\"");
  if (const JsonValue* eps = c.find("layer_norm_epsilon");
      eps && (eps->kind != JsonValue::Kind::kNumber || std::fabs(eps->as_double() - 1e-5) > 1e-12))
    refuse("layer_norm_epsilon is " + eps->text);
  if (text("tie_word_embeddings", "true") != "true") refuse("tie_word_embeddings is false");
  for (const char* off : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (text(off, "false") != "false") refuse(std::string(off) + " is on");
  if (text("scale_attn_weights", "true") != "true") refuse("scale_attn_weights is off");
  GPTConfig m;
  m.vocab_size = number("vocab_size", 50257);
  m.seq_len = number("n_positions", 1024);
  m.n_layers = number("n_layer", 12);
  m.n_heads = number("n_head", 12);
  m.d_model = number("n_embd", 768);
  constexpr int64_t kMax = int64_t(1) << 24;
  for (int64_t v : {m.vocab_size, m.seq_len, m.n_layers, m.n_heads, m.d_model})
    if (v < 1 || v > kMax) throw UserError(path + ": a model size of " + std::to_string(v) + " is not plausible");
  if (m.d_model % m.n_heads != 0) throw UserError(path + ": n_embd is not a multiple of n_head");
  if (number("n_inner", 4 * m.d_model) != 4 * m.d_model) refuse("n_inner is not 4 x n_embd");
  return m;
}

void read_hf_gpt2(const std::string& dir, const GPTConfig& shape, float* whole) {
  const std::string path = dir + "/model.safetensors";
  std::ifstream f(path, std::ios::binary);
  unsigned char len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) throw UserError(path + ": cannot read it");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec || n > (uint64_t(100) << 20) || 8 + n > file_size)
    throw UserError(path + ": not a safetensors file (header of " + std::to_string(n) + " bytes)");
  std::string text(n, '\0');
  if (!f.read(text.data(), std::streamsize(n))) throw UserError(path + ": cannot read it");
  const JsonValue header = parse_json(text, path + " (header)");
  const uint64_t data_at = 8 + n, data_size = file_size - data_at;
  const std::vector<HfTensor> tensors = hf_tensors(shape);
  int64_t total = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(shape)) total += s.shape.numel();
  std::fill(whole, whole + total, 0.0f);
  std::vector<bool> found(tensors.size(), false);
  std::vector<char> raw;
  for (const auto& [key, t] : header.members) {
    if (key == "__metadata__") continue;
    const std::string name = key.rfind("transformer.", 0) == 0 ? key : "transformer." + key;
    size_t i = 0;
    while (i < tensors.size() && tensors[i].name != name) ++i;
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
    const bool head = key == "lm_head.weight";
    if (i == tensors.size() && !buffer && !head)
      throw UserError(path + ": tensor " + key + " is not part of a GPT-2 of config.json's shape");
    if (buffer) continue;  // the causal mask, which older transformers saved
    const HfTensor& h = head ? tensors[0] : tensors[i];  // the head must be the token embedding
    try {
      const std::string& dtype = t.at("dtype").as_string();
      const JsonValue& dims = t.at("shape");
      const JsonValue& at = t.at("data_offsets");
      const size_t e = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
      if (e == 0) throw UserError(path + ": tensor " + key + " has dtype " + dtype + " (F32, F16 or BF16 are read)");
      const bool vector = h.cols == 0;
      if (dims.items.size() != (vector ? 1u : 2u) || dims.items[0].as_int() != h.rows ||
          (!vector && dims.items[1].as_int() != h.cols))
        throw UserError(path + ": tensor " + key + " has shape " + text.substr(dims.begin, dims.end - dims.begin) +
                        ", not [" + std::to_string(h.rows) + (vector ? "" : ", " + std::to_string(h.cols)) + "]");
      const uint64_t count = uint64_t(h.rows) * uint64_t(vector ? 1 : h.cols);
      const uint64_t begin = uint64_t(at.items.at(0).as_int()), end = uint64_t(at.items.at(1).as_int());
      if (at.items.size() != 2 || end < begin || end - begin != count * e || end > data_size)
        throw UserError(path + ": tensor " + key + "'s data_offsets do not fit its shape and the file");
      raw.resize(size_t(count * e));
      f.seekg(std::streamoff(data_at + begin));
      if (!f.read(raw.data(), std::streamsize(raw.size()))) throw UserError(path + ": cannot read " + key);
      std::vector<float> v(static_cast<size_t>(count));
      for (size_t k = 0; k < v.size(); ++k) {
        if (e == 4) std::memcpy(&v[k], raw.data() + 4 * k, 4);
        else if (dtype == "BF16") v[k] = to_float(reinterpret_cast<const bf16_t*>(raw.data())[k]);
        else v[k] = to_float(reinterpret_cast<const f16_t*>(raw.data())[k]);
      }
      float* dst = whole + h.offset;
      if (head) {  // tied: it must be the token embedding itself
        if (!found[0]) throw UserError(path + ": lm_head.weight comes before the token embedding it must equal");
        if (std::memcmp(v.data(), dst, v.size() * 4) != 0)
          throw UserError(path + ": lm_head.weight differs from the token embedding; Trellis ties them");
        continue;
      }
      if (found[i]) throw UserError(path + ": tensor " + key + " appears twice");
      found[i] = true;
      if (!h.transpose) {
        std::memcpy(dst, v.data(), v.size() * 4);
      } else {  // GPT-2's (rows, cols) = Trellis's (cols, rows) transposed
        for (int64_t r = 0; r < h.rows; ++r)
          for (int64_t c = 0; c < h.cols; ++c) dst[c * h.rows + r] = v[size_t(r * h.cols + c)];
      }
    } catch (const CheckpointError& err) {
      throw UserError(path + ": tensor " + key + ": " + err.what());
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!found[i]) throw UserError(path + ": has no tensor " + tensors[i].name + " (nor without \"transformer.\")");
}

void write_hf_gpt2(const GPTConfig& shape, const std::vector<float>& whole, const std::string& dir) {
  const std::vector<HfTensor> tensors = hf_tensors(shape);
  const std::string header = safetensors_header(tensors);
  write_file_atomically(dir + "/model.safetensors", [&](const ByteSink& write) {
    const uint64_t n = header.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
    write(len, 8);
    write(header.data(), header.size());
    std::vector<float> t;
    for (const HfTensor& h : tensors) {
      const float* v = whole.data() + h.offset;
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
  const std::string config = config_json(shape);
  write_file_atomically(dir + "/config.json", [&](const ByteSink& write) { write(config.data(), config.size()); });
}

}  // namespace trellis
