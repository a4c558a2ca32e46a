// Opening checkpoints and weight exports for the tools that read trained parameters.
#include "launcher/trained_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/checkpoint.h"
#include "core/error.h"
#include "core/json.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"
#include "launcher/hf_model.h"
#include "launcher/resolved_run.h"
#include "launcher/whole_model.h"
#include "models/gpt.h"

namespace trellis {

namespace {

namespace fs = std::filesystem;

// The whole model's parameters, vocabulary padding included.
int64_t stored_numel(const GPTConfig& m) { return m.parameter_count() + m.padding_parameter_count(); }

// The experts of a stored model's description, checked as train_gpt's config would (one rank holds
// them all), set into g after its MLP and biases (the experts' are the same kind). ffn_hidden: an
// expert's hidden width (0 or absent: 4 x d_model).
void set_experts(GPTConfig& g, int64_t experts, int64_t top_k, double capacity_factor, double aux_loss_coef,
                 int64_t layer_freq, int64_t first_dense, int64_t shared_experts, int64_t ffn_hidden, bool renormalize,
                 bool shared_gate, bool dropless, const std::string& where) {
  MoEConfig& m = g.moe;
  m = MoEConfig();
  if (experts == 0) return;
  if (experts < 0 || experts > 1024 || top_k < 1 || top_k > std::min<int64_t>(experts, 8) || layer_freq < 1 ||
      layer_freq > INT32_MAX || !(capacity_factor > 0 && capacity_factor <= 64) || !(aux_loss_coef >= 0) ||
      shared_experts < 0 || shared_experts > 64 || ffn_hidden < 0 || ffn_hidden > INT32_MAX || first_dense < 0 ||
      first_dense >= g.n_layers || (shared_gate && (shared_experts == 0 || g.bias)))
    throw UserError(where + ": its experts (" + std::to_string(experts) + " experts, top " + std::to_string(top_k) +
                    ", every " + std::to_string(layer_freq) + " blocks after " + std::to_string(first_dense) + " dense, " +
                    std::to_string(shared_experts) +
                    " shared" + (shared_gate ? " gated" : "") + ", width " + std::to_string(ffn_hidden) +
                    ") are not a valid [moe] section");
  m.experts = experts;
  m.top_k = top_k;
  m.capacity_factor = capacity_factor;
  m.aux_loss_coef = float(aux_loss_coef);
  m.layer_freq = layer_freq;
  m.first_dense = first_dense;
  m.shared_experts = shared_experts;
  m.ffn_hidden = ffn_hidden;
  m.renormalize = renormalize;
  m.shared_gate = shared_gate;
  m.dropless = dropless;
  g.set_expert_mlp();
  // As set_mlp's: the experts' weights alone must count in 64 bits.
  if (double(m.layers(g.n_layers)) * double(experts + shared_experts) * 3.0 * double(m.expert_width(g.d_model)) *
          double(g.d_model) > double(int64_t(1) << 44))
    throw UserError(where + ": " + std::to_string(experts) + " experts of width " + std::to_string(m.expert_width(g.d_model)) +
                    " in " + std::to_string(m.layers(g.n_layers)) + " blocks of d_model " + std::to_string(g.d_model) +
                    " are not plausible");
}

// The shape fields every model description has, checked as train_gpt's config would (head_size 0:
// d_model / n_heads, which must divide).
GPTConfig shape_of(int64_t vocab, int64_t seq, int64_t layers, int64_t heads, int64_t d_model, int64_t head_size,
                   const std::string& where) {
  GPTConfig m;
  m.vocab_size = vocab;
  m.seq_len = seq;
  m.n_layers = layers;
  m.n_heads = heads;
  m.d_model = d_model;
  constexpr int64_t kMax = int64_t(1) << 24;
  for (int64_t v : {vocab, seq, layers, heads, d_model})
    if (v < 1 || v > kMax) throw UserError(where + ": a model size of " + std::to_string(v) + " is not plausible");
  if (head_size < 0 || head_size > kMaxHeadSize)
    throw UserError(where + ": head_dim " + std::to_string(head_size) + " (allowed: 0 = d_model / n_heads, or 1 to " +
                    std::to_string(kMaxHeadSize) + ")");
  if (head_size == 0 && d_model % heads != 0)
    throw UserError(where + ": d_model " + std::to_string(d_model) + " is not a multiple of n_heads " + std::to_string(heads));
  m.head_size = head_size == d_model / heads && d_model % heads == 0 ? 0 : head_size;  // 0: the coupled size
  // Estimated in double first: parameter_count of sizes up to 2^24 would overflow int64.
  const double C = double(d_model), A = double(heads) * double(head_size > 0 ? head_size : d_model / heads);
  const double params = double(layers) * (8.0 * C * C + 4.0 * A * C) + double(vocab + seq) * C;
  if (params > double(int64_t(1) << 40)) {
    char count[32];
    std::snprintf(count, sizeof count, "%.3g", params);
    throw UserError(where + ": a model of ~" + count + " parameters is not plausible");
  }
  return m;
}

// The positions of a stored model's description: "learned" (or absent: written before RoPE) or
// "rope" with its base.
void set_positions(GPTConfig& m, const std::string& kind, double theta, const std::string& where) {
  if (kind != "learned" && kind != "rope")
    throw UserError(where + ": position_embedding \"" + kind + "\" is not one of learned, rope");
  if (kind == "rope" && (!(theta > 1 && theta <= 1e12) || m.head_dim() % 2 != 0))
    throw UserError(where + ": rotary positions with rope_theta " + std::to_string(theta) + " and head size " +
                    std::to_string(m.head_dim()) + " (allowed: rope_theta in (1, 1e12], an even head size)");
  m.rope = kind == "rope";
  m.rope_theta = theta;
}

// Partial rotary of a stored model's description (after its positions): the turned dims of a head.
void set_rope_dims(GPTConfig& m, int64_t dims, const std::string& where) {
  if (dims != 0 && (!m.rope || dims < 2 || dims % 2 != 0 || dims >= m.head_dim()))
    throw UserError(where + ": rotary positions turning " + std::to_string(dims) + " dims of a head of " +
                    std::to_string(m.head_dim()) + (m.rope ? "" : " without rotary positions") +
                    " (allowed: an even number from 2 to below the head size)");
  m.rope_dims = dims;
}

// Sliding-window attention of a stored model's description: the positions a query sees (0: all).
void set_sliding_window(GPTConfig& m, int64_t window, const std::string& where) {
  if (window < 0 || window > 1000000000)
    throw UserError(where + ": sliding window " + std::to_string(window) + " (allowed: 0 = none, or 1 to 1e9 positions)");
  m.sliding_window = window;
}

// Linear rope scaling (position interpolation) of a stored model's description.
void set_linear_rope_scaling(GPTConfig& m, double factor, const std::string& where) {
  if (!(factor >= 1 && factor <= 1e6))
    throw UserError(where + ": linear rope scaling with factor " + number_g(factor) + " (allowed: 1 to 1e6)");
  m.rope_factor = factor;
  m.rope_linear = true;
}

// YaRN's rope scaling of a stored model's description, checked as the config keys are.
void set_yarn_rope_scaling(GPTConfig& m, double factor, double original, double beta_fast, double beta_slow,
                           double attention_factor, const std::string& where) {
  if (!(factor >= 1 && factor <= 1e6 && original >= 1 && original <= 1e9 && beta_slow > 0 && beta_fast > beta_slow &&
        beta_fast <= 1e6 && attention_factor > 0 && attention_factor <= 100))
    throw UserError(where + ": yarn rope scaling with factor " + number_g(factor) + ", original positions " +
                    number_g(original) + ", beta_fast " + number_g(beta_fast) + ", beta_slow " + number_g(beta_slow) +
                    ", attention factor " + number_g(attention_factor) +
                    " (allowed: factor 1 to 1e6, original positions 1 to 1e9, 0 < beta_slow < beta_fast <= 1e6, "
                    "attention factor above 0, at most 100)");
  m.rope_factor = factor;
  m.rope_linear = false;
  m.rope_yarn = true;
  m.rope_original_positions = original;
  m.rope_beta_fast = beta_fast;
  m.rope_beta_slow = beta_slow;
  m.rope_attention_factor = attention_factor;
}

// LongRoPE's rope scaling of a stored model's description (after its partial rotary): one long and
// one short factor a turned pair, checked as the config keys are.
void set_longrope_rope_scaling(GPTConfig& m, double factor, double original, double attention_factor,
                               const std::vector<double>& long_factors, const std::vector<double>& short_factors,
                               const std::string& where) {
  const size_t pairs = size_t(m.rope_dims > 0 ? m.rope_dims : m.head_dim()) / 2;
  auto positive = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x) && x > 0; });
  };
  if (!(factor > 0 && factor <= 1e6 && original >= 1 && original <= 1e9 && attention_factor > 0 &&
        attention_factor <= 100 && long_factors.size() == pairs && short_factors.size() == pairs &&
        positive(long_factors) && positive(short_factors)))
    throw UserError(where + ": longrope rope scaling with factor " + number_g(factor) + ", original positions " +
                    number_g(original) + ", attention factor " + number_g(attention_factor) + ", " +
                    std::to_string(long_factors.size()) + " long and " + std::to_string(short_factors.size()) +
                    " short factors (allowed: factor above 0, at most 1e6, original positions 1 to 1e9, attention factor above 0, "
                    "at most 100, and " + std::to_string(pairs) + " factors above 0 each, one a turned pair)");
  m.rope_factor = factor;
  m.rope_linear = m.rope_yarn = false;
  m.rope_longrope = true;
  m.rope_original_positions = original;
  m.rope_attention_factor = attention_factor;
  m.rope_long_factors = long_factors;
  m.rope_short_factors = short_factors;
}

