// One rank's communication a step (launcher/comm_plan.h). Each term names the collectives it counts;
// measured against runs on the CPU (bench-free: tests/e2e/comm_bytes_test.py).
#include "launcher/comm_plan.h"

#include <algorithm>
#include <cmath>

#include "launcher/trainer.h"

namespace trellis {

namespace {

// Bytes sent for a whole of S bytes by one rank of n: all-reduce, and reduce-scatter / all-gather.
double all_reduce(double S, int n) { return n > 1 ? 2.0 * S * double(n - 1) / double(n) : 0.0; }
double gather(double S, int n) { return n > 1 ? S * double(n - 1) / double(n) : 0.0; }

struct ParamCounts {
  double blocks = 0, whole = 0, experts = 0;  // elements: the blocks' buckets, those kept whole, the experts'
  int64_t block_buckets = 0, expert_buckets = 0;
};

ParamCounts count_params(const GPTConfig& mc, const GPTPart& part, const TensorParallelContext& tp) {
  ParamCounts c;
  int last_block = -1, last_expert = -1;
  for (const ParameterSpec& s : GPT::parameter_specs(mc, part, tp)) {
    const double n = double(s.shape.numel());
    if (s.expert) {
      c.experts += n;
      if (s.bucket != last_expert) ++c.expert_buckets, last_expert = s.bucket;
    } else if (s.bucket >= 0) {
      c.blocks += n;
      if (s.bucket != last_block) ++c.block_buckets, last_block = s.bucket;
    } else {
      c.whole += n;
    }
  }
  return c;
}

// ZeRO's traffic over a group of n for `blocks` (streamed at stages 2-3, in `buckets` equal
// buckets) and `whole` elements: stage 0 all-reduces the gradients (reduce_bytes an element); 1
// reduce-scatters them in f32 and all-gathers the updated parameters; 2 reduce-scatters the blocks'
// every micro-batch; 3 also gathers each block before its forward and its backward, but for the two
// the streaming slots still hold (the last two of a forward, the first two of the next).
double zero_traffic(int stage, int n, double blocks, double whole, int64_t buckets, int64_t m, double reduce_bytes,
                    double param_bytes) {
  if (n <= 1) return 0.0;
  const double all = blocks + whole;
  if (stage == 0) return all_reduce(all * reduce_bytes, n);
  const double grads = stage >= 2 ? double(m) * blocks + whole : all;
  double gathered = all;
  if (stage >= 3 && buckets > 0) {
    const double passes = double(buckets) + double(2 * m - 1) * double(std::max<int64_t>(buckets - 2, 0));
    gathered = whole + blocks / double(buckets) * passes;
  }
  return gather(grads * 4.0, n) + gather(gathered * param_bytes, n);
}

}  // namespace

CommTally::ByKind RankCommPlan::by_kind() const {
  static_assert(std::size(CommTally::kKinds) == 6 && CommTally::kKinds[0] == GroupKind::tensor &&
                CommTally::kKinds[5] == GroupKind::expert_data);
  auto bytes = [](double b) { return uint64_t(std::llround(b)); };
  return {bytes(tensor), bytes(data), bytes(pipeline), bytes(embedding), bytes(expert), bytes(expert_data)};
}

RankCommPlan plan_rank_comm(const Config& cfg, const GPTConfig& mc, const Layout& layout, int stage,
                            const TensorParallelContext& tp, int64_t accumulation) {
  RankCommPlan r;
  const int p = layout.pipeline, v = int(cfg.parallel.virtual_stages), t = layout.tensor, d = layout.data;
  const int64_t m = accumulation, B = cfg.train.micro_batch, T = mc.seq_len, C = mc.d_model;
  const double a = double(dtype_size(mc.dtype));
  const double A = double(B * T * C) * a;  // one micro-batch's activation (B, T, C)
  const int zero_stage = d > 1 ? int(cfg.zero.stage) : 0;
  const GPTPart part = GPTPart::of_rank(mc, p, v, stage);
  int64_t layers = 0, moe_layers = 0;
  for (const LayerRange& c : part.chunks)
    for (int l = c.first; l < c.second; ++l) ++layers, moe_layers += mc.moe.in_layer(l);

  // Tensor: a block's two all-reduces in forward and two in backward (with sequence parallelism two
  // all-gathers and two reduce-scatters each way, the same bytes, and its backward gathers the two
  // layer-norm outputs again for the weight gradients); full recomputation repeats the attention's
  // forward collectives. The embedding's and the head's one each, and the vocabulary-parallel loss's
  // three of (B, T) floats.
  if (t > 1) {
    const bool sp = tp.sequence_parallel, full = cfg.train.checkpointing == "full";
    const double per_block = 4.0 + (sp ? 1.0 : 0.0) + (full ? (sp ? 1.5 : 1.0) : 0.0);
    const double units = per_block * double(layers) + (part.embedding ? 1.0 : 0.0) + (part.head ? 1.0 : 0.0);
    const double loss = part.head ? 3.0 * double(B * T) * 4.0 : 0.0;
    // A block with experts also sums its gates' gradients (N x top_k floats) over the group.
    const double gates = double(moe_layers) * double(B * T * mc.moe.top_k) * 4.0;
    // Once a step: the gradient norm's sum of squares, and with sequence parallelism the norms'
    // gradients (each rank's are partial sums over its token shard: a weight and, but for RMSNorm, a
    // bias), the final one's on the head's stage; at ZeRO stages >= 1 a rank's f32 pieces of them, 1/d
    // on average (which rank holds which varies).
    const int64_t per_norm = mc.rmsnorm ? 1 : 2;
    const double ln_values = double(per_norm * (2 * layers + (part.head ? 1 : 0))) * double(C);
    const double norms = zero_stage >= 1 ? ln_values * 4.0 / double(d) : ln_values * double(dtype_size(mc.grad_dtype));
    r.tensor = double(m) * all_reduce(units * A + loss + gates, t) + all_reduce(4.0 + (sp ? norms : 0.0), t);
  }

  // Pipeline: each chunk sends its output forward unless it is the model's last, and its input's
  // gradient back unless it is the first; the first and last stage all-reduce the tied embedding's
  // gradient (this rank's vocabulary rows; an untied head has none to sum).
  if (p > 1) {
    double sends = 0;
    for (int c = 0; c < int(part.chunks.size()); ++c) {
      const int virtual_stage = c * p + stage;
      sends += (virtual_stage < p * v - 1 ? 1.0 : 0.0) + (virtual_stage > 0 ? 1.0 : 0.0);
    }
    r.pipeline = double(m) * sends * A;
    // Reduced over the data group first: at ZeRO stages >= 1 this rank's f32 piece of it.
    const double rows = double(mc.padded_vocab() / t * C);
    if ((stage == 0 || stage == p - 1) && mc.tied_head)
      r.embedding = all_reduce(zero_stage >= 1 ? rows / double(d) * 4.0 : rows * double(dtype_size(mc.grad_dtype)), 2);
  }

  // Data: ZeRO over the data group (the experts over the expert-data group); at stage 0 optionally
  // the last micro-batch's embedding rows gathered besides (zero.embedding_grad).
  const ParamCounts n = count_params(mc, part, tp);
  const double reduce_bytes = zero_stage == 0 && cfg.zero.reduce_dtype != "f32" ? 2.0 : 4.0;
  r.data = zero_traffic(zero_stage, d, n.blocks, n.whole, n.block_buckets, m, reduce_bytes, a);
  if (d > 1 && use_embedding_row_exchange(cfg, d, B, T, mc))
    r.data += double(d - 1) * double(B * T) * (double(C) * a + 4.0);
  const int expert_data = d / std::max(layout.expert, 1);
  if (mc.moe.experts > 0) {
    r.expert_data = zero_traffic(expert_data > 1 ? int(cfg.zero.stage) : 0, expert_data, n.experts, 0,
                                 n.expert_buckets, m, reduce_bytes, a);
    // Expert parallelism: each block with experts exchanges its slots (experts x capacity, C wide;
    // dropless its top_k x tokens rows, as if the routing were balanced: the real share varies)
    // four times a micro-batch (dispatch and combine, forward and backward), six when full
    // recomputation runs its forward's two again; dropless also all-gathers the experts' counts
    // (f32) once a forward.
    if (layout.expert > 1) {
      const double slots = double(mc.moe.slots(B * T));
      const bool full = cfg.train.checkpointing == "full";
      r.expert = double(m) * double(moe_layers) * (full ? 6.0 : 4.0) * gather(slots * double(C) * a, layout.expert);
      if (mc.moe.dropless)
        r.expert += double(m) * double(moe_layers) * (full ? 2.0 : 1.0) *
                    gather(double(layout.expert * mc.moe.experts) * 4.0, layout.expert);
    }
  }
  return r;
}

}  // namespace trellis
