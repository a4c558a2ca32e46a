// Saving and restoring the training state through core/checkpoint.
#include "launcher/checkpointing.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "core/checkpoint.h"
#include "core/crc32c.h"
#include "core/ops.h"
#include "launcher/metrics.h"
#include "launcher/optimizer_pieces.h"
#include "launcher/resolved_run.h"
#include "launcher/trained_model.h"

namespace trellis {

namespace {

constexpr const char* kVersion = "trellis 0.1";
// meta "optimizer_state": each rank's own pieces, or the whole model's layout (also what a
// checkpoint without the key holds: it predates the choice).
constexpr const char* kPerRank = "per_rank";
constexpr const char* kWhole = "whole";

// The blobs of the state, by name: the parameters (ZeroOptimizer::whole_values / set_values),
// the f32 master weights if separate (ZeroOptimizer::master_values / set_master: split beside bf16
// parameters, they are joined on the host), then the Adam moments (tensors: this rank's pieces at
// ZeRO stages >= 1, written as they are; ZeroOptimizer::scatter takes them from a whole-layout
// checkpoint).
enum class Held { params, master, tensor };
struct StateBlob {
  std::string name;
  Held held;
  Tensor t;  // Held::tensor only
};
std::vector<StateBlob> state_blobs(TrainingState s) {
  std::vector<StateBlob> b;
  b.push_back({"params", Held::params, Tensor()});
  if (s.optimizer.has_separate_master()) b.push_back({"master", Held::master, Tensor()});
  b.push_back({"adam_m", Held::tensor, s.optimizer.first_moments()});
  b.push_back({"adam_v", Held::tensor, s.optimizer.second_moments()});
  return b;
}

// This rank's pieces of a blob of optimizer state (the master weights or a moment), in `host`
// where they are assembled there.
Tensor owned_state(TrainingState s, const StateBlob& b, std::vector<char>& host) {
  return b.held == Held::master ? s.optimizer.master_values(host) : b.t;
}

// Sets this rank's pieces of a blob of optimizer state from `owned` (host memory).
void set_owned_state(Runtime& rt, TrainingState s, const StateBlob& b, const Tensor& owned) {
  if (b.held == Held::master) {
    s.optimizer.set_master(owned);
    return;
  }
  copy(rt, b.t, owned);
  rt.synchronize();
}

// This rank's tensors (WholeModelLayout::shard_of: its stage's, its experts), each whole, of the
// whole-layout blob `name` (elements of e bytes): only the chunks holding them read and checked
// (stream_whole_tensors), only these kept, so a rank's host memory holds its part, not the whole model's.
std::map<std::string, std::vector<char>> tensors_of_blob(const CheckpointReader& reader, const std::string& name,
                                                         TrainingState s, size_t e) {
  std::set<std::string> mine;
  for (const ParameterSpec& p : s.layout.shard_of(s.pipeline_rank(), s.tensor_rank())) mine.insert(p.name);
  std::map<std::string, std::vector<char>> out;  // each whole (a shard's spec has its local shape)
  for (const ParameterSpec& p : s.layout.whole)
    if (mine.count(p.name)) out[p.name].resize(size_t(p.shape.numel()) * e);
  stream_whole_tensors(
      reader, name, s.layout.whole, e, [&](const std::string& t) { return out.count(t) > 0; },
      [&](const std::string& t, uint64_t at, const char* bytes, size_t n) { std::memcpy(out[t].data() + at, bytes, n); });
  return out;
}

// Sets blob b's state (the parameters, or an optimizer tensor) from this rank's part of it (elements
// of `dtype`), which fill(part) writes into a host tensor: each rank takes what it holds.
void set_from_stage(Runtime& rt, TrainingState s, const StateBlob& b, DType dtype,
                    const std::function<void(const Tensor& part)>& fill) {
  const int64_t n = s.model.params().numel();
  std::vector<char> stage_host(size_t(n) * dtype_size(dtype));  // host memory: no whole-stage device buffer
  const Tensor stage_whole(stage_host.data(), dtype, Device::CPU(), {n});
  fill(stage_whole);
  if (b.held == Held::params) {
    s.optimizer.set_values(stage_whole);
  } else {  // into the owned state as held (assembled on the host when it is split), then set
    std::vector<char> assembled;
    const Tensor owned = owned_state(s, b, assembled);
    s.optimizer.scatter(stage_whole, owned);
    if (!assembled.empty()) set_owned_state(rt, s, b, owned);
  }
}

std::string model_signature(const GPTConfig& m) {
  // Which blocks have experts, and how many, decide the parameters (top_k, the capacity and the
  // balancing loss may change between runs); a dense model's signature is as before experts existed.
  // A shared MLP is named only where there is one, and the experts' width where it is not 4C, so
  // signatures written before either existed still match.
  const std::string shared =
      (m.moe.shared_experts == 0 ? "" : " and " + std::to_string(m.moe.shared_experts) + " shared") +
      (m.moe.shared_gate ? " gated" : "") +
      (m.moe.expert_width(m.d_model) == 4 * m.d_model ? "" : " of width " + std::to_string(m.moe.expert_width(m.d_model)));
  const std::string experts =
      m.moe.experts == 0 ? ""
                         : ", moe.experts " + std::to_string(m.moe.experts) + shared + " every " +
                               std::to_string(m.moe.layer_freq) + " blocks" +
                               (m.moe.first_dense > 0 ? " after " + std::to_string(m.moe.first_dense) + " dense" : "");
  // Rotary positions are named (with their base, which the trained weights depend on); learned
  // ones are not, so signatures written before RoPE existed still match.
  char theta[32];
  std::snprintf(theta, sizeof theta, "%.17g", m.rope_theta);
  // Llama 3's scaling likewise, only where it is used.
  const std::string scaling = rope_scaling_text(m);
  const std::string positions = m.rope ? std::string(", rope theta ") + theta + (scaling.empty() ? "" : ", " + scaling) +
                                             (m.rope_dims > 0 ? ", turning " + std::to_string(m.rope_dims) + " dims a head" : "")
                                       : "";
  const std::string mlp = std::string(m.swiglu ? ", swiglu MLP" : "") +  // likewise, and a width not 4C
                          (m.mlp_width() != 4 * m.d_model ? ", ffn_hidden_size " + std::to_string(m.mlp_width()) : "") +
                          (m.rmsnorm ? ", rmsnorm" : "") + (m.tied_head ? "" : ", untied head") +
                          (m.kv_heads() != m.n_heads ? ", n_kv_heads " + std::to_string(m.kv_heads()) : "") +
                          (m.head_size > 0 ? ", head_dim " + std::to_string(m.head_size) : "") +
                          (m.qk_norm ? ", qk_norm" : "") +
                          (m.sliding_window > 0 ? ", sliding window " + std::to_string(m.sliding_window) : "") +
                          (float(m.norm_eps) != 1e-5f ? ", norm_eps " + number_g(m.norm_eps) : "") +
                          (m.bias ? "" : m.qkv_bias ? ", qkv biases only" : ", no linear biases");
  return "vocab_size " + std::to_string(m.vocab_size) + ", seq_len " + std::to_string(m.seq_len) + ", n_layers " +
         std::to_string(m.n_layers) + ", n_heads " + std::to_string(m.n_heads) + ", d_model " +
         std::to_string(m.d_model) + experts + positions + mlp + ", precision " + std::string(dtype_name(m.dtype));
}

// The layout that decides which pieces of the optimizer state each rank holds: a checkpoint with
// per-rank optimizer state records it, and a run on a layout with other pieces reshards them. That
// includes the blocks of each virtual pipeline stage: two splits can give every rank as many blocks
// but not the same ones (p = 2, v = 2: "2,1,1,2" and "1,2,2,1").
struct ShardLayout {
  int64_t tensor = 1, pipeline = 1, data = 1, virtual_stages = 1, zero_stage = 0;
  std::string stage_layers;  // blocks per virtual stage, e.g. "2,1,1,2"; empty: not recorded (older checkpoints)
  int64_t expert = 1;        // parallel.expert (not recorded before experts: 1)

