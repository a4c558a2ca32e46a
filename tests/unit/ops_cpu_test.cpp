// Unit tests of the CPU backend of every op: float64 references per dtype, finite-difference
// checks of every backward, bitwise independence of the thread count, dropout mask properties.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/ops.h"
#include "core/philox.h"
#include "core/runtime.h"
#include "models/gpt_config.h"

using namespace trellis;

namespace {

Runtime& rt() {
  static Runtime r{RuntimeOptions{}};
  return r;
}

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

// A CPU tensor over std::vector storage; get/set convert through double.
class HostTensor {
 public:
  HostTensor(DType t, Shape s) : dtype_(t), shape_(s), storage_(size_t(s.numel()) * dtype_size(t) / 8 + 1) {}
  Tensor t() { return Tensor(storage_.data(), dtype_, Device::CPU(), shape_); }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  double get(int64_t i) const {
    const void* p = storage_.data();
    switch (dtype_) {
      case DType::f32: return static_cast<const float*>(p)[i];
      case DType::bf16: return to_float(static_cast<const bf16_t*>(p)[i]);
      case DType::f16: return to_float(static_cast<const f16_t*>(p)[i]);
      case DType::i32: return static_cast<const int32_t*>(p)[i];
      default: ADD_FAILURE() << "dtype"; return 0;
    }
  }
  void set(int64_t i, double v) {
    void* p = storage_.data();
    switch (dtype_) {
      case DType::f32: static_cast<float*>(p)[i] = float(v); break;
      case DType::bf16: static_cast<bf16_t*>(p)[i] = to_bf16(float(v)); break;
      case DType::f16: static_cast<f16_t*>(p)[i] = to_f16(float(v)); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      default: ADD_FAILURE() << "dtype";
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = get(i);
    return v;
  }
  // Uniform in [lo, hi), rounded to the dtype: the references see exactly what the op sees.
  HostTensor& randomize(std::mt19937& g, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set(i, u(g));
    return *this;
  }
  bool bitwise_equal(const HostTensor& o) const { return storage_ == o.storage_; }

 private:
  DType dtype_;
  Shape shape_;
  std::vector<uint64_t> storage_;
};

// Relative error of rounding a result to the dtype once, with a factor 2 of slack: half an ulp is
// 2^-24 (f32, 24 significant bits), 2^-9 (bf16, 8 bits), 2^-12 (f16, 11 bits).
double out_rtol(DType t) { return t == DType::bf16 ? 0x1p-8 : t == DType::f16 ? 0x1p-11 : 0x1p-23; }

// |got - ref| <= atol + rtol * |ref| element by element; reports the first few misses.
void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double atol, double rtol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = atol + rtol * std::fabs(ref[i]);
    if (!(std::fabs(got[i] - ref[i]) <= bound) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (bound " << bound << ")";
  }
}

// Central differences of loss() in every element of x (f32), against the analytic gradient.
// h = 1e-3 keeps the truncation error O(h^2) ~ 1e-6; the f32 rounding of the loss (~1e-6 for the
// small sums here) divided by 2h gives ~1e-3, hence the absolute tolerance.
void check_fd(HostTensor& x, const std::vector<double>& grad, const std::function<double()>& loss,
              const char* what) {
  const double h = 1e-3;
  std::vector<double> fd(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.get(i);
    x.set(i, x0 + h);
    const double xp = x.get(i), lp = loss();
    x.set(i, x0 - h);
    const double xm = x.get(i), lm = loss();
    x.set(i, x0);
    fd[size_t(i)] = (lp - lm) / (xp - xm);
  }
  expect_close(fd, grad, 3e-3, 1e-2, what);
}

// sum(r * out) in double: a random projection of an output, the scalar the FD checks differentiate.
double project(const HostTensor& r, const HostTensor& out) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += r.get(i) * out.get(i);
  return s;
}

// Runs f with 1 thread, then with 4, restoring the default.
template <typename F> void with_threads(int n, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// ---------------------------------------------------------------- elementwise

TEST(OpsCpu, FillCopyCastExact) {
  std::mt19937 g(1);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {3, 5});
    fill(rt(), x.t(), 1.5f);
    for (double v : x.values()) EXPECT_EQ(v, 1.5);
    HostTensor src(dt, {15}), dst(dt, {15});
    src.randomize(g);
    copy(rt(), dst.t(), src.t());
    EXPECT_TRUE(dst.bitwise_equal(src));
    for (DType ot : kFloatTypes) {  // a conversion is one rounding of the exact input value
      HostTensor out(ot, {15});
      cast(rt(), out.t(), src.t());
      for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(out.get(i), round_to(ot, float(src.get(i))));
    }
  }
}

TEST(OpsCpu, AddAccumulateScale) {
  std::mt19937 g(2);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor a(dt, {4, 9}), b(dt, {4, 9}), out(dt, {4, 9});
    a.randomize(g);
    b.randomize(g);
    add(rt(), out.t(), a.t(), b.t());
    std::vector<double> ref(36);
    for (int i = 0; i < 36; ++i) ref[size_t(i)] = a.get(i) + b.get(i);
    // One f32 add of exact inputs, then one rounding to the dtype.
    expect_close(out.values(), ref, 1e-7, out_rtol(dt), "add");
    add(rt(), a.t(), a.t(), b.t());  // out aliasing a
    EXPECT_TRUE(a.bitwise_equal(out));
    for (DType at : kFloatTypes) {
      HostTensor o(dt, {36}), x(at, {36});
      o.randomize(g);
      x.randomize(g);
      for (int i = 0; i < 36; ++i) ref[size_t(i)] = o.get(i) + x.get(i);
      accumulate(rt(), o.t(), x.t());
      expect_close(o.values(), ref, 1e-7, out_rtol(dt), "accumulate");
    }
    for (int i = 0; i < 36; ++i) ref[size_t(i)] = b.get(i) * -0.3f;
    scale(rt(), b.t(), -0.3f);
    expect_close(b.values(), ref, 1e-7, out_rtol(dt), "scale");
  }
}

// ---------------------------------------------------------------- matmul

struct MatmulCase { bool ta, tb, bias, acc; float alpha; };

TEST(OpsCpu, MatmulMatchesReference) {
  std::mt19937 g(3);
  const int64_t M = 13, N = 11, K = 17;
  const MatmulCase cases[] = {{false, false, false, false, 1.0f}, {true, false, true, true, 0.5f},
                              {false, true, true, false, -2.0f}, {true, true, false, true, 1.0f}};
  for (DType dt : kFloatTypes)
    for (bool out_f32 : {false, true})
      for (const MatmulCase& c : cases) {
        const DType ot = out_f32 ? DType::f32 : dt;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " out " + std::string(dtype_name(ot)) + " ta " +
                     std::to_string(c.ta) + " tb " + std::to_string(c.tb));
        HostTensor a(dt, c.ta ? Shape{K, M} : Shape{M, K}), b(dt, c.tb ? Shape{N, K} : Shape{K, N});
        HostTensor bias(dt, {N}), out(ot, {M, N});
        a.randomize(g);
        b.randomize(g);
        bias.randomize(g);
        out.randomize(g);
        std::vector<double> ref(size_t(M * N)), mag(size_t(M * N));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = a.get(c.ta ? k * M + i : i * K + k) * b.get(c.tb ? j * K + k : k * N + j);
              s += p;
              m += std::fabs(p);
            }
            double r = c.alpha * s, extra = 0;
            if (c.bias) extra += bias.get(j);
            if (c.acc) extra += out.get(i * N + j);
            ref[size_t(i * N + j)] = r + extra;
            mag[size_t(i * N + j)] = std::fabs(c.alpha) * m + std::fabs(extra);
          }
        Tensor bt = bias.t();
        MatmulOptions opt{c.ta, c.tb, c.acc, c.bias ? &bt : nullptr, c.alpha};
        matmul(rt(), out.t(), a.t(), b.t(), opt);
        // f32 accumulation of K products: |err| <= (K + 2) u sum|terms| (u = 2^-24, with slack),
        // then one rounding to out's dtype.
        std::vector<double> got = out.values();
        for (size_t i = 0; i < got.size(); ++i) {
          const double bound = (K + 2) * 0x1p-23 * mag[i] + out_rtol(ot) * std::fabs(ref[i]) + 1e-30;
          ASSERT_LE(std::fabs(got[i] - ref[i]), bound) << "element " << i;
        }
      }
}

TEST(OpsCpu, BiasBackwardMatchesReference) {
  std::mt19937 g(4);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const int64_t R = 37, N = 70;  // N spans a partial column block
    HostTensor dy(dt, {R, N}), db(DType::f32, {N});
    dy.randomize(g);
    db.randomize(g);
    std::vector<double> ref = db.values();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < N; ++j) ref[size_t(j)] += dy.get(r * N + j);
    bias_backward(rt(), db.t(), dy.t());
    // Summed in double, rounded once to f32.
    expect_close(db.values(), ref, 1e-12, 0x1p-23, "db");
  }
}

// Gradients of sum(R * (a @ b + bias)) from matmul with transposes and bias_backward, against FD.
TEST(OpsCpu, MatmulBackwardFiniteDifferences) {
  std::mt19937 g(5);
  const int64_t M = 4, N = 3, K = 5;
  HostTensor a(DType::f32, {M, K}), b(DType::f32, {K, N}), bias(DType::f32, {N}), out(DType::f32, {M, N});
  HostTensor r(DType::f32, {M, N});
  a.randomize(g);
  b.randomize(g);
  bias.randomize(g);
  r.randomize(g);
  Tensor bt = bias.t();
  auto loss = [&] {
    matmul(rt(), out.t(), a.t(), b.t(), MatmulOptions{false, false, false, &bt, 1.0f});
    return project(r, out);
  };
  HostTensor da(DType::f32, {M, K}), dB(DType::f32, {K, N}), dbias(DType::f32, {N});
  matmul(rt(), da.t(), r.t(), b.t(), MatmulOptions{false, true, false, nullptr, 1.0f});   // R b^T
  matmul(rt(), dB.t(), a.t(), r.t(), MatmulOptions{true, false, false, nullptr, 1.0f});   // a^T R
  fill(rt(), dbias.t(), 0.0f);
  bias_backward(rt(), dbias.t(), r.t());
  check_fd(a, da.values(), loss, "da");
  check_fd(b, dB.values(), loss, "db");
  check_fd(bias, dbias.values(), loss, "dbias");
}

// ---------------------------------------------------------------- layernorm

struct LnRef { std::vector<double> out, mean, rstd, dx, dw, db; };

LnRef layernorm_ref(const HostTensor& x, const HostTensor& w, const HostTensor& b, const HostTensor& dout,
                    int64_t R, int64_t C, double eps) {
  LnRef f{std::vector<double>(size_t(R * C)), std::vector<double>(size_t(R)), std::vector<double>(size_t(R)),
          std::vector<double>(size_t(R * C)), std::vector<double>(size_t(C)), std::vector<double>(size_t(C))};
  for (int64_t r = 0; r < R; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x.get(r * C + c) / double(C);
    for (int64_t c = 0; c < C; ++c) var += std::pow(x.get(r * C + c) - mu, 2) / double(C);
    const double rs = 1.0 / std::sqrt(var + eps);
    f.mean[size_t(r)] = mu;
    f.rstd[size_t(r)] = rs;
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x.get(r * C + c) - mu) * rs, d = dout.get(r * C + c);
      f.out[size_t(r * C + c)] = xh * w.get(c) + b.get(c);
      mg += d * w.get(c) / double(C);
      mgx += d * w.get(c) * xh / double(C);
      f.dw[size_t(c)] += d * xh;
      f.db[size_t(c)] += d;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x.get(r * C + c) - mu) * rs;
      f.dx[size_t(r * C + c)] = (dout.get(r * C + c) * w.get(c) - mg - xh * mgx) * rs;
    }
  }
  return f;
}

TEST(OpsCpu, LayernormMatchesReference) {
  std::mt19937 g(6);
  const int64_t R = 6, C = 40;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {2, 3, C}), w(dt, {C}), b(dt, {C}), out(dt, {2, 3, C}), dout(dt, {2, 3, C});
    HostTensor mean(DType::f32, {R}), rstd(DType::f32, {R}), dx(dt, {2, 3, C});
    HostTensor dw(DType::f32, {C}), db(DType::f32, {C});
    x.randomize(g, 1.0, 3.0);  // an offset mean, so the centering matters
    w.randomize(g, 0.5, 1.5);
    b.randomize(g);
    dout.randomize(g);
    dx.randomize(g);
    dw.randomize(g);
    db.randomize(g);
    LnRef f = layernorm_ref(x, w, b, dout, R, C, 1e-5);
    for (int64_t i = 0; i < R * C; ++i) f.dx[size_t(i)] += dx.get(i);  // backward accumulates
    for (int64_t c = 0; c < C; ++c) {
      f.dw[size_t(c)] += dw.get(c);
      f.db[size_t(c)] += db.get(c);
    }
    layernorm_forward(rt(), out.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t(), 1e-5f);
    // With the residual-stream column sums: of dx as it comes in (written) and as it leaves (added to).
    HostTensor before(DType::f32, {C}), after(DType::f32, {C});
    after.randomize(g);
    std::vector<double> want_before(size_t(C), 0.0), want_after(size_t(C), 0.0);
    for (int64_t c = 0; c < C; ++c) want_after[size_t(c)] = after.get(c);
    for (int64_t i = 0; i < R * C; ++i) want_before[size_t(i % C)] += dx.get(i);
    const ResidualColumnSums sums{before.t(), after.t(), false, true};
    layernorm_backward(rt(), dx.t(), dw.t(), db.t(), dout.t(), x.t(), w.t(), mean.t(), rstd.t(), true, &sums);
    for (int64_t i = 0; i < R * C; ++i) want_after[size_t(i % C)] += dx.get(i);
    expect_close(before.values(), want_before, 1e-5, 1e-6, "column sums of dx before");
    expect_close(after.values(), want_after, 1e-5, 1e-6, "column sums of dx after");
    // Values are O(1..10) (rstd of uniform [1,3) is ~1.7): a handful of f32 roundings on terms of
    // that size gives < 2e-5; 16-bit outputs add one rounding of the result.
    expect_close(out.values(), f.out, 2e-5, out_rtol(dt), "out");
    expect_close(mean.values(), f.mean, 1e-6, 1e-6, "mean");
    expect_close(rstd.values(), f.rstd, 1e-6, 1e-6, "rstd");
    expect_close(dx.values(), f.dx, 2e-5, out_rtol(dt), "dx");
    expect_close(dw.values(), f.dw, 2e-5, 1e-6, "dw");
    expect_close(db.values(), f.db, 2e-5, 1e-6, "db");
  }
}

