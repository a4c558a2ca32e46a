// CUDA rotary position embedding: one thread per (token row, pair index), turning that pair in
// every q and k head of the row with one cosine and sine, computed in double as the CPU does.
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

template <typename T>
__global__ void rotary_kernel(T* qkv, int64_t rows, int64_t T_, int64_t C, int64_t H, int64_t half, double theta,
                              int64_t first_position, bool inverse) {
  TRELLIS_GRID_STRIDE(idx, rows * half) {
    const int64_t i = idx % half, row = idx / half;
    const double angle = double(first_position + row % T_) * pow(theta, -double(i) / double(half));
    double sd, cd;
    sincos(angle, &sd, &cd);
    const float c = float(cd), s = inverse ? -float(sd) : float(sd);
    T* r = qkv + row * 3 * C;
    for (int64_t h = 0; h < 2 * H; ++h) {  // q's heads, then k's
      T* x = r + h * 2 * half;
      const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
      // Rounded as the CPU's expressions (no fused multiply-add).
      x[i] = from_f32<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
      x[i + half] = from_f32<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    }
  }
}

}  // namespace

void launch_rotary_embedding(cudaStream_t s, void* qkv, DType t, int64_t B, int64_t T, int64_t C, int64_t H,
                             double theta, int64_t first_position, bool inverse) {
  const int64_t half = C / H / 2, total = B * T * half;
  if (total == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E,
    rotary_kernel<E><<<grid_for(total), kThreads, 0, s>>>(static_cast<E*>(qkv), B * T, T, C, H, half, theta,
                                                          first_position, inverse));
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
