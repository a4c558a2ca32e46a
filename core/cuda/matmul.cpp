// CUDA GEMM through cuBLASLt: row-major out = op(a) @ op(b) computed as the column-major
// out^T = op(b)^T @ op(a)^T; f32 compute (no TF32), bias and GELU (forward, or its gradient) fused as
// epilogues when cuBLASLt offers them, descriptors and the chosen algorithm cached per problem so
// steady-state steps query nothing. Unless deterministic, the algorithm is the fastest of the
// heuristic's candidates, timed once when the plan is made with TRELLIS_MATMUL_TUNE=1 (else the first one).
// TRELLIS_MATMUL_LOG=1 prints each plan once, when it is made (problem, algorithm, fusions, timing).
#include <algorithm>
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
uint32_t alignment_of(uintptr_t a) {
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}
uint32_t alignment_of(const void* p) { return alignment_of(reinterpret_cast<uintptr_t>(p)); }

enum class Gelu : uint8_t { none, forward, backward };  // MatmulOptions::gelu_input, gelu_grad_of

struct PlanKey {
  int64_t m, n, k;
  bool trans_a, trans_b, accumulate, bias;
  Gelu gelu;
  DType ab, out;
  uint32_t align_a, align_b, align_c, align_bias, align_aux;
  // Strided batch (MatmulOptions::batch): 1, or the count and the strides in elements (c: out's,
  // the GELU tensor's and the residual's).
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0, stride_bias = 0;
  // MatmulOptions::rows_vary: m (or k with trans_a) is the power of two the plan is made for.
  bool rows_vary = false;
  auto tie() const {
    return std::tie(m, n, k, trans_a, trans_b, accumulate, bias, gelu, ab, out, align_a, align_b, align_c,
                    align_bias, align_aux, batch, stride_a, stride_b, stride_c, stride_bias, rows_vary);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_fused = false;  // false: bias (if any) is added by a separate kernel
  bool gelu_fused = false;  // false: GELU (if any) runs as the separate gelu kernel
  // For TRELLIS_MATMUL_LOG: heuristic results returned, index taken, its workspace and waves; whether
  // the candidates were timed, and the taken one's and the heuristic's first one's time.
  int candidates = 0, chosen = -1;
  size_t workspace = 0;
  float waves = 0.0f;
  bool tuned = false;
  float chosen_us = 0.0f, first_us = 0.0f;
  // A varying-rows plan, per row count met so far: whether cuBLASLt runs its algorithm at that count
  // (checked once; where it does not, the count gets an exact plan of its own) and the layouts it
  // runs at, made once.
  struct RowsRun {
    bool fits = false;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  };
  std::map<int64_t, RowsRun> runs_at;
};

// The pointers of the call that makes a plan: the heuristic reads the bias and aux pointers'
// alignment from the descriptor, and tuning runs the candidates on the real inputs.
struct Operands {
  const void* a;
  const void* b;
  const void* bias;
  const void* aux;  // the GELU's pre-activation: written by the forward, read by the backward
  float alpha;
};

constexpr int kHeuristicAlgos = 8;  // candidates asked of the heuristic
constexpr int kTimedRuns = 3;       // per candidate when tuning, after one warm-up run

bool matmul_log_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TRELLIS_MATMUL_LOG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Optional (TRELLIS_MATMUL_TUNE=1): once per plan, every usable candidate of the heuristic is timed and
// the fastest kept, a one-time cost when the plan is made. Off by default: on the H200 it changed
// GPT-2 350M and 1.3B steps by less than run-to-run noise (bench/sessions/2026-11-30/call4.sh), the
// heuristic's first pick being as fast. Never in deterministic mode: timing noise could pick
// different algorithms (summation orders) from one run to the next. Read at each plan, so a test can
// set it.
bool tuning_enabled(const CudaState& st) {
  const char* v = std::getenv("TRELLIS_MATMUL_TUNE");
  return v != nullptr && std::strcmp(v, "1") == 0 && !st.deterministic;
}

// The size a varying row count is planned for: the next power of two (at least 64).
int64_t planned_rows(int64_t rows) {
  int64_t p = 64;
  while (p < rows) p *= 2;
  return p;
}

bool usable(const cublasLtMatmulHeuristicResult_t& r, const CudaState& st) {
  return r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= st.lt_workspace_bytes;
}

}  // namespace

struct MatmulPlanCache {
  std::map<PlanKey, Plan> plans;
};

