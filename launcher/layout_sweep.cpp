// train_gpt --layouts (launcher/layout_sweep.h): plan_stages over every split of the world.
#include "launcher/layout_sweep.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/error.h"
#include "launcher/plan.h"

namespace trellis {

namespace {

struct Row {
  int tensor = 1, pipeline = 1, data = 1;
  int64_t micro_batches = 1;
  double bubble = 0;  // (p - 1) / (m v), 0 without a pipeline
  size_t largest = 0;
  int largest_stage = 0;
  RankCommPlan sent;  // each group's most over the stages
};

// A run's error without the config path it starts with (every row would repeat it).
std::string reason_of(const UserError& e, const std::string& path) {
  std::string what = e.what();
  if (!path.empty() && what.compare(0, path.size() + 2, path + ": ") == 0) what.erase(0, path.size() + 2);
  return what;
}

}  // namespace

void print_layouts(const Config& cfg_in, int world, double device_memory_gib) {
  // Every layout trains the same batch: the config's train.global_batch, or when that is 0 (one
  // micro-batch per data rank) the batch of the config's own layout on this world.
  int64_t global_batch = cfg_in.train.global_batch;
  std::string batch_source = "train.global_batch";
  if (global_batch == 0) {
    try {
      global_batch = resolve_batch(cfg_in, world).global_batch;
      batch_source = "the config's layout's";
    } catch (const UserError&) {
      global_batch = cfg_in.train.micro_batch * world;
      batch_source = "train.micro_batch x the world";
    }
  }
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  StagePlans first;  // of a layout that plans, for the header and the budget
  for (int t = 1; t <= world; ++t) {
    if (world % t != 0) continue;
    for (int p = 1; p <= world / t; ++p) {
      if ((world / t) % p != 0) continue;
      Config cfg = cfg_in;
      cfg.parallel.tensor = t;
      cfg.parallel.pipeline = p;
      cfg.train.global_batch = global_batch;
      if (p != cfg_in.parallel.pipeline) cfg.parallel.stage_layers = "";  // written for the config's pipeline
      if (p == 1) {  // no pipeline: no chunks, and no schedule that needs one
        cfg.parallel.virtual_stages = 1;
        cfg.parallel.schedule = "1f1b";
      }
      try {
        parse_stage_layers(cfg);
        StagePlans plans = plan_stages(cfg, world);
        Row r;
        r.tensor = t;
        r.pipeline = p;
        r.data = plans.layout.data;
        r.micro_batches = plans.res.accumulation;
        const int v = int(plans.cfg.parallel.virtual_stages);
        r.bubble = p > 1 ? double(p - 1) / double(r.micro_batches * v) : 0.0;
        r.largest = plans.largest();
        r.largest_stage = plans.largest_stage();
        for (const RankCommPlan& c : plans.comm) {
          r.sent.tensor = std::max(r.sent.tensor, c.tensor);
          r.sent.data = std::max(r.sent.data, c.data + c.expert_data);
          r.sent.pipeline = std::max(r.sent.pipeline, c.pipeline + c.embedding);
          r.sent.expert = std::max(r.sent.expert, c.expert);
        }
        rows.push_back(r);
        if (rows.size() == 1) first = std::move(plans);
      } catch (const UserError& e) {
        skipped.push_back("tensor " + std::to_string(t) + " x pipeline " + std::to_string(p) + ": " +
                          reason_of(e, cfg_in.path));
      }
    }
  }
  std::printf("layouts of %d rank%s for %s: global batch %lld sequences (%s) of %lld tokens, micro-batch %lld",
              world, world == 1 ? "" : "s", cfg_in.path.c_str(), (long long)global_batch, batch_source.c_str(),
              (long long)cfg_in.model.seq_len, (long long)cfg_in.train.micro_batch);
  if (!rows.empty()) {
    const Config& c = first.cfg;
    std::printf(", ZeRO stage %lld, checkpointing %s, %s%s", (long long)c.zero.stage, c.train.checkpointing.c_str(),
                first.res.precision.c_str(),
                first.gpu_target ? (first.gpu_here ? " on GPUs" : " on GPUs (this machine has none)") : " on CPUs");
  }
  std::printf("\n");
  if (rows.empty()) {
    std::printf("no layout of %d ranks is possible for this config:\n", world);
    for (const std::string& s : skipped) std::printf("  %s\n", s.c_str());
    throw UserError(cfg_in.path + ": no tensor x pipeline x data layout of " + std::to_string(world) +
                    " ranks is possible (the reasons above)");
  }
  const MemoryBudget budget = memory_budget(first, device_memory_gib);
  const bool experts = cfg_in.moe.experts > 0;
  std::printf("device memory per rank: the largest pipeline stage's, a lower bound as --plan's; bubble: (p-1)/(m v);\n"
              "sent a step: the most a rank sends over each group (ring algorithms, as --plan estimates it)\n");
  std::printf("%8s %9s %6s %14s %7s %22s %12s %12s %12s", "tensor", "pipeline", "data", "micro-batches", "bubble",
              "device (stage)", "sent: tensor", "data", "pipeline");
  if (experts) std::printf(" %12s", "expert");
  if (budget.bytes) std::printf("  fits %s", budget.where.c_str());
  std::printf("\n");
  int fitting = 0;
  for (const Row& r : rows) {
    const std::string bubble = r.pipeline > 1 ? [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%.1f%%", 100.0 * r.bubble);
      return std::string(b);
    }() : std::string("-");
    const std::string device = format_bytes(r.largest) + " (" + std::to_string(r.largest_stage) + ")";
    auto sent = [](double b) { return b > 0 ? format_decimal_bytes(b) : std::string("-"); };
    std::printf("%8d %9d %6d %14lld %7s %22s %12s %12s %12s", r.tensor, r.pipeline, r.data, (long long)r.micro_batches,
                bubble.c_str(), device.c_str(), sent(r.sent.tensor).c_str(), sent(r.sent.data).c_str(),
                sent(r.sent.pipeline).c_str());
    if (experts) std::printf(" %12s", sent(r.sent.expert).c_str());
    if (budget.bytes) {
      fitting += r.largest <= budget.bytes;
      std::printf("  %s", r.largest <= budget.bytes ? "yes" : "no");
    }
    const bool own = r.tensor == cfg_in.parallel.tensor && r.pipeline == cfg_in.parallel.pipeline;
    std::printf("%s\n", own ? "   <- the config's" : "");
  }
  if (budget.bytes) std::printf("%d of %zu layouts fit\n", fitting, rows.size());
  if (!skipped.empty()) {
    std::printf("not possible:\n");
    for (const std::string& s : skipped) std::printf("  %s\n", s.c_str());
  }
}

}  // namespace trellis
