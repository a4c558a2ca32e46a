// Hugging Face model directories (GPT-2, Llama, Qwen2 and Mixtral): the tensor mappings, config.json,
// safetensors both ways.
#include "launcher/hf_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
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
  std::string param;           // the Trellis parameter it is (a part of)
  int64_t within = 0;          // where it starts in that parameter
};
HfTensor hf_tensor(std::string name, int64_t rows, int64_t cols, int64_t offset) {
  HfTensor t;
  t.name = std::move(name);
  t.rows = rows;
  t.cols = cols;
  t.offset = offset;
  return t;
}

// Llama's layout of tensors; with biases on qkv alone it is Qwen2's, with experts Mixtral's.
bool llama_family(const GPTConfig& m) { return m.rope && m.swiglu && m.rmsnorm && !m.bias; }
bool mixtral(const GPTConfig& m) { return llama_family(m) && m.moe.experts > 0; }
// Llama's block turning part of each head: Phi-3's (its projections fused: qkv_proj, gate_up_proj).
// LongRoPE likewise: only Phi-3 among the families Trellis writes has it.
bool phi3(const GPTConfig& m) { return llama_family(m) && (m.rope_dims > 0 || m.rope_longrope); }
// The partial_rotary_factor whose int(head_dim x factor) is m's turned dims, as transformers computes it.
double partial_rotary_factor(const GPTConfig& m) {
  if (m.rope_dims == 0) return 1.0;  // the whole head
  const int64_t hd = m.head_dim();
  double f = double(m.rope_dims) / double(hd);
  while (int64_t(double(hd) * f) < m.rope_dims) f = std::nextafter(f, 2.0);
  return f;
}
// A sliding window shorter than the context (a longer one is none): Mistral's, Mixtral's, Phi-3's.
bool windowed(const GPTConfig& m) { return m.sliding_window > 0 && m.sliding_window < m.seq_len; }
std::string sliding_window_json(const GPTConfig& m) { return windowed(m) ? std::to_string(m.sliding_window) : "null"; }
// Mixtral's shape with QK-norm: Qwen3-MoE's (its tensors named as Qwen2-MoE's: mlp.gate, mlp.experts).
bool qwen3_moe(const GPTConfig& m) { return mixtral(m) && m.qk_norm; }
// Mixtral's shape with a gated shared MLP: Qwen2-MoE's (Qwen1.5-MoE's), mlp.shared_expert and its gate.
bool qwen2_moe(const GPTConfig& m) { return mixtral(m) && m.moe.shared_gate; }
// Names outside the model's prefix: an untied (or tied, safetensors keeping one name) head.
constexpr const char* kHeadName = "lm_head.weight";

// Trellis name -> GPT-2 name: "h.3.attn.qkv.w" -> "transformer.h.3.attn.c_attn.weight".
std::string hf_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return "transformer." + name + ".weight";
  if (name == "lm_head.w") return kHeadName;  // an untied head's (nn.Linear, not in the transformer)
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

