// Op dispatch: checks the arguments once (shapes, dtypes, devices), opens an NVTX range, and
// calls the CPU or CUDA implementation.
#include "core/ops.h"

#include <cmath>
#include <initializer_list>

#include "core/cpu/cpu_ops.h"
#include "core/nvtx.h"
#include "core/profiler.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/gpu_ops.h"
#endif

namespace trellis {

namespace {

void check_device(Runtime& rt, const Tensor& t, const char* op) {
  if (!t.defined()) return;
  TRELLIS_CHECK(t.device == rt.device(), std::string(op) + ": tensor " + t.str() +
                                             " is not on the runtime's device " + rt.device().str());
}
void check_float(const Tensor& t, const char* op) {
  TRELLIS_CHECK(is_float(t.dtype), std::string(op) + ": expected a float tensor, got " + t.str());
}
void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  TRELLIS_CHECK(a.numel() == b.numel(), std::string(op) + ": " + a.str() + " vs " + b.str());
}
void check_dtype(const Tensor& t, DType d, const char* op) {
  TRELLIS_CHECK(t.dtype == d, std::string(op) + ": expected " + std::string(dtype_name(d)) + ", got " + t.str());
}
// A parameter gradient an op writes: f32, or the activations' own dtype (train.grad_dtype).
void check_grad_dtype(const Tensor& grad, DType activations, const char* op) {
  TRELLIS_CHECK(grad.dtype == DType::f32 || grad.dtype == activations,
                std::string(op) + ": a gradient is f32 or " + std::string(dtype_name(activations)) + ", got " + grad.str());
}

}  // namespace

