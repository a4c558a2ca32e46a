// CUDA against CPU, op by op, for f32, bf16 and f16: the same seeded inputs on both backends,
// results compared with a tolerance per dtype (dropout masks exactly); determinism of the GPU's
// embedding, layer-norm and attention backward (two runs bitwise equal); the caching allocator's statistics.
// Attention tolerances: out 2x and dqkv 4x the dtype's (bf16 2e-2 / 4e-2, f16 4e-3 / 8e-3, relative
// and absolute against max(1, max|cpu|)); lse as f16's 2e-3 (f32: 1e-4); the fused kernels round P
// and dS to the input dtype before their tensor-core products, as FlashAttention does.
// The GEMM with GELU fused uses 2x (16-bit) or 10x (f32) the dtype's tolerance for its GELU output;
// a runtime that tunes its GEMM algorithms must write every output once.
// Every test skips itself when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "core/alloc.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "tests/cuda/parity_support.h"
#if TRELLIS_HAVE_CUDNN
#include "core/cuda/cudnn_attention.h"
#endif

namespace trellis {
namespace {

using namespace parity;

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

class Parity : public CpuGpuParity {};

TEST_P(Parity, FillCastAddAccumulateScale) {
  Shape s{7, 129};
  HostTensor a = random_host(dt(), s, 1), b = random_host(dt(), s, 2);
  DeviceTensor ga = to_device(a), gb = to_device(b);

  HostTensor f(dt(), s);
  DeviceTensor gf = device_empty(dt(), s);
  fill(cpu(), f.t, 0.375f);
  fill(gpu(), gf.t, 0.375f);
  expect_bitwise(to_host(gf), f, "fill");

  for (DType to : kFloatTypes) {
    HostTensor c(to, s);
    DeviceTensor gc = device_empty(to, s);
    cast(cpu(), c.t, a.t);
    cast(gpu(), gc.t, ga.t);
    expect_close(to_host(gc), c, tolerance(to), "cast to " + std::string(dtype_name(to)));
  }

  HostTensor sum(dt(), s);
  DeviceTensor gsum = device_empty(dt(), s);
  add(cpu(), sum.t, a.t, b.t);
  add(gpu(), gsum.t, ga.t, gb.t);
  expect_close(to_host(gsum), sum, tolerance(dt()), "add");

  // accumulate into f32 (gradient buffers) and into the tensor's own dtype
  HostTensor acc32 = random_host(DType::f32, s, 3);
  DeviceTensor gacc32 = to_device(acc32);
  accumulate(cpu(), acc32.t, a.t);
  accumulate(gpu(), gacc32.t, ga.t);
  expect_close(to_host(gacc32), acc32, tolerance(DType::f32), "accumulate into f32");
  HostTensor accd = b;
  DeviceTensor gaccd = to_device(b);
  accumulate(cpu(), accd.t, a.t);
  accumulate(gpu(), gaccd.t, ga.t);
  expect_close(to_host(gaccd), accd, tolerance(dt()), "accumulate");

  HostTensor sc = a;
  DeviceTensor gsc = to_device(a);
  scale(cpu(), sc.t, -1.75f);
  scale(gpu(), gsc.t, -1.75f);
  expect_close(to_host(gsc), sc, tolerance(dt()), "scale");
}

TEST_P(Parity, CopyRoundTrip) {
  HostTensor a = random_host(dt(), {1000}, 4);
  DeviceTensor ga = to_device(a);
  DeviceTensor gb = device_empty(dt(), {1000});
  copy(gpu(), gb.t, ga.t);
  expect_bitwise(to_host(gb), a, "host -> device -> device -> host");
}

TEST_P(Parity, Gelu) {
  Shape s{16, 250};
  HostTensor x = random_host(dt(), s, 5, -4.0f, 4.0f), dy = random_host(dt(), s, 6);
  DeviceTensor gx = to_device(x), gdy = to_device(dy);
  HostTensor y(dt(), s), dx(dt(), s);
  DeviceTensor gy = device_empty(dt(), s), gdx = device_empty(dt(), s);
  gelu_forward(cpu(), y.t, x.t);
  gelu_forward(gpu(), gy.t, gx.t);
  expect_close(to_host(gy), y, tolerance(dt()), "gelu_forward");
  gelu_backward(cpu(), dx.t, dy.t, x.t);
  gelu_backward(gpu(), gdx.t, gdy.t, gx.t);
  expect_close(to_host(gdx), dx, tolerance(dt()), "gelu_backward");
}

// SwiGLU forward and backward at a width the kernel loads in vectors (F = 64) and one it does not (F = 13).
TEST_P(Parity, Swiglu) {
  for (int64_t F : {64, 13}) {
    SCOPED_TRACE("F " + std::to_string(F));
    HostTensor h = random_host(dt(), {3, 37, 2 * F}, 21, -4.0f, 4.0f), dg = random_host(dt(), {3, 37, F}, 22);
    HostTensor g(dt(), {3, 37, F}), dh(dt(), {3, 37, 2 * F});
    DeviceTensor gh = to_device(h), gdg = to_device(dg), gg = device_empty(dt(), {3, 37, F}),
                 gdh = device_empty(dt(), {3, 37, 2 * F});
    swiglu_forward(cpu(), g.t, h.t);
    swiglu_forward(gpu(), gg.t, gh.t);
    expect_close(to_host(gg), g, tolerance(dt()), "swiglu_forward");
    swiglu_backward(cpu(), dh.t, dg.t, h.t);
    swiglu_backward(gpu(), gdh.t, gdg.t, gh.t);
    expect_close(to_host(gdh), dh, tolerance(dt()), "swiglu_backward");
    swiglu_backward(gpu(), gh.t, gdg.t, gh.t);  // in place, as the experts run it: the same bits
    EXPECT_EQ(to_host(gh).bytes, to_host(gdh).bytes);
  }
}

// The shared MLP's sigmoid gate on rows (Qwen2-MoE's): the gated rows, dx, and dz (an f32 row dot,
// summed in another order), at widths of the vector and the scalar path; in place, the same bits.
TEST_P(Parity, SigmoidGateRows) {
  for (int64_t F : {64, 13}) {
    SCOPED_TRACE("F " + std::to_string(F));
    HostTensor x = random_host(dt(), {111, F}, 23), dout = random_host(dt(), {111, F}, 24),
               z = random_host(DType::f32, {111, 1}, 25, -4.0f, 4.0f);
    HostTensor out(dt(), {111, F}), dx(dt(), {111, F}), dz(DType::f32, {111, 1});
    DeviceTensor gx = to_device(x), gdout = to_device(dout), gz = to_device(z), gout = device_empty(dt(), {111, F}),
                 gdx = device_empty(dt(), {111, F}), gdz = device_empty(DType::f32, {111, 1});
    sigmoid_gate_rows(cpu(), out.t, x.t, z.t);
    sigmoid_gate_rows(gpu(), gout.t, gx.t, gz.t);
    expect_close(to_host(gout), out, tolerance(dt()), "sigmoid_gate_rows");
    sigmoid_gate_rows_backward(cpu(), dx.t, dz.t, dout.t, x.t, z.t);
    sigmoid_gate_rows_backward(gpu(), gdx.t, gdz.t, gdout.t, gx.t, gz.t);
    expect_close(to_host(gdx), dx, tolerance(dt()), "sigmoid_gate_rows_backward dx");
    expect_close(to_host(gdz), dz, tolerance(DType::f32), "sigmoid_gate_rows_backward dz");
    sigmoid_gate_rows(gpu(), gx.t, gx.t, gz.t);
    EXPECT_EQ(to_host(gx).bytes, to_host(gout).bytes);
    sigmoid_gate_rows_backward(gpu(), gdout.t, gdz.t, gdout.t, gout.t, gz.t);
    EXPECT_EQ(to_host(gdout).bytes, to_host(gdx).bytes);
  }
}

// Rotary positions forward and inverse, at head sizes of 128, 12 and 6 (the kernel's 4-, 2- and
// 1-pair loads) and a position offset (generation's cached case), plain and with Llama 3.2's scaling
// (at head size 128 its frequencies fall in all three bands), linear and YaRN's (with its amplitude), and
// partial (4 and, with YaRN, 2 of each head's dims turned), and LongRoPE's (a factor a pair, with its
// amplitude): the cosines and sines are the same double computation on both backends.
TEST_P(Parity, RotaryEmbedding) {
  RotaryFrequencies llama32(500000.0), linear(10000.0), yarn(1000000.0);
  llama32.factor = 32;
  linear.factor = 4;  // position interpolation
  linear.linear = true;
  yarn.yarn = true;  // Qwen3's 131072-token setting: factor 4 over 32768, q and k scaled
  yarn.factor = 4;
  yarn.original_positions = 32768;
  yarn.attention_factor = yarn_attention_factor(4);
  RotaryFrequencies partial(10000.0), partial_yarn = yarn;  // partial rotary: the first dims of a head turn
  partial.dims = 4;
  partial_yarn.dims = 2;
  RotaryFrequencies longrope(10000.0);  // Phi-3's: a factor a pair, q and k scaled
  longrope.longrope = true;
  longrope.attention_factor = longrope_attention_factor(32, 4096);
  for (int i = 0; i < kMaxRotaryPairs; ++i) longrope.pair_factors[i] = 1.0 + 0.37 * i;
  for (const RotaryFrequencies& freqs : {RotaryFrequencies(10000.0), llama32, linear, yarn, partial, partial_yarn, longrope})
  for (int64_t hd : {128, 12, 6})
  for (int64_t first : {int64_t(0), int64_t(1000)})
  for (int kv : {2, 1}) {  // 2 heads, and grouped-query with one key-value head
    SCOPED_TRACE("head size " + std::to_string(hd) + ", " + std::to_string(kv) + " key-value heads, scaling factor " +
                 std::to_string(freqs.factor));
    Shape s{3, 37, (2 + 2 * kv) * hd};
    HostTensor x = random_host(dt(), s, 9, -2.0f, 2.0f);
    DeviceTensor gx = to_device(x);
    for (bool inverse : {false, true}) {
      rotary_embedding(cpu(), x.t, AttentionHeads{2, kv}, freqs, first, inverse);
      rotary_embedding(gpu(), gx.t, AttentionHeads{2, kv}, freqs, first, inverse);
      expect_close(to_host(gx), x, tolerance(dt()),
                   std::string("rotary_embedding") + (inverse ? " inverse" : "") + " from " + std::to_string(first));
    }
  }
}

TEST_P(Parity, DropoutMasksMatchExactly) {
  Shape s{6, 40};
  HostTensor x = random_host(dt(), s, 7, 0.5f, 1.5f);  // no zeros: a zero output means "dropped"
  DeviceTensor gx = to_device(x);
  DropoutKey plain{1234, 99};
  DropoutKey shard{77, 5};
  shard.global_cols = 100;
  shard.col_offset = 7;
  shard.seq_local = 3;
  shard.seq_global = 8;
  shard.seq_offset = 2;
  for (const DropoutKey& key : {plain, shard}) {
    HostTensor y(dt(), s), dxh(dt(), s);
    DeviceTensor gy = device_empty(dt(), s), gdx = device_empty(dt(), s);
    dropout_forward(cpu(), y.t, x.t, 0.3f, key);
    dropout_forward(gpu(), gy.t, gx.t, 0.3f, key);
    HostTensor hy = to_host(gy);
    int64_t mismatched = 0, dropped = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      mismatched += (hy.get(i) == 0.0f) != (y.get(i) == 0.0f);
      dropped += y.get(i) == 0.0f;
    }
    EXPECT_EQ(mismatched, 0) << "dropout masks differ (seed " << key.seed << ")";
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, y.numel());
    expect_close(hy, y, tolerance(dt()), "dropout_forward");
    dropout_backward(cpu(), dxh.t, x.t, 0.3f, key);
    dropout_backward(gpu(), gdx.t, gx.t, 0.3f, key);
    HostTensor hdx = to_host(gdx);
    for (int64_t i = 0; i < y.numel(); ++i) mismatched += (hdx.get(i) == 0.0f) != (y.get(i) == 0.0f);
    EXPECT_EQ(mismatched, 0) << "dropout_backward mask differs from the forward's";
    expect_close(hdx, dxh, tolerance(dt()), "dropout_backward");
  }
}