// Llama's tensors of a Trellis parameter, with their rows (nn.Linear's (out, in), as Trellis's): qkv
// is q_proj, k_proj and v_proj one after the other, fc gate_proj and up_proj (fused, Phi-3's: qkv
// is qkv_proj, fc gate_up_proj, each as Trellis's whole); Qwen3's QK-norm weights are self_attn.q_norm
// and k_norm; Mixtral's router is block_sparse_moe.gate, an expert's fc w1 (gate) and w3 (up), its proj w2
// (Qwen-MoE's mlp.gate, gate_proj, up_proj, down_proj); Qwen2-MoE's shared MLP mlp.shared_expert, its
// gate mlp.shared_expert_gate.
void llama_tensors(const GPTConfig& m, const ParameterSpec& s, int64_t offset, std::vector<HfTensor>& out,
                   bool fused) {
  const int64_t C = m.d_model, A = m.attention_width(), Ckv = m.kv_heads() * m.head_dim(), F = m.mlp_width();
  if (s.name == "wte") return out.push_back(hf_tensor("model.embed_tokens.weight", m.vocab_size, C, offset));
  if (s.name == "lm_head.w") return out.push_back(hf_tensor(kHeadName, m.vocab_size, C, offset));
  if (s.name == "lnf.w") return out.push_back(hf_tensor("model.norm.weight", C, 0, offset));
  const size_t dot = s.name.find('.', 2);  // "h.3.attn.qkv.w" -> layer "3", rest "attn.qkv.w"
  const std::string layer = "model.layers." + s.name.substr(2, dot - 2) + ".", rest = s.name.substr(dot + 1);
  if (rest == "ln1.w") return out.push_back(hf_tensor(layer + "input_layernorm.weight", C, 0, offset));
  if (rest == "ln2.w") return out.push_back(hf_tensor(layer + "post_attention_layernorm.weight", C, 0, offset));
  if (rest == "attn.proj.w") return out.push_back(hf_tensor(layer + "self_attn.o_proj.weight", C, A, offset));
  if (rest == "attn.q_norm.w") return out.push_back(hf_tensor(layer + "self_attn.q_norm.weight", m.head_dim(), 0, offset));
  if (rest == "attn.k_norm.w") return out.push_back(hf_tensor(layer + "self_attn.k_norm.weight", m.head_dim(), 0, offset));
  if (rest == "mlp.proj.w") return out.push_back(hf_tensor(layer + "mlp.down_proj.weight", C, F, offset));
  if (rest == "attn.qkv.w" && fused) return out.push_back(hf_tensor(layer + "self_attn.qkv_proj.weight", A + 2 * Ckv, C, offset));
  if (rest == "mlp.fc.w" && fused) return out.push_back(hf_tensor(layer + "mlp.gate_up_proj.weight", 2 * F, C, offset));
  if (rest == "attn.qkv.w") {
    out.push_back(hf_tensor(layer + "self_attn.q_proj.weight", A, C, offset));
    out.push_back(hf_tensor(layer + "self_attn.k_proj.weight", Ckv, C, offset + A * C));
    return out.push_back(hf_tensor(layer + "self_attn.v_proj.weight", Ckv, C, offset + (A + Ckv) * C));
  }
  if (rest == "attn.qkv.b") {  // Qwen2's
    out.push_back(hf_tensor(layer + "self_attn.q_proj.bias", A, 0, offset));
    out.push_back(hf_tensor(layer + "self_attn.k_proj.bias", Ckv, 0, offset + A));
    return out.push_back(hf_tensor(layer + "self_attn.v_proj.bias", Ckv, 0, offset + A + Ckv));
  }
  const bool qwen = qwen3_moe(m) || qwen2_moe(m);  // Qwen-MoE's names; Mixtral's w1, w3, w2
  const std::string moe = layer + (qwen ? "mlp." : "block_sparse_moe.");
  if (rest == "moe.router.w") return out.push_back(hf_tensor(moe + "gate.weight", m.moe.experts, C, offset));
  if (rest == "moe.shared_gate.w") return out.push_back(hf_tensor(moe + "shared_expert_gate.weight", 1, C, offset));
  const int64_t Fs = m.moe.shared_width(C);
  if (rest == "moe.shared.proj.w") return out.push_back(hf_tensor(moe + "shared_expert.down_proj.weight", C, Fs, offset));
  if (rest == "moe.shared.fc.w") {
    out.push_back(hf_tensor(moe + "shared_expert.gate_proj.weight", Fs, C, offset));
    return out.push_back(hf_tensor(moe + "shared_expert.up_proj.weight", Fs, C, offset + Fs * C));
  }
  if (rest.rfind("moe.experts.", 0) == 0) {  // "moe.experts.J.fc.w"
    const size_t j_end = rest.find('.', 12);
    const std::string expert = moe + "experts." + rest.substr(12, j_end - 12) + ".";
    const std::string what = rest.substr(j_end + 1);
    const int64_t Fe = m.moe.expert_width(C);
    if (what == "proj.w") return out.push_back(hf_tensor(expert + (qwen ? "down_proj.weight" : "w2.weight"), C, Fe, offset));
    TRELLIS_CHECK(what == "fc.w", "Mixtral mapping: no tensor for " + s.name);
    out.push_back(hf_tensor(expert + (qwen ? "gate_proj.weight" : "w1.weight"), Fe, C, offset));
    return out.push_back(hf_tensor(expert + (qwen ? "up_proj.weight" : "w3.weight"), Fe, C, offset + Fe * C));
  }
  TRELLIS_CHECK(rest == "mlp.fc.w", "Llama mapping: no tensor for " + s.name);
  out.push_back(hf_tensor(layer + "mlp.gate_proj.weight", F, C, offset));
  out.push_back(hf_tensor(layer + "mlp.up_proj.weight", F, C, offset + F * C));
}

// The Hugging Face tensors of model m, in Trellis's parameter order; fused: Phi-3's names for Llama's.
std::vector<HfTensor> hf_tensors(const GPTConfig& m, bool fused = false) {
  std::vector<HfTensor> out;
  int64_t offset = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(m)) {
    const size_t first = out.size();
    if (llama_family(m)) {
      llama_tensors(m, s, offset, out, fused);
    } else {
      HfTensor t = hf_tensor(hf_name(s.name), s.shape[0], s.shape.rank == 2 ? s.shape[1] : 0, offset);
      if (s.name == "wte" || s.name == "lm_head.w") t.rows = m.vocab_size;  // without the padding rows
      else if (s.shape.rank == 2 && s.name != "wpe") {  // (out, in) -> Conv1D's (in, out)
        t.transpose = true;
        std::swap(t.rows, t.cols);
      }
      out.push_back(t);
    }
    for (size_t i = first; i < out.size(); ++i) {
      out[i].param = s.name;
      out[i].within = out[i].offset - offset;
    }
    offset += s.shape.numel();
  }
  return out;
}

// Llama 3's or linear scaling as transformers writes it, or null.
// The context config.json names: the model's, or with LongRoPE (Phi-3's) the factor times the original
// one, from which transformers takes the factor back as their ratio (unless it is shorter).
int64_t max_positions(const GPTConfig& m) {
  if (!m.rope_longrope) return m.seq_len;
  const double reach = m.rope_factor * m.rope_original_positions;
  return reach == std::floor(reach) && reach >= double(m.seq_len) && reach <= 1e12 ? int64_t(reach) : m.seq_len;
}