// TRELLIS_DISPATCH_TIMED names the profiler's row with a detail (a problem shape) and its FLOPs.
#if TRELLIS_HAVE_CUDA
#define TRELLIS_DISPATCH_TIMED(rt, detail, flops, name, ...) \
  do {                                                       \
    NvtxRange nvtx_range_(#name);                            \
    OpTimer op_timer_(rt, detail, #name, flops);             \
    if ((rt).device().is_cuda()) gpu::name(__VA_ARGS__);     \
    else cpu::name(__VA_ARGS__);                             \
  } while (0)
#else
#define TRELLIS_DISPATCH_TIMED(rt, detail, flops, name, ...)                       \
  do {                                                                             \
    NvtxRange nvtx_range_(#name);                                                  \
    OpTimer op_timer_(rt, detail, #name, flops);                                   \
    TRELLIS_CHECK(!(rt).device().is_cuda(), "this build has no CUDA backend");     \
    cpu::name(__VA_ARGS__);                                                        \
  } while (0)
#endif
#define TRELLIS_DISPATCH(rt, name, ...) TRELLIS_DISPATCH_TIMED(rt, std::string(), 0.0, name, __VA_ARGS__)

void fill(Runtime& rt, const Tensor& x, float value) {
  check_device(rt, x, "fill");
  TRELLIS_DISPATCH(rt, fill, rt, x, value);
}

void copy(Runtime& rt, const Tensor& dst, const Tensor& src) {
  TRELLIS_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
                "copy: " + dst.str() + " <- " + src.str());
  if (dst.device.is_cpu() && src.device.is_cpu()) {
    cpu::copy(rt, dst, src);
    return;
  }
#if TRELLIS_HAVE_CUDA
  NvtxRange r("copy");
  OpTimer op_timer(rt, "copy");
  gpu::copy(rt, dst, src);
#else
  TRELLIS_FATAL("copy: this build has no CUDA backend");
#endif
}

void cast(Runtime& rt, const Tensor& out, const Tensor& in) {
  check_device(rt, out, "cast"); check_device(rt, in, "cast");
  check_float(out, "cast"); check_float(in, "cast"); check_same_numel(out, in, "cast");
  TRELLIS_DISPATCH(rt, cast, rt, out, in);
}

void add(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b) {
  check_device(rt, out, "add"); check_device(rt, a, "add"); check_device(rt, b, "add");
  check_same_numel(out, a, "add"); check_same_numel(out, b, "add");
  TRELLIS_CHECK(out.dtype == a.dtype && out.dtype == b.dtype, "add: dtypes differ");
  check_float(out, "add");
  TRELLIS_DISPATCH(rt, add, rt, out, a, b);
}

void accumulate(Runtime& rt, const Tensor& out, const Tensor& a) {
  check_device(rt, out, "accumulate"); check_device(rt, a, "accumulate");
  check_same_numel(out, a, "accumulate"); check_float(out, "accumulate"); check_float(a, "accumulate");
  TRELLIS_DISPATCH(rt, accumulate, rt, out, a);
}

void scale(Runtime& rt, const Tensor& x, float s) {
  check_device(rt, x, "scale"); check_float(x, "scale");
  TRELLIS_DISPATCH(rt, scale, rt, x, s);
}

void matmul(Runtime& rt, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  check_device(rt, out, "matmul"); check_device(rt, a, "matmul"); check_device(rt, b, "matmul");
  TRELLIS_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2,
                "matmul: 2-D tensors expected: " + out.str() + " = " + a.str() + " @ " + b.str());
  // A batch's strides follow its rows, so varying rows would make every batch a problem of its own.
  TRELLIS_CHECK(!opt.rows_vary || opt.batch == 1, "matmul: rows_vary applies to unbatched problems");
  int64_t M = opt.trans_a ? a.size(1) : a.size(0), K = opt.trans_a ? a.size(0) : a.size(1);
  int64_t Kb = opt.trans_b ? b.size(1) : b.size(0), N = opt.trans_b ? b.size(0) : b.size(1);
  TRELLIS_CHECK(K == Kb && out.size(0) == M && out.size(1) == N,
                "matmul: shapes " + out.str() + " = op(" + a.str() + ") @ op(" + b.str() + ")");
  check_float(a, "matmul");
  TRELLIS_CHECK(a.dtype == b.dtype, "matmul: a and b dtypes differ");
  TRELLIS_CHECK(out.dtype == a.dtype || out.dtype == DType::f32, "matmul: out must be a's dtype or f32");
  if (opt.bias) {
    check_device(rt, *opt.bias, "matmul");
    TRELLIS_CHECK(opt.bias->numel() == N && opt.bias->dtype == a.dtype, "matmul: bias " + opt.bias->str());
  }
  if (opt.residual) {
    check_device(rt, *opt.residual, "matmul");
    TRELLIS_CHECK(!opt.accumulate && !opt.gelu_input && !opt.gelu_grad_of,
                  "matmul: residual does not combine with accumulate or GELU");
    TRELLIS_CHECK(opt.residual->numel() == out.numel() && opt.residual->dtype == out.dtype,
                  "matmul: residual " + opt.residual->str() + " must have out's size and dtype, " + out.str());
  }
  if (const Tensor* g = opt.gelu_input ? opt.gelu_input : opt.gelu_grad_of) {
    const char* name = opt.gelu_input ? "gelu_input" : "gelu_grad_of";
    TRELLIS_CHECK(!(opt.gelu_input && opt.gelu_grad_of), "matmul: gelu_input and gelu_grad_of are exclusive");
    TRELLIS_CHECK(!opt.accumulate, std::string("matmul: ") + name + " does not combine with accumulate");
    TRELLIS_CHECK(!(opt.gelu_grad_of && opt.bias), "matmul: gelu_grad_of does not combine with bias");
    check_device(rt, *g, "matmul");
    TRELLIS_CHECK((g->defined() || out.numel() == 0) && g->numel() == out.numel() && g->dtype == out.dtype,
                  std::string("matmul: ") + name + " " + g->str() + " must have out's size and dtype, " + out.str());
    TRELLIS_CHECK(g->data != out.data || out.numel() == 0, std::string("matmul: ") + name + " must not alias out");
  }
  TRELLIS_CHECK(opt.batch >= 1 && opt.batch <= INT32_MAX && opt.stride_a >= 0 && opt.stride_b >= 0 &&
                    opt.stride_bias >= 0 && (opt.batch == 1 || opt.stride_out >= out.numel()),
                "matmul: batch " + std::to_string(opt.batch) + " needs strides >= 0 and problems' outputs apart");
  if (const Tensor* g = opt.batch > 1 ? (opt.gelu_input ? opt.gelu_input : opt.gelu_grad_of) : nullptr) {
    // Every problem's GELU tensor apart from every problem's output, not only problem 0's.
    const char* lo = static_cast<const char*>(out.data);
    const char* hi = lo + ((opt.batch - 1) * opt.stride_out + out.numel()) * int64_t(dtype_size(out.dtype));
    const char* glo = static_cast<const char*>(g->data);
    const char* ghi = glo + ((opt.batch - 1) * opt.stride_out + g->numel()) * int64_t(dtype_size(g->dtype));
    TRELLIS_CHECK(ghi <= lo || hi <= glo, "matmul: a batch's GELU tensors must not overlap its outputs");
  }
  std::string shape;  // the profiler's row: one per problem (built only while ops are timed)
  if (rt.profiler() && rt.profiler()->timing())
    shape = (opt.batch > 1 ? std::to_string(opt.batch) + " x " : "") + std::to_string(M) + "x" + std::to_string(N) +
            "x" + std::to_string(K) + (opt.trans_a ? " tA" : "") + (opt.trans_b ? " tB" : "") +
            (opt.accumulate ? " +=" : "") + (opt.bias ? " +bias" : "") + (opt.residual ? " +residual" : "") +
            (opt.gelu_input ? " gelu" : "") + (opt.gelu_grad_of ? " *gelu'" : "") + " -> " +
            std::string(dtype_name(out.dtype));
  const double flops = 2.0 * double(M) * double(N) * double(K) * double(opt.batch);
  if (opt.batch > 1 && !rt.device().is_cuda()) {  // the CPU backend: one problem after the other
    NvtxRange nvtx_range("matmul");
    OpTimer op_timer(rt, shape, "matmul", flops);
    for_each_matmul_problem(out, a, b, opt, [&](const Tensor& o, const Tensor& x, const Tensor& y,
                                                const MatmulOptions& one) { cpu::matmul(rt, o, x, y, one); });
    return;
  }
  TRELLIS_DISPATCH_TIMED(rt, shape, flops, matmul, rt, out, a, b, opt);
}

void for_each_matmul_problem(const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& opt,
                             const std::function<void(const Tensor&, const Tensor&, const Tensor&,
                                                      const MatmulOptions&)>& f) {
  for (int64_t i = 0; i < opt.batch; ++i) {
    MatmulOptions one = opt;
    one.batch = 1;
    Tensor bias, gelu, residual;
    if (opt.bias) one.bias = &(bias = opt.bias->shifted(i * opt.stride_bias));
    if (const Tensor* g = opt.gelu_input ? opt.gelu_input : opt.gelu_grad_of) {
      gelu = g->shifted(i * opt.stride_out);
      (opt.gelu_input ? one.gelu_input : one.gelu_grad_of) = &gelu;
    }
    if (opt.residual) one.residual = &(residual = opt.residual->shifted(i * opt.stride_out));
    f(out.shifted(i * opt.stride_out), a.shifted(i * opt.stride_a), b.shifted(i * opt.stride_b), one);
  }
}

void bias_backward(Runtime& rt, const Tensor& db, const Tensor& dy, bool accumulate, int64_t batch,
                   int64_t db_stride) {
  check_device(rt, db, "bias_backward"); check_device(rt, dy, "bias_backward");
  check_grad_dtype(db, dy.dtype, "bias_backward");
  TRELLIS_CHECK(db.numel() == dy.cols(), "bias_backward: " + db.str() + " vs " + dy.str());
  TRELLIS_CHECK(batch >= 1 && dy.rows() % batch == 0 && (batch == 1 || db_stride >= db.numel()),
                "bias_backward: batch " + std::to_string(batch) + " of " + dy.str() + " with outputs " +
                    std::to_string(db_stride) + " apart");
  if (batch > 1 && (dy.rows() == 0 || !rt.device().is_cuda())) {  // one block after the other
    const int64_t rows = dy.rows() / batch;
    for (int64_t i = 0; i < batch; ++i)
      bias_backward(rt, db.shifted(i * db_stride),
                    dy.view({dy.rows(), dy.cols()}).slice(i * rows * dy.cols(), {rows, dy.cols()}), accumulate);
    return;
  }
  if (dy.rows() == 0) {  // no rows: the sums are 0
    if (!accumulate) fill(rt, db, 0.0f);
    return;
  }
  TRELLIS_DISPATCH(rt, bias_backward, rt, db, dy, accumulate, batch, db_stride);
}

namespace {
// The layer norm forward's arguments, for `op`: out like x, f32 mean and rstd per row, w and b per column.
void check_layernorm_forward(Runtime& rt, const char* op, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& x, const Tensor& w, const Tensor& b) {
  for (const Tensor* t : {&out, &mean, &rstd, &x, &w, &b}) check_device(rt, *t, op);
  check_float(x, op); check_same_numel(out, x, op);
  check_dtype(mean, DType::f32, op); check_dtype(rstd, DType::f32, op);
  TRELLIS_CHECK(mean.numel() == x.rows() && rstd.numel() == x.rows() && w.numel() == x.cols() &&
                    (!b.defined() || (b.numel() == x.cols() && b.dtype == x.dtype)) && w.dtype == x.dtype &&
                    out.dtype == x.dtype,
                std::string(op) + ": shapes or dtypes");
}
}  // namespace

void layernorm_forward(Runtime& rt, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                       const Tensor& x, const Tensor& w, const Tensor& b, float eps, bool rms) {
  check_layernorm_forward(rt, "layernorm_forward", out, mean, rstd, x, w, b);
  TRELLIS_DISPATCH(rt, layernorm_forward, rt, out, mean, rstd, x, w, b, eps, rms);
}

void add_layernorm_forward(Runtime& rt, const Tensor& r, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& x, const Tensor& branch, const Tensor& w, const Tensor& b, float eps,
                           bool rms) {
  check_layernorm_forward(rt, "add_layernorm_forward", out, mean, rstd, x, w, b);
  for (const Tensor* t : {&r, &branch}) {
    check_device(rt, *t, "add_layernorm_forward");
    check_same_numel(*t, x, "add_layernorm_forward");
    TRELLIS_CHECK(t->dtype == x.dtype, "add_layernorm_forward: shapes or dtypes");
  }
  TRELLIS_DISPATCH(rt, add_layernorm_forward, rt, r, out, mean, rstd, x, branch, w, b, eps, rms);
}

void layernorm_backward(Runtime& rt, const Tensor& dx, const Tensor& dw, const Tensor& db,
                        const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, bool accumulate_params, const ResidualColumnSums* sums, bool rms) {
  for (const Tensor* t : {&dx, &dw, &db, &dout, &x, &w, &mean, &rstd}) check_device(rt, *t, "layernorm_backward");
  if (sums) {
    for (const Tensor* t : {&sums->before, &sums->after}) {
      check_device(rt, *t, "layernorm_backward");
      check_grad_dtype(*t, x.dtype, "layernorm_backward");
      TRELLIS_CHECK(t->numel() == x.cols(), "layernorm_backward: residual column sums " + t->str());
    }
  }
  check_same_numel(dx, x, "layernorm_backward"); check_same_numel(dout, x, "layernorm_backward");
  check_grad_dtype(dw, x.dtype, "layernorm_backward");
  if (db.defined()) check_grad_dtype(db, x.dtype, "layernorm_backward");
  TRELLIS_CHECK((!db.defined() || db.dtype == dw.dtype) &&
                    (!sums || (sums->before.dtype == dw.dtype && sums->after.dtype == dw.dtype)),
                "layernorm_backward: the gradients are of one dtype");
  TRELLIS_CHECK(dw.numel() == x.cols() && (!db.defined() || db.numel() == x.cols()) && mean.numel() == x.rows() &&
                    dx.dtype == x.dtype && dout.dtype == x.dtype,
                "layernorm_backward: shapes or dtypes");
  if (x.rows() == 0) {  // no rows: dx is empty, the parameter sums are 0
    if (!accumulate_params) {
      fill(rt, dw, 0.0f);
      if (db.defined()) fill(rt, db, 0.0f);
    }
    if (sums && !sums->accumulate_before) fill(rt, sums->before, 0.0f);
    if (sums && !sums->accumulate_after) fill(rt, sums->after, 0.0f);
    return;
  }
  TRELLIS_DISPATCH(rt, layernorm_backward, rt, dx, dw, db, dout, x, w, mean, rstd, accumulate_params, sums, rms);
}

void gelu_forward(Runtime& rt, const Tensor& out, const Tensor& x) {
  check_device(rt, out, "gelu_forward"); check_device(rt, x, "gelu_forward");
  check_same_numel(out, x, "gelu_forward"); check_float(x, "gelu_forward");
  TRELLIS_CHECK(out.dtype == x.dtype, "gelu_forward: dtypes differ");
  TRELLIS_DISPATCH(rt, gelu_forward, rt, out, x);
}

void gelu_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x) {
  check_device(rt, dx, "gelu_backward"); check_device(rt, dout, "gelu_backward"); check_device(rt, x, "gelu_backward");
  check_same_numel(dx, x, "gelu_backward"); check_same_numel(dout, x, "gelu_backward");
  TRELLIS_CHECK(dx.dtype == x.dtype && dout.dtype == x.dtype, "gelu_backward: dtypes differ");
  TRELLIS_DISPATCH(rt, gelu_backward, rt, dx, dout, x);
}

namespace {
// h (..., 2F) against g (..., F): the same rows, twice the width.
void check_swiglu(const Tensor& h, const Tensor& g, const char* op) {
  check_float(h, op);
  TRELLIS_CHECK(g.dtype == h.dtype, std::string(op) + ": dtypes differ");
  TRELLIS_CHECK(h.shape.rank >= 1 && g.shape.rank == h.shape.rank && h.cols() == 2 * g.cols() && h.rows() == g.rows(),
                std::string(op) + ": h " + h.str() + " is not [gate | up] of g " + g.str());
}
// Whether two tensors' bytes overlap.
bool overlap(const Tensor& a, const Tensor& b) {
  const char *pa = static_cast<const char*>(a.data), *pb = static_cast<const char*>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}
}  // namespace

void swiglu_forward(Runtime& rt, const Tensor& g, const Tensor& h) {
  check_device(rt, g, "swiglu_forward"); check_device(rt, h, "swiglu_forward");
  check_swiglu(h, g, "swiglu_forward");
  TRELLIS_DISPATCH(rt, swiglu_forward, rt, g, h);
}

void swiglu_backward(Runtime& rt, const Tensor& dh, const Tensor& dg, const Tensor& h) {
  check_device(rt, dh, "swiglu_backward"); check_device(rt, dg, "swiglu_backward"); check_device(rt, h, "swiglu_backward");
  check_swiglu(h, dg, "swiglu_backward");
  check_same_numel(dh, h, "swiglu_backward");
  TRELLIS_CHECK(dh.dtype == h.dtype, "swiglu_backward: dtypes differ");
  TRELLIS_CHECK(!overlap(dh, dg) && (dh.data == h.data || !overlap(dh, h)),
                "swiglu_backward: dh overlaps dg, or h other than being h");
  TRELLIS_DISPATCH(rt, swiglu_backward, rt, dh, dg, h);
}

namespace {
// The head size of qkv (B, T, (H + 2 Hkv) hd); fatal unless `heads` fits it.
int64_t head_size(const Tensor& qkv, AttentionHeads heads, const char* op) {
  TRELLIS_CHECK(heads.q > 0 && heads.kv > 0 && heads.q % heads.kv == 0,
                std::string(op) + ": " + std::to_string(heads.kv) + " key-value heads do not divide " +
                    std::to_string(heads.q) + " query heads");
  TRELLIS_CHECK(qkv.dim() == 3 && qkv.size(2) % heads.qkv_heads() == 0,
                std::string(op) + ": qkv " + qkv.str() + " is not (B, T, (" + std::to_string(heads.q) + " + 2 x " +
                    std::to_string(heads.kv) + ") x head size)");
  return qkv.size(2) / heads.qkv_heads();
}
}  // namespace

void rotary_embedding(Runtime& rt, const Tensor& qkv, AttentionHeads heads, const RotaryFrequencies& freqs,
                      int64_t first_position,
                      bool inverse) {
  check_device(rt, qkv, "rotary_embedding");
  check_float(qkv, "rotary_embedding");
  const int64_t hd = head_size(qkv, heads, "rotary_embedding");
  TRELLIS_CHECK(hd % 2 == 0, "rotary_embedding: head size " + std::to_string(hd) + " is not even");
  TRELLIS_CHECK(freqs.dims >= 0 && freqs.dims % 2 == 0 && freqs.dims <= hd,
                "rotary_embedding: turned dims " + std::to_string(freqs.dims) + " are not even and at most the head size " +
                    std::to_string(hd));
  // LongRoPE's factor only chose its default attention factor (which may be below 1's).
  TRELLIS_CHECK(freqs.theta > 0.0 && (freqs.longrope || freqs.factor >= 1.0) &&
                    freqs.high_freq_factor > freqs.low_freq_factor && first_position >= 0,
                "rotary_embedding: theta > 0, factor >= 1, high_freq_factor > low_freq_factor, first_position >= 0");
  TRELLIS_DISPATCH(rt, rotary_embedding, rt, qkv, heads, freqs, first_position, inverse);
}

namespace {
// qk_norm's operands: out (or dqkv) as qkv, rstd f32 (rows, H + Hkv), the weights (hd) in qkv's dtype.
int64_t check_qk_norm(Runtime& rt, const Tensor& out, const Tensor& rstd, const Tensor& qkv, const Tensor& wq,
                      const Tensor& wk, AttentionHeads heads, const char* op) {
  for (const Tensor* t : {&out, &rstd, &qkv, &wq, &wk}) check_device(rt, *t, op);
  check_float(qkv, op);
  const int64_t hd = head_size(qkv, heads, op);
  TRELLIS_CHECK(out.numel() == qkv.numel() && out.dtype == qkv.dtype, std::string(op) + ": " + out.str() +
                                                                          " is not as qkv " + qkv.str());
  TRELLIS_CHECK(rstd.dtype == DType::f32 && rstd.numel() == qkv.size(0) * qkv.size(1) * (heads.q + heads.kv),
                std::string(op) + ": rstd " + rstd.str() + " is not f32 (B*T, H + Hkv)");
  for (const Tensor* w : {&wq, &wk})
    TRELLIS_CHECK(w->numel() == hd && w->dtype == qkv.dtype,
                  std::string(op) + ": a norm weight " + w->str() + " is not (" + std::to_string(hd) + ") of qkv's dtype");
  return hd;
}
}  // namespace

void qk_norm_forward(Runtime& rt, const Tensor& out, const Tensor& rstd, const Tensor& qkv, const Tensor& wq,
                     const Tensor& wk, AttentionHeads heads, float eps) {
  check_qk_norm(rt, out, rstd, qkv, wq, wk, heads, "qk_norm_forward");
  TRELLIS_CHECK(eps > 0.0f, "qk_norm_forward: eps must be positive");
  TRELLIS_CHECK(out.data == qkv.data || !overlap(out, qkv), "qk_norm_forward: out overlaps qkv other than being it");
  TRELLIS_DISPATCH(rt, qk_norm_forward, rt, out, rstd, qkv, wq, wk, heads, eps);
}

void qk_norm_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dwq, const Tensor& dwk, const Tensor& dout,
                      const Tensor& qkv, const Tensor& wq, const Tensor& wk, const Tensor& rstd, AttentionHeads heads,
                      bool accumulate_params) {
  const int64_t hd = check_qk_norm(rt, dqkv, rstd, qkv, wq, wk, heads, "qk_norm_backward");
  check_qk_norm(rt, dout, rstd, qkv, wq, wk, heads, "qk_norm_backward");
  for (const Tensor* g : {&dwq, &dwk}) {
    check_device(rt, *g, "qk_norm_backward");
    check_grad_dtype(*g, qkv.dtype, "qk_norm_backward");
    TRELLIS_CHECK(g->numel() == hd, "qk_norm_backward: a weight gradient " + g->str());
  }
  TRELLIS_CHECK(!overlap(dqkv, qkv) && (dqkv.data == dout.data || !overlap(dqkv, dout)),
                "qk_norm_backward: dqkv overlaps qkv, or dout other than being it");
  TRELLIS_DISPATCH(rt, qk_norm_backward, rt, dqkv, dwq, dwk, dout, qkv, wq, wk, rstd, heads, accumulate_params);
}

