// A trained model's parameters as stored on disk, for what reads them (generate, export_hf,
// model.init_from): a checkpoint (a step_X directory, or a checkpoint.dir: its newest valid one), a
// weight export (model.json + params.f32, from --export-weights or --dump-grads) or a Hugging Face
// GPT-2, Llama, Mistral, Phi-3, Qwen2, Qwen3, Mixtral, Qwen2-MoE or Qwen3-MoE directory (launcher/hf_model.h). Everything is checked before anything large is allocated:
// a stored size that does not fit the model's shape is one error line.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/train_config.h"
#include "models/gpt_config.h"

namespace trellis {

struct StoredModel {
  std::string dir;               // the checkpoint's step directory, or the export's
  std::optional<Config> config;  // a checkpoint's resolved training config; none for an export
  GPTConfig shape;               // the model's shape (dtype f32), its experts included (moe)
  DType stored = DType::f32;     // the parameters' dtype on disk
  int64_t numel = 0;             // in the whole model's layout (GPT::parameter_specs), vocabulary padding included
  // Reads the parameters (numel elements of `stored`) into dst. Throws UserError.
  std::function<void(void* dst)> read;
  // The same as f32 (bf16 and fp16 widen exactly).
  std::vector<float> read_f32() const;
  // Only the named parameters (of GPT::parameter_specs(shape)), each whole as f32 (the vocabulary
  // padding rows zero): a Hugging Face directory or a weight export reads those alone, a checkpoint
  // its parameters whole (its checksum covers them all). Throws UserError.
  std::map<std::string, std::vector<float>> read_f32_tensors(const std::set<std::string>& names) const;
  // Reads each parameter dst(name) is not null for into it (f32); null: the format reads whole.
  std::function<void(const std::function<float*(const std::string&)>& dst)> read_some;
};

// `verb` says what the caller does with the checkpoint it chose ("note: sampling from X, the newest
// valid checkpoint in DIR"). Throws UserError.
StoredModel open_stored_model(const std::string& path, const std::string& verb);
// The vocabulary file of the data a checkpoint trained on (data.path's first file, its
// <stem>.vocab.json; it may not exist), or "" for synthetic data or an export (no config).
std::string training_vocabulary_path(const StoredModel& stored);
// The directory open_stored_model would read: a checkpoint.dir's newest valid checkpoint, else
// `path` itself. For ranks that must all read the same one (one decides, the others are told).
std::string resolve_model_dir(const std::string& path);

}  // namespace trellis