namespace gpu {

void destroy_matmul_plans(MatmulPlanCache* c) {
  if (!c) return;
  for (auto& [key, p] : c->plans) {
    for (cublasLtMatrixLayout_t l : {p.la, p.lb, p.lc}) cublasLtMatrixLayoutDestroy(l);
    for (auto& [rows, run] : p.runs_at)
      if (run.fits)  // else it holds none
        for (cublasLtMatrixLayout_t l : {run.la, run.lb, run.lc}) cublasLtMatrixLayoutDestroy(l);
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

void set_pointer(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* ptr) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &ptr, sizeof ptr));
}

// Runs every usable candidate on the compute stream (one warm-up, then kTimedRuns between two events)
// and returns the fastest one's index. The output (and the forward GELU's pre-activation) goes to
// scratch buffers, so an accumulating output or one aliasing an input is never touched; without the
// memory for them, returns `first`, the heuristic's pick.
int fastest_candidate(CudaState& st, const PlanKey& key, Plan& p, const Operands& ops,
                      const cublasLtMatmulHeuristicResult_t* results, int found, int first) {
  const size_t bytes = (size_t(key.stride_c) * size_t(key.batch - 1) + size_t(key.m) * size_t(key.n)) * dtype_size(key.out);
  const bool aux_out = p.gelu_fused && key.gelu == Gelu::forward;
  void* d = nullptr;
  void* aux = nullptr;
  if (cudaMallocAsync(&d, bytes, st.compute) != cudaSuccess ||
      (aux_out && cudaMallocAsync(&aux, bytes, st.compute) != cudaSuccess)) {
    (void)cudaGetLastError();  // out of memory: clear the error, keep the heuristic's pick
    if (d) CUDA_CHECK(cudaFreeAsync(d, st.compute));
    return first;
  }
  CUDA_CHECK(cudaMemsetAsync(d, 0, bytes, st.compute));  // finite values for beta = 1 to read
  if (aux_out) set_pointer(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const float beta = key.accumulate ? 1.0f : 0.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(st.lt, p.desc, &ops.alpha, ops.b, p.la, ops.a, p.lb, &beta, d, p.lc, d, p.lc, &algo,
                          st.lt_workspace, st.lt_workspace_bytes, st.compute);
  };
  int best = -1;
  for (int i = 0; i < found && i < kHeuristicAlgos; ++i) {
    if (!usable(results[i], st)) continue;
    if (run(results[i].algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a candidate that fails is skipped
    CUDA_CHECK(cudaEventRecord(start, st.compute));
    for (int r = 0; r < kTimedRuns; ++r) CUBLAS_CHECK(run(results[i].algo));
    CUDA_CHECK(cudaEventRecord(stop, st.compute));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const float us = 1000.0f * ms / float(kTimedRuns);
    if (i == first) p.first_us = us;
    if (best < 0 || us < p.chosen_us) {
      best = i;
      p.chosen_us = us;
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaFreeAsync(d, st.compute));
  if (aux) CUDA_CHECK(cudaFreeAsync(aux, st.compute));
  if (aux_out) set_pointer(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ops.aux);
  p.tuned = best >= 0;
  return best >= 0 ? best : first;
}

// The matrix layouts of key's problem: b's (la), a's (lb) and out's (lc), stored shapes (rows, cols,
// ld) in column-major terms, with the batch's count and strides.
void make_layouts(const PlanKey& key, cublasLtMatrixLayout_t& la, cublasLtMatrixLayout_t& lb, cublasLtMatrixLayout_t& lc) {
  const int64_t M = key.m, N = key.n, K = key.k;
  cudaDataType_t ab = cuda_type(key.ab), ct = cuda_type(key.out);
  if (key.trans_b) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, uint64_t(K), uint64_t(N), K));
  else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, uint64_t(N), uint64_t(K), N));
  if (key.trans_a) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, uint64_t(M), uint64_t(K), M));
  else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, uint64_t(K), uint64_t(M), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, ct, uint64_t(N), uint64_t(M), N));
  if (key.batch > 1) {
    const int32_t count = int32_t(key.batch);
    for (auto [layout, stride] : {std::pair{la, key.stride_b}, {lb, key.stride_a}, {lc, key.stride_c}}) {
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof stride));
    }
  }
}

