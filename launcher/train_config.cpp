// Loading a run's config: TOML file -> --set overrides -> validation, each error one line naming
// the file, the key and what is allowed; plus the resolved config as TOML and docs/config.md.
#include "launcher/train_config.h"
#include "models/gpt.h"

#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "launcher/config_keys.h"

#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>  // Debian 12's TOML++ 3.3 ships this name only
#endif

namespace trellis {
namespace {

using config_keys::KeySpec;
using config_keys::KeyType;

std::string node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "value";
  }
}

// "string \"4\"", "float 2.5", "table": how a wrong-typed value is shown in a message.
std::string describe_node(const toml::node& n) {
  std::ostringstream s;
  if (n.is_table() || n.is_array()) return node_type_name(n);
  s << node_type_name(n) << ' ';
  if (n.is_string()) return s.str() + '"' + n.as_string()->get() + '"';
  n.visit([&](auto&& v) { s << toml::toml_formatter{v}; });
  return s.str();
}

// Assigns a TOML value to a key, converting integers to floats where the key is a float.
void assign_node(const KeySpec& k, const toml::node& n, Config& c, const std::string& where) {
  auto wrong = [&]() {
    const char* article = k.type == KeyType::Int ? "an " : "a ";
    return UserError(where + ": " + k.full_name() + " must be " + article +
                     config_keys::type_name(k.type) + ", got " + describe_node(n));
  };
  switch (k.type) {
    case KeyType::Int:
      if (!n.is_integer()) throw wrong();
      k.int_ref(c) = n.as_integer()->get();
      break;
    case KeyType::Float:
      if (n.is_integer()) k.float_ref(c) = static_cast<double>(n.as_integer()->get());
      else if (n.is_floating_point()) k.float_ref(c) = n.as_floating_point()->get();
      else throw wrong();
      break;
    case KeyType::Bool:
      if (!n.is_boolean()) throw wrong();
      k.bool_ref(c) = n.as_boolean()->get();
      break;
    case KeyType::String:
      if (!n.is_string()) throw wrong();
      k.string_ref(c) = n.as_string()->get();
      // A NUL (TOML's \u0000) would cut every path and message built from the value short.
      if (k.string_ref(c).find('\0') != std::string::npos)
        throw UserError(where + ": " + k.full_name() + " holds a NUL character (\\u0000), which no path or name may hold");
      break;
  }
  config_keys::check_allowed(k, c, where);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path + ": cannot read config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot read config file: " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// `replaced`: "section.key" names a --set gives; the file's values of those are not read (the
// override wins, so a bad value in the file can be fixed from the command line).
void apply_table(const toml::table& root, Config& c, const std::string& path, const std::set<std::string>& replaced) {
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (!config_keys::is_section(section)) {
      const char* what = section_node.is_table() ? "unknown section [" : "unknown top-level key ";
      throw UserError(path + ": " + what + section + (section_node.is_table() ? "]" : "") +
                      " (known sections: " + config_keys::section_list() + ")");
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr)
      throw UserError(path + ": " + section + " must be a table ([" + section + "]), got " +
                      describe_node(section_node));
    for (auto&& [key, node] : *table) {
      const KeySpec* k = config_keys::find_key(section, key.str());
      if (k == nullptr)
        throw UserError(path + ": unknown key " + section + "." + std::string(key.str()) +
                        " (known keys in [" + section + "]: " + config_keys::key_list(section) + ")");
      if (!replaced.count(section + "." + std::string(key.str()))) assign_node(*k, node, c, path);
    }
  }
}

// " (allowed: ...)" for a key whose values are limited, else nothing.
static std::string allowed_suffix(const KeySpec& k) {
  const std::string allowed = config_keys::allowed_text(k);
  return allowed.empty() ? "" : " (allowed: " + allowed + ")";
}

