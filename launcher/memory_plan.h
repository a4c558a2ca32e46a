// What one rank of a layout holds on its device before training starts: the model state (the ZeRO
// formula plus the buckets every stage keeps whole), the ZeRO streaming slots and the planned
// activations, and what optimizer offload keeps in host memory or files. The memory check before
// the model is built and `train_gpt --plan` both use it. A lower bound: no library workspaces, no
// allocator slack, no communication buffers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/process_groups.h"
#include "launcher/train_config.h"
#include "models/gpt.h"
#include "parallel/tensor/context.h"

namespace trellis {

// Sums and products that saturate: a layout far too large reads as "too much", never wraps.
size_t saturating_mul(size_t a, size_t b);
size_t saturating_add(size_t a, size_t b);

struct RankMemoryPlan {
  int64_t parameters = 0;     // this rank's parameter elements (its stage, tensor shard and experts)
  size_t model_state = 0;     // on the device: parameters, gradients, master weights, moments
  size_t zero_slots = 0;      // ZeRO stages 2-3: the streaming slots
  ActivationBytes per_slot;   // kept per micro-batch chunk in flight, and the workspace
  size_t activations = 0;     // per_slot.kept x the schedule's peak in flight + per_slot.work
  size_t offload_memory = 0;  // zero.offload = cpu: host memory for the optimizer state; nvme: what stays pinned
  size_t offload_files = 0;   // zero.offload = nvme: bytes in files in zero.offload_dir
  int slots = 1;              // micro-batches in flight at the schedule's peak
  size_t device_bytes() const { return saturating_add(saturating_add(model_state, zero_slots), activations); }
};

// The plan of pipeline rank `stage` of `layout` at tensor rank tp.rank (every tensor, data and
// expert rank of a stage holds the same sizes). `accumulation`: micro-batches per step a data rank.
RankMemoryPlan plan_rank_memory(const Config& cfg, const GPTConfig& mc, const Layout& layout, int stage,
                                const TensorParallelContext& tp, int64_t accumulation);

}  // namespace trellis
