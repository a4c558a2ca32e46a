// train_gpt --plan (launcher/plan.h): per pipeline stage, the memory plan the run's check before
// the model is built uses (launcher/memory_plan.h), and the step's compute per rank.
#include "launcher/plan.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/process_groups.h"
#include "core/runtime.h"
#include "launcher/memory_plan.h"
#include "launcher/resolved_run.h"

namespace trellis {

namespace {

std::string layers_of(const GPTPart& part) {
  std::string s;
  for (const LayerRange& c : part.chunks) {
    if (!s.empty()) s += ",";
    const auto [begin, end] = c;  // blocks [begin, end)
    s += end - begin == 1 ? std::to_string(begin) : std::to_string(begin) + "-" + std::to_string(end - 1);
  }
  if (part.embedding) s += " +emb";
  if (part.head) s += " +head";
  return s;
}

// "1.23 TFLOP", "456 GFLOP", ...
std::string flop_text(double flops) {
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  int u = 0;
  while (flops >= 1000 && u < 5) {
    flops /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %s", flops, units[u]);
  return buf;
}

}  // namespace

size_t StagePlans::largest() const { return stages.empty() ? 0 : stages[size_t(largest_stage())].device_bytes(); }

int StagePlans::largest_stage() const {
  int at = 0;
  for (size_t s = 0; s < stages.size(); ++s)
    if (stages[s].device_bytes() > stages[size_t(at)].device_bytes()) at = int(s);
  return at;
}

StagePlans plan_stages(const Config& cfg_in, int world) {
  validate_for_world(cfg_in, world);
  StagePlans out;
  // A run for GPUs (train.device cuda or auto) is planned as on GPUs also where this machine has
  // none: auto precision is then bf16, as there.
  out.cfg = cfg_in;
  Config& cfg = out.cfg;
  out.gpu_target = cfg.train.device != "cpu";
  out.gpu_here = out.gpu_target && cuda_device_count() > 0;
  if (out.gpu_target && !out.gpu_here) {
    cfg.train.device = "cpu";
    if (cfg.train.precision == "auto") cfg.train.precision = "bf16";
  }
  LaunchInfo launch;
  launch.world = world;  // one local rank: the plan looks at this machine's first device only
  out.res = resolve(cfg, launch);
  out.layout = make_layout(world, int(cfg.parallel.tensor), int(cfg.parallel.pipeline), int(cfg.parallel.expert));
  TensorParallelContext tp;
  tp.size = out.layout.tensor;
  tp.sequence_parallel = cfg.parallel.sequence_parallel;
  tp.comm_chunks = resolved_tensor_comm_chunks(cfg, out.gpu_target);
  tp.split_batch = tensor_splits_batch(cfg);
  for (int stage = 0; stage < out.layout.pipeline; ++stage) {
    out.stages.push_back(plan_rank_memory(cfg, out.res.model, out.layout, stage, tp, out.res.accumulation));
    out.comm.push_back(plan_rank_comm(cfg, out.res.model, out.layout, stage, tp, out.res.accumulation));
  }
  return out;
}

MemoryBudget memory_budget(const StagePlans& plans, double device_memory_gib) {
  MemoryBudget b;
  if (device_memory_gib > 0) {
    b.bytes = size_t(device_memory_gib * double(size_t(1) << 30));
    b.where = "a device of " + format_bytes(b.bytes) + " (--device-memory)";
  } else if (plans.gpu_here) {
    RuntimeOptions ro;
    ro.device = plans.res.device;
    Runtime rt(ro);
    b.bytes = rt.free_memory();
    b.where = "this machine's " + rt.device_name() + " (" + format_bytes(b.bytes) + " free)";
    b.peak_flops = rt.peak_flops();
  }
  return b;
}

void print_plan(const Config& cfg_in, int world, double device_memory_gib) {
  const StagePlans plans = plan_stages(cfg_in, world);
  const Config& cfg = plans.cfg;
  const Resolved& res = plans.res;
  const GPTConfig& mc = res.model;
  const Layout& layout = plans.layout;
  const int p = layout.pipeline, v = int(cfg.parallel.virtual_stages);
  const int64_t m = res.accumulation, B = cfg.train.micro_batch, T = mc.seq_len;
  const int zero_stage = layout.data > 1 ? int(cfg.zero.stage) : 0;

  std::printf("plan for %d rank%s: tensor %d x pipeline %d x data %d", world, world == 1 ? "" : "s", layout.tensor, p,
              layout.data);
  if (layout.expert > 1) std::printf(" (expert groups of %d)", layout.expert);
  std::printf(", ZeRO stage %d%s%s%s\n", zero_stage, cfg.zero.offload != "none" ? ", offload " : "",
              cfg.zero.offload != "none" ? cfg.zero.offload.c_str() : "",
              plans.gpu_target ? (plans.gpu_here ? ", on GPUs" : ", on GPUs (this machine has none)") : ", on CPUs");
  std::printf("batch: %lld samples a step = micro-batch %lld x %lld micro-batch%s x data %d, %lld tokens each%s%s\n",
              (long long)(B * m * layout.data), (long long)B, (long long)m, m == 1 ? "" : "es", layout.data, (long long)T,
              p > 1 ? "; schedule " : "", p > 1 ? cfg.parallel.schedule.c_str() : "");
  std::printf("model: %s parameters, %s, checkpointing %s; %s a token (6N + 12 L C %s)\n",
              with_commas(mc.parameter_count()).c_str(), res.precision.c_str(), cfg.train.checkpointing.c_str(),
              flop_text(mc.flops_per_token()).c_str(), mc.sliding_window > 0 ? "W, W the sliding window" : "T");
  std::printf("per rank, by pipeline stage (every tensor, data and expert rank of a stage alike; a lower bound: "
              "no library workspaces, communication buffers or allocator slack):\n");
  std::vector<std::string> layers;
  int width = 6;  // of the layers column
  for (int stage = 0; stage < p; ++stage) {
    layers.push_back(layers_of(GPTPart::of_rank(mc, p, v, stage)));
    width = std::max(width, int(layers.back().size()));
  }
  std::printf("%6s  %-*s %14s %12s %11s %26s %12s", "stage", width, "layers", "parameters", "model state", "ZeRO slots",
              "activations", "device");
  const bool offload = cfg.zero.offload != "none", files = cfg.zero.offload == "nvme";
  if (offload) std::printf(" %12s", files ? "host pinned" : "host");
  if (files) std::printf(" %12s", "files");
  std::printf("\n");
  for (int stage = 0; stage < p; ++stage) {
    const RankMemoryPlan& plan = plans.stages[size_t(stage)];
    const std::string act = std::to_string(plan.slots) + " x " + format_bytes(plan.per_slot.kept) + " + " +
                            format_bytes(plan.per_slot.work);
    std::printf("%6d  %-*s %14s %12s %11s %26s %12s", stage, width, layers[size_t(stage)].c_str(),
                with_commas(plan.parameters).c_str(), format_bytes(plan.model_state).c_str(),
                plan.zero_slots ? format_bytes(plan.zero_slots).c_str() : "-", act.c_str(),
                format_bytes(plan.device_bytes()).c_str());
    if (offload) std::printf(" %12s", format_bytes(plan.offload_memory).c_str());
    if (files) std::printf(" %12s", format_bytes(plan.offload_files).c_str());
    std::printf("\n");
  }
  if (world > 1) {
    std::printf("sent per rank a step (estimated as the step record's comm_bytes counts it: ring algorithms):\n");
    for (int stage = 0; stage < p; ++stage)
      std::printf("%6d  %s\n", stage, CommTally::text(plans.comm[size_t(stage)].by_kind()).c_str());
  }
  const double flops = mc.flops_per_token() * double(B * m * layout.data * T) / double(world);
  std::printf("compute: %s per rank a step (the model's FLOPs over %d rank%s)", flop_text(flops).c_str(), world,
              world == 1 ? "" : "s");
  if (p > 1) std::printf("; pipeline bubble (p-1)/(m v) = %.1f%%", 100.0 * double(p - 1) / double(m * v));
  std::printf("\n");
  const MemoryBudget budget = memory_budget(plans, device_memory_gib);
  if (budget.bytes == 0) return;
  const size_t largest = plans.largest();
  std::printf("on %s, stage %d's %s %s", budget.where.c_str(), plans.largest_stage(), format_bytes(largest).c_str(),
              largest <= budget.bytes ? "fits" : "does NOT fit");
  if (budget.peak_flops > 0) {
    const double ms = 1e3 * flops / budget.peak_flops;
    std::printf("; at its peak (%.0f TFLOP/s) a step takes at least %.1f ms", budget.peak_flops / 1e12, ms);
    if (p > 1) std::printf(" (%.1f ms with the bubble)", ms * (1.0 + double(p - 1) / double(m * v)));
  }
  std::printf("\n");
}

}  // namespace trellis