// Llama 3's rope scaling of a stored model's description (absent: none), checked as the config keys are.
void set_rope_scaling(GPTConfig& m, double factor, double low, double high, double original, const std::string& where) {
  if (!(factor >= 1 && factor <= 1e6 && low > 0 && high > low && high <= 1e6 && original >= 1 && original <= 1e9))
    throw UserError(where + ": rope scaling with factor " + number_g(factor) + ", low_freq_factor " + number_g(low) +
                    ", high_freq_factor " + number_g(high) + ", original positions " + number_g(original) +
                    " (allowed: factor 1 to 1e6, 0 < low_freq_factor < high_freq_factor <= 1e6, original positions 1 "
                    "to 1e9)");
  m.rope_factor = factor;
  m.rope_linear = false;
  m.rope_low_freq_factor = low;
  m.rope_high_freq_factor = high;
  m.rope_original_positions = original;
}

// The normalization of a stored model's description: "layernorm" (or absent: written before RMSNorm)
// or "rmsnorm".
void set_norm(GPTConfig& m, const std::string& kind, const std::string& where) {
  if (kind != "layernorm" && kind != "rmsnorm")
    throw UserError(where + ": norm \"" + kind + "\" is not one of layernorm, rmsnorm");
  m.rmsnorm = kind == "rmsnorm";
}