// Builds descriptors for the column-major problem D (n_lt x m_lt) with the requested epilogues and
// asks the heuristic for up to kHeuristicAlgos algorithms, best first; takes the first whose state is
// usable and whose workspace fits, or with tuning the fastest of those. Returns false when there is
// none (then the caller retries with fewer fused epilogues).
bool try_make_plan(CudaState& st, const PlanKey& key, bool fuse_bias, bool fuse_gelu,
                   const Operands& ops, Plan& p) {
  if (fuse_gelu && key.n % 8 != 0) return false;  // cuBLASLt wants the aux leading dimension divisible by 8
  if (fuse_gelu && key.stride_c % 8 != 0) return false;  // and its batch stride
  // The heuristic sees problem 0's bias pointer only: later problems' must be as aligned (16 bytes).
  if (fuse_bias && key.batch > 1 && key.stride_bias * int64_t(dtype_size(key.ab)) % 16 != 0) return false;
  // Column-major view: A_lt = b (m_lt = N rows of D), B_lt = a (n_lt = M columns of D).
  const int64_t N = key.n;
  cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  // ops.cpp: the GELU's backward comes without bias. No bias-gradient epilogues: on the H200 the
  // weight-gradient GEMMs with BGRADB ran 15-40% slower, and the DGELU GEMM with DGELU_BGRAD at less
  // than half its speed, than the separate bias_backward costs (bench/sessions/2026-11-30b, calls 2-3).
  // CUTLASS ping-pong kernels for the two GELU GEMMs ran 9-17% faster than these epilogues alone, yet
  // made the GPT-2 1.3B step 1.2% slower: the rest of the step lost more than they gained
  // (bench/sessions/2026-11-30h, docs/benchmarks.md).
  if (fuse_gelu && key.gelu == Gelu::backward) epi = CUBLASLT_EPILOGUE_DGELU;
  else if (fuse_gelu) epi = fuse_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (fuse_bias) epi = CUBLASLT_EPILOGUE_BIAS;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (fuse_bias) {
    cudaDataType_t bias_t = cuda_type(key.ab);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t));
    set_pointer(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ops.bias);
  }
  if (fuse_gelu) {
    // The pre-activation is laid out as D (leading dimension N); its data type defaults to D's, which
    // ops.cpp requires of it.
    int64_t ld = N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    set_pointer(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ops.aux);
  }
  p.bias_fused = fuse_bias;
  p.gelu_fused = fuse_gelu;
  make_layouts(key, p.la, p.lb, p.lc);
  if (key.batch > 1) {
    if (fuse_bias)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &key.stride_bias,
                                                  sizeof key.stride_bias));
    if (fuse_gelu)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &key.stride_c,
                                                  sizeof key.stride_c));
  }

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
  // An epilogue cuBLASLt does not take for these types may come back as INVALID_VALUE rather than
  // NOT_SUPPORTED (as a bias-gradient epilogue did, bench/sessions/2026-11-30b call 3): the caller
  // retries without it. The plain plan still fails on INVALID_VALUE, a real argument error.
  const bool fused = fuse_bias || fuse_gelu;
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || (fused && rc == CUBLAS_STATUS_INVALID_VALUE) ||
      (rc == CUBLAS_STATUS_SUCCESS && found == 0)) {
    destroy_plan(p);
    return false;
  }
  CUBLAS_CHECK(rc);
  int chosen = -1;
  for (int i = 0; i < found && i < kHeuristicAlgos && chosen < 0; ++i)
    if (usable(results[i], st)) chosen = i;
  if (chosen < 0) {
    destroy_plan(p);
    return false;
  }
  // A varying-rows plan is made for more rows than the call has: its candidates cannot run on them.
  if (tuning_enabled(st) && !key.rows_vary) chosen = fastest_candidate(st, key, p, ops, results, found, chosen);
  p.algo = results[chosen].algo;
  p.candidates = found;
  p.chosen = chosen;
  p.workspace = results[chosen].workspaceSize;
  p.waves = results[chosen].wavesCount;
  return true;
}

void log_plan(const CudaState& st, const PlanKey& key, const Plan& p) {
  const std::string ab(dtype_name(key.ab)), out(dtype_name(key.out));
  const char* gelu = key.gelu == Gelu::forward ? "forward" : key.gelu == Gelu::backward ? "backward" : "none";
  char timing[96] = ", not tuned";
  if (p.tuned)
    std::snprintf(timing, sizeof timing, ", tuned: %.1f us (heuristic's first %.1f us)", double(p.chosen_us),
                  double(p.first_us));
  std::fprintf(stderr,
               "[trellis matmul] plan #%zu: batch %lld x M=%lld N=%lld K=%lld %s x %s -> %s trans_a=%d trans_b=%d accumulate=%d "
               "bias=%s gelu=%s%s align(a,b,out,bias,aux)=%u,%u,%u,%u,%u | algo %d of %d candidates, workspace %zu B, "
               "waves %.2f%s%s\n",
               st.matmul_plans->plans.size() + 1, static_cast<long long>(key.batch), static_cast<long long>(key.m),
               static_cast<long long>(key.n),
               static_cast<long long>(key.k), ab.c_str(), ab.c_str(), out.c_str(),
               int(key.trans_a), int(key.trans_b), int(key.accumulate),
               !key.bias ? "none" : (p.bias_fused ? "fused-epilogue" : "SEPARATE-KERNEL"),
               gelu, key.gelu == Gelu::none ? "" : (p.gelu_fused ? " (fused-epilogue)" : " (SEPARATE-KERNEL)"),
               key.align_a, key.align_b, key.align_c, key.align_bias, key.align_aux, p.chosen, p.candidates, p.workspace,
               double(p.waves), timing, st.deterministic ? ", deterministic (no split-K reduction)" : "");
}

