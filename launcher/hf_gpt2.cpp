// Hugging Face GPT-2 directories: the tensor mapping, config.json, safetensors both ways.
#include "launcher/hf_gpt2.h"

#include <algorithm>
#include <climits>
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
#include "launcher/resolved_run.h"
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
  if (name == "lm_head.w") return "lm_head.weight";  // an untied head's (nn.Linear, not in the transformer)
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
    if (s.name == "wte" || s.name == "lm_head.w") t.rows = m.vocab_size;  // without the padding rows
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
  // GPT-2's <|endoftext|> is id 50256; another vocabulary's last id is an ordinary token.
  const std::string eos = m.vocab_size == 50257 ? "50256" : "null";
  return "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"vocab_size\":" +
         std::to_string(m.vocab_size) + ",\"n_positions\":" + std::to_string(m.seq_len) + ",\"n_embd\":" +
         std::to_string(m.d_model) + ",\"n_layer\":" + std::to_string(m.n_layers) + ",\"n_head\":" +
         std::to_string(m.n_heads) +
         (m.mlp_width() != 4 * m.d_model ? ",\"n_inner\":" + std::to_string(m.mlp_width()) : std::string()) +
         ",\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":" + number_g(m.norm_eps) + "," +
         "\"resid_pdrop\":0.0,\"embd_pdrop\":0.0,\"attn_pdrop\":0.0,\"initializer_range\":0.02," +
         "\"tie_word_embeddings\":" + (m.tied_head ? "true" : "false") +
         ",\"torch_dtype\":\"float32\",\"bos_token_id\":" + eos +
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
  if (c.kind != JsonValue::Kind::kObject) throw UserError(path + ": not a JSON object");
  auto refuse = [&](const std::string& what) {
    throw UserError(path + ": " + what + "; Trellis computes GPT-2 with the tanh GELU (gelu_new)");
  };
  // Each key as GPT2Config reads it: absent (or null) is its default, another JSON type is refused.
  auto member = [&](const char* key, JsonValue::Kind kind, const char* type) -> const JsonValue* {
    const JsonValue* v = c.find(key);
    if (!v || v->kind == JsonValue::Kind::kNull) return nullptr;
    if (v->kind != kind) throw UserError(path + ": " + key + " is not " + type);
    return v;
  };
  auto text = [&](const char* key, const char* absent) {
    const JsonValue* v = member(key, JsonValue::Kind::kString, "a string");
    return v ? v->text : std::string(absent);
  };
  auto flag = [&](const char* key, bool absent) {
    const JsonValue* v = member(key, JsonValue::Kind::kBool, "true or false");
    return v ? v->boolean : absent;
  };
  auto number = [&](const char* key, int64_t absent) {
    const JsonValue* v = member(key, JsonValue::Kind::kNumber, "an integer");
    try {
      return v ? v->as_int() : absent;
    } catch (const CheckpointError&) {
      throw UserError(path + ": " + key + " is not an integer");
    }
  };
  if (text("model_type", "gpt2") != "gpt2") refuse("model_type is \"" + text("model_type", "") + "\", not gpt2");
  const std::string act = text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") refuse("activation_function is \"" + act + "\"");
  for (const char* off : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (flag(off, false)) refuse(std::string(off) + " is true");
  if (!flag("scale_attn_weights", true)) refuse("scale_attn_weights is false");
  GPTConfig m;
  m.vocab_size = number("vocab_size", 50257);
  m.seq_len = number("n_positions", 1024);
  m.n_layers = number("n_layer", 12);
  m.n_heads = number("n_head", 12);
  m.d_model = number("n_embd", 768);
  // n_inner absent (null) is 4 x n_embd, as model.ffn_hidden_size = 0; 0 itself is no width.
  const int64_t inner = number("n_inner", 0);
  if (member("n_inner", JsonValue::Kind::kNumber, "an integer") && (inner < 1 || inner > INT32_MAX))
    throw UserError(path + ": n_inner is " + std::to_string(inner) + " (allowed: null, or 1 to 2147483647)");
  m.ffn_hidden = inner;
  m.tied_head = flag("tie_word_embeddings", true);  // untied: lm_head.weight is a tensor of its own
  if (const JsonValue* eps = member("layer_norm_epsilon", JsonValue::Kind::kNumber, "a number")) {
    m.norm_eps = eps->as_double();
    if (!(m.norm_eps > 0 && m.norm_eps <= 0.1))
      throw UserError(path + ": layer_norm_epsilon is " + eps->text + " (allowed: above 0, at most 0.1)");
  }
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
  const uint64_t data_at = 8 + n, data_size = file_size - data_at;
  std::string text(n, '\0');
  if (!f.read(text.data(), std::streamsize(n))) throw UserError(path + ": cannot read it");
  const JsonValue header = parse_json(text, path + " (header)");
  if (header.kind != JsonValue::Kind::kObject) throw UserError(path + ": its header is not a JSON object");
  const std::vector<HfTensor> tensors = hf_tensors(shape);
  int64_t total = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(shape)) total += s.shape.numel();
  std::fill(whole, whole + total, 0.0f);
  std::vector<bool> found(tensors.size(), false);
  std::vector<float> head;  // a tied head's lm_head.weight, if the file has it: it must be the token embedding
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // every tensor's bytes: they must tile the data
  std::vector<char> raw;
  for (const auto& [key, t] : header.members) {
    if (key == "__metadata__") continue;
    try {
      const JsonValue& at = t.at("data_offsets");
      if (at.kind != JsonValue::Kind::kArray || at.items.size() != 2)
        throw UserError(path + ": tensor " + key + "'s data_offsets is not [begin, end]");
      const int64_t begin = at.items[0].as_int(), end = at.items[1].as_int();
      if (begin < 0 || end < begin || uint64_t(end) > data_size)
        throw UserError(path + ": tensor " + key + "'s data_offsets [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "] lie outside its " + std::to_string(data_size) + " bytes of data");
      spans.emplace_back(uint64_t(begin), uint64_t(end));
      const bool head_name = key == "lm_head.weight";
      const std::string name = key.rfind("transformer.", 0) == 0 || head_name ? key : "transformer." + key;
      size_t i = 0;
      while (i < tensors.size() && tensors[i].name != name) ++i;
      const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
      const bool is_head = head_name && shape.tied_head;  // tied: the token embedding's other name
      if (i == tensors.size() && !buffer && !is_head)
        throw UserError(path + ": tensor " + key + " is not part of a GPT-2 of config.json's shape");
      if (buffer) continue;  // the causal mask, which older transformers saved
      const HfTensor& h = is_head ? tensors[0] : tensors[i];
      const std::string& dtype = t.at("dtype").as_string();
      const JsonValue& dims = t.at("shape");
      const size_t e = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
      if (e == 0) throw UserError(path + ": tensor " + key + " has dtype " + dtype + " (F32, F16 or BF16 are read)");
      const bool vector = h.cols == 0;
      if (dims.kind != JsonValue::Kind::kArray || dims.items.size() != (vector ? 1u : 2u) ||
          dims.items[0].as_int() != h.rows || (!vector && dims.items[1].as_int() != h.cols))
        throw UserError(path + ": tensor " + key + " has shape " + text.substr(dims.begin, dims.end - dims.begin) +
                        ", not [" + std::to_string(h.rows) + (vector ? "" : ", " + std::to_string(h.cols)) + "]");
      const uint64_t count = uint64_t(h.rows) * uint64_t(vector ? 1 : h.cols);
      if (uint64_t(end - begin) != count * e)
        throw UserError(path + ": tensor " + key + "'s data_offsets do not span its shape");
      raw.resize(size_t(count * e));
      f.seekg(std::streamoff(data_at + uint64_t(begin)));
      if (!f.read(raw.data(), std::streamsize(raw.size()))) throw UserError(path + ": cannot read " + key);
      std::vector<float> v(static_cast<size_t>(count));
      for (size_t k = 0; k < v.size(); ++k) {
        if (e == 4) std::memcpy(&v[k], raw.data() + 4 * k, 4);
        else if (dtype == "BF16") v[k] = to_float(reinterpret_cast<const bf16_t*>(raw.data())[k]);
        else v[k] = to_float(reinterpret_cast<const f16_t*>(raw.data())[k]);
        if (!std::isfinite(v[k])) throw UserError(path + ": tensor " + key + " holds non-finite values");
      }
      if (is_head) {
        if (!head.empty()) throw UserError(path + ": tensor " + key + " appears twice");
        head = std::move(v);
        continue;
      }
      if (found[i]) throw UserError(path + ": tensor " + key + " appears twice");
      found[i] = true;
      float* dst = whole + h.offset;
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
  // The tensors' bytes tile the data exactly, as safetensors requires: no overlap, no gap, no tail.
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != covered) throw UserError(path + ": its tensors' data_offsets overlap or leave gaps");
    covered = end;
  }
  if (covered != data_size) throw UserError(path + ": holds bytes after its last tensor");
  if (!head.empty()) {  // wte itself, or (safetensors keeps one of two tied names) only the head
    float* wte = whole + tensors[0].offset;
    if (!found[0]) {
      std::memcpy(wte, head.data(), head.size() * 4);
      found[0] = true;
    } else if (std::memcmp(head.data(), wte, head.size() * 4) != 0) {
      throw UserError(path + ": lm_head.weight differs from the token embedding, which config.json ties it to "
                      "(tie_word_embeddings)");
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
