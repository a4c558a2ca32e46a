// Probe (fifteenth session, issue 8): does memory-bound work hide under compute-bound GEMMs on the
// H200 at its power cap? GPT-2 1.3B's shapes: 24 "layers" of the four forward GEMMs (16384 tokens,
// d 2048: qkv 6144, proj 2048, fc 8192, fc_proj 2048 back) and, per layer, an AdamW-like pass over its
// 50.3M parameters on split masters (reads bf16 hi, lo, f32 m, v, g; writes hi, lo, m, v: 28 bytes an
// element, as Trellis's adamw_split_kernel). Modes, each timed as a whole round with CUDA events:
//   gemm      the 96 GEMMs alone
//   adamw     the 24 AdamW passes alone
//   serial    AdamW of all layers, then the GEMMs (what Trellis does today: optimizer, then forward)
//   overlap   AdamW of layer L on a second stream, GEMMs of layer L wait for it (the update of later
//             layers runs beside earlier layers' GEMMs); variants by stream priority and AdamW grid.
// Build: nvcc -O2 -arch=sm_90 overlap_probe.cu -lcublasLt -o overlap_probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    auto e_ = (x);                                                                      \
    if (int(e_) != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void fill_random(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(float(h & 0xffffff) / float(1 << 23) - 1.0f);
  }
}

__global__ void fill_f32(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = v * float(int(i % 97) - 48);
}

// 4 elements a thread per iteration, grid-stride.
__global__ void adamw_like(uint16_t* hi, uint16_t* lo, float* m, float* v, const float* g, int64_t n4, float lr) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    uint2 h = reinterpret_cast<uint2*>(hi)[i], l = reinterpret_cast<uint2*>(lo)[i];
    float4 mm = reinterpret_cast<float4*>(m)[i], vv = reinterpret_cast<float4*>(v)[i];
    float4 gg = reinterpret_cast<const float4*>(g)[i];
    float* mp = &mm.x;
    float* vp = &vv.x;
    const float* gp = &gg.x;
    uint16_t* hp = reinterpret_cast<uint16_t*>(&h);
    uint16_t* lp = reinterpret_cast<uint16_t*>(&l);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float w = __uint_as_float((uint32_t(hp[j]) << 16) | lp[j]);
      mp[j] = 0.9f * mp[j] + 0.1f * gp[j];
      vp[j] = 0.95f * vp[j] + 0.05f * gp[j] * gp[j];
      w -= lr * (mp[j] / (sqrtf(vp[j]) + 1e-8f) + 0.1f * w);
      uint32_t b = __float_as_uint(w);
      hp[j] = uint16_t(b >> 16);
      lp[j] = uint16_t(b & 0xffff);
    }
    reinterpret_cast<uint2*>(hi)[i] = h;
    reinterpret_cast<uint2*>(lo)[i] = l;
    reinterpret_cast<float4*>(m)[i] = mm;
    reinterpret_cast<float4*>(v)[i] = vv;
  }
}

struct Gemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  int64_t m, n, k;
};