namespace {
void check_attention(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, AttentionHeads heads,
                     const char* op) {
  check_device(rt, out, op); check_device(rt, lse, op); check_device(rt, qkv, op);
  const int64_t B = qkv.dim() == 3 ? qkv.size(0) : 0, T = qkv.dim() == 3 ? qkv.size(1) : 0;
  const int64_t C = heads.q * head_size(qkv, heads, op);
  TRELLIS_CHECK(out.numel() == B * T * C && out.dtype == qkv.dtype, std::string(op) + ": out " + out.str());
  TRELLIS_CHECK(lse.numel() == B * heads.q * T && lse.dtype == DType::f32, std::string(op) + ": lse " + lse.str());
  TRELLIS_CHECK(heads.window >= 0, std::string(op) + ": negative sliding window");
  if (heads.doc_starts.defined()) {
    check_device(rt, heads.doc_starts, op);
    TRELLIS_CHECK(heads.doc_starts.dtype == DType::i32 && heads.doc_starts.numel() == B * T,
                  std::string(op) + ": doc_starts " + heads.doc_starts.str() + " for (" + std::to_string(B) + ", " +
                      std::to_string(T) + ") queries");
  }
}

// The backends' form of the dropout: the 16-bit threshold and the exact 1 / P(keep).
AttentionDropoutKey resolve(const AttentionDropout& d, const Tensor& qkv, int n_heads, const char* op) {
  TRELLIS_CHECK(d.p >= 0.0f && d.p < 1.0f, std::string(op) + ": dropout probability must be in [0, 1)");
  AttentionDropoutKey k;
  k.threshold = uint32_t(std::lround(double(d.p) * 65536.0));
  TRELLIS_CHECK(k.threshold < 65536u, std::string(op) + ": dropout probability too close to 1");
  k.scale = float(65536.0 / double(65536u - k.threshold));
  k.seed = d.seed;
  k.stream = d.stream;
  k.sample_offset = d.sample_offset;
  k.head_offset = d.head_offset;
  k.global_heads = d.global_heads > 0 ? d.global_heads : n_heads;
  k.seq_len = qkv.size(1);
  TRELLIS_CHECK(k.head_offset >= 0 && k.head_offset + n_heads <= k.global_heads,
                std::string(op) + ": dropout heads out of range");
  return k;
}
}  // namespace