// "section.key=value" split in three, spaces around each part dropped ("train.steps = 5" as one
// argument too); nullopt when it has no '=' or no '.' before it.
struct OverrideParts {
  std::string section, name, value;
};
std::optional<OverrideParts> split_override(const std::string& item) {
  const size_t eq = item.find('='), dot = item.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) return std::nullopt;
  auto trim = [](std::string s) {
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  return OverrideParts{trim(item.substr(0, dot)), trim(item.substr(dot + 1, eq - dot - 1)), trim(item.substr(eq + 1))};
}

// Applies one "section.key=value" override, converting the text by the key's type.
void apply_override(const std::string& item, Config& c) {
  const std::string where = "--set " + item;
  const std::optional<OverrideParts> parts = split_override(item);
  if (!parts) throw UserError(where + ": expected section.key=value");
  const std::string& section = parts->section;
  const std::string& name = parts->name;
  std::string value = parts->value;
  if (!config_keys::is_section(section))
    throw UserError(where + ": unknown section [" + section +
                    "] (known sections: " + config_keys::section_list() + ")");
  const KeySpec* k = config_keys::find_key(section, name);
  if (k == nullptr)
    throw UserError(where + ": unknown key " + section + "." + name + " (known keys in [" +
                    section + "]: " + config_keys::key_list(section) + ")");
  const char* first = value.data();
  const char* last = value.data() + value.size();
  switch (k->type) {
    case KeyType::Int: {
      int64_t v = 0;
      auto r = std::from_chars(first, last, v);
      if (value.empty() || r.ec != std::errc() || r.ptr != last)
        throw UserError(where + ": " + k->full_name() + " must be an integer" +
                        (r.ec == std::errc::result_out_of_range ? " of 64 bits" : "") + allowed_suffix(*k));
      k->int_ref(c) = v;
      break;
    }
    case KeyType::Float: {
      errno = 0;
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      // An underflow (ERANGE, |v| < 1) is a number: the f32 check then says it would be 0.
      if (value.empty() || end != value.c_str() + value.size() || (errno == ERANGE && !(std::fabs(v) < 1)) ||
          !std::isfinite(v))
        throw UserError(where + ": " + k->full_name() + " must be a finite number" + allowed_suffix(*k));
      k->float_ref(c) = v;
      break;
    }
    case KeyType::Bool:
      if (value != "true" && value != "false") throw UserError(where + ": not a boolean (true or false)");
      k->bool_ref(c) = value == "true";
      break;
    case KeyType::String:
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
        value = value.substr(1, value.size() - 2);  // quotes are optional
      k->string_ref(c) = value;
      break;
  }
  config_keys::check_allowed(*k, c, where);
}

