// CUDA GEMM through cuBLASLt: row-major out = op(a) @ op(b) computed as the column-major
// out^T = op(b)^T @ op(a)^T; f32 compute (no TF32), bias fused as an epilogue when cuBLASLt offers
// it, descriptors and the chosen algorithm cached per problem so steady-state steps query nothing.
// TRELLIS_MATMUL_LOG=1 prints each plan once, when it is made (problem, algorithm, fused bias).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "core/cuda/cuda_state.h"
#include "core/cuda/gpu_ops.h"
#include "core/cuda/launchers.h"

namespace trellis {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: TRELLIS_FATAL("matmul: unsupported dtype " + std::string(dtype_name(t)));
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by alignment.
uint32_t alignment_of(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

struct PlanKey {
  int64_t m, n, k;
  bool trans_a, trans_b, accumulate, bias;
  DType ab, out;
  uint32_t align_a, align_b, align_c, align_bias;
  auto tie() const {
    return std::tie(m, n, k, trans_a, trans_b, accumulate, bias, ab, out, align_a, align_b, align_c, align_bias);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_fused = false;  // false: bias (if any) is added by a separate kernel
  // For TRELLIS_MATMUL_LOG: heuristic results returned, index taken, its workspace and waves.
  int candidates = 0, chosen = -1;
  size_t workspace = 0;
  float waves = 0.0f;
};

constexpr int kHeuristicAlgos = 8;  // candidates asked of the heuristic; the first usable one is taken

bool matmul_log_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TRELLIS_MATMUL_LOG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace

struct MatmulPlanCache {
  std::map<PlanKey, Plan> plans;
};

namespace gpu {

void destroy_matmul_plans(MatmulPlanCache* c) {
  if (!c) return;
  for (auto& [key, p] : c->plans) {
    cublasLtMatrixLayoutDestroy(p.la);
    cublasLtMatrixLayoutDestroy(p.lb);
    cublasLtMatrixLayoutDestroy(p.lc);
    cublasLtMatmulDescDestroy(p.desc);
  }
  delete c;
}

namespace {

void destroy_plan(Plan& p) {
  if (p.la) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.la));
  if (p.lb) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.lb));
  if (p.lc) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.lc));
  if (p.desc) CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
  p = Plan{};
}

// Builds descriptors for the column-major problem D (n_lt x m_lt) and asks the heuristic for up to
// kHeuristicAlgos algorithms, best first; takes the first whose state is usable and whose workspace
// fits. Returns false when there is none (then the caller retries without the fused bias).
bool try_make_plan(CudaState& st, const PlanKey& key, bool fuse_bias, Plan& p) {
  // Column-major view: A_lt = b (m_lt = N rows of D), B_lt = a (n_lt = M columns of D).
  const int64_t M = key.m, N = key.n, K = key.k;
  cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  if (fuse_bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_t = cuda_type(key.ab);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t));
  }
  cudaDataType_t ab = cuda_type(key.ab), ct = cuda_type(key.out);
  // Stored shapes (rows, cols, ld) in column-major terms.
  if (key.trans_b) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, ab, uint64_t(K), uint64_t(N), K));
  else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, ab, uint64_t(N), uint64_t(K), N));
  if (key.trans_a) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, ab, uint64_t(M), uint64_t(K), M));
  else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, ab, uint64_t(K), uint64_t(M), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lc, ct, uint64_t(N), uint64_t(M), N));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = st.lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b,
                                                    sizeof key.align_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a,
                                                    sizeof key.align_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c,
                                                    sizeof key.align_c));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c,
                                                    sizeof key.align_c));
  if (st.deterministic) {
    // Split-K with atomics would make the summation order vary from run to run.
    uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                      sizeof mask));
  }
  cublasLtMatmulHeuristicResult_t results[kHeuristicAlgos] = {};
  int found = 0;
  cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(st.lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, kHeuristicAlgos,
                                                     results, &found);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || (rc == CUBLAS_STATUS_SUCCESS && found == 0)) {
    destroy_plan(p);
    return false;
  }
  CUBLAS_CHECK(rc);
  int chosen = -1;
  for (int i = 0; i < found && i < kHeuristicAlgos; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= st.lt_workspace_bytes) {
      chosen = i;
      break;
    }
  }
  if (chosen < 0) {
    destroy_plan(p);
    return false;
  }
  p.algo = results[chosen].algo;
  p.bias_fused = fuse_bias;
  p.candidates = found;
  p.chosen = chosen;
  p.workspace = results[chosen].workspaceSize;
  p.waves = results[chosen].wavesCount;
  return true;
}