void attention_forward(Runtime& rt, const Tensor& out, const Tensor& lse, const Tensor& qkv, AttentionHeads heads,
                       const AttentionDropout& drop) {
  check_attention(rt, out, lse, qkv, heads, "attention_forward");
  const AttentionDropoutKey key = resolve(drop, qkv, heads.q, "attention_forward");
  TRELLIS_DISPATCH(rt, attention_forward, rt, out, lse, qkv, heads, key);
}

void attention_backward(Runtime& rt, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, AttentionHeads heads, const AttentionDropout& drop) {
  check_attention(rt, out, lse, qkv, heads, "attention_backward");
  const AttentionDropoutKey key = resolve(drop, qkv, heads.q, "attention_backward");
  check_device(rt, dqkv, "attention_backward"); check_device(rt, dout, "attention_backward");
  TRELLIS_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype == qkv.dtype && dout.numel() == out.numel() &&
                    dout.dtype == out.dtype,
                "attention_backward: dqkv/dout shapes or dtypes");
  TRELLIS_DISPATCH(rt, attention_backward, rt, dqkv, dout, qkv, out, lse, heads, key);
}

namespace {
void check_positions(Runtime& rt, const Tensor& positions, const Tensor& tokens, const char* op) {
  if (!positions.defined()) return;
  check_device(rt, positions, op);
  TRELLIS_CHECK(positions.dtype == DType::i32 && positions.shape == tokens.shape && !overlap(positions, tokens),
                std::string(op) + ": positions " + positions.str() + " for tokens " + tokens.str());
}
}  // namespace