// Checks that involve more than one key.
void validate_relations(const Config& c) {
  const std::string& p = c.path;
  // Sizes whose products index tensors or count bytes must fit in 64 bits (with room): an absurd
  // value gets one line here rather than an overflow that blames another key, or a memory plan
  // that wraps to a small figure.
  auto beyond = [&](const std::string& product, double value, const char* what) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", value);
    return UserError(p + ": " + product + " = " + n + " " + what);
  };
  const double B = double(c.train.micro_batch), T = double(c.model.seq_len), C = double(c.model.d_model),
               L = double(c.model.n_layers), V = double(c.model.vocab_size);
  // The widest MLP activation: the dense fc's output (F, SwiGLU 2F; F = model.ffn_hidden_size or 4C),
  // or a shared MLP's of moe.shared_experts x an expert's width Fe (named only where there is one).
  const bool shared = c.moe.shared_experts > 0, swiglu = c.model.mlp == "swiglu", ffn = c.model.ffn_hidden_size > 0,
             moe_ffn = c.moe.ffn_hidden_size > 0;
  const double F = ffn ? double(c.model.ffn_hidden_size) : 4 * C, fc = (swiglu ? 2 : 1) * F;
  const double Fe = moe_ffn ? double(c.moe.ffn_hidden_size) : 4 * C, fce = (swiglu ? 2 : 1) * Fe;
  const std::string fc_name = ffn ? std::string(swiglu ? "2 x " : "") + "model.ffn_hidden_size"
                                  : std::string(swiglu ? "8" : "4") + " x model.d_model";
  const std::string fce_name = moe_ffn ? std::string(swiglu ? "2 x " : "") + "moe.ffn_hidden_size"
                                       : std::string(swiglu ? "8" : "4") + " x model.d_model";
  const double S = double(c.moe.shared_experts);
  if (const double elements = B * T * std::max({fc, fce * S, V}); elements >= 0x1p56)
    throw beyond("train.micro_batch x model.seq_len x max(" + fc_name +
                     (shared ? ", " + fce_name + " x moe.shared_experts" : "") + ", model.vocab_size)",
                 elements, "elements is beyond what a tensor can index (allowed: below 2^56)");
  if (const double elements = L * B * T * (fc + fce * S); elements >= 0x1p56)
    throw beyond("model.n_layers x train.micro_batch x model.seq_len x " +
                     (shared ? "(" + fc_name + " + " + fce_name + " x moe.shared_experts)" : fc_name),
                 elements,
                 "elements of activations is beyond what the memory plan can count (allowed: below 2^56)");
  // attention 4 C^2, the dense MLP (fc + F) C, each expert and the shared MLP (fce + Fe) C a width
  const double mlp_c = fc + F + (fce + Fe) * (double(c.moe.experts) + S), heads = c.model.tie_embeddings ? 1 : 2;
  if (const double params = L * (4 * C + mlp_c) * C + (heads * V + T) * C; params >= 0x1p50)
    throw beyond("model.n_layers x (4 x model.d_model + " + fc_name + " + " +
                     (ffn ? "model.ffn_hidden_size" : "4 x model.d_model") +
                     (c.moe.experts > 0 ? " + (" + fce_name + " + " + (moe_ffn ? "moe.ffn_hidden_size" : "4 x model.d_model") +
                                              ") x (moe.experts + moe.shared_experts)"
                                        : "") +
                     ") x model.d_model + (" +
                     (heads > 1 ? "2 x " : "") + "model.vocab_size + model.seq_len) x model.d_model",
                 params, "parameters is beyond what the memory plan can count (allowed: below 2^50)");
  if (c.moe.experts > 0) {  // the experts' slots: int32 indices, and their activations in every block
    const double E = double(c.moe.experts), tokens = B * T;
    const double slots = c.moe.dropless ? double(c.moe.top_k) * tokens
                                        : E * std::min(tokens, std::ceil(c.moe.capacity_factor * double(c.moe.top_k) * tokens / E));
    if (c.moe.dropless && tokens >= 0x1p24)  // the routing's counts are f32, exact below 2^24
      throw beyond("train.micro_batch x model.seq_len (dropless: an expert's count of them)", tokens,
                   "tokens is beyond what the routing counts exactly (allowed: below 2^24)");
    if (slots >= 0x1p31)
      throw beyond(c.moe.dropless ? "moe.top_k x train.micro_batch x model.seq_len (dropless: a slot per choice)"
                                  : "moe.experts x the capacity of a micro-batch (moe.capacity_factor x moe.top_k x "
                                    "train.micro_batch x model.seq_len / moe.experts)",
                   slots, "slots is beyond what a slot index can count (allowed: below 2^31)");
    // Dropless with expert parallelism, a rank's experts may take up to this many rows (MoEConfig::expert_rows).
    const double G = double(c.parallel.expert), K = double(c.moe.top_k);
    const double rows = c.moe.dropless && G > 1 ? G * tokens * std::min(K, std::floor(E / G)) : slots;
    if (rows >= 0x1p31)
      throw beyond("parallel.expert x train.micro_batch x model.seq_len x min(moe.top_k, moe.experts / parallel.expert) "
                   "(dropless: the rows a rank's experts may receive)",
                   rows, "rows is beyond what a slot index can count (allowed: below 2^31)");
    if (const double elements = L * rows * fce; elements >= 0x1p56)
      throw beyond("model.n_layers x the experts' slots x " + fce_name, elements,
                   "elements of activations is beyond what the memory plan can count (allowed: below 2^56)");
  }
  if (c.moe.experts > 0 && c.moe.first_dense_layers >= c.model.n_layers)
    throw UserError(p + ": moe.first_dense_layers = " + std::to_string(c.moe.first_dense_layers) +
                    " leaves no block with experts in model.n_layers = " + std::to_string(c.model.n_layers) +
                    " (allowed: less than model.n_layers)");
  if (c.moe.experts > 0 && c.moe.shared_gate && (c.moe.shared_experts == 0 || c.model.bias))
    throw UserError(p + ": moe.shared_gate = true gates the shared MLP of a model without biases (allowed: with "
                    "moe.shared_experts > 0 and model.bias = false, as Qwen1.5/2-MoE's)");
  if (c.moe.experts > 0 && c.moe.top_k > c.moe.experts)
    throw UserError(p + ": moe.top_k = " + std::to_string(c.moe.top_k) + " exceeds moe.experts = " +
                    std::to_string(c.moe.experts) + " (allowed: 1 to moe.experts)");
  if (c.model.head_dim == 0 && c.model.d_model % c.model.n_heads != 0)
    throw UserError(p + ": model.n_heads = " + std::to_string(c.model.n_heads) +
                    " does not divide model.d_model = " + std::to_string(c.model.d_model) +
                    " (allowed: a divisor, or a head size of its own in model.head_dim)");
  if (c.model.n_kv_heads > 0 && c.model.n_heads % c.model.n_kv_heads != 0)
    throw UserError(p + ": model.n_kv_heads = " + std::to_string(c.model.n_kv_heads) + " does not divide model.n_heads = " +
                    std::to_string(c.model.n_heads) + " (allowed: 0, or a divisor of model.n_heads)");
  const int64_t head_size = c.model.head_dim > 0 ? c.model.head_dim : c.model.d_model / c.model.n_heads;
  if (c.model.position_embedding == "rope" && head_size % 2 != 0)
    throw UserError(p + ": model.position_embedding = rope turns pairs of a head's dims: the head size " +
                    (c.model.head_dim > 0 ? "model.head_dim" : "model.d_model / model.n_heads") + " = " +
                    std::to_string(head_size) + " must be even");
  if (const int64_t turned = int64_t(double(head_size) * c.model.partial_rotary_factor);
      c.model.position_embedding == "rope" && (turned < 2 || turned % 2 != 0))
    throw UserError(p + ": model.partial_rotary_factor = " +
                    config_keys::toml_value(*config_keys::find_key("model", "partial_rotary_factor"), c) +
                    " turns " + std::to_string(turned) + " of a head's " + std::to_string(head_size) +
                    " dims (allowed: a factor that turns an even number of them, at least 2)");
  if (c.model.rope_scaling == "llama3" && !(c.model.rope_high_freq_factor > c.model.rope_low_freq_factor))
    throw UserError(p + ": model.rope_high_freq_factor = " +
                    config_keys::toml_value(*config_keys::find_key("model", "rope_high_freq_factor"), c) +
                    " must exceed model.rope_low_freq_factor = " +
                    config_keys::toml_value(*config_keys::find_key("model", "rope_low_freq_factor"), c) +
                    " (the wavelengths between them are blended)");
  if (c.model.rope_scaling == "yarn" && !(c.model.rope_beta_fast > c.model.rope_beta_slow))
    throw UserError(p + ": model.rope_beta_fast = " +
                    config_keys::toml_value(*config_keys::find_key("model", "rope_beta_fast"), c) +
                    " must exceed model.rope_beta_slow = " +
                    config_keys::toml_value(*config_keys::find_key("model", "rope_beta_slow"), c) +
                    " (the frequencies between them are blended)");
  if (c.model.position_embedding == "rope" && c.model.rope_scaling == "longrope") {
    parse_rope_factors(c, "rope_long_factor");
    parse_rope_factors(c, "rope_short_factor");
  }
  if (c.log.trace_step > 0 && c.log.trace_file.empty())
    throw UserError(p + ": log.trace_file is empty; log.trace_step = " + std::to_string(c.log.trace_step) +
                    " writes its trace there (allowed: a file path, e.g. \"runs/trace.json\")");
  if (c.optimizer.lr < c.optimizer.min_lr) {
    const auto* lr = config_keys::find_key("optimizer", "lr");
    const auto* min_lr = config_keys::find_key("optimizer", "min_lr");
    throw UserError(p + ": optimizer.lr = " + config_keys::toml_value(*lr, c) +
                    " is less than optimizer.min_lr = " + config_keys::toml_value(*min_lr, c) +
                    " (allowed: lr >= min_lr >= 0)");
  }
  if (c.data.source == "file" && c.data.path.empty())
    throw UserError(p + ": data.source = \"file\" needs data.path (a dataset made by prepare_data)");
  if (c.data.packing == "documents" && c.data.source != "file")
    throw UserError(p + ": data.packing = \"documents\" packs the documents of a dataset, which needs data.source = "
                        "\"file\" (data.source = \"" + c.data.source + "\" has none)");
  if (c.data.document_mask && c.data.eod_token < 0)
    throw UserError(p + ": data.document_mask = true needs data.eod_token, the end-of-document token's id (50256 for "
                        "GPT-2's <|endoftext|>; the one prepare_data --append-eod wrote)");
  if (c.data.eod_mask_loss && c.data.eod_token < 0)
    throw UserError(p + ": data.eod_mask_loss = true needs data.eod_token, the end-of-document token's id (50256 for "
                        "GPT-2's <|endoftext|>; the one prepare_data --append-eod wrote)");
  if (c.data.reset_positions && !c.data.document_mask)
    throw UserError(p + ": data.reset_positions = true counts positions from each document's start, which needs "
                        "data.document_mask = true");
  if (c.data.reset_positions && c.model.position_embedding != "learned")
    throw UserError(p + ": data.reset_positions = true resets learned positions; rotary ones (model.position_embedding = " +
                    c.model.position_embedding + ") are relative, so attention within documents is the same from any "
                    "start (allowed: with model.position_embedding = learned)");
  if (c.data.eod_token >= c.model.vocab_size)
    throw UserError(p + ": data.eod_token = " + std::to_string(c.data.eod_token) + " is not a token of model.vocab_size = " +
                    std::to_string(c.model.vocab_size) + " (allowed: -1 = none, or 0 to " +
                    std::to_string(c.model.vocab_size - 1) + ")");
  if (c.model.attention_dropout < 0 && c.model.attention_dropout != -1.0)
    throw UserError(p + ": model.attention_dropout = " +
                    config_keys::toml_value(*config_keys::find_key("model", "attention_dropout"), c) +
                    " (allowed: -1 = model.dropout, or [0, 1))");
  if (c.checkpoint.resume != "auto" && c.checkpoint.resume != "none" && c.checkpoint.resume.empty())
    throw UserError(p + ": checkpoint.resume is empty (allowed: auto, none, a checkpoint directory or a checkpoint.dir)");
  parse_stage_layers(c);
}

}  // namespace