std::string rope_scaling_json(const GPTConfig& m) {
  if (m.rope_longrope) {  // Phi-3's three keys (transformers 4's Phi-3 takes no others); the original context apart
    auto list = [](const std::vector<double>& v) { return std::string("[").append(number_list(v)).append("]"); };
    // The attention factor where transformers' default for that context would not give it (then
    // transformers 5 reads it; 4 refuses the key).
    const double inferred =
        longrope_attention_factor(double(max_positions(m)) / m.rope_original_positions, m.rope_original_positions);
    const bool given = std::fabs(inferred - m.rope_attention_factor) > 1e-12 * m.rope_attention_factor;
    return "{\"type\":\"longrope\",\"long_factor\":" + list(m.rope_long_factors) + ",\"short_factor\":" +
           list(m.rope_short_factors) + (given ? ",\"attention_factor\":" + number_g(m.rope_attention_factor) : "") + "}";
  }
  if (m.rope_yarn)  // every value written, the attention factor as Trellis resolved it
    return "{\"rope_type\":\"yarn\",\"factor\":" + number_g(m.rope_factor) + ",\"original_max_position_embeddings\":" +
           number_g(m.rope_original_positions) + ",\"beta_fast\":" + number_g(m.rope_beta_fast) + ",\"beta_slow\":" +
           number_g(m.rope_beta_slow) + ",\"attention_factor\":" + number_g(m.rope_attention_factor) + "}";
  if (m.rope_factor == 1.0) return "null";
  if (m.rope_linear) return "{\"rope_type\":\"linear\",\"factor\":" + number_g(m.rope_factor) + "}";
  return "{\"rope_type\":\"llama3\",\"factor\":" + number_g(m.rope_factor) + ",\"low_freq_factor\":" +
         number_g(m.rope_low_freq_factor) + ",\"high_freq_factor\":" + number_g(m.rope_high_freq_factor) +
         ",\"original_max_position_embeddings\":" + number_g(m.rope_original_positions) + "}";
}

std::string config_json(const GPTConfig& m) {
  // Mixtral: Llama's keys, intermediate_size an expert's width, and the experts. Qwen3-MoE: Qwen3's,
  // the experts' width moe_intermediate_size, every block sparse, top k renormalized or not.
  // Qwen2-MoE: the same, and the shared MLP's width (intermediate_size too, as published).
  const std::string shared = qwen2_moe(m) ? ",\"shared_expert_intermediate_size\":" +
                                                std::to_string(m.moe.shared_width(m.d_model)) + ",\"qkv_bias\":true"
                                          : "";
  const std::string experts =
      qwen3_moe(m) || qwen2_moe(m) ? shared + ",\"num_experts\":" + std::to_string(m.moe.experts) + ",\"num_experts_per_tok\":" +
                         std::to_string(m.moe.top_k) + ",\"moe_intermediate_size\":" +
                         std::to_string(m.moe.expert_width(m.d_model)) + ",\"norm_topk_prob\":" +
                         (m.moe.renormalize ? "true" : "false") +
                         ",\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"router_aux_loss_coef\":" +
                         number_g(m.moe.aux_loss_coef) + ",\"output_router_logits\":false"
      : mixtral(m) ? ",\"num_local_experts\":" + std::to_string(m.moe.experts) + ",\"num_experts_per_tok\":" +
                       std::to_string(m.moe.top_k) + ",\"router_aux_loss_coef\":" + number_g(m.moe.aux_loss_coef) +
                       ",\"output_router_logits\":false,\"router_jitter_noise\":0.0,\"sliding_window\":" + sliding_window_json(m)
                 : "";
  const std::string head = qwen3_moe(m) ? "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\","
                                          "\"use_sliding_window\":false,\"max_window_layers\":" + std::to_string(m.n_layers) +
                                          ",\"vocab_size\":"
                           : qwen2_moe(m) ? "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"model_type\":\"qwen2_moe\","
                                            "\"use_sliding_window\":false,\"max_window_layers\":" + std::to_string(m.n_layers) +
                                            ",\"vocab_size\":"
                           : mixtral(m)  ? "{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\",\"vocab_size\":"
                           : phi3(m) ? "{\"architectures\":[\"Phi3ForCausalLM\"],\"model_type\":\"phi3\",\"partial_rotary_factor\":" +
                                         number_g(partial_rotary_factor(m)) + ",\"original_max_position_embeddings\":" +
                                         (m.rope_longrope ? number_g(m.rope_original_positions) : std::to_string(m.seq_len)) +
                                         ",\"sliding_window\":" + sliding_window_json(m) +
                                         ",\"pad_token_id\":null,\"resid_pdrop\":0.0,\"embd_pdrop\":0.0,\"vocab_size\":"
                           : windowed(m) ? "{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\",\"sliding_window\":" +
                                             sliding_window_json(m) + ",\"vocab_size\":"
                           : m.qkv_bias ? "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"use_sliding_window\":false,"
                                          "\"max_window_layers\":" + std::to_string(m.n_layers) + ",\"vocab_size\":"
                           : m.qk_norm ? "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"use_sliding_window\":false,"
                                         "\"max_window_layers\":" + std::to_string(m.n_layers) + ",\"vocab_size\":"
                                        : "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":";
  if (llama_family(m))  // no special tokens: Trellis's vocabularies name none
    return head +
           std::to_string(m.vocab_size) + ",\"hidden_size\":" + std::to_string(m.d_model) + ",\"intermediate_size\":" +
           std::to_string(qwen2_moe(m)   ? m.moe.shared_width(m.d_model)
                          : mixtral(m) && !qwen3_moe(m) ? m.moe.expert_width(m.d_model)
                                                        : m.mlp_width()) +
           experts +
           ",\"num_hidden_layers\":" + std::to_string(m.n_layers) +
           ",\"num_attention_heads\":" + std::to_string(m.n_heads) + ",\"num_key_value_heads\":" +
           std::to_string(m.kv_heads()) + ",\"head_dim\":" + std::to_string(m.head_dim()) +
           ",\"max_position_embeddings\":" + std::to_string(max_positions(m)) + ",\"rms_norm_eps\":" + number_g(m.norm_eps) +
           ",\"rope_theta\":" + number_g(m.rope_theta) + ",\"rope_scaling\":" + rope_scaling_json(m) +
           ",\"hidden_act\":\"silu\"," +
           (m.qkv_bias || (mixtral(m) && !qwen3_moe(m) && !qwen2_moe(m)) ? "" : "\"attention_bias\":false,\"mlp_bias\":false,") +
           "\"attention_dropout\":0.0,\"initializer_range\":0.02," +
           "\"tie_word_embeddings\":" + (m.tied_head ? "true" : "false") +
           ",\"torch_dtype\":\"float32\",\"bos_token_id\":null,\"eos_token_id\":null}\n";
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


// A JSON value as written in its file, for messages.
std::string text_of(const JsonValue& v) { return v.kind == JsonValue::Kind::kString ? "\"" + v.text + "\"" : v.text; }

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::exists(fs::path(dir) / "config.json", ec) && (fs::exists(fs::path(dir) / "model.safetensors", ec) ||
                                                            fs::exists(fs::path(dir) / "model.safetensors.index.json", ec));
}

GPTConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const JsonValue c = parse_json(read_text_file(path), path);
  if (c.kind != JsonValue::Kind::kObject) throw UserError(path + ": not a JSON object");
  // Each key as GPT2Config / LlamaConfig reads it: absent (or null) is its default, another JSON type
  // is refused.
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
  auto real = [&](const char* key, double absent, double lo, double hi) {
    const JsonValue* v = member(key, JsonValue::Kind::kNumber, "a number");
    const double x = v ? v->as_double() : absent;
    if (!(x > lo && x <= hi))
      throw UserError(path + ": " + key + " is " + v->text + " (allowed: above " + number_g(lo) + ", at most " +
                      number_g(hi) + ")");
    return x;
  };
  const std::string type = text("model_type", "gpt2");
  GPTConfig m;
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || type == "mixtral" ||
      type == "qwen2_moe" || type == "qwen3_moe" || type == "phi3") {
    // MixtralConfig's, MistralConfig's, Qwen2MoeConfig's, Qwen3MoeConfig's and Phi3Config's defaults where
    // they differ from LlamaConfig's (Mistral's and Phi-3's blocks are Llama's, Phi-3's projections fused;
    // Qwen3-MoE's Qwen3's with experts in every block, Qwen2-MoE's Qwen2's with them and a gated shared MLP).
    const bool mx = type == "mixtral", ms = type == "mistral", q3m = type == "qwen3_moe", phi = type == "phi3",
               q2m = type == "qwen2_moe";
    auto refuse = [&](const std::string& what) {
      throw UserError(path + ": " + what + "; Trellis computes Llama with SiLU, no biases and rotary positions plain, "
                      "with Llama 3's scaling, linear or yarn");
    };
    if (text("hidden_act", "silu") != "silu") refuse("hidden_act is \"" + text("hidden_act", "") + "\"");
    for (const char* off : {"attention_bias", "mlp_bias"})
      if (flag(off, false)) refuse(std::string(off) + " is true");
    if (flag("use_sliding_window", false)) refuse("use_sliding_window is true");
    // Rotary embedding of part of each head: Phi-3's (Phi3Attention turns the first int(head_dim x
    // factor) dims); the other families turn whole heads.
    double partial = real("partial_rotary_factor", 1.0, 0.0, 1.0);
    if (!phi && partial != 1.0) refuse("partial_rotary_factor is not 1 (Trellis reads partial rotary from Phi-3 only)");
    if (number("pretraining_tp", 1) != 1) refuse("pretraining_tp is not 1");
    m.vocab_size = number("vocab_size", phi ? 32064 : q2m ? 151936 : 32000);
    m.seq_len = number("max_position_embeddings", mx || ms ? 131072 : q3m || q2m ? 32768 : phi ? 4096 : 2048);
    m.n_layers = number("num_hidden_layers", q2m ? 24 : 32);
    m.n_heads = number("num_attention_heads", q2m ? 16 : 32);
    m.d_model = number("hidden_size", phi ? 3072 : q2m ? 2048 : 4096);
    m.n_kv_heads = number("num_key_value_heads", mx || ms ? 8 : q3m ? 4 : m.n_heads);
    // Mistral's sliding window (Mistral 7B v0.1's 4096, Phi-3-mini's 2047; null in Mixtral's and
    // Mistral v0.3's published configs; absent, MistralConfig's default is 4096): model.sliding_window
    // where it is shorter than the context, else none.
    if (mx || ms || phi) {
      const int64_t window = c.find("sliding_window") ? number("sliding_window", m.seq_len) : ms ? 4096 : m.seq_len;
      if (window < 1) refuse("sliding_window is " + std::to_string(window));
      m.sliding_window = window < m.seq_len ? window : 0;
    }
    if (m.n_kv_heads < 1) refuse("num_key_value_heads is " + std::to_string(m.n_kv_heads));
    // head_dim may be decoupled from hidden_size (Qwen3's, Gemma's): model.head_dim.
    const int64_t hd = number("head_dim", m.n_heads > 0 ? m.d_model / m.n_heads : 0);
    if (hd < 1 || hd > kMaxHeadSize)
      throw UserError(path + ": head_dim is " + std::to_string(hd) + " (allowed: 1 to " + std::to_string(kMaxHeadSize) + ")");
    if (m.n_heads > 0 && hd * m.n_heads != m.d_model) m.head_size = hd;
    // Qwen3-MoE's intermediate_size is that of dense blocks (mlp_only_layers), of which it has none here.
    const int64_t width = q3m || q2m ? number("moe_intermediate_size", q2m ? 1408 : 768)
                              : number("intermediate_size", mx || ms ? 14336 : phi ? 8192 : 11008);
    if (width < 1 || width > INT32_MAX)
      throw UserError(path + ": intermediate_size is " + std::to_string(width) + " (allowed: 1 to 2147483647)");
    m.rope = m.swiglu = m.rmsnorm = true;
    m.bias = false;
    m.qkv_bias = type == "qwen2" || (q2m && flag("qkv_bias", true));  // Qwen2: biases on q, k and v
    m.qk_norm = type == "qwen3" || q3m;  // Qwen3: q and k heads RMS-normed
    if (mx || q3m || q2m) {  // every block's MLP is experts of that width; routing as Trellis's (softmax, top k)
      // Qwen-MoE's count is num_experts in the published configs, num_local_experts as transformers 5 writes it.
      const char* count = (q3m || q2m) && c.find("num_experts") ? "num_experts" : "num_local_experts";
      m.moe.experts = number(count, q3m ? 128 : q2m ? 60 : 8);
      m.moe.top_k = number("num_experts_per_tok", q3m ? 8 : q2m ? 4 : 2);
      if (m.moe.experts < 1 || m.moe.experts > 1024 || m.moe.top_k < 1 || m.moe.top_k > std::min<int64_t>(m.moe.experts, 8))
        throw UserError(path + ": " + count + " " + std::to_string(m.moe.experts) + " with num_experts_per_tok " +
                        std::to_string(m.moe.top_k) + " (allowed: 1 to 1024 experts, 1 to min(8, experts) a token)");
      if (q3m || q2m) {  // Mixtral renormalizes its top k always; Qwen-MoE where norm_topk_prob says so
        m.moe.renormalize = flag("norm_topk_prob", false);
        if (number("decoder_sparse_step", 1) != 1) refuse("decoder_sparse_step is not 1 (experts in every block)");
        const JsonValue* dense = member("mlp_only_layers", JsonValue::Kind::kArray, "a list");
        if (dense && !dense->items.empty()) refuse("mlp_only_layers is not empty (experts in every block)");
      }
      m.moe.ffn_hidden = width;
      if (q2m) {  // the shared MLP, gated: as moe.shared_experts experts' widths
        const int64_t shared = number("shared_expert_intermediate_size", 5632);
        if (shared < width || shared % width != 0 || shared / width > 64)
          throw UserError(path + ": shared_expert_intermediate_size " + std::to_string(shared) +
                          " is not 1 to 64 times moe_intermediate_size " + std::to_string(width) +
                          " (allowed: a multiple, as Trellis's shared MLP is moe.shared_experts experts' widths)");
        m.moe.shared_experts = shared / width;
        m.moe.shared_gate = true;
      }
      const double aux = real("router_aux_loss_coef", 0.001, -1e300, 1e6);
      if (aux < 0) throw UserError(path + ": router_aux_loss_coef is " + number_g(aux) + " (allowed: 0 or more)");
      m.moe.aux_loss_coef = float(aux);
      m.moe.dropless = true;  // as Hugging Face's MoE models route
      m.set_expert_mlp();
    } else {
      m.ffn_hidden = width;
    }
    m.rope_theta = real("rope_theta", mx ? 1e6 : 10000.0, 1.0, 1e12);
    // The rotation's kind: rope_scaling {rope_type (or type), factor, ...} (transformers 4), or
    // rope_parameters {rope_type, rope_theta, factor, ...} (transformers 5); "default" or "llama3".
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      const JsonValue* rp = member(key, JsonValue::Kind::kObject, "an object");
      if (!rp) continue;
      const std::string k = key;
      const JsonValue* kind = rp->find("rope_type") ? rp->find("rope_type") : rp->find("type");
      std::string type = kind && kind->kind == JsonValue::Kind::kString ? kind->text : "";
      if (phi && (type == "su" || type == "yarn")) type = "longrope";  // Phi-3's older names for it, as transformers reads them
      if (type != "default" && type != "llama3" && type != "linear" && type != "yarn" && type != "longrope")
        refuse(k + "'s rope_type is " + (kind ? text_of(*kind) : std::string("missing")) +
               " (allowed: default, llama3, linear, yarn, longrope)");
      if (type == "longrope" && !phi) refuse(k + "'s rope_type is \"longrope\" (Trellis reads LongRoPE from Phi-3 only)");
      auto value = [&](const char* name, double absent, double lo, double hi) {
        const JsonValue* v = rp->find(name);
        if (!v || v->kind == JsonValue::Kind::kNull) return absent;
        if (v->kind != JsonValue::Kind::kNumber || !(v->as_double() > lo && v->as_double() <= hi))
          throw UserError(path + ": " + k + "." + name + " is " + text_of(*v) + " (allowed: above " + number_g(lo) +
                          ", at most " + number_g(hi) + ")");
        return v->as_double();
      };
      m.rope_theta = value("rope_theta", m.rope_theta, 1, 1e12);
      partial = value("partial_rotary_factor", partial, 0, 1);
      if (!phi && partial != 1) refuse(k + ".partial_rotary_factor is not 1 (Trellis reads partial rotary from Phi-3 only)");
      if (type == "linear") {  // position interpolation: every frequency divided by the factor
        m.rope_factor = value("factor", 0, 1, 1e6);
        if (m.rope_factor == 0) refuse(k + ".factor is missing");
        m.rope_linear = true;
      }
      if (type == "longrope") {  // transformers' _compute_longrope_parameters (5's: a factor given is kept)
        auto factors = [&](const char* name) {
          const JsonValue* v = rp->find(name);
          std::vector<double> out;
          if (!v || v->kind != JsonValue::Kind::kArray) refuse(k + "." + name + " is not a list of numbers");
          for (const JsonValue& x : v->items) {
            if (x.kind != JsonValue::Kind::kNumber) refuse(k + "." + name + " is not a list of numbers");
            out.push_back(x.as_double());
          }
          return out;
        };
        m.rope_longrope = true;
        m.rope_long_factors = factors("long_factor");
        m.rope_short_factors = factors("short_factor");
        // Phi-3 keeps the original context at the top level (4096 where absent, Phi3Config's default).
        m.rope_original_positions =
            value("original_max_position_embeddings", real("original_max_position_embeddings", 4096, 0, 1e9), 0, 1e9);
        m.rope_factor = value("factor", double(m.seq_len) / m.rope_original_positions, 0, 1e6);
        m.rope_attention_factor =
            value("attention_factor", longrope_attention_factor(m.rope_factor, m.rope_original_positions), 0, 100);
        continue;
      }
      if (type == "yarn") {  // transformers' _compute_yarn_parameters, its truncated correction range
        const JsonValue* truncate = rp->find("truncate");
        if (truncate && truncate->kind == JsonValue::Kind::kBool && !truncate->boolean) refuse(k + ".truncate is false");
        m.rope_yarn = true;
        m.rope_original_positions = value("original_max_position_embeddings", double(m.seq_len), 0, 1e9);
        // No factor: DeepSeek-V3's way, the context's ratio to the original.
        m.rope_factor = value("factor", double(m.seq_len) / m.rope_original_positions, 0, 1e6);
        m.rope_beta_fast = value("beta_fast", 32, 0, 1e6);
        m.rope_beta_slow = value("beta_slow", 1, 0, 1e6);
        if (!(m.rope_beta_fast > m.rope_beta_slow)) refuse(k + ".beta_fast does not exceed beta_slow");
        const double mscale = value("mscale", 0, -1, 1e6), all_dims = value("mscale_all_dim", 0, -1, 1e6);
        auto get_mscale = [&](double ms) { return m.rope_factor <= 1 ? 1.0 : 0.1 * ms * std::log(m.rope_factor) + 1.0; };
        const double inferred = mscale != 0 && all_dims != 0 ? get_mscale(mscale) / get_mscale(all_dims)
                                                             : yarn_attention_factor(m.rope_factor);
        m.rope_attention_factor = value("attention_factor", inferred, 0, 100);
        continue;
      }
      if (type != "llama3") continue;
      m.rope_factor = value("factor", 0, 1, 1e6);
      if (m.rope_factor == 0) refuse(k + ".factor is missing");
      m.rope_low_freq_factor = value("low_freq_factor", 1, 0, 1e6);
      m.rope_high_freq_factor = value("high_freq_factor", 4, 0, 1e6);
      m.rope_original_positions = value("original_max_position_embeddings", 8192, 0, 1e9);
      if (!(m.rope_high_freq_factor > m.rope_low_freq_factor)) refuse(k + ".high_freq_factor does not exceed low_freq_factor");
    }
    m.rope_dims = partial_rope_dims(hd, partial);
    if (partial != 1 && (m.rope_dims < 2 || m.rope_dims % 2 != 0))
      refuse("partial_rotary_factor " + number_g(partial) + " turns " + std::to_string(m.rope_dims) + " of a head's " +
             std::to_string(hd) + " dims (Trellis turns an even number of them, at least 2)");
    m.norm_eps = real("rms_norm_eps", mx || phi ? 1e-5 : 1e-6, 0.0, 0.1);
    m.tied_head = flag("tie_word_embeddings", false);
    return m;
  }
  if (type != "gpt2")
    throw UserError(path + ": model_type is \"" + type +
                    "\" (allowed: gpt2, llama, mistral, phi3, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe)");
  auto refuse = [&](const std::string& what) {
    throw UserError(path + ": " + what + "; Trellis computes GPT-2 with the tanh GELU (gelu_new)");
  };
  const std::string act = text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") refuse("activation_function is \"" + act + "\"");
  for (const char* off : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (flag(off, false)) refuse(std::string(off) + " is true");
  if (!flag("scale_attn_weights", true)) refuse("scale_attn_weights is false");
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
  m.norm_eps = real("layer_norm_epsilon", 1e-5, 0.0, 0.1);
  return m;
}

