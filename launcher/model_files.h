// Model files that PyTorch can read (bench/torch_gpt.py): DIR/model.json (config, parameter names,
// shapes and offsets, batch) and DIR/params.f32 (all parameters as little-endian f32). Used for
// the weights export (--export-weights) and the parity dump (--dump-grads).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "launcher/metrics.h"
#include "models/gpt.h"

namespace trellis {

// For --export-weights or --dump-grads (`option`), before training: the directory is new or empty
// and can be written (an export is never replaced, and never lands beside the user's files).
// Throws UserError naming it.
void check_export_dir_free(const std::string& option, const std::string& dir);
// Refuses (UserError) an export `dir` inside a checkpoint (a directory with a manifest.json): pruning
// or a save over that checkpoint would delete it.
void check_export_outside_checkpoints(const std::string& option, const std::string& dir);
// Writes model.json (with `extra` merged in at the top level) and params.f32. Throws UserError
// naming the path if it cannot write.
void write_model_files(Runtime& rt, GPT& model, const std::string& dir, const JsonObject& extra);
// The same from the whole model's parameter specs (buffer order) and their values as host f32
// (what a pipeline run gathers on its first rank).
void write_model_files(const GPTConfig& mc, const std::vector<ParameterSpec>& specs, const std::vector<float>& values,
                       const std::string& dir, const JsonObject& extra);
// Writes `path` through a temporary file, fsynced, and a rename (the directory fsynced too), so a
// run killed or a machine that loses power while writing leaves no torn or empty file. `produce`
// hands over the bytes in order, in as many pieces as it likes. Throws UserError naming the path.
using ByteSink = std::function<void(const void* data, size_t bytes)>;
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce);
// Any float tensor as raw f32 / an i32 tensor as raw i32, from any device.
void write_tensor_f32(Runtime& rt, const Tensor& t, const std::string& path);
void write_tensor_i32(Runtime& rt, const Tensor& t, const std::string& path);

}  // namespace trellis
