// Executes a stage's instruction list: point-to-point transfers on the pipeline group, compute
// through StageModel, and the end-of-step gradient reduction.
#include "parallel/pipeline/engine.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "core/ops.h"
#include "parallel/data/gradient_sync.h"

namespace trellis {

PipelineEngine::PipelineEngine(Runtime& rt, Communicator& pipeline, int v, const Shape& shape, DType dtype)
    : rt_(rt), comm_(pipeline), p_(pipeline.size()), r_(pipeline.rank()), v_(v), shape_(shape), dtype_(dtype) {
  TRELLIS_CHECK(v >= 1, "PipelineEngine: v = " + std::to_string(v));
  next_ = (r_ + 1) % p_;
  prev_ = (r_ + p_ - 1) % p_;
}

PipelineEngine::~PipelineEngine() { release_all_sends(); }

namespace {

bool is_comm(PipeOp op) {
  return op == PipeOp::recv_forward || op == PipeOp::send_forward || op == PipeOp::recv_backward ||
         op == PipeOp::send_backward;
}

}  // namespace

StepPlan PipelineEngine::plan_for(const std::vector<Instruction>& list, int p, int r, int v) {
  int forwards = 0;
  for (const Instruction& in : list) forwards += in.op == PipeOp::forward;
  const int m = v > 0 ? forwards / v : 0;
  for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::gpipe}) {
    try {
      auto all = build_schedule(kind, p, m, v);
      if (all[size_t(r)] == list) return plan_communication(all, m, v)[size_t(r)];
    } catch (const UserError&) {
      // not a shape of this kind
    }
  }
  // A list of no built-in schedule: one batch per run of consecutive transfers, in list order
  // (not checked against deadlock on the GPU).
  StepPlan plan;
  for (const Instruction& in : list) {
    if (is_comm(in.op) && !plan.empty() && is_comm(plan.back()[0].op))
      plan.back().push_back(in);
    else
      plan.push_back({in});
  }
  return plan;
}

int PipelineEngine::peak_in_flight(const std::vector<Instruction>& list) {
  int now = 0, peak = 0;
  for (const Instruction& in : list) {
    if (in.op == PipeOp::forward) peak = std::max(peak, ++now);
    if (in.op == PipeOp::backward) --now;
  }
  return peak;
}

PipelineEngine::GradBuffer* PipelineEngine::acquire_grad() {
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& g : grad_bufs_)
      if (!g->busy) {
        g->busy = true;
        return g.get();
      }
    if (pass == 0) reclaim_sent();
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

