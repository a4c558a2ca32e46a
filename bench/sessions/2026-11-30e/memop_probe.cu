// One-off probe (session 2026-11-30e): what one chunk of the peer all-reduce's protocol costs on the
// copy stream. One process drives both GPUs (peer access on); each row issues 32 chunks of 1 MiB from
// GPU 0 to GPU 1 with what follows each copy, and reports the time per chunk.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)
using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

__global__ void signal_kernel(unsigned* flag, unsigned v) {
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
}
__global__ void add_kernel(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) x[i] += y[i];
}

int main() {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &f, 12000, cudaEnableDefault, &q));
  auto wait_value = reinterpret_cast<WaitFn>(f);
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &f, 12000, cudaEnableDefault, &q));
  auto write_value = reinterpret_cast<WriteFn>(f);
  const size_t chunk = size_t(1) << 20;
  const int chunks = 32;
  char *src, *dst;
  unsigned *flags0, *flags1;  // on GPU 0 and GPU 1
  cudaStream_t s0, s0b;
  CK(cudaSetDevice(1));
  CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaMalloc(&dst, chunk * chunks));
  CK(cudaMalloc(&flags1, 4096));
  CK(cudaMemset(flags1, 0, 4096));
  CK(cudaSetDevice(0));
  CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&src, chunk * chunks));
  CK(cudaMalloc(&flags0, 4096));
  CK(cudaMemset(flags0, 0, 4096));
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s0b, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());
  unsigned seq = 0;
  auto timed = [&](const char* what, auto&& per_chunk) {
    for (int w = 0; w < 2; ++w) for (int c = 0; c < chunks; ++c) per_chunk(c);
    CK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    const int reps = 10;
    for (int r = 0; r < reps; ++r) for (int c = 0; c < chunks; ++c) per_chunk(c);
    CK(cudaDeviceSynchronize());
    double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6 / (reps * chunks);
    std::printf("%-58s %6.2f us per 1 MiB chunk\n", what, us);
  };
  auto copy = [&](int c, cudaStream_t s) {
    CK(cudaMemcpyAsync(dst + c * chunk, src + c * chunk, chunk, cudaMemcpyDeviceToDevice, s));
  };
  timed("copy only", [&](int c) { copy(c, s0); });
  timed("copy 4 MiB only (per 4 MiB)", [&](int c) {
    if (c % 4 == 0) CK(cudaMemcpyAsync(dst + c * chunk, src + c * chunk, 4 * chunk, cudaMemcpyDeviceToDevice, s0));
  });
  timed("copy + write peer flag (default barrier)", [&](int c) {
    copy(c, s0);
    if (write_value(CUstream(s0), CUdeviceptr(flags1 + 16), ++seq, CU_STREAM_WRITE_VALUE_DEFAULT)) std::exit(2);
  });
  timed("copy + write local flag (default barrier)", [&](int c) {
    copy(c, s0);
    if (write_value(CUstream(s0), CUdeviceptr(flags0 + 16), ++seq, CU_STREAM_WRITE_VALUE_DEFAULT)) std::exit(2);
  });
  timed("copy + signal kernel (fence + st.release.sys to peer)", [&](int c) {
    copy(c, s0);
    signal_kernel<<<1, 1, 0, s0>>>(flags1 + 32, ++seq);
  });
  timed("copy + wait local flag (already set)", [&](int c) {
    copy(c, s0);
    if (wait_value(CUstream(s0), CUdeviceptr(flags0 + 48), 0, CU_STREAM_WAIT_VALUE_GEQ)) std::exit(2);
  });
  timed("copy + event record + other stream waits it", [&](int c) {
    copy(c, s0);
    CK(cudaEventRecord(ev, s0));
    CK(cudaStreamWaitEvent(s0b, ev, 0));
  });
  timed("copy; other stream: event wait, add 1 MiB", [&](int c) {
    copy(c, s0);
    CK(cudaEventRecord(ev, s0));
    CK(cudaStreamWaitEvent(s0b, ev, 0));
    add_kernel<<<132, 512, 0, s0b>>>(reinterpret_cast<float*>(src + c * chunk), reinterpret_cast<const float*>(src), chunk / 4);
  });
  timed("add kernel 1 MiB alone", [&](int c) {
    add_kernel<<<132, 512, 0, s0b>>>(reinterpret_cast<float*>(src + c * chunk), reinterpret_cast<const float*>(src), chunk / 4);
  });
  return 0;
}
