// Saving and restoring the training state through core/checkpoint.
#include "launcher/checkpointing.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "core/checkpoint.h"
#include "core/ops.h"
#include "launcher/metrics.h"

namespace trellis {

namespace {

constexpr const char* kVersion = "trellis 0.1";

// The blobs of the state, by name: the parameters (undefined here: ZeroOptimizer::whole_values /
// set_values), then the optimizer state (this rank's pieces at ZeRO stages >= 1, see
// ZeroOptimizer::gather / scatter).
std::vector<std::pair<std::string, Tensor>> state_tensors(TrainingState s) {
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("params", Tensor());
  if (s.optimizer.has_separate_master()) t.emplace_back("master", s.optimizer.master());
  t.emplace_back("adam_m", s.optimizer.first_moments());
  t.emplace_back("adam_v", s.optimizer.second_moments());
  return t;
}

std::string model_signature(const GPTConfig& m) {
  return "vocab_size " + std::to_string(m.vocab_size) + ", seq_len " + std::to_string(m.seq_len) + ", n_layers " +
         std::to_string(m.n_layers) + ", n_heads " + std::to_string(m.n_heads) + ", d_model " +
         std::to_string(m.d_model) + ", precision " + std::string(dtype_name(m.dtype));
}

}  // namespace

std::optional<std::string> choose_resume(const Config& cfg, MPI_Comm world) {
  int rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::string chosen, error;
  if (rank == 0) {
    const std::string& r = cfg.checkpoint.resume;
    try {
      if (r == "auto") {
        std::string why;
        if (!cfg.checkpoint.dir.empty()) {
          if (auto latest = latest_valid_checkpoint(cfg.checkpoint.dir, &why)) chosen = *latest;
          if (!why.empty()) std::printf("checkpoint: skipped invalid checkpoints:\n%s\n", why.c_str());
        }
      } else if (r != "none") {
        CheckpointReader::open(r, CheckpointVerify::kSizes);
        chosen = r;
      }
    } catch (const CheckpointError& e) {
      error = cfg.path + ": checkpoint.resume = " + r + ": " + e.what();
    }
  }
  // Broadcast "error flag + text" from rank 0.
  std::string msg = error.empty() ? "+" + chosen : "!" + error;
  int len = int(msg.size());
  TRELLIS_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, world));
  msg.resize(size_t(len));
  TRELLIS_MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, 0, world));
  if (msg[0] == '!') throw UserError(msg.substr(1));
  if (msg.size() == 1) return std::nullopt;
  return msg.substr(1);
}

int64_t load_training_checkpoint(Runtime& rt, const Config& cfg, const std::string& dir, TrainingState s,
                                 int64_t global_batch) {
  try {
    CheckpointReader reader = CheckpointReader::open(dir, CheckpointVerify::kSizes);
    JsonValue meta = parse_json(reader.meta());
    const JsonValue* sig = meta.find("model");
    const std::string expected = model_signature(s.model.config());
    if (!sig || sig->as_string() != expected)
      throw UserError(cfg.path + ": checkpoint " + dir + " was written for " + (sig ? sig->as_string() : "?") +
                      "; this run has " + expected);
    for (auto& [name, t] : state_tensors(s)) {
      if (!reader.has_blob(name))
        throw UserError(cfg.path + ": checkpoint " + dir + " has no " + name + " (written with another precision?)");
      const DType dtype = t.defined() ? t.dtype : s.model.params().dtype();
      std::vector<char> host(size_t(s.layout.whole_numel()) * dtype_size(dtype));
      if (reader.blob_size(name) != host.size())
        throw UserError(cfg.path + ": checkpoint " + dir + ": " + name + " holds " + std::to_string(reader.blob_size(name)) +
                        " bytes; this model needs " + std::to_string(host.size()));
      reader.read_blob(name, host.data(), host.size());
      // This stage's whole copy, from which each rank takes what it holds.
      const int64_t n = s.model.params().numel();
      Buffer scratch(rt.allocator(), size_t(n) * dtype_size(dtype), "checkpoint load");
      const Tensor stage_whole = scratch.tensor(dtype, {n});
      scatter_whole(rt, s.layout, s.pipeline_rank(), s.tensor_rank(), host, stage_whole);
      if (!t.defined()) s.optimizer.set_values(stage_whole);
      else s.optimizer.scatter(stage_whole, t);
    }
    const JsonValue* sc = meta.find("scaler");
    LossScalerState st;
    st.scale = sc->find("scale")->as_double();
    st.clean_steps = sc->find("clean_steps")->as_int();
    st.hysteresis_left = sc->find("hysteresis_left")->as_int();
    st.skipped = sc->find("skipped")->as_int();
    s.scaler.restore(st);
    const int64_t step = meta.find("step")->as_int();
    const int64_t seen = meta.find("data")->find("samples_seen")->as_int();
    if (step > 0 && seen != step * global_batch)
      throw UserError(cfg.path + ": checkpoint " + dir + " was trained with a global batch of " +
                      std::to_string(seen / step) + " samples; this run has " + std::to_string(global_batch) +
                      " (train.global_batch, train.micro_batch and the data-parallel size must give the same)");
    return step;
  } catch (const CheckpointError& e) {
    throw UserError(cfg.path + ": cannot resume from " + dir + ": " + e.what());
  }
}