// add_layernorm_forward is add then layernorm_forward (r, out, mean and rstd bitwise), every dtype.
TEST(OpsCpu, AddLayernormEqualsSeparateOps) {
  std::mt19937 g(12);
  const int64_t R = 7, C = 40;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    HostTensor x(dt, {R, C}), br(dt, {R, C}), w(dt, {C}), b(dt, {C});
    x.randomize(g, -2.0, 2.0);
    br.randomize(g);
    w.randomize(g);
    b.randomize(g);
    HostTensor r_ref(dt, {R, C}), y_ref(dt, {R, C}), m_ref(DType::f32, {R}), s_ref(DType::f32, {R});
    HostTensor r(dt, {R, C}), y(dt, {R, C}), m(DType::f32, {R}), s(DType::f32, {R});
    add(rt(), r_ref.t(), x.t(), br.t());
    layernorm_forward(rt(), y_ref.t(), m_ref.t(), s_ref.t(), r_ref.t(), w.t(), b.t());
    add_layernorm_forward(rt(), r.t(), y.t(), m.t(), s.t(), x.t(), br.t(), w.t(), b.t());
    EXPECT_TRUE(r.bitwise_equal(r_ref)) << "r";
    EXPECT_TRUE(y.bitwise_equal(y_ref)) << "out";
    EXPECT_TRUE(m.bitwise_equal(m_ref) && s.bitwise_equal(s_ref)) << "mean, rstd";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostTensor x(DType::f32, {4, 8}), small(DType::f32, {4, 4}), w(DType::f32, {8}), m(DType::f32, {4});
  EXPECT_DEATH(add_layernorm_forward(rt(), x.t(), x.t(), m.t(), m.t(), x.t(), small.t(), w.t(), w.t()),
               "add_layernorm_forward");
}

TEST(OpsCpu, LayernormBackwardFiniteDifferences) {
  std::mt19937 g(7);
  const int64_t R = 3, C = 6;
  HostTensor x(DType::f32, {R, C}), w(DType::f32, {C}), b(DType::f32, {C}), out(DType::f32, {R, C});
  HostTensor mean(DType::f32, {R}), rstd(DType::f32, {R}), r(DType::f32, {R, C});
  x.randomize(g);
  w.randomize(g, 0.5, 1.5);
  b.randomize(g);
  r.randomize(g);
  auto loss = [&] {
    layernorm_forward(rt(), out.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t(), 1e-5f);
    return project(r, out);
  };
  loss();
  HostTensor dx(DType::f32, {R, C}), dw(DType::f32, {C}), db(DType::f32, {C});
  for (HostTensor* t : {&dx, &dw, &db}) fill(rt(), t->t(), 0.0f);
  layernorm_backward(rt(), dx.t(), dw.t(), db.t(), r.t(), x.t(), w.t(), mean.t(), rstd.t());
  check_fd(x, dx.values(), loss, "dx");
  check_fd(w, dw.values(), loss, "dw");
  check_fd(b, db.values(), loss, "db");
}

// RMSNorm (rms = true, no bias): out = x / sqrt(mean(x^2) + eps) * w, mean written as 0; backward
// dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), dw = sums of dout * xhat. Against the formula in
// double, every dtype, with the residual column sums; and LayerNorm without a bias (b empty).
TEST(OpsCpu, RmsnormMatchesReference) {
  std::mt19937 g(16);
  const int64_t R = 5, C = 40;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {R, C}), w(dt, {C}), out(dt, {R, C}), dout(dt, {R, C}), dx(dt, {R, C});
    HostTensor mean(DType::f32, {R}), rstd(DType::f32, {R}), dw(DType::f32, {C});
    x.randomize(g, 1.0, 3.0);  // an offset mean: RMSNorm must not remove it
    w.randomize(g, 0.5, 1.5);
    dout.randomize(g);
    dx.randomize(g);
    dw.randomize(g);
    const HostTensor dx0 = dx;  // dx as it comes in
    std::vector<double> want_out(R * C, 0.0), want_dx(R * C, 0.0), want_dw(C, 0.0), want_rstd(R, 0.0);
    for (int64_t c = 0; c < C; ++c) want_dw[size_t(c)] = dw.get(c);
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0, sgx = 0;
      for (int64_t c = 0; c < C; ++c) ss += x.get(r * C + c) * x.get(r * C + c);
      const double rs = 1.0 / std::sqrt(ss / double(C) + 1e-5);
      want_rstd[size_t(r)] = rs;
      for (int64_t c = 0; c < C; ++c) sgx += dout.get(r * C + c) * w.get(c) * x.get(r * C + c) * rs;
      for (int64_t c = 0; c < C; ++c) {
        const double xh = x.get(r * C + c) * rs;
        want_out[size_t(r * C + c)] = xh * w.get(c);
        want_dx[size_t(r * C + c)] = dx.get(r * C + c) + (dout.get(r * C + c) * w.get(c) - xh * sgx / double(C)) * rs;
        want_dw[size_t(c)] += dout.get(r * C + c) * xh;
      }
    }
    layernorm_forward(rt(), out.t(), mean.t(), rstd.t(), x.t(), w.t(), Tensor(), 1e-5f, true);
    HostTensor before(DType::f32, {C}), after(DType::f32, {C});
    const ResidualColumnSums sums{before.t(), after.t(), false, false};
    layernorm_backward(rt(), dx.t(), dw.t(), Tensor(), dout.t(), x.t(), w.t(), mean.t(), rstd.t(), true, &sums, true);
    expect_close(out.values(), want_out, 2e-5, out_rtol(dt), "out");
    expect_close(mean.values(), std::vector<double>(size_t(R), 0.0), 0, 0, "mean");
    expect_close(rstd.values(), want_rstd, 1e-6, 1e-6, "rstd");
    expect_close(dx.values(), want_dx, 2e-5, out_rtol(dt), "dx");
    expect_close(dw.values(), want_dw, 2e-5, 1e-6, "dw");
    std::vector<double> sum_before(size_t(C), 0.0), sum_after(size_t(C), 0.0);
    for (int64_t i = 0; i < R * C; ++i) {
      sum_before[size_t(i % C)] += dx0.get(i);
      sum_after[size_t(i % C)] += dx.get(i);
    }
    expect_close(before.values(), sum_before, 1e-5, 1e-6, "column sums of dx before");
    expect_close(after.values(), sum_after, 1e-5, 1e-6, "column sums of dx after");
    // add_layernorm_forward with rms: add, then the RMSNorm, bitwise.
    HostTensor br(dt, {R, C}), r1(dt, {R, C}), y1(dt, {R, C}), r2(dt, {R, C}), y2(dt, {R, C});
    br.randomize(g);
    add(rt(), r1.t(), x.t(), br.t());
    layernorm_forward(rt(), y1.t(), mean.t(), rstd.t(), r1.t(), w.t(), Tensor(), 1e-5f, true);
    add_layernorm_forward(rt(), r2.t(), y2.t(), mean.t(), rstd.t(), x.t(), br.t(), w.t(), Tensor(), 1e-5f, true);
    EXPECT_TRUE(r1.bitwise_equal(r2) && y1.bitwise_equal(y2)) << "add + RMSNorm";
    // LayerNorm without a bias is LayerNorm with a zero bias, and writes no bias gradient.
    HostTensor zero(dt, {C}), y3(dt, {R, C}), y4(dt, {R, C});
    fill(rt(), zero.t(), 0.0f);
    layernorm_forward(rt(), y3.t(), mean.t(), rstd.t(), x.t(), w.t(), zero.t());
    layernorm_forward(rt(), y4.t(), mean.t(), rstd.t(), x.t(), w.t(), Tensor());
    EXPECT_TRUE(y3.bitwise_equal(y4)) << "LayerNorm without a bias";
  }
}

TEST(OpsCpu, RmsnormBackwardFiniteDifferences) {
  std::mt19937 g(17);
  const int64_t R = 3, C = 6;
  HostTensor x(DType::f32, {R, C}), w(DType::f32, {C}), out(DType::f32, {R, C});
  HostTensor mean(DType::f32, {R}), rstd(DType::f32, {R}), r(DType::f32, {R, C});
  x.randomize(g, 0.5, 2.0);
  w.randomize(g, 0.5, 1.5);
  r.randomize(g);
  auto loss = [&] {
    layernorm_forward(rt(), out.t(), mean.t(), rstd.t(), x.t(), w.t(), Tensor(), 1e-5f, true);
    return project(r, out);
  };
  loss();
  HostTensor dx(DType::f32, {R, C}), dw(DType::f32, {C});
  for (HostTensor* t : {&dx, &dw}) fill(rt(), t->t(), 0.0f);
  layernorm_backward(rt(), dx.t(), dw.t(), Tensor(), r.t(), x.t(), w.t(), mean.t(), rstd.t(), true, nullptr, true);
  check_fd(x, dx.values(), loss, "dx");
  check_fd(w, dw.values(), loss, "dw");
}

// ---------------------------------------------------------------- gelu

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

TEST(OpsCpu, GeluMatchesReference) {
  std::mt19937 g(8);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {5, 20}), out(dt, {5, 20}), dout(dt, {5, 20}), dx(dt, {5, 20});
    x.randomize(g, -4.0, 4.0);
    dout.randomize(g);
    std::vector<double> ref(100), dref(100);
    for (int i = 0; i < 100; ++i) {
      ref[size_t(i)] = gelu_ref(x.get(i));
      dref[size_t(i)] = dout.get(i) * gelu_grad_ref(x.get(i));
    }
    gelu_forward(rt(), out.t(), x.t());
    gelu_backward(rt(), dx.t(), dout.t(), x.t());
    // |x| < 4: f32 tanh and a few products are accurate to a few ulps of 4, i.e. < 2e-6.
    expect_close(out.values(), ref, 2e-6, out_rtol(dt), "gelu");
    expect_close(dx.values(), dref, 2e-6, out_rtol(dt), "gelu'");
    gelu_backward(rt(), dout.t(), dout.t(), x.t());  // dx aliasing dout
    EXPECT_TRUE(dout.bitwise_equal(dx));
  }
}

TEST(OpsCpu, GeluBackwardFiniteDifferences) {
  std::mt19937 g(9);
  HostTensor x(DType::f32, {30}), out(DType::f32, {30}), r(DType::f32, {30}), dx(DType::f32, {30});
  x.randomize(g, -3.0, 3.0);
  r.randomize(g);
  gelu_backward(rt(), dx.t(), r.t(), x.t());
  check_fd(x, dx.values(), [&] { gelu_forward(rt(), out.t(), x.t()); return project(r, out); }, "dx");
}

// ---------------------------------------------------------------- swiglu

TEST(OpsCpu, SwigluMatchesReference) {
  std::mt19937 g(18);
  const int64_t rows = 5, F = 7;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor h(dt, {rows, 2 * F}), out(dt, {rows, F}), dout(dt, {rows, F}), dh(dt, {rows, 2 * F});
    h.randomize(g, -4.0, 4.0);
    dout.randomize(g);
    std::vector<double> ref(size_t(rows * F)), dref(size_t(rows * 2 * F));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < F; ++i) {  // silu(a) b; d/da = b s (1 + a (1 - s)), d/db = silu(a)
        const double a = h.get(r * 2 * F + i), b = h.get(r * 2 * F + F + i), s = 1 / (1 + std::exp(-a)),
                     d = dout.get(r * F + i);
        ref[size_t(r * F + i)] = a * s * b;
        dref[size_t(r * 2 * F + i)] = d * b * s * (1 + a * (1 - s));
        dref[size_t(r * 2 * F + F + i)] = d * a * s;
      }
    swiglu_forward(rt(), out.t(), h.t());
    swiglu_backward(rt(), dh.t(), dout.t(), h.t());
    expect_close(out.values(), ref, 2e-6, out_rtol(dt), "swiglu");
    expect_close(dh.values(), dref, 2e-6, out_rtol(dt), "swiglu'");
  }
}

TEST(OpsCpu, SwigluBackwardFiniteDifferences) {
  std::mt19937 g(19);
  HostTensor h(DType::f32, {3, 10}), out(DType::f32, {3, 5}), r(DType::f32, {3, 5}), dh(DType::f32, {3, 10});
  h.randomize(g, -3.0, 3.0);
  r.randomize(g);
  swiglu_backward(rt(), dh.t(), r.t(), h.t());
  check_fd(h, dh.values(), [&] { swiglu_forward(rt(), out.t(), h.t()); return project(r, out); }, "dh");
}

