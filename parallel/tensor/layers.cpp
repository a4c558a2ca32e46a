// Column- and row-parallel linear layers: GEMMs from core/ops, collectives from the mappings.
#include "parallel/tensor/layers.h"

#include <algorithm>
#include <string>

#include "core/ops.h"
#include "parallel/tensor/mappings.h"

namespace trellis {

namespace {

Tensor rows2d(const Tensor& t) { return t.view({t.rows(), t.cols()}); }

// Fatal unless `p` is this rank's part of a split along `dim` over the group (dim < 0: replicated).
void check_split(const Communicator& tensor, const Parameter& p, int dim, const char* layer) {
  const TensorSplit& s = p.spec.split;
  const bool ok = dim < 0 || tensor.size() == 1
                      ? s.replicated()
                      : s.dim == dim && s.parts == tensor.size() && s.index == tensor.rank();
  TRELLIS_CHECK(ok, std::string(layer) + ": " + p.spec.name + " is split as part " + std::to_string(s.index) +
                        " of " + std::to_string(s.parts) + " along dim " + std::to_string(s.dim) +
                        ", the tensor group has " + std::to_string(tensor.size()) + " ranks");
}

// An (N, cols) tensor from `work` for the gathered rows of a token shard.
Tensor full_rows(Arena& work, const Tensor& shard, int parts) {
  return work.take(shard.dtype, {shard.rows() * parts, shard.cols()});
}

}  // namespace

void weight_grad(Runtime& rt, const Parameter& w, const Tensor& dy, const Tensor& x) {
  MatmulOptions acc;
  acc.trans_a = true;
  acc.accumulate = grad_accumulates(w);
  matmul(rt, w.grad, rows2d(dy), rows2d(x), acc);
}

void weight_and_bias_grad(Runtime& rt, const Parameter& w, const Parameter* b, const Tensor& dy, const Tensor& x) {
  weight_grad(rt, w, dy, x);
  if (b) bias_backward(rt, b->grad, rows2d(dy), grad_accumulates(*b));
}

ColumnParallelLinear::ColumnParallelLinear(Communicator& tensor, const Parameter& w, const Parameter* b,
                                           bool sequence_parallel)
    : tensor_(&tensor), w_(&w), b_(b), sp_(sequence_parallel) {
  check_split(tensor, w, 0, "ColumnParallelLinear");
  if (!b) return;
  check_split(tensor, *b, 0, "ColumnParallelLinear");
  TRELLIS_CHECK(w.spec.split.groups == b->spec.split.groups && w.spec.split.first_units == b->spec.split.first_units,
                w.spec.name + " and its bias are grouped differently");
}

void ColumnParallelLinear::forward(Runtime& rt, const Tensor& y, const Tensor& x, Arena& work,
                                   const Tensor* gelu_input) const {
  Tensor in = copy_to_tensor_region_forward(x);
  if (sp_) {
    in = full_rows(work, x, tensor_->size());
    gather_from_token_shards_forward(*tensor_, in, x).wait();
  }
  MatmulOptions o;
  o.trans_b = true;
  o.bias = b_ ? &b_->value : nullptr;
  o.gelu_input = gelu_input;
  matmul(rt, rows2d(y), rows2d(in), w_->value, o);
}

void ColumnParallelLinear::backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, Arena& work,
                                    const std::function<void()>& beside) const {
  // Order for overlap: [gather x] | dx GEMM, then [reduce dx] | weight-gradient GEMMs.
  Tensor in = x, din = dx;
  CommHandle gathered;
  if (sp_) {
    in = full_rows(work, x, tensor_->size());
    din = full_rows(work, dx, tensor_->size());
    gathered = gather_from_token_shards_forward(*tensor_, in, x);
  }
  matmul(rt, rows2d(din), rows2d(dy), w_->value);
  gathered.wait();
  CommHandle reduced = sp_ ? gather_from_token_shards_backward(*tensor_, dx, din)
                           : copy_to_tensor_region_backward(*tensor_, dx);
  if (beside) beside();
  weight_and_bias_grad(rt, *w_, b_, dy, in);
  reduced.wait();
}

