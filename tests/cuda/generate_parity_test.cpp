// CUDA against CPU for the KV-cache ops (kv_cache_append, attention_with_cache) in f32, bf16 and
// f16, with grouped-query, multi-query and multi-head attention: the same seeded inputs on both backends. Skips itself when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/runtime.h"

namespace trellis {
namespace {

struct Case {
  DType dtype;
  float tol;
  int64_t hd;
  int64_t kv_heads = 2;  // of 4 query heads: grouped-query (2), multi-query (1), multi-head (4)
  int64_t window = 0;    // sliding window, 0 = none
};

// Host storage of random values in [-1, 1], as the dtype's bytes.
std::vector<unsigned char> random_bytes(DType d, int64_t n, uint32_t seed) {
  std::vector<unsigned char> b(size_t(n) * dtype_size(d));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(gen);
    if (d == DType::f32) reinterpret_cast<float*>(b.data())[i] = v;
    else if (d == DType::bf16) reinterpret_cast<bf16_t*>(b.data())[i] = to_bf16(v);
    else reinterpret_cast<f16_t*>(b.data())[i] = to_f16(v);
  }
  return b;
}

float get(DType d, const std::vector<unsigned char>& b, int64_t i) {
  if (d == DType::f32) return reinterpret_cast<const float*>(b.data())[i];
  if (d == DType::bf16) return to_float(reinterpret_cast<const bf16_t*>(b.data())[i]);
  return to_float(reinterpret_cast<const f16_t*>(b.data())[i]);
}

class GenerateParity : public ::testing::TestWithParam<Case> {};

TEST_P(GenerateParity, KvCacheOpsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case k = GetParam();
  const DType d = k.dtype;
  const int64_t B = 3, n = 5, H = 4, C = H * k.hd, Ckv = k.kv_heads * k.hd, W = C + 2 * Ckv, Tmax = 40, pos = 17;
  const AttentionHeads heads{int(H), int(k.kv_heads), k.window};
  auto qkv = random_bytes(d, B * n * W, 1), kc = random_bytes(d, B * Tmax * Ckv, 2),
       vc = random_bytes(d, B * Tmax * Ckv, 3);
  std::vector<unsigned char> out(size_t(B * n * C) * dtype_size(d));
  auto host = [&](std::vector<unsigned char>& v, Shape s) { return Tensor(v.data(), d, Device::CPU(), s); };
  // CPU reference on copies.
  Runtime cpu(RuntimeOptions{});
  auto ckc = kc, cvc = vc, cout = out;
  kv_cache_append(cpu, host(ckc, {B, Tmax, Ckv}), host(cvc, {B, Tmax, Ckv}), host(qkv, {B, n, W}), pos, heads);
  attention_with_cache(cpu, host(cout, {B, n, C}), host(qkv, {B, n, W}), host(ckc, {B, Tmax, Ckv}),
                       host(cvc, {B, Tmax, Ckv}), pos, heads);
  // GPU.
  RuntimeOptions go;
  go.device = Device::CUDA(0);
  Runtime gpu(go);
  auto dev = [&](std::vector<unsigned char>& v, Shape s, Buffer& buf) {
    buf = Buffer(gpu.allocator(), v.size(), "test");
    Tensor t = buf.tensor(d, s);
    copy(gpu, t, host(v, s));
    return t;
  };
  Buffer b1, b2, b3, b4;
  Tensor gqkv = dev(qkv, {B, n, W}, b1), gkc = dev(kc, {B, Tmax, Ckv}, b2), gvc = dev(vc, {B, Tmax, Ckv}, b3),
         gout = dev(out, {B, n, C}, b4);
  kv_cache_append(gpu, gkc, gvc, gqkv, pos, heads);
  attention_with_cache(gpu, gout, gqkv, gkc, gvc, pos, heads);
  copy(gpu, host(kc, {B, Tmax, Ckv}), gkc);
  copy(gpu, host(vc, {B, Tmax, Ckv}), gvc);
  copy(gpu, host(out, {B, n, C}), gout);
  gpu.synchronize();
  EXPECT_EQ(kc, ckc);
  EXPECT_EQ(vc, cvc);
  for (int64_t i = 0; i < B * n * C; ++i)
    ASSERT_NEAR(get(d, out, i), get(d, cout, i), k.tol) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GenerateParity,
                         ::testing::Values(Case{DType::f32, 1e-5f, 16}, Case{DType::f32, 1e-5f, 64, 1},
                                           Case{DType::f32, 1e-5f, 16, 4}, Case{DType::bf16, 2e-2f, 64},
                                           Case{DType::f16, 4e-3f, 128, 1}, Case{DType::f32, 1e-5f, 64, 2, 7},
                                           Case{DType::bf16, 2e-2f, 128, 2, 5}));

}  // namespace
}  // namespace trellis