  // Whether a rank of `o` holds the same pieces as the rank of this layout with its world rank:
  // the ZeRO stage (1-3) changes only what is streamed, not the pieces. A split not recorded
  // matches only where there is nothing to split (one chunk).
  bool same_pieces(const ShardLayout& o) const {
    const bool one_chunk = pipeline * virtual_stages == 1;
    return tensor == o.tensor && pipeline == o.pipeline && data == o.data && virtual_stages == o.virtual_stages &&
           expert == o.expert && (one_chunk || (!stage_layers.empty() && stage_layers == o.stage_layers));
  }

  // Blocks per virtual stage of `model` split into `chunks`: "2,1,1,2".
  static std::string split_text(const GPTConfig& model, int64_t chunks) {
    std::string text;
    for (const LayerRange& r : GPT::pipeline_partition(model, int(chunks))) {
      if (!text.empty()) text += ',';
      text += std::to_string(r.second - r.first);
    }
    return text;
  }
  static ShardLayout of(const Config& cfg, const TrainingState& s) {
    // The tensor size, not the layout's parts per stage (the expert ranks under expert parallelism).
    ShardLayout l{cfg.parallel.tensor, s.layout.pipeline(), s.data_size, cfg.parallel.virtual_stages,
                  s.optimizer.stage(), "", cfg.parallel.expert};
    l.stage_layers = split_text(s.model.config(), l.pipeline * l.virtual_stages);
    return l;
  }
  // A checkpoint written before the split was recorded: the split its run's config gave `model`
  // (the same shape, checked), or empty where that config cannot be read.
  void recover_split(const JsonValue& meta, const std::string& dir, GPTConfig model) {
    if (!stage_layers.empty() || pipeline * virtual_stages == 1) return;
    try {
      const JsonValue* text = meta.find("config");
      if (!text) return;
      const Config was = load_config_text(text->as_string(), dir + " (config)", {});
      if (was.parallel.pipeline != pipeline || was.parallel.virtual_stages != virtual_stages) return;
      model.stage_layers = parse_stage_layers(was);
      stage_layers = split_text(model, pipeline * virtual_stages);
    } catch (const UserError&) {
    } catch (const CheckpointError&) {
    }
  }
  // From the meta's written_by_layout; throws CheckpointError when it lacks a field.
  static ShardLayout written_in(const JsonValue& meta) {
    const JsonValue* l = meta.find("written_by_layout");
    auto field = [&](const char* key) {
      const JsonValue* v = l ? l->find(key) : nullptr;
      if (!v) throw CheckpointError(std::string("meta has no written_by_layout.") + key);
      return v->as_int();
    };
    const JsonValue* layers = l ? l->find("stage_layers") : nullptr;
    const JsonValue* expert = l ? l->find("expert") : nullptr;
    return {field("tensor"), field("pipeline"), field("data"), field("virtual_stages"), field("zero_stage"),
            layers ? layers->as_string() : std::string(), expert ? expert->as_int() : 1};
  }
  // What decides the pieces, for reassembling them; throws CheckpointError on a split that does
  // not fit the model, UserError on one not recorded (needed only with more than one chunk).
  PieceLayout pieces(const GPTConfig& model) const {
    constexpr int64_t kMaxChunks = int64_t(1) << 24;  // world ranks, and virtual stages: beyond any real run
    for (int64_t n : {tensor, pipeline, data, virtual_stages, expert})
      if (n < 1 || n > kMaxChunks) throw CheckpointError("meta's written_by_layout has a size of " + std::to_string(n));
    if (expert > 1 && (data % expert != 0 || model.moe.experts % expert != 0))
      throw CheckpointError("meta's written_by_layout.expert = " + std::to_string(expert) +
                            " does not divide its data size " + std::to_string(data) + " and the model's " +
                            std::to_string(model.moe.experts) + " experts");
    if (tensor > kMaxChunks / pipeline || tensor * pipeline > kMaxChunks / data)
      throw CheckpointError("meta's written_by_layout has more than " + std::to_string(kMaxChunks) + " ranks");
    try {
      if (tensor > 1) GPT::check_tensor_parallel(model, int(tensor));
    } catch (const UserError& e) {
      throw CheckpointError("meta's written_by_layout.tensor = " + std::to_string(tensor) + " does not fit the model (" +
                            e.what() + ")");
    }
    PieceLayout l{int(tensor), int(pipeline), int(virtual_stages), int(data), int(expert), {}};
    if (stage_layers.empty()) {
      if (pipeline * virtual_stages > 1)
        throw UserError("it predates checkpoints that record how the pipeline split the model, and the split "
                        "cannot be read from its config, so its optimizer state cannot be placed");
      return l;
    }
    std::istringstream in(stage_layers);
    int64_t sum = 0;
    for (std::string n; std::getline(in, n, ',');) {
      char* end = nullptr;
      const long v = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 1 || v > model.n_layers)
        throw CheckpointError("meta's written_by_layout.stage_layers \"" + stage_layers + "\" is not a list of block counts");
      l.stage_layers.push_back(int(v));
      sum += v;
    }
    if (sum != model.n_layers || int64_t(l.stage_layers.size()) != pipeline * virtual_stages)
      throw CheckpointError("meta's written_by_layout.stage_layers \"" + stage_layers + "\" does not split " +
                            std::to_string(model.n_layers) + " blocks over " + std::to_string(pipeline * virtual_stages) +
                            " virtual stages");
    return l;
  }
  JsonObject json() const {
    JsonObject o;
    o.add("tensor", tensor).add("pipeline", pipeline).add("data", data).add("virtual_stages", virtual_stages);
    o.add("zero_stage", zero_stage).add("world", tensor * pipeline * data).add("stage_layers", stage_layers);
    if (expert > 1) o.add("expert", expert);  // absent: 1, as before experts existed
    return o;
  }
  std::string str() const {
    return "tensor " + std::to_string(tensor) + " x pipeline " + std::to_string(pipeline) +
           (virtual_stages > 1 ? " (" + std::to_string(virtual_stages) + " virtual stages)" : "") + " x data " +
           std::to_string(data) + (expert > 1 ? " (expert " + std::to_string(expert) + ")" : "") + ", ZeRO stage " +
           std::to_string(zero_stage) +
           (pipeline > 1 && !stage_layers.empty() ? ", layers per virtual stage " + stage_layers : "");
  }
};

int world_rank() {
  int rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

// A rank's own blob of the optimizer tensor `name`: "rank00005/adam_m.bin" (world rank).
std::string rank_blob_name(int rank, const std::string& name) {
  char dir[32];
  std::snprintf(dir, sizeof dir, "rank%05d/", rank);
  return dir + name + ".bin";
}

// Every rank's `text`, in rank order, on rank 0 (empty elsewhere).
std::vector<std::string> gather_strings(const std::string& text, MPI_Comm comm) {
  int rank = 0, size = 1;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(comm, &size));
  int len = int(text.size());
  std::vector<int> lens(rank == 0 ? size_t(size) : 0), at(lens.size());
  TRELLIS_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    at[i] = total;
    total += lens[i];
  }
  std::string all(size_t(total), '\0');
  TRELLIS_MPI_CHECK(
      MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), at.data(), MPI_CHAR, 0, comm));
  std::vector<std::string> texts;
  for (size_t i = 0; i < lens.size(); ++i) texts.push_back(all.substr(size_t(at[i]), size_t(lens[i])));
  return texts;
}