// The norms' epsilon of a stored model's description: in (0, 0.1], as model.norm_eps.
void set_norm_eps(GPTConfig& m, double eps, const std::string& where) {
  if (!(eps > 0 && eps <= 0.1)) throw UserError(where + ": norm_eps " + number_g(eps) + " (allowed: above 0, at most 0.1)");
  m.norm_eps = eps;
}

// The key-value heads of a stored model's description: 0 (or absent: written before grouped-query
// attention) or a divisor of n_heads.
void set_kv_heads(GPTConfig& m, int64_t kv_heads, const std::string& where) {
  if (kv_heads < 0 || kv_heads > m.n_heads || (kv_heads > 0 && m.n_heads % kv_heads != 0))
    throw UserError(where + ": n_kv_heads " + std::to_string(kv_heads) + " (allowed: 0, or a divisor of n_heads " +
                    std::to_string(m.n_heads) + ")");
  m.n_kv_heads = kv_heads == m.n_heads ? 0 : kv_heads;
}

// The MLP of a stored model's description: "gelu" (or absent: written before SwiGLU) or "swiglu",
// and its hidden width (0 or absent: 4 x d_model).
void set_mlp(GPTConfig& m, const std::string& kind, int64_t ffn_hidden, const std::string& where) {
  if (kind != "gelu" && kind != "swiglu") throw UserError(where + ": mlp \"" + kind + "\" is not one of gelu, swiglu");
  if (ffn_hidden < 0 || ffn_hidden > INT32_MAX)
    throw UserError(where + ": ffn_hidden_size " + std::to_string(ffn_hidden) + " (allowed: 0 to 2147483647)");
  m.swiglu = kind == "swiglu";
  m.ffn_hidden = ffn_hidden;
  // As shape_of's estimate: the MLP's weights alone must count in 64 bits.
  if (double(m.n_layers) * 3.0 * double(m.mlp_width()) * double(m.d_model) > double(int64_t(1) << 40))
    throw UserError(where + ": an MLP of width " + std::to_string(m.mlp_width()) + " in " + std::to_string(m.n_layers) +
                    " layers of d_model " + std::to_string(m.d_model) + " is not plausible");
}