TEST_P(Parity, Matmul) {
  const int64_t M = 64, N = 48, K = 96;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      HostTensor a = random_host(dt(), ta ? Shape{K, M} : Shape{M, K}, 10 + ta);
      HostTensor b = random_host(dt(), tb ? Shape{N, K} : Shape{K, N}, 20 + tb);
      HostTensor bias = random_host(dt(), {N}, 30);
      DeviceTensor ga = to_device(a), gb = to_device(b), gbias = to_device(bias);
      std::string tag = std::string(" trans_a=") + (ta ? "1" : "0") + " trans_b=" + (tb ? "1" : "0");
      MatmulOptions opt;
      opt.trans_a = ta;
      opt.trans_b = tb;
      // plain, out in a's dtype
      HostTensor c(dt(), {M, N});
      DeviceTensor gc = device_empty(dt(), {M, N});
      matmul(cpu(), c.t, a.t, b.t, opt);
      matmul(gpu(), gc.t, ga.t, gb.t, opt);
      expect_close(to_host(gc), c, tolerance(dt()), "matmul" + tag);
      // with bias
      MatmulOptions ob = opt;
      ob.bias = &bias.t;
      HostTensor cb(dt(), {M, N});
      DeviceTensor gcb = device_empty(dt(), {M, N});
      matmul(cpu(), cb.t, a.t, b.t, ob);
      ob.bias = &gbias.t;
      matmul(gpu(), gcb.t, ga.t, gb.t, ob);
      expect_close(to_host(gcb), cb, tolerance(dt()), "matmul + bias" + tag);
      // accumulate into f32 with alpha (weight gradients)
      MatmulOptions oa = opt;
      oa.accumulate = true;
      oa.alpha = 0.5f;
      HostTensor acc = random_host(DType::f32, {M, N}, 40);
      DeviceTensor gacc = to_device(acc);
      matmul(cpu(), acc.t, a.t, b.t, oa);
      matmul(gpu(), gacc.t, ga.t, gb.t, oa);
      expect_close(to_host(gacc), acc, tolerance(dt() == DType::f32 ? DType::f32 : DType::f16), "matmul accumulate f32" + tag);
      // accumulate + bias in a's dtype
      oa.bias = &bias.t;
      HostTensor accb = random_host(dt(), {M, N}, 41);
      DeviceTensor gaccb = to_device(accb);
      matmul(cpu(), accb.t, a.t, b.t, oa);
      oa.bias = &gbias.t;
      matmul(gpu(), gaccb.t, ga.t, gb.t, oa);
      expect_close(to_host(gaccb), accb, tolerance(dt()), "matmul accumulate + bias" + tag);
      // + bias + a residual (the block's residual add in the epilogue: C = residual, D = out)
      MatmulOptions orr = opt;
      orr.bias = &bias.t;
      HostTensor res = random_host(dt(), {M, N}, 42), cr(dt(), {M, N});
      DeviceTensor gres = to_device(res), gcr = device_empty(dt(), {M, N});
      orr.residual = &res.t;
      matmul(cpu(), cr.t, a.t, b.t, orr);
      orr.bias = &gbias.t;
      orr.residual = &gres.t;
      matmul(gpu(), gcr.t, ga.t, gb.t, orr);
      expect_close(to_host(gcr), cr, tolerance(dt()), "matmul + bias + residual" + tag);
      expect_close(to_host(gres), res, tolerance(DType::f32), "matmul's residual left unchanged" + tag);
      // a residual without a bias (a bias-free model's projection, model.bias = false)
      MatmulOptions orn = opt;
      HostTensor crn(dt(), {M, N});
      DeviceTensor gcrn = device_empty(dt(), {M, N});
      orn.residual = &res.t;
      matmul(cpu(), crn.t, a.t, b.t, orn);
      orn.residual = &gres.t;
      matmul(gpu(), gcrn.t, ga.t, gb.t, orn);
      expect_close(to_host(gcrn), crn, tolerance(dt()), "matmul + residual, no bias" + tag);
    }
  }
}

// The fused GELU's output against the CPU's: 2x the dtype's tolerance for 16-bit (the GPU applies
// GELU to the f32 pre-activation, the CPU to the rounded one), 10x for f32 (an epilogue may evaluate
// tanh with a fast approximation, ~1e-3 absolute at worst).
Tolerance gelu_tolerance(DType d) { return tolerance(d, d == DType::f32 ? 10.0f : 2.0f); }

// Rows that vary from call to call (MatmulOptions::rows_vary, the dropless experts' GEMMs): one plan
// for the next power of two runs at every call's size, the rows of a (M, or K with trans_a) taking
// 37, 64, 100 and 250 one after the other, with the GELU epilogue, the bias and accumulation.
TEST_P(Parity, MatmulRowsVary) {
  const int64_t N = 40, C = 48;
  for (int64_t rows : {37, 64, 100, 250, 37}) {
    const std::string at = " at " + std::to_string(rows) + " rows";
    HostTensor x = random_host(dt(), {rows, C}, 50), w = random_host(dt(), {N, C}, 51), bias = random_host(dt(), {N}, 52);
    DeviceTensor gx = to_device(x), gw = to_device(w), gbias = to_device(bias);
    MatmulOptions fwd;  // out (rows, N) = gelu(x w^T + b), the pre-activation kept
    fwd.trans_b = true;
    fwd.rows_vary = true;
    HostTensor h(dt(), {rows, N}), g(dt(), {rows, N});
    DeviceTensor gh = device_empty(dt(), {rows, N}), gg = device_empty(dt(), {rows, N});
    fwd.bias = &bias.t;
    fwd.gelu_input = &h.t;
    matmul(cpu(), g.t, x.t, w.t, fwd);
    fwd.bias = &gbias.t;
    fwd.gelu_input = &gh.t;
    matmul(gpu(), gg.t, gx.t, gw.t, fwd);
    expect_close(to_host(gh), h, tolerance(dt()), "pre-activation" + at);
    expect_close(to_host(gg), g, gelu_tolerance(dt()), "gelu output" + at);
    MatmulOptions wgrad;  // dw (N, C) += g^T x, the rows the reduction
    wgrad.trans_a = true;
    wgrad.accumulate = true;
    wgrad.rows_vary = true;
    HostTensor dw = random_host(DType::f32, {N, C}, 53);
    DeviceTensor gdw = to_device(dw);
    matmul(cpu(), dw.t, g.t, x.t, wgrad);
    matmul(gpu(), gdw.t, gg.t, gx.t, wgrad);
    expect_close(to_host(gdw), dw, tolerance(dt() == DType::f32 ? DType::f32 : DType::f16, 2.0f), "weight gradient" + at);
  }
}

