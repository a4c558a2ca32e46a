// GPTStage: the engine's calls mapped onto GPT's chunk API.
#include "models/gpt_stage.h"

#include <tuple>

#include "core/error.h"

namespace trellis {

int GPTStage::slot(int mb, int chunk, bool create) {
  auto it = slots_.find({mb, chunk});
  if (it != slots_.end()) return it->second;
  TRELLIS_CHECK(create, "no saved state for micro-batch " + std::to_string(mb) + ", chunk " + std::to_string(chunk));
  const int s = model_.acquire_slot(chunk);
  slots_[{mb, chunk}] = s;
  return s;
}

Tensor GPTStage::input(int mb, int chunk) { return model_.slot_input(slot(mb, chunk, true)); }

Tensor GPTStage::forward(int mb, int chunk, bool training) {
  const int s = slot(mb, chunk, true);
  StepContext ctx = context_(mb);
  ctx.training = training;
  const GPTPart& part = model_.part();
  Tensor tokens, targets;
  if (part.has_embedding(chunk) || part.has_head(chunk)) std::tie(tokens, targets) = data_(mb);
  return model_.forward_chunk(s, ctx, tokens, targets, dloss_, loss_sum_, training);
}

void GPTStage::backward(int mb, int chunk, const Tensor& grad, const GradsReady& ready) {
  const int s = slot(mb, chunk, false);
  slots_.erase({mb, chunk});
  model_.backward_chunk(s, grad, ready);
}

void GPTStage::discard(int mb, int chunk) {
  const int s = slot(mb, chunk, false);
  slots_.erase({mb, chunk});
  model_.release_slot(s);
}

}  // namespace trellis
