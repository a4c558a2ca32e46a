// The ops of a vocabulary-parallel embedding and cross-entropy (CPU backend): the (N, Vp) logits and
// the (Vp, C) token table split by vocabulary over t = 1, 2, 3, 4 "ranks" in one process, the
// all-reduces between the passes done by hand (MAX / SUM in rank order), compared with the
// unsplit ops: softmax_cross_entropy_forward/backward and embedding_forward/backward.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/runtime.h"

using namespace trellis;

namespace {

Runtime& rt() {
  static Runtime r{RuntimeOptions{}};
  return r;
}

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

// A CPU tensor over std::vector storage; get/set convert through float.
class HostTensor {
 public:
  HostTensor(DType t, Shape s) : dtype_(t), shape_(s), storage_(size_t(s.numel()) * dtype_size(t) / 8 + 1) {}
  Tensor t() { return Tensor(storage_.data(), dtype_, Device::CPU(), shape_); }
  int64_t numel() const { return shape_.numel(); }
  float get(int64_t i) const {
    const void* p = storage_.data();
    switch (dtype_) {
      case DType::f32: return static_cast<const float*>(p)[i];
      case DType::bf16: return to_float(static_cast<const bf16_t*>(p)[i]);
      case DType::f16: return to_float(static_cast<const f16_t*>(p)[i]);
      case DType::i32: return float(static_cast<const int32_t*>(p)[i]);
      default: ADD_FAILURE() << "dtype"; return 0;
    }
  }
  void set(int64_t i, float v) {
    void* p = storage_.data();
    switch (dtype_) {
      case DType::f32: static_cast<float*>(p)[i] = v; break;
      case DType::bf16: static_cast<bf16_t*>(p)[i] = to_bf16(v); break;
      case DType::f16: static_cast<f16_t*>(p)[i] = to_f16(v); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      default: ADD_FAILURE() << "dtype";
    }
  }
  HostTensor& randomize(std::mt19937& g, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set(i, u(g));
    return *this;
  }
  bool bitwise_equal(const HostTensor& o) const {
    return numel() == o.numel() && std::memcmp(storage_.data(), o.storage_.data(), size_t(numel()) * dtype_size(dtype_)) == 0;
  }