std::string hf_family_mismatch(const GPTConfig& m) {
  if (windowed(m) && (!llama_family(m) || m.qkv_bias || m.qk_norm))
    return "the model attends within a sliding window of " + std::to_string(m.sliding_window) +
           " positions (model.sliding_window); of the Hugging Face families Trellis writes, only Mistral, Mixtral and "
           "Phi-3 have one, in Llama's block (rotary positions, RMSNorm, SwiGLU, no biases) without QK-norm";
  if (m.rope && (m.rope_dims > 0 || m.rope_longrope)) {  // Phi-3: Llama's dense block, part of each head or LongRoPE
    const std::string what = m.rope_dims > 0 ? "the model turns " + std::to_string(m.rope_dims) + " of each head's " +
                                                   std::to_string(m.head_dim()) + " dims (model.partial_rotary_factor) "
                                             : std::string("the model scales its rotary frequencies by LongRoPE "
                                                           "(model.rope_scaling = longrope) ");
    const char* phi3_is = "; of the Hugging Face families only Phi-3 turns part of a head or scales by LongRoPE, in "
                          "Llama's block (RMSNorm, SwiGLU, no biases) without experts, QK-norm or a head_dim of its own, "
                          "rope_scaling none or longrope";
    if (!llama_family(m) || m.moe.experts > 0 || m.qkv_bias || m.qk_norm || m.head_size > 0)
      return what + "in a block not Phi-3's" + phi3_is;
    if (!m.rope_longrope && (m.rope_factor != 1.0 || m.rope_yarn))
      return what + "with its frequencies scaled (model.rope_scaling)" + phi3_is;
    return "";
  }
  if (m.moe.experts > 0) {  // Mixtral: Llama's block with SwiGLU experts in every block, nothing shared
    const std::string what = "the model has mixture-of-experts blocks (moe.experts = " + std::to_string(m.moe.experts) + ") ";
    const char* mixtral_is = "; a Hugging Face Mixtral has Llama's block (rotary positions, RMSNorm, no linear biases) "
                             "with SwiGLU experts in every block and no shared MLP";
    if (!llama_family(m)) return what + "of " + (m.swiglu ? "SwiGLU" : "GELU") + " MLPs in a block not Llama's" + mixtral_is;
    if (!m.moe.every_block())
      return what + "in every " + std::to_string(m.moe.layer_freq) + " blocks after " + std::to_string(m.moe.first_dense) +
             " dense" + mixtral_is;
    if (m.moe.shared_experts > 0) {  // Qwen2-MoE's: gated, with biases on qkv, without QK-norm
      if (m.moe.shared_gate && m.qkv_bias && !m.qk_norm) return "";
      return what + "with a shared MLP (moe.shared_experts)" + mixtral_is +
             "; a Qwen2-MoE has one gated (moe.shared_gate), biases on qkv and no QK-norm";
    }
    if (m.qkv_bias) return what + "with biases on qkv" + mixtral_is;
    if (m.qk_norm) return "";  // Qwen3-MoE's: gates renormalized (norm_topk_prob) or not
    if (m.moe.top_k > 1 && !m.moe.renormalize)
      return what + "whose gates are not renormalized (moe.renormalize = false); a Hugging Face Mixtral renormalizes them";
    return "";
  }
  if (llama_family(m) && m.qk_norm && m.qkv_bias)
    return "the model has both QK-norm (model.qk_norm) and biases on qkv (model.qkv_bias); a Hugging Face Qwen3 has "
           "QK-norm without biases, a Qwen2 biases without QK-norm";
  if (llama_family(m)) return "";
  const bool gpt2 = !m.rope && !m.swiglu && !m.rmsnorm && m.bias && m.kv_heads() == m.n_heads;
  if (gpt2 && (m.head_size > 0 || m.qk_norm))
    return std::string("the model has ") +
           (m.qk_norm ? "QK-norm (model.qk_norm)" : "heads of a size apart from d_model / n_heads (model.head_dim)") +
           "; a Hugging Face GPT-2 has neither (a Llama-shaped model with them is a Llama or a Qwen3)";
  if (gpt2) return "";
  auto has = [](bool on, const char* yes, const char* no) { return std::string(on ? yes : no); };
  return "the model has " + has(m.rope, "rotary", "learned") + " positions, " + has(m.swiglu, "SwiGLU", "GELU") +
         " MLPs, " + has(m.rmsnorm, "RMSNorm", "LayerNorm") + ", " + has(m.bias, "", "no ") +
         "linear biases and " + std::to_string(m.kv_heads()) + " key-value heads of " + std::to_string(m.n_heads) +
         "; a Hugging Face GPT-2 has learned positions, GELU, LayerNorm, biases and as many key-value heads as heads "
         "(grouped-query attention is Llama's), a Llama rotary positions, SwiGLU, RMSNorm and no biases";
}

