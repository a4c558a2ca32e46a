// The training loop of train_gpt: each step runs this rank's pipeline schedule through the engine
// (with one stage: gradient accumulation over micro-batches), then on the device the clip factor
// and the fp16 skip (core/step_scalars.h) and AdamW, with one host wait at the step's end (the
// step replayed as a CUDA graph where it can be); fp16 loss scaling, validation, log lines and
// JSON metrics.
#include "launcher/trainer.h"

#include <mpi.h>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/file_allocator.h"
#include "core/nvtx.h"
#include "core/ops.h"
#include "core/version.h"
#include "core/phase_marks.h"
#include "core/step_graph.h"
#include "core/comm.h"
#include "core/compute_fence.h"
#include "core/process_groups.h"
#include "launcher/batch_loader.h"
#include "core/checkpoint.h"
#include "launcher/checkpointing.h"
#include "launcher/lr_schedule.h"
#include "launcher/memory_plan.h"
#include "launcher/resolved_run.h"
#include "launcher/comm_tally.h"
#include "launcher/metrics.h"
#include "launcher/model_files.h"
#include "launcher/stage_timing_report.h"
#include "launcher/stop_signal.h"
#include "launcher/tensorboard.h"
#include "parallel/data/embedding_rows.h"
#include "data/blended_dataset.h"
#include "data/loss_mask.h"
#include "data/synthetic_dataset.h"
#include "launcher/whole_model.h"
#include "models/gpt.h"
#include "models/gpt_stage.h"
#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_timing.h"
#include "parallel/tensor/mappings.h"
#include "parallel/tensor/packed_all_reduce.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/zero/loss_scaler.h"
#include "parallel/zero/optimizer.h"
#include "parallel/zero/streaming.h"

namespace trellis {

namespace {

// Reads a device f32 scalar (synchronizes).
float read_scalar(Runtime& rt, const Tensor& t) {
  float v = 0;
  copy(rt, Tensor(&v, DType::f32, Device::CPU(), {1}), t);
  rt.synchronize();
  return v;
}

// For a non-finite gradient: the first parameter (in forward order, over the pipeline stages)
// whose reduced gradient is not finite. Collective over the data group when the optimizer is
// sharded (each rank checks its pieces), else over `experts` (expert parallelism: each rank holds
// other experts; null without), and over `pipeline` (null with one stage).
std::string first_nonfinite_parameter(Runtime& rt, ParameterStore& ps, const ZeroOptimizer& opt, const Tensor& scratch,
                                      Communicator* data, Communicator* experts, Communicator* pipeline) {
  int index = int(ps.size());
  for (size_t i = 0; i < ps.size() && index == int(ps.size()); ++i) {
    const Parameter& p = ps[i];
    fill(rt, scratch, 0.0f);
    for (const Tensor& g : opt.owned_grads({{p.offset, p.offset + p.spec.shape.numel()}})) sum_squares_accumulate(rt, scratch, g);
    if (!std::isfinite(read_scalar(rt, scratch))) index = int(i);
  }
  std::string name = index < int(ps.size()) ? ps[size_t(index)].spec.name : "";
  // The earliest parameter, on the lowest rank finding it, names it for the group (its ranks may
  // hold different experts at the same index).
  if (Communicator* group = opt.sharded() ? data : experts) {
    struct {
      int index, rank;
    } first{index, group->rank()};
    TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_2INT, MPI_MINLOC, group->mpi_comm()));
    name.clear();
    if (first.index < int(ps.size())) {
      if (group->rank() == first.rank) name = ps[size_t(first.index)].spec.name;
      int len = int(name.size());
      TRELLIS_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first.rank, group->mpi_comm()));
      name.resize(size_t(len));
      TRELLIS_MPI_CHECK(MPI_Bcast(name.data(), len, MPI_CHAR, first.rank, group->mpi_comm()));
    }
  }
  if (pipeline) {  // the earliest stage that found one tells the others
    const int p = pipeline->size();
    int first = name.empty() ? p : pipeline->rank();
    TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, pipeline->mpi_comm()));
    if (first == p) {
      name.clear();
    } else {
      int len = int(name.size());
      TRELLIS_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, pipeline->mpi_comm()));
      name.resize(size_t(len));
      TRELLIS_MPI_CHECK(MPI_Bcast(name.data(), len, MPI_CHAR, first, pipeline->mpi_comm()));
    }
  }
  if (!name.empty()) return name;
  return "(none: every parameter's gradient is finite, so the loss or the f32 sum of squares overflowed)";
}

// Host f32 copy of whole-model values gathered in `dtype`.
std::vector<float> to_f32(const std::vector<char>& bytes, DType dtype) {
  const size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::f32: std::memcpy(&out[i], bytes.data() + 4 * i, 4); break;
      case DType::bf16: { bf16_t b; std::memcpy(&b, bytes.data() + 2 * i, 2); out[i] = to_float(b); break; }
      case DType::f16: { f16_t h; std::memcpy(&h, bytes.data() + 2 * i, 2); out[i] = to_float(h); break; }
      default: TRELLIS_FATAL("to_f32: not a float dtype");
    }
  }
  return out;
}

}  // namespace

void check_devices(const Config& cfg, const LaunchInfo& launch) { resolve(cfg, launch); }

// Runs `open` on every rank and agrees on the outcome before any rank goes on, so a file that is
// missing on one node cannot leave the others waiting in a collective. The lowest failing rank's
// message is shown (so ranks that all fail alike, on a checkpoint that does not fit the run, say,
// give one line); every rank then throws.
void agree_on(const std::function<void()>& open, const LaunchInfo& launch) {
  std::string error;
  try {
    open();
  } catch (const UserError& e) {
    error = e.what();
  }
  int first_failed = error.empty() ? launch.world : launch.rank;
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first_failed == launch.world) return;
  if (first_failed == launch.rank && launch.rank != 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "error (rank %d): %s\n", launch.rank, error.c_str());
  }
  // The failing rank has said it (rank 0 through main's handler): the others throw with nothing
  // more to print, so the run ends with one error line.
  throw UserError(first_failed == launch.rank && launch.rank == 0 ? error : "");
}

// The samples of the config's data (with its loss mask, where it has one).
std::unique_ptr<SampleSource> open_data_samples(const Config& cfg, const GPTConfig& mc) {
  if (cfg.data.source != "file")
    return std::make_unique<SyntheticDataset>(cfg.data.source, mc.vocab_size, mc.seq_len, uint64_t(cfg.train.seed));
  DatasetOptions o;
  o.seq_len = mc.seq_len;
  o.seed = uint64_t(cfg.train.seed);
  o.val_fraction = cfg.data.val_fraction;
  o.need_val = cfg.log.val_every > 0;
  o.model_vocab = mc.vocab_size;
  o.whole_documents = cfg.data.packing == "documents";
  try {
    return open_dataset(cfg.data.path, o);
  } catch (const UserError& e) {  // the data layer names its files; the config and key come first
    throw UserError(cfg.path + ": data.path = " + cfg.data.path + ": " + e.what());
  }
}

// The training samples as the config says (data.eod_mask_loss: without the targets after an EOD).
std::unique_ptr<SampleSource> open_samples(const Config& cfg, const GPTConfig& mc) {
  std::unique_ptr<SampleSource> data = open_data_samples(cfg, mc);
  if (!cfg.data.eod_mask_loss) return data;
  return std::make_unique<EodLossMask>(std::move(data), int32_t(cfg.data.eod_token));
}

// Opens the metrics file on rank 0; every rank learns whether that worked before going on, so a
// bad path cannot leave the other ranks waiting in a collective.
std::unique_ptr<MetricsFile> open_metrics(const Config& cfg, const LaunchInfo& launch,
                                          std::unique_ptr<TensorBoardWriter>& tb) {
  std::unique_ptr<MetricsFile> m;
  std::string error;
  try {
    m = std::make_unique<MetricsFile>(launch.rank == 0 ? cfg.log.metrics_file : "");
    tb = std::make_unique<TensorBoardWriter>(launch.rank == 0 ? cfg.log.tensorboard_dir : "");
  } catch (const UserError& e) {
    error = cfg.path + ": " + e.what();  // the config file that named the path, as for every key
  }
  int failed = error.empty() ? 0 : 1;
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (failed)
    throw UserError(error.empty() ? cfg.path + ": log.metrics_file / log.tensorboard_dir: rank 0 cannot open it" : error);
  return m;
}

// log.trace_file for `rank`: the name itself with one rank, else ".rankR" inserted before ".json"
// (appended otherwise); rank -1 gives the pattern, ".rankN", for messages.
std::string trace_path(const std::string& file, int rank, int world) {
  if (world <= 1) return file;
  const std::string tag = ".rank" + (rank < 0 ? std::string("N") : std::to_string(rank));
  const size_t dot = file.size() >= 5 ? file.rfind(".json") : std::string::npos;
  if (dot != std::string::npos && dot + 5 == file.size()) return file.substr(0, dot) + tag + ".json";
  return file + tag;
}

// zero.embedding_grad with data ranks > 1: whether the token embedding's gradient is reduced as
// backward begins and the last micro-batch's embedding rows gathered (EmbeddingRowExchange). It needs
// ZeRO stage 0's reduction during backward and the embedding and the head in one chunk of one
// rank's model (pipeline 1, tensor 1); `auto` takes it where the gathered rows are the fewer bytes.
bool use_embedding_row_exchange(const Config& cfg, int data_ranks, int64_t B, int64_t T, const GPTConfig& mc) {
  const std::string& mode = cfg.zero.embedding_grad;
  if (mode == "all_reduce") return false;
  // Untied, the token embedding's gradient is the lookups' alone: its all-reduce first would sum zeros.
  const bool possible = cfg.zero.stage == 0 && cfg.parallel.pipeline == 1 && cfg.parallel.tensor == 1 &&
                        cfg.zero.overlap && mc.tied_head;
  if (mode == "gather_rows" && !possible)
    throw UserError(cfg.path + ": zero.embedding_grad = gather_rows needs zero.stage = 0, parallel.pipeline = 1, "
                    "parallel.tensor = 1, zero.overlap = true and model.tie_embeddings = true (or use auto / "
                    "all_reduce)");
  return possible &&
         (mode == "gather_rows" ||
          EmbeddingRowExchange::pays(data_ranks, B, T, mc.d_model, mc.dtype, mc.padded_vocab()));
}

