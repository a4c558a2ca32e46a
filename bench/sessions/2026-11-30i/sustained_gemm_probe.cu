// Probe (twelfth session, issue 8): the GPU runs a GPT-2 1.3B step at its power limit (call 1: ~690 W,
// SM clock 1455-1665 MHz, throttle reason "SW power cap"), so the GEMM candidate that is fastest in a
// short isolated run need not be the fastest inside the step. This times every cuBLASLt candidate of
// the MLP's GELU-epilogue GEMMs (and the plain dX GEMM of the same shape) in steady state at the power
// cap: 120 untimed runs, then 300 timed back to back, with the energy they drew (NVML's counter) and
// the SM clock at the end. Adapted from bench/sessions/2026-11-30g/gelu_gemm_probe.cu.
// Build: nvcc -O2 -arch=sm_90 sustained_gemm_probe.cu -lcublasLt -ldl -o sustained_gemm_probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    auto e_ = (x);                                                                         \
    if (int(e_) != 0) {                                                                    \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(e_));    \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// Values in [-1, 1) from a hash of the index: random-looking data draws the power real training does
// (constant inputs let the clocks run high and flatter every candidate).
__global__ void fill_random(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(float(h & 0xffffff) / float(1 << 23) - 1.0f);
  }
}

// The four NVML calls used, from the driver's libnvidia-ml.so.1 (no nvml.h in the toolkit here).
struct Nvml {
  using Dev = void*;
  int (*init)();
  int (*by_bus)(const char*, Dev*);
  int (*energy)(Dev, unsigned long long*);
  int (*clock)(Dev, int, unsigned*);
  Dev dev = nullptr;
  explicit Nvml(const char* bus) {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) { std::fprintf(stderr, "no libnvidia-ml.so.1\n"); std::exit(1); }
    init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
    by_bus = reinterpret_cast<int (*)(const char*, Dev*)>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    energy = reinterpret_cast<int (*)(Dev, unsigned long long*)>(dlsym(h, "nvmlDeviceGetTotalEnergyConsumption"));
    clock = reinterpret_cast<int (*)(Dev, int, unsigned*)>(dlsym(h, "nvmlDeviceGetClockInfo"));
    CK(init());
    CK(by_bus(bus, &dev));
  }
  unsigned long long millijoules() { unsigned long long v = 0; CK(energy(dev, &v)); return v; }
  unsigned sm_mhz() { unsigned v = 0; CK(clock(dev, 1 /* NVML_CLOCK_SM */, &v)); return v; }
};

struct Case {
  const char* name;
  cublasOperation_t ta, tb;
  cublasLtEpilogue_t epilogue;
};

int main() {
  const int64_t m = 8192, n = 16384, k = 2048;  // column-major D (m x n) = op(A) (m x k) op(B) (k x n)
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(64) << 20;
  void *a, *b, *d, *aux, *bias, *ws;
  CK(cudaMalloc(&a, size_t(m) * k * 2));
  CK(cudaMalloc(&b, size_t(k) * n * 2));
  CK(cudaMalloc(&d, size_t(m) * n * 2));
  CK(cudaMalloc(&aux, size_t(m) * n * 2));
  CK(cudaMalloc(&bias, size_t(m) * 2));
  CK(cudaMalloc(&ws, ws_bytes));
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(a), size_t(m) * k, 1);
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b), size_t(k) * n, 2);
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(aux), size_t(m) * n, 3);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(bias, 0, size_t(m) * 2));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // Forward fc: D = W1 x^T (W1 row-major [8192, 2048] read transposed), +bias, GELU, pre-activation to aux.
  // Backward into the GELU: D = W2^T dy^T (W2 row-major [2048, 8192]), times gelu'(aux).
  const Case cases[] = {
      {"fc forward, GELU_AUX_BIAS", CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
      {"dgelu backward, DGELU", CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU},
      {"same shape, plain", CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT},
  };
  char bus[32];
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
  Nvml nv(bus);
  const double flops = 2.0 * double(m) * double(n) * double(k);
  for (const Case& c : cases) {
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.ta, sizeof c.ta));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.tb, sizeof c.tb));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof c.epilogue));
    if (c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || c.epilogue == CUBLASLT_EPILOGUE_BIAS) {
      const cudaDataType_t bt = CUDA_R_16BF;
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || c.epilogue == CUBLASLT_EPILOGUE_DGELU) {
      const int64_t ld = m;
      const cudaDataType_t at = CUDA_R_16BF;
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
    }
    cublasLtMatrixLayout_t la, lb, ld_;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c.ta == CUBLAS_OP_N ? m : k, c.ta == CUBLAS_OP_N ? k : m,
                                  c.ta == CUBLAS_OP_N ? m : k));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
    CK(cublasLtMatrixLayoutCreate(&ld_, CUDA_R_16BF, m, n, m));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> res(64);
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld_, ld_, pref, 64, res.data(), &found));
    const float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      auto run = [&] {
        return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld_, d, ld_, &res[i].algo, ws, ws_bytes, s);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;
      for (int rep = 0; rep < 120; ++rep) CK(run());
      CK(cudaStreamSynchronize(s));
      const unsigned long long mj0 = nv.millijoules();
      CK(cudaEventRecord(e0, s));
      for (int rep = 0; rep < 300; ++rep) CK(run());
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      const unsigned long long mj1 = nv.millijoules();
      const unsigned clock = nv.sm_mhz();
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      const double ms = t / 300.0, joules = double(mj1 - mj0) / 1e3;
      int tile = 0, stages = 0, cluster = 0;
      size_t got = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                           &got);
      std::printf("%-28s #%d tile %3d stages %3d cluster %2d: %.3f ms (%.0f TFLOP/s) sustained, %.0f W, %.1f mJ a GEMM, "
                  "SM %u MHz at the end\n",
                  c.name, i, tile, stages, cluster, ms, flops / ms / 1e9, joules / (t / 1e3), joules / 300 * 1e3, clock);
    }
    CK(cublasLtMatmulPreferenceDestroy(pref));
    CK(cublasLtMatrixLayoutDestroy(la));
    CK(cublasLtMatrixLayoutDestroy(lb));
    CK(cublasLtMatrixLayoutDestroy(ld_));
    CK(cublasLtMatmulDescDestroy(desc));
  }
  return 0;
}
