// CPU token + position embeddings: forward, and a deterministic accumulating backward. The token
// table may be a vocabulary shard (rows [vocab_begin, vocab_begin + V) of a vocab_size-row table):
// tokens outside it contribute zero. The position table and either gradient may be absent.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cpu/cpu_ops.h"
#include "core/cpu/cpu_util.h"

namespace trellis::cpu {

namespace {
void check_tokens(const int32_t* tok, int64_t n, int64_t vocab_size) {
  for (int64_t i = 0; i < n; ++i)
    if (tok[i] < 0 || tok[i] >= vocab_size)
      TRELLIS_FATAL("embedding: token " + std::to_string(tok[i]) + " at " + std::to_string(i) +
                    " outside [0, " + std::to_string(vocab_size) + ")");
}
}  // namespace

void embedding_forward(Runtime&, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       int64_t vocab_begin, int64_t vocab_size, const Tensor& positions) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1), V = wte.size(0);
  const int32_t* tok = tokens.ptr<int32_t>();
  const int32_t* pos = positions.defined() ? positions.ptr<int32_t>() : nullptr;
  if (pos && wpe.defined()) check_tokens(pos, B * T, wpe.size(0));
  check_tokens(tok, B * T, vocab_size);
  dispatch_float(wte.dtype, "embedding_forward", [&](auto tag) {
    using E = decltype(tag);
    const E *pt = wte.ptr<E>(), *pp = wpe.defined() ? wpe.ptr<E>() : nullptr;
    E* po = out.ptr<E>();
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
    for (int64_t i = 0; i < B * T; ++i) {
      const int64_t row = int64_t(tok[i]) - vocab_begin;
      const E *te = row >= 0 && row < V ? pt + row * C : nullptr, *pe = pp ? pp + (pos ? pos[i] : i % T) * C : nullptr;
      for (int64_t c = 0; c < C; ++c) store(po, i * C + c, (te ? load(te, c) : 0.0f) + (pe ? load(pe, c) : 0.0f));
    }
  });
}

void embedding_backward(Runtime& rt, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_begin, int64_t vocab_size) {
  // 16-bit gradients (train.grad_dtype): summed into f32 copies, each element rounded once as it
  // goes back (as the CUDA kernels sum a row's lookups in f32 from its old value).
  if ((dwte.defined() && dwte.dtype != DType::f32) || (dwpe.defined() && dwpe.dtype != DType::f32)) {
    std::vector<float> te, pe;
    auto widen = [](const Tensor& g, std::vector<float>& buf) {
      if (!g.defined() || g.dtype == DType::f32) return g;
      buf.resize(size_t(g.numel()));
      to_f32(buf.data(), g, g.numel());
      return Tensor(buf.data(), DType::f32, Device::CPU(), g.shape);
    };
    cpu::embedding_backward(rt, widen(dwte, te), widen(dwpe, pe), dout, tokens, vocab_begin, vocab_size);
    if (!te.empty()) from_f32(dwte, te.data(), dwte.numel());
    if (!pe.empty()) from_f32(dwpe, pe.data(), dwpe.numel());
    return;
  }
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t C = dwte.defined() ? dwte.size(1) : dwpe.defined() ? dwpe.size(1) : 0;
  if (B * T * C == 0) return;
  const int64_t V = dwte.defined() ? dwte.size(0) : 0;
  const int32_t* tok = tokens.ptr<int32_t>();
  if (dwte.defined()) check_tokens(tok, B * T, vocab_size);
  float *gt = dwte.defined() ? dwte.ptr<float>() : nullptr, *gp = dwpe.defined() ? dwpe.ptr<float>() : nullptr;
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
  dispatch_float(dout.dtype, "embedding_backward", [&](auto tag) {
    using E = decltype(tag);
    const E* pd = dout.ptr<E>();
    // dwte: each thread owns a block of columns and scatters every position in order, so the
    // rows that hit one token are added in position order whatever the thread count.
    if (gt) {
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
      for (int64_t blk = 0; blk < nblocks; ++blk) {
        const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
        for (int64_t i = 0; i < B * T; ++i) {
          const int64_t row = int64_t(tok[i]) - vocab_begin;
          if (row < 0 || row >= V) continue;  // another shard's token
          float* g = gt + row * C;
          for (int64_t c = c0; c < c1; ++c) g[c] += load(pd, i * C + c);
        }
      }
    }
    // dwpe[t] += sum over b, in batch order.
    if (gp) {
#pragma omp parallel for schedule(static) if (B * T * C > kParallelMin)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          float s = gp[t * C + c];
          for (int64_t b = 0; b < B; ++b) s += load(pd, (b * T + t) * C + c);
          gp[t * C + c] = s;
        }
    }
  });
}

}  // namespace trellis::cpu
