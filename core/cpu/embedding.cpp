// CPU token + position embeddings: forward, and a deterministic accumulating backward.
#include <algorithm>
#include <string>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {
void check_tokens(const int32_t* tok, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (tok[i] < 0 || tok[i] >= V)
      TRELLIS_FATAL("embedding: token " + std::to_string(tok[i]) + " at " + std::to_string(i) +
                    " outside [0, " + std::to_string(V) + ")");
}
}  // namespace

void embedding_forward(Runtime&, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
  const int32_t* tok = tokens.ptr<int32_t>();
  check_tokens(tok, B * T, wte.size(0));
  dispatch_float(wte.dtype, "embedding_forward", [&](auto tag) {
    using E = decltype(tag);
    const E *pt = wte.ptr<E>(), *pp = wpe.ptr<E>();
    E* po = out.ptr<E>();
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
    for (int64_t i = 0; i < B * T; ++i) {
      const E *te = pt + int64_t(tok[i]) * C, *pe = pp + (i % T) * C;
      for (int64_t c = 0; c < C; ++c) store(po, i * C + c, load(te, c) + load(pe, c));
    }
  });
}

void embedding_backward(Runtime&, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = dwte.size(1);
  const int32_t* tok = tokens.ptr<int32_t>();
  check_tokens(tok, B * T, dwte.size(0));
  float *gt = dwte.ptr<float>(), *gp = dwpe.ptr<float>();
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
  dispatch_float(dout.dtype, "embedding_backward", [&](auto tag) {
    using E = decltype(tag);
    const E* pd = dout.ptr<E>();
    // dwte: each thread owns a block of columns and scatters every position in order, so the
    // rows that hit one token are added in position order whatever the thread count.
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      for (int64_t i = 0; i < B * T; ++i) {
        float* g = gt + int64_t(tok[i]) * C;
        for (int64_t c = c0; c < c1; ++c) g[c] += load(pd, i * C + c);
      }
    }
    // dwpe[t] += sum over b, in batch order.
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        float s = gp[t * C + c];
        for (int64_t b = 0; b < B; ++b) s += load(pd, (b * T + t) * C + c);
        gp[t * C + c] = s;
      }
  });
}

}  // namespace trellis::cpu
