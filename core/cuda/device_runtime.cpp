// Device discovery, the CudaState (streams, cuBLAS/cuBLASLt handles, workspace), and the caching
// device allocator and pinned host allocator.
#include "core/cuda/device_runtime.h"

#if TRELLIS_HAVE_CUDNN
#include "core/cuda/cudnn_attention.h"
#endif

#include <map>
#include <mutex>
#include <unordered_map>

#include "core/cuda/cuda_state.h"

namespace trellis::gpu {

namespace {
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
}  // namespace

int device_count() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for us, clear it
    return 0;
  }
  return n;
}

CudaState* create_state(int device, bool deterministic) {
  int n = device_count();
  if (device < 0 || device >= n)
    throw UserError("device cuda:" + std::to_string(device) + " requested, but " + std::to_string(n) +
                    " CUDA device(s) are visible");
  auto* s = new CudaState();
  s->device = device;
  s->deterministic = deterministic;
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  s->name = prop.name;
  s->sm_count = prop.multiProcessorCount;
  s->cc_major = prop.major;
  s->cc_minor = prop.minor;
  s->block_shared_memory = prop.sharedMemPerBlockOptin;
  s->total_memory = prop.totalGlobalMem;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasLtCreate(&s->lt));
  CUBLAS_CHECK(cublasCreate(&s->blas));
  CUBLAS_CHECK(cublasSetStream(s->blas, s->compute));
  // Default math mode: no TF32, so f32 GEMMs match the CPU reference.
  CUBLAS_CHECK(cublasSetMathMode(s->blas, CUBLAS_DEFAULT_MATH));
  s->lt_workspace_bytes = kLtWorkspaceBytes;
  CUDA_CHECK(cudaMalloc(&s->lt_workspace, s->lt_workspace_bytes));
  return s;
}

void destroy_state(CudaState* s) {
  if (!s) return;
  CUDA_CHECK(cudaSetDevice(s->device));
  CUDA_CHECK(cudaDeviceSynchronize());
  destroy_matmul_plans(s->matmul_plans);
  s->matmul_plans = nullptr;
#if TRELLIS_HAVE_CUDNN
  destroy_cudnn_attention(s->cudnn);
  s->cudnn = nullptr;
#endif
  CUDA_CHECK(cudaFree(s->lt_workspace));
  CUBLAS_CHECK(cublasDestroy(s->blas));
  CUBLAS_CHECK(cublasLtDestroy(s->lt));
  CUDA_CHECK(cudaStreamDestroy(s->copy));
  CUDA_CHECK(cudaStreamDestroy(s->comm));
  CUDA_CHECK(cudaStreamDestroy(s->compute));
  delete s;
}

void synchronize(CudaState* s) {
  CUDA_CHECK(cudaStreamSynchronize(s->compute));
  CUDA_CHECK(cudaStreamSynchronize(s->comm));
  CUDA_CHECK(cudaStreamSynchronize(s->copy));
}

std::string device_name(CudaState* s) { return s->name; }