void document_starts(Runtime& rt, const Tensor& starts, const Tensor& tokens, int32_t eod_token, const Tensor& positions) {
  check_device(rt, starts, "document_starts"); check_device(rt, tokens, "document_starts");
  check_positions(rt, positions, tokens, "document_starts");
  TRELLIS_CHECK(!positions.defined() || !overlap(positions, starts), "document_starts: positions overlap starts");
  TRELLIS_CHECK(tokens.dim() == 2 && tokens.dtype == DType::i32 && starts.dtype == DType::i32 &&
                    starts.numel() == tokens.numel() && !overlap(starts, tokens),
                "document_starts: starts " + starts.str() + " for tokens " + tokens.str());
  TRELLIS_CHECK(tokens.size(1) <= INT32_MAX, "document_starts: samples of more than 2^31 - 1 tokens");
  TRELLIS_DISPATCH(rt, document_starts, rt, starts, tokens, eod_token, positions);
}

namespace {
void check_kv_cache(Runtime& rt, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                    AttentionHeads heads, const char* op) {
  check_device(rt, qkv, op); check_device(rt, k_cache, op); check_device(rt, v_cache, op);
  check_float(qkv, op);
  TRELLIS_CHECK(!heads.doc_starts.defined(), std::string(op) + ": the generation cache holds one document");
  const int64_t Ckv = heads.kv * head_size(qkv, heads, op), B = qkv.size(0), n = qkv.size(1);
  for (const Tensor* c : {&k_cache, &v_cache})
    TRELLIS_CHECK(c->dim() == 3 && c->size(0) == B && c->size(2) == Ckv && c->dtype == qkv.dtype,
                  std::string(op) + ": cache " + c->str() + " does not fit qkv " + qkv.str());
  TRELLIS_CHECK(k_cache.shape == v_cache.shape, std::string(op) + ": k and v caches differ in shape");
  TRELLIS_CHECK(pos >= 0 && pos + n <= k_cache.size(1),
                std::string(op) + ": rows [" + std::to_string(pos) + ", " + std::to_string(pos + n) +
                    ") outside the cache " + k_cache.str());
}
}  // namespace

void kv_cache_append(Runtime& rt, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t pos,
                     AttentionHeads heads) {
  check_kv_cache(rt, qkv, k_cache, v_cache, pos, heads, "kv_cache_append");
  TRELLIS_DISPATCH(rt, kv_cache_append, rt, k_cache, v_cache, qkv, pos, heads);
}

void attention_with_cache(Runtime& rt, const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, AttentionHeads heads) {
  check_kv_cache(rt, qkv, k_cache, v_cache, pos, heads, "attention_with_cache");
  check_device(rt, out, "attention_with_cache");
  const int64_t C = heads.q * (qkv.size(2) / heads.qkv_heads());
  TRELLIS_CHECK(out.numel() == qkv.size(0) * qkv.size(1) * C && out.dtype == qkv.dtype,
                "attention_with_cache: out " + out.str());
  TRELLIS_DISPATCH(rt, attention_with_cache, rt, out, qkv, k_cache, v_cache, pos, heads);
}

namespace {
void check_xent(Runtime& rt, const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                const char* op) {
  check_device(rt, losses, op); check_device(rt, logits, op); check_device(rt, targets, op);
  check_float(logits, op);
  check_dtype(losses, DType::f32, op); check_dtype(targets, DType::i32, op);
  TRELLIS_CHECK(logits.dim() == 2 && vocab > 0 && vocab <= logits.size(1), std::string(op) + ": logits " + logits.str());
  TRELLIS_CHECK(losses.numel() == logits.size(0) && targets.numel() == logits.size(0),
                std::string(op) + ": losses/targets do not match logits rows");
}
}  // namespace

void softmax_cross_entropy_forward(Runtime& rt, const Tensor& losses, const Tensor& logits,
                                   const Tensor& targets, int64_t vocab) {
  check_xent(rt, losses, logits, targets, vocab, "softmax_cross_entropy_forward");
  TRELLIS_DISPATCH(rt, softmax_cross_entropy_forward, rt, losses, logits, targets, vocab);
}

void softmax_cross_entropy_backward(Runtime& rt, const Tensor& dlogits, const Tensor& losses,
                                    const Tensor& logits, const Tensor& targets, int64_t vocab, float dloss) {
  check_xent(rt, losses, logits, targets, vocab, "softmax_cross_entropy_backward");
  check_device(rt, dlogits, "softmax_cross_entropy_backward");
  TRELLIS_CHECK(dlogits.numel() == logits.numel() && dlogits.dtype == logits.dtype,
                "softmax_cross_entropy_backward: dlogits " + dlogits.str());
  TRELLIS_DISPATCH(rt, softmax_cross_entropy_backward, rt, dlogits, losses, logits, targets, vocab, dloss);
}

namespace {
// The shard's columns [vocab_begin, vocab_begin + cols) of the global logits, and the row statistics.
void check_vp_xent(Runtime& rt, const Tensor& logits, int64_t vocab, int64_t vocab_begin,
                   std::initializer_list<const Tensor*> row_stats, const char* op) {
  check_device(rt, logits, op);
  check_float(logits, op);
  TRELLIS_CHECK(logits.dim() == 2, std::string(op) + ": logits must be (N, cols): " + logits.str());
  TRELLIS_CHECK(vocab > 0 && vocab_begin >= 0 && logits.size(1) < (int64_t(1) << 30),
                std::string(op) + ": vocab " + std::to_string(vocab) + ", vocab_begin " +
                    std::to_string(vocab_begin) + ", logits " + logits.str());
  for (const Tensor* t : row_stats) {
    TRELLIS_CHECK(t->defined() || logits.size(0) == 0, std::string(op) + ": a row statistic is undefined");
    check_device(rt, *t, op);
    check_dtype(*t, DType::f32, op);
    TRELLIS_CHECK(t->numel() == logits.size(0), std::string(op) + ": " + t->str() + " does not match logits rows " +
                                                    logits.str());
  }
}
void check_vp_targets(Runtime& rt, const Tensor& targets, const Tensor& logits, const char* op) {
  check_device(rt, targets, op);
  check_dtype(targets, DType::i32, op);
  TRELLIS_CHECK(targets.numel() == logits.size(0), std::string(op) + ": targets " + targets.str() +
                                                       " do not match logits rows " + logits.str());
}
}  // namespace

void vocab_parallel_xent_max(Runtime& rt, const Tensor& row_max, const Tensor& logits, int64_t vocab,
                             int64_t vocab_begin) {
  check_vp_xent(rt, logits, vocab, vocab_begin, {&row_max}, "vocab_parallel_xent_max");
  TRELLIS_DISPATCH(rt, vocab_parallel_xent_max, rt, row_max, logits, vocab, vocab_begin);
}