// GELU fused into the GEMM (cuBLASLt epilogues GELU_AUX[_BIAS] and DGELU, or the separate kernels
// where cuBLASLt offers none: N = 13 is not a multiple of 8) against the CPU's matmul + gelu: the
// forward with and without bias and the pre-activation it keeps, and the backward. M, N, K include
// values that are not multiples of 16.
TEST_P(Parity, MatmulFusedGelu) {
  struct Case { int64_t M, N, K; bool ta, tb; };
  const Case cases[] = {{64, 48, 96, false, true}, {37, 40, 29, false, true}, {50, 13, 23, true, false},
                        {33, 24, 45, false, false}, {19, 56, 70, true, true}};
  uint32_t seed = 70;
  for (const Case& c : cases) {
    const int64_t M = c.M, N = c.N, K = c.K;
    const std::string tag = " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                            " trans_a=" + std::to_string(c.ta) + " trans_b=" + std::to_string(c.tb);
    // Pre-activations of a few units: GELU's curved part.
    HostTensor a = random_host(dt(), c.ta ? Shape{K, M} : Shape{M, K}, seed++);
    HostTensor b = random_host(dt(), c.tb ? Shape{N, K} : Shape{K, N}, seed++, -0.5f, 0.5f);
    HostTensor bias = random_host(dt(), {N}, seed++);
    DeviceTensor ga = to_device(a), gb = to_device(b), gbias = to_device(bias);
    MatmulOptions plain;
    plain.trans_a = c.ta;
    plain.trans_b = c.tb;
    for (bool with_bias : {false, true}) {
      const std::string what = tag + (with_bias ? " +bias" : "");
      HostTensor h(dt(), {M, N}), g(dt(), {M, N});
      DeviceTensor gh = device_empty(dt(), {M, N}), gg = device_empty(dt(), {M, N});
      MatmulOptions o = plain;
      o.bias = with_bias ? &bias.t : nullptr;
      o.gelu_input = &h.t;
      matmul(cpu(), g.t, a.t, b.t, o);
      o.bias = with_bias ? &gbias.t : nullptr;
      o.gelu_input = &gh.t;
      matmul(gpu(), gg.t, ga.t, gb.t, o);
      expect_close(to_host(gh), h, tolerance(dt()), "fused gelu: pre-activation" + what);
      expect_close(to_host(gg), g, gelu_tolerance(dt()), "fused gelu: output" + what);
      if (dt() == DType::f32) {
        // The model's GELU is the tanh form; cuBLASLt does not document which it computes. On the
        // GPU's own pre-activations its output must lie closer to the tanh form than to erf's.
        HostTensor ph = to_host(gh), pg = to_host(gg);
        double off_tanh = 0, off_erf = 0;
        for (int64_t i = 0; i < ph.t.numel(); ++i) {
          const double x = ph.get(i), y = pg.get(i);
          off_tanh += std::fabs(y - 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
          off_erf += std::fabs(y - 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
        }
        EXPECT_LT(off_tanh, off_erf) << "the fused GELU is not the tanh form" << what;
      }
    }
    // Backward: dh = op(a) op(b) * gelu'(h), h the same saved pre-activation on both.
    HostTensor h = random_host(dt(), {M, N}, seed++, -4.0f, 4.0f);
    DeviceTensor gh = to_device(h);
    HostTensor dh(dt(), {M, N});
    DeviceTensor gdh = device_empty(dt(), {M, N});
    MatmulOptions o = plain;
    o.alpha = 0.5f;
    o.gelu_grad_of = &h.t;
    matmul(cpu(), dh.t, a.t, b.t, o);
    o.gelu_grad_of = &gh.t;
    matmul(gpu(), gdh.t, ga.t, gb.t, o);
    expect_close(to_host(gdh), dh, gelu_tolerance(dt()), "fused gelu backward" + tag);
  }
}

// A strided batch of GEMMs (a mixture-of-experts block's experts: slot rows one after another,
// parameter copies at a distance) in one cuBLASLt call with its epilogues fused, against the CPU's
// one problem after the other; the gaps between the problems' outputs are left as they were. With
// N = 12 the GELU's batch stride is no multiple of 8, and the GELU's backward is never batched: those
// run one problem at a time. Every case runs twice: the second time from the cached plan (or the
// cached absence of one).
TEST_P(Parity, MatmulBatched) {
  enum class Gelu { none, forward, backward };
  struct Case { int64_t M, N, K, batch; bool ta, tb, bias; Gelu gelu; bool accumulate_f32; };
  const Case cases[] = {{40, 48, 32, 3, false, true, true, Gelu::forward, false},
                        {40, 32, 48, 3, false, true, true, Gelu::none, false},
                        {40, 48, 32, 3, false, false, false, Gelu::backward, false},
                        {48, 32, 40, 3, true, false, false, Gelu::none, true},
                        {24, 12, 20, 4, false, true, true, Gelu::forward, false}};
  uint32_t seed = 300;
  for (int pass = 0; pass < 2; ++pass)
  for (const Case& c : cases) {
    const int64_t M = c.M, N = c.N, K = c.K, B = c.batch;
    const std::string tag = " batch " + std::to_string(B) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + (c.bias ? " +bias" : "") +
                            (c.gelu == Gelu::forward ? " gelu" : c.gelu == Gelu::backward ? " *gelu'" : "") +
                            (c.accumulate_f32 ? " += f32" : "");
    MatmulOptions o;
    o.batch = B;
    o.trans_a = c.ta;
    o.trans_b = c.tb;
    o.accumulate = c.accumulate_f32;
    o.stride_a = M * K + 8;
    o.stride_b = N * K + 16;
    o.stride_bias = N + 8;
    o.stride_out = M * N + 16;
    const DType out_t = c.accumulate_f32 ? DType::f32 : dt();
    auto whole = [&](int64_t stride, int64_t n) { return Shape{stride * (B - 1) + n}; };
    HostTensor a = random_host(dt(), whole(o.stride_a, M * K), seed++), b = random_host(dt(), whole(o.stride_b, N * K), seed++, -0.5f, 0.5f);
    HostTensor bias = random_host(dt(), whole(o.stride_bias, N), seed++);
    HostTensor out = random_host(out_t, whole(o.stride_out, M * N), seed++);  // gaps (and accumulate's start)
    HostTensor aux = random_host(dt(), whole(o.stride_out, M * N), seed++, -4.0f, 4.0f);
    DeviceTensor ga = to_device(a), gb = to_device(b), gbias = to_device(bias), gout = to_device(out), gaux = to_device(aux);
    auto first = [](const Tensor& t, Shape s) { return Tensor(t.data, t.dtype, t.device, s); };
    const Shape sa = c.ta ? Shape{K, M} : Shape{M, K}, sb = c.tb ? Shape{N, K} : Shape{K, N};
    auto run = [&](Runtime& rt, const Tensor& o_t, const Tensor& a_t, const Tensor& b_t, const Tensor& bias_t,
                   const Tensor& aux_t) {
      MatmulOptions x = o;
      const Tensor bias0 = first(bias_t, {N}), aux0 = first(aux_t, {M, N});
      if (c.bias) x.bias = &bias0;
      if (c.gelu == Gelu::forward) x.gelu_input = &aux0;
      if (c.gelu == Gelu::backward) x.gelu_grad_of = &aux0;
      matmul(rt, first(o_t, {M, N}), first(a_t, sa), first(b_t, sb), x);
    };
    run(cpu(), out.t, a.t, b.t, bias.t, aux.t);
    run(gpu(), gout.t, ga.t, gb.t, gbias.t, gaux.t);
    const Tolerance tol = c.gelu != Gelu::none ? gelu_tolerance(dt()) : tolerance(c.accumulate_f32 && dt() != DType::f32 ? DType::f16 : dt());
    expect_close(to_host(gout), out, tol, "batched matmul output" + tag);  // the gaps: bitwise, as given
    if (c.gelu == Gelu::forward) expect_close(to_host(gaux), aux, tolerance(dt()), "batched matmul pre-activation" + tag);
  }
}

// The experts' bias gradients as one batch (column partials in chunks that never span two blocks,
// one strided finalize), f32 and 16-bit gradients, accumulating or not, against the CPU's block by
// block; with 37 rows a block is one chunk, 770 rows two, and 1279 rows (a prime: one chunk, against
// five alone) run one block at a time. The gaps between the outputs are left alone.
TEST_P(Parity, BiasBackwardBatched) {
  uint32_t seed = 400;
  for (int64_t rows : {int64_t(1280), int64_t(37), int64_t(770), int64_t(1279)}) {
    for (DType gt : {DType::f32, dt()}) {
      for (bool acc : {false, true}) {
        const int64_t N = 200, B = 5, stride = N + 24;
        const std::string tag = " rows " + std::to_string(rows) + " grads " + std::string(dtype_name(gt)) + (acc ? " +=" : "");
        HostTensor dy = random_host(dt(), {B * rows, N}, seed++), db = random_host(gt, {stride * (B - 1) + N}, seed++);
        DeviceTensor gdy = to_device(dy), gdb = to_device(db);
        bias_backward(cpu(), db.t.slice(0, {N}), dy.t, acc, B, stride);
        bias_backward(gpu(), gdb.t.slice(0, {N}), gdy.t, acc, B, stride);
        expect_close(to_host(gdb), db, gt == DType::f32 ? tolerance(DType::f32, 2.0f) : tolerance(gt),
                     "batched bias_backward" + tag);
      }
    }
  }
}

// Tuning (TRELLIS_MATMUL_TUNE=1 and a runtime that is not deterministic: the heuristic's candidates
// are timed when a plan is made) must leave outputs as one run writes them: the product accumulated
// once, the pre-activation and GELU written once, into the real tensors.
TEST_P(Parity, MatmulTunedWritesOnce) {
  setenv("TRELLIS_MATMUL_TUNE", "1", 1);
  struct Unset { ~Unset() { unsetenv("TRELLIS_MATMUL_TUNE"); } } unset;
  RuntimeOptions ro;
  ro.device = Device::CUDA(0);
  ro.deterministic = false;
  Runtime tuned(ro);
  const int64_t M = 70, N = 56, K = 100;
  HostTensor x = random_host(dt(), {M, K}, 80), w = random_host(dt(), {N, K}, 81, -0.5f, 0.5f);
  HostTensor bias = random_host(dt(), {N}, 82), dy = random_host(dt(), {M, N}, 83);
  HostTensor dw = random_host(DType::f32, {N, K}, 84);
  DeviceTensor gx = to_device(x), gw = to_device(w), gbias = to_device(bias), gdy = to_device(dy);
  DeviceTensor gdw = to_device(dw);
  HostTensor h(dt(), {M, N}), g(dt(), {M, N});
  DeviceTensor gh = device_empty(dt(), {M, N}), gg = device_empty(dt(), {M, N});
  gpu().synchronize();  // uploaded on the other runtime's streams
  // weight gradient: dW (N, K, f32) += dy^T x
  MatmulOptions oa;
  oa.trans_a = true;
  oa.accumulate = true;
  matmul(cpu(), dw.t, dy.t, x.t, oa);
  matmul(tuned, gdw.t, gdy.t, gx.t, oa);
  // fc forward: h = x W^T + b, g = gelu(h)
  MatmulOptions of;
  of.trans_b = true;
  of.bias = &bias.t;
  of.gelu_input = &h.t;
  matmul(cpu(), g.t, x.t, w.t, of);
  of.bias = &gbias.t;
  of.gelu_input = &gh.t;
  matmul(tuned, gg.t, gx.t, gw.t, of);
  tuned.synchronize();
  expect_close(to_host(gdw), dw, tolerance(dt() == DType::f32 ? DType::f32 : DType::f16), "tuned: accumulate");
  expect_close(to_host(gh), h, tolerance(dt()), "tuned: pre-activation");
  expect_close(to_host(gg), g, gelu_tolerance(dt()), "tuned: gelu");
}

// Shapes: one chunk of rows with unvectorized columns; several chunks (the last short) with
// vectorized column tiles, the last tile partial; bf16 / f16 4100 columns unvectorized, f32
// vectorized. Back-to-back calls agree bitwise (chunk partials summed in a fixed order).
TEST_P(Parity, BiasBackward) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 70}, {1000, 2056}, {600, 4100}}) {
    const std::string tag = " (" + std::to_string(rows) + " x " + std::to_string(cols) + ")";
    HostTensor dy = random_host(dt(), {rows, cols}, 50);
    HostTensor db = random_host(DType::f32, {cols}, 51);
    DeviceTensor gdy = to_device(dy), gdb = to_device(db);
    bias_backward(cpu(), db.t, dy.t);
    bias_backward(gpu(), gdb.t, gdy.t);
    expect_close(to_host(gdb), db, tolerance(DType::f32, 2.0f), "bias_backward" + tag);
    // Without accumulate the sums overwrite db, whatever it held (NaN here).
    HostTensor fresh(DType::f32, {cols});
    bias_backward(cpu(), fresh.t, dy.t, false);
    fill(gpu(), gdb.t, std::nanf(""));
    bias_backward(gpu(), gdb.t, gdy.t, false);
    HostTensor first = to_host(gdb);
    expect_close(first, fresh, tolerance(DType::f32, 2.0f), "bias_backward, overwriting" + tag);
    bias_backward(gpu(), gdb.t, gdy.t, false);
    expect_bitwise(to_host(gdb), first, "bias_backward, again" + tag);
  }
}

// Shapes: C = 96 and 1000 take the fused backward with one vector per thread, C = 4104 with two
// and a thread count that is no power of two (bf16, f16; f32 needs three and takes the two-pass
// form); C = 98 is no multiple of the vector width (the two-pass fallback); 1200 rows make 38
// chunks of rows. The fused add + layer norm is also run on an x one element off 16-byte alignment
// (its add-then-layer-norm fallback).
TEST_P(Parity, LayerNormAndDeterminism) {
  struct Case { int64_t B, T, C; };
  uint32_t seed = 60;
  for (const Case& c : {Case{2, 33, 96}, Case{3, 37, 1000}, Case{1, 70, 4104}, Case{2, 33, 98}, Case{4, 300, 64}}) {
    const int64_t B = c.B, T = c.T, C = c.C;
    const std::string tag = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
    HostTensor x = random_host(dt(), {B, T, C}, seed++, -2.0f, 2.0f);
    HostTensor w = random_host(dt(), {C}, seed++, 0.5f, 1.5f), b = random_host(dt(), {C}, seed++);
    DeviceTensor gx = to_device(x), gw = to_device(w), gb = to_device(b);
    HostTensor y(dt(), {B, T, C}), mean(DType::f32, {B * T}), rstd(DType::f32, {B * T});
    DeviceTensor gy = device_empty(dt(), {B, T, C}), gmean = device_empty(DType::f32, {B * T}),
                 grstd = device_empty(DType::f32, {B * T});
    layernorm_forward(cpu(), y.t, mean.t, rstd.t, x.t, w.t, b.t);
    layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gx.t, gw.t, gb.t);
    expect_close(to_host(gy), y, tolerance(dt()), "layernorm_forward out" + tag);
    expect_close(to_host(gmean), mean, tolerance(DType::f32), "layernorm_forward mean" + tag);
    expect_close(to_host(grstd), rstd, tolerance(DType::f32), "layernorm_forward rstd" + tag);
    {  // The residual add fused in: bitwise the GPU's add then layer norm, and close to the CPU's r.
      HostTensor br = random_host(dt(), {B, T, C}, seed++), r(dt(), {B, T, C});
      DeviceTensor gbr = to_device(br), gr = device_empty(dt(), {B, T, C}), gr2 = device_empty(dt(), {B, T, C});
      DeviceTensor gy2 = device_empty(dt(), {B, T, C}), gm2 = device_empty(DType::f32, {B * T}),
                   gs2 = device_empty(DType::f32, {B * T});
      add(cpu(), r.t, x.t, br.t);
      add(gpu(), gr.t, gx.t, gbr.t);
      layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gr.t, gw.t, gb.t);
      add_layernorm_forward(gpu(), gr2.t, gy2.t, gm2.t, gs2.t, gx.t, gbr.t, gw.t, gb.t);
      expect_close(to_host(gr2), r, tolerance(dt()), "add_layernorm_forward r vs the CPU" + tag);
      expect_bitwise(to_host(gr2), to_host(gr), "add_layernorm_forward r vs add" + tag);
      expect_bitwise(to_host(gy2), to_host(gy), "add_layernorm_forward out vs add + layernorm_forward" + tag);
      expect_bitwise(to_host(gm2), to_host(gmean), "add_layernorm_forward mean" + tag);
      expect_bitwise(to_host(gs2), to_host(grstd), "add_layernorm_forward rstd" + tag);
      // x one element past a 16-byte boundary: the fused kernel does not apply.
      Buffer shifted(gpu().allocator(), size_t(B * T * C + 1) * dtype_size(dt()), "parity test tensor");
      const Tensor gxs = shifted.tensor(dt(), {B, T, C}, dtype_size(dt()));
      copy(gpu(), gxs, gx.t);
      add(gpu(), gr.t, gxs, gbr.t);
      layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gr.t, gw.t, gb.t);
      add_layernorm_forward(gpu(), gr2.t, gy2.t, gm2.t, gs2.t, gxs, gbr.t, gw.t, gb.t);
      expect_bitwise(to_host(gr2), to_host(gr), "add_layernorm_forward r, misaligned x" + tag);
      expect_bitwise(to_host(gy2), to_host(gy), "add_layernorm_forward out, misaligned x" + tag);
      expect_bitwise(to_host(gs2), to_host(grstd), "add_layernorm_forward rstd, misaligned x" + tag);
      layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gx.t, gw.t, gb.t);  // back to LN(x) for the backward below
    }

    HostTensor dy = random_host(dt(), {B, T, C}, seed++);
    HostTensor dx0 = random_host(dt(), {B, T, C}, seed++);
    HostTensor dw0 = random_host(DType::f32, {C}, seed++), db0 = random_host(DType::f32, {C}, seed++);
    DeviceTensor gdy = to_device(dy);
    HostTensor dx = dx0, dw = dw0, db = db0;
    layernorm_backward(cpu(), dx.t, dw.t, db.t, dy.t, x.t, w.t, mean.t, rstd.t);
    HostTensor runs[2][3] = {{HostTensor(dt(), {1}), HostTensor(dt(), {1}), HostTensor(dt(), {1})},
                             {HostTensor(dt(), {1}), HostTensor(dt(), {1}), HostTensor(dt(), {1})}};
    for (auto& run : runs) {
      DeviceTensor gdx = to_device(dx0), gdw = to_device(dw0), gdb = to_device(db0);
      layernorm_backward(gpu(), gdx.t, gdw.t, gdb.t, gdy.t, gx.t, gw.t, gmean.t, grstd.t);
      run[0] = to_host(gdx);
      run[1] = to_host(gdw);
      run[2] = to_host(gdb);
    }
    const Tolerance sums = tolerance(dt() == DType::f32 ? DType::f32 : DType::f16, 2.0f);
    expect_close(runs[0][0], dx, tolerance(dt(), 2.0f), "layernorm_backward dx" + tag);
    expect_close(runs[0][1], dw, sums, "layernorm_backward dw" + tag);
    expect_close(runs[0][2], db, sums, "layernorm_backward db" + tag);
    for (int i = 0; i < 3; ++i) expect_bitwise(runs[0][i], runs[1][i], "layernorm_backward determinism" + tag);
    // accumulate_params = false: dw and db overwritten (they hold NaN before), dx still accumulated.
    HostTensor dx2 = dx0, dw2(DType::f32, {C}), db2(DType::f32, {C});
    layernorm_backward(cpu(), dx2.t, dw2.t, db2.t, dy.t, x.t, w.t, mean.t, rstd.t, false);
    DeviceTensor gdx = to_device(dx0), gdw = device_empty(DType::f32, {C}), gdb = device_empty(DType::f32, {C});
    fill(gpu(), gdw.t, std::nanf(""));
    fill(gpu(), gdb.t, std::nanf(""));
    layernorm_backward(gpu(), gdx.t, gdw.t, gdb.t, gdy.t, gx.t, gw.t, gmean.t, grstd.t, false);
    expect_bitwise(to_host(gdx), runs[0][0], "layernorm_backward dx, parameters overwritten" + tag);
    expect_close(to_host(gdw), dw2, sums, "layernorm_backward dw, overwritten" + tag);
    expect_close(to_host(gdb), db2, sums, "layernorm_backward db, overwritten" + tag);
    {  // With the residual-stream column sums of dx as read (written over NaN) and as written (added
       // to): dw and db as without them, dx to within f32 rounding (the kernel variant that keeps
       // the sums recomputes dy and xhat, and the compiler may contract its update differently),
       // both runs bitwise equal; the sums those of bias_backward over dx before and after.
      auto f1 = [] { return HostTensor(DType::f32, {1}); };
      HostTensor with_sums[2][3] = {{f1(), f1(), f1()}, {f1(), f1(), f1()}};
      for (auto& run : with_sums) {
        DeviceTensor gdx3 = to_device(dx0), gdw3 = to_device(dw0), gdb3 = to_device(db0);
        DeviceTensor gbefore = device_empty(DType::f32, {C}), gafter = to_device(db0);
        fill(gpu(), gbefore.t, std::nanf(""));
        const ResidualColumnSums cs{gbefore.t, gafter.t, false, true};
        layernorm_backward(gpu(), gdx3.t, gdw3.t, gdb3.t, gdy.t, gx.t, gw.t, gmean.t, grstd.t, true, &cs);
        run[0] = to_host(gdx3);
        run[1] = to_host(gbefore);
        run[2] = to_host(gafter);
        expect_bitwise(to_host(gdw3), runs[0][1], "layernorm_backward dw with column sums" + tag);
        expect_bitwise(to_host(gdb3), runs[0][2], "layernorm_backward db with column sums" + tag);
      }
      for (int i = 0; i < 3; ++i)
        expect_bitwise(with_sums[0][i], with_sums[1][i], "layernorm_backward with column sums, determinism" + tag);
      expect_close(with_sums[0][0], runs[0][0], tolerance(dt()), "layernorm_backward dx with column sums" + tag);
      DeviceTensor gdx3 = to_device(with_sums[0][0]);
      DeviceTensor ebefore = device_empty(DType::f32, {C}), eafter = to_device(db0), gdx0 = to_device(dx0);
      bias_backward(gpu(), ebefore.t, gdx0.t.view({B * T, C}), false);
      bias_backward(gpu(), eafter.t, gdx3.t.view({B * T, C}), true);
      const Tolerance order = tolerance(DType::f32, 4.0f);  // the same values, summed in another order
      expect_close(with_sums[0][1], to_host(ebefore), order, "layernorm_backward sum of dx before" + tag);
      expect_close(with_sums[0][2], to_host(eafter), order, "layernorm_backward sum of dx after" + tag);
    }
  }
}

