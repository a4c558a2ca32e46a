// The mixed-precision AdamW optimizer over a flat parameter buffer (ZeRO stage 0: every rank
// holds the full fp32 master weights and moments). Stages 1-3 shard these over the data group.
#pragma once
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/parameters.h"

namespace trellis {

class ZeroOptimizer {
 public:
  // fp32 parameters are their own master weights; 16-bit parameters get an fp32 master copy.
  ZeroOptimizer(Runtime& rt, ParameterStore& params);

  // One AdamW step; grads are multiplied by grad_scale first (loss-scale and clipping factor).
  // Weight decay applies only to parameters whose spec says decay (the 2-D weights).
  void step(const AdamWHyper& h, float grad_scale);

  // Bytes of optimizer state (master copy if any, m, v) held by this rank.
  size_t state_bytes() const;
  Tensor master() const { return master_; }
  bool has_separate_master() const { return master_buf_.bytes() > 0; }
  Tensor first_moments() const { return m_; }
  Tensor second_moments() const { return v_; }

 private:
  struct Run { int64_t offset, numel; bool decay; };  // contiguous parameters with one decay flag
  Runtime& rt_;
  ParameterStore& params_;
  Buffer master_buf_, m_buf_, v_buf_;
  Tensor master_, m_, v_;
  std::vector<Run> runs_;
};

}  // namespace trellis
