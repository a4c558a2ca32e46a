// CUDA against CPU for the ops of a vocabulary-parallel embedding and cross-entropy, in f32, bf16
// and f16: the (N, Vp) logits and the (Vp, C) token table split by vocabulary over t "ranks" in one
// process, the all-reduces between the passes done on the host. Shard widths cover the vectorized
// kernels (a multiple of 16 bytes per row), the scalar ones (30 columns), shards with padding and
// shards of padding only. Every test skips itself when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "tests/cuda/parity_support.h"

namespace trellis {
namespace {

using namespace parity;

// Columns [c0, c0 + cols) of a (rows, full_cols) tensor, as a contiguous (rows, cols) tensor.
HostTensor column_block(const HostTensor& full, int64_t rows, int64_t full_cols, int64_t c0, int64_t cols) {
  HostTensor s(full.t.dtype, {rows, cols});
  const size_t e = dtype_size(full.t.dtype);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(s.bytes.data() + size_t(r * cols) * e, full.bytes.data() + size_t(r * full_cols + c0) * e,
                size_t(cols) * e);
  return s;
}

class VocabParallelParity : public CpuGpuParity {};

struct XentCase {
  int64_t N, Vp, V;
  int t;
};
// cols = Vp / t: 128 and 64 (vectorized for every dtype), 30 (scalar kernels), 25152 (GPT-2's
// padded vocabulary over 2 ranks: several unrolled iterations per thread).
const XentCase kXentCases[] = {{37, 256, 200, 2}, {37, 256, 100, 4}, {23, 90, 83, 3}, {5, 50304, 50257, 2}};

// Targets: row 0 none; then the first and last real column of every shard that has one; the rest
// random (and every 7th row none).
HostTensor make_targets(const XentCase& k, uint32_t seed) {
  const int64_t cols = k.Vp / k.t;
  std::vector<int32_t> tg{-1};
  for (int r = 0; r < k.t; ++r) {
    const int64_t b = r * cols, e = std::min(k.V, b + cols);
    if (b >= e) continue;
    tg.push_back(int32_t(b));
    tg.push_back(int32_t(e - 1));
  }
  std::mt19937 gen(seed);
  while (int64_t(tg.size()) < k.N) tg.push_back(tg.size() % 7 == 0 ? -1 : int32_t(gen() % uint32_t(k.V)));
  tg.resize(size_t(k.N));
  HostTensor h(DType::i32, {k.N});
  for (int64_t i = 0; i < k.N; ++i) h.t.ptr<int32_t>()[i] = tg[size_t(i)];
  return h;
}

std::string xent_tag(const XentCase& k) {
  return " N " + std::to_string(k.N) + " Vp " + std::to_string(k.Vp) + " V " + std::to_string(k.V) + " t " +
         std::to_string(k.t);
}

// Each pass on each shard, GPU against CPU, both fed the same (CPU-combined) global statistics.
TEST_P(VocabParallelParity, CrossEntropyPassesMatchCpu) {
  for (const XentCase& k : kXentCases) {
    const std::string tag = xent_tag(k);
    const int64_t N = k.N, cols = k.Vp / k.t;
    HostTensor logits = random_host(dt(), {N, k.Vp}, 200, -4.0f, 4.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = k.V; c < k.Vp; ++c) logits.set(i * k.Vp + c, 100.0f);  // padding must not count
    HostTensor targets = make_targets(k, 201);
    DeviceTensor gtargets = to_device(targets);
    std::vector<HostTensor> shards;
    for (int r = 0; r < k.t; ++r) shards.push_back(column_block(logits, N, k.Vp, r * cols, cols));

    HostTensor gmax(DType::f32, {N});
    for (int64_t i = 0; i < N; ++i) gmax.set(i, -INFINITY);
    for (int r = 0; r < k.t; ++r) {
      const std::string rt = tag + " shard " + std::to_string(r);
      HostTensor m(DType::f32, {N});
      DeviceTensor gx = to_device(shards[size_t(r)]), gm = device_poisoned(DType::f32, {N});
      vocab_parallel_xent_max(cpu(), m.t, shards[size_t(r)].t, k.V, r * cols);
      vocab_parallel_xent_max(gpu(), gm.t, gx.t, k.V, r * cols);
      expect_bitwise(to_host(gm), m, "vocab_parallel_xent_max" + rt);
      for (int64_t i = 0; i < N; ++i) gmax.set(i, std::max(gmax.get(i), m.get(i)));
    }
    DeviceTensor ggmax = to_device(gmax);

    HostTensor gstats(DType::f32, {2 * N});  // [sum | target logit], summed over the shards
    std::memset(gstats.bytes.data(), 0, gstats.bytes.size());
    for (int r = 0; r < k.t; ++r) {
      const std::string rt = tag + " shard " + std::to_string(r);
      HostTensor st(DType::f32, {2 * N});
      DeviceTensor gx = to_device(shards[size_t(r)]), gst = device_poisoned(DType::f32, {2 * N});
      vocab_parallel_xent_sum_exp(cpu(), st.t.slice(0, {N}), st.t.slice(N, {N}), shards[size_t(r)].t, targets.t,
                                  gmax.t, k.V, r * cols);
      vocab_parallel_xent_sum_exp(gpu(), gst.t.slice(0, {N}), gst.t.slice(N, {N}), gx.t, gtargets.t, ggmax.t, k.V,
                                  r * cols);
      HostTensor hst = to_host(gst);
      HostTensor sum_cpu(DType::f32, {N}), sum_gpu(DType::f32, {N}), xt_cpu(DType::f32, {N}), xt_gpu(DType::f32, {N});
      std::memcpy(sum_cpu.bytes.data(), st.bytes.data(), size_t(N) * 4);
      std::memcpy(sum_gpu.bytes.data(), hst.bytes.data(), size_t(N) * 4);
      std::memcpy(xt_cpu.bytes.data(), st.bytes.data() + size_t(N) * 4, size_t(N) * 4);
      std::memcpy(xt_gpu.bytes.data(), hst.bytes.data() + size_t(N) * 4, size_t(N) * 4);
      expect_close(sum_gpu, sum_cpu, tolerance(DType::f32), "vocab_parallel_xent_sum_exp row_sum" + rt);
      expect_bitwise(xt_gpu, xt_cpu, "vocab_parallel_xent_sum_exp target_logit" + rt);
      for (int64_t i = 0; i < 2 * N; ++i) gstats.set(i, gstats.get(i) + st.get(i));
    }
    DeviceTensor ggstats = to_device(gstats);
    const Tensor hsum = gstats.t.slice(0, {N}), hxt = gstats.t.slice(N, {N});
    const Tensor dsum = ggstats.t.slice(0, {N}), dxt = ggstats.t.slice(N, {N});

    const float dloss = 1.0f / float(N);
    for (int r = 0; r < k.t; ++r) {
      const std::string rt = tag + " shard " + std::to_string(r);
      HostTensor losses(DType::f32, {N}), d(dt(), {N, cols});
      vocab_parallel_xent_loss_and_grad(cpu(), losses.t, d.t, shards[size_t(r)].t, targets.t, gmax.t, hsum, hxt, k.V,
                                        r * cols, dloss);
      DeviceTensor gx = to_device(shards[size_t(r)]), gd = device_poisoned(dt(), {N, cols});
      DeviceTensor gl = device_poisoned(DType::f32, {N}), gl_only = device_poisoned(DType::f32, {N});
      vocab_parallel_xent_loss_and_grad(gpu(), gl.t, gd.t, gx.t, gtargets.t, ggmax.t, dsum, dxt, k.V, r * cols, dloss);
      HostTensor hl = to_host(gl), hd = to_host(gd);
      expect_close(hl, losses, tolerance(DType::f32), "vocab_parallel_xent_loss_and_grad losses" + rt);
      expect_close(hd, d, tolerance(dt()), "vocab_parallel_xent_loss_and_grad dlogits" + rt);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < cols; ++c)
          if (r * cols + c >= k.V || targets.t.ptr<int32_t>()[i] < 0) {
            ASSERT_EQ(hd.get(i * cols + c), 0.0f) << "padded column or row without a target " << i << "," << c << rt;
          }
      // Losses only (no dlogits): the same bits.
      vocab_parallel_xent_loss_and_grad(gpu(), gl_only.t, Tensor(), gx.t, gtargets.t, ggmax.t, dsum, dxt, k.V,
                                        r * cols, dloss);
      expect_bitwise(to_host(gl_only), hl, "losses without dlogits" + rt);
      // In place: dlogits aliasing logits gives the same bits.
      vocab_parallel_xent_loss_and_grad(gpu(), gl.t, gx.t, gx.t, gtargets.t, ggmax.t, dsum, dxt, k.V, r * cols, dloss);
      expect_bitwise(to_host(gx), hd, "dlogits in place" + rt);
    }
  }
}

// The whole sharded cross-entropy on the GPU (statistics combined on the host from the GPU's own
// partials) against the CPU's unsplit softmax_cross_entropy_backward.
TEST_P(VocabParallelParity, ShardedCrossEntropyMatchesFullCpu) {
  for (const XentCase& k : kXentCases) {
    const std::string tag = xent_tag(k);
    const int64_t N = k.N, cols = k.Vp / k.t;
    HostTensor logits = random_host(dt(), {N, k.Vp}, 210, -4.0f, 4.0f);
    HostTensor targets = make_targets(k, 211);
    DeviceTensor gtargets = to_device(targets);
    const float dloss = 1.0f / float(N);
    HostTensor ref_losses(DType::f32, {N}), ref_d(dt(), {N, k.Vp});
    softmax_cross_entropy_backward(cpu(), ref_d.t, ref_losses.t, logits.t, targets.t, k.V, dloss);

    std::vector<DeviceTensor> gx;
    for (int r = 0; r < k.t; ++r) gx.push_back(to_device(column_block(logits, N, k.Vp, r * cols, cols)));
    HostTensor gmax(DType::f32, {N});
    for (int64_t i = 0; i < N; ++i) gmax.set(i, -INFINITY);
    for (int r = 0; r < k.t; ++r) {  // all-reduce MAX
      DeviceTensor gm = device_poisoned(DType::f32, {N});
      vocab_parallel_xent_max(gpu(), gm.t, gx[size_t(r)].t, k.V, r * cols);
      HostTensor m = to_host(gm);
      for (int64_t i = 0; i < N; ++i) gmax.set(i, std::max(gmax.get(i), m.get(i)));
    }
    DeviceTensor ggmax = to_device(gmax);
    HostTensor gstats(DType::f32, {2 * N});
    std::memset(gstats.bytes.data(), 0, gstats.bytes.size());
    for (int r = 0; r < k.t; ++r) {  // all-reduce SUM of [sum | target logit]
      DeviceTensor gst = device_poisoned(DType::f32, {2 * N});
      vocab_parallel_xent_sum_exp(gpu(), gst.t.slice(0, {N}), gst.t.slice(N, {N}), gx[size_t(r)].t, gtargets.t,
                                  ggmax.t, k.V, r * cols);
      HostTensor st = to_host(gst);
      for (int64_t i = 0; i < 2 * N; ++i) gstats.set(i, gstats.get(i) + st.get(i));
    }
    DeviceTensor ggstats = to_device(gstats);
    HostTensor got_d(dt(), {N, k.Vp});
    HostTensor first_losses(DType::f32, {N});
    for (int r = 0; r < k.t; ++r) {  // in place, as the model's head runs it
      DeviceTensor gl = device_poisoned(DType::f32, {N});
      vocab_parallel_xent_loss_and_grad(gpu(), gl.t, gx[size_t(r)].t, gx[size_t(r)].t, gtargets.t, ggmax.t,
                                        ggstats.t.slice(0, {N}), ggstats.t.slice(N, {N}), k.V, r * cols, dloss);
      HostTensor hl = to_host(gl), hd = to_host(gx[size_t(r)]);
      if (r == 0) first_losses = hl;
      else expect_bitwise(hl, first_losses, "every shard computes the same losses" + tag);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < cols; ++c) got_d.set(i * k.Vp + r * cols + c, hd.get(i * cols + c));
    }
    expect_close(first_losses, ref_losses, tolerance(DType::f16), "sharded losses vs full" + tag);
    expect_close(got_d, ref_d, tolerance(dt()), "sharded dlogits vs full" + tag);
  }
}