TEST(OpsCpu, SwigluRejectsBadShapes) {
  HostTensor h(DType::f32, {3, 10}), g(DType::f32, {3, 4}), dh(DType::f32, {3, 10});
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(swiglu_forward(rt(), g.t(), h.t()), "is not \\[gate \\| up\\]");
  HostTensor g5(DType::f32, {3, 5});
  EXPECT_DEATH(swiglu_backward(rt(), dh.t(), dh.t().slice(0, {3, 5}), h.t()), "dh overlaps dg");
  HostTensor both(DType::f32, {3, 12});  // dh two elements past h: overlapping, not the same
  EXPECT_DEATH(swiglu_backward(rt(), both.t().slice(2, {3, 10}), g5.t(), both.t().slice(0, {3, 10})),
               "dh overlaps dg, or h other than being h");
}

// In place (dh = h, as the experts' backward runs it) gives what a separate dh gets, bitwise.
TEST(OpsCpu, SwigluBackwardInPlace) {
  std::mt19937 g(20);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor h(dt, {4, 18}), dg(dt, {4, 9}), dh(dt, {4, 18});
    h.randomize(g, -3.0, 3.0);
    dg.randomize(g);
    swiglu_backward(rt(), dh.t(), dg.t(), h.t());
    swiglu_backward(rt(), h.t(), dg.t(), h.t());
    EXPECT_EQ(h.values(), dh.values());
  }
}

// ---------------------------------------------------------------- the sigmoid gate on rows

// out = sigmoid(z) x row by row; dx = sigmoid(z) dout and dz = sigmoid'(z) dout . x against the closed
// form, in place (out = x, dx = dout) bitwise as apart, and dz against finite differences.
TEST(OpsCpu, SigmoidGateRowsMatchesReference) {
  std::mt19937 g(23);
  const int64_t rows = 5, F = 9;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {rows, F}), out(dt, {rows, F}), dout(dt, {rows, F}), dx(dt, {rows, F}), z(DType::f32, {rows, 1}),
        dz(DType::f32, {rows, 1});
    x.randomize(g);
    dout.randomize(g);
    z.randomize(g, -4.0, 4.0);
    std::vector<double> ref(size_t(rows * F)), dref(size_t(rows * F)), dzref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const double s = 1 / (1 + std::exp(-z.get(r)));
      double dot = 0;
      for (int64_t i = 0; i < F; ++i) {
        ref[size_t(r * F + i)] = s * x.get(r * F + i);
        dref[size_t(r * F + i)] = s * dout.get(r * F + i);
        dot += dout.get(r * F + i) * x.get(r * F + i);
      }
      dzref[size_t(r)] = s * (1 - s) * dot;
    }
    sigmoid_gate_rows(rt(), out.t(), x.t(), z.t());
    sigmoid_gate_rows_backward(rt(), dx.t(), dz.t(), dout.t(), x.t(), z.t());
    expect_close(out.values(), ref, 2e-6, out_rtol(dt), "gated rows");
    expect_close(dx.values(), dref, 2e-6, out_rtol(dt), "dx");
    expect_close(dz.values(), dzref, 1e-5, 1e-5, "dz");
    const std::vector<double> apart = out.values(), dapart = dx.values();
    sigmoid_gate_rows(rt(), x.t(), x.t(), z.t());
    sigmoid_gate_rows_backward(rt(), dout.t(), dz.t(), dout.t(), out.t(), z.t());  // any x: dx only compared
    EXPECT_EQ(x.values(), apart);
    EXPECT_EQ(dout.values(), dapart);
  }
  std::mt19937 h(24);
  HostTensor x(DType::f32, {3, 6}), out(DType::f32, {3, 6}), r(DType::f32, {3, 6}), dx(DType::f32, {3, 6}),
      z(DType::f32, {3}), dz(DType::f32, {3});
  x.randomize(h);
  r.randomize(h);
  z.randomize(h, -2.0, 2.0);
  sigmoid_gate_rows_backward(rt(), dx.t(), dz.t(), r.t(), x.t(), z.t());
  check_fd(z, dz.values(), [&] { sigmoid_gate_rows(rt(), out.t(), x.t(), z.t()); return project(r, out); }, "dz");
  check_fd(x, dx.values(), [&] { sigmoid_gate_rows(rt(), out.t(), x.t(), z.t()); return project(r, out); }, "dx");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(sigmoid_gate_rows(rt(), out.t(), x.t(), dz.t().slice(0, {2})), "is not one per row");
  EXPECT_DEATH(sigmoid_gate_rows_backward(rt(), x.t(), dz.t(), r.t(), x.t(), z.t()), "dx overlaps x");
}

// ---------------------------------------------------------------- QK-norm

// qkv (B, T, (H + 2 Hkv) hd) of 3 query heads and 1 key-value head of 6 dims: each q and k head RMS-
// normed by its own weight, v copied; the backward's dx against the closed form, the weights' gradients
// summed over every head of its kind.
TEST(OpsCpu, QkNormMatchesReference) {
  std::mt19937 g(21);
  const int64_t B = 2, T = 3, H = 3, Hkv = 1, hd = 6, W = (H + 2 * Hkv) * hd, rows = B * T;
  const float eps = 1e-5f;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {B, T, W}), out(dt, {B, T, W}), dout(dt, {B, T, W}), dx(dt, {B, T, W}), wq(dt, {hd}), wk(dt, {hd});
    HostTensor rstd(DType::f32, {rows, H + Hkv}), dwq(DType::f32, {hd}), dwk(DType::f32, {hd});
    x.randomize(g, -2.0, 2.0);
    dout.randomize(g);
    wq.randomize(g, 0.5, 1.5);
    wk.randomize(g, 0.5, 1.5);
    std::vector<double> want(size_t(rows * W)), want_dx(size_t(rows * W)), want_rstd(size_t(rows * (H + Hkv)));
    std::vector<double> want_dwq(size_t(hd), 0.0), want_dwk(size_t(hd), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < H + 2 * Hkv; ++j) {
        const int64_t o = r * W + j * hd;
        if (j >= H + Hkv) {  // v
          for (int64_t i = 0; i < hd; ++i) want[size_t(o + i)] = x.get(o + i), want_dx[size_t(o + i)] = dout.get(o + i);
          continue;
        }
        const HostTensor& w = j < H ? wq : wk;
        double ss = 0, gx = 0;
        for (int64_t i = 0; i < hd; ++i) ss += x.get(o + i) * x.get(o + i);
        const double rs = 1 / std::sqrt(ss / double(hd) + eps);
        want_rstd[size_t(r * (H + Hkv) + j)] = rs;
        for (int64_t i = 0; i < hd; ++i) gx += dout.get(o + i) * w.get(i) * x.get(o + i) * rs;
        for (int64_t i = 0; i < hd; ++i) {
          const double xhat = x.get(o + i) * rs;
          want[size_t(o + i)] = xhat * w.get(i);
          want_dx[size_t(o + i)] = (dout.get(o + i) * w.get(i) - xhat * gx / double(hd)) * rs;
          (j < H ? want_dwq : want_dwk)[size_t(i)] += dout.get(o + i) * xhat;
        }
      }
    const AttentionHeads heads{int(H), int(Hkv)};
    qk_norm_forward(rt(), out.t(), rstd.t(), x.t(), wq.t(), wk.t(), heads, eps);
    qk_norm_backward(rt(), dx.t(), dwq.t(), dwk.t(), dout.t(), x.t(), wq.t(), wk.t(), rstd.t(), heads, false);
    expect_close(out.values(), want, 2e-6, out_rtol(dt), "out");
    expect_close(rstd.values(), want_rstd, 1e-6, 1e-6, "rstd");
    expect_close(dx.values(), want_dx, 2e-5, out_rtol(dt), "dx");
    expect_close(dwq.values(), want_dwq, 2e-5, 1e-6, "dwq");
    expect_close(dwk.values(), want_dwk, 2e-5, 1e-6, "dwk");
    // Accumulating adds the same sums again; in place (dqkv = dout) writes what a separate dqkv got.
    qk_norm_backward(rt(), dout.t(), dwq.t(), dwk.t(), dout.t(), x.t(), wq.t(), wk.t(), rstd.t(), heads, true);
    EXPECT_EQ(dout.values(), dx.values());
    for (double& v : want_dwq) v *= 2;
    for (double& v : want_dwk) v *= 2;
    expect_close(dwq.values(), want_dwq, 4e-5, 1e-6, "dwq accumulated");
    expect_close(dwk.values(), want_dwk, 4e-5, 1e-6, "dwk accumulated");
    // In place forward (generation's) writes what a separate out got.
    qk_norm_forward(rt(), x.t(), rstd.t(), x.t(), wq.t(), wk.t(), heads, eps);
    EXPECT_EQ(x.values(), out.values());
  }
}

TEST(OpsCpu, QkNormBackwardFiniteDifferences) {
  std::mt19937 g(22);
  const int64_t B = 1, T = 3, H = 2, Hkv = 2, hd = 4, W = (H + 2 * Hkv) * hd;
  HostTensor x(DType::f32, {B, T, W}), out(DType::f32, {B, T, W}), r(DType::f32, {B, T, W}), dx(DType::f32, {B, T, W});
  HostTensor wq(DType::f32, {hd}), wk(DType::f32, {hd}), rstd(DType::f32, {B * T, H + Hkv});
  HostTensor dwq(DType::f32, {hd}), dwk(DType::f32, {hd});
  x.randomize(g, -2.0, 2.0);
  r.randomize(g);
  wq.randomize(g, 0.5, 1.5);
  wk.randomize(g, 0.5, 1.5);
  const AttentionHeads heads{int(H), int(Hkv)};
  auto loss = [&] {
    qk_norm_forward(rt(), out.t(), rstd.t(), x.t(), wq.t(), wk.t(), heads, 1e-6f);
    return project(r, out);
  };
  loss();
  qk_norm_backward(rt(), dx.t(), dwq.t(), dwk.t(), r.t(), x.t(), wq.t(), wk.t(), rstd.t(), heads, false);
  check_fd(x, dx.values(), loss, "dx");
  check_fd(wq, dwq.values(), loss, "dwq");
  check_fd(wk, dwk.values(), loss, "dwk");
}

TEST(OpsCpu, QkNormRejectsBadOperands) {
  HostTensor x(DType::f32, {1, 2, 24}), out(DType::f32, {1, 2, 24}), w(DType::f32, {4}), w3(DType::f32, {3});
  HostTensor rstd(DType::f32, {2, 4}), dw(DType::f32, {4});
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const AttentionHeads heads{2, 2};  // (2 + 4) heads of 4 dims
  EXPECT_DEATH(qk_norm_forward(rt(), out.t(), rstd.t(), x.t(), w3.t(), w.t(), heads, 1e-5f), "a norm weight");
  EXPECT_DEATH(qk_norm_forward(rt(), out.t(), rstd.t().slice(0, {2, 3}), x.t(), w.t(), w.t(), heads, 1e-5f), "rstd");
  EXPECT_DEATH(qk_norm_forward(rt(), out.t(), rstd.t(), x.t(), w.t(), w.t(), AttentionHeads(3, 3), 1e-5f), "is not \\(B, T");
  EXPECT_DEATH(qk_norm_backward(rt(), x.t(), dw.t(), dw.t(), out.t(), x.t(), w.t(), w.t(), rstd.t(), heads),
               "dqkv overlaps qkv");
}

// MatmulOptions::gelu_input / gelu_grad_of are, on the CPU, exactly matmul followed by gelu_forward
// or gelu_backward (bitwise), for every dtype, transposes, with and without bias.
TEST(OpsCpu, MatmulFusedGeluEqualsSeparateOps) {
  std::mt19937 g(10);
  const int64_t M = 13, N = 24, K = 17;
  for (DType dt : kFloatTypes)
    for (int t = 0; t < 4; ++t)
      for (bool with_bias : {false, true}) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) +
                     " bias " + std::to_string(with_bias));
        HostTensor a(dt, ta ? Shape{K, M} : Shape{M, K}), b(dt, tb ? Shape{N, K} : Shape{K, N}), bias(dt, {N});
        a.randomize(g, -2.0, 2.0);
        b.randomize(g);
        bias.randomize(g);
        Tensor bt = bias.t();
        MatmulOptions plain;
        plain.trans_a = ta;
        plain.trans_b = tb;
        plain.alpha = 0.75f;
        plain.bias = with_bias ? &bt : nullptr;
        // forward: h = alpha op(a) op(b) [+ bias], g = gelu(h); h as a 3-D view of out's size
        HostTensor h_ref(dt, {M, N}), g_ref(dt, {M, N}), h(dt, {1, M, N}), gl(dt, {M, N});
        matmul(rt(), h_ref.t(), a.t(), b.t(), plain);
        gelu_forward(rt(), g_ref.t(), h_ref.t());
        MatmulOptions fwd = plain;
        Tensor ht = h.t();
        fwd.gelu_input = &ht;
        matmul(rt(), gl.t(), a.t(), b.t(), fwd);
        EXPECT_TRUE(h.bitwise_equal(h_ref)) << "pre-activation";
        EXPECT_TRUE(gl.bitwise_equal(g_ref)) << "gelu";
        // backward: dh = alpha op(a) op(b) * gelu'(h) (no bias)
        MatmulOptions bwd = plain;
        bwd.bias = nullptr;
        HostTensor dh_ref(dt, {M, N}), dh(dt, {M, N});
        matmul(rt(), dh_ref.t(), a.t(), b.t(), bwd);
        gelu_backward(rt(), dh_ref.t(), dh_ref.t(), h_ref.t());
        bwd.gelu_grad_of = &ht;
        matmul(rt(), dh.t(), a.t(), b.t(), bwd);
        EXPECT_TRUE(dh.bitwise_equal(dh_ref)) << "gelu'";
      }
}