 private:
  DType dtype_;
  Shape shape_;
  std::vector<uint64_t> storage_;
};

// Columns [c0, c0 + cols) of a (rows, full_cols) tensor, as a contiguous (rows, cols) tensor.
HostTensor column_block(const HostTensor& full, DType dt, int64_t rows, int64_t full_cols, int64_t c0, int64_t cols) {
  HostTensor s(dt, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s.set(r * cols + c, full.get(r * full_cols + c0 + c));
  return s;
}

// Relative tolerance of a gradient element: the sharded log-sum-exp may differ from the full one in
// its last f32 bits (~1e-6 absolute at these sizes), which moves exp(x - lse) by as much relatively
// and may move a 16-bit result to the neighbouring value (one ulp).
float ulp(DType t) { return t == DType::bf16 ? 0x1p-7f : t == DType::f16 ? 0x1p-10f : 4e-6f; }

// The sharded cross-entropy of one (N, Vp) logits matrix over t shards, with the all-reduces done
// by hand; losses (f32, N) and the dlogits shards reassembled into (N, Vp).
struct ShardedXent {
  std::vector<float> losses;
  HostTensor dlogits;
  ShardedXent(DType dt, int64_t N, int64_t Vp) : losses(size_t(N)), dlogits(dt, {N, Vp}) {}
};

ShardedXent sharded_xent(const HostTensor& logits, HostTensor& targets, DType dt, int64_t N, int64_t Vp, int64_t V,
                         int t, float dloss) {
  const int64_t cols = Vp / t;
  std::vector<HostTensor> shards;
  for (int r = 0; r < t; ++r) shards.push_back(column_block(logits, dt, N, Vp, r * cols, cols));
  // Pass 1 and the all-reduce MAX.
  HostTensor gmax(DType::f32, {N});
  for (int64_t i = 0; i < N; ++i) gmax.set(i, -INFINITY);
  for (int r = 0; r < t; ++r) {
    HostTensor m(DType::f32, {N});
    vocab_parallel_xent_max(rt(), m.t(), shards[size_t(r)].t(), V, r * cols);
    for (int64_t i = 0; i < N; ++i) gmax.set(i, std::max(gmax.get(i), m.get(i)));
  }
  // Pass 2 and the all-reduce SUM (in rank order, f32, as one (2N) buffer: sum | target logit).
  HostTensor gstats(DType::f32, {2 * N});
  for (int64_t i = 0; i < 2 * N; ++i) gstats.set(i, 0.0f);
  for (int r = 0; r < t; ++r) {
    HostTensor st(DType::f32, {2 * N});
    Tensor stt = st.t();
    vocab_parallel_xent_sum_exp(rt(), stt.slice(0, {N}), stt.slice(N, {N}), shards[size_t(r)].t(), targets.t(),
                                gmax.t(), V, r * cols);
    for (int64_t i = 0; i < 2 * N; ++i) gstats.set(i, gstats.get(i) + st.get(i));
  }
  Tensor gs = gstats.t();
  // Pass 3 on every shard: losses (the same on every rank) and the dlogits shard, in place and not.
  ShardedXent out(dt, N, Vp);
  for (int r = 0; r < t; ++r) {
    SCOPED_TRACE("shard " + std::to_string(r) + " of " + std::to_string(t));
    HostTensor losses(DType::f32, {N}), losses_only(DType::f32, {N}), d(dt, {N, cols});
    vocab_parallel_xent_loss_and_grad(rt(), losses.t(), d.t(), shards[size_t(r)].t(), targets.t(), gmax.t(),
                                      gs.slice(0, {N}), gs.slice(N, {N}), V, r * cols, dloss);
    vocab_parallel_xent_loss_and_grad(rt(), losses_only.t(), Tensor(), shards[size_t(r)].t(), targets.t(), gmax.t(),
                                      gs.slice(0, {N}), gs.slice(N, {N}), V, r * cols, dloss);
    EXPECT_TRUE(losses_only.bitwise_equal(losses)) << "losses without dlogits differ";
    vocab_parallel_xent_loss_and_grad(rt(), losses_only.t(), shards[size_t(r)].t(), shards[size_t(r)].t(),
                                      targets.t(), gmax.t(), gs.slice(0, {N}), gs.slice(N, {N}), V, r * cols, dloss);
    EXPECT_TRUE(shards[size_t(r)].bitwise_equal(d)) << "in place differs";
    for (int64_t i = 0; i < N; ++i) {
      if (r == 0) out.losses[size_t(i)] = losses.get(i);
      else EXPECT_EQ(losses.get(i), out.losses[size_t(i)]) << "ranks disagree on the loss of row " << i;
      for (int64_t c = 0; c < cols; ++c) out.dlogits.set(i * Vp + r * cols + c, d.get(i * cols + c));
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- cross-entropy

TEST(VocabParallelOps, CrossEntropyShardsMatchTheFullOp) {
  std::mt19937 g(21);
  const float dloss = 0.37f;
  struct Case {
    int64_t N, Vp, V;
  };
  // No padding; padding inside the last shard; at t = 4 a shard of padding only (Vp 64, V 40).
  for (const Case& k : {Case{9, 48, 48}, Case{11, 96, 83}, Case{10, 64, 40}}) {
    for (DType dt : kFloatTypes) {
      for (int t : {1, 2, 3, 4}) {
        if (k.Vp % t) continue;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " N " + std::to_string(k.N) + " Vp " + std::to_string(k.Vp) +
                     " V " + std::to_string(k.V) + " t " + std::to_string(t));
        const int64_t cols = k.Vp / t;
        HostTensor logits(dt, {k.N, k.Vp}), targets(DType::i32, {k.N});
        logits.randomize(g, -4.0f, 4.0f);
        for (int64_t i = 0; i < k.N; ++i)
          for (int64_t c = k.V; c < k.Vp; ++c) logits.set(i * k.Vp + c, 100.0f);  // padding must not count
        // Row 0 has no target; then a target in every shard that has real columns (its first and
        // last real column), the rest random.
        std::vector<int32_t> tg;
        tg.push_back(-1);
        for (int r = 0; r < t; ++r) {
          const int64_t b = r * cols, e = std::min(k.V, b + cols);
          if (b >= e) continue;
          tg.push_back(int32_t(b));
          tg.push_back(int32_t(e - 1));
        }
        std::uniform_int_distribution<int32_t> ut(0, int32_t(k.V - 1));
        while (int64_t(tg.size()) < k.N) tg.push_back(ut(g));
        ASSERT_EQ(int64_t(tg.size()), k.N);
        for (int64_t i = 0; i < k.N; ++i) targets.set(i, float(tg[size_t(i)]));

        HostTensor ref_losses(DType::f32, {k.N}), ref_d(dt, {k.N, k.Vp});
        softmax_cross_entropy_backward(rt(), ref_d.t(), ref_losses.t(), logits.t(), targets.t(), k.V, dloss);
        ShardedXent got = sharded_xent(logits, targets, dt, k.N, k.Vp, k.V, t, dloss);
        // Losses: the log of an f32 sum of t f32 partial sums instead of one double sum.
        for (int64_t i = 0; i < k.N; ++i) {
          const float ref = ref_losses.get(i);
          EXPECT_NEAR(got.losses[size_t(i)], ref, 2e-6f + 2e-6f * std::fabs(ref)) << "loss of row " << i;
          if (tg[size_t(i)] < 0) {
            EXPECT_EQ(got.losses[size_t(i)], 0.0f);
          }
        }
        for (int64_t i = 0; i < k.N; ++i)
          for (int64_t c = 0; c < k.Vp; ++c) {
            const float ref = ref_d.get(i * k.Vp + c), v = got.dlogits.get(i * k.Vp + c);
            if (c >= k.V || tg[size_t(i)] < 0) {
              EXPECT_EQ(v, 0.0f) << "padded column or row without a target: " << i << "," << c;
            } else {
              EXPECT_NEAR(v, ref, 1e-6f + ulp(dt) * std::fabs(ref)) << "dlogits " << i << "," << c;
            }
          }
      }
    }
  }
}

TEST(VocabParallelOps, CrossEntropyPassesMatchTheirDefinitions) {
  // One shard in the middle of the vocabulary, the statistics checked against double references.
  std::mt19937 g(22);
  const int64_t N = 6, cols = 16, V = 40, begin = 32;  // global columns [32, 48): 8 real, 8 padding
  HostTensor x(DType::f32, {N, cols}), targets(DType::i32, {N}), mx(DType::f32, {N}), gmax(DType::f32, {N});
  HostTensor sum(DType::f32, {N}), xt(DType::f32, {N});
  x.randomize(g, -3.0f, 3.0f);
  const int32_t tg[N] = {-1, 32, 39, 5, 31, 36};  // none, first, last real, another shard's (twice), inside
  for (int64_t i = 0; i < N; ++i) {
    targets.set(i, float(tg[i]));
    gmax.set(i, 2.5f + 0.1f * float(i));
  }
  vocab_parallel_xent_max(rt(), mx.t(), x.t(), V, begin);
  vocab_parallel_xent_sum_exp(rt(), sum.t(), xt.t(), x.t(), targets.t(), gmax.t(), V, begin);
  for (int64_t i = 0; i < N; ++i) {
    float m = -INFINITY;
    double s = 0;
    for (int64_t c = 0; c < V - begin; ++c) {
      m = std::max(m, x.get(i * cols + c));
      s += std::exp(double(x.get(i * cols + c)) - double(gmax.get(i)));
    }
    EXPECT_EQ(mx.get(i), m);
    EXPECT_NEAR(sum.get(i), s, 1e-6 * s);
    const bool here = tg[i] >= begin && tg[i] < V;
    EXPECT_EQ(xt.get(i), here ? x.get(i * cols + tg[i] - begin) : 0.0f) << i;
  }
  // A shard of padding only: max -inf, sum 0, no target logit; gradient all zeros.
  HostTensor d(DType::f32, {N, cols}), losses(DType::f32, {N});
  vocab_parallel_xent_max(rt(), mx.t(), x.t(), V, 48);
  vocab_parallel_xent_sum_exp(rt(), sum.t(), xt.t(), x.t(), targets.t(), gmax.t(), V, 48);
  HostTensor one(DType::f32, {N});
  for (int64_t i = 0; i < N; ++i) one.set(i, 1.0f);
  vocab_parallel_xent_loss_and_grad(rt(), losses.t(), d.t(), x.t(), targets.t(), gmax.t(), one.t(), xt.t(), V, 48,
                                    1.0f);
  for (int64_t i = 0; i < N; ++i) {
    EXPECT_EQ(mx.get(i), -INFINITY);
    EXPECT_EQ(sum.get(i), 0.0f);
    EXPECT_EQ(xt.get(i), 0.0f);
    // loss = log(1) + max - 0
    EXPECT_EQ(losses.get(i), tg[i] < 0 ? 0.0f : gmax.get(i));
  }
  for (int64_t i = 0; i < N * cols; ++i) EXPECT_EQ(d.get(i), 0.0f);
}

TEST(VocabParallelOps, CrossEntropyIndependentOfThreadCount) {
  std::mt19937 g(23);
  const int64_t N = 64, V = 1000, cols = 512, begin = 512;  // the second of two shards of 1024 columns
  HostTensor x(DType::bf16, {N, cols}), targets(DType::i32, {N}), gmax(DType::f32, {N}), one(DType::f32, {N});
  x.randomize(g, -5.0f, 5.0f);
  std::uniform_int_distribution<int32_t> ut(-1, int32_t(V - 1));
  for (int64_t i = 0; i < N; ++i) {
    targets.set(i, float(ut(g)));
    gmax.set(i, 5.0f);
    one.set(i, 300.0f);
  }
  auto run = [&](int threads, HostTensor& mx, HostTensor& sum, HostTensor& xt, HostTensor& loss, HostTensor& d) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    vocab_parallel_xent_max(rt(), mx.t(), x.t(), V, begin);
    vocab_parallel_xent_sum_exp(rt(), sum.t(), xt.t(), x.t(), targets.t(), gmax.t(), V, begin);
    vocab_parallel_xent_loss_and_grad(rt(), loss.t(), d.t(), x.t(), targets.t(), gmax.t(), one.t(), xt.t(), V,
                                      begin, 0.5f);
    omp_set_num_threads(saved);
  };
  HostTensor m1(DType::f32, {N}), s1(DType::f32, {N}), t1(DType::f32, {N}), l1(DType::f32, {N}), d1(DType::bf16, {N, cols});
  HostTensor m4(DType::f32, {N}), s4(DType::f32, {N}), t4(DType::f32, {N}), l4(DType::f32, {N}), d4(DType::bf16, {N, cols});
  run(1, m1, s1, t1, l1, d1);
  run(4, m4, s4, t4, l4, d4);
  EXPECT_TRUE(m1.bitwise_equal(m4));
  EXPECT_TRUE(s1.bitwise_equal(s4));
  EXPECT_TRUE(t1.bitwise_equal(t4));
  EXPECT_TRUE(l1.bitwise_equal(l4));
  EXPECT_TRUE(d1.bitwise_equal(d4));
}

// ---------------------------------------------------------------- embedding

TEST(VocabParallelOps, EmbeddingShardsMatchTheFullTable) {
  std::mt19937 g(24);
  const int64_t B = 3, T = 5, Vp = 12, C = 7, P = 8;
  for (DType dt : kFloatTypes) {
    HostTensor tokens(DType::i32, {B, T}), wte(dt, {Vp, C}), wpe(dt, {P, C}), dout(dt, {B, T, C});
    std::uniform_int_distribution<int32_t> ut(0, int32_t(Vp - 1));
    for (int64_t i = 0; i < B * T; ++i) tokens.set(i, float(i < Vp ? int32_t(i) : ut(g)));  // every row, some twice
    wte.randomize(g);
    wpe.randomize(g);
    dout.randomize(g);
    HostTensor ref(dt, {B, T, C}), ref_dwte(DType::f32, {Vp, C}), ref_dwpe(DType::f32, {P, C});
    ref_dwte.randomize(g);
    ref_dwpe.randomize(g);
    HostTensor dwte0 = ref_dwte, dwpe0 = ref_dwpe;  // the gradients before the backward (it accumulates)
    embedding_forward(rt(), ref.t(), tokens.t(), wte.t(), wpe.t());
    embedding_backward(rt(), ref_dwte.t(), ref_dwpe.t(), dout.t(), tokens.t());
    for (int t : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " t " + std::to_string(t));
      const int64_t rows = Vp / t;
      // Forward: the sum over shards (the all-reduce; exactly one shard contributes per token) ...
      std::vector<float> sum(size_t(B * T * C), 0.0f), sum_pos0(sum.size(), 0.0f);
      for (int r = 0; r < t; ++r) {
        HostTensor shard = column_block(wte, dt, 1, Vp * C, r * rows * C, rows * C);
        Tensor st = shard.t().view({rows, C});
        HostTensor out(dt, {B, T, C}), out_pos(dt, {B, T, C});
        embedding_forward(rt(), out.t(), tokens.t(), st, Tensor(), r * rows, Vp);
        // ... or with the positions added by one shard only.
        embedding_forward(rt(), out_pos.t(), tokens.t(), st, r == 0 ? wpe.t() : Tensor(), r * rows, Vp);
        for (int64_t i = 0; i < B * T; ++i) {
          const int64_t row = int64_t(tokens.get(i)) - r * rows;
          for (int64_t c = 0; c < C; ++c) {
            if (row < 0 || row >= rows) {
              EXPECT_EQ(out.get(i * C + c), 0.0f) << "another shard's token";
            }
            sum[size_t(i * C + c)] += out.get(i * C + c);
            sum_pos0[size_t(i * C + c)] += out_pos.get(i * C + c);
          }
        }
      }
      // ... then the positions added once, after the reduction, with `add` per sample.
      HostTensor got(dt, {B, T, C}), got_pos0(dt, {B, T, C});
      for (int64_t i = 0; i < B * T * C; ++i) {
        got.set(i, sum[size_t(i)]);
        got_pos0.set(i, sum_pos0[size_t(i)]);
      }
      Tensor gt = got.t();
      for (int64_t b = 0; b < B; ++b) {
        Tensor xb = gt.slice(b * T * C, {T, C});
        add(rt(), xb, xb, wpe.t().slice(0, {T, C}));
      }
      // One nonzero term per element before the positions: the same single rounding as the full op.
      EXPECT_TRUE(got.bitwise_equal(ref)) << "sharded lookup + positions after the reduction";
      EXPECT_TRUE(got_pos0.bitwise_equal(ref)) << "sharded lookup with positions on shard 0";

      // Backward: each shard's dwte is the matching slice of the full one (same order of the
      // sums: positions in order), and dwpe alone equals the full dwpe.
      for (int r = 0; r < t; ++r) {
        HostTensor dshard = column_block(dwte0, DType::f32, 1, Vp * C, r * rows * C, rows * C);
        embedding_backward(rt(), dshard.t().view({rows, C}), Tensor(), dout.t(), tokens.t(), r * rows, Vp);
        HostTensor ref_slice = column_block(ref_dwte, DType::f32, 1, Vp * C, r * rows * C, rows * C);
        EXPECT_TRUE(dshard.bitwise_equal(ref_slice)) << "dwte shard " << r;
      }
      HostTensor dpe = dwpe0;
      embedding_backward(rt(), Tensor(), dpe.t(), dout.t(), tokens.t());
      EXPECT_TRUE(dpe.bitwise_equal(ref_dwpe)) << "dwpe alone";
    }
  }
}

TEST(VocabParallelOps, EmbeddingBackwardIndependentOfThreadCount) {
  std::mt19937 g(25);
  const int64_t B = 8, T = 64, C = 96, Vp = 256, rows = 128, begin = 128;
  HostTensor tokens(DType::i32, {B, T}), dout(DType::f32, {B, T, C});
  std::uniform_int_distribution<int32_t> ut(0, int32_t(Vp - 1));
  for (int64_t i = 0; i < B * T; ++i) tokens.set(i, float(ut(g) % 40));  // many repeats
  dout.randomize(g);
  auto run = [&](int threads) {
    HostTensor d(DType::f32, {rows, C});
    for (int64_t i = 0; i < rows * C; ++i) d.set(i, 0.0f);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    embedding_backward(rt(), d.t(), Tensor(), dout.t(), tokens.t(), begin - 100, Vp);
    omp_set_num_threads(saved);
    return d;
  };
  EXPECT_TRUE(run(1).bitwise_equal(run(4)));
}

TEST(VocabParallelOps, EmbeddingRejectsAShardWithoutTheTableSize) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostTensor tokens(DType::i32, {1, 2}), wte(DType::f32, {4, 3}), out(DType::f32, {1, 2, 3});
  tokens.set(0, 0);
  tokens.set(1, 5);
  EXPECT_DEATH(embedding_forward(rt(), out.t(), tokens.t(), wte.t(), Tensor(), 4), "needs vocab_size");
  EXPECT_DEATH(embedding_forward(rt(), out.t(), tokens.t(), wte.t(), Tensor(), 4, 6), "outside a table of 6");
  EXPECT_DEATH(embedding_forward(rt(), out.t(), tokens.t(), wte.t(), Tensor(), 0, 5), "token 5 at 1 outside");
}