// With log.trace_step: every rank checks that it can write its trace file (its directory is
// created; the file itself is not touched: an earlier trace stays until this run traces its step),
// and every rank learns whether all could, so a bad path fails at the start on all ranks, not
// after the traced step on some. An existing file that is not a trace (a config, say) is never
// replaced.
void check_trace_file(const Config& cfg, const LaunchInfo& launch) {
  if (cfg.log.trace_step <= 0) return;
  const std::string path = trace_path(cfg.log.trace_file, launch.rank, launch.world);
  int failed = 0;  // 1: cannot write it, 2: a file that is not a trace is in the way
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const std::string start = "{\"displayTimeUnit\"";  // how OpProfiler::end_trace begins a trace
    std::string head(start.size(), '\0');
    std::ifstream(path, std::ios::binary).read(head.data(), std::streamsize(head.size()));
    const bool trace = head == start || !std::filesystem::is_regular_file(path, ec) || std::filesystem::is_empty(path, ec);
    failed = !trace ? 2 : std::ofstream(path, std::ios::binary | std::ios::app) ? 0 : 1;
  } else {
    try {
      const std::string parent = std::filesystem::path(path).parent_path().string();
      check_writable_dir("log.trace_file", parent.empty() ? "." : parent);
    } catch (const UserError&) {
      failed = 1;
    }
  }
  const int mine = failed;
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (failed == 2 && mine != 1)  // another rank's file may be the one in the way
    throw UserError(cfg.path + ": log.trace_file = " + cfg.log.trace_file + ": " +
                    (mine == 2 ? path : "a rank's trace file (" + trace_path(cfg.log.trace_file, -1, launch.world) + ")") +
                    " exists and is not a Trellis trace; refusing to replace it: choose another path");
  if (failed)
    throw UserError(cfg.path + ": log.trace_file = " + cfg.log.trace_file + ": " + (mine ? "cannot write " + path : "another rank cannot write its trace file") +
                    " (a writable path, e.g. \"runs/trace.json\")");
}

// Before the model is built: a run whose model state and planned activations alone exceed what
// the device has free ends in one line instead of an out-of-memory abort mid-setup (or, on the
// CPU, the kernel's OOM killer); so does offloaded optimizer state that the node's memory
// (`offload_memory`) or, with nvme, the offload directory's disk (`offload_files`) cannot hold.
// The plan is a lower bound (no library workspaces, no allocator slack), so a run this lets
// through may still not fit; one it stops cannot.
static void check_memory_fits(const Config& cfg, Runtime& rt, const LaunchInfo& launch, const RankMemoryPlan& plan) {
  const size_t model_state = plan.model_state, zero_slots = plan.zero_slots, activations = plan.activations;
  const size_t offload_memory = plan.offload_memory, offload_files = plan.offload_files;
  const std::string knobs = std::string("; lower train.micro_batch, ") +
                            (cfg.train.checkpointing == "full" ? ""  // already the least kept
                                                               : "set train.checkpointing = \"elementwise\", "
                                                                 "\"selective\" or \"full\", ") +
                            (cfg.zero.stage < 3 ? "raise zero.stage, " : "") +
                            (cfg.zero.offload == "none" ? "set zero.offload = \"cpu\", " : "") +
                            "or add tensor or pipeline ranks";
  const size_t sharing = size_t(std::max(1, launch.local_size));  // ranks of a node share its memory
  auto node = [&](size_t free_bytes) {
    return sharing > 1 ? "this node's memory (" + std::to_string(sharing) + " ranks share " + format_bytes(free_bytes) +
                             " available)"
                       : "host memory (" + format_bytes(free_bytes) + " available)";
  };
  const bool host = rt.device().is_cpu();
  const size_t need =
      saturating_add(saturating_add(saturating_add(model_state, zero_slots), activations), host ? offload_memory : 0);
  const size_t free_bytes = rt.free_memory();
  if (free_bytes > 0 && saturating_mul(need, host ? sharing : 1) > free_bytes)
    throw UserError(cfg.path + ": the run needs at least " + format_bytes(need) + " per rank (model state " +
                    format_bytes(model_state) + (zero_slots ? " + ZeRO slots " + format_bytes(zero_slots) : "") +
                    " + activations " + format_bytes(activations) +
                    (host && offload_memory ? " + offloaded optimizer state " + format_bytes(offload_memory) : "") +
                    ", planned), more than " +
                    (host ? node(free_bytes) : rt.device().str() + " (" + format_bytes(free_bytes) + " free)") + knobs);
  const size_t host_free = host_available_memory();
  if (!host && offload_memory > 0 && host_free > 0 && saturating_mul(offload_memory, sharing) > host_free)
    throw UserError(cfg.path + ": zero.offload = \"" + cfg.zero.offload + "\" keeps " + format_bytes(offload_memory) +
                    " of optimizer state per rank in host memory, more than " + node(host_free) +
                    (cfg.zero.offload == "cpu" ? "; use zero.offload = \"nvme\"," : ";") + " raise zero.stage or add ranks");
  if (offload_files > 0) {  // nvme: the local disk holds them
    check_writable_dir("zero.offload_dir = " + cfg.zero.offload_dir, cfg.zero.offload_dir);
    const std::optional<size_t> disk = free_disk_bytes(cfg.zero.offload_dir);
    if (disk && saturating_mul(offload_files, sharing) > *disk)
      throw UserError(cfg.path + ": zero.offload = \"nvme\" keeps " + format_bytes(offload_files) +
                      " of optimizer state per rank in files in zero.offload_dir = " + cfg.zero.offload_dir +
                      ", more than its " + format_bytes(*disk) + " free" +
                      (sharing > 1 ? " for the " + std::to_string(sharing) + " ranks of this node" : "") +
                      "; use another directory, raise zero.stage or add ranks");
  }
}

// Settings this run will not act on, said once the resume is settled (rank 0): a run must not look
// as if it did something it does not.
void warn_on_unused_settings(const Config& cfg, const std::string& precision, int64_t start_step, int local_ranks) {
  const int64_t steps = cfg.train.steps;
  const int64_t stop = cfg.train.stop_after;
  const int64_t last = stop > start_step && stop < steps ? stop : steps;  // the last step this run trains
  auto warn = [](const std::string& text) { std::printf("warning: %s\n", text.c_str()); };
  const std::string at = " (the run trains steps " + std::to_string(start_step + 1) + " to " + std::to_string(last) + ")";
  if (start_step >= steps)
    warn("the checkpoint is at step " + std::to_string(start_step) + " and train.steps = " + std::to_string(steps) +
         ": there is nothing left to train");
  if (cfg.checkpoint.dir.empty() && cfg.checkpoint.every > 0)
    warn("checkpoint.every = " + std::to_string(cfg.checkpoint.every) + " without checkpoint.dir: no checkpoint is saved");
  if (stop > 0 && (stop <= start_step || stop > steps))
    warn("train.stop_after = " + std::to_string(stop) + " is never reached as a stop" + at);
  if (cfg.log.trace_step > 0 && (cfg.log.trace_step <= start_step || cfg.log.trace_step > last))
    warn("log.trace_step = " + std::to_string(cfg.log.trace_step) + " is not among this run's steps" + at +
         ": nothing will be traced");
  if (!cfg.zero.offload_dir.empty() && cfg.zero.offload != "nvme")
    warn("zero.offload_dir is set but zero.offload = \"" + cfg.zero.offload + "\": it is not used");
  if (cfg.optimizer.warmup_steps > steps)
    warn("optimizer.warmup_steps = " + std::to_string(cfg.optimizer.warmup_steps) + " is beyond train.steps = " +
         std::to_string(steps) + ": the learning rate never reaches optimizer.lr");
  const OptimizerConfig& o = cfg.optimizer;
  if (o.decay_steps > 0 && o.schedule != "wsd")
    warn("optimizer.decay_steps applies to optimizer.schedule = \"wsd\" only; this run's is \"" + o.schedule + "\"");
  if (o.schedule == "wsd") {
    const LrSchedule s{o.schedule, steps, o.warmup_steps, o.decay_steps, o.lr, o.min_lr};
    if (s.decay_start() < 0)
      warn("optimizer.decay_steps = " + std::to_string(o.decay_steps) + " is more than train.steps = " +
           std::to_string(steps) + ": optimizer.schedule = wsd starts partway down its decay and never reaches optimizer.lr");
    else if (s.decay_start() < o.warmup_steps)
      warn("optimizer.schedule = wsd decays over the last " + std::to_string(steps - s.decay_start()) +
           " steps (optimizer.decay_steps), which begin at step " + std::to_string(s.decay_start() + 1) +
           ", before optimizer.warmup_steps = " + std::to_string(o.warmup_steps) + " ends: there is no stable phase");
  }
  const Fp16Config d;
  const Fp16Config& f = cfg.fp16;
  if (precision != "fp16" && (f.initial_scale_power != d.initial_scale_power || f.loss_scale_window != d.loss_scale_window ||
                              f.hysteresis != d.hysteresis || f.min_scale != d.min_scale))
    warn("the [fp16] loss-scaling keys apply to train.precision = fp16 only; this run is " + precision);
  if (cfg.model.position_embedding != "rope" && cfg.model.rope_theta != ModelConfig().rope_theta)
    warn("model.rope_theta applies to model.position_embedding = rope only; this run's positions are learned");
  if (cfg.model.position_embedding != "rope" && cfg.model.partial_rotary_factor != ModelConfig().partial_rotary_factor)
    warn("model.partial_rotary_factor applies to model.position_embedding = rope only; this run's positions are learned");
  if (cfg.model.bias && cfg.model.qkv_bias)
    warn("model.qkv_bias adds qkv biases to a model without biases (model.bias = false); with model.bias = true every "
         "linear layer has its bias already");
  if (cfg.model.position_embedding != "rope" && cfg.model.rope_scaling != ModelConfig().rope_scaling)
    warn("model.rope_scaling applies to model.position_embedding = rope only; this run's positions are learned");
  if (cfg.model.ffn_hidden_size > 0 && dense_ffn_hidden_size(cfg) == 0)
    warn("model.ffn_hidden_size sets the dense MLPs' width; with moe.layer_freq = 1 and moe.first_dense_layers = 0 "
         "every block has experts, whose width is moe.ffn_hidden_size: the key is ignored");
  const MoESection dm;
  const MoESection& m = cfg.moe;
  if (m.experts == 0 && (m.top_k != dm.top_k || m.capacity_factor != dm.capacity_factor || m.dropless != dm.dropless ||
                         m.aux_loss_coef != dm.aux_loss_coef || m.z_loss_coef != dm.z_loss_coef || m.layer_freq != dm.layer_freq ||
                         m.shared_experts != dm.shared_experts || m.shared_gate != dm.shared_gate || m.ffn_hidden_size != dm.ffn_hidden_size ||
                         m.renormalize != dm.renormalize || m.first_dense_layers != dm.first_dense_layers))
    warn("the [moe] keys apply with moe.experts > 0 only; this run's MLPs are dense (moe.experts = 0)");
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && cfg.train.cpu_threads * local_ranks > int64_t(cores))
    warn("train.cpu_threads = " + std::to_string(cfg.train.cpu_threads) +
         (local_ranks > 1 ? " x " + std::to_string(local_ranks) + " ranks on this node" : std::string()) +
         " is more than its " + std::to_string(cores) +
         " hardware threads: oversubscribed threads slow every CPU op (0 = automatic)");
}

