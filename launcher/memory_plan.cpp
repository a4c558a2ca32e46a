// One rank's planned memory (launcher/memory_plan.h), from the same formulas the model, the ZeRO
// optimizer and its streaming slots allocate by.
#include "launcher/memory_plan.h"

#include <algorithm>
#include <vector>

#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/zero/optimizer.h"
#include "parallel/zero/streaming.h"

namespace trellis {

size_t saturating_mul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
size_t saturating_add(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

RankMemoryPlan plan_rank_memory(const Config& cfg, const GPTConfig& mc, const Layout& layout, int stage,
                                const TensorParallelContext& tp, int64_t accumulation) {
  RankMemoryPlan plan;
  const int p = layout.pipeline, v = int(cfg.parallel.virtual_stages), data_size = layout.data;
  const int expert_data_size = data_size / layout.expert;
  // ZeRO stages >= 1 shard over the data group; with one data rank there is nothing to shard.
  const int zero_stage = data_size > 1 ? int(cfg.zero.stage) : 0;
  const GPTPart part = GPTPart::of_rank(mc, p, v, stage);
  plan.slots = PipelineEngine::peak_in_flight(
      build_schedule(parse_schedule_kind(cfg.parallel.schedule), p, int(accumulation), v)[size_t(stage)]);
  plan.per_slot = GPT::activation_bytes(mc, part, cfg.train.micro_batch, mc.seq_len, tp);
  plan.activations = saturating_add(saturating_mul(plan.per_slot.kept, size_t(plan.slots)), plan.per_slot.work);

  // The experts' parameters (sharded over the expert-data group), the others (for the offload
  // staging), and of those the blocks'.
  std::vector<ParameterSpec> others, expert_specs, blocks;
  int64_t experts = 0, kept_whole = 0;  // kept whole: the buckets of wte, wpe, the final LayerNorm and an untied head
  for (const ParameterSpec& s : GPT::parameter_specs(mc, part, tp)) {
    plan.parameters += s.shape.numel();
    (s.expert ? expert_specs : others).push_back(s);
    if (s.expert) experts += s.shape.numel();
    if (s.bucket >= 0 && !s.expert) blocks.push_back(s);
    if (s.bucket < 0) kept_whole += s.shape.numel();
  }
  const bool offload = cfg.zero.offload != "none";
  // The ZeRO formula counts every gradient (stages 2-3) and parameter (stage 3) as a 1/N piece;
  // the buckets kept whole hold all of their gradients in f32 beside that reduced piece, and all of
  // their parameters (the piece is a view of them).
  const int64_t unsharded = kept_whole - kept_whole / data_size;
  const int64_t whole_extra =
      (zero_stage >= 2 ? kept_whole * 4 : 0) + (zero_stage >= 3 ? unsharded * int64_t(dtype_size(mc.dtype)) : 0);
  plan.model_state = size_t(ZeroOptimizer::model_state_bytes(plan.parameters, mc.dtype, zero_stage, data_size, offload,
                                                             mc.grad_dtype, experts, expert_data_size) +
                            whole_extra);
  // The streaming slots (stages 2-3): for the largest block's bucket, and its experts' when their
  // expert-data group has more than one rank (else they are kept whole).
  plan.zero_slots = ZeroStreaming::planned_bytes(largest_bucket_numel(blocks),
                                                 expert_data_size > 1 ? largest_bucket_numel(expert_specs) : 0,
                                                 zero_stage, data_size, expert_data_size, mc.dtype);
  if (!offload) return plan;
  // Offloaded: the state, and pinned beside it the parameters' copy and the gradient staging (the
  // largest piece: of the experts' buckets over the expert-data group, of the others over the data group).
  const size_t staging = size_t(std::max(
      ZeroOptimizer::offload_staging_bytes(largest_bucket_numel(others), zero_stage, data_size, mc.grad_dtype),
      ZeroOptimizer::offload_staging_bytes(largest_bucket_numel(expert_specs), zero_stage, expert_data_size,
                                           mc.grad_dtype)));
  auto split = [&](auto bytes) {  // the other parameters' state over the data group, the experts' apart
    return size_t(bytes(plan.parameters - experts, data_size) + (experts > 0 ? bytes(experts, expert_data_size) : 0));
  };
  const size_t off = split([&](int64_t k, int N) {
    return ZeroOptimizer::offloaded_state_bytes(k, mc.dtype, zero_stage, N);
  }) + staging;
  const size_t pinned = split([&](int64_t k, int N) {
    return ZeroOptimizer::offloaded_pinned_bytes(k, mc.dtype, zero_stage, N);
  }) + staging;
  const bool files = cfg.zero.offload == "nvme";
  plan.offload_memory = files ? pinned : off;
  plan.offload_files = files ? off - pinned : 0;
  return plan;
}

}  // namespace trellis