// A rank's report to rank 0 on the blobs it wrote: one line each (name, bytes, dtype, CRC32C,
// shape), or "!" and why it could not write them.
std::string blob_report(const std::vector<BlobInfo>& blobs) {
  std::string report;
  for (const BlobInfo& b : blobs) {
    report += b.name + ' ' + std::to_string(b.bytes) + ' ' + b.dtype + ' ' + crc32c_hex(b.crc32c);
    for (int64_t d : b.shape) report += ' ' + std::to_string(d);
    report += '\n';
  }
  return report;
}

std::vector<BlobInfo> parse_blob_report(const std::string& report) {
  std::vector<BlobInfo> blobs;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    BlobInfo b;
    std::string crc;
    fields >> b.name >> b.bytes >> b.dtype >> crc;
    b.crc32c = uint32_t(std::stoul(crc, nullptr, 16));
    for (int64_t d; fields >> d;) b.shape.push_back(d);
    blobs.push_back(std::move(b));
  }
  return blobs;
}

// Writes this rank's optimizer state, as it holds it, into the checkpoint's temporary directory
// `temp_dir`; returns its report for rank 0.
std::string write_rank_state(Runtime& rt, TrainingState s, const std::string& temp_dir, int rank) {
  try {
    CheckpointPartWriter part(temp_dir);
    for (const StateBlob& b : state_blobs(s)) {
      if (b.held == Held::params) continue;  // in the whole model's layout, by rank 0
      std::vector<char> assembled;
      const Tensor t = owned_state(s, b, assembled);
      std::vector<char> host(t.nbytes());
      copy(rt, Tensor(host.data(), t.dtype, Device::CPU(), t.shape), t);
      rt.synchronize();
      part.add_blob(rank_blob_name(rank, b.name), host.data(), host.size(), std::string(dtype_name(t.dtype)),
                    {t.numel()});
    }
    return blob_report(part.finish());
  } catch (const CheckpointError& e) {
    return "!rank " + std::to_string(rank) +
           " could not write its optimizer state (every rank writes its own into checkpoint.dir, which must be on a "
           "filesystem all ranks see): " + e.what();
  }
}