StoredModel open_checkpoint(const std::string& path, const std::string& verb) {
  std::string why;
  const std::optional<std::string> chosen = checkpoint_named_by(path, &why);
  if (!chosen) throw UserError(path + ": no valid checkpoint in it" + (why.empty() ? "" : " (" + why + ")"));
  if (*chosen != path)
    std::fprintf(stderr, "note: %s %s, the newest valid checkpoint in %s%s%s\n", verb.c_str(), chosen->c_str(), path.c_str(),
                 why.empty() ? "" : "; skipped: ", why.c_str());
  StoredModel s;
  s.dir = *chosen;
  auto reader = std::make_shared<CheckpointReader>([&] {
    try {
      return CheckpointReader::open(s.dir, CheckpointVerify::kSizes);
    } catch (const CheckpointError& e) {
      throw UserError(e.what());
    }
  }());
  std::string config_text;
  try {
    const JsonValue meta = parse_json(reader->meta());
    const JsonValue* text = meta.find("config");
    if (!text || !reader->has_blob("params")) throw UserError(s.dir + ": not a training checkpoint (no config or params)");
    config_text = text->as_string();
  } catch (const CheckpointError& e) {
    throw UserError(s.dir + ": its meta: " + e.what());
  }
  s.config = load_config_text(config_text, s.dir + " (config)", {});
  const auto& mc = s.config->model;
  s.shape = shape_of(mc.vocab_size, mc.seq_len, mc.n_layers, mc.n_heads, mc.d_model, mc.head_dim, s.dir + " (config)");
  s.shape.qk_norm = mc.qk_norm;
  set_positions(s.shape, mc.position_embedding, mc.rope_theta, s.dir + " (config)");
  set_rope_dims(s.shape, s.shape.rope ? partial_rope_dims(s.shape.head_dim(), mc.partial_rotary_factor) : 0,
                s.dir + " (config)");
  set_sliding_window(s.shape, mc.sliding_window, s.dir + " (config)");
  if (s.shape.rope && mc.rope_scaling == "linear") set_linear_rope_scaling(s.shape, mc.rope_scaling_factor, s.dir + " (config)");
  if (s.shape.rope && mc.rope_scaling == "yarn")
    set_yarn_rope_scaling(s.shape, mc.rope_scaling_factor, double(mc.rope_original_positions), mc.rope_beta_fast,
                          mc.rope_beta_slow,
                          mc.rope_attention_factor > 0 ? mc.rope_attention_factor : yarn_attention_factor(mc.rope_scaling_factor),
                          s.dir + " (config)");
  if (s.shape.rope && mc.rope_scaling == "llama3")
    set_rope_scaling(s.shape, mc.rope_scaling_factor, mc.rope_low_freq_factor, mc.rope_high_freq_factor,
                     double(mc.rope_original_positions), s.dir + " (config)");
  if (s.shape.rope && mc.rope_scaling == "longrope")
    set_longrope_rope_scaling(
        s.shape, mc.rope_scaling_factor, double(mc.rope_original_positions),
        mc.rope_attention_factor > 0 ? mc.rope_attention_factor
                                     : longrope_attention_factor(mc.rope_scaling_factor, double(mc.rope_original_positions)),
        parse_rope_factors(*s.config, "rope_long_factor"), parse_rope_factors(*s.config, "rope_short_factor"),
        s.dir + " (config)");
  set_mlp(s.shape, mc.mlp, dense_ffn_hidden_size(*s.config), s.dir + " (config)");  // as training resolved it
  set_norm(s.shape, mc.norm, s.dir + " (config)");
  set_norm_eps(s.shape, mc.norm_eps, s.dir + " (config)");
  s.shape.bias = mc.bias;
  s.shape.qkv_bias = !mc.bias && mc.qkv_bias;
  set_kv_heads(s.shape, mc.n_kv_heads, s.dir + " (config)");
  s.shape.tied_head = mc.tie_embeddings;
  const MoESection& e = s.config->moe;
  set_experts(s.shape, e.experts, e.top_k, e.capacity_factor, e.aux_loss_coef, e.layer_freq, e.first_dense_layers,
              e.shared_experts,
              e.ffn_hidden_size, e.renormalize, e.shared_gate, e.dropless, s.dir + " (config)");
  // The params blob must hold the model its config describes (an edited config could ask for far
  // more memory than there is).
  const BlobInfo& info = reader->blob_info("params");
  if (!parse_dtype(info.dtype, s.stored) || !is_float(s.stored))
    throw UserError(s.dir + ": params blob has dtype " + info.dtype);
  s.numel = stored_numel(s.shape);
  if (info.bytes != uint64_t(s.numel) * dtype_size(s.stored))
    throw UserError(s.dir + ": params blob holds " + std::to_string(info.bytes) + " bytes; the model of its config needs " +
                    std::to_string(uint64_t(s.numel) * dtype_size(s.stored)));
  const uint64_t bytes = info.bytes;
  s.read = [reader, bytes](void* dst) {
    try {
      reader->read_blob("params", static_cast<char*>(dst), bytes);
    } catch (const CheckpointError& e) {
      throw UserError(e.what());
    }
  };
  // The named parameters alone: the chunks of the blob holding them read and checked
  // (stream_whole_tensors), each wanted tensor's elements widened to f32 as they pass. Chunks are
  // whole elements (multiples of 8).
  s.read_some = [reader, specs = GPT::parameter_specs(s.shape),
                 stored = s.stored](const std::function<float*(const std::string&)>& dst) {
    const size_t e = dtype_size(stored);
    try {
      stream_whole_tensors(
          *reader, "params", specs, e, [&](const std::string& t) { return dst(t) != nullptr; },
          [&](const std::string& t, uint64_t at, const char* bytes, size_t n) {
            float* into = dst(t) + at / e;
            for (size_t k = 0; k < n / e; ++k) {
              const char* x = bytes + k * e;
              if (stored == DType::f32) std::memcpy(into + k, x, 4);
              else into[k] = stored == DType::bf16 ? to_float(*reinterpret_cast<const bf16_t*>(x))
                                                   : to_float(*reinterpret_cast<const f16_t*>(x));
            }
          });
    } catch (const CheckpointError& err) {
      throw UserError(err.what());
    }
  };
  return s;
}