TEST_P(VocabParallelParity, EmbeddingShardsMatchCpu) {
  const int64_t B = 3, T = 20, Vp = 64, C = 40, P = T + 4;
  HostTensor tokens(DType::i32, {B, T});
  std::mt19937 gen(220);
  for (int64_t i = 0; i < B * T; ++i) tokens.t.ptr<int32_t>()[i] = int32_t(gen() % 24) * 3 % int32_t(Vp);
  tokens.t.ptr<int32_t>()[5] = int32_t(Vp - 1);
  HostTensor wte = random_host(dt(), {Vp, C}, 221), wpe = random_host(dt(), {P, C}, 222);
  HostTensor dout = random_host(dt(), {B, T, C}, 223);
  DeviceTensor gtok = to_device(tokens), gwpe = to_device(wpe), gdout = to_device(dout);
  for (int t : {2, 4}) {
    const int64_t rows = Vp / t;
    for (int r = 0; r < t; ++r) {
      const std::string tag = " t " + std::to_string(t) + " shard " + std::to_string(r);
      HostTensor shard = column_block(wte, 1, Vp * C, r * rows * C, rows * C);
      shard.t = shard.t.view({rows, C});
      DeviceTensor gshard = to_device(shard);
      // Forward without positions, and with them.
      for (int with_pos = 0; with_pos < 2; ++with_pos) {
        HostTensor out(dt(), {B, T, C});
        DeviceTensor gout = device_poisoned(dt(), {B, T, C});
        embedding_forward(cpu(), out.t, tokens.t, shard.t, with_pos ? wpe.t : Tensor(), r * rows, Vp);
        embedding_forward(gpu(), gout.t, gtok.t, gshard.t, with_pos ? gwpe.t : Tensor(), r * rows, Vp);
        expect_close(to_host(gout), out, tolerance(dt()), "embedding_forward" + tag + (with_pos ? " + wpe" : ""));
      }
      // Backward into the shard's dwte only; twice (determinism).
      HostTensor dwte0 = random_host(DType::f32, {rows, C}, 224 + uint32_t(r)), dwte = dwte0;
      embedding_backward(cpu(), dwte.t, Tensor(), dout.t, tokens.t, r * rows, Vp);
      HostTensor run0(DType::f32, {1}), run1(DType::f32, {1});
      for (int k = 0; k < 2; ++k) {
        DeviceTensor g = to_device(dwte0);
        embedding_backward(gpu(), g.t, Tensor(), gdout.t, gtok.t, r * rows, Vp);
        (k == 0 ? run0 : run1) = to_host(g);
      }
      expect_close(run0, dwte, tolerance(DType::f32), "embedding_backward dwte shard" + tag);
      expect_bitwise(run0, run1, "embedding_backward dwte shard determinism" + tag);
    }
  }
  // dwpe alone (no dwte): the position gradient of the full op.
  HostTensor dwpe0 = random_host(DType::f32, {P, C}, 230), dwpe = dwpe0;
  embedding_backward(cpu(), Tensor(), dwpe.t, dout.t, tokens.t);
  DeviceTensor gdwpe = to_device(dwpe0);
  embedding_backward(gpu(), Tensor(), gdwpe.t, gdout.t, gtok.t);
  expect_close(to_host(gdwpe), dwpe, tolerance(DType::f32), "embedding_backward dwpe alone");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, VocabParallelParity, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace trellis
