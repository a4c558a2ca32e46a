// LossScaler: the dynamic fp16 loss scale of the key docs (fp16.*): it halves at the hysteresis-th
// overflow since it last changed, doubles after a window of clean steps, and never drops below
// the minimum, also at the start.
#include <gtest/gtest.h>

#include "parallel/zero/loss_scaler.h"

using namespace trellis;

namespace {
LossScalerConfig config(double initial, int64_t window, int64_t hysteresis, double min_scale) {
  LossScalerConfig c;
  c.enabled = true;
  c.initial_scale = initial;
  c.window = window;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  return c;
}
}  // namespace

TEST(LossScaler, HalvesAtTheHysteresisThOverflowAndDoublesAfterTheWindow) {
  LossScaler s(config(1024, 3, 2, 1));
  EXPECT_FALSE(s.update(true));  // skipped, the first of two tolerated
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_FALSE(s.update(true));  // the second: halved
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));  // the third clean step in a row: doubled
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(LossScaler, NeverBelowTheMinimumFromTheStart) {
  LossScaler low_start(config(1, 1000, 1, 1024));
  EXPECT_EQ(low_start.scale(), 1024.0f);
  EXPECT_TRUE(low_start.at_minimum());
  LossScaler s(config(4096, 1000, 1, 1024));
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(LossScaler, DisabledKeepsScaleOne) {
  LossScalerConfig c = config(65536, 1, 1, 1);
  c.enabled = false;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0f);
}