Config evaluation_config(const Config& cfg) {
  Config c = cfg;
  if (c.checkpoint.resume == "auto") {  // checkpoint.dir's newest checkpoint, if it has any step directory
    bool any = false;
    try {
      any = !c.checkpoint.dir.empty() && !list_step_dirs(c.checkpoint.dir).empty();
    } catch (const CheckpointError& e) {
      throw UserError(cfg.path + ": checkpoint.dir = " + c.checkpoint.dir + ": " + e.what());
    }
    c.checkpoint.resume = any ? c.checkpoint.dir : "none";
  }
  c.checkpoint.dir.clear();
  c.checkpoint.keep_best = false;
  c.checkpoint.every = 0;
  if (c.log.val_every <= 0) c.log.val_every = 1;
  c.log.metrics_file.clear();
  c.log.tensorboard_dir.clear();
  c.log.trace_step = 0;
  c.log.profile_ops = false;
  c.train.stop_after = 0;
  return c;
}

void run_training(const Config& cfg, const LaunchInfo& launch, const RunOptions& opts) {
  const Resolved res = resolve(cfg, launch);
  const bool main_rank = launch.rank == 0;
  if (!opts.eval_only) install_stop_handlers();  // --eval has nothing to save: a signal ends it at once
  std::unique_ptr<TensorBoardWriter> tb;
  std::unique_ptr<MetricsFile> metrics = open_metrics(cfg, launch, tb);
  check_trace_file(cfg, launch);
  // Before the model is built: a checkpoint.dir that cannot be used is reported in seconds.
  const std::optional<std::string> from = choose_resume(cfg, MPI_COMM_WORLD);
  // Likewise a model.init_from that cannot start this model (building a large one takes minutes).
  // Rank 0 picks the checkpoint of a checkpoint.dir, once, so every rank later reads the same one.
  std::string init_source;
  if (!from && !cfg.model.init_from.empty()) {
    init_source = broadcast_string(main_rank ? resolve_model_dir(cfg.model.init_from) : "", MPI_COMM_WORLD);
    agree_on([&] {
      if (!main_rank) return;
      const StoredModel src = open_init_source(cfg, res.model, init_source);
      if (src.shape.moe.experts > 0 && src.shape.moe.dropless && !res.model.moe.dropless)
        std::printf("warning: model.init_from = %s routes without dropping (moe.dropless, as Hugging Face's MoE models do); this run "
                    "drops the choices past moe.capacity_factor = %s of an expert's share: set moe.dropless = true to "
                    "route as it does\n",
                    cfg.model.init_from.c_str(), number_g(cfg.moe.capacity_factor).c_str());
      // A window does not change the parameters, so another one is allowed, but said where it matters.
      auto seen = [&](int64_t window) { return window > 0 && window < res.model.seq_len ? window : 0; };
      if (seen(src.shape.sliding_window) != seen(res.model.sliding_window))
        std::printf("warning: model.init_from = %s attends within a sliding window of %lld positions (0: all); this run's "
                    "model.sliding_window is %lld: set it to %lld to attend as it does\n",
                    cfg.model.init_from.c_str(), (long long)src.shape.sliding_window,
                    (long long)res.model.sliding_window, (long long)src.shape.sliding_window);
    }, launch);
  }
  // At ZeRO stages >= 1 over data ranks every rank writes its own optimizer state into
  // checkpoint.dir (rank 0 created it): each checks now that it sees it and can write there.
  const int64_t data_ranks = launch.world / (cfg.parallel.tensor * cfg.parallel.pipeline);
  if (!cfg.checkpoint.dir.empty() && cfg.zero.stage >= 1 && data_ranks > 1)
    agree_on([&] { if (launch.rank != 0) check_checkpoint_dir_shared(cfg); }, launch);
  RuntimeOptions ro;
  ro.device = res.device;
  ro.deterministic = cfg.train.deterministic;
  ro.cpu_threads = int(cfg.train.cpu_threads);
  if (ro.cpu_threads == 0 && (res.device.is_cpu() || cfg.zero.offload != "none") && launch.local_size > 1) {
    // Ranks sharing a node split its cores instead of oversubscribing them (the CPU backend's ops,
    // or the offloaded AdamW of ranks that drive GPUs).
    ro.cpu_threads = std::max(1, int(std::thread::hardware_concurrency()) / launch.local_size);
  }
  ro.profile_ops = cfg.log.profile_ops;
  ro.trace = cfg.log.trace_step > 0;
  ro.peer_collectives = cfg.parallel.peer_all_reduce;
  if (launch.world > 1) ro.collective_timeout_s = cfg.parallel.collective_timeout_s;
  Runtime rt(ro);
  const Layout layout =
      make_layout(launch.world, int(cfg.parallel.tensor), int(cfg.parallel.pipeline), int(cfg.parallel.expert));
  ProcessGroups groups(MPI_COMM_WORLD, layout, rt);
  CommTally tally(groups, cfg.moe.experts > 0);
  Communicator& data_group = groups.data();
  const int data_rank = groups.coords().data, data_size = layout.data;
  // Expert parallelism: the expert group's ranks hold different experts. For the whole-model layout
  // of checkpoints and exports they are a stage's parts, as tensor ranks are (whole_model.h).
  const bool expert_parallel = layout.expert > 1;
  Communicator* expert_group = expert_parallel ? &groups.expert() : nullptr;

  // This rank's stage of the pipeline (the whole model when there is one stage) and its schedule.
  const GPTConfig& mc = res.model;
  const int64_t B = cfg.train.micro_batch, T = mc.seq_len;
  const int p = layout.pipeline, stage = groups.coords().pipeline, v = int(cfg.parallel.virtual_stages);
  const int m = int(res.accumulation);  // micro-batches per step through the pipeline
  const ScheduleKind kind = parse_schedule_kind(cfg.parallel.schedule);
  validate_schedule_shape(kind, p, m, v, int(mc.n_layers));  // validate_for_world checked it already
  const std::vector<Instruction> schedule = build_schedule(kind, p, m, v)[size_t(stage)];
  const GPTPart part = GPTPart::of_rank(mc, p, v, stage);
  const int slots = PipelineEngine::peak_in_flight(schedule);
  Communicator* pipeline_group = p > 1 ? &groups.pipeline() : nullptr;
  Communicator* tensor_group = layout.tensor > 1 ? &groups.tensor() : nullptr;
  // With both tensor and expert parallelism a stage's parts are the ranks of both: a group of its own,
  // ordered as the whole-model layout orders the parts (tensor rank x experts + expert rank).
  std::unique_ptr<Communicator> tensor_and_experts;
  if (expert_parallel && tensor_group) {
    const RankCoords& c = groups.coords();
    MPI_Comm comm;
    TRELLIS_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c.pipeline * (layout.data / layout.expert) + c.expert_data,
                                     c.tensor * layout.expert + c.expert, &comm));
    tensor_and_experts = Communicator::create(comm, rt, "tensor x expert");
    TRELLIS_MPI_CHECK(MPI_Comm_free(&comm));
  }
  Communicator* parts_group = tensor_and_experts ? tensor_and_experts.get() : expert_parallel ? expert_group : tensor_group;
  auto part_index = [&](const RankCoords& c) {
    return expert_parallel ? c.tensor * layout.expert + c.expert : c.tensor;
  };
  const TensorParallelContext tp = TensorParallelContext::of(groups.tensor(), cfg.parallel.sequence_parallel,
                                                             resolved_tensor_comm_chunks(cfg, res.device.is_cuda()),
                                                             tensor_splits_batch(cfg));
  // The first data-parallel rank of each stage and tensor rank (the first expert group's ranks)
  // takes part in weight exports.
  const bool saver = (expert_parallel ? groups.coords().expert_data : groups.coords().data) == 0;

  // ZeRO stages >= 1 split every bucket of the flat buffers evenly over the data group (with one
  // data rank there is nothing to shard: stage 0).
  const int zero_stage = data_size > 1 ? int(cfg.zero.stage) : 0;
  StoreSharding sharding;
  if (zero_stage >= 1) {
    sharding.shards = data_size;
    sharding.shard = data_rank;
    sharding.stream_grads = zero_stage >= 2;
    sharding.stream_values = zero_stage >= 3;
    if (expert_parallel) {  // the experts' buckets over the ranks holding the same experts
      sharding.expert_shards = data_size / layout.expert;
      sharding.expert_shard = groups.coords().expert_data;
    }
  }
  const int expert_data_size = data_size / layout.expert;
  const WholeModelLayout whole(mc, p, v, layout.tensor);
  const bool offload = cfg.zero.offload != "none";
  // Planned and checked inside the agreement: a plan that fails on one stage fails every rank alike.
  RankMemoryPlan plan;
  agree_on([&] {
    plan = plan_rank_memory(cfg, mc, layout, stage, tp, m);
    check_memory_fits(cfg, rt, launch, plan);
  }, launch);
  // After the memory check: a synthetic source holds a table of the vocabulary, so a vocabulary far
  // too large for the memory is refused before it is built.
  std::unique_ptr<SampleSource> data;
  agree_on([&] { data = open_samples(cfg, res.model); }, launch);
  // Every rank must read the same samples: a node's own copy of the data that differs, or lacks
  // the loss mask beside it, would let the replicas drift apart without a word.
  {
    const std::string mask = data->target_mask();
    const std::string mine = data->identity() + "; targets: " + (mask.empty() ? "every one" : mask);
    // Rank 0's description goes to every rank; the first rank whose own differs names both.
    int length = int(mine.size());
    TRELLIS_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD));
    std::string first(size_t(length), '\0');
    if (launch.rank == 0) first = mine;
    TRELLIS_MPI_CHECK(MPI_Bcast(first.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD));
    agree_on([&] {
      if (mine != first)
        throw UserError(cfg.path + ": data.path = " + cfg.data.path + ": the ranks do not all read the same data (rank " +
                        std::to_string(launch.rank) + ": " + mine + "; rank 0: " + first +
                        "); every node needs the same files");
    }, launch);
  }
  // Some targets are left out (-1): the loss is the mean over those kept, counted per step.
  const bool counts_targets = !data->target_mask().empty();
  const size_t planned_activations = plan.activations;
  // A rank's parameters and, of them, its experts' (sharded apart under expert parallelism).
  auto numel_of_part = [&](int pipeline_rank, int part) {
    int64_t n = 0, experts = 0;
    for (const ParameterSpec& s : whole.shard_of(pipeline_rank, part)) {
      n += s.shape.numel();
      if (s.expert) experts += s.shape.numel();
    }
    return std::pair<int64_t, int64_t>{n, experts};
  };
  auto state_bytes_of = [&](std::pair<int64_t, int64_t> n) {
    return ZeroOptimizer::model_state_bytes(n.first, mc.dtype, zero_stage, data_size, offload, mc.grad_dtype, n.second,
                                            expert_data_size);
  };
  GPT model(rt, mc, B, part, slots, tp, sharding, expert_group);
  // Each data rank draws 1/N of the parameters; the data group completes them (unless its ranks
  // hold different experts: then each draws its own).
  model.initialize(uint64_t(cfg.train.seed), expert_parallel ? nullptr : &data_group);
  ZeroOptimizer optimizer(rt, model.params(), &data_group, zero_stage,
                          !offload                       ? nullptr
                          : cfg.zero.offload == "nvme" ? make_file_backed_allocator(cfg.zero.offload_dir)
                                                         : make_host_allocator(),
                          expert_parallel ? &groups.expert_data() : nullptr);
  std::unique_ptr<ZeroStreaming> streaming;
  if (optimizer.sharded()) streaming = std::make_unique<ZeroStreaming>(rt, model.params(), optimizer);
  if (zero_stage >= 2) model.set_block_hooks(streaming.get());
  LossScalerConfig lsc;
  lsc.enabled = res.dtype == DType::f16;
  lsc.initial_scale = std::ldexp(1.0, int(cfg.fp16.initial_scale_power));
  lsc.window = cfg.fp16.loss_scale_window;
  lsc.hysteresis = cfg.fp16.hysteresis;
  lsc.min_scale = cfg.fp16.min_scale;
  LossScaler scaler(lsc);
  BatchLoader loader(rt, *data, B, T);

  const bool reduce = data_size > 1;
  std::unique_ptr<GradientSync> grad_sync;  // stage 0: all-reduce in buckets of zero.bucket_mb
  std::unique_ptr<EmbeddingRowExchange> embedding_rows;  // zero.embedding_grad = gather_rows
  const bool gather_rows = reduce && use_embedding_row_exchange(cfg, data_size, B, T, mc);
  if (reduce && !optimizer.sharded()) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<bool> experts;
    std::pair<int64_t, int64_t> wte_range{0, 0};
    for (const Parameter& prm : model.params().all()) {
      ranges.emplace_back(prm.offset, prm.offset + prm.spec.shape.numel());
      experts.push_back(prm.spec.expert);
      if (prm.spec.name == "wte") wte_range = ranges.back();
    }
    DType reduce_dtype = DType::f32;
    parse_dtype(cfg.zero.reduce_dtype, reduce_dtype);
    grad_sync = std::make_unique<GradientSync>(rt, data_group, model.params().flat_grads(), ranges,
                                               size_t(cfg.zero.bucket_mb) << 20, reduce_dtype,
                                               gather_rows ? wte_range : std::pair<int64_t, int64_t>{0, 0},
                                               experts, expert_parallel ? &groups.expert_data() : nullptr);
    if (gather_rows) {
      embedding_rows = std::make_unique<EmbeddingRowExchange>(rt, data_group, *grad_sync, wte_range, B, T, mc.d_model,
                                                              mc.dtype);
      model.set_embedding_exchange(embedding_rows.get());
    }
  }
  // Activations cross stages as (B, T, C), or as this rank's token rows with sequence parallelism.
  const Shape boundary = tp.sharded_tokens() ? Shape{token_shard_rows(B * T, tp.size), mc.d_model} : Shape{B, T, mc.d_model};
  PipelineEngine engine(rt, groups.pipeline(), v, boundary, mc.dtype);
  PipelineReduction reduction;
  if (streaming) reduction.data = streaming.get();
  else reduction.data = grad_sync.get();
  reduction.overlap = cfg.zero.overlap;
  if (p > 1 && mc.tied_head && groups.in_embedding_group()) {  // the tied embedding on the first and last stage
    reduction.tied = &groups.embedding();
    reduction.tied_grads = optimizer.owned_grads(model.tied_embedding());  // reduced over the data group first
  }

  const int64_t stored = model.params().numel();
  const size_t param_bytes = model.params().value_bytes(), grad_bytes = model.params().grad_bytes();
  const size_t state_bytes = param_bytes + grad_bytes + optimizer.state_bytes();
  const size_t slot_bytes = streaming ? streaming->buffer_bytes() : 0;
  // The gradient norm's squares: of the reduced gradients this rank holds (its pieces at stages
  // >= 1, where the tensor group's partial sums are completed too).
  // Under expert parallelism without ZeRO the experts' squares are summed over the expert group
  // apart; sharded, the data group's ranks hold every expert's pieces once between them.
  const bool experts_apart = expert_parallel && !optimizer.sharded();
  const std::vector<Tensor> counted_grads = optimizer.owned_grads(model.grads_counted_once(!experts_apart));
  const std::vector<Tensor> expert_grads =
      experts_apart ? optimizer.owned_grads(model.expert_grads()) : std::vector<Tensor>{};
  // At stage 1 each bucket's squares run as soon as its reduce-scatter is waited for, beside the
  // later buckets' (the token embedding's, last, is the largest). Not where a piece changes after
  // the data group's reduction: the tied embedding's sum over the pipeline, sequence parallelism's
  // partial sums over the tensor group.
  const bool early_squares = zero_stage == 1 && p == 1 && !tp.sharded_tokens();
  const std::vector<std::vector<Tensor>> counted_by_bucket =
      early_squares ? optimizer.owned_grads_by_bucket(model.grads_counted_once()) : std::vector<std::vector<Tensor>>{};
  PackedAllReduce partial_grads(rt, tensor_group, optimizer.owned_grads(model.tensor_partial_grads()));
  const int64_t global_batch = B * res.accumulation * data_size;
  const double tokens_per_step = double(global_batch * T);
  JsonObject start;  // the metrics file's start record, written once the resume is settled
  if (main_rank) {
    std::printf("trellis %s: %s, %s, layout tensor %d x pipeline %d x data %d, ZeRO stage %d\n", source_version(),
                rt.device_name().c_str(),
                res.precision.c_str(), layout.tensor, layout.pipeline, layout.data, zero_stage);
    const std::string libraries = rt.library_versions();  // for the log and the start record
    if (!libraries.empty()) std::printf("libraries: %s\n", libraries.c_str());
    if (cfg.zero.stage > 0 && zero_stage == 0)
      std::printf("warning: zero.stage = %lld shards over the data-parallel group, which has one rank in this layout: "
                  "each rank keeps its whole optimizer state (stage 0)\n", (long long)cfg.zero.stage);
    std::printf("model: %lld layers, %lld heads, d_model %lld, seq %lld, vocab %lld (padded to %lld)%s%s\n",
                (long long)mc.n_layers, (long long)mc.n_heads, (long long)mc.d_model, (long long)T,
                (long long)mc.vocab_size, (long long)mc.padded_vocab(),
                mc.rope ? (", rotary positions (theta " + number_g(mc.rope_theta) +
                           (rope_scaling_text(mc).empty() ? "" : ", " + rope_scaling_text(mc)) +
                           (mc.rope_dims > 0 ? ", turning " + std::to_string(mc.rope_dims) + " of a head's " +
                                                   std::to_string(mc.head_dim()) + " dims"
                                             : "") + ")").c_str()
                        : "",
                (std::string(mc.swiglu ? ", SwiGLU MLPs" : "") +
                 (mc.mlp_width() != 4 * mc.d_model ? ", MLP width " + std::to_string(mc.mlp_width()) : "") +
                 (mc.rmsnorm ? ", RMSNorm" : "") + (float(mc.norm_eps) != 1e-5f ? ", norm eps " + number_g(mc.norm_eps) : "") +
                 (mc.tied_head ? "" : ", untied head") + (mc.bias ? "" : mc.qkv_bias ? ", qkv biases only" : ", no linear biases") +
                 (mc.kv_heads() != mc.n_heads ? ", " + std::to_string(mc.kv_heads()) + " key-value heads" : "") +
                 (mc.head_size > 0 ? ", heads of " + std::to_string(mc.head_size) : "") + (mc.qk_norm ? ", QK-norm" : "") +
                 (mc.sliding_window > 0 ? ", sliding window " + std::to_string(mc.sliding_window) : ""))
                    .c_str());
    const std::string routing =
        mc.moe.dropless ? std::string("dropless")
                        : "capacity " + std::to_string(mc.moe.capacity(B * T)) + " of a micro-batch's " +
                              std::to_string(B * T) + " tokens each (factor " + number_g(mc.moe.capacity_factor) + ")";
    if (mc.moe.experts > 0)
      std::printf("experts: %lld%s of width %lld in %lld of %lld blocks (every %lld from block %lld), top %lld%s, %s, "
                  "balancing loss x %g, z-loss x %g; %s parameters active per token%s\n",
                  (long long)mc.moe.experts,
                  mc.moe.shared_experts > 0 ? (" and " + std::to_string(mc.moe.shared_experts) + " shared").c_str() : "",
                  (long long)mc.moe.expert_width(mc.d_model),
                  (long long)mc.moe.layers(mc.n_layers), (long long)mc.n_layers,
                  (long long)mc.moe.layer_freq,
                  (long long)((mc.moe.first_dense + mc.moe.layer_freq - 1) / mc.moe.layer_freq * mc.moe.layer_freq),
                  (long long)mc.moe.top_k,
                  mc.moe.top_k > 1 && !mc.moe.renormalize ? " (gates not renormalized)" : "", routing.c_str(),
                  double(mc.moe.aux_loss_coef), double(mc.moe.z_loss_coef),
                  with_commas(mc.active_parameter_count()).c_str(),
                  expert_parallel ? ("; each rank holds " + std::to_string(mc.moe.local_experts()) +
                                     " of them (parallel.expert = " + std::to_string(layout.expert) + ")")
                                        .c_str()
                                  : "");
    std::printf("parameters: %s (vocabulary padding adds %s; %s stored%s)\n", with_commas(mc.parameter_count()).c_str(),
                with_commas(mc.padding_parameter_count()).c_str(), with_commas(stored).c_str(),
                p > 1 || tp.active() || expert_parallel ? " on rank 0" : "");
    std::printf("batch: global %lld = micro %lld x %s %lld x data %d; %lld tokens per step\n", (long long)global_batch,
                (long long)B, p > 1 ? "micro-batches" : "accumulation", (long long)res.accumulation, data_size,
                (long long)tokens_per_step);
    if (mc.document_eod >= 0)
      std::printf("documents: attention within each document of a sample, a new one after every token %lld "
                  "(data.document_mask)%s\n",
                  (long long)mc.document_eod, mc.document_positions ? "; positions from each document's start" : "");
    if (counts_targets) std::printf("loss: the mean over the targets kept: %s\n", data->target_mask().c_str());
    const int64_t val_windows = data->distinct_samples(Split::val), val_reads = cfg.log.val_batches * global_batch;
    if (cfg.log.val_every > 0 && val_windows > 0 && val_reads > val_windows) {
      const int64_t fits = val_windows / global_batch;
      std::printf("note: a validation reads log.val_batches x train.global_batch = %lld samples, but the validation "
                  "split has %lld distinct ones: some count more than once (%s)\n",
                  (long long)val_reads, (long long)val_windows,
                  fits > 0 ? ("log.val_batches = " + std::to_string(fits) + " reads each at most once").c_str()
                           : "a larger data.val_fraction holds more");
    }
    // Blocks per virtual stage (virtual stage c*p + r is chunk c of pipeline rank r).
    std::vector<int64_t> stage_layers;
    for (const LayerRange& r : GPT::pipeline_partition(mc, p * v)) stage_layers.push_back(r.second - r.first);
    if (p > 1) {
      std::string chunks;
      for (int64_t n : stage_layers) {
        if (!chunks.empty()) chunks += ' ';
        chunks += std::to_string(n);
      }
      std::printf("pipeline: %s, %d stages x %d chunk(s); layers per virtual stage: %s (+ embedding first, head "
                  "last); bubble (p-1)/(m v) = %.1f%%; stage 0 holds up to %d micro-batch chunks\n",
                  schedule_kind_name(kind), p, v, chunks.c_str(), 100.0 * double(p - 1) / double(m * v), slots);
    }
    std::printf("memory per rank%s: model state %s (params %s + grads %s %s + optimizer %s)%s, activations %d x %s kept + "
                "%s workspace (checkpointing %s)\n",
                p > 1 ? " (stage 0)" : "", format_bytes(state_bytes).c_str(), format_bytes(param_bytes).c_str(),
                format_bytes(grad_bytes).c_str(), std::string(dtype_name(mc.grad_dtype)).c_str(), format_bytes(optimizer.state_bytes()).c_str(),
                slot_bytes ? (" + ZeRO slots " + format_bytes(slot_bytes)).c_str() : "", slots,
                format_bytes(plan.per_slot.kept).c_str(), format_bytes(plan.per_slot.work).c_str(),
                cfg.train.checkpointing.c_str());
    if (optimizer.offloaded())
      std::printf("offload: master weights and Adam moments in %s (%s), AdamW on the host's %d threads\n",
                  cfg.zero.offload == "nvme" ? ("files in " + cfg.zero.offload_dir + ", mapped").c_str() : "host memory",
                  format_bytes(optimizer.host_state_bytes()).c_str(), omp_get_max_threads());
    if (tp.active())
      std::printf("tensor parallel: %d ranks split each layer (heads, MLP, vocabulary), sequence parallelism %s, "
                  "forward %s, row-parallel forward in %d communication chunk%s\n",
                  tp.size, tp.sequence_parallel ? "on" : "off",
                  tp.split_batch ? (mc.moe.experts > 0 ? "in two interleaved halves of the micro-batch (blocks with experts whole)"
                                                   : "in two interleaved halves of the micro-batch")
                                : "on the whole micro-batch",
                  tp.comm_chunks, tp.comm_chunks == 1 ? "" : "s");
    if (optimizer.sharded())
      std::printf("data parallel: ZeRO stage %d: each rank owns %lld of %lld elements (padded from %lld) of master "
                  "weights, Adam moments and reduced gradients; gradients reduce-scattered (f32) per bucket %s%s%s\n",
                  zero_stage, (long long)optimizer.owned_numel(), (long long)model.params().padded_numel(),
                  (long long)stored,
                  zero_stage >= 2   ? "after each block's backward on every micro-batch (no full gradient buffer)"
                  : cfg.zero.overlap ? "as soon as final in the step's backward"
                                     : "after the step's backward (zero.overlap = false)",
                  zero_stage >= 3 ? "; each block's parameters all-gathered just before its forward and backward"
                                  : "; updated parameters all-gathered",
                  !expert_parallel ? ""
                  : expert_data_size > 1 ? "; the experts' buckets over the expert-data group"
                  : zero_stage >= 2      ? "; the experts' buckets held by one rank each (an expert-data group of one), "
                                           "kept whole"
                                         : "; the experts' buckets held by one rank each (an expert-data group of one)");
    else if (reduce)
      std::printf("data parallel: gradients in %zu buckets of ~%lld MiB, %s, reduced in %s%s\n",
                  grad_sync->bucket_count(), (long long)cfg.zero.bucket_mb,
                  cfg.zero.overlap ? "reduced during backward" : "reduced after backward", cfg.zero.reduce_dtype.c_str(),
                  embedding_rows ? "; token embedding reduced as backward begins, its last rows gathered" : "");
    std::fflush(stdout);
    // Per world rank: its stage's parameters (its tensor shards) and its model state by the ZeRO
    // formula of ZeroOptimizer::model_state_bytes (what is kept whole and the slots come on top).
    std::vector<int64_t> params_per_rank, state_per_rank;
    for (int w = 0; w < launch.world; ++w) {
      const auto n = numel_of_part(coords_of(w, layout).pipeline, part_index(coords_of(w, layout)));
      params_per_rank.push_back(n.first);
      state_per_rank.push_back(state_bytes_of(n));
    }
    JsonObject lay;
    lay.add("tensor", layout.tensor).add("pipeline", layout.pipeline).add("data", layout.data);
    if (expert_parallel) lay.add("expert", layout.expert);
    start.add("event", "start").add("version", source_version()).add("layout", lay).add("zero_stage", int64_t(zero_stage));
    start.add("schedule", schedule_kind_name(kind)).add("virtual_stages", int64_t(v)).add("stage_layers", stage_layers);
    start.add("params_per_rank", params_per_rank);
    start.add("model_state_bytes_per_rank", state_per_rank);
    // What rank 0 allocated: its store and optimizer state (with the padding and the buckets kept
    // whole), and the ZeRO slots.
    start.add("model_state_bytes_allocated", int64_t(state_bytes)).add("zero_slot_bytes", int64_t(slot_bytes));
    start.add("parameters", mc.parameter_count()).add("device", rt.device_name()).add("precision", res.precision);
    if (!libraries.empty()) start.add("libraries", libraries);
    start.add("grad_dtype", std::string(dtype_name(mc.grad_dtype)));
    start.add("global_batch", global_batch).add("seq_len", T).add("steps", cfg.train.steps);
    start.add("activation_bytes_planned", int64_t(std::min<size_t>(planned_activations, INT64_MAX)));
  }

  TrainingState state{model,         optimizer,
                      scaler,        whole,
                      pipeline_group, parts_group,
                      expert_parallel ? groups.coords().expert_data : data_rank, data_size,
                      data->identity()};
  int64_t start_step = 0;
  if (from) {
    // Every rank reads the checkpoint; all must succeed before any goes on to a collective.
    Watchdog::Pause p(rt.watchdog());  // ranks may read their files at very different speeds
    agree_on([&] { start_step = load_training_checkpoint(rt, cfg, *from, state, global_batch); }, launch);
    if (main_rank && !opts.eval_only)
      std::printf("resumed from %s: continuing after step %lld\n", from->c_str(), (long long)start_step);
    if (main_rank && !cfg.model.init_from.empty())
      std::printf("note: model.init_from = %s is not used: the run %s its checkpoint\n", cfg.model.init_from.c_str(),
                  opts.eval_only ? "evaluates" : "continues");
  } else if (!cfg.model.init_from.empty()) {
    Watchdog::Pause p(rt.watchdog());  // as a checkpoint: every rank reads the whole source
    agree_on([&] { load_initial_parameters(rt, cfg, state, init_source); }, launch);
  }
  agree_on([&] { metrics->begin(from ? std::optional<int64_t>(start_step) : std::nullopt); }, launch);
  if (main_rank) metrics->write(start);
  const bool checkpoints = !cfg.checkpoint.dir.empty();
  // A checkpoint's writers may take longer than parallel.collective_timeout_s while the other
  // ranks would wait for them in the next step: the save is not watched, and every rank leaves it
  // together (an unwatched barrier).
  auto unwatched = [&](auto&& save) {
    Watchdog::Pause p(rt.watchdog());
    const bool ok = save();
    if (launch.world > 1) TRELLIS_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return ok;
  };
  const bool keep_best = checkpoints && cfg.checkpoint.keep_best && cfg.log.val_every > 0;
  if (cfg.checkpoint.keep_best && !keep_best && main_rank)
    std::printf("warning: checkpoint.keep_best needs checkpoint.dir and log.val_every > 0; no best checkpoint is kept\n");
  double best_val = keep_best && main_rank ? best_checkpoint_val_loss(cfg) : 0.0;
  if (cfg.train.stop_after > 0 && !checkpoints && main_rank)
    std::printf("warning: train.stop_after without checkpoint.dir: the run stops and nothing is saved\n");
  if (main_rank && !opts.eval_only) warn_on_unused_settings(cfg, res.precision, start_step, launch.local_size);

  Buffer scalars(rt.allocator(), 3 * 4, "step scalars");
  Tensor loss_sum = scalars.tensor(DType::f32, {1}), norm_sq = scalars.tensor(DType::f32, {1}, 4);
  if (early_squares)
    streaming->on_reduced([&](int b) {
      for (const Tensor& g : counted_by_bucket[size_t(b)]) sum_squares_accumulate(rt, norm_sq, g);
    });
  Tensor probe = scalars.tensor(DType::f32, {1}, 8);
  Buffer expert_sq_buf(rt.allocator(), 4, "expert squares");
  const Tensor expert_sq = expert_sq_buf.tensor(DType::f32, {1});
  // With experts: the step's balancing losses, dropped choices and z-losses over its MoE blocks (for the log).
  const bool moe = mc.moe.experts > 0;
  const LrSchedule lr_schedule{cfg.optimizer.schedule, cfg.train.steps,        cfg.optimizer.warmup_steps,
                               cfg.optimizer.decay_steps, cfg.optimizer.lr, cfg.optimizer.min_lr};
  Buffer moe_stats_buf(rt.allocator(), 3 * 4, "MoE statistics");
  const Tensor moe_stats = moe_stats_buf.tensor(DType::f32, {3});
  // The step's AdamW values (core/step_scalars.h): what the host knows goes up at the start of the
  // step, the rest is computed on the device, so the host waits only once, at the end of the step.
  Buffer step_scalars_buf(rt.allocator(), kStepScalarCount * sizeof(float), "step scalars");
  Buffer step_host_buf(rt.host_allocator(), 2 * kStepScalarCount * sizeof(float), "step scalars (host)");
  const Tensor step_scalars = step_scalars_buf.tensor(DType::f32, {kStepScalarCount});
  const Tensor step_plan = step_host_buf.tensor(DType::f32, {kStepScalarCount});
  const Tensor step_readback = step_host_buf.tensor(DType::f32, {kStepScalarCount}, kStepScalarCount * sizeof(float));
  const double peak = rt.peak_flops();
  rt.allocator().reset_peak();
  int64_t last_step = start_step;
  bool last_save_failed = false;  // the save of the run's last step failed (rank 0's result)
  // Where a step's device time goes: 0 start, 1 schedule done (forward, backward and the wait for
  // gradient reduction), 2 loss/norm reductions queued, 3 optimizer done.
  PhaseMarks marks(rt, 4);
  StageTimer stage_timer(rt, m, v);  // the compute time of each forward and backward, per chunk
  // CUDA graphs (core/step_graph.h) where nothing in the step needs the host: one rank, the
  // optimizer on the GPU, no dropout (its masks are keyed by the step, a kernel argument), no
  // per-op timing or trace, no dropless routing (the host sizes the experts' GEMMs). The batch then goes through the loader's step slots.
  const bool traces = cfg.log.trace_step > start_step && cfg.log.trace_step <= cfg.train.steps;
  const bool graphs = cfg.train.cuda_graphs && !opts.eval_only && rt.cuda() && launch.world == 1 && !optimizer.offloaded() &&
                      !streaming && mc.dropout == 0.0f && mc.attention_dropout == 0.0f && !cfg.log.profile_ops &&
                      !traces && !(mc.moe.experts > 0 && (mc.moe.dropless || counts_targets));
  if (main_rank && cfg.train.cuda_graphs && rt.cuda() && launch.world == 1 && mc.moe.experts > 0 && mc.moe.dropless)
    std::printf("cuda graphs: none (moe.dropless: the host sizes the experts' GEMMs from each step's routing)\n");
  else if (main_rank && cfg.train.cuda_graphs && rt.cuda() && launch.world == 1 && mc.moe.experts > 0 && counts_targets)
    std::printf("cuda graphs: none (the routers' losses are weighted by each step's share of targets kept)\n");
  // With graphs the step uploads its whole batch first (this fence, recorded in the graph, so it
  // outlives it), and the host draws the next step's samples into the step slots while the GPU
  // runs the rest of this one.
  ComputeFence batch_uploaded(rt);
  StepGraph step_graph(rt);
  if (graphs) loader.reserve_step_slots(m);
  // Micro-batch mb of this data rank at `step`: global samples [(step-1) G + (mb D + d) B, + B).
  auto sample_of = [&](int64_t step, int mb) { return (step - 1) * global_batch + (int64_t(mb) * data_size + data_rank) * B; };
  int64_t staged = -1;  // the step whose batch is in the step slots
  auto stage_batch = [&](int64_t step) {
    for (int mb = 0; mb < m; ++mb) loader.stage(Split::train, sample_of(step, mb), mb);
    staged = step;
  };
  // What the validation loss divides by: the same samples every time, so counted once.
  int64_t val_targets = 0;
  agree_on([&] {
    if (cfg.log.val_every <= 0) return;
    const int64_t samples = cfg.log.val_batches * global_batch;
    val_targets = counts_targets ? count_targets(*data, Split::val, 0, samples) : samples * T;
    if (val_targets == 0)
      throw UserError(cfg.path + ": log.val_every = " + std::to_string(cfg.log.val_every) +
                      ": the validation's samples (log.val_batches x train.global_batch = " + std::to_string(samples) +
                      ") keep no target (" + data->target_mask() +
                      "): a larger log.val_batches or data.val_fraction, or log.val_every = 0");
  }, launch);
  // Where targets are left out: the targets a step keeps, counted over its global batch on every rank (the
  // next step's while the GPU runs this one).
  int64_t counted_step = 0, counted_targets = 0;
  auto kept_targets = [&](int64_t step) {
    if (counted_step != step)
      counted_targets = count_targets(*data, Split::train, (step - 1) * global_batch, global_batch);
    counted_step = step;
    return counted_targets;
  };
  // log.val_batches global batches of the validation split, samples [0, val_batches x G): this data
  // rank's micro-batches are those of the training steps' pattern, so every layout validates on the
  // same samples. The loss over them (recorded on rank 0), or none when a stop signal came first.
  auto validate = [&](int64_t step) -> std::optional<double> {
    NvtxRange r("validation");
    // Not a training step: left out of log.profile_ops's per-step times.
    if (rt.profiler()) rt.profiler()->set_paused(true);
    fill(rt, loss_sum, 0.0f);
    auto val_sample = [&](int64_t vb) { return (vb * data_size + data_rank) * B; };
    auto context_of = [&](int64_t sample_offset) {  // no dropout in a forward without backward: the step only names it
      StepContext ctx;
      ctx.seed = uint64_t(cfg.train.seed);
      ctx.step = step;
      ctx.sample_offset = sample_offset;
      return ctx;
    };
    // In runs of kValidationRun micro-batches, with a look for a stop signal between them: a long
    // validation (log.val_batches) must not keep a preempted job from its checkpoint.
    constexpr int kValidationRun = 32;
    const int64_t val_micro_batches = cfg.log.val_batches * m;
    bool abandoned = false;
    for (int64_t first = 0; first < val_micro_batches && !abandoned; first += kValidationRun) {
      GPTStage val_model(
          model, [&](int vb) { return context_of(val_sample(first + vb)); },
          [&](int vb) { return loader.load(Split::val, val_sample(first + vb)); }, 0.0f, loss_sum);
      engine.run_forward(int(std::min<int64_t>(kValidationRun, val_micro_batches - first)), val_model);
      if (first + kValidationRun < val_micro_batches) abandoned = stop_requested(MPI_COMM_WORLD, rt.watchdog());
    }
    if (abandoned) {  // the stop after it saves the step's checkpoint
      if (rt.profiler()) rt.profiler()->set_paused(false);
      if (main_rank)
        std::printf("step %5lld/%lld | validation abandoned: a stop signal\n", (long long)step, (long long)cfg.train.steps);
      return std::nullopt;
    }
    if (reduce) data_group.all_reduce(loss_sum);
    if (pipeline_group) pipeline_group->all_reduce(loss_sum);  // known on the last stage
    const double val = double(read_scalar(rt, loss_sum)) / double(val_targets);
    if (rt.profiler()) rt.profiler()->set_paused(false);
    if (main_rank && !opts.eval_only) {
      JsonObject rec;
      rec.add("step", step).add("split", "val").add("loss", val);
      metrics->write(rec);
      tb->scalar("val/loss", step, val);
      std::printf("step %5lld/%lld | val loss %.4f\n", (long long)step, (long long)cfg.train.steps, val);
      std::fflush(stdout);
    }
    return val;
  };
  if (opts.eval_only) {
    const std::optional<double> val = validate(start_step);
    if (!val) throw UserError("--eval: the validation was stopped by a signal; no loss");
    if (main_rank)
      std::printf("eval: %s | val loss %.6f | perplexity %.4f | %lld targets of %lld samples (log.val_batches = %lld "
                  "global batches of the validation split)\n",
                  from ? ("step " + std::to_string(start_step) + " of " + *from).c_str()
                       : !cfg.model.init_from.empty() ? cfg.model.init_from.c_str() : "the initialization",
                  *val, std::exp(*val), (long long)val_targets, (long long)(cfg.log.val_batches * global_batch),
                  (long long)cfg.log.val_batches);
    return;
  }
  for (int64_t step = start_step + 1; step <= cfg.train.steps; ++step) {
    NvtxRange step_range("train_step");
    if (cfg.log.profile_ops && step == start_step + 2) rt.profiler()->reset();  // leave the first step's setup out
    const bool traced = step == cfg.log.trace_step;
    if (traced) rt.profiler()->begin_trace();
    const auto t0 = std::chrono::steady_clock::now();
    tally.start();
    const float loss_scale = scaler.scale();
    const float dloss = float(loss_scale / tokens_per_step);
    // The loss is the mean over the step's targets; the kernels' dloss stays per token (a value the
    // step's CUDA graph keeps), and the optimizer takes the gradients as those of the mean times
    // gradient_scale: the loss scale, times the share of the targets kept (data.eod_mask_loss, a
    // dataset's loss mask). A step without any has a loss of 0 and is scaled as a whole one.
    const int64_t kept = counts_targets ? kept_targets(step) : 0;
    const bool masked = kept > 0;
    const double targets = masked ? double(kept) : tokens_per_step;
    const float gradient_scale = masked ? float(loss_scale * (targets / tokens_per_step)) : loss_scale;
    if (counts_targets && !masked && main_rank)
      std::printf("warning: step %lld has no target to learn: its samples' targets are all left out (%s)\n",
                  (long long)step, data->target_mask().c_str());
    const double lr = lr_schedule.at(step);
    {
      float* plan = step_plan.ptr<float>();  // pinned: the previous step's copy of it finished at its end
      const int64_t t = step - scaler.skipped();  // the steps applied so far, this one included
      plan[kLr] = float(lr);
      plan[kBiasCorrection1] = bias_correction(float(cfg.optimizer.beta1), t);
      plan[kBiasCorrection2] = bias_correction(float(cfg.optimizer.beta2), t);
      plan[kLossScale] = gradient_scale;
      plan[kMaxNorm] = float(cfg.train.grad_clip);
    }
    auto first_sample = [&](int mb) { return sample_of(step, mb); };
    if (graphs && staged != step) stage_batch(step);
    // Dropout masks are keyed by (seed, step, global sample index).
    auto context_at = [&](int64_t sample_offset, bool training = true) {
      StepContext ctx;
      ctx.seed = uint64_t(cfg.train.seed);
      ctx.step = step;
      ctx.sample_offset = sample_offset;
      ctx.target_share = float(targets / tokens_per_step);
      if (moe && training) ctx.moe_stats = moe_stats;
      return ctx;
    };
    // The step's device work, from the upload of its scalars to the download of its loss and norm.
    auto enqueue = [&] {
      marks.mark(0);
      copy(rt, step_scalars, step_plan);
      model.params().zero_grads();
      fill(rt, loss_sum, 0.0f);
      fill(rt, norm_sq, 0.0f);
      if (moe) fill(rt, moe_stats, 0.0f);
      std::vector<std::pair<Tensor, Tensor>> batch;
      if (graphs) {
        for (int mb = 0; mb < m; ++mb) batch.push_back(loader.upload(mb));
        batch_uploaded.record();
      }
      GPTStage stage_model(
          model, [&](int mb) { return context_at(first_sample(mb)); },
          [&](int mb) { return graphs ? batch[size_t(mb)] : loader.load(Split::train, first_sample(mb)); }, dloss,
          loss_sum, &stage_timer);
      engine.run_step(schedule, stage_model, reduction);
      model.params().check_grads_written();
      marks.mark(1);
      // Sequence parallelism leaves the LayerNorm gradients as partial sums over the tensor group.
      partial_grads.run();
      if (!early_squares)
        for (const Tensor& g : counted_grads) sum_squares_accumulate(rt, norm_sq, g);
      if (experts_apart) {  // each rank of the expert group holds other experts
        fill(rt, expert_sq, 0.0f);
        for (const Tensor& g : expert_grads) sum_squares_accumulate(rt, expert_sq, g);
        expert_group->all_reduce(expert_sq);
        accumulate(rt, norm_sq, expert_sq);
      }
      // The loss over the data group, and at stages >= 1 the squares of each rank's gradient pieces.
      if (reduce) data_group.all_reduce(optimizer.sharded() ? scalars.tensor(DType::f32, {2}) : loss_sum);
      // Each tensor rank counts its shards (and rank 0 the replicated parameters): sum the squares
      // over the tensor group; the loss is the same on every tensor rank.
      if (tensor_group) tensor_group->all_reduce(norm_sq);
      // The loss is known on the last stage, each stage has its own squares: sum both over stages
      // (a non-finite value anywhere makes both global).
      if (pipeline_group) pipeline_group->all_reduce(scalars.tensor(DType::f32, {2}));
      marks.mark(2);
      // The gradient scale (clipping, unscaling) and whether the step applies, on the device.
      adamw_step_scalars(rt, step_scalars, loss_sum, norm_sq);
      AdamWHyper h;
      h.beta1 = float(cfg.optimizer.beta1);
      h.beta2 = float(cfg.optimizer.beta2);
      h.eps = float(cfg.optimizer.eps);
      h.weight_decay = float(cfg.optimizer.weight_decay);
      h.scalars = step_scalars;
      optimizer.step(h, 0.0f);
      if (streaming) streaming->parameters_changed();
      copy(rt, step_readback.slice(0, {2}), scalars.tensor(DType::f32, {2}));
      copy(rt, step_readback.slice(2, {1}), step_scalars.slice(kApply, {1}));
      if (moe) {  // each data rank routed its own micro-batches, each stage its own blocks
        if (reduce) data_group.all_reduce(moe_stats);
        if (pipeline_group) pipeline_group->all_reduce(moe_stats);
        static_assert(3 + 3 <= kStepScalarCount, "the step's readback holds the loss, norm, apply and 3 MoE statistics");
        copy(rt, step_readback.slice(3, {3}), moe_stats);
      }
      marks.mark(3);
    };
    // What the step's kernels take by value: the loss gradient's scale (fp16's loss scale).
    uint32_t dloss_bits = 0;
    std::memcpy(&dloss_bits, &dloss, sizeof dloss_bits);
    if (graphs) {
      step_graph.run(dloss_bits, enqueue);
      if (step < cfg.train.steps) {
        batch_uploaded.wait();
        stage_batch(step + 1);
      }
    } else {
      enqueue();
    }
    if (counts_targets && step < cfg.train.steps) kept_targets(step + 1);
    rt.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tally.stop();
    const float* host = step_readback.ptr<float>();
    const double loss = double(host[0]) / targets;
    const double norm = std::sqrt(double(host[1])) / gradient_scale;
    const bool finite = host[2] != 0.0f;  // the device skipped the update otherwise
    // The balancing loss and the z-loss averaged over the step's MoE blocks and micro-batches, and
    // the fraction of the choices dropped at full experts.
    const double moe_passes = double(mc.moe.layers(mc.n_layers)) * double(res.accumulation * data_size);
    const double moe_aux = moe ? double(host[3]) / moe_passes : 0.0;
    const double moe_dropped = moe ? double(host[4]) / (moe_passes * double(B * T * mc.moe.top_k)) : 0.0;
    const double moe_z = moe ? double(host[5]) / moe_passes : 0.0;
    if (!finite && !lsc.enabled)
      throw UserError("step " + std::to_string(step) + ": non-finite " + (std::isfinite(loss) ? "gradient norm" : "loss") +
                      "; first non-finite gradient in " +
                      first_nonfinite_parameter(rt, model.params(), optimizer, probe, &data_group, expert_group, pipeline_group) +
                      " (try a lower optimizer.lr, train.precision = \"fp32\", or a smaller optimizer.warmup_steps)");
    const bool was_at_minimum = scaler.at_minimum();
    const bool apply = scaler.update(!finite);
    if (!apply && main_rank && was_at_minimum)
      std::printf("warning: step %lld: non-finite %s with the loss scale at its minimum (%g): fp16 cannot represent "
                  "it; use train.precision = \"bf16\" or lower optimizer.lr\n",
                  (long long)step, std::isfinite(loss) ? "gradients" : "loss", double(loss_scale));
    if (traced) {
      const std::string path = trace_path(cfg.log.trace_file, launch.rank, launch.world);
      rt.profiler()->end_trace(path, launch.rank);
      if (main_rank)
        std::printf("step %lld traced to %s (open in ui.perfetto.dev)\n", (long long)step,
                    launch.world > 1 ? trace_path(cfg.log.trace_file, -1, launch.world).c_str() : path.c_str());
    }
    const double tokens_per_s = tokens_per_step / seconds;
    const double mfu = peak > 0 ? tokens_per_s * mc.flops_per_token() / (peak * launch.world) : 0.0;
    const size_t peak_mem = rt.allocator().stats().peak;
    // Every pipeline rank's stage times, by virtual stage, on rank 0 (collective over the group).
    const JsonObject stage_timing = gather_stage_timing(stage_timer.timing(), groups.pipeline());
    if (main_rank) {
      JsonObject rec;
      rec.add("step", step).add("loss", loss).add("lr", lr).add("grad_norm", norm);
      if (lsc.enabled) rec.add("loss_scale", double(loss_scale)).add("skipped", !apply);
      if (moe) rec.add("moe_aux_loss", moe_aux).add("moe_dropped", moe_dropped).add("moe_z_loss", moe_z);
      rec.add("tokens_per_s", tokens_per_s).add("step_ms", seconds * 1e3).add("peak_mem_bytes", int64_t(peak_mem));
      JsonObject phases;  // device time (compute stream), ms; the rest of step_ms is host time
      phases.add("schedule", marks.ms(0, 1)).add("reductions", marks.ms(1, 2)).add("optimizer", marks.ms(2, 3));
      rec.add("phase_ms", phases);
      rec.add("stage_timing", stage_timing);
      if (peak > 0) rec.add("mfu", mfu);
      if (tally.any()) rec.add("comm_bytes", tally.json());  // sent by rank 0, by group
      metrics->write(rec);
      if (tb->enabled()) {
        std::vector<std::pair<std::string, double>> v = {{"train/loss", loss}, {"train/lr", lr}, {"train/grad_norm", norm}};
        if (lsc.enabled) v.emplace_back("train/loss_scale", double(loss_scale));
        if (moe) {
          v.emplace_back("train/moe_aux_loss", moe_aux);
          v.emplace_back("train/moe_dropped", moe_dropped);
          v.emplace_back("train/moe_z_loss", moe_z);
        }
        v.emplace_back("train/tokens_per_s", tokens_per_s);
        v.emplace_back("train/step_ms", seconds * 1e3);
        v.emplace_back("train/peak_mem_bytes", double(peak_mem));
        if (peak > 0) v.emplace_back("train/mfu", mfu);
        tb->scalars(step, v);
      }
      if (step == start_step + 1) {
        // Set up on a group's first device collective (core/cuda/peer_collectives.h), so known only now.
        for (Communicator* g : {tensor_group, layout.data > 1 ? &data_group : nullptr})
          if (g && g->size() == 2 && res.device.is_cuda())
            std::printf("%s group: sums and gathers through %s\n", g->name().c_str(),
                        g->peer_path_active() ? "peer memory (copy engines, parallel.peer_all_reduce)" : "NCCL");
      }
      if (step % cfg.log.every == 0 || step == 1 || step == cfg.train.steps) {
        std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f |", (long long)step, (long long)cfg.train.steps,
                    loss, lr, norm);
        if (lsc.enabled) std::printf(" scale %g (skipped %lld) |", double(loss_scale), (long long)scaler.skipped());
        if (moe) std::printf(" moe aux %.3f, z %.3f, dropped %.1f%% |", moe_aux, moe_z, 100.0 * moe_dropped);
        std::printf(" %.0f tok/s |", tokens_per_s);
        if (peak > 0) std::printf(" MFU %.1f%% |", 100.0 * mfu);
        std::printf(" %.1f ms | peak %s\n", seconds * 1e3, format_bytes(peak_mem).c_str());
        std::fflush(stdout);
      }
    }
    const bool validating = cfg.log.val_every > 0 && (step % cfg.log.val_every == 0 || step == cfg.train.steps);
    const std::optional<double> val = validating ? validate(step) : std::nullopt;
    if (val) {
      if (keep_best) {
        int better = main_rank && *val < best_val ? 1 : 0;  // rank 0 knows the best so far
        {
          Watchdog::Guard g(rt.watchdog(), "the best-checkpoint broadcast", "the world");
          TRELLIS_MPI_CHECK(MPI_Bcast(&better, 1, MPI_INT, 0, MPI_COMM_WORLD));
        }
        if (better && unwatched([&] { return save_best_checkpoint(rt, cfg, state, step, *val, step * global_batch); }) &&
            main_rank)
          best_val = *val;
      }
    }
    last_step = step;
    const bool signalled = stop_requested(MPI_COMM_WORLD, rt.watchdog());
    const bool stop = signalled || step == cfg.train.stop_after;
    const bool save = checkpoints && (stop || step == cfg.train.steps || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0));
    const bool saved =
        !save || unwatched([&] { return save_training_checkpoint(rt, cfg, state, step, loss, step * global_batch); });
    if (stop || step == cfg.train.steps) last_save_failed = !saved;  // rank 0 knows; told to all below
    if (!saved && stop)
      std::printf("warning: stopping WITHOUT a checkpoint of step %lld (the save failed, see above)\n", (long long)step);
    else if (!saved && step != cfg.train.steps)
      std::printf("training goes on; the next checkpoint step saves again\n");
    if (stop) {
      if (main_rank)
        std::printf("stopping after step %lld: %s\n", (long long)step,
                    !signalled ? "train.stop_after"
                    : stop_signal_name() ? (std::string("received ") + stop_signal_name()).c_str()
                                         : "a stop signal reached another rank");
      break;
    }
  }
  // The most any rank sent in the last step, by group: the busiest pipeline stage, as --layouts shows it.
  CommTally::ByKind most_sent{};
  if (launch.world > 1) {
    const CommTally::ByKind mine = tally.bytes_by_kind();
    Watchdog::Guard g(rt.watchdog(), "the communication tally's reduction", "the world");
    TRELLIS_MPI_CHECK(MPI_Reduce(mine.data(), most_sent.data(), int(mine.size()), MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD));
  }
  if (main_rank) {
    std::printf("done: %lld steps; activation arenas peaked at %s; device memory peak %s\n", (long long)last_step,
                format_bytes(model.activation_peak()).c_str(), format_bytes(rt.allocator().stats().peak).c_str());
    if (tally.any()) std::printf("sent by rank 0 in the last step: %s\n", tally.text().c_str());
    if (launch.world > 1) std::printf("the most any rank sent in the last step: %s\n", CommTally::text(most_sent).c_str());
    if (graphs)
      std::printf("cuda graphs: %lld of %lld steps launched from a graph (train.cuda_graphs)\n",
                  (long long)step_graph.replays(), (long long)(last_step - start_step));
    if (cfg.log.profile_ops) {
      const int64_t ran = last_step - start_step, timed = ran >= 2 ? ran - 1 : ran;  // the first is left out
      std::printf("per-op device time per step over the last %lld steps (log.profile_ops):\n%s", (long long)timed,
                  rt.profiler()->report(timed).c_str());
    }
    std::fflush(stdout);
  }
  if (!opts.export_weights_dir.empty()) {
    Watchdog::Pause p(rt.watchdog());  // rank 0 writes while the others wait
    // The whole model, gathered from the data ranks' pieces (stage 3), the stages and tensor shards on rank 0.
    std::vector<char> scratch;
    const Tensor stage_values = optimizer.whole_values(scratch);
    if (saver) {
      const std::vector<char> values = gather_whole(rt, parts_group, pipeline_group, whole, stage_values);
      if (main_rank) {
        JsonObject extra;
        extra.add("step", last_step);
        write_model_files(mc, whole.whole, to_f32(values, mc.dtype), opts.export_weights_dir, extra);
        std::printf("exported weights to %s\n", opts.export_weights_dir.c_str());
      }
    }
  }
  // A run whose last checkpoint could not be saved has lost its final state (but for an export):
  // it ends with an error, not as a success.
  int failed = last_save_failed ? 1 : 0;
  if (launch.world > 1) {
    Watchdog::Guard g(rt.watchdog(), "the last checkpoint's result broadcast", "the world");
    TRELLIS_MPI_CHECK(MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
  }
  if (failed)
    throw UserError(cfg.path + ": checkpoint.dir = " + cfg.checkpoint.dir + ": the checkpoint of step " +
                    std::to_string(last_step) + ", this run's last, was not saved (the warning above says why)" +
                    (opts.export_weights_dir.empty() ? "" : "; the weights were exported to " + opts.export_weights_dir));
}