StoredModel open_export(const std::string& dir) {
  StoredModel s;
  s.dir = dir;
  const std::string json = dir + "/model.json", values = dir + "/params.f32";
  const JsonValue root = parse_json(read_text_file(json), json);
  try {
    const JsonValue& c = root.at("config");
    s.shape = shape_of(c.at("vocab_size").as_int(), c.at("seq_len").as_int(), c.at("n_layers").as_int(),
                       c.at("n_heads").as_int(), c.at("d_model").as_int(),
                       c.find("head_dim") ? c.at("head_dim").as_int() : 0, json);  // absent: d_model / n_heads
    if (const JsonValue* qk = c.find("qk_norm")) s.shape.qk_norm = qk->as_bool();  // absent: none
    if (const JsonValue* kind = c.find("position_embedding"))
      set_positions(s.shape, kind->as_string(), c.at("rope_theta").as_double(), json);
    if (const JsonValue* dims = c.find("rope_dims")) set_rope_dims(s.shape, dims->as_int(), json);  // absent: whole heads
    if (const JsonValue* w = c.find("sliding_window")) set_sliding_window(s.shape, w->as_int(), json);  // absent: none
    if (const JsonValue* scaling = c.find("rope_scaling")) {  // absent: unscaled
      if (scaling->as_string() == "linear") {
        set_linear_rope_scaling(s.shape, c.at("rope_scaling_factor").as_double(), json);
      } else if (scaling->as_string() == "yarn") {
        set_yarn_rope_scaling(s.shape, c.at("rope_scaling_factor").as_double(), c.at("rope_original_positions").as_double(),
                              c.at("rope_beta_fast").as_double(), c.at("rope_beta_slow").as_double(),
                              c.at("rope_attention_factor").as_double(), json);
      } else if (scaling->as_string() == "llama3") {
        set_rope_scaling(s.shape, c.at("rope_scaling_factor").as_double(), c.at("rope_low_freq_factor").as_double(),
                         c.at("rope_high_freq_factor").as_double(), c.at("rope_original_positions").as_double(), json);
      } else if (scaling->as_string() == "longrope") {
        auto numbers = [&](const char* key) {
          std::vector<double> v;
          for (const JsonValue& x : c.at(key).items) v.push_back(x.as_double());
          return v;
        };
        set_longrope_rope_scaling(s.shape, c.at("rope_scaling_factor").as_double(),
                                  c.at("rope_original_positions").as_double(), c.at("rope_attention_factor").as_double(),
                                  numbers("rope_long_factors"), numbers("rope_short_factors"), json);
      } else {
        throw UserError(json + ": rope_scaling \"" + scaling->as_string() + "\" is not llama3, linear, yarn or longrope");
      }
    }
    const JsonValue *mlp = c.find("mlp"), *ffn = c.find("ffn_hidden_size");
    set_mlp(s.shape, mlp ? mlp->as_string() : "gelu", ffn ? ffn->as_int() : 0, json);
    if (const JsonValue* norm = c.find("norm")) set_norm(s.shape, norm->as_string(), json);
    if (const JsonValue* eps = c.find("norm_eps")) set_norm_eps(s.shape, eps->as_double(), json);  // absent: 1e-5
    if (const JsonValue* bias = c.find("bias")) s.shape.bias = bias->as_bool();                    // absent: true
    if (const JsonValue* qkv = c.find("qkv_bias")) s.shape.qkv_bias = !s.shape.bias && qkv->as_bool();  // absent: false
    if (const JsonValue* tie = c.find("tie_embeddings")) s.shape.tied_head = tie->as_bool();  // absent: tied
    if (const JsonValue* kv = c.find("n_kv_heads")) set_kv_heads(s.shape, kv->as_int(), json);  // absent: n_heads
    // Its parameter list must be the whole model's, in order: the layout params.f32 is read in.
    if (const JsonValue* moe = c.find("moe"))
      set_experts(s.shape, moe->at("experts").as_int(), moe->at("top_k").as_int(), moe->at("capacity_factor").as_double(),
                  moe->at("aux_loss_coef").as_double(), moe->at("layer_freq").as_int(),
                  moe->find("first_dense_layers") ? moe->at("first_dense_layers").as_int() : 0,
                  moe->find("shared_experts") ? moe->at("shared_experts").as_int() : 0,
                  moe->find("ffn_hidden_size") ? moe->at("ffn_hidden_size").as_int() : 0,
                  moe->find("renormalize") ? moe->at("renormalize").as_bool() : true,
                  moe->find("shared_gate") && moe->at("shared_gate").as_bool(),
                  moe->find("dropless") && moe->at("dropless").as_bool(), json);
    const JsonValue& params = root.at("params");
    // The list's length first (a dense block has 12 tensors, 8 without linear biases (9 with qkv's), 2 more
    // with QK-norm;
    // a block with experts 5 (7 with biases, 6 with qkv's) and an MLP's 4 (2 without biases) for every
    // expert and the shared MLP; both 2 fewer with RMSNorm; wte, wpe (not with rotary positions) and
    // the final norm's two (RMSNorm: one), and an untied head), before a config claiming a huge
    // model is laid out.
    const int64_t blocks_with_experts = s.shape.moe.layers(s.shape.n_layers), norm_biases = s.shape.rmsnorm ? 0 : 1;
    const int64_t linear_biases = s.shape.bias ? 2 : s.shape.qkv_bias ? 1 : 0, mlp_tensors = s.shape.bias ? 4 : 2;
    const int64_t qk_norms = s.shape.qk_norm ? 2 : 0;
    const int64_t tensors =
        (s.shape.rope ? 2 : 3) + norm_biases + (s.shape.tied_head ? 0 : 1) +
        (4 + linear_biases + qk_norms + mlp_tensors + 2 * norm_biases) * (s.shape.n_layers - blocks_with_experts) +
        (5 + linear_biases + qk_norms + 2 * norm_biases +
         mlp_tensors * (s.shape.moe.experts + (s.shape.moe.shared_experts > 0 ? 1 : 0)) +
         (s.shape.moe.shared_gate ? 1 : 0)) *
            blocks_with_experts;
    if (int64_t(params.items.size()) != tensors)
      throw UserError(json + ": its parameter list has " + std::to_string(params.items.size()) +
                      " tensors; the GPT model of its config has " + std::to_string(tensors));
    const std::vector<ParameterSpec> specs = GPT::parameter_specs(s.shape);
    bool same = params.items.size() == specs.size();
    int64_t offset = 0;
    for (size_t i = 0; same && i < specs.size(); ++i) {
      same = params.items[i].at("name").as_string() == specs[i].name && params.items[i].at("offset").as_int() == offset;
      const JsonValue& shape = params.items[i].at("shape");  // redundant with the config, so it must agree
      same = same && int64_t(shape.items.size()) == specs[i].shape.rank;
      for (size_t d = 0; same && d < shape.items.size(); ++d)
        same = shape.items[d].as_int() == specs[i].shape.dims[d];
      offset += specs[i].shape.numel();
    }
    if (const JsonValue* padded = c.find("padded_vocab"); padded && padded->as_int() != s.shape.padded_vocab())
      throw UserError(json + ": padded_vocab " + padded->text + " is not vocab_size " +
                      std::to_string(s.shape.vocab_size) + " padded to a multiple of " + std::to_string(kVocabPadMultiple) +
                      " (" + std::to_string(s.shape.padded_vocab()) + ")");
    if (!same) throw UserError(json + ": its parameter list is not the whole GPT model's of its config");
  } catch (const CheckpointError& e) {
    throw UserError(json + ": " + e.what());
  }
  s.numel = stored_numel(s.shape);
  std::error_code ec;
  const uintmax_t size = fs::file_size(values, ec);
  if (ec) throw UserError(values + ": cannot read it: " + ec.message());
  if (size != uint64_t(s.numel) * 4)
    throw UserError(values + ": holds " + std::to_string(size) + " bytes; the model of model.json needs " +
                    std::to_string(uint64_t(s.numel) * 4));
  s.read = [values, size](void* dst) {
    std::ifstream f(values, std::ios::binary);
    if (!f.read(static_cast<char*>(dst), std::streamsize(size))) throw UserError(values + ": cannot read it");
  };
  s.read_some = [values, specs = GPT::parameter_specs(s.shape)](const std::function<float*(const std::string&)>& dst) {
    std::ifstream f(values, std::ios::binary);
    int64_t offset = 0;
    for (const ParameterSpec& p : specs) {
      if (float* into = dst(p.name)) {
        f.seekg(std::streamoff(offset * 4));
        if (!f.read(reinterpret_cast<char*>(into), std::streamsize(p.shape.numel() * 4)))
          throw UserError(values + ": cannot read " + p.name);
      }
      offset += p.shape.numel();
    }
  };
  return s;
}

