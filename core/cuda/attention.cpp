// CUDA causal self-attention (within AttentionHeads::window and doc_starts where they are set). bf16/f16 with head_dim 64 or 128 take cuDNN's fused flash attention
// where cudnn_attention() accepts the problem (no attention dropout, no document masking, not
// deterministic, built with the cuDNN frontend), else the fused FlashAttention-2 style kernels of flash_attention.cu (no T x T
// matrix; backward scratch only D, B*H*T*4 bytes). Everything else (f32, other head sizes) takes
// the unfused reference-speed version: heads permuted into scratch (a key-value head repeated for each
// query head of its group, and their gradients summed back),
// S = q k^T / sqrt(hd) and the products with P by cuBLAS strided-batched GEMMs (f32 compute), a
// causal softmax kernel that keeps only the log-sum-exp for backward. Attention dropout is applied
// to the probabilities by the softmax kernels. Its scratch (bytes, es = dtype size, 256-byte
// alignment of each piece aside):
//   forward:  4*B*H*T*hd*es + B*H*T*T*(4 + es)
//   backward: 7*B*H*T*hd*es + B*H*T*4 + B*H*T*T*(8 + es)
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "core/cuda/cuda_state.h"
#include "core/cuda/gpu_ops.h"
#include "core/cuda/kernel_scratch.h"
#include "core/cuda/launchers.h"
#if TRELLIS_HAVE_CUDNN
#include "core/cuda/cudnn_attention.h"
#endif

namespace trellis::gpu {

namespace {

cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: TRELLIS_FATAL("attention: unsupported dtype " + std::string(dtype_name(t)));
  }
}

