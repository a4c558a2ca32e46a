// CUDA layer norm (forward, backward), bias gradient and the scalar reductions, all deterministic:
// column sums go through per-chunk partials summed in a fixed order, never through atomics.
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/launchers.h"

namespace trellis::gpu {

namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// One warp per row. Two passes over the row for mean and variance (numerically safer than
// E[x^2] - E[x]^2), a third to write.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                                         int64_t rows, int64_t cols, float eps) {
  int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) s += to_f32(xr[c]);
  float m = warp_sum(s) / float(cols);
  float v = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    float d = to_f32(xr[c]) - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / float(cols) + eps);
  T* orow = out + row * cols;
  for (int64_t c = lane; c < cols; c += 32)
    orow[c] = from_f32<T>((to_f32(xr[c]) - m) * r * to_f32(w[c]) + to_f32(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w. One warp per row.
template <typename T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* mean,
                                             const float* rstd, int64_t rows, int64_t cols) {
  int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  const T* dr = dout + row * cols;
  float m = mean[row], r = rstd[row];
  float sd = 0.0f, sdx = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    float dn = to_f32(dr[c]) * to_f32(w[c]);
    float xh = (to_f32(xr[c]) - m) * r;
    sd += dn;
    sdx += dn * xh;
  }
  float mean_d = warp_sum(sd) / float(cols);
  float mean_dx = warp_sum(sdx) / float(cols);
  T* dxr = dx + row * cols;
  for (int64_t c = lane; c < cols; c += 32) {
    float dn = to_f32(dr[c]) * to_f32(w[c]);
    float xh = (to_f32(xr[c]) - m) * r;
    dxr[c] = from_f32<T>(to_f32(dxr[c]) + (dn - mean_d - xh * mean_dx) * r);
  }
}

// Partials of one chunk of rows, one thread per column, rows in order:
// p_dw[chunk][c] = sum dout * xhat (when x is given), p_db[chunk][c] = sum dout.
template <typename T>
__global__ void column_partials_kernel(float* p_dw, float* p_db, const T* dout, const T* x, const float* mean,
                                       const float* rstd, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t chunk = blockIdx.y;
  if (c >= cols) return;
  int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    float d = to_f32(dout[r * cols + c]);
    sb += d;
    if (x) sw += d * (to_f32(x[r * cols + c]) - mean[r]) * rstd[r];
  }
  p_db[chunk * cols + c] = sb;
  if (x) p_dw[chunk * cols + c] = sw;
}

// out[c] += sum over chunks (in order) of partials[chunk][c].
__global__ void column_finalize_kernel(float* out, const float* partials, int64_t chunks, int64_t cols) {
  int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partials[k * cols + c];
  out[c] += s;
}

template <typename T>
__global__ void sum_partials_kernel(float* partials, const T* x, int64_t n, bool squares) {
  __shared__ float shared[32];
  float s = 0.0f;
  TRELLIS_GRID_STRIDE(i, n) {
    float v = to_f32(x[i]);
    s += squares ? v * v : v;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_finalize_kernel(float* out, const float* partials) {
  __shared__ float shared[32];
  float s = block_sum(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) out[0] += s;
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T>
void column_sums(cudaStream_t s, float* dw, float* db, const T* dout, const T* x, const float* mean,
                 const float* rstd, int64_t rows, int64_t cols, float* scratch) {
  int64_t chunks = colsum_chunks(rows);
  int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  float* p_db = scratch;
  float* p_dw = x ? scratch + chunks * cols : nullptr;
  dim3 grid(unsigned((cols + kThreads - 1) / kThreads), unsigned(chunks));
  column_partials_kernel<T><<<grid, kThreads, 0, s>>>(p_dw, p_db, dout, x, mean, rstd, rows, cols, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  unsigned g = unsigned((cols + kThreads - 1) / kThreads);
  column_finalize_kernel<<<g, kThreads, 0, s>>>(db, p_db, chunks, cols);
  CUDA_CHECK_LAUNCH();
  if (x) {
    column_finalize_kernel<<<g, kThreads, 0, s>>>(dw, p_dw, chunks, cols);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_layernorm_forward(cudaStream_t s, void* out, float* mean, float* rstd, const void* x, const void* w,
                              const void* b, DType t, int64_t rows, int64_t cols, float eps) {
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    layernorm_forward_kernel<T><<<row_blocks(rows), kThreads, 0, s>>>(
        static_cast<T*>(out), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), rows, cols, eps));
  CUDA_CHECK_LAUNCH();
}

void launch_layernorm_backward(cudaStream_t s, void* dx, float* dw, float* db, const void* dout, const void* x,
                               const void* w, const float* mean, const float* rstd, DType t, int64_t rows,
                               int64_t cols, float* scratch) {
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    layernorm_backward_dx_kernel<T><<<row_blocks(rows), kThreads, 0, s>>>(
        static_cast<T*>(dx), static_cast<const T*>(dout), static_cast<const T*>(x), static_cast<const T*>(w),
        mean, rstd, rows, cols);
    CUDA_CHECK_LAUNCH();
    column_sums<T>(s, dw, db, static_cast<const T*>(dout), static_cast<const T*>(x), mean, rstd, rows, cols,
                   scratch));
}

void launch_bias_backward(cudaStream_t s, float* db, const void* dy, DType t, int64_t rows, int64_t cols,
                          float* scratch) {
  if (rows == 0) return;
  TRELLIS_FLOAT_SWITCH(t, T,
    column_sums<T>(s, nullptr, db, static_cast<const T*>(dy), nullptr, nullptr, nullptr, rows, cols, scratch));
}

void launch_sum(cudaStream_t s, float* out, const void* x, DType t, int64_t n, bool squares, float* scratch) {
  // A fixed grid (not sized by the GPU), so the summation order is the same everywhere.
  TRELLIS_FLOAT_SWITCH(t, T,
    sum_partials_kernel<T><<<kSumPartials, kThreads, 0, s>>>(scratch, static_cast<const T*>(x), n, squares));
  CUDA_CHECK_LAUNCH();
  sum_finalize_kernel<<<1, kSumPartials, 0, s>>>(out, scratch);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trellis::gpu