StoredModel open_hf(const std::string& dir) {
  StoredModel s;
  s.dir = dir;
  const std::string where = dir + "/config.json";
  const GPTConfig c = read_hf_config(dir);
  s.shape = shape_of(c.vocab_size, c.seq_len, c.n_layers, c.n_heads, c.d_model, c.head_size, where);
  s.shape.qk_norm = c.qk_norm;
  set_positions(s.shape, c.rope ? "rope" : "learned", c.rope_theta, where);
  set_rope_dims(s.shape, c.rope_dims, where);
  set_sliding_window(s.shape, c.sliding_window, where);
  if (c.rope_linear) set_linear_rope_scaling(s.shape, c.rope_factor, where);
  else if (c.rope_yarn)
    set_yarn_rope_scaling(s.shape, c.rope_factor, c.rope_original_positions, c.rope_beta_fast, c.rope_beta_slow,
                          c.rope_attention_factor, where);
  else if (c.rope_longrope)
    set_longrope_rope_scaling(s.shape, c.rope_factor, c.rope_original_positions, c.rope_attention_factor,
                              c.rope_long_factors, c.rope_short_factors, where);
  else set_rope_scaling(s.shape, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_positions, where);
  set_mlp(s.shape, c.swiglu ? "swiglu" : "gelu", c.ffn_hidden, where);
  set_norm(s.shape, c.rmsnorm ? "rmsnorm" : "layernorm", where);
  set_norm_eps(s.shape, c.norm_eps, where);
  set_kv_heads(s.shape, c.n_kv_heads, where);
  s.shape.bias = c.bias;
  s.shape.qkv_bias = c.qkv_bias;
  s.shape.tied_head = c.tied_head;
  set_experts(s.shape, c.moe.experts, c.moe.top_k, c.moe.capacity_factor, c.moe.aux_loss_coef, c.moe.layer_freq,
              c.moe.first_dense,
              c.moe.shared_experts, c.moe.ffn_hidden, c.moe.renormalize, c.moe.shared_gate, c.moe.dropless,
              where);  // Mixtral's, Qwen-MoE's
  // Its weights take at least 2 bytes a parameter: a config.json that claims more than
  // model.safetensors holds is found before anything is sized by it.
  const std::vector<std::string> files = hf_weight_files(dir);
  const std::string weights = files.size() == 1 ? files[0] : dir + "/model.safetensors.index.json";
  uint64_t bytes = 0;
  for (const std::string& file : files) {
    std::error_code ec;
    bytes += fs::file_size(file, ec);
    if (ec) throw UserError(file + ": cannot read it: " + ec.message());
  }
  if (bytes < 2 * uint64_t(s.shape.parameter_count()))
    throw UserError(weights + ": holds " + std::to_string(bytes) + " bytes, too few for the " +
                    hf_family_name(s.shape) + " of config.json (" +
                    std::to_string(s.shape.parameter_count()) + " parameters)");
  s.numel = stored_numel(s.shape);
  const GPTConfig shape = s.shape;
  s.read = [dir, shape](void* dst) { read_hf_weights(dir, shape, static_cast<float*>(dst)); };
  s.read_some = [dir, shape](const std::function<float*(const std::string&)>& dst) { read_hf_weights(dir, shape, dst); };
  return s;
}

}  // namespace

