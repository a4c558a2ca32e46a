// CUDA rotary position embedding: one thread per (token row, V consecutive pair indices), turning
// those pairs in every q and k head of the row with their cosines and sines, computed in double as
// the CPU does.
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// V consecutive pairs a thread: (i .. i+V-1) with (i+half .. i+half+V-1), as V-element loads.
template <typename T, int V>
__global__ void rotary_kernel(T* qkv, int64_t rows, int64_t T_, int64_t W, int64_t heads, int64_t hd, int64_t half,
                              RotaryFrequencies freqs, int64_t first_position, bool inverse) {
  TRELLIS_GRID_STRIDE(idx, rows * (half / V)) {
    const int64_t i = idx % (half / V) * V, row = idx / (half / V);
    const double pos = double(first_position + row % T_);
    float c[V], s[V];
    const double amp = freqs.amplitude();  // YaRN's; the backward (inverse) scales by it too
    for (int j = 0; j < V; ++j) {
      double sd, cd;
      sincos(pos * freqs.inverse_frequency(i + j, half), &sd, &cd);
      c[j] = float(cd * amp);
      s[j] = float((inverse ? -sd : sd) * amp);
    }
    T* r = qkv + row * W;
    for (int64_t h = 0; h < heads; ++h) {  // q's heads, then k's
      Pack<T, V>* a = reinterpret_cast<Pack<T, V>*>(r + h * hd + i);
      Pack<T, V>* b = reinterpret_cast<Pack<T, V>*>(r + h * hd + i + half);
      Pack<T, V> x1 = *a, x2 = *b;
      for (int j = 0; j < V; ++j) {
        const float u = to_f32(x1.v[j]), w = to_f32(x2.v[j]);
        // Rounded as the CPU's expressions (no fused multiply-add).
        x1.v[j] = from_f32<T>(__fsub_rn(__fmul_rn(u, c[j]), __fmul_rn(w, s[j])));
        x2.v[j] = from_f32<T>(__fadd_rn(__fmul_rn(w, c[j]), __fmul_rn(u, s[j])));
      }
      *a = x1;
      *b = x2;
    }
  }
}

template <typename T, int V>
void launch(cudaStream_t s, T* qkv, int64_t B, int64_t T_, int64_t hd, int64_t W, int64_t heads,
            const RotaryFrequencies& freqs, int64_t first_position, bool inverse) {
  const int64_t half = freqs.turned(hd) / 2, total = B * T_ * (half / V);
  rotary_kernel<T, V><<<grid_for(total), kThreads, 0, s>>>(qkv, B * T_, T_, W, heads, hd, half, freqs, first_position,
                                                           inverse);
}

}  // namespace

void launch_rotary_embedding(cudaStream_t s, void* qkv, DType t, int64_t B, int64_t T, int64_t hd, int64_t W,
                             int64_t heads, const RotaryFrequencies& freqs, int64_t first_position, bool inverse) {
  const int64_t half = freqs.turned(hd) / 2;
  if (B * T * half == 0) return;
  TRELLIS_FLOAT_SWITCH(t, E, {
    E* p = static_cast<E*>(qkv);
    const auto aligned = [&](int v) {
      return half % v == 0 && hd % v == 0 && reinterpret_cast<uintptr_t>(p) % (sizeof(E) * v) == 0;
    };
    if (aligned(4) && W % 4 == 0) launch<E, 4>(s, p, B, T, hd, W, heads, freqs, first_position, inverse);
    else if (aligned(2) && W % 2 == 0) launch<E, 2>(s, p, B, T, hd, W, heads, freqs, first_position, inverse);
    else launch<E, 1>(s, p, B, T, hd, W, heads, freqs, first_position, inverse);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
