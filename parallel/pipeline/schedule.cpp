// GPipe, 1F1B (PipeDream-flush) and Megatron's interleaved 1F1B as instruction lists.
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace trellis {

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    if (name == schedule_kind_name(k)) return k;
  std::ostringstream msg;
  msg << "parallel.schedule = \"" << name << "\" is not a schedule; expected gpipe, 1f1b or interleaved";
  throw UserError(msg.str());
}

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::recv_forward: return "recv_forward";
    case PipeOp::forward: return "forward";
    case PipeOp::send_forward: return "send_forward";
    case PipeOp::recv_backward: return "recv_backward";
    case PipeOp::backward: return "backward";
    case PipeOp::send_backward: return "send_backward";
    case PipeOp::reduce_grads: return "reduce_grads";
    case PipeOp::optimizer_step: return "optimizer_step";
  }
  return "?";
}

std::string to_string(const Instruction& in) {
  std::ostringstream s;
  s << pipe_op_name(in.op);
  if (in.micro_batch >= 0) s << "(mb " << in.micro_batch << ", chunk " << in.chunk << ")";
  return s.str();
}

namespace {

// The first violated rule, or "" when a schedule of this shape exists.
std::string shape_error(ScheduleKind kind, int p, int m, int v) {
  std::ostringstream e;
  const char* name = schedule_kind_name(kind);
  if (p < 1) {
    e << "parallel.pipeline = " << p << " must be at least 1";
  } else if (m < 1) {
    e << "the pipeline needs at least 1 micro-batch per step, got " << m
      << " (micro-batches = train.global_batch / (train.micro_batch x data-parallel size))";
  } else if (v < 1) {
    e << "parallel.virtual_stages = " << v << " must be at least 1";
  } else if (kind != ScheduleKind::interleaved && v != 1) {
    e << "parallel.virtual_stages = " << v << " needs parallel.schedule = interleaved (it is " << name << ")";
  } else if (kind == ScheduleKind::interleaved && p < 2) {
    e << "parallel.schedule = interleaved needs parallel.pipeline >= 2, got " << p;
  } else if (kind == ScheduleKind::interleaved && v < 2) {
    // With one chunk Megatron's warm-up holds up to 2p-1 micro-batches for 1F1B's bubble.
    e << "parallel.schedule = interleaved needs parallel.virtual_stages >= 2, got " << v
      << " (with 1 chunk per rank use parallel.schedule = 1f1b)";
  } else if (kind == ScheduleKind::interleaved && m % p != 0) {
    // Micro-batches go through the chunks in groups of p (Megatron's rule).
    e << "parallel.schedule = interleaved needs the micro-batches per step (" << m
      << " = train.global_batch / (train.micro_batch x data-parallel size)) to be a multiple of "
         "parallel.pipeline = "
      << p;
  }
  return e.str();
}

// Appends forward or backward passes of one rank, with the point-to-point transfers around them.
struct Emitter {
  int p, v, rank;
  std::vector<Instruction>& out;

  bool first(int chunk) const { return chunk * p + rank == 0; }              // reads the data
  bool last(int chunk) const { return chunk * p + rank == p * v - 1; }       // computes the loss
  void forward(int mb, int chunk) {
    if (!first(chunk)) out.push_back({PipeOp::recv_forward, mb, chunk});
    out.push_back({PipeOp::forward, mb, chunk});
    if (!last(chunk)) out.push_back({PipeOp::send_forward, mb, chunk});
  }
  void backward(int mb, int chunk) {
    if (!last(chunk)) out.push_back({PipeOp::recv_backward, mb, chunk});
    out.push_back({PipeOp::backward, mb, chunk});
    if (!first(chunk)) out.push_back({PipeOp::send_backward, mb, chunk});
  }
  void finish() {
    out.push_back({PipeOp::reduce_grads});
    out.push_back({PipeOp::optimizer_step});
  }
};

// GPipe: every forward, then every backward, both in micro-batch order (as torch.distributed.
// pipelining's ScheduleGPipe; reverse order would give the same makespan).
void gpipe(Emitter& e, int m) {
  for (int mb = 0; mb < m; ++mb) e.forward(mb, 0);
  for (int mb = 0; mb < m; ++mb) e.backward(mb, 0);
}

// 1F1B: stage r runs p-r-1 forwards ahead so that the last stage can start backward at once; then
// each forward is followed by the oldest pending backward, which caps the micro-batches held.
void one_f_one_b(Emitter& e, int p, int m) {
  const int warmup = std::min(p - e.rank - 1, m);
  for (int i = 0; i < warmup; ++i) e.forward(i, 0);
  for (int i = 0; i < m - warmup; ++i) {
    e.forward(warmup + i, 0);
    e.backward(i, 0);
  }
  for (int i = m - warmup; i < m; ++i) e.backward(i, 0);
}

// Interleaved 1F1B (Megatron-LM, forward_backward_pipelining_with_interleaving). The k-th
// forward of a rank runs chunk (k / p) % v on micro-batch (k / (p v)) p + k % p: micro-batches
// advance through the chunks in groups of p. Backwards visit the chunks in reverse order. The warm-up
// fills the whole virtual pipeline before the first backward returns: (v-1) p forwards for the
// earlier chunks plus 2 per later rank (the forward to the end and the gradient back).
void interleaved(Emitter& e, int p, int m, int v) {
  const int total = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  // Megatron also runs every forward first when m == p (all_warmup_microbatches); with
  // asynchronous sends that is not needed: same makespan, fewer activations held on later ranks.
  const int warmup = std::min((p - e.rank - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) e.forward(mb_of(k), chunk_of(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    e.forward(mb_of(warmup + k), chunk_of(warmup + k, true));
    e.backward(mb_of(k), chunk_of(k, false));
  }
  for (int k = total - warmup; k < total; ++k) e.backward(mb_of(k), chunk_of(k, false));
}

}  // namespace

void validate_schedule_shape(ScheduleKind kind, int p, int m, int v, int n_layers) {
  std::string err = shape_error(kind, p, m, v);
  if (err.empty() && n_layers < p * v) {
    std::ostringstream e;
    e << "model.n_layers = " << n_layers << " is less than parallel.pipeline (" << p
      << ") x parallel.virtual_stages (" << v << ") = " << p * v
      << ": every model chunk needs at least one layer";
    err = e.str();
  }
  if (!err.empty()) throw UserError(err);
}

std::vector<std::vector<Instruction>> build_schedule(ScheduleKind kind, int p, int m, int v) {
  if (std::string err = shape_error(kind, p, m, v); !err.empty()) throw UserError(err);
  std::vector<std::vector<Instruction>> out(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    Emitter e{p, v, r, out[size_t(r)]};
    switch (kind) {
      case ScheduleKind::gpipe: gpipe(e, m); break;
      case ScheduleKind::one_f_one_b: one_f_one_b(e, p, m); break;
      case ScheduleKind::interleaved: interleaved(e, p, m, v); break;
    }
    e.finish();
  }
  return out;
}

}  // namespace trellis
