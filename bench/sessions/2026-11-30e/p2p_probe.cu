// One-off probe (session 2026-11-30e): bandwidth of moving a buffer between two GPUs in both
// directions at once: copy-engine memcpy on 1, 2 or 4 streams per GPU, and SM kernels that push
// (store to the peer) or pull (load from the peer) with G blocks. Build: nvcc -O3 -arch=sm_90.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void copy_kernel(int4* __restrict__ dst, const int4* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}

int main() {
  const size_t sizes[] = {size_t(32) << 20, size_t(256) << 20};
  char *src[2], *dst[2];
  cudaStream_t st[2][4];
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaMalloc(&src[d], sizes[1]));
    CK(cudaMalloc(&dst[d], sizes[1]));
    for (auto& s : st[d]) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, d));
    if (d == 0) std::printf("asyncEngineCount %d, SMs %d\n", p.asyncEngineCount, p.multiProcessorCount);
  }
  auto sync = [&] { for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); } };
  auto timed = [&](const char* what, size_t bytes, auto&& issue) {
    for (int w = 0; w < 3; ++w) issue();
    sync();
    const int iters = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) issue();
    sync();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    std::printf("%-34s %4zu MiB: %8.1f us, %6.1f GB/s each direction\n", what, bytes >> 20, s * 1e6, bytes / s / 1e9);
  };
  for (size_t bytes : sizes) {
    for (int k : {1, 2, 4}) {
      char name[64]; std::snprintf(name, sizeof name, "copy engine, push, %d stream(s)", k);
      timed(name, bytes, [&] {
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          for (int j = 0; j < k; ++j)
            CK(cudaMemcpyAsync(dst[1 - d] + j * bytes / k, src[d] + j * bytes / k, bytes / k, cudaMemcpyDeviceToDevice, st[d][j]));
        }
      });
    }
    timed("copy engine, pull, 1 stream", bytes, [&] {
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMemcpyAsync(dst[d], src[1 - d], bytes, cudaMemcpyDeviceToDevice, st[d][0]));
      }
    });
    for (int g : {8, 16, 32, 66, 132}) {
      for (int push = 1; push >= 0; --push) {
        char name[64]; std::snprintf(name, sizeof name, "SM %s, %d blocks", push ? "push" : "pull", g);
        timed(name, bytes, [&] {
          for (int d = 0; d < 2; ++d) {
            CK(cudaSetDevice(d));
            int4* to = reinterpret_cast<int4*>(push ? dst[1 - d] : dst[d]);
            const int4* from = reinterpret_cast<const int4*>(push ? src[d] : src[1 - d]);
            copy_kernel<<<g, 512, 0, st[d][0]>>>(to, from, bytes / 16);
          }
        });
      }
    }
  }
  return 0;
}