size_t free_memory(CudaState* s) {
  CUDA_CHECK(cudaSetDevice(s->device));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

double peak_flops(CudaState* s) {
  const std::string& n = s->name;
  auto has = [&](const char* x) { return n.find(x) != std::string::npos; };
  if (has("H100") || has("H200") || has("H800") || has("GH200")) {
    if (has("PCIe")) return 756e12;
    if (has("NVL")) return 835e12;  // H100 NVL / H200 NVL: 1671 TFLOP/s with sparsity, half without
    return 989e12;                   // SXM
  }
  if (has("A100") || has("A800")) return 312e12;
  return 0.0;
}

namespace {

// Size classes: small requests round up to 512 B, large ones (>= 1 MiB) to 2 MiB, so that a
// freed block fits the next request of about the same size.
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;
constexpr size_t kLargeThreshold = size_t(1) << 20;

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t r = bytes < kLargeThreshold ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

class CachingDeviceAllocator final : public Allocator {
 public:
  explicit CachingDeviceAllocator(int device) : device_(device) {}
  ~CachingDeviceAllocator() override {
    cudaSetDevice(device_);
    // Blocks still handed out are left to their owners; cached ones go back to the driver.
    // Errors are ignored here: this can run at process exit, after the driver has shut down.
    for (auto& [size, p] : free_) cudaFree(p);
  }

  void* allocate(size_t bytes, const char* what) override {
    std::lock_guard<std::mutex> lock(mu_);
    size_t size = round_size(bytes);
    // Reuse the smallest cached block that fits, unless it wastes more than a quarter of itself.
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first - size <= it->first / 4) {
      void* p = it->second;
      size_t got = it->first;
      free_.erase(it);
      hand_out(p, got);
      return p;
    }
    CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cache();
      e = cudaMalloc(&p, size);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      TRELLIS_FATAL("out of GPU memory on cuda:" + std::to_string(device_) + ": allocating " +
                    format_bytes(size) + " for " + what + " (in use " + format_bytes(stats_.current) +
                    ", peak " + format_bytes(stats_.peak) + ", device total " + format_bytes(total_b) +
                    ", free " + format_bytes(free_b) +
                    "). Knobs that help: lower train.micro_batch, train.checkpointing = \"elementwise\", "
                    "\"selective\" or \"full\", a higher zero.stage, zero.offload = \"cpu\", more tensor or pipeline ranks");
    }
    CUDA_CHECK(e);
    stats_.reserved += size;
    hand_out(p, size);
    return p;
  }

  void release(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = used_.find(p);
    TRELLIS_CHECK(it != used_.end(), "release of a pointer this device allocator does not own");
    stats_.current -= it->second;
    // Work queued on the compute stream that still reads p is ordered before any later op that
    // gets this block again (all ops run on that one stream).
    free_.emplace(it->second, p);
    used_.erase(it);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.current;
  }
  Device device() const override { return Device::CUDA(device_); }

 private:
  void hand_out(void* p, size_t size) {
    used_[p] = size;
    stats_.current += size;
    if (stats_.current > stats_.peak) stats_.peak = stats_.current;
  }
  void release_cache() {
    if (free_.empty()) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [size, p] : free_) {
      CUDA_CHECK(cudaFree(p));
      stats_.reserved -= size;
    }
    free_.clear();
  }

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> used_;
  MemoryStats stats_;
};

class PinnedAllocator final : public Allocator {
 public:
  ~PinnedAllocator() override {
    for (auto& [p, size] : ledger_.live()) cudaFreeHost(p);  // at exit: errors ignored on purpose
  }
  void* allocate(size_t bytes, const char* what) override {
    size_t size = round_size(bytes);
    void* p = nullptr;
    cudaError_t e = cudaMallocHost(&p, size);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      const MemoryStats st = ledger_.stats();
      TRELLIS_FATAL("cudaMallocHost: " + gpu_status_text(e) + " allocating " + format_bytes(size) +
                    " of pinned host memory for " + what + " (in use " + format_bytes(st.current) + ", peak " +
                    format_bytes(st.peak) + ")");
    }
    ledger_.add(p, size);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    ledger_.remove(p, "pinned allocator");
    CUDA_CHECK(cudaFreeHost(p));
  }
  MemoryStats stats() const override { return ledger_.stats(); }
  void reset_peak() override { ledger_.reset_peak(); }
  Device device() const override { return Device::CPU(); }

 private:
  AllocationLedger ledger_;
};

}  // namespace

std::unique_ptr<Allocator> make_device_allocator(int device) {
  return std::make_unique<CachingDeviceAllocator>(device);
}
std::unique_ptr<Allocator> make_pinned_allocator() { return std::make_unique<PinnedAllocator>(); }

void* create_timing_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void record_on_compute(CudaState* s, void* event) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s->compute, &capturing));
  // In a capture, a plain record would only mark the capture; an external one is a node of the
  // graph, so the event is recorded (and can be timed or waited for) at each run.
  CUDA_CHECK(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(event), s->compute,
                                      capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                                 : cudaEventRecordDefault));
}

void begin_capture(CudaState* s) {
  // Relaxed: host calls that are not stream work (a wait on an event recorded before the capture,
  // a pinned allocation) stay legal; the step queues nothing on other streams at one rank.
  CUDA_CHECK(cudaStreamBeginCapture(s->compute, cudaStreamCaptureModeRelaxed));
}

void* end_capture(CudaState* s) {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(s->compute, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(e);
  return exec;
}

void abandon_capture(CudaState* s) {
  // No check: the capture may already be invalidated (the error that made the caller abandon it is
  // the one to report). The partial graph is dropped, never instantiated.
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(s->compute, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void launch_graph(CudaState* s, void* graph) {
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), s->compute));
}

void destroy_graph(void* graph) {
  if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

float event_ms(void* from, void* to) {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
  return ms;
}

void event_synchronize(void* event) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

void destroy_timing_event(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

}  // namespace trellis::gpu