int64_t dense_ffn_hidden_size(const Config& c) {
  return c.moe.experts > 0 && c.moe.layer_freq == 1 && c.moe.first_dense_layers == 0 ? 0 : c.model.ffn_hidden_size;
}

std::vector<double> parse_rope_factors(const Config& c, const char* key) {
  const std::string& text = std::string(key) == "rope_long_factor" ? c.model.rope_long_factor : c.model.rope_short_factor;
  const int64_t head = c.model.head_dim > 0 ? c.model.head_dim : c.model.d_model / c.model.n_heads;
  const int64_t pairs = int64_t(double(head) * c.model.partial_rotary_factor) / 2;
  auto bad = [&](const std::string& why) {
    return UserError(c.path + ": model." + key + " = \"" + (text.size() > 60 ? text.substr(0, 60) + "..." : text) +
                     "\" " + why + " (allowed with model.rope_scaling = longrope: " + std::to_string(pairs) +
                     " comma-separated numbers > 0, one a turned pair of a head's dims)");
  };
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.find_first_not_of(" \t") == std::string::npos || end == item.c_str() ||
        item.find_first_not_of(" \t", size_t(end - item.c_str())) != std::string::npos)
      throw bad(text.empty() ? "is empty" : "is not a list of numbers");
    if (!(std::isfinite(v) && v > 0)) throw bad("has the factor " + item);
    out.push_back(v);
    pos = comma + 1;
  }
  if (int64_t(out.size()) != pairs) throw bad("lists " + std::to_string(out.size()));
  return out;
}