// The cached plan of `key`, made on first use: every epilogue asked for fused, else (unbatched) without
// the GELU, then without the bias too (their separate kernels follow). A batched problem gets a plan
// only with every epilogue fused (null otherwise, also remembered: the caller runs its problems one
// by one).
Plan* get_plan(CudaState& st, const PlanKey& key, const Operands& ops) {
  if (!st.matmul_plans) st.matmul_plans = new MatmulPlanCache();
  auto it = st.matmul_plans->plans.find(key);
  if (it != st.matmul_plans->plans.end()) return it->second.desc ? &it->second : nullptr;
  Plan p;
  // All requested epilogues fused first; then without the GELU, then without the bias, where
  // cuBLASLt has no algorithm for them (a fused GELU thus always comes with the fused bias).
  const bool gelu = key.gelu != Gelu::none;
  bool ok = try_make_plan(st, key, key.bias, gelu, ops, p);
  if (!ok && key.batch == 1 && gelu && key.bias) ok = try_make_plan(st, key, true, false, ops, p);
  if (!ok && key.batch == 1 && (gelu || key.bias)) ok = try_make_plan(st, key, false, false, ops, p);
  if (!ok && key.batch == 1)
    TRELLIS_FATAL("matmul: cuBLASLt has no algorithm for M=" + std::to_string(key.m) + " N=" + std::to_string(key.n) +
                  " K=" + std::to_string(key.k) + " " + std::string(dtype_name(key.ab)) + " -> " +
                  std::string(dtype_name(key.out)));
  if (ok && matmul_log_enabled()) log_plan(st, key, p);
  if (!ok && matmul_log_enabled())
    std::fprintf(stderr, "[trellis matmul] batch %lld x M=%lld N=%lld K=%lld: no fused plan, one call a problem\n",
                 static_cast<long long>(key.batch), static_cast<long long>(key.m), static_cast<long long>(key.n),
                 static_cast<long long>(key.k));
  Plan& kept = st.matmul_plans->plans.emplace(key, p).first->second;
  return ok ? &kept : nullptr;
}

}  // namespace

