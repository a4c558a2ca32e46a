#include "parallel/pipeline/stage_timing.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace trellis {

StageTimer::StageTimer(Runtime& rt, int m, int v) : m_(m), v_(v), marks_(rt, 4 * m * v), timed_(size_t(2 * m * v)) {}

void StageTimer::clear() { std::fill(timed_.begin(), timed_.end(), false); }

int StageTimer::mark_of(PipeOp op, int mb, int chunk) const {
  TRELLIS_CHECK(op == PipeOp::forward || op == PipeOp::backward, std::string("cannot time ") + pipe_op_name(op));
  TRELLIS_CHECK(mb >= 0 && mb < m_ && chunk >= 0 && chunk < v_,
                "(mb " + std::to_string(mb) + ", chunk " + std::to_string(chunk) + ") outside the timer's " +
                    std::to_string(m_) + " x " + std::to_string(v_));
  const int call = (op == PipeOp::backward ? m_ * v_ : 0) + mb * v_ + chunk;
  return 2 * call;
}

void StageTimer::start(PipeOp op, int mb, int chunk) { marks_.mark(mark_of(op, mb, chunk)); }

void StageTimer::stop(PipeOp op, int mb, int chunk) {
  const int first = mark_of(op, mb, chunk);
  marks_.mark(first + 1);
  timed_[size_t(first / 2)] = true;
}

StageTiming StageTimer::timing() const {
  StageTiming t;
  t.forward_ms.assign(size_t(v_), 0.0);
  t.backward_ms.assign(size_t(v_), 0.0);
  t.forwards.assign(size_t(v_), 0);
  t.backwards.assign(size_t(v_), 0);
  for (PipeOp op : {PipeOp::forward, PipeOp::backward}) {
    const bool fwd = op == PipeOp::forward;
    for (int mb = 0; mb < m_; ++mb)
      for (int c = 0; c < v_; ++c) {
        const int first = mark_of(op, mb, c);
        if (!timed_[size_t(first / 2)]) continue;
        (fwd ? t.forward_ms : t.backward_ms)[size_t(c)] += marks_.ms(first, first + 1);
        ++(fwd ? t.forwards : t.backwards)[size_t(c)];
      }
  }
  return t;
}

}  // namespace trellis