void vocab_parallel_xent_sum_exp(Runtime& rt, const Tensor& row_sum, const Tensor& target_logit,
                                 const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 int64_t vocab, int64_t vocab_begin) {
  const char* op = "vocab_parallel_xent_sum_exp";
  check_vp_xent(rt, logits, vocab, vocab_begin, {&row_sum, &target_logit, &row_max}, op);
  check_vp_targets(rt, targets, logits, op);
  TRELLIS_DISPATCH(rt, vocab_parallel_xent_sum_exp, rt, row_sum, target_logit, logits, targets, row_max, vocab,
                   vocab_begin);
}

void vocab_parallel_xent_loss_and_grad(Runtime& rt, const Tensor& losses, const Tensor& dlogits,
                                       const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                       const Tensor& row_sum, const Tensor& target_logit, int64_t vocab,
                                       int64_t vocab_begin, float dloss) {
  const char* op = "vocab_parallel_xent_loss_and_grad";
  check_vp_xent(rt, logits, vocab, vocab_begin, {&losses, &row_max, &row_sum, &target_logit}, op);
  check_vp_targets(rt, targets, logits, op);
  if (dlogits.defined()) {
    check_device(rt, dlogits, op);
    TRELLIS_CHECK(dlogits.numel() == logits.numel() && dlogits.dtype == logits.dtype,
                  std::string(op) + ": dlogits " + dlogits.str() + " vs logits " + logits.str());
  }
  TRELLIS_DISPATCH(rt, vocab_parallel_xent_loss_and_grad, rt, losses, dlogits, logits, targets, row_max, row_sum,
                   target_logit, vocab, vocab_begin, dloss);
}

namespace {
// The full table's row count: vocab_size, or the table's own rows when vocab_size is 0.
int64_t resolve_vocab_size(int64_t vocab_begin, int64_t vocab_size, int64_t table_rows, const char* op) {
  if (vocab_size == 0) {
    TRELLIS_CHECK(vocab_begin == 0, std::string(op) + ": a vocabulary shard (vocab_begin " +
                                        std::to_string(vocab_begin) + ") needs vocab_size, the full table's rows");
    return table_rows;
  }
  TRELLIS_CHECK(vocab_begin >= 0 && table_rows >= 0 && vocab_begin + table_rows <= vocab_size &&
                    vocab_size < (int64_t(1) << 31),
                std::string(op) + ": shard rows [" + std::to_string(vocab_begin) + ", " +
                    std::to_string(vocab_begin + table_rows) + ") outside a table of " + std::to_string(vocab_size));
  return vocab_size;
}
}  // namespace

void embedding_forward(Runtime& rt, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       int64_t vocab_begin, int64_t vocab_size, const Tensor& positions) {
  for (const Tensor* t : {&out, &tokens, &wte, &wpe}) check_device(rt, *t, "embedding_forward");
  check_positions(rt, positions, tokens, "embedding_forward");
  check_dtype(tokens, DType::i32, "embedding_forward");
  TRELLIS_CHECK(wte.defined() && tokens.dim() == 2 && wte.dim() == 2 && out.numel() == tokens.numel() * wte.size(1) &&
                    out.dtype == wte.dtype,
                "embedding_forward: shapes or dtypes");
  check_float(wte, "embedding_forward");
  if (wpe.defined())
    TRELLIS_CHECK(wpe.dim() == 2 && wte.size(1) == wpe.size(1) && wpe.size(0) >= tokens.size(1) &&
                      wpe.dtype == wte.dtype,
                  "embedding_forward: wpe " + wpe.str() + " vs wte " + wte.str() + ", tokens " + tokens.str());
  vocab_size = resolve_vocab_size(vocab_begin, vocab_size, wte.size(0), "embedding_forward");
  TRELLIS_DISPATCH(rt, embedding_forward, rt, out, tokens, wte, wpe, vocab_begin, vocab_size,
                   wpe.defined() ? positions : Tensor());
}

void embedding_backward(Runtime& rt, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_begin, int64_t vocab_size, const Tensor& positions) {
  for (const Tensor* t : {&dwte, &dwpe, &dout, &tokens}) check_device(rt, *t, "embedding_backward");
  check_positions(rt, positions, tokens, "embedding_backward");
  check_dtype(tokens, DType::i32, "embedding_backward");
  check_float(dout, "embedding_backward");
  const int64_t C = dwte.defined()   ? dwte.cols()
                    : dwpe.defined() ? dwpe.cols()
                    : tokens.numel() ? dout.numel() / tokens.numel()
                                     : 0;
  TRELLIS_CHECK(tokens.dim() == 2 && dout.numel() == tokens.numel() * C,
                "embedding_backward: dout " + dout.str() + " vs tokens " + tokens.str());
  if (dwte.defined()) {
    check_grad_dtype(dwte, dout.dtype, "embedding_backward");
    TRELLIS_CHECK(dwte.dim() == 2 && dwte.size(1) == C, "embedding_backward: dwte " + dwte.str());
  }
  if (dwpe.defined()) {
    check_grad_dtype(dwpe, dout.dtype, "embedding_backward");
    TRELLIS_CHECK(dwpe.dim() == 2 && dwpe.size(1) == C && dwpe.size(0) >= tokens.size(1),
                  "embedding_backward: dwpe " + dwpe.str());
  }
  vocab_size = resolve_vocab_size(vocab_begin, vocab_size, dwte.defined() ? dwte.size(0) : 0, "embedding_backward");
  if (positions.defined() && dwpe.defined()) {  // dwpe scattered by position, as a token table is by token
    if (dwte.defined()) TRELLIS_DISPATCH(rt, embedding_backward, rt, dwte, Tensor(), dout, tokens, vocab_begin, vocab_size);
    TRELLIS_DISPATCH(rt, embedding_backward, rt, dwpe, Tensor(), dout, positions, 0, dwpe.size(0));
    return;
  }
  TRELLIS_DISPATCH(rt, embedding_backward, rt, dwte, dwpe, dout, tokens, vocab_begin, vocab_size);
}

void dropout_forward(Runtime& rt, const Tensor& out, const Tensor& x, float p, const DropoutKey& key) {
  check_device(rt, out, "dropout_forward"); check_device(rt, x, "dropout_forward");
  check_same_numel(out, x, "dropout_forward");
  TRELLIS_CHECK(p >= 0.0f && p < 1.0f && out.dtype == x.dtype, "dropout_forward: p or dtype");
  TRELLIS_DISPATCH(rt, dropout_forward, rt, out, x, p, key);
}

void dropout_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, float p, const DropoutKey& key) {
  check_device(rt, dx, "dropout_backward"); check_device(rt, dout, "dropout_backward");
  check_same_numel(dx, dout, "dropout_backward");
  TRELLIS_CHECK(p >= 0.0f && p < 1.0f && dx.dtype == dout.dtype, "dropout_backward: p or dtype");
  TRELLIS_DISPATCH(rt, dropout_backward, rt, dx, dout, p, key);
}