// RMSNorm (rms = true, no bias) through every kernel path of LayerNormAndDeterminism's shapes:
// forward (vectorized and not), the fused add, the fused backward with and without the residual
// column sums, the two-pass fallback (C = 98); against the CPU, and bitwise repeatable.
TEST_P(Parity, RmsNorm) {
  struct Case { int64_t B, T, C; };
  uint32_t seed = 90;
  for (const Case& c : {Case{2, 33, 96}, Case{3, 37, 1000}, Case{1, 70, 4104}, Case{2, 33, 98}, Case{4, 300, 64}}) {
    const int64_t B = c.B, T = c.T, C = c.C, R = B * T;
    const std::string tag = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
    HostTensor x = random_host(dt(), {B, T, C}, seed++, -1.0f, 3.0f), w = random_host(dt(), {C}, seed++, 0.5f, 1.5f);
    HostTensor br = random_host(dt(), {B, T, C}, seed++);
    DeviceTensor gx = to_device(x), gw = to_device(w), gbr = to_device(br);
    HostTensor y(dt(), {B, T, C}), mean(DType::f32, {R}), rstd(DType::f32, {R}), r(dt(), {B, T, C});
    DeviceTensor gy = device_empty(dt(), {B, T, C}), gmean = device_empty(DType::f32, {R}),
                 grstd = device_empty(DType::f32, {R}), gr = device_empty(dt(), {B, T, C}),
                 gy2 = device_empty(dt(), {B, T, C}), gm2 = device_empty(DType::f32, {R}),
                 gs2 = device_empty(DType::f32, {R}), gr2 = device_empty(dt(), {B, T, C});
    layernorm_forward(cpu(), y.t, mean.t, rstd.t, x.t, w.t, Tensor(), 1e-5f, true);
    layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gx.t, gw.t, Tensor(), 1e-5f, true);
    expect_close(to_host(gy), y, tolerance(dt()), "rmsnorm forward out" + tag);
    expect_close(to_host(gmean), mean, tolerance(DType::f32), "rmsnorm forward mean (0)" + tag);
    expect_close(to_host(grstd), rstd, tolerance(DType::f32), "rmsnorm forward rstd" + tag);
    add(gpu(), gr.t, gx.t, gbr.t);
    layernorm_forward(gpu(), gy2.t, gm2.t, gs2.t, gr.t, gw.t, Tensor(), 1e-5f, true);
    add_layernorm_forward(gpu(), gr2.t, gy.t, gmean.t, grstd.t, gx.t, gbr.t, gw.t, Tensor(), 1e-5f, true);
    expect_bitwise(to_host(gy), to_host(gy2), "add + rmsnorm fused vs separate" + tag);
    expect_bitwise(to_host(grstd), to_host(gs2), "add + rmsnorm rstd" + tag);
    layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gx.t, gw.t, Tensor(), 1e-5f, true);  // back to RMS(x)

    HostTensor dy = random_host(dt(), {B, T, C}, seed++), dx0 = random_host(dt(), {B, T, C}, seed++);
    HostTensor dw0 = random_host(DType::f32, {C}, seed++), dx = dx0, dw = dw0;
    HostTensor before(DType::f32, {C}), after(DType::f32, {C});
    const ResidualColumnSums cpu_sums{before.t, after.t, false, false};
    layernorm_backward(cpu(), dx.t, dw.t, Tensor(), dy.t, x.t, w.t, mean.t, rstd.t, true, &cpu_sums, true);
    DeviceTensor gdy = to_device(dy);
    auto h1 = [&] { return HostTensor(dt(), {1}); };
    HostTensor runs[2][6] = {{h1(), h1(), h1(), h1(), h1(), h1()}, {h1(), h1(), h1(), h1(), h1(), h1()}};
    for (auto& run : runs) {
      DeviceTensor gdx = to_device(dx0), gdw = to_device(dw0), gdx2 = to_device(dx0), gdw2 = to_device(dw0);
      DeviceTensor gbefore = device_empty(DType::f32, {C}), gafter = device_empty(DType::f32, {C});
      layernorm_backward(gpu(), gdx.t, gdw.t, Tensor(), gdy.t, gx.t, gw.t, gmean.t, grstd.t, true, nullptr, true);
      const ResidualColumnSums cs{gbefore.t, gafter.t, false, false};
      layernorm_backward(gpu(), gdx2.t, gdw2.t, Tensor(), gdy.t, gx.t, gw.t, gmean.t, grstd.t, true, &cs, true);
      run[0] = to_host(gdx);
      run[1] = to_host(gdw);
      run[2] = to_host(gdx2);
      run[3] = to_host(gdw2);
      run[4] = to_host(gbefore);
      run[5] = to_host(gafter);
    }
    const Tolerance sums = tolerance(dt() == DType::f32 ? DType::f32 : DType::f16, 2.0f);
    expect_close(runs[0][0], dx, tolerance(dt(), 2.0f), "rmsnorm backward dx" + tag);
    expect_close(runs[0][1], dw, sums, "rmsnorm backward dw" + tag);
    expect_close(runs[0][2], runs[0][0], tolerance(dt()), "rmsnorm backward dx with column sums" + tag);
    expect_bitwise(runs[0][3], runs[0][1], "rmsnorm backward dw with column sums" + tag);
    const Tolerance order = tolerance(DType::f32, 4.0f);  // the same values, summed in another order
    expect_close(runs[0][4], before, order, "rmsnorm backward column sums of dx before" + tag);
    expect_close(runs[0][5], after, sums, "rmsnorm backward column sums of dx after" + tag);
    for (int i = 0; i < 6; ++i) expect_bitwise(runs[0][i], runs[1][i], "rmsnorm backward determinism" + tag);
  }
}