std::vector<int> parse_stage_layers(const Config& c) {
  const std::string& text = c.parallel.stage_layers;
  const int64_t parts = c.parallel.pipeline * c.parallel.virtual_stages;
  auto bad = [&](const std::string& why) {
    return UserError(c.path + ": parallel.stage_layers = \"" + text + "\" " + why + " (allowed: empty = balanced " +
                     "by cost, or parallel.pipeline x parallel.virtual_stages = " + std::to_string(parts) +
                     " comma-separated integers >= 1, blocks per virtual stage, summing to model.n_layers = " +
                     std::to_string(c.model.n_layers) + ")");
  };
  std::vector<int> out;
  if (text.find_first_not_of(" \t") == std::string::npos) return out;
  int64_t sum = 0;
  size_t pos = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    size_t b = pos, e = comma;
    while (b < e && (text[b] == ' ' || text[b] == '\t')) ++b;
    while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
    int v = 0;
    const auto r = std::from_chars(text.data() + b, text.data() + e, v);
    if (b == e || r.ec != std::errc() || r.ptr != text.data() + e) throw bad("is not a list of integers");
    if (v < 1) throw bad("has a stage with " + std::to_string(v) + " blocks");
    out.push_back(v);
    sum += v;
    if (comma == text.size()) break;
    pos = comma + 1;
  }
  if (int64_t(out.size()) != parts) throw bad("has " + std::to_string(out.size()) + " entries");
  if (sum != c.model.n_layers) throw bad("sums to " + std::to_string(sum));
  return out;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_config_text(read_file(path), path, overrides);
}

