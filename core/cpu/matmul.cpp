// CPU GEMM through OpenBLAS sgemm (16-bit inputs staged in f32), with the GELU options as the GEMM
// followed by the GELU op, and the bias gradient.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {

constexpr int64_t kGemmBlock = 128;

// c (M, N, f32) = [c +] [bias] + alpha * op(a) @ op(b), with a and b already f32.
void sgemm_into(float* c, const float* a, const float* b, const Tensor* bias, int64_t M, int64_t N,
                int64_t K, const MatmulOptions& opt, bool keep_c) {
  if (bias) {
    dispatch_float(bias->dtype, "matmul bias", [&](auto tag) {
      using T = decltype(tag);
      const T* pb = bias->ptr<T>();
#pragma omp parallel for schedule(static) if (M * N > kParallelMin)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * N + j] = (keep_c ? c[i * N + j] : 0.0f) + load(pb, j);
    });
    keep_c = true;
  }
  if (K == 0) {  // empty product: BLAS may reject the leading dimensions
    if (!keep_c) std::fill(c, c + M * N, 0.0f);
    return;
  }
  // OpenBLAS's own thread pool beside OpenMP's spinning threads oversubscribed the cores: on two
  // cores a quarter of the tiny model's steps took 15-30x their median. So BLAS runs on one thread
  // and the GEMM is cut into blocks of kGemmBlock rows (or columns, when those are fewer) that
  // OpenMP's threads take: fixed blocks, so the result does not depend on the thread count.
  static const bool blas_single_threaded = (openblas_set_num_threads(1), true);
  (void)blas_single_threaded;
  const int lda = int(std::max<int64_t>(1, opt.trans_a ? M : K));
  const int ldb = int(std::max<int64_t>(1, opt.trans_b ? K : N));
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N, blocks = (extent + kGemmBlock - 1) / kGemmBlock;
#pragma omp parallel for schedule(dynamic) if (blocks > 1 && M * N * K > kParallelMin)
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t lo = i * kGemmBlock, n = std::min(kGemmBlock, extent - lo);
    // A block of C's rows takes op(a)'s rows; of its columns, op(b)'s columns.
    const float* ab = by_rows ? a + (opt.trans_a ? lo : lo * lda) : a;
    const float* bb = by_rows ? b : b + (opt.trans_b ? lo * ldb : lo);
    float* cb = by_rows ? c + lo * N : c + lo;
    cblas_sgemm(CblasRowMajor, opt.trans_a ? CblasTrans : CblasNoTrans, opt.trans_b ? CblasTrans : CblasNoTrans,
                int(by_rows ? n : M), int(by_rows ? N : n), int(K), opt.alpha, ab, lda, bb, ldb, keep_c ? 1.0f : 0.0f,
                cb, int(N));
  }
}

}  // namespace

void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  TRELLIS_CHECK(opt.batch == 1, "cpu::matmul: one problem (core/ops.cpp runs a batch's one by one)");
  // The fused GELU is the plain GEMM followed by the GELU op, as the separate ops would run.
  if (opt.gelu_input || opt.gelu_grad_of) {
    MatmulOptions plain = opt;
    plain.gelu_input = plain.gelu_grad_of = nullptr;
    if (opt.gelu_input) {
      const Tensor pre = opt.gelu_input->view(out.shape);
      cpu::matmul(rt, pre, a, b, plain);
      cpu::gelu_forward(rt, out, pre);
    } else {
      cpu::matmul(rt, out, a, b, plain);
      cpu::gelu_backward(rt, out, out, *opt.gelu_grad_of);
    }
    return;
  }
  const int64_t M = out.size(0), N = out.size(1);
  const int64_t K = opt.trans_a ? a.size(0) : a.size(1);
  if (M == 0 || N == 0) return;
  const bool in_f32 = a.dtype == DType::f32, out_f32 = out.dtype == DType::f32;
  ScratchF32 scratch(rt, {in_f32 ? 0 : M * K, in_f32 ? 0 : K * N, out_f32 ? 0 : M * N});
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  if (!in_f32) {
    float* ta = scratch.take(M * K);
    float* tb = scratch.take(K * N);
    to_f32(ta, a, M * K);
    to_f32(tb, b, K * N);
    pa = ta;
    pb = tb;
  }
  // What the product is added to: out (accumulate), the residual, or nothing.
  const Tensor* base = opt.residual ? opt.residual : opt.accumulate ? &out : nullptr;
  if (out_f32) {
    if (base && base->data != out.data) std::memcpy(out.data, base->data, size_t(M * N) * sizeof(float));
    sgemm_into(out.ptr<float>(), pa, pb, opt.bias, M, N, K, opt, base != nullptr);
    return;
  }
  // 16-bit out: compute in f32, round once at the end.
  float* c = scratch.take(M * N);
  if (base) to_f32(c, *base, M * N);
  sgemm_into(c, pa, pb, opt.bias, M, N, K, opt, base != nullptr);
  from_f32(out, c, M * N);
}

void bias_backward(Runtime&, const Tensor& db, const Tensor& dy, bool accumulate, int64_t batch, int64_t) {
  TRELLIS_CHECK(batch == 1, "cpu::bias_backward: one block (core/ops.cpp runs a batch's one by one)");
  // Parallel over column blocks; each column is summed over all rows in row order (in double),
  // so the result does not depend on the number of threads.
  const int64_t R = outer_dim(dy), N = inner_dim(dy);
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (N + kBlock - 1) / kBlock;
  dispatch_float(dy.dtype, "bias_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = dy.ptr<T>();
#pragma omp parallel for schedule(static) if (R * N > kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(N, c0 + kBlock);
      double acc[kBlock] = {};
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += load(p, r * N + c);
      for (int64_t c = c0; c < c1; ++c) add_into(db, c, acc[c - c0], accumulate);
    }
  });
}

}  // namespace trellis::cpu
