// The learning-rate schedules (launcher/lr_schedule.h): warm-up, then cosine, linear, constant or
// warmup-stable-decay, each ending at min_lr on the last step (but constant).
#include <gtest/gtest.h>

#include "launcher/lr_schedule.h"

namespace trellis {
namespace {

LrSchedule schedule(const char* kind, int64_t steps = 100, int64_t warmup = 10, int64_t decay = 0) {
  return LrSchedule{kind, steps, warmup, decay, 1e-3, 1e-4};
}

TEST(LrSchedule, WarmUpIsLinearFromZero) {
  for (const char* kind : {"cosine", "linear", "constant", "wsd"}) {
    const LrSchedule s = schedule(kind);
    EXPECT_DOUBLE_EQ(s.at(1), 1e-4) << kind;
    EXPECT_DOUBLE_EQ(s.at(5), 5e-4) << kind;
    EXPECT_DOUBLE_EQ(s.at(10), 1e-3) << kind;
  }
}

TEST(LrSchedule, CosineAndLinearDecayToMinLrAtTheLastStep) {
  const LrSchedule cosine = schedule("cosine"), linear = schedule("linear");
  EXPECT_DOUBLE_EQ(cosine.at(55), 1e-4 + 0.5 * 9e-4);  // halfway through the decay
  EXPECT_DOUBLE_EQ(linear.at(55), 1e-4 + 0.5 * 9e-4);
  EXPECT_NEAR(cosine.at(32), 1e-4 + 0.5 * 9e-4 * (1 + std::cos(3.141592653589793 * 22 / 90)), 1e-15);
  EXPECT_NEAR(linear.at(32), 1e-4 + 9e-4 * (1 - 22.0 / 90), 1e-15);
  EXPECT_DOUBLE_EQ(cosine.at(100), 1e-4);
  EXPECT_DOUBLE_EQ(linear.at(100), 1e-4);
  EXPECT_DOUBLE_EQ(linear.at(150), 1e-4) << "past the end it stays at min_lr";
}

TEST(LrSchedule, ConstantStaysAtLr) {
  const LrSchedule s = schedule("constant");
  EXPECT_DOUBLE_EQ(s.at(11), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
}

TEST(LrSchedule, WsdIsStableThenDecaysLinearlyOverItsLastSteps) {
  const LrSchedule s = schedule("wsd");  // decay_steps 0: the last 100 / 5 = 20 steps
  EXPECT_EQ(s.decay_start(), 80);
  EXPECT_DOUBLE_EQ(s.at(11), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(80), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(90), 1e-4 + 9e-4 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-4);
  const LrSchedule d = schedule("wsd", 100, 10, 40);
  EXPECT_EQ(d.decay_start(), 60);
  EXPECT_DOUBLE_EQ(d.at(60), 1e-3);
  EXPECT_DOUBLE_EQ(d.at(70), 1e-4 + 9e-4 * 0.75);
  // A run extended from 100 to 200 steps in its stable phase: the decay moves to the new end.
  const LrSchedule longer = schedule("wsd", 200, 10, 40);
  EXPECT_DOUBLE_EQ(longer.at(70), 1e-3);
  EXPECT_DOUBLE_EQ(longer.at(160), 1e-3);
  EXPECT_DOUBLE_EQ(longer.at(200), 1e-4);
}

TEST(LrSchedule, WsdDecayInsideTheWarmUpTakesTheLower) {
  const LrSchedule s = schedule("wsd", 20, 10, 15);  // the decay begins after step 5
  EXPECT_DOUBLE_EQ(s.at(4), 4e-4);                   // warming up, below the decay line
  EXPECT_DOUBLE_EQ(s.at(10), 1e-4 + 9e-4 * 10.0 / 15);
  EXPECT_DOUBLE_EQ(s.at(20), 1e-4);
}

}  // namespace
}  // namespace trellis
