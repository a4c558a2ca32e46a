// Trellis's GPT and Hugging Face's GPT-2 (transformers' GPT2LMHeadModel): a model directory with
// config.json and model.safetensors. Names are GPT-2's; Trellis's linear weights are (out, in),
// GPT-2's Conv1D ones (in, out), so they are transposed; the token embedding has no vocabulary
// padding there (nor has an untied head's lm_head.weight); GELU is the tanh form ("gelu_new"), the
// layer norms' eps is layer_norm_epsilon (model.norm_eps). Values move in the whole model's flat layout (GPT::parameter_specs), as f32.
#pragma once
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace trellis {

// Whether `dir` holds a Hugging Face model (config.json and model.safetensors).
bool is_hf_model_dir(const std::string& dir);
// The model's shape from its config.json (GPT2Config's defaults where a key is absent), as written
// there (the sizes are the caller's to check); throws UserError naming the file and key where it is
// not a GPT-2 that Trellis computes the same way.
GPTConfig read_hf_gpt2_config(const std::string& dir);
// Its parameters into `whole` (the whole layout of `shape`, read_hf_gpt2_config's, with the
// vocabulary padding rows zero). Accepts F32, F16 and BF16 tensors, names with or without "transformer.", the
// old causal-mask buffers, and, tied, an lm_head equal to the token embedding. Throws UserError.
void read_hf_gpt2(const std::string& dir, const GPTConfig& shape, float* whole);
// Writes config.json and model.safetensors (F32) of `whole` into `dir`, each through a temporary
// file and a rename, tensor by tensor. Throws UserError.
void write_hf_gpt2(const GPTConfig& shape, const std::vector<float>& whole, const std::string& dir);

}  // namespace trellis