void PipelineEngine::reclaim_sent() {
  // test() never blocks: MPI_Testall on the host, cudaEventQuery of the batch's event on the GPU (an
  // event that has passed needs no stream wait before any stream reuses the buffer). A handle shared
  // by several buffers of one batch is complete for all of them once one test succeeds.
  for (auto& g : grad_bufs_)
    if (g->send && g->send->test()) {
      g->send.reset();
      g->busy = false;
    }
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
  if (list != planned_list_) {
    plan_ = plan_for(list, p_, r_, v_);
    planned_list_ = list;
  }
  const StepPlan& plan = plan_;
  // The last backward of each chunk makes its gradients final for the step: the data-parallel
  // reduction of that chunk's buckets can start during it.
  std::vector<int> final_backward(size_t(v_), -1);
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i][0].op == PipeOp::backward) final_backward[size_t(plan[i][0].chunk)] = int(i);
  int first_final = int(plan.size()), first_backward = int(plan.size());
  for (int i : final_backward)
    if (i >= 0) first_final = std::min(first_final, i);
  for (size_t i = 0; i < plan.size() && first_backward == int(plan.size()); ++i)
    if (plan[i][0].op == PipeOp::backward) first_backward = int(i);
  // ZeRO stages 2-3 reduce after every micro-batch's backward, the others once per step.
  const bool every = reduction.data && reduction.data->every_micro_batch();
  const int begin_at = every ? first_backward : first_final;

  std::vector<P2POp> batch;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Instruction& in = plan[i][0];
    const int k = in.micro_batch >= 0 ? key(in.micro_batch, in.chunk) : -1;
    if (is_comm(in.op)) {
      // One batch: every transfer in it posted as one operation (one NCCL group on the GPU).
      reclaim_sent();  // sends completed since the last batch free their buffers for this one
      batch.clear();
      for (const Instruction& c : plan[i]) {
        const int ck = key(c.micro_batch, c.chunk);
        switch (c.op) {
          case PipeOp::recv_forward: {
            // Into a buffer of ours, copied into the model's saved state at the forward: the plan
            // may post this receive before an earlier backward has freed a saved state.
            GradBuffer* g = acquire_grad();
            inputs_[ck] = g;
            batch.push_back({P2POp::recv, g->t, prev_});
            break;
          }
          case PipeOp::recv_backward: {
            GradBuffer* g = acquire_grad();
            grads_[ck] = g;
            batch.push_back({P2POp::recv, g->t, next_});
            break;
          }
          case PipeOp::send_forward: {
            auto it = outputs_.find(ck);
            TRELLIS_CHECK(it != outputs_.end(), "send_forward before forward: " + to_string(c));
            batch.push_back({P2POp::send, it->second, next_});
            outputs_.erase(it);
            break;
          }
          default: {  // send_backward
            auto it = grads_.find(ck);
            TRELLIS_CHECK(it != grads_.end(), "send_backward before backward: " + to_string(c));
            batch.push_back({P2POp::send, it->second->t, prev_});
            break;
          }
        }
      }
      Handle h = std::make_shared<CommHandle>(comm_.batch_p2p_async(batch));
      for (const Instruction& c : plan[i]) {
        const int ck = key(c.micro_batch, c.chunk);
        if (c.op == PipeOp::recv_forward) recv_fwd_[ck] = h;
        if (c.op == PipeOp::recv_backward) recv_bwd_[ck] = h;
        if (c.op == PipeOp::send_forward) send_fwd_[ck] = h;  // waited by this (mb, chunk)'s backward
        if (c.op == PipeOp::send_backward) {
          grads_.at(ck)->send = h;  // freed by reclaim_sent once complete, at the latest by release_all_sends
          grads_.erase(ck);
        }
      }
      continue;
    }
    switch (in.op) {
      case PipeOp::forward: {
        if (auto it = recv_fwd_.find(k); it != recv_fwd_.end()) {
          it->second->wait();
          recv_fwd_.erase(it);
          GradBuffer* g = inputs_.at(k);
          copy(rt_, model.input(in.micro_batch, in.chunk), g->t);
          g->busy = false;  // a later receive into it is ordered after this copy (comm stream waits)
          inputs_.erase(k);
        }
        Tensor out = model.forward(in.micro_batch, in.chunk, true);
        if (out.defined()) outputs_[k] = out;
        break;
      }
      case PipeOp::backward: {
        if (reduction.data && int(i) == begin_at) reduction.data->begin();
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
        const bool final = int(i) == final_backward[size_t(in.chunk)];
        if (reduction.data && (every || (reduction.overlap && final)))
          ready = [&reduction, final](int64_t b, int64_t e) { reduction.data->ready(b, e, final); };
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
        // Every receive was waited by its compute; handles of sends only (send_fwd_ of the last
        // backward's pairs) are gone too.
        TRELLIS_CHECK(recv_fwd_.empty() && recv_bwd_.empty() && send_fwd_.empty() && outputs_.empty() && grads_.empty() &&
                          inputs_.empty(),
                      "pipeline step ended with transfers or activations in flight");
        if (reduction.data) reduction.data->finish();
        // After the data-parallel sum: each stage's copy then holds its stage's full gradient.
        if (reduction.tied)
          for (const Tensor& t : reduction.tied_grads) reduction.tied->all_reduce(t);
        break;
      }
      case PipeOp::optimizer_step:
        return;  // the caller steps the optimizer (it needs the global gradient norm first)
      default:
        TRELLIS_FATAL("pipeline plan: unexpected " + to_string(in));
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