Config load_config_text(const std::string& text, const std::string& path, const std::vector<std::string>& overrides) {
  Config c;
  c.path = path;
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    std::string what(e.description());
    for (char& ch : what) ch = ch == '\n' ? ' ' : ch;  // the message stays one line
    throw UserError(path + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                    ": TOML syntax error: " + what);
  }
  std::set<std::string> replaced;
  for (const auto& item : overrides)
    if (const auto parts = split_override(item)) replaced.insert(parts->section + "." + parts->name);
  apply_table(root, c, path, replaced);
  for (const auto& item : overrides) apply_override(item, c);
  validate_relations(c);
  return c;
}

bool tensor_splits_batch(const Config& c) {
  return c.parallel.tensor > 1 && c.parallel.tensor_split_batch && !c.parallel.sequence_parallel &&
         c.train.micro_batch % 2 == 0;
}

// Auto: the copy engines move one block while the GEMM of the next runs (0.7-1.5% faster at GPT-2
// 1.3B on two H200s, bench/sessions/2026-11-30e); NCCL's kernels slow that GEMM as much as they hide,
// and MPI's non-blocking all-reduce makes little progress meanwhile. The batch split hides those
// all-reduces better, so with it auto is 1.
int resolved_tensor_comm_chunks(const Config& c, bool on_gpu) {
  if (c.parallel.tensor_comm_chunks > 0) return int(c.parallel.tensor_comm_chunks);
  const bool peer = on_gpu && c.parallel.tensor == 2 && c.parallel.peer_all_reduce && !c.parallel.sequence_parallel &&
                    c.train.micro_batch * c.model.seq_len >= 2;
  return peer && !tensor_splits_batch(c) ? 2 : 1;
}