// QK-norm at head sizes of 128 (Qwen3's), 24 and 256 (the kernels' limit), with grouped-query
// attention and with as many key-value heads as heads; the weight gradients accumulated into and
// written, the backward in place bitwise as apart, two runs bitwise equal, and forward in place too.
TEST_P(Parity, QkNorm) {
  struct Case { int64_t B, T, H, Hkv, hd; };
  uint32_t seed = 140;
  for (const Case& c : {Case{2, 37, 4, 2, 128}, Case{3, 17, 3, 3, 24}, Case{1, 300, 2, 1, 256}}) {
    const int64_t W = (c.H + 2 * c.Hkv) * c.hd, R = c.B * c.T;
    const AttentionHeads heads{int(c.H), int(c.Hkv)};
    const std::string tag = " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " Hkv=" +
                            std::to_string(c.Hkv) + " hd=" + std::to_string(c.hd);
    const Shape s{c.B, c.T, W};
    HostTensor x = random_host(dt(), s, seed++, -2.0f, 2.0f), dout = random_host(dt(), s, seed++);
    HostTensor wq = random_host(dt(), {c.hd}, seed++, 0.5f, 1.5f), wk = random_host(dt(), {c.hd}, seed++, 0.5f, 1.5f);
    HostTensor dw0 = random_host(DType::f32, {c.hd}, seed++);
    HostTensor y(dt(), s), rstd(DType::f32, {R, c.H + c.Hkv}), dx(dt(), s), dwq = dw0, dwk(DType::f32, {c.hd});
    qk_norm_forward(cpu(), y.t, rstd.t, x.t, wq.t, wk.t, heads, 1e-6f);
    qk_norm_backward(cpu(), dx.t, dwq.t, dwk.t, dout.t, x.t, wq.t, wk.t, rstd.t, heads, true);
    qk_norm_backward(cpu(), dx.t, dw0.t, dwk.t, dout.t, x.t, wq.t, wk.t, rstd.t, heads, false);  // dwk written
    DeviceTensor gx = to_device(x), gwq = to_device(wq), gwk = to_device(wk), gdout = to_device(dout);
    DeviceTensor gy = device_empty(dt(), s), grstd = device_empty(DType::f32, {R, c.H + c.Hkv});
    qk_norm_forward(gpu(), gy.t, grstd.t, gx.t, gwq.t, gwk.t, heads, 1e-6f);
    expect_close(to_host(gy), y, tolerance(dt()), "qk_norm_forward" + tag);
    expect_close(to_host(grstd), rstd, tolerance(DType::f32), "qk_norm_forward rstd" + tag);
    HostTensor runs[2][3] = {{HostTensor(dt(), {1}), HostTensor(dt(), {1}), HostTensor(dt(), {1})},
                             {HostTensor(dt(), {1}), HostTensor(dt(), {1}), HostTensor(dt(), {1})}};
    for (auto& run : runs) {
      DeviceTensor gdx = device_empty(dt(), s), gdwq = to_device(random_host(DType::f32, {c.hd}, seed - 1)),
                   gdwk = device_empty(DType::f32, {c.hd}), gin = to_device(dout);
      qk_norm_backward(gpu(), gdx.t, gdwq.t, gdwk.t, gdout.t, gx.t, gwq.t, gwk.t, grstd.t, heads, true);
      qk_norm_backward(gpu(), gin.t, gdwq.t, gdwk.t, gin.t, gx.t, gwq.t, gwk.t, grstd.t, heads, false);  // in place
      run[0] = to_host(gdx);
      run[1] = to_host(gdwk);
      run[2] = to_host(gin);
      expect_close(to_host(gdwq), dw0, tolerance(dt() == DType::f32 ? DType::f32 : DType::f16, 2.0f),
                   "qk_norm_backward dwq written after an accumulation" + tag);
    }
    const Tolerance sums = tolerance(dt() == DType::f32 ? DType::f32 : DType::f16, 2.0f);
    expect_close(runs[0][0], dx, tolerance(dt(), 2.0f), "qk_norm_backward dx" + tag);
    expect_close(runs[0][1], dwk, sums, "qk_norm_backward dwk" + tag);
    expect_bitwise(runs[0][2], runs[0][0], "qk_norm_backward in place" + tag);
    for (int i = 0; i < 3; ++i) expect_bitwise(runs[0][i], runs[1][i], "qk_norm_backward determinism" + tag);
    // The accumulated dwq: the written sums added to the gradient it held.
    HostTensor acc = random_host(DType::f32, {c.hd}, seed - 1);
    DeviceTensor gacc = to_device(acc), gdx = device_empty(dt(), s), gdwk = device_empty(DType::f32, {c.hd});
    qk_norm_backward(gpu(), gdx.t, gacc.t, gdwk.t, gdout.t, gx.t, gwq.t, gwk.t, grstd.t, heads, true);
    expect_close(to_host(gacc), dwq, sums, "qk_norm_backward dwq accumulated" + tag);
    qk_norm_forward(gpu(), gx.t, grstd.t, gx.t, gwq.t, gwk.t, heads, 1e-6f);  // in place, as generation runs it
    expect_bitwise(to_host(gx), to_host(gy), "qk_norm_forward in place" + tag);
  }
}

void attention_case(Runtime& cpu, Runtime& gpu, DType dt, int64_t B, int64_t T, int64_t H, int64_t hd,
                    float dropout = 0.0f, bool deterministic = true, int64_t kv_heads = 0, int64_t window = 0,
                    int64_t doc_len = 0);

TEST_P(Parity, AttentionSmall) { attention_case(cpu(), gpu(), dt(), 2, 17, 2, 16); }
TEST_P(Parity, AttentionBig) { attention_case(cpu(), gpu(), dt(), 2, 256, 4, 64); }
// bf16/f16 at head_dim 64 and 128 take the fused flash kernels (f32 and head_dim 16 the cuBLAS path):
// T = 100 is not a multiple of their 64-row tiles, T = 17 is shorter than one.
TEST_P(Parity, AttentionHead128OddLength) { attention_case(cpu(), gpu(), dt(), 1, 100, 2, 128); }
TEST_P(Parity, AttentionShort) { attention_case(cpu(), gpu(), dt(), 3, 17, 3, 64); }
// Attention-probability dropout: the fused kernels (bf16/f16) and the unfused path (f32) draw the
// CPU's mask.
TEST_P(Parity, AttentionDropout) { attention_case(cpu(), gpu(), dt(), 2, 256, 4, 64, 0.2f); }
TEST_P(Parity, AttentionDropoutHead128OddLength) { attention_case(cpu(), gpu(), dt(), 1, 100, 2, 128, 0.1f); }
// Grouped-query attention (2 query heads a key-value head; 1 key-value head: multi-query) on every
// path: the unfused one (f32, head_dim 16), the fused kernels (dK, dV summed over a group's heads),
// with dropout, at an odd length.
TEST_P(Parity, AttentionGroupedQuery) {
  attention_case(cpu(), gpu(), dt(), 2, 17, 4, 16, 0.0f, true, 2);
  attention_case(cpu(), gpu(), dt(), 2, 256, 4, 64, 0.0f, true, 2);
  attention_case(cpu(), gpu(), dt(), 1, 100, 4, 128, 0.0f, true, 1);
  attention_case(cpu(), gpu(), dt(), 2, 130, 6, 64, 0.2f, true, 2);
}
// Outside deterministic mode bf16/f16 without dropout take cuDNN's fused attention where the build
// has it (asserted); its backward is not bitwise reproducible, so only parity is checked.
TEST_P(Parity, AttentionNotDeterministic) {
  RuntimeOptions o;
  o.device = Device::CUDA(0);
  Runtime fast(o);
#if TRELLIS_HAVE_CUDNN
  if (dt() != DType::f32) {
    EXPECT_TRUE(gpu::cudnn_attention(fast, 2, 256, 4, 4, 64, dt(), false, 0));
    EXPECT_FALSE(gpu::cudnn_attention(fast, 2, 256, 4, 4, 64, dt(), true, 0)) << "dropout takes the own kernels";
    EXPECT_FALSE(gpu::cudnn_attention(gpu(), 2, 256, 4, 4, 64, dt(), false, 0)) << "deterministic takes the own kernels";
    std::printf("cuDNN takes grouped-query attention (4 heads on 2): %s\n",
                gpu::cudnn_attention(fast, 2, 256, 4, 2, 64, dt(), false, 0) ? "yes" : "no (the own kernels)");
    std::printf("cuDNN takes a sliding window (100 of 256): %s\n",
                gpu::cudnn_attention(fast, 2, 256, 4, 2, 64, dt(), false, 100) ? "yes" : "no (the own kernels)");
  }
#endif
  attention_case(cpu(), fast, dt(), 2, 256, 4, 64, 0.0f, false);
  attention_case(cpu(), fast, dt(), 1, 100, 2, 128, 0.0f, false);
  attention_case(cpu(), fast, dt(), 3, 17, 3, 64, 0.0f, false);
  attention_case(cpu(), fast, dt(), 2, 256, 4, 64, 0.2f, false);  // dropout: the own kernels
  attention_case(cpu(), fast, dt(), 2, 256, 4, 64, 0.0f, false, 2);  // grouped-query: cuDNN's where it takes it
  attention_case(cpu(), fast, dt(), 1, 100, 4, 128, 0.0f, false, 1);
  attention_case(cpu(), fast, dt(), 2, 256, 4, 64, 0.0f, false, 2, 100);  // a sliding window: cuDNN's band
  attention_case(cpu(), fast, dt(), 1, 300, 2, 128, 0.0f, false, 0, 64);
}
// Sliding windows on the own kernels (deterministic) and the unfused path (f32, head_dim 16): a
// window across tile edges (100), one of a tile (64) with dropout at an odd length, a small one (7:
// rows whose first key blocks are wholly masked), one position (each query sees itself).
TEST_P(Parity, AttentionSlidingWindow) {
  attention_case(cpu(), gpu(), dt(), 2, 256, 4, 64, 0.0f, true, 2, 100);
  attention_case(cpu(), gpu(), dt(), 1, 300, 2, 128, 0.1f, true, 0, 64);
  attention_case(cpu(), gpu(), dt(), 2, 200, 2, 64, 0.0f, true, 0, 7);
  attention_case(cpu(), gpu(), dt(), 1, 130, 4, 64, 0.0f, true, 1, 1);
  attention_case(cpu(), gpu(), dt(), 2, 17, 2, 16, 0.0f, true, 0, 5);
}
// Document masking (documents of 1 to 2 x doc_len tokens, their starts made on each device and
// compared) on the own kernels and the unfused path: documents across tile edges with grouped-query
// heads, with a sliding window and dropout at head_dim 128, documents of 1-6 tokens (key blocks wholly
// before a query block's documents), and outside deterministic mode, where cuDNN must not take it.
TEST_P(Parity, AttentionDocuments) {
  attention_case(cpu(), gpu(), dt(), 2, 256, 4, 64, 0.0f, true, 2, 0, 40);
  attention_case(cpu(), gpu(), dt(), 1, 300, 2, 128, 0.1f, true, 0, 64, 100);
  attention_case(cpu(), gpu(), dt(), 2, 200, 2, 64, 0.0f, true, 0, 0, 3);
  attention_case(cpu(), gpu(), dt(), 2, 17, 2, 16, 0.0f, true, 0, 0, 4);
  RuntimeOptions o;
  o.device = Device::CUDA(0);
  Runtime fast(o);
  attention_case(cpu(), fast, dt(), 2, 256, 4, 64, 0.0f, false, 2, 0, 40);
}

// Small rows, and GPT-2's vocabulary padded to 50304; the vocabulary's end inside a vector (beside
// padding, beside other real columns), at a vector's end, without padding, and narrower than one
// vector. Targets at 0, at the last and the second-to-last real column, and a row without one.
TEST_P(Parity, CrossEntropy) {
  struct Case { int64_t N, Vp, V; };
  uint32_t seed = 80;
  for (const Case& c : {Case{10, 72, 65}, Case{5, 50304, 50257}, Case{6, 72, 67}, Case{6, 72, 64}, Case{6, 64, 64},
                        Case{6, 8, 3}}) {
    const int64_t N = c.N, Vp = c.Vp, V = c.V;
    const std::string tag = " N=" + std::to_string(N) + " Vp=" + std::to_string(Vp) + " V=" + std::to_string(V);
    HostTensor logits = random_host(dt(), {N, Vp}, seed++, -4.0f, 4.0f);
    HostTensor targets(DType::i32, {N});
    std::mt19937 gen(seed++);
    for (int64_t i = 0; i < N; ++i) targets.t.ptr<int32_t>()[i] = int32_t(gen() % V);
    targets.t.ptr<int32_t>()[3] = -1;  // no target here
    targets.t.ptr<int32_t>()[N - 1] = int32_t(V - 1);
    targets.t.ptr<int32_t>()[1] = int32_t(V - 2);
    targets.t.ptr<int32_t>()[0] = 0;
    DeviceTensor glogits = to_device(logits), gtargets = to_device(targets);
    HostTensor losses(DType::f32, {N});
    DeviceTensor glosses = device_empty(DType::f32, {N});
    softmax_cross_entropy_forward(cpu(), losses.t, logits.t, targets.t, V);
    softmax_cross_entropy_forward(gpu(), glosses.t, glogits.t, gtargets.t, V);
    expect_close(to_host(glosses), losses, tolerance(DType::f16), "cross_entropy_forward" + tag);

    const float dloss = 1.0f / float(N);
    HostTensor dlogits(dt(), {N, Vp}), losses2(DType::f32, {N});
    softmax_cross_entropy_backward(cpu(), dlogits.t, losses2.t, logits.t, targets.t, V, dloss);
    DeviceTensor gd = device_empty(dt(), {N, Vp});
    softmax_cross_entropy_backward(gpu(), gd.t, glosses.t, glogits.t, gtargets.t, V, dloss);
    expect_close(to_host(gd), dlogits, tolerance(dt()), "cross_entropy_backward" + tag);
    expect_close(to_host(glosses), losses2, tolerance(DType::f16), "cross_entropy_backward losses" + tag);
    // in place: dlogits aliases logits
    softmax_cross_entropy_backward(gpu(), glogits.t, glosses.t, glogits.t, gtargets.t, V, dloss);
    expect_close(to_host(glogits), dlogits, tolerance(dt()), "cross_entropy_backward in place" + tag);
    HostTensor hd = to_host(glogits);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t col = V; col < Vp; ++col) ASSERT_EQ(hd.get(r * Vp + col), 0.0f) << "padded column " << col << tag;
  }
}

