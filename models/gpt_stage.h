// A GPT part as a pipeline stage (parallel/pipeline/engine.h): maps each (micro-batch, chunk) in
// flight to one of the model's activation slots and fetches micro-batch data through callbacks.
#pragma once
#include <functional>
#include <map>
#include <utility>

#include "models/gpt.h"
#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/stage_timing.h"

namespace trellis {

class GPTStage final : public StageModel {
 public:
  // The micro-batch `mb` of the current step: its dropout/sample context, and its tokens and
  // targets (i32 (B, T) on the device; read at once, the slot keeps what it needs).
  using Context = std::function<StepContext(int mb)>;
  using Data = std::function<std::pair<Tensor, Tensor>(int mb)>;

  // dloss: the loss gradient scale (loss scale / global tokens); loss_sum: f32 scalar that the
  // last stage adds sum(losses) to. timer: when given, times the model's compute of each forward
  // and backward of this step (cleared here: one GPTStage per step); the data fetch is not timed.
  GPTStage(GPT& model, Context context, Data data, float dloss, const Tensor& loss_sum, StageTimer* timer = nullptr);

  Tensor input(int mb, int chunk) override;
  Tensor forward(int mb, int chunk, bool training) override;
  void backward(int mb, int chunk, const Tensor& grad, const GradsReady& ready) override;
  void discard(int mb, int chunk) override;

 private:
  int slot(int mb, int chunk, bool create);

  GPT& model_;
  Context context_;
  Data data_;
  float dloss_;
  Tensor loss_sum_;
  StageTimer* timer_;
  std::map<std::pair<int, int>, int> slots_;  // (mb, chunk) -> model slot
};

}  // namespace trellis