// MatmulOptions::residual: out = op(a) op(b) + bias + residual in f32, rounded once; for f32 exactly
// the accumulate form on a copy of the residual, which itself is left as it was; in place (residual
// = out) as well.
TEST(OpsCpu, MatmulResidualIsAccumulateOnTheResidual) {
  std::mt19937 g(12);
  const int64_t M = 9, N = 20, K = 11;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    HostTensor a(dt, {M, K}), b(dt, {N, K}), bias(dt, {N}), res(dt, {M, N});
    a.randomize(g);
    b.randomize(g);
    bias.randomize(g);
    res.randomize(g);
    Tensor bt = bias.t(), rt_ = res.t();
    MatmulOptions o;
    o.trans_b = true;
    o.bias = &bt;
    HostTensor ref = res, out(dt, {M, N});
    MatmulOptions acc = o;
    acc.accumulate = true;
    matmul(rt(), ref.t(), a.t(), b.t(), acc);
    const HostTensor before = res;
    o.residual = &rt_;
    matmul(rt(), out.t(), a.t(), b.t(), o);
    EXPECT_TRUE(out.bitwise_equal(ref));
    EXPECT_TRUE(res.bitwise_equal(before)) << "the residual was written";
    matmul(rt(), res.t(), a.t(), b.t(), o);  // in place
    EXPECT_TRUE(res.bitwise_equal(ref)) << "in place";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostTensor a(DType::f32, {4, 8}), b(DType::f32, {8, 8}), out(DType::f32, {4, 8}), small(DType::f32, {4, 4});
  Tensor st = small.t(), ot = out.t();
  MatmulOptions bad;
  bad.residual = &st;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), bad), "must have out's size and dtype");
  bad.residual = &ot;
  bad.accumulate = true;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), bad), "does not combine with accumulate");
}

// A strided batch is its problems, each at its strides from problem 0's tensors (b shared at
// stride 0 here), and leaves what lies between the problems' outputs alone.
TEST(OpsCpu, MatmulBatchedIsItsProblemsAtTheirStrides) {
  std::mt19937 g(13);
  const int64_t M = 6, N = 8, K = 5, B = 3, so = M * N + 4, sa = M * K + 3, sbias = N + 2;
  HostTensor a(DType::f32, {sa * (B - 1) + M * K}), b(DType::f32, {N, K}), bias(DType::f32, {sbias * (B - 1) + N});
  HostTensor out(DType::f32, {so * (B - 1) + M * N}), pre(DType::f32, {so * (B - 1) + M * N});
  for (HostTensor* t : {&a, &b, &bias, &out, &pre}) t->randomize(g);
  HostTensor want = out, want_pre = pre;
  auto at = [](HostTensor& h, int64_t offset, Shape s) { return h.t().slice(offset, s); };
  for (int64_t i = 0; i < B; ++i) {
    MatmulOptions one;
    one.trans_b = true;
    const Tensor bi = at(bias, i * sbias, {N}), hi = at(want_pre, i * so, {M, N});
    one.bias = &bi;
    one.gelu_input = &hi;
    matmul(rt(), at(want, i * so, {M, N}), at(a, i * sa, {M, K}), b.t(), one);
  }
  MatmulOptions o;
  o.trans_b = true;
  o.batch = B;
  o.stride_a = sa;
  o.stride_b = 0;
  o.stride_bias = sbias;
  o.stride_out = so;
  const Tensor b0 = at(bias, 0, {N}), h0 = at(pre, 0, {M, N});
  o.bias = &b0;
  o.gelu_input = &h0;
  matmul(rt(), at(out, 0, {M, N}), at(a, 0, {M, K}), b.t(), o);
  EXPECT_TRUE(out.bitwise_equal(want));
  EXPECT_TRUE(pre.bitwise_equal(want_pre));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  o.stride_out = M * N - 1;  // problems' outputs overlapping
  EXPECT_DEATH(matmul(rt(), at(out, 0, {M, N}), at(a, 0, {M, K}), b.t(), o), "problems' outputs apart");
  o.stride_out = so;  // problem 1's pre-activation on problem 0's output
  const Tensor inside = at(out, so - M * N, {M, N});
  o.gelu_input = &inside;
  EXPECT_DEATH(matmul(rt(), at(out, M * N, {M, N}), at(a, 0, {M, K}), b.t(), o), "must not overlap its outputs");
}

// A batch of column sums is each block's, into outputs at their stride (the gaps left alone).
TEST(OpsCpu, BiasBackwardBatchedIsItsBlocks) {
  std::mt19937 g(14);
  const int64_t R = 7, N = 10, B = 3, stride = N + 5;
  HostTensor dy(DType::f32, {B * R, N}), db(DType::f32, {stride * (B - 1) + N});
  dy.randomize(g);
  db.randomize(g);
  HostTensor want = db;
  for (int64_t i = 0; i < B; ++i)
    bias_backward(rt(), want.t().slice(i * stride, {N}), dy.t().slice(i * R * N, {R, N}), true);
  bias_backward(rt(), db.t().slice(0, {N}), dy.t(), true, B, stride);
  EXPECT_TRUE(db.bitwise_equal(want));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(bias_backward(rt(), db.t().slice(0, {N}), dy.t().slice(0, {B * R - 1, N}), true, B, stride),
               "bias_backward: batch");
}

TEST(OpsCpu, MatmulFusedGeluRejectsBadArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostTensor a(DType::f32, {4, 8}), b(DType::f32, {8, 8}), out(DType::f32, {4, 8}), h(DType::f32, {4, 8});
  HostTensor small(DType::f32, {4, 4}), half(DType::bf16, {4, 8}), bias(DType::f32, {8});
  Tensor ht = h.t(), st = small.t(), bt = half.t(), ot = out.t(), biast = bias.t();
  MatmulOptions acc;
  acc.accumulate = true;
  acc.gelu_input = &ht;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), acc), "does not combine with accumulate");
  MatmulOptions both;
  both.gelu_input = &ht;
  both.gelu_grad_of = &ht;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), both), "exclusive");
  MatmulOptions biased;
  biased.gelu_grad_of = &ht;
  biased.bias = &biast;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), biased), "gelu_grad_of does not combine with bias");
  MatmulOptions wrong;
  wrong.gelu_input = &st;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), wrong), "must have out's size and dtype");
  wrong.gelu_input = &bt;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), wrong), "must have out's size and dtype");
  wrong.gelu_input = &ot;
  EXPECT_DEATH(matmul(rt(), out.t(), a.t(), b.t(), wrong), "must not alias out");
}

// ---------------------------------------------------------------- attention

// Hkv: key-value heads (grouped-query attention), 0 = H; window: a sliding window, 0 = none.
struct AttnDims {
  int64_t B, T, C, H, Hkv = 0, window = 0;
  int64_t kv() const { return Hkv > 0 ? Hkv : H; }
  int64_t W() const { return C + 2 * kv() * (C / H); }  // qkv's row
  AttentionHeads heads() const { return {int(H), int(kv()), window}; }
};

// out, lse, and dqkv with the textbook softmax gradient dS = P (dP - rowsum(P dP)); mag holds, per
// dqkv element, the sum of the magnitudes of its terms (for the 16-bit bound below).
struct AttnRef { std::vector<double> out, lse, dqkv, mag; };

// mask(b, h, t, s): the dropout factor of probability (t, s) (1 = no dropout).
using AttnMask = std::function<double(int64_t, int64_t, int64_t, int64_t)>;

AttnRef attention_ref(const HostTensor& qkv, const HostTensor& dout, const AttnDims& a, const AttnMask& mask = nullptr) {
  auto m = [&](int64_t b, int64_t h, int64_t t, int64_t s) { return mask ? mask(b, h, t, s) : 1.0; };
  const int64_t hd = a.C / a.H, W = a.W(), group = a.H / a.kv();
  const double sc = 1.0 / std::sqrt(double(hd));
  AttnRef f{std::vector<double>(size_t(a.B * a.T * a.C)), std::vector<double>(size_t(a.B * a.H * a.T)),
            std::vector<double>(size_t(qkv.numel())), std::vector<double>(size_t(qkv.numel()))};
  // q of head h, or k, v of its key-value head h / group.
  auto at = [&](int64_t b, int64_t t, int which, int64_t h, int64_t i) {
    return (b * a.T + t) * W + (which == 0 ? h * hd : a.C + (which - 1) * a.kv() * hd + h / group * hd) + i;
  };
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      std::vector<std::vector<double>> P(size_t(a.T), std::vector<double>(size_t(a.T), 0.0)), dP = P;
      for (int64_t t = 0; t < a.T; ++t) {
        const int64_t s0 = a.window > 0 ? std::max<int64_t>(0, t - a.window + 1) : 0;  // the window's first key
        double mx = -1e300, z = 0;
        for (int64_t s = s0; s <= t; ++s) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += qkv.get(at(b, t, 0, h, i)) * qkv.get(at(b, s, 1, h, i));
          P[size_t(t)][size_t(s)] = d * sc;
          mx = std::max(mx, d * sc);
        }
        for (int64_t s = s0; s <= t; ++s) z += std::exp(P[size_t(t)][size_t(s)] - mx);
        f.lse[size_t((b * a.H + h) * a.T + t)] = mx + std::log(z);
        for (int64_t s = s0; s <= t; ++s) P[size_t(t)][size_t(s)] = std::exp(P[size_t(t)][size_t(s)] - mx) / z;
        double D = 0, Dmag = 0;  // Dmag = sum |dout * out|, the scale of D's rounding error
        for (int64_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t s = s0; s <= t; ++s) o += P[size_t(t)][size_t(s)] * m(b, h, t, s) * qkv.get(at(b, s, 2, h, i));
          f.out[size_t((b * a.T + t) * a.C + h * hd + i)] = o;
          Dmag += std::fabs(o * dout.get((b * a.T + t) * a.C + h * hd + i));
        }
        for (int64_t s = s0; s <= t; ++s) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += dout.get((b * a.T + t) * a.C + h * hd + i) * qkv.get(at(b, s, 2, h, i));
          dP[size_t(t)][size_t(s)] = m(b, h, t, s) * d;  // dL/dP through the dropped probability
          D += P[size_t(t)][size_t(s)] * dP[size_t(t)][size_t(s)];
        }
        for (int64_t s = s0; s <= t; ++s) {
          const double p = P[size_t(t)][size_t(s)], ds = p * (dP[size_t(t)][size_t(s)] - D);
          const double ms = p * (std::fabs(dP[size_t(t)][size_t(s)]) + Dmag);
          for (int64_t i = 0; i < hd; ++i) {
            const double g = dout.get((b * a.T + t) * a.C + h * hd + i);
            const double q = qkv.get(at(b, t, 0, h, i)), k = qkv.get(at(b, s, 1, h, i));
            f.dqkv[size_t(at(b, t, 0, h, i))] += ds * sc * k;
            f.dqkv[size_t(at(b, s, 1, h, i))] += ds * sc * q;
            f.dqkv[size_t(at(b, s, 2, h, i))] += p * m(b, h, t, s) * g;
            f.mag[size_t(at(b, t, 0, h, i))] += ms * sc * std::fabs(k);
            f.mag[size_t(at(b, s, 1, h, i))] += ms * sc * std::fabs(q);
            f.mag[size_t(at(b, s, 2, h, i))] += p * m(b, h, t, s) * std::fabs(g);
          }
        }
      }
    }
  return f;
}

// Multi-head, and grouped-query with 2 query heads a key-value head, and multi-query.
TEST(OpsCpu, AttentionMatchesReference) {
  std::mt19937 g(10);
  for (auto [dt, a] : {std::pair{DType::f32, AttnDims{2, 7, 12, 3}}, {DType::bf16, AttnDims{2, 7, 12, 3}},
                       {DType::f16, AttnDims{2, 7, 12, 3}}, {DType::f32, AttnDims{2, 7, 16, 4, 2}},
                       {DType::bf16, AttnDims{2, 7, 16, 4, 2}}, {DType::f32, AttnDims{2, 7, 12, 3, 1}},
                       // sliding windows of 3 and 1 positions (1: each query sees only itself)
                       {DType::f32, AttnDims{2, 7, 16, 4, 2, 3}}, {DType::bf16, AttnDims{2, 7, 12, 3, 0, 3}},
                       {DType::f32, AttnDims{1, 5, 12, 3, 0, 1}}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(a.kv()) + " key-value heads, window " +
                 std::to_string(a.window));
    HostTensor qkv(dt, {a.B, a.T, a.W()}), out(dt, {a.B, a.T, a.C}), dout(dt, {a.B, a.T, a.C});
    HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(dt, {a.B, a.T, a.W()});
    qkv.randomize(g, -2.0, 2.0);
    dout.randomize(g);
    dqkv.randomize(g);  // must be overwritten
    AttnRef f = attention_ref(qkv, dout, a);
    attention_forward(rt(), out.t(), lse.t(), qkv.t(), a.heads());
    attention_backward(rt(), dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), a.heads());
    // f32: dot products of 4 terms of size <= 4, exp and sums over <= 7 keys: < 1e-5.
    expect_close(out.values(), f.out, 1e-5, out_rtol(dt), "out");
    expect_close(lse.values(), f.lse, 1e-5, 1e-6, "lse");
    // 16-bit: besides the final rounding, backward takes D = rowsum(dout * out) from the stored
    // (rounded) out, an error of one rounding relative to the magnitude of the terms of dq and dk
    // rather than to the result; f32 gets 1e-5 of that magnitude.
    std::vector<double> got = dqkv.values();
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = 1e-5 * (1 + f.mag[i]) + out_rtol(dt) * (std::fabs(f.dqkv[i]) + 2 * f.mag[i]);
      ASSERT_LE(std::fabs(got[i] - f.dqkv[i]), bound) << "dqkv element " << i;
    }
  }
}

