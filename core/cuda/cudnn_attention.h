// cuDNN's fused flash attention for the CUDA backend's causal self-attention (cudnn_attention.cpp).
// Built only when the cuDNN frontend headers were found (TRELLIS_HAVE_CUDNN).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace trellis {
class Runtime;
struct CudnnAttention;  // the cuDNN handle and the graphs built per problem
}

namespace trellis::gpu {

// Whether cuDNN takes this problem: bf16/f16, head size 64 or 128, no attention dropout, not in
// deterministic mode, TRELLIS_CUDNN_ATTENTION not "0", and cuDNN supports the graphs (built here,
// once per problem). The forward and backward of one problem always take the same path.
// `window` > 0: query i sees keys (i - window, i] (cuDNN's left diagonal bound).
bool cudnn_attention(Runtime& rt, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, DType t, bool dropout,
                     int64_t window);
// out (B, T, C = H hd), lse (B, H, T) f32 natural-log log-sum-exp of the scaled scores; qkv (B, T,
// (H + 2 Hkv) hd), query head h on key-value head h / (H / Hkv).
void cudnn_attention_forward(Runtime& rt, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                             int64_t Hkv, int64_t hd, DType t, int64_t window);
// dqkv (as qkv) written from dout (B, T, C) and the forward's qkv, out and lse.
void cudnn_attention_backward(Runtime& rt, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, DType t,
                              int64_t window);
void destroy_cudnn_attention(CudnnAttention* c);

}  // namespace trellis::gpu