namespace {
// N tokens, E experts, K choices and the capacity of routing tensors that moe_route wrote.
struct MoEShape {
  int64_t N, E, K, capacity;
};
MoEShape check_routing(Runtime& rt, const char* op, const Tensor& slot, const Tensor& slot_token, int64_t E) {
  check_device(rt, slot, op); check_device(rt, slot_token, op);
  check_dtype(slot, DType::i32, op); check_dtype(slot_token, DType::i32, op);
  TRELLIS_CHECK(slot.dim() == 2 && E > 0 && slot_token.numel() % E == 0,
                std::string(op) + ": slot " + slot.str() + ", slot_token " + slot_token.str() + " for " +
                    std::to_string(E) + " experts");
  return {slot.size(0), E, slot.size(1), slot_token.numel() / E};
}
// An (rows, C) activation of x's dtype.
void check_rows(Runtime& rt, const char* op, const Tensor& t, int64_t rows, int64_t C, DType dtype) {
  check_device(rt, t, op);
  TRELLIS_CHECK(t.dtype == dtype && t.numel() == rows * C && t.cols() == C,
                std::string(op) + ": " + t.str() + " is not (" + std::to_string(rows) + ", " + std::to_string(C) +
                    ") " + std::string(dtype_name(dtype)));
}
}  // namespace

void moe_route(Runtime& rt, const Tensor& probs, const Tensor& lse, const Tensor& expert, const Tensor& gate,
               const Tensor& slot, const Tensor& slot_token, const Tensor& counts, const Tensor& logits,
               bool renormalize, bool dropless) {
  const char* op = "moe_route";
  for (const Tensor* t : {&probs, &lse, &gate, &counts, &logits}) { check_device(rt, *t, op); check_dtype(*t, DType::f32, op); }
  check_device(rt, expert, op); check_dtype(expert, DType::i32, op);
  TRELLIS_CHECK(logits.dim() == 2, std::string(op) + ": logits " + logits.str() + " are not (N, E)");
  // Dropless: N * K packed rows (every choice has one), else E experts' capacity each.
  const MoEShape m = check_routing(rt, op, slot, slot_token, dropless ? 1 : logits.size(1));
  TRELLIS_CHECK(!dropless || slot_token.numel() == slot.numel(),
                std::string(op) + ": dropless slot_token " + slot_token.str() + " is not one row a choice of slot " + slot.str());
  TRELLIS_CHECK(m.N == logits.size(0) && m.K >= 1 && m.K <= logits.size(1) && m.capacity >= 1 &&
                    probs.numel() == m.N * logits.size(1) &&
                    expert.dim() == 2 && expert.size(0) == m.N && expert.size(1) == m.K && gate.numel() == m.N * m.K &&
                    counts.numel() == logits.size(1) && lse.numel() == m.N,
                std::string(op) + ": shapes do not match logits " + logits.str() + ", slot " + slot.str());
  TRELLIS_DISPATCH(rt, moe_route, rt, probs, lse, expert, gate, slot, slot_token, counts, logits, renormalize, dropless);
}

void moe_dispatch(Runtime& rt, const Tensor& xe, const Tensor& x, const Tensor& slot_token, int64_t top_k) {
  const char* op = "moe_dispatch";
  check_device(rt, slot_token, op); check_dtype(slot_token, DType::i32, op); check_float(x, op);
  const int64_t C = x.cols();
  check_rows(rt, op, xe, slot_token.numel(), C, x.dtype);
  check_device(rt, x, op);
  TRELLIS_CHECK(top_k >= 1, std::string(op) + ": top_k must be at least 1");
  TRELLIS_DISPATCH(rt, moe_dispatch, rt, xe, x, slot_token, top_k);
}

void moe_dispatch_backward(Runtime& rt, const Tensor& dx, const Tensor& dxe, const Tensor& slot, bool accumulate) {
  const char* op = "moe_dispatch_backward";
  check_device(rt, slot, op); check_dtype(slot, DType::i32, op); check_float(dx, op);
  TRELLIS_CHECK(slot.dim() == 2, std::string(op) + ": slot " + slot.str() + " is not (N, K)");
  check_rows(rt, op, dx, slot.size(0), dx.cols(), dx.dtype);
  check_rows(rt, op, dxe, dxe.rows(), dx.cols(), dx.dtype);
  TRELLIS_DISPATCH(rt, moe_dispatch_backward, rt, dx, dxe, slot, accumulate);
}

void moe_combine(Runtime& rt, const Tensor& out, const Tensor& ye, const Tensor& slot, const Tensor& gate,
                 const Tensor& residual) {
  const char* op = "moe_combine";
  check_device(rt, slot, op); check_dtype(slot, DType::i32, op); check_float(out, op);
  check_device(rt, gate, op); check_dtype(gate, DType::f32, op);
  TRELLIS_CHECK(slot.dim() == 2 && gate.numel() == slot.numel(), std::string(op) + ": slot " + slot.str() + ", gate " + gate.str());
  check_rows(rt, op, out, slot.size(0), out.cols(), out.dtype);
  check_rows(rt, op, ye, ye.rows(), out.cols(), out.dtype);
  if (residual.defined()) check_rows(rt, op, residual, slot.size(0), out.cols(), out.dtype);
  TRELLIS_DISPATCH(rt, moe_combine, rt, out, ye, slot, gate, residual);
}

void moe_combine_backward(Runtime& rt, const Tensor& dye, const Tensor& dgate, const Tensor& dout, const Tensor& ye,
                          const Tensor& slot, const Tensor& slot_token, const Tensor& gate) {
  const char* op = "moe_combine_backward";
  check_float(dout, op);
  TRELLIS_CHECK(ye.dim() == 2, std::string(op) + ": ye " + ye.str() + " is not (slots, C)");
  const int64_t C = dout.cols(), S = ye.size(0);
  TRELLIS_CHECK(S == slot_token.numel(), std::string(op) + ": ye " + ye.str() + " vs slot_token " + slot_token.str());
  const MoEShape m = check_routing(rt, op, slot, slot_token, 1);
  for (const Tensor* t : {&dgate, &gate}) {
    check_device(rt, *t, op); check_dtype(*t, DType::f32, op);
    TRELLIS_CHECK(t->numel() == m.N * m.K, std::string(op) + ": " + t->str() + " is not (N, K)");
  }
  check_rows(rt, op, dout, m.N, C, dout.dtype);
  check_rows(rt, op, ye, S, C, dout.dtype);
  check_rows(rt, op, dye, S, C, dout.dtype);
  TRELLIS_DISPATCH(rt, moe_combine_backward, rt, dye, dgate, dout, ye, slot, slot_token, gate);
}