TEST(OpsCpu, AttentionBackwardFiniteDifferences) {
  std::mt19937 g(11);
  for (const AttnDims a : {AttnDims{1, 4, 6, 2}, AttnDims{1, 4, 8, 4, 2}, AttnDims{1, 4, 6, 2, 1}, AttnDims{1, 5, 8, 4, 2, 2}}) {
    SCOPED_TRACE(std::to_string(a.kv()) + " key-value heads, window " + std::to_string(a.window));
    HostTensor qkv(DType::f32, {a.B, a.T, a.W()}), out(DType::f32, {a.B, a.T, a.C}), r(DType::f32, {a.B, a.T, a.C});
    HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(DType::f32, {a.B, a.T, a.W()});
    qkv.randomize(g);
    r.randomize(g);
    auto loss = [&] {
      attention_forward(rt(), out.t(), lse.t(), qkv.t(), a.heads());
      return project(r, out);
    };
    loss();
    attention_backward(rt(), dqkv.t(), r.t(), qkv.t(), out.t(), lse.t(), a.heads());
    check_fd(qkv, dqkv.values(), loss, "dqkv");
  }
}

// Each token's document start: one past the latest earlier end-of-document token (7), else 0.
TEST(OpsCpu, DocumentStarts) {
  HostTensor tokens(DType::i32, {2, 9}), starts(DType::i32, {2, 9});
  const int32_t tok[2][9] = {{1, 7, 2, 3, 7, 7, 4, 5, 7}, {7, 1, 2, 3, 4, 5, 6, 1, 2}};
  const int32_t want[2][9] = {{0, 0, 2, 2, 2, 5, 6, 6, 6}, {0, 1, 1, 1, 1, 1, 1, 1, 1}};
  for (int64_t i = 0; i < 18; ++i) tokens.set(i, tok[i / 9][i % 9]);
  document_starts(rt(), starts.t(), tokens.t(), 7);
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(starts.get(i), want[i / 9][i % 9]) << "token " << i;
  document_starts(rt(), starts.t(), tokens.t(), 9);  // a token that never comes: one document
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(starts.get(i), 0) << "token " << i;
}

// Document masking: attention over a packed sample equals attention over each of its documents
// alone (out, lse and every gradient, bitwise: the same sums in the same order), with and without a
// sliding window, multi-head and grouped-query.
TEST(OpsCpu, AttentionWithinDocumentsEqualsDocumentsAlone) {
  std::mt19937 g(13);
  constexpr int32_t kEod = 3;
  for (auto [dt, a] : {std::pair{DType::f32, AttnDims{2, 13, 16, 4, 2}}, {DType::bf16, AttnDims{2, 13, 12, 3}},
                       {DType::f32, AttnDims{2, 13, 12, 3, 0, 3}}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(a.kv()) + " key-value heads, window " +
                 std::to_string(a.window));
    // Sample 0: documents [0, 4), [4, 5), [5, 11), [11, 13); sample 1: one ending at its last token.
    HostTensor tokens(DType::i32, {a.B, a.T}), starts(DType::i32, {a.B, a.T});
    for (int64_t i = 0; i < a.B * a.T; ++i) tokens.set(i, 5 + int(i % 4));
    for (int64_t t : {3, 4, 10}) tokens.set(t, kEod);
    tokens.set(2 * a.T - 1, kEod);
    document_starts(rt(), starts.t(), tokens.t(), kEod);
    HostTensor qkv(dt, {a.B, a.T, a.W()}), out(dt, {a.B, a.T, a.C}), dout(dt, {a.B, a.T, a.C});
    HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(dt, {a.B, a.T, a.W()});
    qkv.randomize(g, -2.0, 2.0);
    dout.randomize(g);
    AttentionHeads heads = a.heads();
    heads.doc_starts = starts.t();
    attention_forward(rt(), out.t(), lse.t(), qkv.t(), heads);
    attention_backward(rt(), dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), heads);
    const std::vector<std::pair<int64_t, int64_t>> docs[2] = {{{0, 4}, {4, 5}, {5, 11}, {11, 13}}, {{0, 13}}};
    for (int64_t b = 0; b < a.B; ++b)
      for (auto [first, end] : docs[b]) {
        SCOPED_TRACE("sample " + std::to_string(b) + ", document [" + std::to_string(first) + ", " +
                     std::to_string(end) + ")");
        const int64_t n = end - first;
        HostTensor dq(dt, {1, n, a.W()}), dout1(dt, {1, n, a.C}), out1(dt, {1, n, a.C});
        HostTensor lse1(DType::f32, {1, a.H, n}), dqkv1(dt, {1, n, a.W()});
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t c = 0; c < a.W(); ++c) dq.set(t * a.W() + c, qkv.get(((b * a.T) + first + t) * a.W() + c));
          for (int64_t c = 0; c < a.C; ++c) dout1.set(t * a.C + c, dout.get(((b * a.T) + first + t) * a.C + c));
        }
        attention_forward(rt(), out1.t(), lse1.t(), dq.t(), a.heads());
        attention_backward(rt(), dqkv1.t(), dout1.t(), dq.t(), out1.t(), lse1.t(), a.heads());
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t c = 0; c < a.C; ++c)
            ASSERT_EQ(out.get(((b * a.T) + first + t) * a.C + c), out1.get(t * a.C + c)) << "out " << t << ", " << c;
          for (int64_t h = 0; h < a.H; ++h)
            ASSERT_EQ(lse.get((b * a.H + h) * a.T + first + t), lse1.get(h * n + t)) << "lse " << t << ", head " << h;
          for (int64_t c = 0; c < a.W(); ++c)
            ASSERT_EQ(dqkv.get(((b * a.T) + first + t) * a.W() + c), dqkv1.get(t * a.W() + c)) << "dqkv " << t << ", " << c;
        }
      }
  }
}

// ---------------------------------------------------------------- rotary positions

// Each q and k pair (i, i + hd/2) of each head turned by (first + t) theta^(-2i/hd), v untouched; with
// 2 key-value heads of 4 (grouped-query) k has 2 heads.
TEST(OpsCpu, RotaryEmbeddingMatchesReference) {
  std::mt19937 g(12);
  const int64_t B = 2, T = 5, hd = 8, first = 3;
  const double theta = 100.0;
  for (const auto& [dt, H, Hkv] : {std::tuple{DType::f32, 2, 2}, {DType::bf16, 2, 2}, {DType::f16, 2, 2},
                                   {DType::f32, 4, 2}, {DType::bf16, 4, 1}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(Hkv) + " key-value heads");
    const int64_t W = (H + 2 * Hkv) * hd;
    HostTensor x(dt, {B, T, W});
    x.randomize(g, -2.0, 2.0);
    const std::vector<double> in = x.values();
    std::vector<double> want = in;
    for (int64_t row = 0; row < B * T; ++row)
      for (int64_t h = 0; h < H + Hkv; ++h)  // q's heads, then k's
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double a = double(first + row % T) * std::pow(theta, -2.0 * double(i) / double(hd));
          const int64_t j = row * W + h * hd + i, k = j + hd / 2;
          want[size_t(j)] = in[size_t(j)] * std::cos(a) - in[size_t(k)] * std::sin(a);
          want[size_t(k)] = in[size_t(k)] * std::cos(a) + in[size_t(j)] * std::sin(a);
        }
    const AttentionHeads heads{H, Hkv};
    rotary_embedding(rt(), x.t(), heads, theta, first);
    expect_close(x.values(), want, 1e-6, out_rtol(dt), "rotated");
    rotary_embedding(rt(), x.t(), heads, theta, first, true);  // turned back (its backward: the transpose)
    // The forward's rounding to the dtype, turned back: within a few roundings of a pair's size (< 2.9).
    expect_close(x.values(), in, 12 * out_rtol(dt), 0, "turned back");
  }
}

// Llama 3's scaled frequencies (transformers' _compute_llama3_parameters, written out step by step
// here): the long wavelengths divided by the factor, the short kept, those between blended; at
// head size 128 and base 500000 all three bands occur.
TEST(OpsCpu, RotaryLlama3ScalingMatchesTransformers) {
  RotaryFrequencies f(500000.0);
  f.factor = 32;
  f.low_freq_factor = 1;
  f.high_freq_factor = 4;
  f.original_positions = 8192;
  const int64_t half = 64;
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < half; ++i) {
    const double inv = 1.0 / std::pow(500000.0, double(2 * i) / 128.0), wavelen = 2 * M_PI / inv;
    const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
    double want = wavelen > low_wavelen ? inv / 32 : inv;
    const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) want = (1 - smooth) * want / 32 + smooth * want;
    (medium ? blended : wavelen > low_wavelen ? divided : kept)++;
    EXPECT_NEAR(f.inverse_frequency(i, half), want, 1e-12 * inv) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // The op turns by those frequencies: position 1000's pair i by 1000 x inverse_frequency(i).
  HostTensor x(DType::f32, {1, 1001, 3 * 128});  // zeros
  for (int64_t row = 0; row < 1001; ++row)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < half; ++i) x.set(row * 384 + h * 128 + i, 1.0);  // (1, 0) in every pair
  rotary_embedding(rt(), x.t(), AttentionHeads{1, 1}, f);
  const std::vector<double> got = x.values();
  for (int64_t i = 0; i < half; i += 7) {
    const double a = 1000.0 * f.inverse_frequency(i, half);
    EXPECT_NEAR(got[size_t(1000 * 384 + i)], std::cos(a), 1e-6) << i;
    EXPECT_NEAR(got[size_t(1000 * 384 + i + half)], std::sin(a), 1e-6) << i;
  }
}

// LongRoPE (transformers' _compute_longrope_parameters): pair i's frequency theta^(-2i/d) / factor_i,
// and the op's cos and sin times the attention factor; the model takes its long factors where its
// context exceeds the original one.
TEST(OpsCpu, RotaryLongRopeMatchesTransformers) {
  RotaryFrequencies f(10000.0);
  f.longrope = true;
  f.attention_factor = 1.25;
  const int64_t half = 4;
  const double factors[half] = {1.0, 1.5, 4.0, 16.0};
  for (int64_t i = 0; i < half; ++i) f.pair_factors[i] = factors[i];
  for (int64_t i = 0; i < half; ++i)
    EXPECT_NEAR(f.inverse_frequency(i, half), 1.0 / (factors[i] * std::pow(10000.0, double(2 * i) / 8.0)), 1e-15) << i;
  HostTensor x(DType::f32, {1, 8, 3 * 8});  // one head of 8 for q, k, v; (1, 0) in every pair
  for (int64_t row = 0; row < 8; ++row)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < half; ++i) x.set(row * 24 + h * 8 + i, 1.0);
  rotary_embedding(rt(), x.t(), AttentionHeads{1, 1}, f);
  const std::vector<double> got = x.values();
  for (int64_t i = 0; i < half; ++i) {
    const double a = 7.0 * f.inverse_frequency(i, half);
    EXPECT_NEAR(got[size_t(7 * 24 + i)], 1.25 * std::cos(a), 1e-6) << i;
    EXPECT_NEAR(got[size_t(7 * 24 + i + half)], 1.25 * std::sin(a), 1e-6) << i;
  }
  GPTConfig m;
  m.rope = m.rope_longrope = true;
  m.rope_original_positions = 16;
  m.rope_long_factors = {2, 3};
  m.rope_short_factors = {5, 7};
  m.seq_len = 16;
  EXPECT_EQ(m.rotary().pair_factors[1], 7);
  m.seq_len = 17;
  EXPECT_EQ(m.rotary().pair_factors[1], 3);
}

// What RoPE is for: a query and a key turned by their positions score the same at any shift of
// both, and a row at first_position p is turned as row p of the whole sequence (generation's cache).
TEST(OpsCpu, RotaryEmbeddingScoresDependOnRelativePosition) {
  std::mt19937 g(13);
  const int64_t T = 6, H = 1, hd = 16, C = H * hd;
  HostTensor a(DType::f32, {1, T, 3 * C});
  a.randomize(g);
  HostTensor b = a;
  rotary_embedding(rt(), a.t(), int(H), 10000.0, 0);
  rotary_embedding(rt(), b.t(), int(H), 10000.0, 11);
  auto score = [&](const HostTensor& x, int64_t tq, int64_t tk) {
    double s = 0;
    for (int64_t d = 0; d < hd; ++d) s += x.get(tq * 3 * C + d) * x.get(tk * 3 * C + C + d);
    return s;
  };
  for (int64_t tq = 0; tq < T; ++tq)
    for (int64_t tk = 0; tk <= tq; ++tk) EXPECT_NEAR(score(a, tq, tk), score(b, tq, tk), 1e-5) << tq << ", " << tk;
  // Row 4 alone at first_position 4 equals row 4 of the whole sequence, bitwise.
  HostTensor whole(DType::f32, {1, T, 3 * C}), row(DType::f32, {1, 1, 3 * C});
  whole.randomize(g);
  for (int64_t j = 0; j < 3 * C; ++j) row.set(j, whole.get(4 * 3 * C + j));
  rotary_embedding(rt(), whole.t(), int(H), 10000.0, 0);
  rotary_embedding(rt(), row.t(), int(H), 10000.0, 4);
  for (int64_t j = 0; j < 3 * C; ++j) ASSERT_EQ(row.get(j), whole.get(4 * 3 * C + j)) << j;
}

