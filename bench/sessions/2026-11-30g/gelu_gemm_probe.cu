// One-off probe (session 2026-11-30g, issue 8): are cuBLASLt's GELU-epilogue GEMMs of GPT-2 1.3B
// (micro-batch 16: 16384 token rows, d_model 2048, MLP 8192) slow for want of a better candidate? For
// the MLP's forward (GELU_AUX_BIAS: writes the pre-activation too) and backward (DGELU reading it), and
// for the same shapes with a plain or bias-only epilogue, times every candidate of the heuristic
// (up to 64) and prints the heuristic's first pick and the fastest. bf16 in and out, f32 compute.
// Build: nvcc -O2 -arch=sm_90 gelu_gemm_probe.cu -lcublasLt -o gelu_gemm_probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

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
      {"fc forward, BIAS only", CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS},
      {"fc forward, plain", CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT},
      {"dgelu backward, DGELU", CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU},
      {"dgelu backward, plain", CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT},
  };
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
    std::vector<std::pair<double, int>> times;
    for (int i = 0; i < found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      auto run = [&] {
        return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld_, d, ld_, &res[i].algo, ws, ws_bytes, s);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;
      std::vector<float> ms;
      for (int rep = 0; rep < 15; ++rep) {
        CK(cudaEventRecord(e0, s));
        CK(run());
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      times.emplace_back(ms[ms.size() / 2], i);
    }
    if (times.empty()) {
      std::printf("%-28s no usable candidate of %d\n", c.name, found);
      continue;
    }
    const double first = times.front().second == 0 ? times.front().first : -1;
    std::sort(times.begin(), times.end());
    std::printf("%-28s %2d candidates; heuristic's first %s; fastest #%d %.3f ms (%.0f TFLOP/s); next %.3f, %.3f\n",
                c.name, found, first > 0 ? (std::to_string(first).substr(0, 5) + " ms (" +
                                            std::to_string(int(flops / first / 1e9)) + " TFLOP/s)").c_str()
                                         : "unusable",
                times[0].second, times[0].first, flops / times[0].first / 1e9,
                times.size() > 1 ? times[1].first : 0.0, times.size() > 2 ? times[2].first : 0.0);
    CK(cublasLtMatmulPreferenceDestroy(pref));
    CK(cublasLtMatrixLayoutDestroy(la));
    CK(cublasLtMatrixLayoutDestroy(lb));
    CK(cublasLtMatrixLayoutDestroy(ld_));
    CK(cublasLtMatmulDescDestroy(desc));
  }
  return 0;
}