namespace {

// Gathers the state on rank 0 (pipeline and tensor rank 0), which writes it into the writer made
// by `open` and commits it. Returns the final directory on rank 0 ("" elsewhere). On rank 0 a failure throws
// CheckpointError, but only after every stage's part has been received (no rank is left waiting).
std::string write_state(Runtime& rt, const Config& cfg, TrainingState s, const std::function<CheckpointWriter()>& open,
                        int64_t step, double loss, int64_t samples_seen, std::optional<double> val_loss) {
  const bool root = s.writer();
  std::optional<CheckpointWriter> w;
  std::string error;
  if (root) {
    try {
      w.emplace(open());
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  for (auto& [name, t] : state_tensors(s)) {
    Buffer scratch;
    const Tensor whole = t.defined() ? s.optimizer.gather(t, scratch) : s.optimizer.whole_values(scratch);
    if (!s.saver()) continue;
    std::vector<char> host = gather_whole(rt, s.tensor, s.pipeline, s.layout, whole);
    if (!root || !error.empty()) continue;
    try {
      w->add_blob(name, host.data(), host.size(), std::string(dtype_name(whole.dtype)), {s.layout.whole_numel()});
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  if (!root) return "";
  if (!error.empty()) throw CheckpointError(error);
  const LossScalerState st = s.scaler.state();
  JsonObject scaler, data, layout, meta;
  scaler.add("scale", st.scale).add("clean_steps", st.clean_steps).add("hysteresis_left", st.hysteresis_left);
  scaler.add("skipped", st.skipped);
  data.add("samples_seen", samples_seen).add("source", cfg.data.source);
  layout.add("tensor", int64_t(s.layout.tensor())).add("pipeline", int64_t(s.layout.pipeline()));
  layout.add("virtual_stages", cfg.parallel.virtual_stages);
  meta.add("step", step).add("loss", loss).add("version", kVersion);
  meta.add("time", int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count()));
  meta.add("model", model_signature(s.model.config())).add("seed", cfg.train.seed);
  meta.add("written_by_layout", layout);  // informative: the blobs are in the whole model's layout
  meta.add("scaler", scaler).add("data", data).add("config", config_to_toml(cfg));
  if (val_loss) meta.add("val_loss", *val_loss);
  w->set_meta(meta.str());
  return w->commit();
}

}  // namespace

bool save_training_checkpoint(Runtime& rt, const Config& cfg, TrainingState s, int64_t step, double loss,
                              int64_t samples_seen) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const std::string where = write_state(
        rt, cfg, s, [&] { return CheckpointWriter(cfg.checkpoint.dir, step); }, step, loss, samples_seen, std::nullopt);
    if (!s.writer()) return true;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("checkpoint: saved step %lld to %s (%.1f s)\n", (long long)step, where.c_str(), secs);
    try {
      prune_checkpoints(cfg.checkpoint.dir, int(cfg.checkpoint.keep), step);
    } catch (const CheckpointError& e) {
      std::printf("warning: checkpoint of step %lld saved, but removing older ones failed: %s\n", (long long)step,
                  e.what());
    }
    std::fflush(stdout);
    return true;
  } catch (const CheckpointError& e) {
    std::printf("warning: checkpoint of step %lld NOT saved: %s; training goes on, the previous checkpoint is intact\n",
                (long long)step, e.what());
    std::fflush(stdout);
    return false;
  }
}

double best_checkpoint_val_loss(const Config& cfg) {
  const std::string dir = (std::filesystem::path(cfg.checkpoint.dir) / "best").string();
  if (cfg.checkpoint.dir.empty() || !std::filesystem::exists(dir)) return std::numeric_limits<double>::infinity();
  try {
    JsonValue meta = parse_json(CheckpointReader::open(dir, CheckpointVerify::kSizes).meta());
    const JsonValue* v = meta.find("val_loss");
    if (v) return v->as_double();
  } catch (const std::exception& e) {
    std::printf("warning: %s is not a readable checkpoint (%s); the next best validation replaces it\n", dir.c_str(),
                e.what());
  }
  return std::numeric_limits<double>::infinity();
}

bool save_best_checkpoint(Runtime& rt, const Config& cfg, TrainingState s, int64_t step, double val_loss,
                          int64_t samples_seen) {
  try {
    const std::string where = write_state(
        rt, cfg, s,
        [&] { return CheckpointWriter::at_path((std::filesystem::path(cfg.checkpoint.dir) / "best").string()); }, step,
        val_loss, samples_seen, val_loss);
    if (!s.writer()) return true;
    std::printf("checkpoint: best validation loss %.4f at step %lld, saved to %s\n", val_loss, (long long)step,
                where.c_str());
    std::fflush(stdout);
    return true;
  } catch (const CheckpointError& e) {
    std::printf("warning: best checkpoint of step %lld NOT saved: %s; training goes on\n", (long long)step, e.what());
    std::fflush(stdout);
    return false;
  }
}

}  // namespace trellis
