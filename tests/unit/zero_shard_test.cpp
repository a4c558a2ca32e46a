// ZeRO bookkeeping on one process: the store's buckets and their padding, the pieces each data
// rank owns, what stages 2 and 3 keep in the store, and the model-state bytes per rank.
#include <gtest/gtest.h>

#include <vector>

#include "core/parameters.h"
#include "parallel/zero/optimizer.h"

namespace trellis {
namespace {

// Two stand-alone parameters, then two blocks of two, then one more: buckets {a}, {b}, block 0,
// block 1, {c} (sizes 70, 5, 13 + 3, 13 + 3, 2).
std::vector<ParameterSpec> specs() {
  auto spec = [](const char* name, Shape shape, int bucket) {
    ParameterSpec s;
    s.name = name;
    s.shape = shape;
    s.bucket = bucket;
    s.decay = shape.rank == 2;
    return s;
  };
  return {spec("a", {10, 7}, -1), spec("b", {5}, -2),      spec("h.0.w", {13, 1}, 0), spec("h.0.b", {3}, 0),
          spec("h.1.w", {13, 1}, 1), spec("h.1.b", {3}, 1), spec("c", {2}, -3)};
}

TEST(ZeroShard, BucketsArePaddedToTheShardCount) {
  Runtime rt(RuntimeOptions{});
  for (int shards : {1, 2, 3, 4, 8}) {
    StoreSharding sh;
    sh.shards = shards;
    ParameterStore store(rt, specs(), DType::f32, sh);
    ASSERT_EQ(store.buckets().size(), 5u);
    int64_t offset = 0, numel = 0;
    const std::vector<int64_t> sizes = {70, 5, 16, 16, 2};
    for (size_t b = 0; b < 5; ++b) {
      const ParameterBucket& k = store.buckets()[b];
      EXPECT_EQ(k.offset, offset);
      EXPECT_EQ(k.numel, sizes[b]);
      // Sharded: to a multiple of shards x 64 (aligned pieces); one rank: no padding.
      const int64_t multiple = shards > 1 ? shards * 64 : 1;
      EXPECT_EQ(k.padded % multiple, 0);
      EXPECT_LT(k.padded - k.numel, multiple);
      EXPECT_EQ(k.piece % (shards > 1 ? 64 : 1), 0);
      EXPECT_EQ(k.piece * shards, k.padded);
      offset += k.padded;
      numel += k.numel;
    }
    EXPECT_EQ(store.buckets()[2].block, 0);
    EXPECT_EQ(store.buckets()[0].block, -1);
    EXPECT_EQ(store.padded_numel(), offset);
    EXPECT_EQ(store.numel(), numel);
    EXPECT_EQ(store.bucket_of_block(1), 3);
    // Parameters sit inside their bucket, in order.
    EXPECT_EQ(store.get("h.0.b").offset, store.buckets()[2].offset + 13);
  }
}

TEST(ZeroShard, PaddingIsZeroAndPiecesTileEachBucket) {
  Runtime rt(RuntimeOptions{});
  StoreSharding sh;
  sh.shards = 4;
  sh.shard = 2;
  ParameterStore store(rt, specs(), DType::f32, sh);
  store.initialize(7);
  const float* flat = store.flat_values().ptr<float>();
  for (const ParameterBucket& k : store.buckets())
    for (int64_t i = k.numel; i < k.padded; ++i) EXPECT_EQ(flat[k.offset + i], 0.0f);
  for (size_t b = 0; b < store.buckets().size(); ++b) {  // piece 2 of each bucket, in place
    const ParameterBucket& k = store.buckets()[b];
    EXPECT_EQ(store.owned_values(int(b)).ptr<float>(), flat + k.offset + 2 * k.piece);
  }
}

// Stage 3 keeps only this rank's piece of each block's values, drawn as the whole store draws them.
TEST(ZeroShard, StreamedStoreHoldsPiecesOfTheSameInitialValues) {
  Runtime rt(RuntimeOptions{});
  StoreSharding whole_sh;
  whole_sh.shards = 3;
  ParameterStore whole(rt, specs(), DType::f32, whole_sh);
  whole.initialize(11);
  for (int shard = 0; shard < 3; ++shard) {
    StoreSharding sh = whole_sh;
    sh.shard = shard;
    sh.stream_grads = sh.stream_values = true;
    ParameterStore part(rt, specs(), DType::f32, sh);
    part.initialize(11);
    for (size_t b = 0; b < part.buckets().size(); ++b) {
      const ParameterBucket& k = part.buckets()[b];
      EXPECT_EQ(k.values_streamed, k.block >= 0);
      EXPECT_EQ(k.grads_streamed, k.block >= 0);
      const Tensor mine = part.owned_values(int(b));
      const float* want = whole.flat_values().ptr<float>() + k.offset + shard * k.piece;
      for (int64_t i = 0; i < k.piece; ++i) EXPECT_EQ(mine.ptr<float>()[i], want[i]) << b << " " << i;
      EXPECT_EQ(part.bucket_values(int(b)).defined(), !k.values_streamed);
      EXPECT_EQ(part.bucket_grads(int(b)).defined(), !k.grads_streamed);
    }
    // Storage: the kept buckets whole (each padded to 3 x 64), the blocks' pieces; no block gradients.
    EXPECT_EQ(part.value_bytes(), size_t(3 * 192 + 2 * 64) * 4);
    EXPECT_EQ(part.grad_bytes(), size_t(3 * 192) * 4);
    // Binding a slot points the block's parameters into it.
    std::vector<float> slot(192, 0.0f);
    const int b = part.bucket_of_block(1);
    part.bind_values(b, Tensor(slot.data(), DType::f32, Device::CPU(), {192}));
    EXPECT_EQ(part.get("h.1.b").value.ptr<float>(), slot.data() + 13);
    part.bind_values(b, Tensor());
    EXPECT_FALSE(part.get("h.1.b").value.defined());
  }
}

// Expert parallelism: a block's experts are a bucket of their own (the block's id), cut over the
// expert-data group (2 ranks here) while the others are cut over the data group (8), and streamed
// like the block's; with one rank in that group they are kept whole.
TEST(ZeroShard, ExpertBucketsAreCutOverTheExpertDataGroup) {
  Runtime rt(RuntimeOptions{});
  std::vector<ParameterSpec> s = specs();
  ParameterSpec expert;
  expert.name = "h.0.moe.experts.1.fc.w";
  expert.shape = {40, 3};
  expert.bucket = 0;
  expert.expert = true;
  s.insert(s.begin() + 4, expert);  // after block 0's other parameters
  StoreSharding sh;
  sh.shards = 8;
  sh.shard = 5;
  sh.expert_shards = 2;
  sh.expert_shard = 1;
  sh.stream_grads = sh.stream_values = true;
  ParameterStore store(rt, s, DType::f32, sh);
  ASSERT_EQ(store.buckets().size(), 6u);
  const ParameterBucket& k = store.buckets()[3];
  EXPECT_TRUE(k.expert);
  EXPECT_EQ(k.block, 0);
  EXPECT_EQ(store.bucket_of_block(0), 2);
  EXPECT_EQ(store.experts_bucket_of_block(0), 3);
  EXPECT_EQ(store.experts_bucket_of_block(1), -1);
  EXPECT_EQ(k.numel, 120);
  EXPECT_EQ(k.padded, 128);  // a multiple of 2 x 64
  EXPECT_EQ(k.piece, 64);
  EXPECT_TRUE(k.values_streamed && k.grads_streamed);
  EXPECT_FALSE(store.bucket_values(3).defined());  // this rank keeps its piece only
  EXPECT_EQ(store.shard_of(3), 1);
  EXPECT_EQ(store.shard_of(2), 5);
  EXPECT_EQ(store.buckets()[2].piece * 8, store.buckets()[2].padded);
  EXPECT_EQ(store.value_bytes(), size_t(3 * 512 + 3 * 64) * 4);  // a, b, c whole; pieces of the blocks and experts
  // The plan alone (what resharding rebuilds) is the store's.
  const std::vector<ParameterBucket> plan = plan_buckets(s, 8, 2);
  ASSERT_EQ(plan.size(), 6u);
  EXPECT_EQ(plan[3].piece, 64);
  EXPECT_EQ(plan[4].offset, store.buckets()[4].offset);
  // One rank per expert-data group (data = expert): nothing to shard, kept whole.
  sh.expert_shards = 1;
  sh.expert_shard = 0;
  ParameterStore whole(rt, s, DType::f32, sh);
  const ParameterBucket& w = whole.buckets()[3];
  EXPECT_EQ(w.piece, 120);
  EXPECT_FALSE(w.values_streamed || w.grads_streamed);
  EXPECT_TRUE(whole.buckets()[2].values_streamed);
  EXPECT_EQ(whole.owned_values(3).ptr<float>(), whole.bucket_values(3).ptr<float>());
  // A block's experts and its other parameters are each one run.
  std::swap(s[3], s[4]);  // h.0.w, the experts, h.0.b
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(plan_buckets(s, 8, 2), "block 0's parameters are not contiguous");
}

TEST(ZeroShard, ModelStateBytes) {
  const int64_t n = 1000;  // divides by 2, 4 and 8
  // Stage 0 (or one data rank): params + 4 (grads) + 8 (m, v) + the master's separate bytes (f16:
  // 4; bf16: the 2 low bytes of a split master, the parameter being the high ones) per parameter.
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f32, 0, 4), n * (4 + 4 + 8));
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 0, 4), n * (2 + 4 + 10));
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f16, 0, 4), n * (2 + 4 + 12));
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 1, 1), n * (2 + 4 + 10));
  for (int N : {2, 4, 8}) {
    // Stage 1: params and grads in full; m, v, master and the reduced gradient pieces over N.
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 1, N), n * (2 + 4) + n * (10 + 4) / N);
    // Stage 2: the gradients only as pieces; stage 3: the parameters too (2 + 14 = 16 bytes / N).
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 2, N), n * 2 + n * (10 + 4) / N);
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 3, N), n * 16 / N);
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f16, 3, N), n * 18 / N);
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::f32, 3, N), n * 16 / N);
  }
  // 400 of the n are experts, over an expert-data group of 2: sharded (and streamed) over 2 as the
  // other 600 are over 8; over a group of 1, kept whole with their reduced piece (the whole) and state.
  for (int stage : {1, 2, 3}) {
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, stage, 8, false, DType::f32, 400, 2),
              ZeroOptimizer::model_state_bytes(600, DType::bf16, stage, 8) +
                  ZeroOptimizer::model_state_bytes(400, DType::bf16, stage, 2));
    EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, stage, 8, false, DType::f32, 400, 1),
              ZeroOptimizer::model_state_bytes(600, DType::bf16, stage, 8) + 400 * (2 + 4 + 4 + 10));
  }
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 3, 8, false, DType::f32, 400, 2),
            600 * 16 / 8 + 400 * 16 / 2);
  EXPECT_EQ(ZeroOptimizer::model_state_bytes(n, DType::bf16, 0, 8, false, DType::bf16, 400, 2),
            ZeroOptimizer::model_state_bytes(n, DType::bf16, 0, 8, false, DType::bf16));
}