// What decides which samples a step trains on: a resumed run that changes it trains on other data
// than the uninterrupted run would have, so say so (it may be meant: a new data blend, say). Also
// changed document masking or loss masking, and an initial loss scale that the checkpoint's scale overrides.
void warn_on_changed_data(const Config& cfg, const JsonValue& meta, const std::string& dir,
                          const std::string& data_identity) {
  const JsonValue* text = meta.find("config");
  if (!text) return;
  Config was;
  try {
    was = load_config_text(text->as_string(), dir + " (config)", {});
  } catch (const UserError&) {
    return;  // written by a version with other keys: nothing to compare
  }
  // The same data.path rewritten (regenerated, or other text tokenized into it) since the save.
  const JsonValue* data = meta.find("data");
  const JsonValue* saved = data ? data->find("identity") : nullptr;
  if (saved && saved->kind == JsonValue::Kind::kString && !data_identity.empty() &&
      !same_data_identity(saved->as_string(), data_identity) && was.data.path == cfg.data.path &&
      was.data.source == cfg.data.source && was.data.packing == cfg.data.packing)  // else warned of below
    std::printf("warning: resumed on data of %s, but the checkpoint's run read %s from the same data.path: the steps "
                "from here train on other samples than an uninterrupted run would\n",
                data_identity.c_str(), saved->as_string().c_str());
  const std::pair<const char*, std::pair<std::string, std::string>> keys[] = {
      {"train.seed", {std::to_string(cfg.train.seed), std::to_string(was.train.seed)}},
      {"data.source", {cfg.data.source, was.data.source}},
      {"data.path", {cfg.data.path, was.data.path}},
      {"data.val_fraction", {std::to_string(cfg.data.val_fraction), std::to_string(was.data.val_fraction)}},
      {"data.packing", {cfg.data.packing, was.data.packing}}};
  for (const auto& [key, values] : keys)
    if (values.first != values.second)
      std::printf("warning: resumed with %s = \"%s\", but the checkpoint's run had \"%s\": the steps from here train on "
                  "other samples than an uninterrupted run would\n",
                  key, values.first.c_str(), values.second.c_str());
  // Document masking changes what attention sees, the reset which positions the tokens take; not the samples.
  // A key that takes data.eod_token, as the log names it.
  auto with_eod = [](bool on, const Config& c) {
    return on ? "true (data.eod_token = " + std::to_string(c.data.eod_token) + ")" : std::string("false");
  };
  auto documents = [&](const Config& c) { return with_eod(c.data.document_mask, c); };
  if (documents(cfg) != documents(was))
    std::printf("warning: resumed with data.document_mask = %s, but the checkpoint's run had %s: attention from here "
                "sees other tokens than in an uninterrupted run\n",
                documents(cfg).c_str(), documents(was).c_str());
  const bool reset = cfg.data.document_mask && cfg.data.reset_positions,
             was_reset = was.data.document_mask && was.data.reset_positions;
  if (reset != was_reset)
    std::printf("warning: resumed with learned positions counted from each %s's start, but the checkpoint's run counted "
                "them from each %s's (data.reset_positions)\n",
                reset ? "document" : "sample", was_reset ? "document" : "sample");
  auto loss_mask = [&](const Config& c) { return with_eod(c.data.eod_mask_loss, c); };
  if (loss_mask(cfg) != loss_mask(was))
    std::printf("warning: resumed with data.eod_mask_loss = %s, but the checkpoint's run had %s: the loss from here "
                "counts other targets than in an uninterrupted run\n",
                loss_mask(cfg).c_str(), loss_mask(was).c_str());
  if (cfg.fp16.initial_scale_power != was.fp16.initial_scale_power)
    std::printf("note: fp16.initial_scale_power = %lld applies to fresh runs; the loss scale continues from the "
                "checkpoint's\n",
                (long long)cfg.fp16.initial_scale_power);
}

// The step a checkpoint was saved after (its meta's "step").
int64_t saved_step(const std::string& dir) {
  const JsonValue meta = parse_json(CheckpointReader::open(dir, CheckpointVerify::kSizes).meta());
  const JsonValue* step = meta.find("step");
  if (!step) throw CheckpointError(dir + ": meta has no step");
  if (step->as_int() < 0) throw CheckpointError(dir + ": meta's step " + step->text + " is negative");
  return step->as_int();
}

// Refuses a run that would replace another run's work in checkpoint.dir: a valid step checkpoint
// saved after `from_step` (this run's saves would overwrite it, and resume = auto would then pick
// either run's) and, for a run that does not continue this directory's own checkpoints (fresh, or
// resumed from another directory), any valid one (pruning would delete it) and best/.
void refuse_overwriting(const Config& cfg, int64_t from_step, bool continues_this_dir) {
  namespace fs = std::filesystem;
  const std::string& dir = cfg.checkpoint.dir;
  const int64_t after = continues_this_dir ? from_step : 0;
  const std::optional<std::string> newest = latest_valid_checkpoint(dir);
  const int64_t step =
      newest ? parse_checkpoint_dir_name(fs::path(*newest).filename().string()).value_or(-1) : int64_t(-1);
  std::error_code ec;
  const bool best = !continues_this_dir && fs::exists(fs::path(dir) / "best" / "manifest.json", ec);
  if (step <= after && !best) return;
  const std::string held = step > after ? "checkpoints up to step " + std::to_string(step) : "a best/ checkpoint";
  throw UserError(cfg.path + ": checkpoint.dir = " + dir + " holds " + held + " that this run (checkpoint.resume = " +
                  cfg.checkpoint.resume + ", from step " + std::to_string(from_step) +
                  ") would overwrite or prune: give this run another checkpoint.dir (checkpoint.resume may still "
                  "point into this one), move them away, or continue them with checkpoint.resume = auto");
}

// checkpoint.resume names a checkpoint directory (its manifest), or a checkpoint.dir: then its
// newest valid checkpoint, saying which it skipped. Throws UserError when there is none.
std::string resolve_resume_path(const Config& cfg, const std::string& r) {
  std::string why;
  const std::optional<std::string> chosen = checkpoint_named_by(r, &why);
  if (!why.empty()) std::printf("checkpoint: skipped invalid checkpoints:\n%s\n", why.c_str());
  if (!chosen) {
    std::filesystem::path named = std::filesystem::path(r).lexically_normal();
    if (named.filename().empty()) named = named.parent_path();  // "step_X/"
    const bool step_dir = parse_checkpoint_dir_name(named.filename().string()).has_value();
    throw UserError(cfg.path + ": checkpoint.resume = " + r + ": " +
                    (step_dir && why.empty() ? "not a checkpoint (a step directory without manifest.json: incomplete, "
                                               "or not written by Trellis)"
                                             : "no valid checkpoint in it" +
                                                   std::string(why.empty() ? " (no step_NNNNNNNN directories)" : "")));
  }
  return *chosen;
}

// Whether two paths name the same directory (false when either cannot be examined).
bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

}  // namespace

void check_writable_dir(const std::string& what, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw UserError(what + ": cannot create it as a directory: " + (ec ? ec.message() : "a file is in the way"));
  const fs::path probe = fs::path(dir) / (".trellis_write_test." + std::to_string(::getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) throw UserError(what + ": cannot write in it: " + std::strerror(errno));
  std::fclose(f);
  fs::remove(probe, ec);
}

// Rank 0 holds an exclusive lock on checkpoint.dir until the process exits: a second run in the
// same directory would save over this one's steps and prune them. Where the filesystem has no
// locks (some network filesystems) the run goes on with a warning. Returns whether it holds it.
namespace {
bool lock_checkpoint_dir(const std::string& what, const std::string& dir) {
  static int held = -1;  // the directory's descriptor, open for the rest of the process
  if (held >= 0) return true;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;  // check_writable_dir has said what is wrong with it
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    held = fd;
    return true;
  }
  const int err = errno;
  ::close(fd);
  if (err == EWOULDBLOCK)
    throw UserError(what + ": another run is using it (it holds the directory's lock); two runs in one "
                           "checkpoint.dir would overwrite and prune each other's checkpoints");
  std::printf("warning: %s: cannot lock it (%s); make sure no other run uses it\n", what.c_str(), std::strerror(err));
  return false;
}
}  // namespace

