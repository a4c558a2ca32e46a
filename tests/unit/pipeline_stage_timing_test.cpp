// StageTimer on the CPU (host clock): sums per chunk and pass, counts, and clear() between steps.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/runtime.h"
#include "parallel/pipeline/stage_timing.h"

namespace trellis {
namespace {

void timed_sleep(StageTimer& t, PipeOp op, int mb, int chunk, int ms) {
  t.start(op, mb, chunk);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  t.stop(op, mb, chunk);
}

TEST(StageTimer, SumsEachChunksForwardsAndBackwards) {
  Runtime rt(RuntimeOptions{});
  StageTimer t(rt, 2, 2);  // m = 2 micro-batches, v = 2 chunks
  timed_sleep(t, PipeOp::forward, 0, 1, 5);
  timed_sleep(t, PipeOp::forward, 1, 1, 5);
  timed_sleep(t, PipeOp::backward, 1, 0, 20);
  const StageTiming s = t.timing();
  EXPECT_EQ(s.forwards, (std::vector<int>{0, 2}));
  EXPECT_EQ(s.backwards, (std::vector<int>{1, 0}));
  EXPECT_EQ(s.forward_ms[0], 0.0);
  EXPECT_EQ(s.backward_ms[1], 0.0);
  EXPECT_GE(s.forward_ms[1], 10.0);  // a sleep lasts at least its time
  EXPECT_GE(s.backward_ms[0], 20.0);
}

TEST(StageTimer, ClearStartsANewStep) {
  Runtime rt(RuntimeOptions{});
  StageTimer t(rt, 1, 1);
  timed_sleep(t, PipeOp::forward, 0, 0, 1);
  t.clear();
  timed_sleep(t, PipeOp::backward, 0, 0, 1);
  const StageTiming s = t.timing();
  EXPECT_EQ(s.forwards, (std::vector<int>{0}));
  EXPECT_EQ(s.backwards, (std::vector<int>{1}));
  EXPECT_EQ(s.forward_ms[0], 0.0);
  EXPECT_GE(s.backward_ms[0], 1.0);
}

}  // namespace
}  // namespace trellis
