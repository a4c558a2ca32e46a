// Probe (thirteenth session, issue 8): what CUDA graphs could save in a Trellis step. A GPT-2 1.3B
// step launches ~650 kernels back to back on one stream, the host far ahead of the GPU. This times
// N dependent kernels of about the length of a short step kernel (a grid of 132 x 4 blocks, each
// spinning ~T us), launched on a stream and then as one captured graph: (total - N x spin) / N is
// the time between one kernel's end and the next one's start.
// Build: nvcc -O2 -arch=sm_90 launch_gap_probe.cu -o launch_gap_probe
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void spin(long long cycles, int* sink) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(sink, 1);
}

int main() {
  int* sink;
  CK(cudaMalloc(&sink, 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = 650;
  for (long long cycles : {2000LL, 20000LL, 200000LL}) {
    auto launch_all = [&] {
      for (int i = 0; i < n; ++i) spin<<<sms * 4, 128, 0, s>>>(cycles, sink);
    };
    // One kernel alone, for its length.
    for (int w = 0; w < 20; ++w) spin<<<sms * 4, 128, 0, s>>>(cycles, sink);
    CK(cudaEventRecord(a, s));
    spin<<<sms * 4, 128, 0, s>>>(cycles, sink);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float one = 0;
    CK(cudaEventElapsedTime(&one, a, b));
    // Stream launches (the host runs ahead: all launches are queued before the GPU gets far).
    float stream_ms = 1e9f;
    for (int rep = 0; rep < 5; ++rep) {
      CK(cudaEventRecord(a, s));
      launch_all();
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      stream_ms = ms < stream_ms ? ms : stream_ms;
    }
    // The same kernels as one graph.
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch_all();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    float graph_ms = 1e9f;
    for (int rep = 0; rep < 5; ++rep) {
      CK(cudaEventRecord(a, s));
      CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      graph_ms = ms < graph_ms ? ms : graph_ms;
    }
    std::printf("%d kernels of %.1f us (alone, with its events): stream %.3f ms (%.2f us a kernel), graph %.3f ms "
                "(%.2f us a kernel), graph saves %.3f ms\n",
                n, 1000.0 * one, stream_ms, 1000.0 * stream_ms / n, graph_ms, 1000.0 * graph_ms / n,
                stream_ms - graph_ms);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  return 0;
}