// Partial rotary: with dims = 6 of a head of 16, the first 6 dims of every q and k head turn exactly as
// a head of 6 would (pairs (i, i + 3), frequencies over 6 dims), the other 10 and v do not move.
TEST(OpsCpu, PartialRotaryTurnsTheFirstDimsAsAHeadOfThatSize) {
  std::mt19937 g(17);
  const int64_t T = 5, hd = 16, dims = 6;
  const AttentionHeads heads{2, 1};  // 2 q heads, 1 key-value head: q q k v
  HostTensor x(DType::f32, {1, T, 4 * hd});
  x.randomize(g);
  HostTensor turned = x;
  RotaryFrequencies f(500.0);
  f.dims = dims;
  rotary_embedding(rt(), turned.t(), heads, f, 3);
  // The reference: each q and k head's first 6 dims as a (1, T, 3 heads x 6) tensor turned whole.
  HostTensor small(DType::f32, {1, T, 4 * dims});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < dims; ++d) small.set((t * 4 + h) * dims + d, x.get((t * 4 + h) * hd + d));
  rotary_embedding(rt(), small.t(), heads, RotaryFrequencies(500.0), 3);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t i = (t * 4 + h) * hd + d;
        const float want = h < 3 && d < dims ? small.get((t * 4 + h) * dims + d) : x.get(i);
        ASSERT_EQ(turned.get(i), want) << "row " << t << " head " << h << " dim " << d;
      }
  f.dims = 7;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(rotary_embedding(rt(), turned.t(), heads, f, 0), "turned dims 7 are not even");
}

AttentionDropout test_attention_dropout(float p) {
  AttentionDropout d;
  d.p = p;
  d.seed = 1234;
  d.stream = 77;
  return d;
}

// The mask the ops draw, as a reference function (p = 0.25: threshold 16384, scale 4/3).
AttnMask reference_mask(const AttentionDropout& d, int64_t H, int64_t T) {
  AttentionDropoutKey k;
  k.seed = d.seed;
  k.stream = d.stream;
  k.threshold = uint32_t(std::lround(double(d.p) * 65536.0));
  k.scale = float(65536.0 / double(65536u - k.threshold));
  k.sample_offset = d.sample_offset;
  k.head_offset = d.head_offset;
  k.global_heads = d.global_heads > 0 ? d.global_heads : H;
  k.seq_len = T;
  return [k](int64_t b, int64_t h, int64_t t, int64_t s) { return double(attention_keep_scale(k, b, h, t, s)); };
}

TEST(OpsCpu, AttentionDropoutMatchesReference) {
  std::mt19937 g(13);
  const AttnDims a{2, 9, 12, 3};
  const AttentionDropout drop = test_attention_dropout(0.25f);
  const AttnMask mask = reference_mask(drop, a.H, a.T);
  int64_t kept = 0, total = 0;
  for (int64_t b = 0; b < 64; ++b)
    for (int64_t t = 0; t < 64; ++t)
      for (int64_t s = 0; s < 64; ++s, ++total) {
        const double f = mask(b, 0, t, s);
        ASSERT_TRUE(f == 0.0 || std::fabs(f - 4.0 / 3.0) < 1e-7);
        kept += f > 0;
      }
  EXPECT_NEAR(double(kept) / double(total), 0.75, 0.01);  // 262144 draws: sd 0.001
  HostTensor qkv(DType::f32, {a.B, a.T, 3 * a.C}), out(DType::f32, {a.B, a.T, a.C}), dout(DType::f32, {a.B, a.T, a.C});
  HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(DType::f32, {a.B, a.T, 3 * a.C});
  qkv.randomize(g, -2.0, 2.0);
  dout.randomize(g);
  AttnRef f = attention_ref(qkv, dout, a, mask);
  attention_forward(rt(), out.t(), lse.t(), qkv.t(), int(a.H), drop);
  attention_backward(rt(), dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), int(a.H), drop);
  expect_close(out.values(), f.out, 1e-5, 1e-5, "out");
  expect_close(lse.values(), f.lse, 1e-5, 1e-6, "lse");
  expect_close(dqkv.values(), f.dqkv, 1e-5, 1e-4, "dqkv");
}

TEST(OpsCpu, AttentionDropoutFiniteDifferences) {
  std::mt19937 g(14);
  const AttnDims a{1, 5, 6, 2};
  const AttentionDropout drop = test_attention_dropout(0.3f);
  HostTensor qkv(DType::f32, {a.B, a.T, 3 * a.C}), out(DType::f32, {a.B, a.T, a.C}), r(DType::f32, {a.B, a.T, a.C});
  HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(DType::f32, {a.B, a.T, 3 * a.C});
  qkv.randomize(g);
  r.randomize(g);
  auto loss = [&] {
    attention_forward(rt(), out.t(), lse.t(), qkv.t(), int(a.H), drop);
    return project(r, out);
  };
  loss();
  attention_backward(rt(), dqkv.t(), r.t(), qkv.t(), out.t(), lse.t(), int(a.H), drop);
  check_fd(qkv, dqkv.values(), loss, "dqkv");
}

// A rank holding only some heads and some samples (tensor and data parallelism) draws exactly
// the matching part of the full mask: its output is the matching slice of the full output.
TEST(OpsCpu, AttentionDropoutSliceOfFullMask) {
  std::mt19937 g(15);
  const int64_t B = 3, T = 8, H = 4, hd = 2, C = H * hd;
  const AttentionDropout drop = test_attention_dropout(0.4f);
  HostTensor qkv(DType::f32, {B, T, 3 * C}), out(DType::f32, {B, T, C}), lse(DType::f32, {B, H, T});
  qkv.randomize(g);
  attention_forward(rt(), out.t(), lse.t(), qkv.t(), int(H), drop);
  // Sample 1, heads 2..3: the rank's qkv holds [q | k | v] of its heads only.
  const int64_t h0 = 2, Hl = 2, Cl = Hl * hd;
  HostTensor part(DType::f32, {1, T, 3 * Cl}), pout(DType::f32, {1, T, Cl}), plse(DType::f32, {1, Hl, T});
  for (int64_t t = 0; t < T; ++t)
    for (int which = 0; which < 3; ++which)
      for (int64_t i = 0; i < Cl; ++i)
        part.set(t * 3 * Cl + which * Cl + i, qkv.get((1 * T + t) * 3 * C + which * C + h0 * hd + i));
  AttentionDropout local = drop;
  local.sample_offset = 1;
  local.head_offset = h0;
  local.global_heads = H;
  attention_forward(rt(), pout.t(), plse.t(), part.t(), int(Hl), local);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < Cl; ++i)
      ASSERT_EQ(pout.get(t * Cl + i), out.get((1 * T + t) * C + h0 * hd + i)) << "t " << t << " i " << i;
}

// ---------------------------------------------------------------- cross-entropy

TEST(OpsCpu, CrossEntropyMatchesReference) {
  std::mt19937 g(12);
  const int64_t N = 6, Vp = 13, V = 10;
  const int32_t tg[N] = {3, -1, 0, 9, 5, 9};
  const float dloss = 0.7f;
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor logits(dt, {N, Vp}), targets(DType::i32, {N}), losses(DType::f32, {N}), losses2(DType::f32, {N});
    HostTensor dlogits(dt, {N, Vp});
    logits.randomize(g, -3.0, 3.0);
    for (int64_t r = 0; r < N; ++r) {
      targets.set(r, tg[r]);
      for (int64_t c = V; c < Vp; ++c) logits.set(r * Vp + c, 100.0);  // padding must not count
    }
    std::vector<double> lref(N), dref(size_t(N * Vp));
    for (int64_t r = 0; r < N; ++r) {
      if (tg[r] < 0) continue;
      double mx = -1e300, z = 0;
      for (int64_t c = 0; c < V; ++c) mx = std::max(mx, logits.get(r * Vp + c));
      for (int64_t c = 0; c < V; ++c) z += std::exp(logits.get(r * Vp + c) - mx);
      const double lse = mx + std::log(z);
      lref[size_t(r)] = lse - logits.get(r * Vp + tg[r]);
      for (int64_t c = 0; c < V; ++c)
        dref[size_t(r * Vp + c)] = dloss * (std::exp(logits.get(r * Vp + c) - lse) - (c == tg[r] ? 1 : 0));
    }
    softmax_cross_entropy_forward(rt(), losses.t(), logits.t(), targets.t(), V);
    softmax_cross_entropy_backward(rt(), dlogits.t(), losses2.t(), logits.t(), targets.t(), V, dloss);
    // Losses are f32 from exact inputs (sums in double): f32-level. Gradients: one exp in f32 of
    // an argument of size <= ~6, then one rounding to the dtype.
    expect_close(losses.values(), lref, 1e-5, 1e-6, "losses");
    EXPECT_TRUE(losses2.bitwise_equal(losses));
    expect_close(dlogits.values(), dref, 2e-6, out_rtol(dt), "dlogits");
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < Vp; ++c)
        if (c >= V || tg[r] < 0) {
          EXPECT_EQ(dlogits.get(r * Vp + c), 0.0) << r << "," << c;
        }
    // In place: dlogits aliasing logits gives the same bits.
    softmax_cross_entropy_backward(rt(), logits.t(), losses2.t(), logits.t(), targets.t(), V, dloss);
    EXPECT_TRUE(logits.bitwise_equal(dlogits));
    EXPECT_TRUE(losses2.bitwise_equal(losses));
  }
}

TEST(OpsCpu, CrossEntropyBackwardFiniteDifferences) {
  std::mt19937 g(13);
  const int64_t N = 3, Vp = 7, V = 5;
  const float dloss = 0.7f;
  HostTensor logits(DType::f32, {N, Vp}), targets(DType::i32, {N}), losses(DType::f32, {N}), d(DType::f32, {N, Vp});
  logits.randomize(g, -2.0, 2.0);
  targets.set(0, 4);
  targets.set(1, -1);
  targets.set(2, 0);
  softmax_cross_entropy_backward(rt(), d.t(), losses.t(), logits.t(), targets.t(), V, dloss);
  auto loss = [&] {
    softmax_cross_entropy_forward(rt(), losses.t(), logits.t(), targets.t(), V);
    double s = 0;
    for (int64_t r = 0; r < N; ++r) s += dloss * losses.get(r);
    return s;
  };
  check_fd(logits, d.values(), loss, "dlogits");
}

// ---------------------------------------------------------------- embedding

// Positions t, or each token's place in its document (document_starts' positions, token 3 ending
// documents: 0 1 0 0 1 | 0 0 1 2 3), wpe's gradient then scattered by them.
TEST(OpsCpu, EmbeddingMatchesReference) {
  std::mt19937 g(14);
  const int64_t B = 2, T = 5, V = 7, C = 6, P = 8;
  const int32_t tok[B * T] = {1, 3, 3, 0, 6, 3, 1, 2, 6, 1};
  const int32_t doc_pos[B * T] = {0, 1, 0, 0, 1, 0, 0, 1, 2, 3};
  for (auto [dt, reset] : {std::pair{DType::f32, false}, {DType::bf16, false}, {DType::f16, false},
                           {DType::f32, true}, {DType::bf16, true}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + (reset ? ", positions in documents" : ""));
    HostTensor positions(DType::i32, {B, T}), starts(DType::i32, {B, T});
    HostTensor tokens(DType::i32, {B, T}), wte(dt, {V, C}), wpe(dt, {P, C}), out(dt, {B, T, C}), dout(dt, {B, T, C});
    HostTensor dwte(DType::f32, {V, C}), dwpe(DType::f32, {P, C});
    for (int i = 0; i < B * T; ++i) tokens.set(i, tok[i]);
    document_starts(rt(), starts.t(), tokens.t(), 3, positions.t());
    for (int i = 0; i < B * T; ++i) ASSERT_EQ(positions.get(i), doc_pos[i]) << "position " << i;
    const Tensor pos = reset ? positions.t() : Tensor();
    wte.randomize(g);
    wpe.randomize(g);
    dout.randomize(g);
    dwte.randomize(g);
    dwpe.randomize(g);
    std::vector<double> ref(size_t(B * T * C)), rte = dwte.values(), rpe = dwpe.values();
    for (int64_t i = 0; i < B * T; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t p = reset ? doc_pos[i] : i % T;
        ref[size_t(i * C + c)] = wte.get(tok[i] * C + c) + wpe.get(p * C + c);
        rte[size_t(tok[i] * C + c)] += dout.get(i * C + c);
        rpe[size_t(p * C + c)] += dout.get(i * C + c);
      }
    embedding_forward(rt(), out.t(), tokens.t(), wte.t(), wpe.t(), 0, 0, pos);
    embedding_backward(rt(), dwte.t(), dwpe.t(), dout.t(), tokens.t(), 0, 0, pos);
    // One f32 add then one rounding; the backward sums at most 4 terms of size <= 1 in f32.
    expect_close(out.values(), ref, 1e-7, out_rtol(dt), "out");
    expect_close(dwte.values(), rte, 1e-6, 0, "dwte");
    expect_close(dwpe.values(), rpe, 1e-6, 0, "dwpe");
  }
}

