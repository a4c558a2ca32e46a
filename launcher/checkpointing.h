// The training state in checkpoints (core/checkpoint.h does the atomic, checksummed storage):
// parameters, fp32 master weights, Adam moments, loss scaler, step, data position, seed, the
// resolved config and metadata. The parameters are in the whole model's layout
// (launcher/whole_model.h), so they do not depend on the layout: the first data-parallel rank of
// each (tensor rank, pipeline stage) sends its part to rank 0 (through its stage's tensor rank 0),
// which writes them. The optimizer state is in that layout too when the optimizer is not sharded
// (ZeRO stage 0: data-parallel ranks hold identical state); when it is (ZeRO stages >= 1), every
// rank writes its own pieces ("rank00005/adam_m.bin") into rank 0's temporary directory. Rank 0
// commits atomically once every rank has written its part (so a checkpoint is valid only with every
// part in it). On load each rank takes its own slice of the whole tensors, or reads its own pieces;
// on another layout (or ZeRO stage 0) it reassembles the whole tensors from every rank's pieces
// first (launcher/optimizer_pieces.h) and takes its slice of those.
#pragma once
#include <mpi.h>

#include <optional>
#include <string>

#include "core/runtime.h"
#include "launcher/train_config.h"
#include "launcher/trained_model.h"
#include "launcher/whole_model.h"
#include "models/gpt.h"
#include "parallel/zero/loss_scaler.h"
#include "parallel/zero/optimizer.h"

namespace trellis {

struct TrainingState {
  GPT& model;
  ZeroOptimizer& optimizer;
  LossScaler& scaler;
  const WholeModelLayout& layout;    // how each (pipeline, tensor) rank's part maps to the whole model
  Communicator* pipeline = nullptr;  // this rank's pipeline group; null with one stage
  Communicator* tensor = nullptr;    // this rank's tensor group; null without tensor parallelism
  int data_rank = 0;                 // this rank's place in the data group
  int data_size = 1;                 // the data group's size
  std::string data_identity;         // SampleSource::identity(): saved, and compared on resume
  int pipeline_rank() const { return pipeline ? pipeline->rank() : 0; }
  int tensor_rank() const { return tensor ? tensor->rank() : 0; }
  bool saver() const { return data_rank == 0; }  // sends its (pipeline, tensor) part to the writer
  bool writer() const { return saver() && pipeline_rank() == 0 && tensor_rank() == 0; }  // gathers and writes
};

// Creates `dir` if missing and checks that a file can be written in it; throws UserError
// "<what>: cannot ..." otherwise (`what` names the setting, e.g. "run.toml: checkpoint.dir = d").
void check_writable_dir(const std::string& what, const std::string& dir);

// Whether a checkpoint's data identity (SampleSource::identity) names the data now read; one
// written before identities held checksums ("a.tok: N tokens, b.tok: M tokens") is compared by names
// and sizes alone.
bool same_data_identity(const std::string& saved, const std::string& now);

// For a rank other than 0 when every rank writes into checkpoint.dir (ZeRO stage >= 1): throws
// UserError unless the directory rank 0 created is visible here and takes a file.
void check_checkpoint_dir_shared(const Config& cfg);

// The checkpoint to resume from as checkpoint.resume says (decided by rank 0 and broadcast, so
// all ranks agree), or nothing. Throws UserError for an explicit path that is not valid.
std::optional<std::string> choose_resume(const Config& cfg, MPI_Comm world);

// For a fresh run with model.init_from: the parameters from a Hugging Face directory, a weight
// export or a checkpoint (launcher/trained_model.h) of this run's shape (model.seq_len may be
// shorter: the first positions are taken), into every rank's part, each rank reading the tensors
// it holds; a separate master takes the f32 values themselves, the moments stay zero. `source`: the directory resolve_model_dir chose on
// rank 0 (the same on every rank). Throws UserError naming model.init_from.
void load_initial_parameters(Runtime& rt, const Config& cfg, TrainingState state, const std::string& source);
// Rank 0's `text`, on every rank of `comm`.
std::string broadcast_string(std::string text, MPI_Comm comm);
// model.init_from's source (`source`, else model.init_from itself) opened, its description read but
// not its values, and checked against the model `want`: what a run checks before building its
// model, so that a wrong source costs seconds. Throws UserError naming model.init_from.
StoredModel open_init_source(const Config& cfg, const GPTConfig& want, const std::string& source = "");
// The same parameters as f32 in the layout of `whole_specs` (the model `want`'s whole layout), read
// from `source` (model.init_from itself where empty).
std::vector<float> initial_parameters(const Config& cfg, const GPTConfig& want, const std::vector<ParameterSpec>& whole_specs,
                                      const std::string& source = "");

// Restores the state from `dir`; returns the step it was saved after. Throws UserError when the
// checkpoint does not fit this run (another model shape or precision, or another global batch:
// samples are keyed by step x global batch, so changing it would re-read or skip data) or is corrupt.
int64_t load_training_checkpoint(Runtime& rt, const Config& cfg, const std::string& dir, TrainingState state,
                                 int64_t global_batch);

// Called by every rank (collective over the world): the first data-parallel rank of every
// pipeline stage and tensor rank sends its part of the parameters (at ZeRO stage 3 first
// all-gathered over the data group) and, unless the optimizer is sharded, of the optimizer state
// to rank 0; with a sharded optimizer every rank writes its own optimizer state into the
// checkpoint's temporary directory. Rank 0 saves the state after `step` into checkpoint.dir and
// prunes to checkpoint.keep. A failure on any rank (no space, no permission, a directory this rank
// cannot see) is printed by rank 0 as a warning and training goes on; returns success (on rank 0;
// true elsewhere).
bool save_training_checkpoint(Runtime& rt, const Config& cfg, TrainingState state, int64_t step, double loss,
                              int64_t samples_seen);

// The validation loss stored in checkpoint.dir/best, or +infinity when there is none readable (a
// resumed run must not replace a better best with a worse one).
double best_checkpoint_val_loss(const Config& cfg);

// As save_training_checkpoint, for the state after `step`, whose validation loss `val_loss` is the
// best so far, to checkpoint.dir/best, replacing the previous best atomically.
bool save_best_checkpoint(Runtime& rt, const Config& cfg, TrainingState state, int64_t step, double val_loss,
                          int64_t samples_seen);

}  // namespace trellis