void check_checkpoint_dir_shared(const Config& cfg) {
  const std::string& dir = cfg.checkpoint.dir;
  std::error_code ec;
  const std::string what = cfg.path + ": checkpoint.dir = " + dir + " (every rank writes its own optimizer state "
                           "there at zero.stage >= 1, so it must be on a filesystem all ranks see)";
  if (!std::filesystem::is_directory(dir, ec))
    throw UserError(what + ": rank " + std::to_string(world_rank()) + " does not see it");
  check_writable_dir(what + ": rank " + std::to_string(world_rank()), dir);
}

std::optional<std::string> choose_resume(const Config& cfg, MPI_Comm world) {
  int rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::string chosen, error;
  if (rank == 0) {
    const std::string& r = cfg.checkpoint.resume;
    try {
      const bool checkpoints = !cfg.checkpoint.dir.empty();
      // A path that cannot hold checkpoints is found now, not at the first save.
      if (checkpoints) {
        const std::string what = cfg.path + ": checkpoint.dir = " + cfg.checkpoint.dir;
        // A checkpoint (step_X, best/) named as the directory of checkpoints: auto would find none
        // in it and start afresh, saving into the user's checkpoint.
        std::error_code ec;
        if (std::filesystem::exists(std::filesystem::path(cfg.checkpoint.dir) / "manifest.json", ec))
          throw UserError(what + " is itself a checkpoint (it holds manifest.json): give the run a directory of its "
                                 "own, and set checkpoint.resume = " + cfg.checkpoint.dir + " to continue from it");
        check_writable_dir(what, cfg.checkpoint.dir);
        // With the lock no writer is live, so a swap interrupted on any host (a job restarted on
        // other nodes) is undone too, not only this host's.
        if (lock_checkpoint_dir(what, cfg.checkpoint.dir)) restore_interrupted_swaps(cfg.checkpoint.dir, true);
      }
      // checkpoint.resume = checkpoint.dir itself is auto: it continues that directory.
      const bool auto_resume = r == "auto" || (checkpoints && same_directory(r, cfg.checkpoint.dir));
      if (auto_resume) {
        std::string why;
        if (checkpoints) {
          if (auto latest = latest_valid_checkpoint(cfg.checkpoint.dir, &why)) chosen = *latest;
          if (!why.empty()) std::printf("checkpoint: skipped invalid checkpoints:\n%s\n", why.c_str());
          // Step checkpoints and none readable (damaged, or a read error that may pass): a fresh
          // run would save over them and prune them, so it is not started.
          if (chosen.empty() && !why.empty())
            throw CheckpointError("checkpoint.dir = " + cfg.checkpoint.dir +
                                  " holds step checkpoints but none can be read (" + why.substr(0, why.find('\n')) +
                                  "); a fresh run would replace them: move them away, or set another checkpoint.dir");
        }
      } else if (r != "none") {
        chosen = resolve_resume_path(cfg, r);
        const int64_t from_step = saved_step(chosen);  // also checks that it is a checkpoint
        const bool inside =
            same_directory(std::filesystem::absolute(chosen).parent_path().string(), cfg.checkpoint.dir);
        if (checkpoints) refuse_overwriting(cfg, from_step, inside);
      } else if (checkpoints) {
        refuse_overwriting(cfg, 0, false);
      }
    } catch (const CheckpointError& e) {
      error = cfg.path + ": checkpoint.resume = " + r + ": " + e.what();
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  // Rank 0's "error flag + text".
  const std::string msg = broadcast_string(error.empty() ? "+" + chosen : "!" + error, world);
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
    const JsonValue* optimizer_state = meta.find("optimizer_state");
    const bool per_rank = optimizer_state && optimizer_state->as_string() == kPerRank;
    // Per-rank optimizer state on another layout is reassembled into the whole model's layout
    // first, and each rank takes its part of that as from a checkpoint written whole.
    std::optional<PieceLayout> reshard;
    if (per_rank) {
      ShardLayout written = ShardLayout::written_in(meta);
      written.recover_split(meta, dir, s.model.config());
      const ShardLayout here = ShardLayout::of(cfg, s);
      if (!s.optimizer.sharded() || !written.same_pieces(here)) {
        try {
          reshard = written.pieces(s.model.config());
        } catch (const UserError& e) {
          throw UserError(cfg.path + ": checkpoint " + dir + " was written with " + written.str() + "; this run has " +
                          here.str() + ": " + e.what());
        }
        if (world_rank() == 0)
          std::printf("checkpoint: its optimizer state was saved per rank by %s; resharding it for %s\n",
                      written.str().c_str(), here.str().c_str());
      }
    }
    // World rank `rank`'s blob of optimizer tensor `name`: numel elements of `dtype`.
    auto read_rank_blob = [&](int rank, const std::string& name, int64_t numel, DType dtype) {
      const std::string blob = rank_blob_name(rank, name);
      const size_t bytes = size_t(numel) * dtype_size(dtype);
      if (!reader.has_blob(blob) || reader.blob_size(blob) != bytes || reader.blob_info(blob).dtype != dtype_name(dtype))
        throw UserError(cfg.path + ": checkpoint " + dir + " has no " + blob + " of " + std::to_string(bytes) +
                        " bytes of " + std::string(dtype_name(dtype)) + " (written with another precision?)");
      std::vector<char> host(bytes);
      reader.read_blob(blob, host.data(), host.size());
      return host;
    };
    for (const StateBlob& b : state_blobs(s)) {
      const std::string& name = b.name;
      // The owned state's shape and type: f32 master weights, or a moment tensor.
      const int64_t owned_numel = s.optimizer.owned_numel();
      const DType owned_dtype = b.held == Held::tensor ? b.t.dtype : DType::f32;
      if (per_rank && !reshard && b.held != Held::params) {  // this rank's own pieces, as it holds them
        std::vector<char> host = read_rank_blob(world_rank(), name, owned_numel, owned_dtype);
        set_owned_state(rt, s, b, Tensor(host.data(), owned_dtype, Device::CPU(), {owned_numel}));
        continue;
      }
      const DType dtype = b.held == Held::params ? s.model.params().dtype() : owned_dtype;
      std::vector<char> host;
      std::map<std::string, std::vector<char>> tensors;  // a whole-layout blob: this rank's tensors of it
      if (reshard && b.held != Held::params) {
        const std::vector<ParameterSpec>& mine = s.layout.stage[size_t(s.pipeline_rank())];
        host = whole_from_pieces(
            s.model.config(), *reshard, dtype_size(dtype),
            [&](int rank, int64_t numel) { return read_rank_blob(rank, name, numel, dtype); },
            [&](const std::string& p) {
              return std::any_of(mine.begin(), mine.end(), [&](const ParameterSpec& q) { return q.name == p; });
            });
      } else {
        if (!reader.has_blob(name))
          throw UserError(cfg.path + ": checkpoint " + dir + " has no " + name + " (written with another precision?)");
        host.resize(size_t(s.layout.whole_numel()) * dtype_size(dtype));
        if (reader.blob_size(name) != host.size())
          throw UserError(cfg.path + ": checkpoint " + dir + ": " + name + " holds " +
                          std::to_string(reader.blob_size(name)) + " bytes; this model needs " + std::to_string(host.size()));
        // Same size is not same meaning: bf16 bits read as fp16 would load silently wrong values.
        if (reader.blob_info(name).dtype != dtype_name(dtype))
          throw UserError(cfg.path + ": checkpoint " + dir + ": " + name + " holds " + reader.blob_info(name).dtype +
                          "; this run needs " + std::string(dtype_name(dtype)) + " (written with another precision?)");
        host.clear();
        tensors = tensors_of_blob(reader, name, s, dtype_size(dtype));
      }
      set_from_stage(rt, s, b, dtype, [&](const Tensor& part) {
        if (tensors.empty()) scatter_whole(rt, s.layout, s.pipeline_rank(), s.tensor_rank(), host, part);
        else scatter_tensors(rt, s.layout, s.pipeline_rank(), s.tensor_rank(),
                             [&](const std::string& p) { return tensors.at(p).data(); }, part);
      });
    }
    const JsonValue& sc = meta.at("scaler");
    LossScalerState st;
    st.scale = sc.at("scale").as_double();
    st.clean_steps = sc.at("clean_steps").as_int();
    st.hysteresis_left = sc.at("hysteresis_left").as_int();
    st.skipped = sc.at("skipped").as_int();
    if (!(st.scale > 0) || !std::isfinite(st.scale))
      throw CheckpointError("its loss scale " + sc.at("scale").text + " is not a positive number");
    s.scaler.restore(st);
    const int64_t step = meta.at("step").as_int();
    const int64_t seen = meta.at("data").at("samples_seen").as_int();
    if (step < 0 || seen < 0)
      throw CheckpointError("its step (" + std::to_string(step) + ") or samples seen (" + std::to_string(seen) +
                            ") is negative");
    // (Divided, not multiplied: a damaged step count must not wrap into a match.)
    if (step > 0 && (seen % step != 0 || seen / step != global_batch))
      throw UserError(cfg.path + ": checkpoint " + dir + " has seen " + std::to_string(seen) + " samples in " +
                      std::to_string(step) + " steps, not " + std::to_string(global_batch) +
                      " a step as this run has (train.global_batch, train.micro_batch and the data-parallel size "
                      "must give the same)");
    if (world_rank() == 0) warn_on_changed_data(cfg, meta, dir, s.data_identity);
    return step;
  } catch (const CheckpointError& e) {
    throw UserError(cfg.path + ": cannot resume from " + dir + ": " + e.what());
  }
}

std::string broadcast_string(std::string text, MPI_Comm comm) {
  int len = int(text.size());
  TRELLIS_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, comm));
  text.resize(size_t(len));
  TRELLIS_MPI_CHECK(MPI_Bcast(text.data(), len, MPI_CHAR, 0, comm));
  return text;
}