// Mixture-of-experts routing: the integer routing (choices, slots) bitwise the CPU's, the rest close;
// 64 experts put two on each lane of the routing warps; capacity factor 1 drops choices; the gates
// renormalized over the chosen, and (two cases) not; dropless (the last three: packed rows, none
// dropped; 64 experts over 40 tokens leave some without rows).
TEST_P(Parity, MoERouting) {
  struct Case {
    int64_t N, E, K, C;
    bool renormalize, dropless = false;
  };
  // C = 20: 16-bit rows take the one-element kernels (not a multiple of 8).
  for (const Case& c : {Case{300, 8, 2, 40, true}, Case{200, 64, 1, 24, true}, Case{130, 5, 3, 16, false},
                        Case{90, 6, 2, 20, false}, Case{300, 8, 2, 40, true, true}, Case{40, 64, 1, 24, true, true},
                        Case{1100, 5, 3, 16, false, true}}) {
    const int64_t cap = c.dropless ? c.N : (c.K * c.N + c.E - 1) / c.E, S = c.dropless ? c.N * c.K : c.E * cap;
    const std::string at = " (N " + std::to_string(c.N) + ", E " + std::to_string(c.E) + ", K " + std::to_string(c.K) +
                           (c.renormalize ? "" : ", not renormalized") + (c.dropless ? ", dropless" : "") + ")";
    HostTensor logits = random_host(DType::f32, {c.N, c.E}, 200, -3.0f, 3.0f);
    HostTensor probs(DType::f32, {c.N, c.E}), lse(DType::f32, {c.N}), expert(DType::i32, {c.N, c.K}),
        gate(DType::f32, {c.N, c.K}), slot(DType::i32, {c.N, c.K}), slot_token(DType::i32, {S}), counts(DType::f32, {c.E});
    moe_route(cpu(), probs.t, lse.t, expert.t, gate.t, slot.t, slot_token.t, counts.t, logits.t, c.renormalize,
              c.dropless);
    DeviceTensor gprobs = device_empty(DType::f32, {c.N, c.E}), glse = device_empty(DType::f32, {c.N}),
                 gexpert = device_empty(DType::i32, {c.N, c.K}), ggate = device_empty(DType::f32, {c.N, c.K}),
                 gslot = device_empty(DType::i32, {c.N, c.K}), gslot_token = device_empty(DType::i32, {S}),
                 gcounts = device_empty(DType::f32, {c.E}), glogits = to_device(logits);
    moe_route(gpu(), gprobs.t, glse.t, gexpert.t, ggate.t, gslot.t, gslot_token.t, gcounts.t, glogits.t, c.renormalize,
              c.dropless);
    expect_bitwise(to_host(gexpert), expert, "moe_route expert" + at);
    expect_bitwise(to_host(gslot), slot, "moe_route slot" + at);
    expect_bitwise(to_host(gslot_token), slot_token, "moe_route slot_token" + at);
    expect_bitwise(to_host(gcounts), counts, "moe_route counts" + at);
    expect_close(to_host(gprobs), probs, tolerance(DType::f32), "moe_route probs" + at);
    expect_close(to_host(glse), lse, tolerance(DType::f32), "moe_route lse" + at);
    expect_close(to_host(ggate), gate, tolerance(DType::f32), "moe_route gate" + at);
    int64_t dropped = 0;
    for (int64_t i = 0; i < c.N * c.K; ++i) dropped += slot.t.ptr<int32_t>()[i] < 0;
    if (c.dropless) EXPECT_EQ(dropped, 0) << "dropless routing dropped a choice" << at;
    else EXPECT_GT(dropped, 0) << "the case should drop choices" << at;

    HostTensor x = random_host(dt(), {c.N, c.C}, 201), xe(dt(), {S, c.C});
    DeviceTensor gx = to_device(x), gxe = device_empty(dt(), {S, c.C});
    moe_dispatch(cpu(), xe.t, x.t, slot_token.t, c.K);
    moe_dispatch(gpu(), gxe.t, gx.t, gslot_token.t, c.K);
    expect_bitwise(to_host(gxe), xe, "moe_dispatch" + at);

    HostTensor ye = random_host(dt(), {S, c.C}, 202), res = random_host(dt(), {c.N, c.C}, 203), out(dt(), {c.N, c.C});
    DeviceTensor gye = to_device(ye), gres = to_device(res), gout = device_empty(dt(), {c.N, c.C});
    for (bool residual : {false, true}) {  // the model's combine without (tensor ranks > 0) and with it
      moe_combine(cpu(), out.t, ye.t, slot.t, gate.t, residual ? res.t : Tensor());
      moe_combine(gpu(), gout.t, gye.t, gslot.t, ggate.t, residual ? gres.t : Tensor());
      expect_close(to_host(gout), out, tolerance(dt()), "moe_combine" + std::string(residual ? " + residual" : "") + at);
    }

    HostTensor dout = random_host(dt(), {c.N, c.C}, 204), dye(dt(), {S, c.C}), dgate(DType::f32, {c.N, c.K});
    DeviceTensor gdout = to_device(dout), gdye = device_empty(dt(), {S, c.C}), gdgate = device_empty(DType::f32, {c.N, c.K});
    moe_combine_backward(cpu(), dye.t, dgate.t, dout.t, ye.t, slot.t, slot_token.t, gate.t);
    moe_combine_backward(gpu(), gdye.t, gdgate.t, gdout.t, gye.t, gslot.t, gslot_token.t, ggate.t);
    expect_close(to_host(gdye), dye, tolerance(dt()), "moe_combine_backward dye" + at);
    expect_close(to_host(gdgate), dgate, tolerance(dt()), "moe_combine_backward dgate" + at);

    for (bool accumulate : {false, true}) {  // the model's (overwrite), and onto an earlier gradient
      HostTensor dx = random_host(dt(), {c.N, c.C}, 205);
      DeviceTensor gdx = to_device(dx);
      moe_dispatch_backward(cpu(), dx.t, dye.t, slot.t, accumulate);
      moe_dispatch_backward(gpu(), gdx.t, gdye.t, gslot.t, accumulate);
      expect_close(to_host(gdx), dx, tolerance(dt()),
                   "moe_dispatch_backward" + std::string(accumulate ? " accumulating" : "") + at);
    }

    HostTensor dlogits(DType::f32, {c.N, c.E});
    DeviceTensor gdlogits = device_empty(DType::f32, {c.N, c.E}), gdg = to_device(dgate);
    for (float z : {0.0f, 0.2f}) {  // without and with the z-loss
      moe_router_backward(cpu(), dlogits.t, dgate.t, probs.t, lse.t, expert.t, gate.t, counts.t, 0.3f, z, c.renormalize);
      moe_router_backward(gpu(), gdlogits.t, gdg.t, gprobs.t, glse.t, gexpert.t, ggate.t, gcounts.t, 0.3f, z,
                          c.renormalize);
      expect_close(to_host(gdlogits), dlogits, tolerance(DType::f32, 10.0f),
                   "moe_router_backward" + std::string(z > 0 ? " with the z-loss" : "") + at);
    }

    HostTensor stats(DType::f32, {3});
    stats.set(0, 0.5f);
    stats.set(1, 2.0f);
    stats.set(2, 1.5f);
    DeviceTensor gstats = to_device(stats);
    moe_statistics(cpu(), stats.t, probs.t, lse.t, counts.t, c.K, cap);
    moe_statistics(gpu(), gstats.t, gprobs.t, glse.t, gcounts.t, c.K, cap);
    expect_close(to_host(gstats), stats, tolerance(DType::f32), "moe_statistics" + at);
  }
}

TEST_P(Parity, EmbeddingAndDeterminism) {
  const int64_t B = 3, T = 20, V = 50, C = 40;
  HostTensor tokens(DType::i32, {B, T});
  std::mt19937 gen(90);
  for (int64_t i = 0; i < B * T; ++i) tokens.t.ptr<int32_t>()[i] = int32_t(gen() % 12);  // many repeats
  tokens.t.ptr<int32_t>()[5] = int32_t(V - 1);
  HostTensor wte = random_host(dt(), {V, C}, 91), wpe = random_host(dt(), {T + 4, C}, 92);
  DeviceTensor gtok = to_device(tokens), gwte = to_device(wte), gwpe = to_device(wpe);
  HostTensor out(dt(), {B, T, C});
  DeviceTensor gout = device_empty(dt(), {B, T, C});
  embedding_forward(cpu(), out.t, tokens.t, wte.t, wpe.t);
  embedding_forward(gpu(), gout.t, gtok.t, gwte.t, gwpe.t);
  expect_close(to_host(gout), out, tolerance(dt()), "embedding_forward");

  HostTensor dout = random_host(dt(), {B, T, C}, 93);
  HostTensor dwte0 = random_host(DType::f32, {V, C}, 94), dwpe0 = random_host(DType::f32, {T + 4, C}, 95);
  HostTensor dwte = dwte0, dwpe = dwpe0;
  embedding_backward(cpu(), dwte.t, dwpe.t, dout.t, tokens.t);
  DeviceTensor gdout = to_device(dout);
  HostTensor runs[2][2] = {{HostTensor(DType::f32, {1}), HostTensor(DType::f32, {1})},
                           {HostTensor(DType::f32, {1}), HostTensor(DType::f32, {1})}};
  for (auto& run : runs) {
    DeviceTensor gdwte = to_device(dwte0), gdwpe = to_device(dwpe0);
    embedding_backward(gpu(), gdwte.t, gdwpe.t, gdout.t, gtok.t);
    run[0] = to_host(gdwte);
    run[1] = to_host(gdwpe);
  }
  expect_close(runs[0][0], dwte, tolerance(DType::f32), "embedding_backward dwte");
  expect_close(runs[0][1], dwpe, tolerance(DType::f32), "embedding_backward dwpe");
  expect_bitwise(runs[0][0], runs[1][0], "embedding_backward dwte determinism");
  expect_bitwise(runs[0][1], runs[1][1], "embedding_backward dwpe determinism");
}

// data.reset_positions: wpe's rows by each token's place in its document (document_starts' positions,
// compared bitwise), forward and backward (dwpe scattered by position, deterministically).
TEST_P(Parity, EmbeddingWithDocumentPositions) {
  const int64_t B = 3, T = 150, V = 50, C = 40;
  HostTensor tokens(DType::i32, {B, T}), starts(DType::i32, {B, T}), positions(DType::i32, {B, T});
  std::mt19937 gen(96);
  for (int64_t i = 0; i < B * T; ++i) tokens.t.ptr<int32_t>()[i] = int32_t(gen() % 12);  // token 0 ends documents
  HostTensor wte = random_host(dt(), {V, C}, 97), wpe = random_host(dt(), {T, C}, 98);
  DeviceTensor gtok = to_device(tokens), gwte = to_device(wte), gwpe = to_device(wpe);
  DeviceTensor gstarts = device_empty(DType::i32, {B, T}), gpos = device_empty(DType::i32, {B, T});
  document_starts(cpu(), starts.t, tokens.t, 0, positions.t);
  document_starts(gpu(), gstarts.t, gtok.t, 0, gpos.t);
  expect_bitwise(to_host(gstarts), starts, "document_starts starts");
  expect_bitwise(to_host(gpos), positions, "document_starts positions");
  HostTensor out(dt(), {B, T, C});
  DeviceTensor gout = device_empty(dt(), {B, T, C});
  embedding_forward(cpu(), out.t, tokens.t, wte.t, wpe.t, 0, 0, positions.t);
  embedding_forward(gpu(), gout.t, gtok.t, gwte.t, gwpe.t, 0, 0, gpos.t);
  expect_close(to_host(gout), out, tolerance(dt()), "embedding_forward with positions");
  HostTensor dout = random_host(dt(), {B, T, C}, 99);
  HostTensor dwte = random_host(DType::f32, {V, C}, 100), dwpe = random_host(DType::f32, {T, C}, 101);
  DeviceTensor gdout = to_device(dout), gdwte = to_device(dwte), gdwpe = to_device(dwpe), again = to_device(dwpe);
  embedding_backward(cpu(), dwte.t, dwpe.t, dout.t, tokens.t, 0, 0, positions.t);
  embedding_backward(gpu(), gdwte.t, gdwpe.t, gdout.t, gtok.t, 0, 0, gpos.t);
  embedding_backward(gpu(), Tensor(), again.t, gdout.t, gtok.t, 0, 0, gpos.t);
  expect_close(to_host(gdwte), dwte, tolerance(DType::f32), "embedding_backward dwte with positions");
  expect_close(to_host(gdwpe), dwpe, tolerance(DType::f32), "embedding_backward dwpe with positions");
  expect_bitwise(to_host(again), to_host(gdwpe), "embedding_backward dwpe with positions, determinism");
}