void log_plan(const CudaState& st, const PlanKey& key, const Plan& p) {
  const std::string ab(dtype_name(key.ab)), out(dtype_name(key.out));
  std::fprintf(stderr,
               "[trellis matmul] plan #%zu: M=%lld N=%lld K=%lld %s x %s -> %s trans_a=%d trans_b=%d accumulate=%d "
               "bias=%s align(a,b,out,bias)=%u,%u,%u,%u | algo %d of %d candidates, workspace %zu B, waves %.2f%s\n",
               st.matmul_plans->plans.size() + 1, static_cast<long long>(key.m), static_cast<long long>(key.n),
               static_cast<long long>(key.k), ab.c_str(), ab.c_str(), out.c_str(),
               int(key.trans_a), int(key.trans_b), int(key.accumulate),
               !key.bias ? "none" : (p.bias_fused ? "fused-epilogue" : "SEPARATE-KERNEL"), key.align_a, key.align_b,
               key.align_c, key.align_bias, p.chosen, p.candidates, p.workspace, double(p.waves),
               st.deterministic ? ", deterministic (no split-K reduction)" : "");
}

Plan& get_plan(CudaState& st, const PlanKey& key) {
  if (!st.matmul_plans) st.matmul_plans = new MatmulPlanCache();
  auto it = st.matmul_plans->plans.find(key);
  if (it != st.matmul_plans->plans.end()) return it->second;
  Plan p;
  bool ok = key.bias && try_make_plan(st, key, true, p);
  if (!ok && !try_make_plan(st, key, false, p))
    TRELLIS_FATAL("matmul: cuBLASLt has no algorithm for M=" + std::to_string(key.m) + " N=" + std::to_string(key.n) +
                  " K=" + std::to_string(key.k) + " " + std::string(dtype_name(key.ab)) + " -> " +
                  std::string(dtype_name(key.out)));
  if (matmul_log_enabled()) log_plan(st, key, p);
  return st.matmul_plans->plans.emplace(key, p).first->second;
}

}  // namespace

void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  CudaState& st = cuda_state(rt);
  int64_t M = out.size(0), N = out.size(1), K = opt.trans_a ? a.size(0) : a.size(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // cuBLASLt wants k > 0: the product is empty
    if (opt.accumulate) {
      // out unchanged by the product
    } else {
      launch_fill(st.compute, out.data, out.dtype, out.numel(), 0.0f);
    }
    if (opt.bias) launch_bias_add(st.compute, out.data, out.dtype, opt.bias->data, opt.bias->dtype, M, N);
    return;
  }
  PlanKey key{M, N, K, opt.trans_a, opt.trans_b, opt.accumulate, opt.bias != nullptr, a.dtype, out.dtype,
              alignment_of(a.data), alignment_of(b.data), alignment_of(out.data),
              opt.bias ? alignment_of(opt.bias->data) : 256u};
  Plan& p = get_plan(st, key);
  if (p.bias_fused) {
    const void* bias = opt.bias->data;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  float alpha = opt.alpha, beta = opt.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(st.lt, p.desc, &alpha, b.data, p.la, a.data, p.lb, &beta, out.data, p.lc, out.data,
                              p.lc, &p.algo, st.lt_workspace, st.lt_workspace_bytes, st.compute));
  if (opt.bias && !p.bias_fused)
    launch_bias_add(st.compute, out.data, out.dtype, opt.bias->data, opt.bias->dtype, M, N);
}

}  // namespace gpu
}  // namespace trellis