TEST(OpsCpu, EmbeddingBackwardFiniteDifferences) {
  std::mt19937 g(15);
  const int64_t B = 2, T = 3, V = 4, C = 3;
  HostTensor tokens(DType::i32, {B, T}), wte(DType::f32, {V, C}), wpe(DType::f32, {T, C}), out(DType::f32, {B, T, C});
  HostTensor r(DType::f32, {B, T, C}), dwte(DType::f32, {V, C}), dwpe(DType::f32, {T, C});
  const int32_t tok[B * T] = {2, 0, 2, 1, 2, 0};
  for (int i = 0; i < B * T; ++i) tokens.set(i, tok[i]);
  wte.randomize(g);
  wpe.randomize(g);
  r.randomize(g);
  fill(rt(), dwte.t(), 0.0f);
  fill(rt(), dwpe.t(), 0.0f);
  embedding_backward(rt(), dwte.t(), dwpe.t(), r.t(), tokens.t());
  auto loss = [&] {
    embedding_forward(rt(), out.t(), tokens.t(), wte.t(), wpe.t());
    return project(r, out);
  };
  check_fd(wte, dwte.values(), loss, "dwte");
  check_fd(wpe, dwpe.values(), loss, "dwpe");
}

// ---------------------------------------------------------------- dropout

bool keep_ref(const DropoutKey& k, uint64_t global_index, float p) {
  return philox_uniform(philox_word(k.seed, k.stream, global_index)) >= p;
}

TEST(OpsCpu, DropoutMatchesReference) {
  std::mt19937 g(16);
  const int64_t R = 6, C = 10;
  const float p = 0.3f;
  const DropoutKey key{42, 7, 0, 0, 0, 0, 0};
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {R, C}), out(dt, {R, C}), dx(dt, {R, C});
    x.randomize(g);
    std::vector<double> ref(size_t(R * C));
    for (int64_t i = 0; i < R * C; ++i) ref[size_t(i)] = keep_ref(key, uint64_t(i), p) ? x.get(i) / (1.0 - p) : 0.0;
    dropout_forward(rt(), out.t(), x.t(), p, key);
    dropout_backward(rt(), dx.t(), x.t(), p, key);
    // x times a rounded reciprocal in f32 (two roundings), then one to the dtype.
    expect_close(out.values(), ref, 0, out_rtol(dt) + 0x1p-22, "out");
    EXPECT_TRUE(dx.bitwise_equal(out));  // backward applies the same mask
    dropout_forward(rt(), x.t(), x.t(), p, key);  // in place
    EXPECT_TRUE(x.bitwise_equal(out));
    dropout_forward(rt(), out.t(), dx.t(), 0.0f, key);  // p = 0 is a copy
    EXPECT_TRUE(out.bitwise_equal(dx));
  }
}

// sum(R * dropout(x)) is linear in x: the FD check confirms backward uses forward's mask and scale.
TEST(OpsCpu, DropoutBackwardFiniteDifferences) {
  std::mt19937 g(17);
  const DropoutKey key{3, 1, 0, 0, 0, 0, 0};
  HostTensor x(DType::f32, {4, 8}), out(DType::f32, {4, 8}), r(DType::f32, {4, 8}), dx(DType::f32, {4, 8});
  x.randomize(g);
  r.randomize(g);
  dropout_backward(rt(), dx.t(), r.t(), 0.25f, key);
  check_fd(x, dx.values(), [&] { dropout_forward(rt(), out.t(), x.t(), 0.25f, key); return project(r, out); }, "dx");
}

TEST(OpsCpu, DropoutMaskProperties) {
  const int64_t R = 200, C = 500;
  const float p = 0.1f;
  HostTensor ones(DType::f32, {R, C}), a(DType::f32, {R, C}), b(DType::f32, {R, C}), c(DType::f32, {R, C});
  fill(rt(), ones.t(), 1.0f);
  DropoutKey key{1234, 5, 0, 0, 0, 0, 0};
  dropout_forward(rt(), a.t(), ones.t(), p, key);
  dropout_forward(rt(), b.t(), ones.t(), p, key);
  EXPECT_TRUE(a.bitwise_equal(b)) << "same key, same mask";
  DropoutKey other = key;
  other.stream = 6;
  dropout_forward(rt(), c.t(), ones.t(), p, other);
  int64_t kept = 0, differ = 0;
  for (int64_t i = 0; i < R * C; ++i) {
    kept += a.get(i) != 0.0;
    differ += (a.get(i) != 0.0) != (c.get(i) != 0.0);
  }
  // 1e5 Bernoulli(0.9) draws: the standard deviation of the fraction is ~1e-3; allow 5 sigma.
  EXPECT_NEAR(double(kept) / double(R * C), 1.0 - p, 5e-3);
  // Independent masks disagree on 2 p (1 - p) = 18% of the elements.
  EXPECT_NEAR(double(differ) / double(R * C), 2 * p * (1 - p), 1e-2) << "streams must differ";

  // A column shard [200, 300) of the (R, C) activation reproduces that slice of the full mask.
  HostTensor shard_in(DType::f32, {R, 100}), shard(DType::f32, {R, 100});
  fill(rt(), shard_in.t(), 1.0f);
  DropoutKey ck = key;
  ck.global_cols = C;
  ck.col_offset = 200;
  dropout_forward(rt(), shard.t(), shard_in.t(), p, ck);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < 100; ++j) ASSERT_EQ(shard.get(r * 100 + j), a.get(r * C + 200 + j)) << r << "," << j;

  // A sequence shard: rows are (batch 4, T 50); the shard holds positions [25, 50) of each sequence.
  HostTensor seq_in(DType::f32, {4 * 25, C}), seq(DType::f32, {4 * 25, C});
  fill(rt(), seq_in.t(), 1.0f);
  DropoutKey sk = key;
  sk.seq_local = 25;
  sk.seq_global = 50;
  sk.seq_offset = 25;
  dropout_forward(rt(), seq.t(), seq_in.t(), p, sk);
  for (int64_t r = 0; r < 100; ++r) {
    const int64_t grow = (r / 25) * 50 + 25 + r % 25;
    for (int64_t j = 0; j < C; ++j) ASSERT_EQ(seq.get(r * C + j), a.get(grow * C + j)) << r << "," << j;
  }
}

// ---------------------------------------------------------------- adamw, reductions

// Runs with and without weight decay in one call equal one call per run.
TEST(OpsCpu, AdamWRunsEqualOneCallPerRun) {
  std::mt19937 g(19);
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.3f, 2, {}};
  AdamWRuns runs;
  runs.ends = {5, 6, 40, 41, 43, 100};
  runs.decays = {false, true, true, false, false, true};
  const int64_t n = runs.ends.back();
  HostTensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n}), gr(DType::f32, {n}), po(DType::bf16, {n});
  w.randomize(g);
  m.randomize(g, -0.1, 0.1);
  v.randomize(g, 0.0, 0.01);
  gr.randomize(g);
  HostTensor w2 = w, m2 = m, v2 = v, po2(DType::bf16, {n});
  int64_t begin = 0;
  for (size_t r = 0; r < runs.ends.size(); ++r) {
    const int64_t k = runs.ends[r] - begin;
    AdamWHyper hr = h;
    if (!runs.decays[r]) hr.weight_decay = 0.0f;
    adamw_step(rt(), w2.t().slice(begin, {k}), m2.t().slice(begin, {k}), v2.t().slice(begin, {k}),
               gr.t().slice(begin, {k}), po2.t().slice(begin, {k}), hr, 0.5f);
    begin = runs.ends[r];
  }
  adamw_step(rt(), w.t(), m.t(), v.t(), gr.t(), po.t(), h, 0.5f, &runs);
  EXPECT_TRUE(w.bitwise_equal(w2));
  EXPECT_TRUE(m.bitwise_equal(m2));
  EXPECT_TRUE(v.bitwise_equal(v2));
  EXPECT_TRUE(po.bitwise_equal(po2));
  AdamWRuns short_runs;
  short_runs.ends = {5, 99};
  short_runs.decays = {true, false};
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(adamw_step(rt(), w.t(), m.t(), v.t(), gr.t(), Tensor(), h, 1.0f, &short_runs),
               "runs must end at the tensors' length 100");
}

// The step's values on the device (core/step_scalars.h): adamw_step_scalars clips and unscales as
// the host did, skips a non-finite step, and AdamW from them equals AdamW from host values.
TEST(OpsCpu, AdamWFromStepScalars) {
  auto finish = [](float loss_sum, float norm_sq, float max_norm) {
    HostTensor s(DType::f32, {kStepScalarCount}), l(DType::f32, {1}), q(DType::f32, {1});
    s.set(kLossScale, 1024.0f);
    s.set(kMaxNorm, max_norm);
    l.set(0, loss_sum);
    q.set(0, norm_sq);
    adamw_step_scalars(rt(), s.t(), l.t(), q.t());
    return std::pair{float(s.get(kGradScale)), float(s.get(kApply))};
  };
  const float big = 3.0f * 1024.0f, small = 0.5f * 1024.0f;
  EXPECT_EQ(finish(7.0f, big * big, 1.0f), std::pair(float((1.0 / 3.0) / 1024.0), 1.0f));  // clipped to norm 1
  EXPECT_EQ(finish(7.0f, small * small, 1.0f), std::pair(float(1.0 / 1024.0), 1.0f));     // below the threshold
  EXPECT_EQ(finish(7.0f, big * big, 0.0f), std::pair(float(1.0 / 1024.0), 1.0f));         // no clipping
  EXPECT_EQ(finish(7.0f, INFINITY, 1.0f).second, 0.0f);
  EXPECT_EQ(finish(NAN, small * small, 1.0f).second, 0.0f);

  std::mt19937 g(20);
  const int64_t n = 103;
  AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.3f, 4, {}};
  const float gs = 0.25f;
  HostTensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n}), gr(DType::bf16, {n}), po(DType::bf16, {n});
  w.randomize(g);
  m.randomize(g, -0.1, 0.1);
  v.randomize(g, 0.0, 0.01);
  gr.randomize(g);
  HostTensor w2 = w, m2 = m, v2 = v, po2 = po;
  adamw_step(rt(), w.t(), m.t(), v.t(), gr.t(), po.t(), h, gs);
  HostTensor s(DType::f32, {kStepScalarCount});
  s.set(kLr, h.lr);
  s.set(kBiasCorrection1, bias_correction(h.beta1, h.step));
  s.set(kBiasCorrection2, bias_correction(h.beta2, h.step));
  s.set(kGradScale, gs);
  s.set(kApply, 0.0f);
  AdamWHyper hs{0.0f, 0.9f, 0.95f, 1e-8f, 0.3f, 1, {}};  // lr and step unused
  hs.scalars = s.t();
  const HostTensor w0 = w2, m0 = m2, v0 = v2;
  adamw_step(rt(), w2.t(), m2.t(), v2.t(), gr.t(), po2.t(), hs, 99.0f);  // skipped: nothing changes
  EXPECT_TRUE(w2.bitwise_equal(w0) && m2.bitwise_equal(m0) && v2.bitwise_equal(v0));
  s.set(kApply, 1.0f);
  adamw_step(rt(), w2.t(), m2.t(), v2.t(), gr.t(), po2.t(), hs, 99.0f);
  EXPECT_TRUE(w2.bitwise_equal(w));
  EXPECT_TRUE(m2.bitwise_equal(m));
  EXPECT_TRUE(v2.bitwise_equal(v));
  EXPECT_TRUE(po2.bitwise_equal(po));
}

TEST(OpsCpu, AdamWMatchesReference) {
  std::mt19937 g(18);
  const int64_t n = 257;
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, {}};
  const float gs = 0.5f;
  for (DType pt : kFloatTypes)
    for (bool with_out : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(pt)) + (with_out ? " with params_out" : ""));
      HostTensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n}), gr(DType::f32, {n}), po(pt, {n});
      w.randomize(g);
      m.randomize(g, -0.1, 0.1);
      v.randomize(g, 0.0, 0.01);
      gr.randomize(g);
      std::vector<double> rw(n), rm(n), rv(n);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = gr.get(i) * gs;
        rm[size_t(i)] = 0.9 * m.get(i) + 0.1 * gi;
        rv[size_t(i)] = 0.95 * v.get(i) + 0.05 * gi * gi;
        const double mh = rm[size_t(i)] / (1 - std::pow(0.9, 3)), vh = rv[size_t(i)] / (1 - std::pow(0.95, 3));
        rw[size_t(i)] = w.get(i) - 1e-2 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * w.get(i));
      }
      adamw_step(rt(), w.t(), m.t(), v.t(), gr.t(), with_out ? po.t() : Tensor(), h, gs);
      // f32 arithmetic on O(1) values: a few ulps; the hyper-parameters themselves are f32
      // (0.9f != 0.9), a relative 3e-8 change of each coefficient.
      expect_close(m.values(), rm, 1e-7, 1e-6, "m");
      expect_close(v.values(), rv, 1e-9, 1e-6, "v");
      expect_close(w.values(), rw, 1e-7, 1e-6, "master");
      if (with_out) expect_close(po.values(), rw, 1e-7, out_rtol(pt) + 1e-6, "params_out");
    }
}