void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  CudaState& st = cuda_state(rt);
  int64_t M = out.size(0), N = out.size(1), K = opt.trans_a ? a.size(0) : a.size(1);
  if (M == 0 || N == 0) return;
  // Batched: one call where cuBLASLt fuses every epilogue asked for, else one problem after the other.
  auto one_by_one = [&] {
    for_each_matmul_problem(out, a, b, opt, [&](const Tensor& o, const Tensor& x, const Tensor& y,
                                                const MatmulOptions& one) { gpu::matmul(rt, o, x, y, one); });
  };
  // The DGELU epilogue in a batch ran at half the speed of one call a problem on the H200 (8 x
  // 5120x3072x768: 172 against 359 TFLOP/s, bench/sessions/2026-12-02e call 1); the other batched
  // forms ran 12-22% faster than one call a problem.
  if (opt.batch > 1 && (K == 0 || opt.gelu_grad_of)) return one_by_one();
  const Gelu gelu = opt.gelu_input ? Gelu::forward : opt.gelu_grad_of ? Gelu::backward : Gelu::none;
  const Tensor* aux = opt.gelu_input ? opt.gelu_input : opt.gelu_grad_of;
  // Where the product (+ bias) lands unless the GELU is fused: the forward's pre-activation, or out.
  void* result = opt.gelu_input ? opt.gelu_input->data : out.data;
  bool bias_done = false, gelu_done = false;
  // C, which beta = 1 adds: out when accumulating, else the residual (the same layout as out).
  const bool add_c = opt.accumulate || opt.residual;
  const void* c = opt.residual ? opt.residual->data : out.data;
  if (K == 0) {  // cuBLASLt wants k > 0: the product is empty (accumulating: out unchanged by it)
    if (!add_c) launch_fill(st.compute, result, out.dtype, out.numel(), 0.0f);
    else if (c != out.data)
      CUDA_CHECK(cudaMemcpyAsync(out.data, c, size_t(out.numel()) * dtype_size(out.dtype), cudaMemcpyDeviceToDevice,
                                 st.compute));
  } else {
    // The plan's output is out or, with the forward GELU not fused, gelu_input: it must suit both
    // (and C, the residual's alignment).
    const uint32_t align_out = std::min({alignment_of(out.data), alignment_of(result), alignment_of(c)});
    // A batch's strides set the alignment of every problem's operands after the first.
    auto align = [&](const void* ptr, int64_t stride, DType t) {
      return std::min(alignment_of(ptr), opt.batch > 1 ? alignment_of(uintptr_t(stride) * dtype_size(t)) : 256u);
    };
    PlanKey key{M, N, K, opt.trans_a, opt.trans_b, add_c, opt.bias != nullptr, gelu, a.dtype, out.dtype,
                align(a.data, opt.stride_a, a.dtype), align(b.data, opt.stride_b, b.dtype),
                std::min(align_out, align(out.data, opt.stride_out, out.dtype)),
                opt.bias ? align(opt.bias->data, opt.stride_bias, a.dtype) : 256u,
                aux ? align(aux->data, opt.stride_out, out.dtype) : 256u};
    if (opt.batch > 1) {
      key.batch = opt.batch;
      key.stride_a = opt.stride_a;
      key.stride_b = opt.stride_b;
      key.stride_c = opt.stride_out;
      key.stride_bias = opt.bias ? opt.stride_bias : 0;
    }
    const PlanKey exact = key;
    if (opt.rows_vary) {  // planned for a power of two of a's rows, run at this call's
      key.rows_vary = true;
      (opt.trans_a ? key.k : key.m) = planned_rows(opt.trans_a ? K : M);
    }
    const float alpha = opt.alpha, beta = add_c ? 1.0f : 0.0f;
    const Operands ops{a.data, b.data, opt.bias ? opt.bias->data : nullptr, aux ? aux->data : nullptr, alpha};
    Plan* plan = get_plan(st, key, ops);
    // This call's own layouts where the plan's are for other sizes, if cuBLASLt runs the plan's
    // algorithm at them (else the exact problem's own plan).
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    if (plan && (key.m != M || key.k != K)) {
      const auto [at, first_time] = plan->runs_at.try_emplace(opt.trans_a ? K : M);
      Plan::RowsRun& run = at->second;
      if (first_time) {
        make_layouts(exact, run.la, run.lb, run.lc);
        cublasLtMatmulHeuristicResult_t fit{};
        const cublasStatus_t rc =
            cublasLtMatmulAlgoCheck(st.lt, plan->desc, run.la, run.lb, run.lc, run.lc, &plan->algo, &fit);
        run.fits = rc == CUBLAS_STATUS_SUCCESS && fit.workspaceSize <= st.lt_workspace_bytes;
        if (!run.fits) {
          for (cublasLtMatrixLayout_t l : {run.la, run.lb, run.lc}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
          run.la = run.lb = run.lc = nullptr;
        }
      }
      if (run.fits) {
        la = run.la;
        lb = run.lb;
        lc = run.lc;
      } else {
        plan = get_plan(st, exact, ops);
      }
    }
    if (!plan) return one_by_one();  // batched, but cuBLASLt cannot fuse its epilogues
    Plan& p = *plan;
    if (!la) {
      la = p.la;
      lb = p.lb;
      lc = p.lc;
    }
    if (p.bias_fused) set_pointer(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, opt.bias->data);
    if (p.gelu_fused) set_pointer(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux->data);
    void* d = p.gelu_fused ? out.data : result;
    CUBLAS_CHECK(cublasLtMatmul(st.lt, p.desc, &alpha, b.data, la, a.data, lb, &beta, opt.residual ? c : d, lc, d, lc,
                                &p.algo, st.lt_workspace, st.lt_workspace_bytes, st.compute));
    bias_done = p.bias_fused;
    gelu_done = p.gelu_fused;  // and then so is the bias (get_plan)
  }
  if (opt.bias && !bias_done) launch_bias_add(st.compute, result, out.dtype, opt.bias->data, opt.bias->dtype, M, N);
  if (gelu == Gelu::forward && !gelu_done) launch_gelu_forward(st.compute, out.data, result, out.dtype, out.numel());
  if (gelu == Gelu::backward && !gelu_done)
    launch_gelu_backward(st.compute, out.data, out.data, aux->data, out.dtype, out.numel());
}

}  // namespace gpu
}  // namespace trellis