namespace {
// Mixture of experts: what it composes with so far, and the expert group's fit.
void validate_experts(const Config& c, const BatchLayout& b) {
  const int64_t E = c.moe.experts, G = c.parallel.expert;
  if (E == 0) {
    if (G > 1)
      throw UserError(c.path + ": parallel.expert = " + std::to_string(G) +
                      " splits experts, but moe.experts = 0 (set moe.experts, or parallel.expert = 1)");
    return;
  }
  if (E % G != 0 || b.data % G != 0)
    throw UserError(c.path + ": parallel.expert = " + std::to_string(G) + " must divide moe.experts = " +
                    std::to_string(E) + " and the data-parallel size " + std::to_string(b.data));
}
}  // namespace

void validate_for_world(const Config& c, int world_size) {
  const auto& par = c.parallel;
  // A training run's check, not one of the config itself: the configs that checkpoints keep from
  // before it must still load (generate, resume).
  if (c.data.source != "file" && !c.data.path.empty())
    throw UserError(c.path + ": data.path = \"" + c.data.path + "\" is set, but data.source = \"" + c.data.source +
                    "\" does not read it (set data.source = \"file\" to train on it)");
  if (c.zero.offload == "nvme" && c.zero.offload_dir.empty())
    throw UserError(c.path + ": zero.offload = \"nvme\" needs zero.offload_dir (a directory on a fast local disk)");
  if (c.zero.stage >= 1 && c.zero.reduce_dtype != "f32")
    throw UserError(c.path + ": zero.reduce_dtype = " + c.zero.reduce_dtype + ": ZeRO stage " +
                    std::to_string(c.zero.stage) + " reduce-scatters gradients in f32 only (allowed with zero.stage >= 1: f32)");
  // The model must split over the tensor group: heads, the MLP's width, the padded vocabulary; with sequence
  // parallelism the tokens of a micro-batch too.
  try {
    GPTConfig m;
    m.vocab_size = c.model.vocab_size;
    m.n_heads = c.model.n_heads;
    m.n_kv_heads = c.model.n_kv_heads;
    m.d_model = c.model.d_model;
    m.ffn_hidden = dense_ffn_hidden_size(c);
    GPT::check_tensor_parallel(m, int(par.tensor));
  } catch (const UserError& e) {
    throw UserError(c.path + ": " + e.what());
  }
  if (par.sequence_parallel && (c.train.micro_batch * c.model.seq_len) % par.tensor != 0)
    throw UserError(c.path + ": parallel.sequence_parallel splits the train.micro_batch x model.seq_len = " +
                    std::to_string(c.train.micro_batch * c.model.seq_len) +
                    " tokens of a micro-batch into parallel.tensor = " + std::to_string(par.tensor) +
                    " shards: it must be divisible");

  if (par.tensor_comm_chunks > 1 && par.sequence_parallel && par.tensor > 1)
    throw UserError(c.path + ": parallel.tensor_comm_chunks = " + std::to_string(par.tensor_comm_chunks) +
                    " applies only without parallel.sequence_parallel (set one of them back)");
  if (par.tensor_comm_chunks > c.train.micro_batch * c.model.seq_len)
    throw UserError(c.path + ": parallel.tensor_comm_chunks = " + std::to_string(par.tensor_comm_chunks) +
                    " exceeds the train.micro_batch x model.seq_len = " +
                    std::to_string(c.train.micro_batch * c.model.seq_len) + " token rows of a micro-batch");

  const BatchLayout b = resolve_batch(c, world_size);  // checks the layout and batch arithmetic
  validate_experts(c, b);
  // The pipeline schedule must fit the stages, micro-batches per step, chunks and layers.
  try {
    validate_schedule_shape(parse_schedule_kind(par.schedule), int(par.pipeline), int(b.accumulation),
                            int(par.virtual_stages), int(c.model.n_layers));
  } catch (const UserError& e) {
    throw UserError(c.path + ": " + e.what());
  }
}