const char* hf_family_name(const GPTConfig& m) {
  return qwen3_moe(m) ? "Qwen3-MoE" : qwen2_moe(m) ? "Qwen2-MoE" : mixtral(m) ? "Mixtral" : phi3(m) ? "Phi-3" : llama_family(m) ? (m.qkv_bias ? "Qwen2" : m.qk_norm ? "Qwen3" : windowed(m) ? "Mistral" : "Llama") : "GPT-2";
}

namespace {

// What reading a model's safetensors files fills in: the tensors Trellis wants, which were found,
// and a tied head's lm_head.weight where a file has it (it must be the token embedding).
struct WeightReading {
  const GPTConfig& shape;
  std::vector<HfTensor> tensors;
  std::string prefix;  // the model's name prefix, optional in the files
  const HfDestination& dst;
  std::vector<bool> found;
  std::vector<float> head;
  bool head_seen = false;               // a tied lm_head.weight (read into `head` where wte is wanted)
  std::map<std::string, size_t> index;  // tensors by name
  // Where tensor i's values go, or null (not read).
  float* destination(size_t i) const {
    float* p = dst(tensors[i].param);
    return p ? p + tensors[i].within : nullptr;
  }
};

// One safetensors file's tensors into r.whole. Its tensors' bytes must tile its data.
void read_safetensors_file(const std::string& path, WeightReading& r) {
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
      const std::string name = key.rfind(r.prefix, 0) == 0 || head_name ? key : r.prefix + key;
      const auto it = r.index.find(name);
      const size_t i = it == r.index.end() ? r.tensors.size() : it->second;
      // Buffers older transformers saved: GPT-2's causal masks, Llama's rotary frequencies.
      const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                          name.ends_with(".rotary_emb.inv_freq");
      const bool is_head = head_name && r.shape.tied_head;  // tied: the token embedding's other name
      if (i == r.tensors.size() && !buffer && !is_head)
        throw UserError(path + ": tensor " + key + " is not part of a " + hf_family_name(r.shape) +
                        " of config.json's shape");
      if (buffer) continue;  // the causal mask, which older transformers saved
      const HfTensor& h = is_head ? r.tensors[0] : r.tensors[i];
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
      float* dst = r.destination(is_head ? 0 : i);
      if (is_head ? r.head_seen : r.found[i]) throw UserError(path + ": tensor " + key + " appears twice");
      if (is_head) r.head_seen = true;
      else r.found[i] = true;
      if (!dst) continue;  // not wanted here: checked, not read
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
        r.head = std::move(v);
        continue;
      }
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
}

}  // namespace