StoredModel open_init_source(const Config& cfg, const GPTConfig& want, const std::string& source) {
  const std::string what = cfg.path + ": model.init_from = " + cfg.model.init_from;
  const StoredModel src = [&] {
    try {
      return open_stored_model(source.empty() ? cfg.model.init_from : source, "initializing from");
    } catch (const UserError& e) {
      throw UserError(what + ": " + e.what());
    }
  }();
  const GPTConfig& have = src.shape;
  auto shape = [](const GPTConfig& m) {
    return "vocab_size " + std::to_string(m.vocab_size) + ", n_layers " + std::to_string(m.n_layers) + ", n_heads " +
           std::to_string(m.n_heads) + ", d_model " + std::to_string(m.d_model) + ", seq_len " + std::to_string(m.seq_len);
  };
  // Rotary positions have no table, so a RoPE model's context may also grow.
  if (have.vocab_size != want.vocab_size || have.n_layers != want.n_layers || have.n_heads != want.n_heads ||
      have.d_model != want.d_model || (have.seq_len < want.seq_len && !want.rope))
    throw UserError(what + " holds a model of " + shape(have) + "; this run has " + shape(want) +
                    " (model.seq_len may be shorter than the source's: its first positions are taken)");
  auto positions = [](const GPTConfig& m, bool lists) {
    char theta[32];
    std::snprintf(theta, sizeof theta, "%g", m.rope_theta);
    const std::string scaling = rope_scaling_text(m);
    // LongRoPE's lists as the keys take them, so that the run can copy them.
    auto list = [](const std::vector<double>& v) { return std::string("\"").append(number_list(v)).append("\""); };
    return m.rope ? "rotary positions (model.position_embedding = rope, model.rope_theta = " + std::string(theta) +
                        (scaling.empty() ? ", model.rope_scaling = none" : ", " + scaling) +
                        (m.rope_dims > 0 ? ", turning " + std::to_string(m.rope_dims) + " of a head's " +
                                               std::to_string(m.head_dim()) + " dims: model.partial_rotary_factor"
                                         : "") +
                        (lists && m.rope_longrope ? ", model.rope_long_factor = " + list(m.rope_long_factors) +
                                                        ", model.rope_short_factor = " + list(m.rope_short_factors)
                                                  : "") + ")"
                  : std::string("learned positions (model.position_embedding = learned)");
  };
  // The rotation this run would compute with the source's settings: LongRoPE's choice of factors
  // follows the run's context, not the source's.
  GPTConfig have_here = have;
  have_here.seq_len = want.seq_len;
  if (have.rope != want.rope || (want.rope && have_here.rotary() != want.rotary()))
    throw UserError(what + " holds a model with " + positions(have, true) + "; this run has " + positions(want, false));
  auto mlp = [](const GPTConfig& m) {
    return std::string(m.swiglu ? "a SwiGLU MLP (model.mlp = swiglu" : "a GELU MLP (model.mlp = gelu") +
           ", model.ffn_hidden_size = " + std::to_string(m.mlp_width()) + ")";
  };
  if (have.swiglu != want.swiglu || have.mlp_width() != want.mlp_width())
    throw UserError(what + " holds a model with " + mlp(have) + "; this run has " + mlp(want));
  auto norm = [](const GPTConfig& m) {
    return std::string(m.rmsnorm ? "RMSNorm (model.norm = rmsnorm)" : "LayerNorm (model.norm = layernorm)");
  };
  if (have.rmsnorm != want.rmsnorm)
    throw UserError(what + " holds a model with " + norm(have) + "; this run has " + norm(want));
  auto biases = [](const GPTConfig& m) {
    return std::string(m.bias       ? "biases in its linear layers (model.bias = true)"
                       : m.qkv_bias ? "biases on qkv alone (model.bias = false, model.qkv_bias = true)"
                                    : "no biases in its linear layers (model.bias = false)");
  };
  if (have.bias != want.bias || have.has_qkv_bias() != want.has_qkv_bias())
    throw UserError(what + " holds a model with " + biases(have) + "; this run has " + biases(want));
  if (float(have.norm_eps) != float(want.norm_eps))
    throw UserError(what + " holds a model with model.norm_eps = " + number_g(have.norm_eps) + "; this run has " +
                    number_g(want.norm_eps));
  auto attention = [](const GPTConfig& m) {
    return std::to_string(m.kv_heads()) + " key-value heads (model.n_kv_heads = " + std::to_string(m.kv_heads()) + ")";
  };
  if (have.kv_heads() != want.kv_heads())
    throw UserError(what + " holds a model with " + attention(have) + "; this run has " + attention(want));
  auto heads = [](const GPTConfig& m) {
    return "heads of size " + std::to_string(m.head_dim()) + (m.qk_norm ? " with" : " without") +
           " QK-norm (model.head_dim = " + std::to_string(m.head_size) + ", model.qk_norm = " +
           (m.qk_norm ? "true" : "false") + ")";
  };
  if (have.head_dim() != want.head_dim() || have.qk_norm != want.qk_norm)
    throw UserError(what + " holds a model with " + heads(have) + "; this run has " + heads(want));
  auto head = [](const GPTConfig& m) {
    return std::string(m.tied_head ? "a head tied to the token embedding (model.tie_embeddings = true)"
                                   : "a head of its own (model.tie_embeddings = false)");
  };
  if (have.tied_head != want.tied_head)
    throw UserError(what + " holds a model with " + head(have) + "; this run has " + head(want));
  // The experts' parameters: which blocks have them, how many, a shared MLP, their width (top_k, the
  // capacity and the losses' weights are this run's to choose).
  auto experts = [](const GPTConfig& m) {
    const MoEConfig& e = m.moe;
    if (e.experts == 0) return std::string("dense MLPs (moe.experts = 0)");
    return "experts (moe.experts = " + std::to_string(e.experts) + ", moe.ffn_hidden_size = " +
           std::to_string(e.expert_width(m.d_model)) + ", moe.layer_freq = " + std::to_string(e.layer_freq) +
           ", moe.first_dense_layers = " + std::to_string(e.first_dense) + ", moe.shared_experts = " +
           std::to_string(e.shared_experts) + (e.shared_gate ? ", moe.shared_gate = true" : "") + ")";
  };
  if (experts(have) != experts(want))
    throw UserError(what + " holds a model with " + experts(have) + "; this run has " + experts(want));
  return src;
}

