// Trellis's GPT and Hugging Face's models: a model directory with config.json and model.safetensors,
// of transformers' GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM or MixtralForCausalLM.
// - GPT-2 (learned positions, GELU, LayerNorm, biases, multi-head): GPT-2's names; Trellis's linear
//   weights are (out, in), GPT-2's Conv1D ones (in, out), so they are transposed; GELU is the tanh
//   form ("gelu_new"); layer_norm_epsilon is model.norm_eps; n_inner the MLP's width.
// - Llama (rotary positions, SwiGLU, RMSNorm, no linear biases; any number of key-value heads, tied
//   or untied head): qkv is q_proj, k_proj and v_proj, fc gate_proj and up_proj, all (out, in) as in
//   Trellis; Llama's rotate-half rotary embedding is Trellis's; rms_norm_eps and rope_theta carry
//   over; rope_scaling other than Llama 3's, biases and activations other than SiLU are refused.
//   With biases on q, k and v it is Qwen2; with SwiGLU experts in every block Mixtral (the router
//   block_sparse_moe.gate, an expert's fc w1 and w3, its proj w2).
// The token embedding and an untied head have no vocabulary padding there. Values move in the whole
// model's flat layout (GPT::parameter_specs), as f32.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace trellis {

// Whether `dir` holds a Hugging Face model (config.json, and model.safetensors or the shards of
// model.safetensors.index.json).
bool is_hf_model_dir(const std::string& dir);
// Its safetensors files: model.safetensors, or the shards the index names. Throws UserError.
std::vector<std::string> hf_weight_files(const std::string& dir);
// The model's shape from its config.json (model_type gpt2, the default, llama, qwen2 or mixtral; the config
// class's defaults where a key is absent), as written there (the sizes are the caller's to check);
// throws UserError naming the file and key where it is not a model Trellis computes the same way.
GPTConfig read_hf_config(const std::string& dir);
// Why `m` is none of those Hugging Face families (one line), or "" when it is one of them.
std::string hf_family_mismatch(const GPTConfig& m);
// "GPT-2", "Llama", "Qwen2" or "Mixtral": the family `m` is written as (hf_family_mismatch(m) empty).
const char* hf_family_name(const GPTConfig& m);
// Its parameters into `whole` (the whole layout of `shape`, read_hf_config's, with the vocabulary
// padding rows zero). Accepts F32, F16 and BF16 tensors, names with or without the model's prefix
// ("transformer.", "model."), the buffers older transformers saved (GPT-2's causal masks, Llama's
// inv_freq), and, tied, an lm_head equal to the token embedding; from one file or the index's shards.
// Throws UserError.
void read_hf_weights(const std::string& dir, const GPTConfig& shape, float* whole);
// The same, parameter by parameter: dst(name) gives where a parameter of `shape`
// (GPT::parameter_specs) goes (its numel floats, the vocabulary padding rows left as they are), or
// null where it is not wanted; those are checked in the files but not read.
using HfDestination = std::function<float*(const std::string& name)>;
void read_hf_weights(const std::string& dir, const GPTConfig& shape, const HfDestination& dst);
// Writes config.json and model.safetensors (F32) of `whole` into `dir`, each through a temporary
// file and a rename, tensor by tensor. Throws UserError.
void write_hf_model(const GPTConfig& shape, const std::vector<float>& whole, const std::string& dir);

}  // namespace trellis