// The model's safetensors files: model.safetensors, or the shards its index
// (model.safetensors.index.json, transformers' save_pretrained of a large model) names, in order.
std::vector<std::string> hf_weight_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "model.safetensors", ec)) return {dir + "/model.safetensors"};
  const std::string index = dir + "/model.safetensors.index.json";
  const JsonValue root = parse_json(read_text_file(index), index);
  const JsonValue* map = root.find("weight_map");
  if (!map || map->kind != JsonValue::Kind::kObject) throw UserError(index + ": has no weight_map object");
  std::vector<std::string> files;
  for (const auto& [name, file] : map->members) {
    if (file.kind != JsonValue::Kind::kString || file.text.empty() || file.text.find('/') != std::string::npos ||
        file.text[0] == '.')
      throw UserError(index + ": weight_map gives tensor " + name + " no plain file name in this directory");
    if (std::find(files.begin(), files.end(), dir + "/" + file.text) == files.end()) files.push_back(dir + "/" + file.text);
  }
  if (files.empty()) throw UserError(index + ": its weight_map names no file");
  return files;
}

void read_hf_weights(const std::string& dir, const GPTConfig& shape, float* whole) {
  std::map<std::string, int64_t> at;
  int64_t total = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(shape)) {
    at[s.name] = total;
    total += s.shape.numel();
  }
  std::fill(whole, whole + total, 0.0f);
  read_hf_weights(dir, shape, [&](const std::string& name) { return whole + at.at(name); });
}