RowParallelLinear::RowParallelLinear(Communicator& tensor, const Parameter& w, const Parameter* b,
                                     bool sequence_parallel, int comm_chunks)
    : tensor_(&tensor), w_(&w), b_(b), sp_(sequence_parallel), comm_chunks_(comm_chunks) {
  check_split(tensor, w, 1, "RowParallelLinear");
  if (b) check_split(tensor, *b, -1, "RowParallelLinear");
  TRELLIS_CHECK(comm_chunks >= 1, "RowParallelLinear: comm_chunks must be at least 1");
}

CommHandle RowParallelLinear::forward(Runtime& rt, const Tensor& y, const Tensor& x, Arena& work,
                                      const Tensor* residual) const {
  TRELLIS_CHECK(!(residual && sp_), "RowParallelLinear: a residual needs the full rows (no sequence parallelism)");
  TRELLIS_CHECK(!residual || residual->numel() == y.numel(),
                "RowParallelLinear: residual " + (residual ? residual->str() : std::string()) + " is not y's size " + y.str());
  const Tensor partial = sp_ ? full_rows(work, y, tensor_->size()) : y;
  MatmulOptions o;
  o.trans_b = true;
  // The bias (and the residual) must enter the sum once: rank 0 adds them in its GEMM epilogue (free),
  // the others not.
  const bool first = tensor_->rank() == 0;
  if (first && b_) o.bias = &b_->value;
  const Tensor y2 = rows2d(partial), x2 = rows2d(x), res2 = residual && first ? rows2d(*residual) : Tensor();
  if (sp_) {
    matmul(rt, y2, x2, w_->value, o);
    return reduce_scatter_to_token_shards_forward(*tensor_, y, partial);
  }
  // Every rank cuts the same row blocks (one with comm_chunks = 1), so the all-reduces pair up in
  // the same order.
  const int64_t N = y2.rows(), chunks = std::min<int64_t>(comm_chunks_, std::max<int64_t>(N, 1));
  CommHandle reduced;  // every block's all-reduce, completed by one wait
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t r0 = N * i / chunks, r1 = N * (i + 1) / chunks;
    const Tensor yi = y2.slice(r0 * y2.cols(), {r1 - r0, y2.cols()});
    const Tensor ri = res2.defined() ? res2.slice(r0 * y2.cols(), {r1 - r0, y2.cols()}) : Tensor();
    o.residual = ri.defined() ? &ri : nullptr;
    matmul(rt, yi, x2.slice(r0 * x2.cols(), {r1 - r0, x2.cols()}), w_->value, o);
    reduced.absorb(reduce_from_tensor_region_forward(*tensor_, yi));
  }
  return reduced;
}

void RowParallelLinear::backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, Arena& work,
                                 const Tensor* gelu_grad_of) const {
  Tensor dfull = reduce_from_tensor_region_backward(dy);
  if (sp_) {
    dfull = full_rows(work, dy, tensor_->size());
    reduce_scatter_to_token_shards_backward(*tensor_, dfull, dy).wait();
  }
  MatmulOptions o;
  o.gelu_grad_of = gelu_grad_of;
  matmul(rt, rows2d(dx), rows2d(dfull), w_->value, o);
  weight_and_bias_grad(rt, *w_, b_, dfull, x);
}

void RowParallelLinear::backward_input(Runtime& rt, const Tensor& dx, const Tensor& dy,
                                       const Tensor* gelu_grad_of) const {
  TRELLIS_CHECK(!sp_, "RowParallelLinear::backward_input: only without sequence parallelism");
  MatmulOptions o;
  o.gelu_grad_of = gelu_grad_of;
  matmul(rt, rows2d(dx), rows2d(dy), w_->value, o);
}

void RowParallelLinear::weight_grads(Runtime& rt, const Tensor& dy, const Tensor& x, bool bias_elsewhere) const {
  TRELLIS_CHECK(!sp_, "RowParallelLinear::weight_grads: only without sequence parallelism");
  if (bias_elsewhere) weight_grad(rt, *w_, dy, x);
  else weight_and_bias_grad(rt, *w_, b_, dy, x);
}

}  // namespace trellis
