// GPTStage: the engine's calls mapped onto GPT's chunk API.
#include "models/gpt_stage.h"

#include <tuple>
#include <utility>

#include "core/error.h"

namespace trellis {

GPTStage::GPTStage(GPT& model, Context context, Data data, float dloss, const Tensor& loss_sum, StageTimer* timer)
    : model_(model), context_(std::move(context)), data_(std::move(data)), dloss_(dloss), loss_sum_(loss_sum),
      timer_(timer) {
  if (timer_) timer_->clear();
}

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
  // Document masking needs the tokens in every chunk (their document starts).
  if (part.has_embedding(chunk) || part.has_head(chunk) || model_.config().document_eod >= 0)
    std::tie(tokens, targets) = data_(mb);
  if (timer_) timer_->start(PipeOp::forward, mb, chunk);
  Tensor out = model_.forward_chunk(s, ctx, tokens, targets, dloss_, loss_sum_, training);
  if (timer_) timer_->stop(PipeOp::forward, mb, chunk);
  return out;
}

void GPTStage::backward(int mb, int chunk, const Tensor& grad, const GradsReady& ready) {
  const int s = slot(mb, chunk, false);
  slots_.erase({mb, chunk});
  if (timer_) timer_->start(PipeOp::backward, mb, chunk);
  model_.backward_chunk(s, grad, ready);
  if (timer_) timer_->stop(PipeOp::backward, mb, chunk);
}

void GPTStage::discard(int mb, int chunk) {
  const int s = slot(mb, chunk, false);
  slots_.erase({mb, chunk});
  model_.release_slot(s);
}

}  // namespace trellis
