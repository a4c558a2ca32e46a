// Megatron's tensor-parallel linear layers, y = x W^T + b with W stored (out, in), split over the
// tensor group. Explicit forward and backward, no autograd: the caller owns the activations and
// passes an Arena for the work tensors (gathered inputs, partial sums), so nothing allocates.
// Activations are (rows, features) with any leading shape; N = rows of the full activation.
//
// A column-parallel layer followed by a row-parallel one (MLP: fc then proj; attention: qkv then
// proj) needs one collective each way: the input is replicated (or gathered from token shards)
// going in, the output partial sums are all-reduced (or reduce-scattered) coming out.
#pragma once
#include <functional>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/parameters.h"
#include "core/runtime.h"

namespace trellis {

// The parameter gradients of y = x W^T + b (x: (N, in), dy: (N, out)): w.grad += dy^T x (f32) and
// b.grad += column sums of dy, each written instead where it is fresh (grad_accumulates: its first
// write in the step); b null: a layer without a bias. The tensor-parallel layers' and the plain linear's (t = 1).
void weight_and_bias_grad(Runtime& rt, const Parameter& w, const Parameter* b, const Tensor& dy, const Tensor& x);
// The weight's part alone, for a bias whose gradient is summed elsewhere.
void weight_grad(Runtime& rt, const Parameter& w, const Tensor& dy, const Tensor& x);

// W split by rows (output features): w (out/t, in) and b (out/t; null: no bias), both TensorSplit dim 0 with the
// same groups (3 for the fused qkv, giving each rank [q | k | v] of its own heads). The output is
// this rank's columns of the full output, in the same order.
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(Communicator& tensor, const Parameter& w, const Parameter* b, bool sequence_parallel);

  // x: the full (N, in) input, or this rank's (N/t, in) token shard with sequence parallelism
  // (gathered into an (N, in) tensor from `work`). y: (N, out/t). With gelu_input (y's size and
  // dtype): y = gelu(x W^T + b) and *gelu_input = x W^T + b, GELU fused into the GEMM (the output is
  // local, so it fuses as in the plain layer).
  void forward(Runtime& rt, const Tensor& y, const Tensor& x, Arena& work, const Tensor* gelu_input = nullptr) const;
  // dx (x's shape, written): the input gradient summed over the group, or with sequence
  // parallelism reduce-scattered into this rank's token shard; that collective overlaps the
  // weight-gradient GEMM. w.grad += dy^T x, b.grad += column sums of dy. x is the forward's input;
  // with sequence parallelism it is gathered again (as Megatron does: only the shard is kept),
  // overlapping the dx GEMM. `beside` (optional) is more work to run beside that collective, before
  // this layer's weight gradients (another layer's deferred weight gradients).
  void backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, Arena& work,
                const std::function<void()>& beside = {}) const;

 private:
  Communicator* tensor_;
  const Parameter* w_;
  const Parameter* b_;
  bool sp_;
};

// W split by columns (input features): w (out, in/t), TensorSplit dim 1; b (out) replicated, or null. The
// input is this rank's columns of the full input (a column-parallel layer's output).
class RowParallelLinear {
 public:
  // comm_chunks > 1 (without sequence parallelism): forward computes and all-reduces y in that many
  // blocks of rows, each block's all-reduce in flight while the next block's GEMM runs, so only the
  // last block's is exposed.
  RowParallelLinear(Communicator& tensor, const Parameter& w, const Parameter* b, bool sequence_parallel,
                    int comm_chunks = 1);

  // x: (N, in/t). y: the full (N, out), summed over the group, or with sequence parallelism this
  // rank's (N/t, out) token shard of the sum (reduce-scattered from an (N, out) tensor from `work`).
  // The returned handle completes y (every row block's collective): wait on it before reading y.
  // With residual (y's shape, not with sequence parallelism): y = residual + the sum, the residual
  // entering once, through rank 0's GEMM epilogue.
  CommHandle forward(Runtime& rt, const Tensor& y, const Tensor& x, Arena& work,
                     const Tensor* residual = nullptr) const;
  // dy: (N, out), or this rank's (N/t, out) token shard with sequence parallelism (gathered into
  // an (N, out) tensor from `work`). dx (N, in/t, written); w.grad += dy^T x; b.grad += column
  // sums of the full dy, the same on every rank, so the replicated bias needs no reduction over
  // the group even with sequence parallelism. With gelu_grad_of = &h where x = gelu(h) (dx's size):
  // dx = (dy W) * gelu'(h), GELU's backward fused into the dx GEMM (its output is local).
  void backward(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor& x, Arena& work,
                const Tensor* gelu_grad_of = nullptr) const;
  // backward in two parts, without sequence parallelism: the dx GEMM, and the parameter gradients,
  // which the caller may defer to run beside the next column-parallel layer's all-reduce. With
  // bias_elsewhere the bias gradient is left to the caller (a layer norm's backward sums it).
  void backward_input(Runtime& rt, const Tensor& dx, const Tensor& dy, const Tensor* gelu_grad_of = nullptr) const;
  void weight_grads(Runtime& rt, const Tensor& dy, const Tensor& x, bool bias_elsewhere = false) const;

 private:
  Communicator* tensor_;
  const Parameter* w_;
  const Parameter* b_;
  bool sp_;
  int comm_chunks_;
};

}  // namespace trellis