// train.grad_dtype: an op writing a 16-bit gradient on the GPU gives the GPU's f32 gradient (from
// the same old values) rounded once; AdamW reads a 16-bit gradient as the f32 one of equal value.
TEST_P(Parity, GradientsIn16Bit) {
  if (dt() == DType::f32) GTEST_SKIP() << "16-bit gradients go with 16-bit activations";
  auto widened = [](const HostTensor& h) {
    HostTensor w(DType::f32, h.t.shape);
    for (int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
    return w;
  };
  auto rounded = [&](const HostTensor& f) {
    HostTensor r(dt(), f.t.shape);
    for (int64_t i = 0; i < f.numel(); ++i) r.set(i, f.get(i));
    return r;
  };
  uint32_t seed = 300;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1000, 2056}, {37, 70}}) {
    const std::string tag = " (" + std::to_string(rows) + " x " + std::to_string(cols) + ")";
    HostTensor dy = random_host(dt(), {rows, cols}, seed++), db = random_host(dt(), {cols}, seed++);
    DeviceTensor gdy = to_device(dy), g16 = to_device(db), g32 = to_device(widened(db));
    bias_backward(gpu(), g16.t, gdy.t);
    bias_backward(gpu(), g32.t, gdy.t);
    expect_bitwise(to_host(g16), rounded(to_host(g32)), "bias_backward, 16-bit db" + tag);
    HostTensor c16 = db;
    bias_backward(cpu(), c16.t, dy.t);
    expect_close(to_host(g16), c16, tolerance(dt()), "bias_backward, 16-bit db vs the CPU" + tag);
  }
  for (int64_t C : {1000, 98}) {  // the fused backward, and the two-pass form
    const int64_t R = 300;
    const std::string tag = " C=" + std::to_string(C);
    HostTensor x = random_host(dt(), {R, C}, seed++, -2.0f, 2.0f), w = random_host(dt(), {C}, seed++, 0.5f, 1.5f);
    HostTensor b = random_host(dt(), {C}, seed++), dy = random_host(dt(), {R, C}, seed++);
    DeviceTensor gx = to_device(x), gw = to_device(w), gb = to_device(b), gdy = to_device(dy);
    DeviceTensor gy = device_empty(dt(), {R, C}), gmean = device_empty(DType::f32, {R}), grstd = device_empty(DType::f32, {R});
    layernorm_forward(gpu(), gy.t, gmean.t, grstd.t, gx.t, gw.t, gb.t);
    HostTensor dx0 = random_host(dt(), {R, C}, seed++);
    HostTensor p0[4] = {random_host(dt(), {C}, seed++), random_host(dt(), {C}, seed++), random_host(dt(), {C}, seed++),
                        random_host(dt(), {C}, seed++)};  // dw, db, sum before, sum after
    DeviceTensor dx16 = to_device(dx0), dx32 = to_device(dx0);
    DeviceTensor q16[4] = {to_device(p0[0]), to_device(p0[1]), to_device(p0[2]), to_device(p0[3])};
    DeviceTensor q32[4] = {to_device(widened(p0[0])), to_device(widened(p0[1])), to_device(widened(p0[2])),
                           to_device(widened(p0[3]))};
    const ResidualColumnSums s16{q16[2].t, q16[3].t, false, true}, s32{q32[2].t, q32[3].t, false, true};
    layernorm_backward(gpu(), dx16.t, q16[0].t, q16[1].t, gdy.t, gx.t, gw.t, gmean.t, grstd.t, true, &s16);
    layernorm_backward(gpu(), dx32.t, q32[0].t, q32[1].t, gdy.t, gx.t, gw.t, gmean.t, grstd.t, true, &s32);
    expect_bitwise(to_host(dx16), to_host(dx32), "layernorm_backward dx beside 16-bit gradients" + tag);
    const char* names[4] = {"dw", "db", "sum before", "sum after"};
    for (int i = 0; i < 4; ++i)
      expect_bitwise(to_host(q16[i]), rounded(to_host(q32[i])), std::string("layernorm_backward 16-bit ") + names[i] + tag);
  }
  {
    const int64_t B = 3, T = 20, V = 50, C = 40;
    HostTensor tokens(DType::i32, {B, T});
    std::mt19937 gen(seed++);
    for (int64_t i = 0; i < B * T; ++i) tokens.t.ptr<int32_t>()[i] = int32_t(gen() % 12);  // many repeats
    HostTensor dout = random_host(dt(), {B, T, C}, seed++), wte = random_host(dt(), {V, C}, seed++),
               wpe = random_host(dt(), {T, C}, seed++);
    DeviceTensor gtok = to_device(tokens), gdout = to_device(dout);
    DeviceTensor te16 = to_device(wte), pe16 = to_device(wpe), te32 = to_device(widened(wte)), pe32 = to_device(widened(wpe));
    embedding_backward(gpu(), te16.t, pe16.t, gdout.t, gtok.t);
    embedding_backward(gpu(), te32.t, pe32.t, gdout.t, gtok.t);
    expect_bitwise(to_host(te16), rounded(to_host(te32)), "embedding_backward 16-bit dwte");
    expect_bitwise(to_host(pe16), rounded(to_host(pe32)), "embedding_backward 16-bit dwpe");
  }
  {
    const int64_t n = 1001;
    HostTensor grad = random_host(dt(), {n}, seed++), master = random_host(DType::f32, {n}, seed++);
    HostTensor m = random_host(DType::f32, {n}, seed++, -0.1f, 0.1f), v = random_host(DType::f32, {n}, seed++, 0.0f, 0.01f);
    DeviceTensor g16 = to_device(grad), g32 = to_device(widened(grad));
    DeviceTensor w1 = to_device(master), m1 = to_device(m), v1 = to_device(v), o1 = device_empty(dt(), {n});
    DeviceTensor w2 = to_device(master), m2 = to_device(m), v2 = to_device(v), o2 = device_empty(dt(), {n});
    AdamWHyper h;
    h.lr = 1e-3f;
    h.weight_decay = 0.1f;
    h.step = 3;
    adamw_step(gpu(), w1.t, m1.t, v1.t, g16.t, o1.t, h, 0.5f);
    adamw_step(gpu(), w2.t, m2.t, v2.t, g32.t, o2.t, h, 0.5f);
    for (auto [a, b, what] : {std::tuple{&w1, &w2, "master"}, {&m1, &m2, "m"}, {&v1, &v2, "v"}, {&o1, &o2, "params"}})
      expect_bitwise(to_host(*a), to_host(*b), std::string("adamw with 16-bit gradients: ") + what);
    if (dt() == DType::bf16) {  // split masters: o1/o2 are the high halves, the low ones start at -0.0
      DeviceTensor lo1 = device_empty(DType::bf16, {n}), lo2 = device_empty(DType::bf16, {n});
      fill(gpu(), lo1.t, -0.0f);
      fill(gpu(), lo2.t, -0.0f);
      adamw_step(gpu(), lo1.t, m1.t, v1.t, g16.t, o1.t, h, 0.5f);
      adamw_step(gpu(), lo2.t, m2.t, v2.t, g32.t, o2.t, h, 0.5f);
      expect_bitwise(to_host(lo1), to_host(lo2), "split adamw with 16-bit gradients: low halves");
      expect_bitwise(to_host(o1), to_host(o2), "split adamw with 16-bit gradients: parameters");
    }
  }
}

TEST_P(Parity, AdamW) {
  const int64_t n = 1000;
  HostTensor master = random_host(DType::f32, {n}, 100), m = random_host(DType::f32, {n}, 101, -0.1f, 0.1f);
  HostTensor v = random_host(DType::f32, {n}, 102, 0.0f, 0.01f), grad = random_host(DType::f32, {n}, 103);
  DeviceTensor gmaster = to_device(master), gm = to_device(m), gv = to_device(v), ggrad = to_device(grad);
  HostTensor params(dt(), {n});
  DeviceTensor gparams = device_empty(dt(), {n});
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  h.step = 3;
  adamw_step(cpu(), master.t, m.t, v.t, grad.t, params.t, h, 0.5f);
  adamw_step(gpu(), gmaster.t, gm.t, gv.t, ggrad.t, gparams.t, h, 0.5f);
  expect_close(to_host(gmaster), master, tolerance(DType::f32), "adamw master");
  expect_close(to_host(gm), m, tolerance(DType::f32), "adamw m");
  expect_close(to_host(gv), v, tolerance(DType::f32), "adamw v");
  expect_close(to_host(gparams), params, tolerance(dt()), "adamw params_out");
  // without params_out
  adamw_step(cpu(), master.t, m.t, v.t, grad.t, Tensor(), h, 1.0f);
  adamw_step(gpu(), gmaster.t, gm.t, gv.t, ggrad.t, Tensor(), h, 1.0f);
  expect_close(to_host(gmaster), master, tolerance(DType::f32), "adamw master (no params_out)");
}

// The step's values on the device (core/step_scalars.h): the CUDA adamw_step_scalars equals the
// CPU's bitwise (clipped, unclipped, non-finite), and AdamW reading them equals AdamW given the same
// values by the host, bitwise; with kApply 0 nothing changes.
TEST_P(Parity, AdamWFromStepScalars) {
  for (auto [loss_sum, norm_sq] : {std::pair{7.0f, 9.0e6f}, std::pair{7.0f, 2.5e5f}, std::pair{NAN, 1.0f},
                                   std::pair{7.0f, INFINITY}}) {
    HostTensor s(DType::f32, {kStepScalarCount}), l(DType::f32, {1}), q(DType::f32, {1});
    s.set(kLossScale, 1024.0f);
    s.set(kMaxNorm, 1.0f);
    l.set(0, loss_sum);
    q.set(0, norm_sq);
    DeviceTensor gs = to_device(s), gl = to_device(l), gq = to_device(q);
    adamw_step_scalars(cpu(), s.t, l.t, q.t);
    adamw_step_scalars(gpu(), gs.t, gl.t, gq.t);
    expect_bitwise(to_host(gs), s, "step scalars for norm^2 " + std::to_string(norm_sq));
  }
  const int64_t n = 1001;
  HostTensor master = random_host(DType::f32, {n}, 110), m = random_host(DType::f32, {n}, 111, -0.1f, 0.1f);
  HostTensor v = random_host(DType::f32, {n}, 112, 0.0f, 0.01f), grad = random_host(dt(), {n}, 113);
  DeviceTensor a_master = to_device(master), a_m = to_device(m), a_v = to_device(v), g = to_device(grad);
  DeviceTensor b_master = to_device(master), b_m = to_device(m), b_v = to_device(v);
  DeviceTensor a_out = device_empty(dt(), {n}), b_out = device_empty(dt(), {n});
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  h.step = 5;
  adamw_step(gpu(), a_master.t, a_m.t, a_v.t, g.t, a_out.t, h, 0.125f);
  HostTensor s(DType::f32, {kStepScalarCount});
  s.set(kLr, h.lr);
  s.set(kBiasCorrection1, bias_correction(h.beta1, h.step));
  s.set(kBiasCorrection2, bias_correction(h.beta2, h.step));
  s.set(kGradScale, 0.125f);
  s.set(kApply, 0.0f);
  DeviceTensor skip = to_device(s);
  s.set(kApply, 1.0f);
  DeviceTensor apply = to_device(s);
  AdamWHyper hs = h;
  hs.lr = 0.0f;
  hs.step = 1;
  hs.scalars = skip.t;
  adamw_step(gpu(), b_master.t, b_m.t, b_v.t, g.t, b_out.t, hs, 99.0f);
  expect_bitwise(to_host(b_master), master, "skipped step: master");
  expect_bitwise(to_host(b_m), m, "skipped step: m");
  hs.scalars = apply.t;
  adamw_step(gpu(), b_master.t, b_m.t, b_v.t, g.t, b_out.t, hs, 99.0f);
  expect_bitwise(to_host(b_master), to_host(a_master), "master");
  expect_bitwise(to_host(b_m), to_host(a_m), "m");
  expect_bitwise(to_host(b_v), to_host(a_v), "v");
  expect_bitwise(to_host(b_out), to_host(a_out), "params_out");
}

