// Resolving a config on this launch (launcher/resolved_run.h).
#include "launcher/resolved_run.h"

#include <cstdio>
#include <cstdlib>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/runtime.h"

namespace trellis {

Resolved resolve(const Config& cfg, const LaunchInfo& launch) {
  Resolved r;
  const int gpus = cuda_device_count();
  const std::string& dev = cfg.train.device;
  if (dev == "cuda" && gpus == 0)
    throw UserError(cfg.path + ": train.device = cuda but no CUDA device is available" +
                    (built_with_cuda() ? "" : " (this build has no CUDA backend)") + " (allowed here: auto, cpu)");
  const bool use_gpu = dev == "cuda" || (dev == "auto" && gpus > 0);
  if (use_gpu && launch.local_size > gpus)
    throw UserError(cfg.path + ": train.device = " + dev + ": " + std::to_string(launch.local_size) + " ranks on host " +
                    process_identity().host + " but only " + std::to_string(gpus) +
                    " GPU(s); start at most one rank per GPU on each node");
  r.device = use_gpu ? Device::CUDA(launch.local_rank) : Device::CPU();
  r.precision = cfg.train.precision == "auto" ? (use_gpu ? "bf16" : "fp32") : cfg.train.precision;
  parse_dtype(r.precision, r.dtype);
  r.model.vocab_size = cfg.model.vocab_size;
  r.model.seq_len = cfg.model.seq_len;
  r.model.n_layers = cfg.model.n_layers;
  r.model.n_heads = cfg.model.n_heads;
  r.model.n_kv_heads = cfg.model.n_kv_heads == cfg.model.n_heads ? 0 : cfg.model.n_kv_heads;  // 0: as many as n_heads
  r.model.d_model = cfg.model.d_model;
  r.model.head_size = cfg.model.head_dim > 0 && cfg.model.head_dim * cfg.model.n_heads != cfg.model.d_model
                          ? cfg.model.head_dim
                          : 0;  // 0: d_model / n_heads
  r.model.qk_norm = cfg.model.qk_norm;
  r.model.rope = cfg.model.position_embedding == "rope";
  r.model.rope_theta = cfg.model.rope_theta;
  if (r.model.rope) r.model.rope_dims = partial_rope_dims(r.model.head_dim(), cfg.model.partial_rotary_factor);
  // A window as long as the sequence is none (and so is named in no signature).
  r.model.sliding_window = cfg.model.sliding_window < cfg.model.seq_len ? cfg.model.sliding_window : 0;
  r.model.document_eod = cfg.data.document_mask ? cfg.data.eod_token : -1;
  r.model.document_positions = cfg.data.document_mask && cfg.data.reset_positions;
  if (r.model.rope && cfg.model.rope_scaling == "linear") {
    r.model.rope_factor = cfg.model.rope_scaling_factor;
    r.model.rope_linear = true;
  } else if (r.model.rope && cfg.model.rope_scaling == "yarn") {
    r.model.rope_factor = cfg.model.rope_scaling_factor;
    r.model.rope_yarn = true;
    r.model.rope_original_positions = double(cfg.model.rope_original_positions);
    r.model.rope_beta_fast = cfg.model.rope_beta_fast;
    r.model.rope_beta_slow = cfg.model.rope_beta_slow;
    r.model.rope_attention_factor = cfg.model.rope_attention_factor > 0 ? cfg.model.rope_attention_factor
                                                                         : yarn_attention_factor(cfg.model.rope_scaling_factor);
  } else if (r.model.rope && cfg.model.rope_scaling == "longrope") {
    r.model.rope_factor = cfg.model.rope_scaling_factor;
    r.model.rope_longrope = true;
    r.model.rope_original_positions = double(cfg.model.rope_original_positions);
    r.model.rope_attention_factor =
        cfg.model.rope_attention_factor > 0
            ? cfg.model.rope_attention_factor
            : longrope_attention_factor(cfg.model.rope_scaling_factor, double(cfg.model.rope_original_positions));
    r.model.rope_long_factors = parse_rope_factors(cfg, "rope_long_factor");
    r.model.rope_short_factors = parse_rope_factors(cfg, "rope_short_factor");
  } else if (r.model.rope && cfg.model.rope_scaling == "llama3") {
    r.model.rope_factor = cfg.model.rope_scaling_factor;
    r.model.rope_low_freq_factor = cfg.model.rope_low_freq_factor;
    r.model.rope_high_freq_factor = cfg.model.rope_high_freq_factor;
    r.model.rope_original_positions = double(cfg.model.rope_original_positions);
  }
  r.model.swiglu = cfg.model.mlp == "swiglu";
  r.model.ffn_hidden = dense_ffn_hidden_size(cfg);
  r.model.rmsnorm = cfg.model.norm == "rmsnorm";
  r.model.norm_eps = cfg.model.norm_eps;
  r.model.bias = cfg.model.bias;
  r.model.qkv_bias = !cfg.model.bias && cfg.model.qkv_bias;
  r.model.tied_head = cfg.model.tie_embeddings;
  r.model.dropout = float(cfg.model.dropout);
  r.model.attention_dropout = float(cfg.model.attention_dropout < 0 ? cfg.model.dropout : cfg.model.attention_dropout);
  r.model.dtype = r.dtype;
  r.model.stage_layers = parse_stage_layers(cfg);
  r.model.moe.experts = cfg.moe.experts;
  r.model.moe.top_k = cfg.moe.top_k;
  r.model.moe.capacity_factor = cfg.moe.capacity_factor;
  r.model.moe.dropless = cfg.moe.dropless;
  r.model.moe.aux_loss_coef = float(cfg.moe.aux_loss_coef);
  r.model.moe.z_loss_coef = float(cfg.moe.z_loss_coef);
  r.model.moe.layer_freq = cfg.moe.layer_freq;
  r.model.moe.first_dense = cfg.moe.first_dense_layers;
  r.model.moe.shared_experts = cfg.moe.shared_experts;
  r.model.moe.shared_gate = cfg.moe.shared_gate;
  r.model.moe.expert_parallel = cfg.parallel.expert;
  r.model.moe.ffn_hidden = cfg.moe.ffn_hidden_size;
  r.model.moe.renormalize = cfg.moe.renormalize;
  r.model.set_expert_mlp();
  r.model.checkpointing = cfg.train.checkpointing == "full"          ? Checkpointing::full
                          : cfg.train.checkpointing == "selective"   ? Checkpointing::selective
                          : cfg.train.checkpointing == "elementwise" ? Checkpointing::elementwise
                                                                     : Checkpointing::none;
  const int64_t data = launch.world / (cfg.parallel.tensor * cfg.parallel.pipeline);
  const int64_t global = cfg.train.global_batch > 0 ? cfg.train.global_batch : cfg.train.micro_batch * data;
  r.accumulation = global / (cfg.train.micro_batch * data);
  // 16-bit gradients only where no gradient is summed over micro-batches or ranks (train.grad_dtype).
  if (cfg.train.grad_dtype == "auto" && r.dtype != DType::f32 && launch.world == 1 && r.accumulation == 1)
    r.model.grad_dtype = r.dtype;
  return r;
}

std::string number_g(double v) {
  char text[32];
  for (int digits : {6, 17}) {  // %g's short form where it reads back exactly
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}

std::string number_list(const std::vector<double>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += number_g(v[i]);
  }
  return out;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string rope_scaling_text(const GPTConfig& m) {
  if (m.rope && m.rope_longrope) {  // the factors by their checksum: two models with others differ
    std::vector<double> all = m.rope_long_factors;
    all.insert(all.end(), m.rope_short_factors.begin(), m.rope_short_factors.end());
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(all.data(), all.size() * sizeof(double)));
    return "longrope rope scaling (factor " + number_g(m.rope_factor) + ", original positions " +
           number_g(m.rope_original_positions) + ", attention factor " + number_g(m.rope_attention_factor) + ", " +
           std::to_string(m.rope_long_factors.size()) + " long and short factors, crc32c " + crc + ")";
  }
  if (!m.rope || (m.rope_factor == 1.0 && !m.rope_yarn)) return "";
  if (m.rope_linear) return "linear rope scaling (factor " + number_g(m.rope_factor) + ")";
  if (m.rope_yarn)
    return "yarn rope scaling (factor " + number_g(m.rope_factor) + ", original positions " +
           number_g(m.rope_original_positions) + ", beta_fast " + number_g(m.rope_beta_fast) + ", beta_slow " +
           number_g(m.rope_beta_slow) + ", attention factor " + number_g(m.rope_attention_factor) + ")";
  return "llama3 rope scaling (factor " + number_g(m.rope_factor) + ", low_freq_factor " + number_g(m.rope_low_freq_factor) +
         ", high_freq_factor " + number_g(m.rope_high_freq_factor) + ", original positions " +
         number_g(m.rope_original_positions) + ")";
}

}  // namespace trellis