// Column-major strided-batched GEMM with f32 compute (no TF32): C = alpha op(A) op(B) + beta C.
void gemm(CudaState& st, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha,
          const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, DType ab,
          void* C, int64_t ldc, int64_t stride_c, cudaDataType_t ct, int64_t batch) {
  float beta = 0.0f;
  cudaDataType_t at = blas_type(ab);
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(st.blas, ta, tb, int(m), int(n), int(k), &alpha, A, at, int(lda),
                                          (long long)stride_a, B, at, int(ldb), (long long)stride_b, &beta, C, ct,
                                          int(ldc), (long long)stride_c, int(batch), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

struct Dims {
  int64_t B, T, C, H, Hkv, hd, BH, W;  // C = H hd (out's row), W = (H + 2 Hkv) hd (qkv's row)
  AttentionMask mask;                  // sliding window (0: none) and document starts
  size_t es;
  int64_t group() const { return H / Hkv; }
  int64_t Ckv() const { return Hkv * hd; }
};

Dims dims_of(const Tensor& qkv, AttentionHeads heads) {
  Dims d{};
  d.B = qkv.size(0);
  d.T = qkv.size(1);
  d.W = qkv.size(2);
  d.H = heads.q;
  d.Hkv = heads.kv;
  d.mask.window = heads.window < d.T ? heads.window : 0;  // a window past the sequence is none
  if (heads.doc_starts.defined()) d.mask.doc_starts = heads.doc_starts.ptr<int32_t>();
  d.hd = d.W / heads.qkv_heads();
  d.C = d.H * d.hd;
  d.BH = d.B * d.H;
  d.es = dtype_size(qkv.dtype);
  return d;
}

// Row-major S (T, T) = scale * X Y^T per head, as column-major S^T = Y X^T.
void scores(CudaState& st, float* S, const void* X, const void* Y, const Dims& d, DType t, float scale) {
  gemm(st, CUBLAS_OP_T, CUBLAS_OP_N, d.T, d.T, d.hd, scale, Y, d.hd, d.T * d.hd, X, d.hd, d.T * d.hd, t, S, d.T,
       d.T * d.T, CUDA_R_32F, d.BH);
}
// Row-major Out (T, hd) = P V per head (P (T, T), V (T, hd)); with p_transposed, Out = P^T V.
void times_values(CudaState& st, void* Out, const void* P, const void* V, const Dims& d, DType t, bool p_transposed) {
  gemm(st, CUBLAS_OP_N, p_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, d.hd, d.T, d.T, 1.0f, V, d.hd, d.T * d.hd, P, d.T,
       d.T * d.T, t, Out, d.hd, d.T * d.hd, blas_type(t), d.BH);
}

// The fused kernels read 16-byte pieces of rows and index with 32-bit rows and a grid.y of B*H.
bool use_flash(const Dims& d, DType t, std::initializer_list<const void*> ptrs) {
  if (!flash_attention_supported(t, d.hd) || d.BH > 65535 || d.T > (int64_t(1) << 30) || d.W > (int64_t(1) << 28))
    return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace

void document_starts(Runtime& rt, const Tensor& starts, const Tensor& tokens, int32_t eod_token, const Tensor& positions) {
  launch_document_starts(cuda_state(rt).compute, starts.ptr<int32_t>(),
                         positions.defined() ? positions.ptr<int32_t>() : nullptr, tokens.ptr<int32_t>(),
                         tokens.size(0), tokens.size(1), eod_token);
}

void attention_forward(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, AttentionHeads heads,
                       const AttentionDropoutKey& drop) {
  CudaState& st = cuda_state(rt);
  Dims d = dims_of(qkv, heads);
  if (d.B * d.T == 0) return;
  DType t = qkv.dtype;
  const bool flash = use_flash(d, t, {qkv.data, out.data});
#if TRELLIS_HAVE_CUDNN
  if (flash && !d.mask.doc_starts && cudnn_attention(rt, d.B, d.T, d.H, d.Hkv, d.hd, t, drop.threshold != 0, d.mask.window)) {
    cudnn_attention_forward(rt, out.data, lse.ptr<float>(), qkv.data, d.B, d.T, d.H, d.Hkv, d.hd, t, d.mask.window);
    return;
  }
#endif
  if (flash) {
    launch_flash_attention_forward(st.compute, out.data, lse.ptr<float>(), qkv.data, t, d.B, d.T, d.H, d.Hkv, d.hd,
                                   drop, d.mask);
    return;
  }
  size_t head_bytes = size_t(d.BH * d.T * d.hd) * d.es, score_cells = size_t(d.BH * d.T * d.T);
  ScratchPlan plan;
  size_t q = plan.take(head_bytes), k = plan.take(head_bytes), v = plan.take(head_bytes), o = plan.take(head_bytes);
  size_t S = plan.take(score_cells * 4), P = plan.take(score_cells * d.es);
  char* base = static_cast<char*>(rt.scratch(plan.total()));
  cudaStream_t s = st.compute;
  launch_to_heads(s, base + q, qkv.data, d.W, 0, t, d.B, d.T, d.H, d.hd);
  launch_to_heads(s, base + k, qkv.data, d.W, d.C, t, d.B, d.T, d.H, d.hd, d.group());
  launch_to_heads(s, base + v, qkv.data, d.W, d.C + d.Ckv(), t, d.B, d.T, d.H, d.hd, d.group());
  float scale = float(1.0 / std::sqrt(double(d.hd)));
  float* Sp = reinterpret_cast<float*>(base + S);
  scores(st, Sp, base + q, base + k, d, t, scale);                         // (B, H, T, T) f32
  launch_causal_softmax(s, base + P, lse.ptr<float>(), Sp, t, d.B, d.H, d.T, drop, d.mask);  // P (B, H, T, T), lse
  times_values(st, base + o, base + P, base + v, d, t, false);             // (B, H, T, hd)
  launch_from_heads(s, out.data, d.C, 0, base + o, t, d.B, d.T, d.H, d.hd);
}

void attention_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, AttentionHeads heads, const AttentionDropoutKey& drop) {
  CudaState& st = cuda_state(rt);
  Dims d = dims_of(qkv, heads);
  if (d.B * d.T == 0) return;
  DType t = qkv.dtype;
  const bool flash = use_flash(d, t, {qkv.data, out.data, dout.data, dqkv.data});
#if TRELLIS_HAVE_CUDNN
  if (flash && !d.mask.doc_starts && cudnn_attention(rt, d.B, d.T, d.H, d.Hkv, d.hd, t, drop.threshold != 0, d.mask.window)) {
    cudnn_attention_backward(rt, dqkv.data, dout.data, qkv.data, out.data, lse.ptr<float>(), d.B, d.T, d.H, d.Hkv,
                             d.hd, t, d.mask.window);
    return;
  }
#endif
  if (flash) {
    float* Dp = static_cast<float*>(rt.scratch(size_t(d.BH * d.T) * 4));  // (B, H, T)
    launch_attention_rowdot(st.compute, Dp, dout.data, out.data, t, d.B, d.T, d.H, d.hd);  // D = rowsum(dO * O)
    launch_flash_attention_backward(st.compute, dqkv.data, dout.data, qkv.data, lse.ptr<float>(), Dp, t, d.B, d.T,
                                    d.H, d.Hkv, d.hd, drop, d.mask);
    return;
  }
  size_t head_bytes = size_t(d.BH * d.T * d.hd) * d.es, score_cells = size_t(d.BH * d.T * d.T);
  ScratchPlan plan;
  size_t q = plan.take(head_bytes), k = plan.take(head_bytes), v = plan.take(head_bytes);
  size_t dO = plan.take(head_bytes), dQ = plan.take(head_bytes), dK = plan.take(head_bytes),
         dV = plan.take(head_bytes);
  size_t D = plan.take(size_t(d.BH * d.T) * 4);
  size_t S = plan.take(score_cells * 4), dPs = plan.take(score_cells * 4), P = plan.take(score_cells * d.es);
  char* base = static_cast<char*>(rt.scratch(plan.total()));
  cudaStream_t s = st.compute;
  launch_to_heads(s, base + q, qkv.data, d.W, 0, t, d.B, d.T, d.H, d.hd);
  launch_to_heads(s, base + k, qkv.data, d.W, d.C, t, d.B, d.T, d.H, d.hd, d.group());
  launch_to_heads(s, base + v, qkv.data, d.W, d.C + d.Ckv(), t, d.B, d.T, d.H, d.hd, d.group());
  launch_to_heads(s, base + dO, dout.data, d.C, 0, t, d.B, d.T, d.H, d.hd);
  float* Dp = reinterpret_cast<float*>(base + D);
  launch_attention_rowdot(s, Dp, dout.data, out.data, t, d.B, d.T, d.H, d.hd);  // D = rowsum(dO * O)
  float scale = float(1.0 / std::sqrt(double(d.hd)));
  float* Sp = reinterpret_cast<float*>(base + S);
  scores(st, Sp, base + q, base + k, d, t, scale);
  float* dP = reinterpret_cast<float*>(base + dPs);
  launch_causal_probs(s, base + P, Sp, lse.ptr<float>(), t, d.B, d.H, d.T, drop, d.mask);  // P m, m the dropout factor
  times_values(st, base + dV, base + P, base + dO, d, t, true);                    // dV = (P m)^T dO
  scores(st, dP, base + dO, base + v, d, t, 1.0f);                                 // dP = dO V^T
  launch_softmax_backward(s, base + P, Sp, lse.ptr<float>(), dP, Dp, t, d.B, d.H, d.T, scale,
                          drop, d.mask);  // dS = P (m dP - D) scale (over P m)
  times_values(st, base + dQ, base + P, base + k, d, t, false);           // dQ = dS K
  times_values(st, base + dK, base + P, base + q, d, t, true);            // dK = dS^T Q
  launch_from_heads(s, dqkv.data, d.W, 0, base + dQ, t, d.B, d.T, d.H, d.hd);
  launch_from_heads(s, dqkv.data, d.W, d.C, base + dK, t, d.B, d.T, d.H, d.hd, d.group());
  launch_from_heads(s, dqkv.data, d.W, d.C + d.Ckv(), base + dV, t, d.B, d.T, d.H, d.hd, d.group());
}

}  // namespace trellis::gpu