// 20 runs of uneven lengths, with and without weight decay: a vector of four can straddle a run's
// end, and CUDA needs two launches (16 runs each at most).
AdamWRuns uneven_runs() {
  AdamWRuns runs;
  int64_t n = 0;
  for (int r = 0; r < 20; ++r) {
    n += 1 + (r * 37) % 53;
    runs.ends.push_back(n);
    runs.decays.push_back(r % 3 != 1);
  }
  return runs;
}

// Runs with and without weight decay in one call (uneven_runs).
TEST_P(Parity, AdamWRuns) {
  const AdamWRuns runs = uneven_runs();
  const int64_t n = runs.ends.back();
  HostTensor master = random_host(DType::f32, {n}, 104), m = random_host(DType::f32, {n}, 105, -0.1f, 0.1f);
  HostTensor v = random_host(DType::f32, {n}, 106, 0.0f, 0.01f), grad = random_host(DType::f32, {n}, 107);
  DeviceTensor gmaster = to_device(master), gm = to_device(m), gv = to_device(v), ggrad = to_device(grad);
  HostTensor params(dt(), {n});
  DeviceTensor gparams = device_empty(dt(), {n});
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.5f;
  h.step = 2;
  adamw_step(cpu(), master.t, m.t, v.t, grad.t, params.t, h, 0.5f, &runs);
  adamw_step(gpu(), gmaster.t, gm.t, gv.t, ggrad.t, gparams.t, h, 0.5f, &runs);
  expect_close(to_host(gmaster), master, tolerance(DType::f32), "adamw runs master");
  expect_close(to_host(gm), m, tolerance(DType::f32), "adamw runs m");
  expect_close(to_host(gv), v, tolerance(DType::f32), "adamw runs v");
  expect_close(to_host(gparams), params, tolerance(dt()), "adamw runs params_out");
}

// Split masters (bf16 parameters and the low halves beside them, core/dtype.h): the CUDA kernel
// computes what the CPU does, over 20 runs (two launches), from an aligned start (the vectorized
// path) and from one element further (the element-wise path). (Independent of the parameter dtype.)
TEST_P(Parity, AdamWSplitMasters) {
  const AdamWRuns runs = uneven_runs();
  const int64_t n = runs.ends.back();
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.5f;
  h.step = 2;
  for (int64_t offset : {0, 1}) {
    const std::string tag = offset ? " (unaligned)" : "";
    HostTensor master = random_host(DType::f32, {n + 1}, 120), m = random_host(DType::f32, {n + 1}, 121, -0.1f, 0.1f);
    HostTensor v = random_host(DType::f32, {n + 1}, 122, 0.0f, 0.01f), grad = random_host(DType::f32, {n + 1}, 123);
    HostTensor hi(DType::bf16, {n + 1}), lo(DType::bf16, {n + 1});
    for (int64_t i = 0; i <= n; ++i)
      split_master(master.t.ptr<float>()[i], hi.t.ptr<bf16_t>()[i], lo.t.ptr<uint16_t>()[i]);
    DeviceTensor ghi = to_device(hi), glo = to_device(lo), gm = to_device(m), gv = to_device(v), ggrad = to_device(grad);
    auto part = [&](const Tensor& t) { return t.slice(offset, {n}); };
    adamw_step(cpu(), part(lo.t), part(m.t), part(v.t), part(grad.t), part(hi.t), h, 0.5f, &runs);
    adamw_step(gpu(), part(glo.t), part(gm.t), part(gv.t), part(ggrad.t), part(ghi.t), h, 0.5f, &runs);
    HostTensor dhi = to_host(ghi), dlo = to_host(glo), joined(DType::f32, {n + 1}), djoined(DType::f32, {n + 1});
    for (int64_t i = 0; i <= n; ++i) {
      joined.t.ptr<float>()[i] = join_master(hi.t.ptr<bf16_t>()[i], lo.t.ptr<uint16_t>()[i]);
      djoined.t.ptr<float>()[i] = join_master(dhi.t.ptr<bf16_t>()[i], dlo.t.ptr<uint16_t>()[i]);
    }
    expect_close(djoined, joined, tolerance(DType::f32), "adamw split master" + tag);
    expect_close(to_host(gm), m, tolerance(DType::f32), "adamw split m" + tag);
    expect_close(to_host(gv), v, tolerance(DType::f32), "adamw split v" + tag);
    expect_close(dhi, hi, tolerance(DType::bf16), "adamw split parameters" + tag);
    if (offset) {
      EXPECT_EQ(djoined.t.ptr<float>()[0], master.t.ptr<float>()[0]) << "element 0 is not in the slice";
    }
  }
  // The low halves start as 0x8000 (the bits of bf16 -0.0: a fill that keeps the sign), and a NaN
  // master stays NaN in its parameter too.
  DeviceTensor glow = device_empty(DType::bf16, {8});
  fill(gpu(), glow.t, -0.0f);
  HostTensor low = to_host(glow);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(low.t.ptr<uint16_t>()[i], 0x8000u) << i;
  HostTensor hi8(DType::bf16, {8}), m8(DType::f32, {8}), v8(DType::f32, {8}), g8(DType::f32, {8});
  for (int64_t i = 0; i < 8; ++i) {
    hi8.t.ptr<bf16_t>()[i] = to_bf16(i == 3 ? std::nanf("") : 0.5f);
    m8.t.ptr<float>()[i] = v8.t.ptr<float>()[i] = 0.0f;
    g8.t.ptr<float>()[i] = 0.1f;
  }
  DeviceTensor ghi8 = to_device(hi8), gm8 = to_device(m8), gv8 = to_device(v8), gg8 = to_device(g8);
  adamw_step(gpu(), glow.t, gm8.t, gv8.t, gg8.t, ghi8.t, h, 1.0f);
  HostTensor after = to_host(ghi8);
  EXPECT_TRUE(std::isnan(to_float(after.t.ptr<bf16_t>()[3])));
  EXPECT_FALSE(std::isnan(to_float(after.t.ptr<bf16_t>()[2])));
}

TEST_P(Parity, Sums) {
  HostTensor x = random_host(dt(), {5003}, 110);
  DeviceTensor gx = to_device(x);
  for (bool squares : {false, true}) {
    HostTensor out(DType::f32, {1});
    out.set(0, 1.5f);
    DeviceTensor gout = to_device(out);
    if (squares) {
      sum_squares_accumulate(cpu(), out.t, x.t);
      sum_squares_accumulate(gpu(), gout.t, gx.t);
    } else {
      sum_accumulate(cpu(), out.t, x.t);
      sum_accumulate(gpu(), gout.t, gx.t);
    }
    expect_close(to_host(gout), out, tolerance(DType::f32, 10.0f), squares ? "sum_squares_accumulate" : "sum_accumulate");
  }
}

void attention_case(Runtime& cpu, Runtime& gpu, DType dt, int64_t B, int64_t T, int64_t H, int64_t hd,
                    float dropout, bool deterministic, int64_t kv_heads, int64_t window, int64_t doc_len) {
  const int64_t C = H * hd, Hkv = kv_heads > 0 ? kv_heads : H, W = C + 2 * Hkv * hd;
  AttentionHeads heads{int(H), int(Hkv), window}, gheads = heads;
  AttentionDropout drop;
  drop.p = dropout;
  drop.seed = 99;
  drop.stream = 5;
  drop.sample_offset = 3;
  auto dev = [&](const HostTensor& h) {
    DeviceTensor d;
    d.buf = Buffer(gpu.allocator(), h.bytes.size(), "attention test");
    d.t = d.buf.tensor(h.t.dtype, h.t.shape);
    copy(gpu, d.t, h.t);
    return d;
  };
  auto host = [&](const DeviceTensor& d) {
    HostTensor h(d.t.dtype, d.t.shape);
    copy(gpu, h.t, d.t);
    gpu.synchronize();
    return h;
  };
  std::string tag = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                    " Hkv=" + std::to_string(Hkv) + " hd=" + std::to_string(hd) + " dropout=" + std::to_string(dropout) +
                    " window=" + std::to_string(window) + " documents of 1.." + std::to_string(2 * doc_len);
  // Document masking: token 0 ends each document, the documents' lengths drawn from [1, 2 doc_len].
  HostTensor tokens(DType::i32, {B, T}), starts(DType::i32, {B, T});
  DeviceTensor gtokens, gstarts;
  if (doc_len > 0) {
    std::mt19937 g(72);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0, left = 0; t < T; ++t) {
        if (left == 0) left = std::uniform_int_distribution<int64_t>(1, 2 * doc_len)(g);
        tokens.t.ptr<int32_t>()[b * T + t] = --left == 0 ? 0 : 1;
      }
    gtokens = dev(tokens);
    gstarts = dev(starts);
    document_starts(cpu, starts.t, tokens.t, 0);
    document_starts(gpu, gstarts.t, gtokens.t, 0);
    expect_bitwise(host(gstarts), starts, "document_starts" + tag);
    heads.doc_starts = starts.t;
    gheads.doc_starts = gstarts.t;
  }
  HostTensor qkv = random_host(dt, {B, T, W}, 70), dout = random_host(dt, {B, T, C}, 71);
  HostTensor out(dt, {B, T, C}), lse(DType::f32, {B, H, T}), dqkv(dt, {B, T, W});
  DeviceTensor gqkv = dev(qkv), gdout = dev(dout), gout = dev(out), glse = dev(lse), gdqkv = dev(dqkv);
  attention_forward(cpu, out.t, lse.t, qkv.t, heads, drop);
  attention_forward(gpu, gout.t, glse.t, gqkv.t, gheads, drop);
  expect_close(host(gout), out, tolerance(dt, 2.0f), "attention_forward out" + tag);
  expect_close(host(glse), lse, tolerance(dt == DType::f32 ? DType::f32 : DType::f16), "attention_forward lse" + tag);
  attention_backward(cpu, dqkv.t, dout.t, qkv.t, out.t, lse.t, heads, drop);
  attention_backward(gpu, gdqkv.t, gdout.t, gqkv.t, gout.t, glse.t, gheads, drop);
  HostTensor first = host(gdqkv);
  expect_close(first, dqkv, tolerance(dt, 4.0f), "attention_backward dqkv" + tag);
  if (!deterministic) return;
  // Determinism (train.deterministic): a second run over a poisoned dqkv must match bitwise, which
  // also shows that every element of dqkv is written.
  fill(gpu, gdqkv.t, 7.0f);
  attention_backward(gpu, gdqkv.t, gdout.t, gqkv.t, gout.t, glse.t, gheads, drop);
  expect_bitwise(host(gdqkv), first, "attention_backward determinism" + tag);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Parity, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(CudaAllocator, CurrentPeakReservedStats) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  RuntimeOptions o;
  o.device = Device::CUDA(0);
  Runtime rt(o);
  Allocator& a = rt.allocator();
  EXPECT_TRUE(a.device() == Device::CUDA(0));
  MemoryStats s0 = a.stats();
  void* p1 = a.allocate(1000, "test block 1");
  void* p2 = a.allocate(size_t(3) << 20, "test block 2");
  MemoryStats s1 = a.stats();
  EXPECT_GE(s1.current, s0.current + 1000 + (size_t(3) << 20));
  EXPECT_GE(s1.peak, s1.current);
  EXPECT_GE(s1.reserved, s1.current);
  a.release(p1);
  a.release(p2);
  MemoryStats s2 = a.stats();
  EXPECT_EQ(s2.current, s0.current);
  EXPECT_EQ(s2.peak, s1.peak);
  EXPECT_EQ(s2.reserved, s1.reserved);  // cached, not returned to the driver
  void* p3 = a.allocate(3 << 20, "test block 3");  // reuses the cached block
  EXPECT_EQ(p3, p2);
  EXPECT_EQ(a.stats().reserved, s1.reserved);
  a.release(p3);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, a.stats().current);

  Allocator& h = rt.host_allocator();
  void* hp = h.allocate(4096, "pinned test block");
  EXPECT_GE(h.stats().current, size_t(4096));
  h.release(hp);
  EXPECT_EQ(h.stats().current, size_t(0));
}

}  // namespace
}  // namespace trellis