void dump_gradients(const Config& cfg, const LaunchInfo& launch, const std::string& dir) {
  Resolved res = resolve(cfg, launch);
  RuntimeOptions ro;
  ro.device = res.device;
  Runtime rt(ro);
  GPTConfig mc = res.model;
  mc.grad_dtype = DType::f32;  // the dump is for checking gradients: not rounded to 16 bits
  mc.moe.expert_parallel = 1;  // every rank computes the whole model's micro-batch
  const int64_t B = cfg.train.micro_batch, T = mc.seq_len;
  GPT model(rt, mc, B);
  model.initialize(uint64_t(cfg.train.seed));
  if (!cfg.model.init_from.empty()) {  // e.g. GPT-2's own weights against the PyTorch reference
    std::vector<float> whole = initial_parameters(cfg, mc, GPT::parameter_specs(mc));
    const Tensor values = model.params().flat_values();
    const Tensor host(whole.data(), DType::f32, Device::CPU(), values.shape);
    if (values.dtype == DType::f32) {
      copy(rt, values, host);
    } else {
      Buffer staging(rt.allocator(), whole.size() * 4, "model.init_from");
      const Tensor f32 = staging.tensor(DType::f32, values.shape);
      copy(rt, f32, host);
      cast(rt, values, f32);
    }
    rt.synchronize();
  }
  std::unique_ptr<SampleSource> data = open_samples(cfg, mc);
  BatchLoader loader(rt, *data, B, T);
  Buffer scalar(rt.allocator(), 4, "loss");
  Tensor loss_sum = scalar.tensor(DType::f32, {1});
  fill(rt, loss_sum, 0.0f);
  auto [tokens, targets] = loader.load(Split::train, 0);
  const int64_t kept = std::max<int64_t>(count_targets(*data, Split::train, 0, B), 1);  // the loss's mean is over them
  StepContext ctx;
  ctx.seed = uint64_t(cfg.train.seed);
  ctx.step = 1;
  ctx.target_share = float(double(kept) / double(B * T));
  model.params().zero_grads();
  model.forward_backward(ctx, tokens, targets, float(1.0 / double(kept)), loss_sum);
  const double loss = double(read_scalar(rt, loss_sum)) / double(kept);

  if (launch.rank != 0) return;  // every rank computed the same micro-batch; one writes it
  JsonObject batch, extra;
  batch.add("B", B).add("T", T);
  extra.add("batch", batch).add("loss", loss);
  write_model_files(rt, model, dir, extra);
  write_tensor_f32(rt, model.params().flat_grads(), dir + "/grads.f32");
  write_tensor_i32(rt, tokens, dir + "/tokens.i32");
  write_tensor_i32(rt, targets, dir + "/targets.i32");
  std::printf("wrote %s: loss %.6f over %lld targets\n", dir.c_str(), loss, (long long)kept);
}

}  // namespace trellis