void moe_router_backward(Runtime& rt, const Tensor& dlogits, const Tensor& dgate, const Tensor& probs,
                         const Tensor& lse, const Tensor& expert, const Tensor& gate, const Tensor& counts,
                         float aux_scale, float z_scale, bool renormalize) {
  const char* op = "moe_router_backward";
  for (const Tensor* t : {&dlogits, &dgate, &probs, &lse, &gate, &counts}) { check_device(rt, *t, op); check_dtype(*t, DType::f32, op); }
  check_device(rt, expert, op); check_dtype(expert, DType::i32, op);
  TRELLIS_CHECK(probs.dim() == 2 && expert.dim() == 2 && expert.size(0) == probs.size(0), std::string(op) + ": probs " + probs.str() + ", expert " + expert.str());
  const int64_t N = probs.size(0), E = probs.size(1), K = expert.size(1);
  TRELLIS_CHECK(dlogits.numel() == N * E && dgate.numel() == N * K && gate.numel() == N * K && counts.numel() == E &&
                    lse.numel() == N && K <= E,
                std::string(op) + ": shapes do not match probs " + probs.str() + ", expert " + expert.str());
  TRELLIS_DISPATCH(rt, moe_router_backward, rt, dlogits, dgate, probs, lse, expert, gate, counts, aux_scale, z_scale, renormalize);
}

void moe_statistics(Runtime& rt, const Tensor& stats, const Tensor& probs, const Tensor& lse, const Tensor& counts,
                    int64_t top_k, int64_t capacity) {
  const char* op = "moe_statistics";
  for (const Tensor* t : {&stats, &probs, &lse, &counts}) { check_device(rt, *t, op); check_dtype(*t, DType::f32, op); }
  TRELLIS_CHECK(stats.numel() == 3 && probs.dim() == 2 && lse.numel() == probs.size(0) && counts.numel() == probs.size(1) &&
                    top_k >= 1 && capacity >= 1,
                std::string(op) + ": stats " + stats.str() + ", probs " + probs.str() + ", lse " + lse.str() + ", counts " +
                    counts.str());
  TRELLIS_DISPATCH(rt, moe_statistics, rt, stats, probs, lse, counts, top_k, capacity);
}

void sigmoid_gate_rows(Runtime& rt, const Tensor& out, const Tensor& x, const Tensor& z) {
  const char* op = "sigmoid_gate_rows";
  check_device(rt, z, op); check_dtype(z, DType::f32, op); check_float(x, op);
  TRELLIS_CHECK(x.dim() >= 1 && z.numel() == x.rows(), std::string(op) + ": z " + z.str() + " is not one per row of x " + x.str());
  check_rows(rt, op, x, x.rows(), x.cols(), x.dtype);
  check_rows(rt, op, out, x.rows(), x.cols(), x.dtype);
  TRELLIS_CHECK(out.data == x.data || !overlap(out, x), std::string(op) + ": out overlaps x other than being it");
  TRELLIS_DISPATCH(rt, sigmoid_gate_rows, rt, out, x, z);
}

void sigmoid_gate_rows_backward(Runtime& rt, const Tensor& dx, const Tensor& dz, const Tensor& dout, const Tensor& x,
                                const Tensor& z) {
  const char* op = "sigmoid_gate_rows_backward";
  check_float(dout, op);
  for (const Tensor* t : {&dz, &z}) {
    check_device(rt, *t, op); check_dtype(*t, DType::f32, op);
    TRELLIS_CHECK(dout.dim() >= 1 && t->numel() == dout.rows(), std::string(op) + ": " + t->str() + " is not one per row of dout " + dout.str());
  }
  for (const Tensor* t : {&dout, &x, &dx}) check_rows(rt, op, *t, dout.rows(), dout.cols(), dout.dtype);
  TRELLIS_CHECK(!overlap(dx, x) && (dx.data == dout.data || !overlap(dx, dout)),
                std::string(op) + ": dx overlaps x, or dout other than being it");
  TRELLIS_DISPATCH(rt, sigmoid_gate_rows_backward, rt, dx, dz, dout, x, z);
}

void adamw_step(Runtime& rt, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params_out, const AdamWHyper& h, float grad_scale, const AdamWRuns* runs) {
  for (const Tensor* t : {&master, &m, &v, &grad, &params_out}) check_device(rt, *t, "adamw_step");
  for (const Tensor* t : {&m, &v, &grad}) {
    if (t != &grad) check_dtype(*t, DType::f32, "adamw_step");
    check_same_numel(*t, master, "adamw_step");
  }
  check_float(grad, "adamw_step");
  if (master.dtype != DType::f32)  // split masters: the low bits beside bf16 parameters
    TRELLIS_CHECK(master.dtype == DType::bf16 && params_out.defined() && params_out.dtype == DType::bf16,
                  "adamw_step: the master weights are f32, or the low halves of split masters beside bf16 parameters");
  if (params_out.defined()) check_same_numel(params_out, master, "adamw_step");
  if (runs) {
    TRELLIS_CHECK(!runs->ends.empty() && runs->ends.size() == runs->decays.size() &&
                      runs->ends.back() == master.numel(),
                  "adamw_step: runs must end at the tensors' length " + std::to_string(master.numel()));
    for (size_t i = 0; i < runs->ends.size(); ++i)
      TRELLIS_CHECK(runs->ends[i] > (i == 0 ? 0 : runs->ends[i - 1]), "adamw_step: runs must be non-empty and in order");
  }
  if (h.scalars.defined()) {
    check_device(rt, h.scalars, "adamw_step");
    check_dtype(h.scalars, DType::f32, "adamw_step");
    TRELLIS_CHECK(h.scalars.numel() == kStepScalarCount, "adamw_step: scalars must have kStepScalarCount elements");
  }
  TRELLIS_DISPATCH(rt, adamw_step, rt, master, m, v, grad, params_out, h, grad_scale, runs);
}

void adamw_step_scalars(Runtime& rt, const Tensor& scalars, const Tensor& loss_sum, const Tensor& norm_sq) {
  for (const Tensor* t : {&scalars, &loss_sum, &norm_sq}) {
    check_device(rt, *t, "adamw_step_scalars");
    check_dtype(*t, DType::f32, "adamw_step_scalars");
  }
  TRELLIS_CHECK(scalars.numel() == kStepScalarCount && loss_sum.numel() == 1 && norm_sq.numel() == 1,
                "adamw_step_scalars: scalars must have kStepScalarCount elements, loss_sum and norm_sq one");
  TRELLIS_DISPATCH(rt, adamw_step_scalars, rt, scalars, loss_sum, norm_sq);
}

void sum_accumulate(Runtime& rt, const Tensor& out, const Tensor& x) {
  check_device(rt, out, "sum_accumulate"); check_device(rt, x, "sum_accumulate");
  check_dtype(out, DType::f32, "sum_accumulate"); check_float(x, "sum_accumulate");
  TRELLIS_CHECK(out.numel() == 1, "sum_accumulate: out must be a scalar");
  TRELLIS_DISPATCH(rt, sum_accumulate, rt, out, x);
}

void sum_squares_accumulate(Runtime& rt, const Tensor& out, const Tensor& x) {
  check_device(rt, out, "sum_squares_accumulate"); check_device(rt, x, "sum_squares_accumulate");
  check_dtype(out, DType::f32, "sum_squares_accumulate"); check_float(x, "sum_squares_accumulate");
  TRELLIS_CHECK(out.numel() == 1, "sum_squares_accumulate: out must be a scalar");
  TRELLIS_DISPATCH(rt, sum_squares_accumulate, rt, out, x);
}

}  // namespace trellis