std::map<std::string, std::vector<float>> initial_tensors(const Config& cfg, const GPTConfig& want,
                                                          const std::set<std::string>& names, const std::string& source) {
  const std::string what = cfg.path + ": model.init_from = " + cfg.model.init_from;
  const StoredModel src = open_init_source(cfg, want, source);
  std::map<std::string, std::vector<float>> tensors = [&] {
    try {
      return src.read_f32_tensors(names);
    } catch (const UserError& e) {
      throw UserError(what + ": " + e.what());
    }
  }();
  // The same tensors by name; the position table's first rows where the source's context is longer.
  size_t read = 0;
  for (const ParameterSpec& p : GPT::parameter_specs(want)) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) continue;
    std::vector<float>& v = it->second;
    if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }))
      throw UserError(what + ": " + src.dir + " holds non-finite parameters (a diverged run's?) in " + p.name);
    v.resize(size_t(p.shape.numel()));
    read += v.size();
  }
  if (world_rank() == 0)
    std::printf("initialized the parameters from %s (model.init_from; rank 0 took %s of its %s parameters); the "
                "optimizer starts afresh\n",
                src.dir.c_str(), with_commas(int64_t(read)).c_str(), with_commas(src.numel).c_str());
  return tensors;
}

std::vector<float> initial_parameters(const Config& cfg, const GPTConfig& want, const std::vector<ParameterSpec>& whole_specs,
                                      const std::string& source) {
  std::set<std::string> names;
  for (const ParameterSpec& p : whole_specs) names.insert(p.name);
  const std::map<std::string, std::vector<float>> tensors = initial_tensors(cfg, want, names, source);
  std::vector<float> whole;
  for (const ParameterSpec& p : whole_specs) whole.insert(whole.end(), tensors.at(p.name).begin(), tensors.at(p.name).end());
  return whole;
}