BatchLayout resolve_batch(const Config& c, int world_size) {
  const int64_t model_ranks = c.parallel.tensor * c.parallel.pipeline;
  if (world_size < 1 || world_size % model_ranks != 0)
    throw UserError(c.path + ": world size " + std::to_string(world_size) +
                    " is not a multiple of parallel.tensor (" + std::to_string(c.parallel.tensor) +
                    ") x parallel.pipeline (" + std::to_string(c.parallel.pipeline) +
                    ") = " + std::to_string(model_ranks) + "; launch a multiple of " + std::to_string(model_ranks) +
                    " ranks (mpirun -np " + std::to_string(model_ranks) + " train_gpt ..., srun -n " +
                    std::to_string(model_ranks) + " ...)");
  BatchLayout b;
  b.data = world_size / model_ranks;
  const int64_t per_step = c.train.micro_batch * b.data;
  b.global_batch = c.train.global_batch == 0 ? per_step : c.train.global_batch;
  if (b.global_batch % per_step != 0)
    throw UserError(c.path + ": train.global_batch = " + std::to_string(b.global_batch) +
                    " is not a multiple of train.micro_batch (" + std::to_string(c.train.micro_batch) +
                    ") x data-parallel size (" + std::to_string(b.data) + ") = " + std::to_string(per_step));
  b.accumulation = b.global_batch / per_step;
  if (b.accumulation > kMaxAccumulation)
    throw UserError(c.path + ": train.global_batch = " + std::to_string(b.global_batch) + " makes " +
                    std::to_string(b.accumulation) + " micro-batches a step on each data rank (global_batch / (" +
                    "train.micro_batch " + std::to_string(c.train.micro_batch) + " x data-parallel size " +
                    std::to_string(b.data) + "); allowed: at most " + std::to_string(kMaxAccumulation) +
                    "): raise train.micro_batch or lower train.global_batch");
  return b;
}

std::string config_to_toml(const Config& c) {
  std::string out;
  for (const auto& s : config_keys::sections()) {
    out += std::string(out.empty() ? "" : "\n") + "[" + s.name + "]\n";
    for (const auto& k : config_keys::keys())
      if (std::string_view(k.section) == s.name)
        out += std::string(k.name) + " = " + config_keys::toml_value(k, c) + "\n";
  }
  return out;
}

std::string config_reference_markdown() {
  const Config defaults;
  std::string out =
      "# Trellis configuration reference\n\n"
      "<!-- Generated from the key table in launcher/config_keys.cpp; do not edit by hand.\n"
      "     Regenerate: build/train_gpt --config-doc > docs/config.md -->\n\n"
      "A run is described by one TOML file with the sections below. Every key is optional and\n"
      "has the default shown. Any key can be overridden on the command line:\n\n"
      "    train_gpt run.toml --set train.steps=100 --set train.precision=fp32\n\n"
      "Values given with `--set` are converted by the key's type (strings need no quotes;\n"
      "booleans are `true`/`false`). Unknown sections or keys, wrong types and values outside\n"
      "the allowed range are errors, reported in one line naming the file and the key.\n";
  for (const auto& s : config_keys::sections()) {
    out += std::string("\n## [") + s.name + "]\n\n" + s.doc + "\n\n";
    out += "| Key | Type | Default | Allowed | Description |\n";
    out += "|-----|------|---------|---------|-------------|\n";
    for (const auto& k : config_keys::keys()) {
      if (std::string_view(k.section) != s.name) continue;
      const std::string allowed = config_keys::allowed_text(k);
      out += std::string("| `") + k.name + "` | " + config_keys::type_name(k.type) + " | `" +
             config_keys::toml_value(k, defaults) + "` | " + (allowed.empty() ? "any" : allowed) +
             " | " + k.doc + " |\n";
    }
  }
  return out;
}

}  // namespace trellis