// bf16 parameters keep split masters: they start equal to the parameters, and setting them sets
// the parameters to their high halves.
TEST(ZeroShard, SplitMastersOfBf16Parameters) {
  Runtime rt(RuntimeOptions{});
  ParameterStore store(rt, specs(), DType::bf16);
  const int64_t n = store.numel();
  std::vector<bf16_t> init(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) init[size_t(i)] = to_bf16(0.01f * float(i % 97) - 0.3f);
  copy(rt, store.flat_values().slice(0, {n}), Tensor(init.data(), DType::bf16, Device::CPU(), {n}));
  ZeroOptimizer opt(rt, store);
  EXPECT_TRUE(opt.has_separate_master());
  EXPECT_EQ(int64_t(store.value_bytes() + store.grad_bytes() + opt.state_bytes()),
            ZeroOptimizer::model_state_bytes(n, DType::bf16, 0, 4));
  std::vector<char> host;
  const Tensor master = opt.master_values(host);
  ASSERT_EQ(master.numel(), opt.owned_numel());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(master.ptr<float>()[i], to_float(init[size_t(i)])) << i;
  std::vector<float> w(size_t(opt.owned_numel()));
  for (size_t i = 0; i < w.size(); ++i) w[i] = bits_to_f32(0x3c000000u + uint32_t(i) * 0x1235u);
  opt.set_master(Tensor(w.data(), DType::f32, Device::CPU(), {int64_t(w.size())}));
  std::vector<char> again;
  const Tensor back = opt.master_values(again);
  const bf16_t* values = store.flat_values().ptr<bf16_t>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f32_to_bits(back.ptr<float>()[i]), f32_to_bits(w[size_t(i)])) << i;
    ASSERT_EQ(values[i].bits, uint16_t((f32_to_bits(w[size_t(i)]) + 0x8000u) >> 16)) << i;
  }
  // New parameters (a weight import) bring their master weights with them.
  opt.set_values(Tensor(init.data(), DType::bf16, Device::CPU(), {n}));
  std::vector<char> reset;
  const Tensor fresh = opt.master_values(reset);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fresh.ptr<float>()[i], to_float(init[size_t(i)])) << i;
}

TEST(ZeroShard, UnshardedOptimizerBytesMatchTheFormula) {
  Runtime rt(RuntimeOptions{});
  ParameterStore store(rt, specs(), DType::f32);
  ZeroOptimizer opt(rt, store);
  EXPECT_FALSE(opt.sharded());
  EXPECT_EQ(opt.owned_numel(), store.numel());
  EXPECT_EQ(int64_t(store.value_bytes() + store.grad_bytes() + opt.state_bytes()),
            ZeroOptimizer::model_state_bytes(store.numel(), DType::f32, 0, 4));
}

}  // namespace
}  // namespace trellis