void load_initial_parameters(Runtime& rt, const Config& cfg, TrainingState s, const std::string& source) {
  // This rank reads the tensors it holds (its stage's, its experts), not the whole model.
  std::set<std::string> names;
  for (const ParameterSpec& p : s.layout.shard_of(s.pipeline_rank(), s.tensor_rank())) names.insert(p.name);
  const std::map<std::string, std::vector<float>> tensors = initial_tensors(cfg, s.model.config(), names, source);
  // The parameters in the compute dtype; a separate master holds the f32 values themselves. The
  // Adam moments start at zero.
  for (const StateBlob& b : state_blobs(s)) {
    if (b.held == Held::tensor) continue;
    const DType dtype = b.held == Held::params ? s.model.params().dtype() : DType::f32;
    std::map<std::string, std::vector<char>> host;
    for (const auto& [name, values] : tensors) {
      std::vector<char>& h = host[name];
      h.resize(values.size() * dtype_size(dtype));
      for (size_t i = 0; i < values.size(); ++i) {
        if (dtype == DType::f32) std::memcpy(h.data() + 4 * i, &values[i], 4);
        else if (dtype == DType::bf16) reinterpret_cast<bf16_t*>(h.data())[i] = to_bf16(values[i]);
        else reinterpret_cast<f16_t*>(h.data())[i] = to_f16(values[i]);
      }
    }
    set_from_stage(rt, s, b, dtype, [&](const Tensor& stage_whole) {
      scatter_tensors(rt, s.layout, s.pipeline_rank(), s.tensor_rank(),
                      [&](const std::string& name) { return host.at(name).data(); }, stage_whole);
    });
  }
}

namespace {

// Gathers the parameters (and the optimizer state unless it is sharded) on rank 0 (pipeline and
// tensor rank 0), which writes them into the writer made by `open`; with a sharded optimizer every
// rank then writes its own state into that writer's temporary directory. Rank 0 commits. Returns
// the final directory on rank 0 ("" elsewhere). On rank 0 a failure on any rank throws
// CheckpointError, but only after every rank is done (no rank is left waiting, and nobody writes
// into the temporary directory once it is removed).
std::string write_state(Runtime& rt, const Config& cfg, TrainingState s, const std::function<CheckpointWriter()>& open,
                        int64_t step, double loss, int64_t samples_seen, std::optional<double> val_loss) {
  const bool root = s.writer();
  const bool per_rank = s.optimizer.sharded();
  std::optional<CheckpointWriter> w;
  std::string error;
  if (root) {
    try {
      w.emplace(open());
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  for (const StateBlob& b : state_blobs(s)) {
    if (per_rank && b.held != Held::params) continue;  // every rank writes its own below
    // The parameters' copy is assembled on every rank (stage 3: an all-gather); unsharded, the
    // optimizer's state is the whole stage's copy itself, joined (split masters) only where it is sent.
    std::vector<char> scratch;
    const Tensor params = b.held == Held::params ? s.optimizer.whole_values(scratch) : Tensor();
    if (!s.saver()) continue;
    const Tensor whole =
        b.held == Held::params ? params : owned_state(s, b, scratch).slice(0, {s.model.params().numel()});
    const std::string& name = b.name;
    std::vector<char> host = gather_whole(rt, s.tensor, s.pipeline, s.layout, whole);
    if (!root || !error.empty()) continue;
    try {
      w->add_blob(name, host.data(), host.size(), std::string(dtype_name(whole.dtype)), {s.layout.whole_numel()});
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  if (per_rank) {
    // "" when rank 0 has failed already: then nobody writes. The gather of the reports tells rank
    // 0 that every rank is done with the directory, or why one failed.
    const std::string temp_dir = broadcast_string(error.empty() && w ? w->temp_dir() : "", MPI_COMM_WORLD);
    const std::string report = temp_dir.empty() ? "" : write_rank_state(rt, s, temp_dir, world_rank());
    const std::vector<std::string> reports = gather_strings(report, MPI_COMM_WORLD);
    for (const std::string& r : reports)
      if (error.empty() && r.starts_with('!')) error = r.substr(1);
    if (root && error.empty())
      for (const std::string& r : reports)
        for (const BlobInfo& b : parse_blob_report(r)) w->add_written_blob(b);
  }
  if (!root) return "";
  if (!error.empty()) throw CheckpointError(error);
  const LossScalerState st = s.scaler.state();
  JsonObject scaler, data, meta;
  scaler.add("scale", st.scale).add("clean_steps", st.clean_steps).add("hysteresis_left", st.hysteresis_left);
  scaler.add("skipped", st.skipped);
  data.add("samples_seen", samples_seen).add("source", cfg.data.source);
  if (!s.data_identity.empty()) data.add("identity", s.data_identity);
  meta.add("step", step).add("loss", loss).add("version", kVersion);
  meta.add("time", int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count()));
  meta.add("model", model_signature(s.model.config())).add("seed", cfg.train.seed);
  // Which pieces each rank wrote, for per-rank optimizer state (resharded on another layout), else informative.
  meta.add("written_by_layout", ShardLayout::of(cfg, s).json());
  meta.add("optimizer_state", per_rank ? kPerRank : kWhole);
  meta.add("scaler", scaler).add("data", data).add("config", config_to_toml(cfg));
  if (val_loss) meta.add("val_loss", *val_loss);
  w->set_meta(meta.str());
  const std::string where = w->commit();
  if (const std::string& theirs = w->users_files_set_aside(); !theirs.empty())
    std::printf("checkpoint: the checkpoint %s replaced held files no checkpoint writes: %s\n", where.c_str(),
                theirs.c_str());
  return where;
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
      std::vector<std::string> set_aside;
      prune_checkpoints(cfg.checkpoint.dir, int(cfg.checkpoint.keep), step, &set_aside);
      for (const std::string& a : set_aside)
        std::printf("checkpoint: pruned %s, which held files no checkpoint writes\n", a.c_str());
    } catch (const CheckpointError& e) {
      std::printf("warning: checkpoint of step %lld saved, but removing older ones failed: %s\n", (long long)step,
                  e.what());
    }
    std::fflush(stdout);
    return true;
  } catch (const CheckpointError& e) {
    std::printf("warning: checkpoint of step %lld NOT saved: %s; the previous checkpoint is intact\n", (long long)step,
                e.what());
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

bool same_data_identity(const std::string& saved, const std::string& now) {
  if (saved.find(", checksum ") != std::string::npos) return saved == now;
  static const std::regex checksum(", checksum [0-9a-f]{16}"), blend_separator("; ");
  return saved == std::regex_replace(std::regex_replace(now, checksum, ""), blend_separator, ", ");
}

}  // namespace trellis