int main() {
  const int L = 24;
  const int64_t T = 16384, d = 2048, per_layer = 12 * d * d;  // 50.3M
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  // Activations: x [T, 8192] max, out [T, 8192]; weights per layer (shared across layers: the GEMMs'
  // cost does not depend on which weights they read).
  void *x, *y, *w;
  CK(cudaMalloc(&x, size_t(T) * 8192 * 2));
  CK(cudaMalloc(&y, size_t(T) * 8192 * 2));
  CK(cudaMalloc(&w, size_t(8192) * 2048 * 2));
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), size_t(T) * 8192, 1);
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(w), size_t(8192) * 2048, 2);
  const int64_t outs[4] = {3 * d, d, 4 * d, d}, ins[4] = {d, d, d, 4 * d};
  std::vector<Gemm> gemms;
  for (int i = 0; i < 4; ++i) {
    Gemm g;
    g.m = outs[i];
    g.n = T;
    g.k = ins[i];
    CK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, g.k, g.m, g.k));
    CK(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, g.k, g.n, g.k));
    CK(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, g.m, g.n, g.m));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.la, g.lb, g.lc, g.lc, pref, 1, &res, &found));
    if (found < 1) { std::fprintf(stderr, "no algo\n"); return 1; }
    g.algo = res.algo;
    gemms.push_back(g);
  }
  uint16_t *hi, *lo;
  float *m, *v, *g;
  const size_t n = size_t(L) * per_layer;
  CK(cudaMalloc(&hi, n * 2));
  CK(cudaMalloc(&lo, n * 2));
  CK(cudaMalloc(&m, n * 4));
  CK(cudaMalloc(&v, n * 4));
  CK(cudaMalloc(&g, n * 4));
  fill_random<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(hi), n, 3);
  CK(cudaMemset(lo, 0, n * 2));
  CK(cudaMemset(m, 0, n * 4));
  CK(cudaMemset(v, 0, n * 4));
  fill_f32<<<1024, 256>>>(g, n, 1e-3f);
  CK(cudaDeviceSynchronize());
  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s_main, s_low, s_same;
  CK(cudaStreamCreateWithPriority(&s_main, cudaStreamNonBlocking, greatest));
  CK(cudaStreamCreateWithPriority(&s_low, cudaStreamNonBlocking, least));
  CK(cudaStreamCreateWithPriority(&s_same, cudaStreamNonBlocking, greatest));
  std::vector<cudaEvent_t> ev(L);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const float alpha = 1.0f, beta = 0.0f;
  auto layer_gemms = [&](cudaStream_t s) {
    for (const Gemm& q : gemms)
      CK(cublasLtMatmul(lt, q.desc, &alpha, w, q.la, x, q.lb, &beta, y, q.lc, y, q.lc, &q.algo, ws, ws_bytes, s));
  };
  auto adamw = [&](int l, cudaStream_t s, int grid) {
    const int64_t n4 = per_layer / 4, off = int64_t(l) * per_layer;
    const int blocks = grid > 0 ? grid : int((n4 + 255) / 256);
    adamw_like<<<blocks, 256, 0, s>>>(hi + off, lo + off, m + off, v + off, g + off, n4, 1e-4f);
    CK(cudaGetLastError());
  };
  enum Mode { kGemm, kAdamw, kSerial, kOverlapLow, kOverlapSame, kOverlapLowSmall, kModes };
  const char* names[kModes] = {"gemm alone", "adamw alone", "serial (adamw, then gemms)", "overlap, adamw low priority",
                               "overlap, same priority", "overlap, low priority, adamw grid 264"};
  auto round = [&](Mode mode) {
    CK(cudaEventRecord(e0, s_main));
    if (mode == kGemm) {
      for (int l = 0; l < L; ++l) layer_gemms(s_main);
    } else if (mode == kAdamw) {
      for (int l = 0; l < L; ++l) adamw(l, s_main, 0);
    } else if (mode == kSerial) {
      for (int l = 0; l < L; ++l) adamw(l, s_main, 0);
      for (int l = 0; l < L; ++l) layer_gemms(s_main);
    } else {
      cudaStream_t side = mode == kOverlapSame ? s_same : s_low;
      const int grid = mode == kOverlapLowSmall ? 264 : 0;
      CK(cudaStreamWaitEvent(side, e0, 0));
      for (int l = 0; l < L; ++l) {
        adamw(l, side, grid);
        CK(cudaEventRecord(ev[l], side));
      }
      for (int l = 0; l < L; ++l) {
        CK(cudaStreamWaitEvent(s_main, ev[l], 0));
        layer_gemms(s_main);
      }
    }
    CK(cudaEventRecord(e1, s_main));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    return t;
  };
  for (int w0 = 0; w0 < 3; ++w0)
    for (int mo = 0; mo < kModes; ++mo) round(Mode(mo));
  std::vector<std::vector<float>> times(kModes);
  for (int rep = 0; rep < 10; ++rep)
    for (int mo = 0; mo < kModes; ++mo) times[mo].push_back(round(Mode(mo)));
  for (int mo = 0; mo < kModes; ++mo) {
    auto t = times[mo];
    std::sort(t.begin(), t.end());
    std::printf("%-40s median %.2f ms (min %.2f, max %.2f)\n", names[mo], t[t.size() / 2], t.front(), t.back());
  }
  return 0;
}