std::vector<float> StoredModel::read_f32() const {
  std::vector<float> values(static_cast<size_t>(numel));
  if (stored == DType::f32) {
    read(values.data());
    return values;
  }
  std::vector<char> raw(size_t(numel) * dtype_size(stored));
  read(raw.data());
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = stored == DType::bf16 ? to_float(reinterpret_cast<const bf16_t*>(raw.data())[i])
                                      : to_float(reinterpret_cast<const f16_t*>(raw.data())[i]);
  return values;
}

std::map<std::string, std::vector<float>> StoredModel::read_f32_tensors(const std::set<std::string>& names) const {
  std::map<std::string, std::vector<float>> out;
  std::map<std::string, int64_t> at;  // in the whole layout
  int64_t offset = 0;
  for (const ParameterSpec& s : GPT::parameter_specs(shape)) {
    if (names.count(s.name)) {
      out[s.name].assign(size_t(s.shape.numel()), 0.0f);
      at[s.name] = offset;
    }
    offset += s.shape.numel();
  }
  TRELLIS_CHECK(out.size() == names.size(), "read_f32_tensors: a name that is not a parameter of " + dir);
  if (read_some) {
    read_some([&](const std::string& name) { return out.count(name) ? out[name].data() : nullptr; });
    return out;
  }
  const std::vector<float> whole = read_f32();
  for (auto& [name, values] : out) std::copy_n(whole.begin() + at[name], values.size(), values.begin());
  return out;
}