void read_hf_weights(const std::string& dir, const GPTConfig& shape, const HfDestination& dst) {
  // Phi-3 (read_hf_config accepted it) stores Llama's projections fused, as Trellis does.
  const std::string config = dir + "/config.json";
  const JsonValue* type = parse_json(read_text_file(config), config).find("model_type");
  const bool fused = type && type->kind == JsonValue::Kind::kString && type->text == "phi3";
  WeightReading r{shape, hf_tensors(shape, fused), llama_family(shape) ? "model." : "transformer.", dst, {}, {}, false, {}};
  for (size_t i = 0; i < r.tensors.size(); ++i) r.index[r.tensors[i].name] = i;
  r.found.assign(r.tensors.size(), false);
  const std::vector<std::string> files = hf_weight_files(dir);
  for (const std::string& file : files) read_safetensors_file(file, r);
  const std::string path = files.size() == 1 ? files[0] : dir + "/model.safetensors.index.json";
  if (r.head_seen) {  // wte itself, or (safetensors keeps one of two tied names) only the head
    float* wte = r.destination(0);  // null: neither is wanted here
    if (!r.found[0]) {
      if (wte) std::memcpy(wte, r.head.data(), r.head.size() * 4);
      r.found[0] = true;
    } else if (wte && std::memcmp(r.head.data(), wte, r.head.size() * 4) != 0) {
      throw UserError(path + ": lm_head.weight differs from the token embedding, which config.json ties it to "
                      "(tie_word_embeddings)");
    }
  }
  for (size_t i = 0; i < r.tensors.size(); ++i)
    if (!r.found[i]) throw UserError(path + ": has no tensor " + r.tensors[i].name + " (nor without \"" + r.prefix + "\")");
}

void write_hf_model(const GPTConfig& shape, const std::vector<float>& whole, const std::string& dir) {
  const std::vector<HfTensor> tensors = hf_tensors(shape, phi3(shape));
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
