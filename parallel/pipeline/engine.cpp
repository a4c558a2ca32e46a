// Executes a stage's instruction list: point-to-point transfers on the pipeline group, compute
// through StageModel, and the end-of-step gradient reduction.
#include "parallel/pipeline/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "parallel/data/gradient_sync.h"

namespace trellis {

PipelineEngine::PipelineEngine(Runtime& rt, Communicator& pipeline, int v, const Shape& shape, DType dtype)
    : rt_(rt), comm_(pipeline), p_(pipeline.size()), r_(pipeline.rank()), v_(v), shape_(shape), dtype_(dtype) {
  TRELLIS_CHECK(v >= 1, "PipelineEngine: v = " + std::to_string(v));
  next_ = (r_ + 1) % p_;
  prev_ = (r_ + p_ - 1) % p_;
}

PipelineEngine::~PipelineEngine() { release_all_sends(); }

int PipelineEngine::peak_in_flight(const std::vector<Instruction>& list) {
  int now = 0, peak = 0;
  for (const Instruction& in : list) {
    if (in.op == PipeOp::forward) peak = std::max(peak, ++now);
    if (in.op == PipeOp::backward) --now;
  }
  return peak;
}

PipelineEngine::GradBuffer* PipelineEngine::acquire_grad() {
  for (auto& g : grad_bufs_)
    if (!g->busy) {
      g->busy = true;
      return g.get();
    }
  // None free: the ones not in use wait for sends still in flight. Another buffer is cheaper than
  // waiting here (a send completes only when its receiver gets to it, and that may depend on us).
  auto g = std::make_unique<GradBuffer>();
  g->buf = Buffer(rt_.allocator(), size_t(shape_.numel()) * dtype_size(dtype_), "pipeline gradient");
  g->t = g->buf.tensor(dtype_, shape_);
  g->busy = true;
  grad_bufs_.push_back(std::move(g));
  return grad_bufs_.back().get();
}

void PipelineEngine::release_all_sends() {
  for (auto& g : grad_bufs_)
    if (g->send) {
      g->send->wait();
      g->send.reset();
      g->busy = false;
    }
}

void PipelineEngine::run_step(const std::vector<Instruction>& list, StageModel& model,
                              const PipelineReduction& reduction) {
  // The last backward of each chunk makes its gradients final for the step: the data-parallel
  // reduction of that chunk's buckets can start during it.
  std::vector<int> final_backward(size_t(v_), -1);
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].op == PipeOp::backward) final_backward[size_t(list[i].chunk)] = int(i);
  int first_final = int(list.size());
  for (int i : final_backward)
    if (i >= 0) first_final = std::min(first_final, i);

  auto is_recv = [](PipeOp op) { return op == PipeOp::recv_forward || op == PipeOp::recv_backward; };
  // Where a receive goes and from whom: a forward input into the model's saved state, a gradient
  // into a buffer of ours.
  auto recv_target = [&](const Instruction& r) -> std::pair<Tensor, int> {
    if (r.op == PipeOp::recv_forward) return {model.input(r.micro_batch, r.chunk), prev_};
    GradBuffer* g = acquire_grad();
    grads_[key(r.micro_batch, r.chunk)] = g;
    return {g->t, next_};
  };
  auto note_recv = [&](const Instruction& r, const Handle& h) {
    (r.op == PipeOp::recv_forward ? recv_fwd_ : recv_bwd_)[key(r.micro_batch, r.chunk)] = h;
  };

  for (size_t i = 0; i < list.size(); ++i) {
    const Instruction& in = list[i];
    const int k = in.micro_batch >= 0 ? key(in.micro_batch, in.chunk) : -1;
    switch (in.op) {
      case PipeOp::recv_forward:
      case PipeOp::recv_backward: {
        auto [t, peer] = recv_target(in);
        note_recv(in, std::make_shared<CommHandle>(comm_.recv_async(t, peer)));
        break;
      }
      case PipeOp::forward: {
        if (auto it = recv_fwd_.find(k); it != recv_fwd_.end()) {
          it->second->wait();
          recv_fwd_.erase(it);
        }
        Tensor out = model.forward(in.micro_batch, in.chunk, true);
        if (out.defined()) outputs_[k] = out;
        break;
      }
      case PipeOp::send_forward:
      case PipeOp::send_backward: {
        const bool fwd = in.op == PipeOp::send_forward;
        Tensor t;
        if (fwd) {
          auto it = outputs_.find(k);
          TRELLIS_CHECK(it != outputs_.end(), "send_forward before forward: " + to_string(in));
          t = it->second;
          outputs_.erase(it);
        } else {
          auto it = grads_.find(k);
          TRELLIS_CHECK(it != grads_.end(), "send_backward before backward: " + to_string(in));
          t = it->second->t;
        }
        const int peer = fwd ? next_ : prev_;
        Handle h;
        if (!t.device.is_cpu() && i + 1 < list.size() && is_recv(list[i + 1].op)) {  // see run_step's comment
          auto [rtarget, rpeer] = recv_target(list[i + 1]);
          h = std::make_shared<CommHandle>(comm_.send_recv_async(t, peer, rtarget, rpeer));
          note_recv(list[++i], h);
        } else {
          h = std::make_shared<CommHandle>(comm_.send_async(t, peer));
        }
        if (fwd) {
          send_fwd_[k] = h;  // waited by this (mb, chunk)'s backward
        } else {
          grads_.at(k)->send = h;  // waited by release_all_sends
          grads_.erase(k);
        }
        break;
      }
      case PipeOp::backward: {
        if (reduction.data && int(i) == first_final) reduction.data->begin();
        GradBuffer* g = nullptr;
        if (auto it = grads_.find(k); it != grads_.end()) {
          g = it->second;
          recv_bwd_.at(k)->wait();
          recv_bwd_.erase(k);
        } else {
          g = acquire_grad();  // the last virtual stage starts from the loss
          grads_[k] = g;
        }
        // The output activation lives in the saved state released by this backward. Its send has
        // been received already (the gradient we just got was computed from it), so this is quick.
        if (auto it = send_fwd_.find(k); it != send_fwd_.end()) {
          it->second->wait();
          send_fwd_.erase(it);
        }
        StageModel::GradsReady ready = nullptr;
        if (reduction.data && reduction.overlap && int(i) == final_backward[size_t(in.chunk)])
          ready = [&reduction](int64_t b, int64_t e) { reduction.data->ready(b, e); };
        model.backward(in.micro_batch, in.chunk, g->t, ready);
        if (first_virtual(in.chunk)) {  // nothing to send: the buffer is free again
          g->busy = false;
          grads_.erase(k);
        }
        break;
      }
      case PipeOp::reduce_grads: {
        NvtxRange r("pipeline_reduce_grads");
        release_all_sends();
        TRELLIS_CHECK(recv_fwd_.empty() && recv_bwd_.empty() && send_fwd_.empty() && outputs_.empty() && grads_.empty(),
                      "pipeline step ended with transfers or activations in flight");
        if (reduction.data) reduction.data->finish();
        // After the data-parallel sum: each stage's copy then holds its stage's full gradient.
        if (reduction.tied)
          for (const Tensor& t : reduction.tied_grads) reduction.tied->all_reduce(t);
        break;
      }
      case PipeOp::optimizer_step:
        return;  // the caller steps the optimizer (it needs the global gradient norm first)
    }
  }
}

void PipelineEngine::run_forward(int m, StageModel& model) {
  // Micro-batch by micro-batch, chunk by chunk, with blocking transfers: every wait depends only
  // on (micro-batch, virtual stage) pairs that come earlier, so this cannot deadlock.
  for (int mb = 0; mb < m; ++mb)
    for (int c = 0; c < v_; ++c) {
      if (!first_virtual(c)) comm_.recv(model.input(mb, c), prev_);
      Tensor out = model.forward(mb, c, false);
      if (!last_virtual(c)) comm_.send(out, next_);
      model.discard(mb, c);
    }
}

}  // namespace trellis
