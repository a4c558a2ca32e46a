// ZeRO stage 1 bookkeeping: the slices of the padded flat buffer tile it exactly, and the
// model-state bytes per rank follow the formula (params + f32 grads in full, the rest over N).
#include <gtest/gtest.h>

#include "core/parameters.h"
#include "parallel/zero/optimizer.h"

namespace trellis {
namespace {

TEST(ZeroShard, SlicesTileThePaddedBuffer) {
  for (int64_t n : {1, 7, 8, 9, 1000, 1001}) {
    for (int ranks = 1; ranks <= 9; ++ranks) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const ShardRange s = shard_range(n, ranks, r);
        EXPECT_EQ(s.size, (n + ranks - 1) / ranks);
        EXPECT_EQ(s.begin, next) << n << " " << ranks << " " << r;
        EXPECT_LE(s.numel(), s.size);
        EXPECT_GE(s.numel(), 0);
        if (s.end < n) EXPECT_EQ(s.numel(), s.size);  // only the tail holds padding
        next = s.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(ZeroShard, ModelStateBytes) {
  const int64_t n = 1000;  // divides by 4 and 8
  // Stage 0 (or one data rank): params + 4 (grads) + 8 (m, v) + 4 (master, 16-bit only) per parameter.
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f32, 0, 4), n * (4 + 4 + 8));
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 0, 4), n * (2 + 4 + 12));
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 1, 1), n * (2 + 4 + 12));
  // Stage 1 over N: params and grads in full; m, v, master and the reduced gradient slice over N.
  for (int N : {2, 4, 8}) {
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f32, 1, N), n * (4 + 4) + n * (8 + 4) / N);
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 1, N), n * (2 + 4) + n * (12 + 4) / N);
  }
  // Padding: 1001 over 4 is held as 4 x 251.
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(1001, DType::f32, 1, 4), 1004 * 8 + 251 * 12);
}

TEST(ZeroShard, PaddedStoreAndStageZeroBytes) {
  Runtime rt(RuntimeOptions{});
  ParameterSpec w;
  w.name = "w";
  w.shape = {10, 7};
  ParameterStore padded(rt, {w}, DType::f32, 4);  // 70 elements held as 72, the tail zero
  padded.initialize(1);
  EXPECT_EQ(padded.numel(), 70);
  EXPECT_EQ(padded.padded_numel(), 72);
  EXPECT_EQ(padded.padded_values().ptr<float>()[70], 0.0f);
  EXPECT_EQ(padded.padded_values().ptr<float>()[71], 0.0f);
  ParameterStore store(rt, {w}, DType::f32);
  ZeroOptimizer opt(rt, store);
  EXPECT_FALSE(opt.sharded());
  EXPECT_EQ(store.padded_numel() * 8 + int64_t(opt.state_bytes()), ZeroOptimizer::model_state_bytes(70, DType::f32, 0, 4));
}

}  // namespace
}  // namespace trellis