// Split masters (core/dtype.h): the pair is the master exactly, and its high half is the master
// rounded to bf16, to nearest with ties away from zero.
TEST(OpsCpu, SplitMasterIsExact) {
  std::mt19937 g(23);
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu,
                                0x3f808001u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu};
  for (int i = 0; i < 100000; ++i) bits.push_back(uint32_t(g()));
  // A NaN master stays NaN, and so does its parameter (no carry into the sign or a wrap to zero).
  for (uint32_t b : {0x7fc00000u, 0x7f800001u, 0x7f807fffu, 0x7fff8000u, 0x7fffffffu, 0xffff8000u, 0xffffffffu}) {
    bf16_t hi;
    uint16_t lo;
    split_master(bits_to_f32(b), hi, lo);
    EXPECT_TRUE(std::isnan(join_master(hi, lo))) << std::hex << b;
    EXPECT_TRUE(std::isnan(to_float(hi))) << std::hex << b;
    EXPECT_EQ(hi.bits >> 15, b >> 31) << std::hex << b;
  }
  for (uint32_t b : bits) {
    const float w = bits_to_f32(b);
    if (std::isnan(w)) continue;
    bf16_t hi;
    uint16_t lo;
    split_master(w, hi, lo);
    ASSERT_EQ(f32_to_bits(join_master(hi, lo)), b) << std::hex << b;
    const double err = std::abs(double(to_float(hi)) - double(w));
    const double ulp = std::abs(double(bits_to_f32((uint32_t(hi.bits) << 16) ^ 0x10000u)) - double(to_float(hi)));
    if (!std::isinf(to_float(hi))) {
      ASSERT_LE(err, ulp / 2) << std::hex << b;
    }
    if ((b & 0xffffu) != 0x8000u && std::abs(w) < 3.38e38f) {  // round to nearest even agrees but on ties
      ASSERT_EQ(hi.bits, to_bf16(w).bits) << std::hex << b;
    }
  }
}

// AdamW on split masters computes what it does on f32 masters, bitwise, runs and decay included.
TEST(OpsCpu, AdamWOnSplitMastersEqualsF32Masters) {
  std::mt19937 g(29);
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.3f, 4, {}};
  AdamWRuns runs;
  runs.ends = {7, 64, 100, 1001};
  runs.decays = {false, true, false, true};
  const int64_t n = runs.ends.back();
  HostTensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n}), gr(DType::f32, {n});
  w.randomize(g);
  m.randomize(g, -0.1, 0.1);
  v.randomize(g, 0.0, 0.01);
  gr.randomize(g);
  HostTensor hi(DType::bf16, {n}), lo(DType::bf16, {n}), m2 = m, v2 = v, po(DType::bf16, {n});
  auto* ph = hi.t().ptr<bf16_t>();
  auto* pl = lo.t().ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) split_master(w.t().ptr<float>()[i], ph[i], pl[i]);
  for (int step = 0; step < 3; ++step) {
    adamw_step(rt(), w.t(), m.t(), v.t(), gr.t(), po.t(), h, 0.5f, &runs);
    adamw_step(rt(), lo.t(), m2.t(), v2.t(), gr.t(), hi.t(), h, 0.5f, &runs);
  }
  EXPECT_TRUE(m.bitwise_equal(m2));
  EXPECT_TRUE(v.bitwise_equal(v2));
  int ties = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w.t().ptr<float>()[i];
    ASSERT_EQ(f32_to_bits(join_master(ph[i], pl[i])), f32_to_bits(wi)) << i;
    ties += (f32_to_bits(wi) & 0xffffu) == 0x8000u;
    if ((f32_to_bits(wi) & 0xffffu) != 0x8000u) {
      ASSERT_EQ(ph[i].bits, po.t().ptr<bf16_t>()[i].bits) << i;
    }
  }
  EXPECT_LE(ties, 1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(adamw_step(rt(), lo.t(), m2.t(), v2.t(), gr.t(), Tensor(), h, 1.0f),
               "the low halves of split masters beside bf16 parameters");
}

// train.grad_dtype: an op writing a 16-bit gradient gives the f32 gradient (from the same old
// values) rounded once, and AdamW reads a 16-bit gradient as the f32 one of the same value.
TEST(OpsCpu, GradientsIn16BitAreTheF32OnesRoundedOnce) {
  std::mt19937 g(41);
  auto widened = [](const HostTensor& h) {
    HostTensor w(DType::f32, {h.numel()});
    for (int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
    return w;
  };
  auto expect_rounded = [](const HostTensor& g16, const HostTensor& g32, const char* what) {
    for (int64_t i = 0; i < g16.numel(); ++i) {
      HostTensor r(g16.dtype(), {1});
      r.set(0, g32.get(i));
      ASSERT_EQ(g16.get(i), r.get(0)) << what << "[" << i << "]";
    }
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const int64_t R = 37, C = 70, V = 11;
    HostTensor dy(dt, {R, C});
    dy.randomize(g);
    for (bool accumulate : {true, false}) {
      HostTensor db16(dt, {C});
      db16.randomize(g);
      HostTensor db32 = widened(db16);
      bias_backward(rt(), db16.t(), dy.t(), accumulate);
      bias_backward(rt(), db32.t(), dy.t(), accumulate);
      expect_rounded(db16, db32, "bias_backward db");
    }
    {  // layer norm: dw, db and the residual column sums; dx is not a parameter gradient
      HostTensor x(dt, {R, C}), w(dt, {C}), b(dt, {C}), y(dt, {R, C}), mean(DType::f32, {R}), rstd(DType::f32, {R});
      x.randomize(g, -2, 2);
      w.randomize(g, 0.5, 1.5);
      b.randomize(g);
      layernorm_forward(rt(), y.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t());
      HostTensor dx16(dt, {R, C}), dw16(dt, {C}), db16(dt, {C}), before16(dt, {C}), after16(dt, {C});
      for (HostTensor* t : {&dx16, &dw16, &db16, &before16, &after16}) t->randomize(g);
      HostTensor dx32 = dx16, dw32 = widened(dw16), db32 = widened(db16), before32 = widened(before16),
                 after32 = widened(after16);
      const ResidualColumnSums s16{before16.t(), after16.t(), false, true}, s32{before32.t(), after32.t(), false, true};
      layernorm_backward(rt(), dx16.t(), dw16.t(), db16.t(), dy.t(), x.t(), w.t(), mean.t(), rstd.t(), true, &s16);
      layernorm_backward(rt(), dx32.t(), dw32.t(), db32.t(), dy.t(), x.t(), w.t(), mean.t(), rstd.t(), true, &s32);
      EXPECT_TRUE(dx16.bitwise_equal(dx32));
      expect_rounded(dw16, dw32, "layernorm_backward dw");
      expect_rounded(db16, db32, "layernorm_backward db");
      expect_rounded(before16, before32, "layernorm_backward sum before");
      expect_rounded(after16, after32, "layernorm_backward sum after");
    }
    {  // embeddings: repeated tokens sum in f32 before the one rounding
      const int64_t B = 2, T = 5;
      HostTensor tokens(DType::i32, {B, T}), dout(dt, {B, T, C}), wte16(dt, {V, C}), wpe16(dt, {T, C});
      for (int64_t i = 0; i < B * T; ++i) tokens.set(i, double(i % 3 * 4));
      dout.randomize(g);
      wte16.randomize(g);
      wpe16.randomize(g);
      HostTensor wte32 = widened(wte16), wpe32 = widened(wpe16);
      embedding_backward(rt(), wte16.t(), wpe16.t(), dout.t(), tokens.t());
      embedding_backward(rt(), wte32.t().view({V, C}), wpe32.t().view({T, C}), dout.t(), tokens.t());
      expect_rounded(wte16, wte32, "embedding_backward dwte");
      expect_rounded(wpe16, wpe32, "embedding_backward dwpe");
    }
    {  // AdamW on f32 masters and on split masters
      const int64_t n = 1001;
      HostTensor grad16(dt, {n}), w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n});
      grad16.randomize(g);
      w.randomize(g);
      m.randomize(g, -0.1, 0.1);
      v.randomize(g, 0.0, 0.01);
      HostTensor grad32 = widened(grad16), w2 = w, m2 = m, v2 = v, out16(dt, {n}), out32(dt, {n});
      const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, {}};
      adamw_step(rt(), w.t(), m.t(), v.t(), grad16.t(), out16.t(), h, 0.5f);
      adamw_step(rt(), w2.t(), m2.t(), v2.t(), grad32.t(), out32.t(), h, 0.5f);
      EXPECT_TRUE(w.bitwise_equal(w2) && m.bitwise_equal(m2) && v.bitwise_equal(v2) && out16.bitwise_equal(out32));
      if (dt == DType::bf16) {
        HostTensor lo(DType::bf16, {n}), lo2(DType::bf16, {n});
        adamw_step(rt(), lo.t(), m.t(), v.t(), grad16.t(), out16.t(), h, 0.5f);
        adamw_step(rt(), lo2.t(), m2.t(), v2.t(), grad32.t(), out32.t(), h, 0.5f);
        EXPECT_TRUE(lo.bitwise_equal(lo2) && out16.bitwise_equal(out32) && m.bitwise_equal(m2));
      }
    }
    // Any other gradient dtype is refused.
    HostTensor other(dt == DType::bf16 ? DType::f16 : DType::bf16, {C});
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(bias_backward(rt(), other.t(), dy.t()), "a gradient is f32 or");
  }
}

TEST(OpsCpu, SumAccumulateMatchesReference) {
  std::mt19937 g(19);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    HostTensor x(dt, {10001}), s(DType::f32, {1}), q(DType::f32, {1});  // spans several chunks
    x.randomize(g, -0.5, 1.0);
    s.set(0, 1.25);
    q.set(0, 1.25);
    double rs = 1.25, rq = 1.25;
    for (int64_t i = 0; i < x.numel(); ++i) {
      rs += x.get(i);
      rq += x.get(i) * x.get(i);
    }
    sum_accumulate(rt(), s.t(), x.t());
    sum_squares_accumulate(rt(), q.t(), x.t());
    // Summed in double, rounded once to f32.
    expect_close(s.values(), {rs}, 1e-9, 0x1p-23, "sum");
    expect_close(q.values(), {rq}, 1e-9, 0x1p-23, "sum of squares");
  }
}

// ---------------------------------------------------------------- thread-count determinism

// Runs `op` (which writes into the tensors it captures, reset by `reset`) with 1 and with 4
// threads; sizes are above the parallel threshold so the multi-threaded path really runs.
void expect_thread_invariant(const std::function<void()>& reset, const std::function<void()>& op,
                             const std::vector<HostTensor*>& outs) {
  std::vector<HostTensor> first;
  with_threads(1, [&] { reset(); op(); });
  for (HostTensor* t : outs) first.push_back(*t);
  with_threads(4, [&] { reset(); op(); });
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_TRUE(outs[i]->bitwise_equal(first[i])) << "output " << i;
}

TEST(OpsCpu, DeterministicAcrossThreadCounts) {
  std::mt19937 g(20);
  {  // bias_backward
    HostTensor dy(DType::f32, {600, 70}), db(DType::f32, {70});
    dy.randomize(g);
    expect_thread_invariant([&] { fill(rt(), db.t(), 0.5f); }, [&] { bias_backward(rt(), db.t(), dy.t()); }, {&db});
  }
  {  // layernorm_backward
    const int64_t R = 500, C = 48;
    HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}), b(DType::bf16, {C}), out(DType::bf16, {R, C});
    HostTensor mean(DType::f32, {R}), rstd(DType::f32, {R}), dout(DType::bf16, {R, C});
    HostTensor dx(DType::bf16, {R, C}), dw(DType::f32, {C}), db(DType::f32, {C});
    x.randomize(g);
    w.randomize(g);
    b.randomize(g);
    dout.randomize(g);
    layernorm_forward(rt(), out.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t(), 1e-5f);
    expect_thread_invariant(
        [&] { for (HostTensor* t : {&dx, &dw, &db}) fill(rt(), t->t(), 0.25f); },
        [&] { layernorm_backward(rt(), dx.t(), dw.t(), db.t(), dout.t(), x.t(), w.t(), mean.t(), rstd.t()); },
        {&dx, &dw, &db});
  }
  {  // sum_squares_accumulate
    HostTensor x(DType::f32, {200000}), s(DType::f32, {1});
    x.randomize(g);
    expect_thread_invariant([&] { s.set(0, 0.0); }, [&] { sum_squares_accumulate(rt(), s.t(), x.t()); }, {&s});
  }
  {  // attention forward and backward
    const AttnDims a{2, 64, 32, 4};
    HostTensor qkv(DType::f32, {a.B, a.T, 3 * a.C}), out(DType::f32, {a.B, a.T, a.C}), dout(DType::f32, {a.B, a.T, a.C});
    HostTensor lse(DType::f32, {a.B, a.H, a.T}), dqkv(DType::f32, {a.B, a.T, 3 * a.C});
    qkv.randomize(g);
    dout.randomize(g);
    expect_thread_invariant([] {},
                            [&] {
                              attention_forward(rt(), out.t(), lse.t(), qkv.t(), int(a.H));
                              attention_backward(rt(), dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), int(a.H));
                            },
                            {&out, &lse, &dqkv});
  }
  {  // embedding_backward (dwte scatter, dwpe batch sum)
    const int64_t B = 8, T = 64, V = 50, C = 80;
    HostTensor tokens(DType::i32, {B, T}), dout(DType::f32, {B, T, C}), dwte(DType::f32, {V, C}), dwpe(DType::f32, {T, C});
    std::uniform_int_distribution<int> u(0, int(V) - 1);
    for (int64_t i = 0; i < B * T; ++i) tokens.set(i, u(g));
    dout.randomize(g);
    expect_thread_invariant([&] { fill(rt(), dwte.t(), 0.0f); fill(rt(), dwpe.t(), 0.0f); },
                            [&] { embedding_backward(rt(), dwte.t(), dwpe.t(), dout.t(), tokens.t()); },
                            {&dwte, &dwpe});
  }
}

}  // namespace
