// The single-program training loop: model, optimizer, loss scaling, schedule, data, metrics.
#pragma once
#include <string>

#include "launcher/train_config.h"
#include "models/gpt_config.h"

namespace trellis {

struct LaunchInfo {
  int rank = 0, world = 1, local_rank = 0, local_size = 1;
};

// Checks what depends on this rank's node (GPUs present for device = cuda, one GPU per local
// rank). Throws UserError.
void check_devices(const Config& cfg, const LaunchInfo& launch);

// zero.embedding_grad resolved: whether `data_ranks` > 1 data ranks reduce the token embedding's
// gradient as backward begins and gather the last micro-batch's embedding rows (EmbeddingRowExchange).
// Throws UserError when gather_rows is asked for where it cannot run.
bool use_embedding_row_exchange(const Config& cfg, int data_ranks, int64_t B, int64_t T, const GPTConfig& mc);

// Trains as the config says. Throws UserError for problems the user can act on (including a
// non-finite loss, naming the step and the first parameter where it appeared).
struct RunOptions {
  std::string export_weights_dir;  // write the final weights here (rank 0); empty = off
  bool eval_only = false;          // validate once and return (the config from evaluation_config)
};
void run_training(const Config& cfg, const LaunchInfo& launch, const RunOptions& opts);

// The config train_gpt --eval runs: what the run would start from (checkpoint.resume, auto being
// checkpoint.dir's newest checkpoint; else model.init_from; else the initialization), read without
// checkpoint.dir (nothing is saved, no directory locked or repaired), validated on log.val_batches
// global batches, no metrics or TensorBoard file written.
Config evaluation_config(const Config& cfg);

// One forward+backward of the first micro-batch of step 1 in fp32, written to `dir` for the
// PyTorch parity check (bench/torch_gpt.py reads it): model.json, params.f32, grads.f32,
// tokens.i32, targets.i32.
void dump_gradients(const Config& cfg, const LaunchInfo& launch, const std::string& dir);

}  // namespace trellis