std::string resolve_model_dir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "manifest.json", ec) ||
      fs::exists(fs::path(path) / "model.json", ec) || fs::exists(fs::path(path) / "config.json", ec))
    return path;
  try {
    return checkpoint_named_by(path).value_or(path);
  } catch (const std::exception&) {
    return path;  // open_stored_model says what is wrong with it
  }
}

StoredModel open_stored_model(const std::string& path, const std::string& verb) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw UserError(path + (fs::exists(path, ec) ? ": is a file, not a checkpoint, export or Hugging Face directory"
                                                 : ": no such checkpoint or export directory"));
  const bool checkpoint = fs::exists(fs::path(path) / "manifest.json", ec);
  const bool is_export = !checkpoint && fs::exists(fs::path(path) / "model.json", ec);
  const bool hf = !checkpoint && !is_export && is_hf_model_dir(path);
  if (!checkpoint && !is_export && !hf && fs::exists(fs::path(path) / "config.json", ec))
    throw UserError(path + ": a Hugging Face directory without model.safetensors or model.safetensors.index.json "
                           "(pytorch_model.bin is not read): save the model with save_pretrained(DIR)");
  return is_export ? open_export(path) : hf ? open_hf(path) : open_checkpoint(path, verb);
}

std::string training_vocabulary_path(const StoredModel& stored) {
  if (!stored.config || stored.config->data.source != "file") return "";
  const std::string& path = stored.config->data.path;
  std::istringstream blend(path);  // a path, or "w1 PATH1 w2 PATH2 ...": the first path
  std::vector<std::string> parts;
  for (std::string s; blend >> s;) parts.push_back(s);
  return vocabulary_path(parts.size() > 1 ? parts[1] : path);
}

}  // namespace trellis
