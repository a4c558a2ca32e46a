// The schedule simulator: a dataflow execution of all stages' lists on per-stage clocks.
#include "parallel/pipeline/schedule_sim.h"

#include "core/error.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

namespace trellis {

std::string SimResult::report() const {
  std::string out;
  for (const auto& e : errors) out += e + "\n";
  for (const auto& s : stuck) out += "deadlock: " + s + "\n";
  return out;
}

namespace {

constexpr size_t kMaxErrors = 50;  // a broken schedule breaks many rules; the first ones say why

struct StageState {
  size_t pc = 0;        // next instruction
  int64_t clock = 0;    // time at which the stage is free
  int in_flight = 0;    // (mb, chunk) pairs forwarded, not yet backwarded
  bool reduced = false, stepped = false;
};

class Sim {
 public:
  Sim(const std::vector<std::vector<Instruction>>& sched, int m, int v, const SimCosts& costs)
      : sched_(sched), p_(int(sched.size())), m_(m), v_(v), S_(p_ * v), costs_(costs),
        n_(size_t(S_) * size_t(m)), fwd_end_(n_, -1), bwd_end_(n_, -1), fwd_runs_(n_, 0),
        bwd_runs_(n_, 0), sent_act_(n_, -1), sent_grad_(n_, -1), got_act_(n_, 0), got_grad_(n_, 0),
        st_(size_t(p_)) {
    res_.busy.assign(size_t(p_), 0);
    res_.peak_activations.assign(size_t(p_), 0);
    for (const auto& list : sched_) res_.event_time.emplace_back(list.size(), -1);
  }

  SimResult run() {
    // Sweep the stages until nobody can move. Per-stage clocks make the result independent of
    // the sweep order: a stage's times depend only on its own list and its senders' times.
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p_; ++r)
        while (st_[size_t(r)].pc < sched_[size_t(r)].size() && step(r)) progress = true;
    }
    for (int r = 0; r < p_; ++r) {
      const StageState& g = st_[size_t(r)];
      if (g.pc < sched_[size_t(r)].size()) {
        res_.deadlock = true;
        res_.stuck.push_back(where(r, g.pc) + ": " + waiting_for(r, sched_[size_t(r)][g.pc]));
      }
      res_.makespan = std::max(res_.makespan, g.clock);
    }
    if (!res_.deadlock) final_checks();
    check_channel_order();
    for (int64_t b : res_.busy) res_.idle.push_back(res_.makespan - b);
    return std::move(res_);
  }

 private:
  size_t at(int s, int mb) const { return size_t(s) * size_t(m_) + size_t(mb); }
  std::string where(int r, size_t pc) const {
    return "stage " + std::to_string(r) + " #" + std::to_string(pc) + " " + to_string(sched_[size_t(r)][pc]);
  }
  void error(const std::string& what) {
    if (res_.errors.size() < kMaxErrors) res_.errors.push_back(what);
  }
  static bool per_micro_batch(PipeOp op) { return op != PipeOp::reduce_grads && op != PipeOp::optimizer_step; }
  std::string waiting_for(int r, const Instruction& in) const {
    const int s = in.chunk * p_ + r;
    if (in.op == PipeOp::recv_forward)
      return "no send_forward from virtual stage " + std::to_string(s - 1) + " (stage " + std::to_string((s - 1) % p_) + ")";
    return "no send_backward from virtual stage " + std::to_string(s + 1) + " (stage " + std::to_string((s + 1) % p_) + ")";
  }
  // A time `end` of a step this one depends on: it must have happened, no later than `start`.
  bool before(int64_t end, int64_t start) const { return end >= 0 && end <= start; }

  // Executes stage r's next instruction; false (and nothing changes) when it waits on a receive.
  bool step(int r) {
    StageState& g = st_[size_t(r)];
    const Instruction& in = sched_[size_t(r)][g.pc];
    // The message names the instruction; built only when a rule is broken.
    auto fail = [&](const char* what) { error(where(r, g.pc) + ": " + what); };
    const int mb = in.micro_batch, s = in.chunk * p_ + r;
    if (per_micro_batch(in.op) && (mb < 0 || mb >= m_ || in.chunk < 0 || in.chunk >= v_)) {
      fail("micro-batch or chunk out of range");
      ++g.pc;
      return true;
    }
    switch (in.op) {
      case PipeOp::recv_forward:
        if (s == 0) {
          fail("the first virtual stage reads data and receives no activation");
          break;
        }
        if (sent_act_[at(s, mb)] < 0) return false;
        if (got_act_[at(s, mb)]++) fail("activation received twice");
        g.clock = std::max(g.clock, sent_act_[at(s, mb)]);
        break;
      case PipeOp::recv_backward:
        if (s == S_ - 1) {
          fail("the last virtual stage computes the loss and receives no gradient");
          break;
        }
        if (sent_grad_[at(s, mb)] < 0) return false;
        if (got_grad_[at(s, mb)]++) fail("gradient received twice");
        g.clock = std::max(g.clock, sent_grad_[at(s, mb)]);
        break;
      case PipeOp::forward:
        if (s > 0 && !got_act_[at(s, mb)]) fail("its input activation was not received");
        if (s > 0 && !before(fwd_end_[at(s - 1, mb)], g.clock))
          fail("starts before the forward of the previous virtual stage ended");
        if (fwd_runs_[at(s, mb)]++) fail("forward runs twice");
        g.clock += costs_.forward_of(s);
        res_.busy[size_t(r)] += costs_.forward_of(s);
        fwd_end_[at(s, mb)] = g.clock;
        res_.peak_activations[size_t(r)] = std::max(res_.peak_activations[size_t(r)], ++g.in_flight);
        break;
      case PipeOp::backward:
        if (!before(fwd_end_[at(s, mb)], g.clock)) fail("runs before its own forward");
        if (s < S_ - 1 && !got_grad_[at(s, mb)]) fail("its output gradient was not received");
        if (s < S_ - 1 && !before(bwd_end_[at(s + 1, mb)], g.clock))
          fail("starts before the backward of the next virtual stage ended");
        if (bwd_runs_[at(s, mb)]++) fail("backward runs twice");
        g.clock += costs_.backward_of(s);
        res_.busy[size_t(r)] += costs_.backward_of(s);
        bwd_end_[at(s, mb)] = g.clock;
        --g.in_flight;
        break;
      case PipeOp::send_forward:
        if (s == S_ - 1) {
          fail("the last virtual stage computes the loss and sends no activation");
          break;
        }
        if (fwd_end_[at(s, mb)] < 0) fail("sends before its forward ran");
        if (sent_act_[at(s + 1, mb)] >= 0) fail("activation sent twice");
        else sent_act_[at(s + 1, mb)] = g.clock;
        break;
      case PipeOp::send_backward:
        if (s == 0) {
          fail("the first virtual stage has no previous stage to send a gradient to");
          break;
        }
        if (bwd_end_[at(s, mb)] < 0) fail("sends before its backward ran");
        if (sent_grad_[at(s - 1, mb)] >= 0) fail("gradient sent twice");
        else sent_grad_[at(s - 1, mb)] = g.clock;
        break;
      case PipeOp::reduce_grads:
        if (const std::string missing = first_missing_backward(r); !missing.empty())
          error(where(r, g.pc) + ": runs before " + missing);
        if (g.reduced) fail("runs twice");
        g.reduced = true;
        break;
      case PipeOp::optimizer_step:
        if (!g.reduced) fail("runs before reduce_grads");
        if (g.stepped) fail("runs twice");
        if (g.pc + 1 != sched_[size_t(r)].size()) fail("is not the last instruction");
        g.stepped = true;
        break;
    }
    int64_t ev = g.clock;
    if (in.op == PipeOp::recv_forward) ev = sent_act_[at(s, mb)];
    if (in.op == PipeOp::recv_backward) ev = sent_grad_[at(s, mb)];
    res_.event_time[size_t(r)][g.pc] = ev;
    ++g.pc;
    return true;
  }

  // The first backward of stage r not run yet, as text; "" when all have run.
  std::string first_missing_backward(int r) const {
    for (int c = 0; c < v_; ++c)
      for (int mb = 0; mb < m_; ++mb)
        if (bwd_runs_[at(c * p_ + r, mb)] == 0) return to_string(Instruction{PipeOp::backward, mb, c});
    return "";
  }

  // Exactly once, every message consumed, every stage reduced and stepped.
  void final_checks() {
    for (int s = 0; s < S_; ++s)
      for (int mb = 0; mb < m_; ++mb) {
        const std::string what = "(mb " + std::to_string(mb) + ", chunk " + std::to_string(s / p_) + ") on stage " +
                                 std::to_string(s % p_);
        if (fwd_runs_[at(s, mb)] != 1)
          error("forward" + what + " ran " + std::to_string(fwd_runs_[at(s, mb)]) + " times, not once");
        if (bwd_runs_[at(s, mb)] != 1)
          error("backward" + what + " ran " + std::to_string(bwd_runs_[at(s, mb)]) + " times, not once");
        if (sent_act_[at(s, mb)] >= 0 && !got_act_[at(s, mb)]) error("activation for forward" + what + " never received");
        if (sent_grad_[at(s, mb)] >= 0 && !got_grad_[at(s, mb)]) error("gradient for backward" + what + " never received");
      }
    for (int r = 0; r < p_; ++r) {
      if (!st_[size_t(r)].reduced) error("stage " + std::to_string(r) + " never runs reduce_grads");
      if (!st_[size_t(r)].stepped) error("stage " + std::to_string(r) + " never runs optimizer_step");
    }
  }

  // Point-to-point messages between two ranks are matched in issue order (NCCL has no tags), so
  // on every (sender, receiver) pair the receives must list the messages in the order sent.
  void check_channel_order() {
    using Msg = std::tuple<int, int, int>;  // (0 activation / 1 gradient, receiving virtual stage, mb)
    std::map<std::pair<int, int>, std::pair<std::vector<Msg>, std::vector<Msg>>> channels;  // sends, recvs
    for (int r = 0; r < p_; ++r)
      for (const Instruction& in : sched_[size_t(r)]) {
        const int s = in.chunk * p_ + r, mb = in.micro_batch;
        if (!per_micro_batch(in.op) || mb < 0 || mb >= m_ || in.chunk < 0 || in.chunk >= v_) continue;
        if (in.op == PipeOp::send_forward && s + 1 < S_) channels[{r, (s + 1) % p_}].first.push_back({0, s + 1, mb});
        if (in.op == PipeOp::send_backward && s > 0) channels[{r, (s - 1) % p_}].first.push_back({1, s - 1, mb});
        if (in.op == PipeOp::recv_forward && s > 0) channels[{(s - 1) % p_, r}].second.push_back({0, s, mb});
        if (in.op == PipeOp::recv_backward && s + 1 < S_) channels[{(s + 1) % p_, r}].second.push_back({1, s, mb});
      }
    for (const auto& [pair, lists] : channels) {
      const auto& [sends, recvs] = lists;
      const size_t n = std::min(sends.size(), recvs.size());
      for (size_t i = 0; i < n; ++i)
        if (sends[i] != recvs[i]) {
          error("stage " + std::to_string(pair.first) + " -> stage " + std::to_string(pair.second) + ": message " +
                std::to_string(i) + " is sent as " + describe(sends[i]) + " but received as " + describe(recvs[i]));
          break;
        }
    }
  }
  std::string describe(const std::tuple<int, int, int>& msg) const {
    const auto [kind, s, mb] = msg;
    return std::string(kind == 0 ? "activation" : "gradient") + " for (mb " + std::to_string(mb) + ", chunk " +
           std::to_string(s / p_) + ")";
  }

  const std::vector<std::vector<Instruction>>& sched_;
  const int p_, m_, v_, S_;  // S_: virtual stages
  const SimCosts costs_;
  const size_t n_;
  // Indexed by (virtual stage, mb): end times (-1: not yet), run counts, and for each message
  // addressed to that virtual stage its issue time (-1: not sent) and whether it was received.
  std::vector<int64_t> fwd_end_, bwd_end_;
  std::vector<int> fwd_runs_, bwd_runs_;
  std::vector<int64_t> sent_act_, sent_grad_;
  std::vector<int> got_act_, got_grad_;
  std::vector<StageState> st_;
  SimResult res_;
};

}  // namespace

SimResult simulate_schedule(const std::vector<std::vector<Instruction>>& schedule, int m, int v,
                            const SimCosts& costs) {
  const size_t stages = schedule.size() * size_t(v);
  TRELLIS_CHECK(costs.stage_forward.size() == costs.stage_backward.size() &&
                    (costs.stage_forward.empty() || costs.stage_forward.size() == stages),
                "simulate_schedule: per-virtual-stage costs need p*v = " + std::to_string(stages) + " entries each");
  return Sim(schedule, m, v, costs).run();
}

// ---- communication batches ----

namespace {

bool is_comm(PipeOp op) {
  return op == PipeOp::recv_forward || op == PipeOp::send_forward || op == PipeOp::recv_backward ||
         op == PipeOp::send_backward;
}

// The message a point-to-point instruction of stage r moves: (0 activation / 1 gradient, the
// virtual stage it is addressed to, micro-batch), the same on both sides.
std::tuple<int, int, int> message_of(const Instruction& in, int p, int r) {
  const int s = in.chunk * p + r;
  switch (in.op) {
    case PipeOp::send_forward: return {0, s + 1, in.micro_batch};
    case PipeOp::recv_forward: return {0, s, in.micro_batch};
    case PipeOp::send_backward: return {1, s - 1, in.micro_batch};
    default: return {1, s, in.micro_batch};  // recv_backward
  }
}

bool is_send(PipeOp op) { return op == PipeOp::send_forward || op == PipeOp::send_backward; }

}  // namespace

std::vector<StepPlan> plan_communication(const std::vector<std::vector<Instruction>>& schedule, int m, int v,
                                         const SimCosts& costs) {
  TRELLIS_CHECK(costs.forward > 0 && costs.backward > 0, "plan_communication: costs must be positive");
  const SimResult sim = simulate_schedule(schedule, m, v, costs);
  if (!sim.ok()) throw UserError("pipeline schedule does not run: " + sim.report());
  const int p = int(schedule.size());
  std::vector<StepPlan> plans(schedule.size());
  for (int r = 0; r < p; ++r) {
    const auto& list = schedule[size_t(r)];
    const auto& times = sim.event_time[size_t(r)];
    using Key = std::tuple<int64_t, int, int, int>;  // (time, kind, virtual stage, micro-batch)
    std::vector<std::pair<Key, size_t>> comms;
    std::vector<size_t> computes;
    for (size_t i = 0; i < list.size(); ++i) {
      if (is_comm(list[i].op)) {
        const auto [kind, s, mb] = message_of(list[i], p, r);
        comms.push_back({Key{times[i], kind, s, mb}, i});
      } else {
        computes.push_back(i);
      }
    }
    std::sort(comms.begin(), comms.end());
    // A batch goes before the first compute ending after its time (reduce_grads and
    // optimizer_step come after every batch).
    auto end_of = [&](size_t i) {
      const PipeOp op = list[i].op;
      return op == PipeOp::forward || op == PipeOp::backward ? times[i] : std::numeric_limits<int64_t>::max();
    };
    StepPlan& plan = plans[size_t(r)];
    size_t c = 0, k = 0;
    while (c < comms.size() || k < computes.size()) {
      const int64_t t = c < comms.size() ? std::get<0>(comms[c].first) : 0;
      if (c < comms.size() && (k == computes.size() || end_of(computes[k]) > t)) {
        std::vector<Instruction> batch;
        for (; c < comms.size() && std::get<0>(comms[c].first) == t; ++c) batch.push_back(list[comms[c].second]);
        plan.push_back(std::move(batch));
      } else {
        plan.push_back({list[computes[k++]]});
      }
    }
  }
  return plans;
}

std::string BatchCheck::report() const {
  std::string out;
  for (const auto& e : errors) out += e + "\n";
  for (const auto& s : stuck) out += "deadlock: " + s + "\n";
  return out;
}

BatchCheck check_batches(const std::vector<std::vector<Instruction>>& schedule, const std::vector<StepPlan>& plans,
                         int m, int v, bool device) {
  (void)m;
  (void)v;
  BatchCheck res;
  const int p = int(schedule.size());
  auto error = [&](const std::string& e) {
    if (res.errors.size() < kMaxErrors) res.errors.push_back(e);
  };
  if (plans.size() != schedule.size()) {
    error("plans for " + std::to_string(plans.size()) + " stages, schedule has " + std::to_string(p));
    return res;
  }
  struct Batch {
    size_t after = 0;  // computes posted before it
    std::vector<Instruction> ops;
    std::vector<std::pair<int, size_t>> counterpart;  // (rank, batch) per op
  };
  std::vector<std::vector<Batch>> batches(size_t(p), std::vector<Batch>{});
  std::vector<std::vector<Instruction>> computes(static_cast<size_t>(p));
  using Loc = std::tuple<int, int, int, int>;  // (rank, op, mb, chunk)
  std::map<Loc, size_t> where;                  // point-to-point instruction -> its batch
  auto loc = [](int r, const Instruction& in) { return Loc{r, int(in.op), in.micro_batch, in.chunk}; };
  using Msg = std::tuple<int, int, int>;
  std::map<std::pair<int, int>, std::pair<std::vector<Msg>, std::vector<Msg>>> channels;  // sends, recvs
  for (int r = 0; r < p; ++r) {
    const std::string stage = "stage " + std::to_string(r);
    std::vector<Instruction> listed_comms, planned_comms;
    for (const Instruction& in : schedule[size_t(r)])
      if (is_comm(in.op)) listed_comms.push_back(in);
    for (const auto& step : plans[size_t(r)]) {
      if (step.empty()) {
        error(stage + ": empty step");
        continue;
      }
      if (!is_comm(step[0].op)) {
        if (step.size() != 1) error(stage + ": a compute step holds more than one instruction");
        computes[size_t(r)].push_back(step[0]);
        continue;
      }
      Batch b;
      b.after = computes[size_t(r)].size();
      for (const Instruction& in : step) {
        if (!is_comm(in.op)) {
          error(stage + ": " + to_string(in) + " inside a communication batch");
          continue;
        }
        if (!where.emplace(loc(r, in), batches[size_t(r)].size()).second) error(stage + ": " + to_string(in) + " twice");
        const auto [kind, s, mb] = message_of(in, p, r);
        const int from = is_send(in.op) ? r : ((kind == 0 ? s - 1 : s + 1) % p + p) % p;
        const int to = is_send(in.op) ? ((s % p) + p) % p : r;
        auto& ch = channels[{from, to}];
        (is_send(in.op) ? ch.first : ch.second).push_back({kind, s, mb});
        b.ops.push_back(in);
        planned_comms.push_back(in);
      }
      batches[size_t(r)].push_back(std::move(b));
    }
    std::vector<Instruction> listed_computes;
    for (const Instruction& in : schedule[size_t(r)])
      if (!is_comm(in.op)) listed_computes.push_back(in);
    if (listed_computes != computes[size_t(r)]) error(stage + ": computes not those of its list, in order");
    auto by_value = [](const Instruction& a, const Instruction& b) {
      return std::tuple(int(a.op), a.micro_batch, a.chunk) < std::tuple(int(b.op), b.micro_batch, b.chunk);
    };
    std::sort(listed_comms.begin(), listed_comms.end(), by_value);
    std::sort(planned_comms.begin(), planned_comms.end(), by_value);
    if (listed_comms != planned_comms) error(stage + ": point-to-point instructions not exactly those of its list");
  }
  for (const auto& [pair, lists] : channels) {
    const auto& [sends, recvs] = lists;
    if (sends != recvs)
      error("stage " + std::to_string(pair.first) + " -> stage " + std::to_string(pair.second) + ": " +
            std::to_string(sends.size()) + " sends and " + std::to_string(recvs.size()) +
            " receives do not match in order");
  }
  // Sends posted after the compute that produced their data, receives before the one consuming it.
  for (int r = 0; r < p; ++r) {
    std::map<std::tuple<int, int, int>, size_t> index;  // (op, mb, chunk) -> position among computes
    for (size_t i = 0; i < computes[size_t(r)].size(); ++i) {
      const Instruction& in = computes[size_t(r)][i];
      index[{int(in.op), in.micro_batch, in.chunk}] = i;
    }
    for (const Batch& b : batches[size_t(r)])
      for (const Instruction& in : b.ops) {
        const bool fwd = in.op == PipeOp::send_forward || in.op == PipeOp::recv_forward;
        auto it = index.find({int(fwd ? PipeOp::forward : PipeOp::backward), in.micro_batch, in.chunk});
        if (it == index.end()) continue;  // reported above (not the list's computes)
        if (is_send(in.op) && b.after <= it->second)
          error("stage " + std::to_string(r) + ": " + to_string(in) + " posted before its compute");
        if (!is_send(in.op) && b.after > it->second)
          error("stage " + std::to_string(r) + ": " + to_string(in) + " posted after the compute that needs it");
      }
  }
  if (!res.errors.empty()) return res;
  // Counterparts.
  for (int r = 0; r < p; ++r)
    for (Batch& b : batches[size_t(r)])
      for (const Instruction& in : b.ops) {
        const auto [kind, s, mb] = message_of(in, p, r);
        // The other side: the sender's (or receiver's) virtual stage and op.
        int other_s;
        PipeOp other_op;
        if (in.op == PipeOp::send_forward) other_s = s, other_op = PipeOp::recv_forward;
        else if (in.op == PipeOp::recv_forward) other_s = s - 1, other_op = PipeOp::send_forward;
        else if (in.op == PipeOp::send_backward) other_s = s, other_op = PipeOp::recv_backward;
        else other_s = s + 1, other_op = PipeOp::send_backward;
        const int other_r = other_s % p;
        auto it = where.find(Loc{other_r, int(other_op), mb, other_s / p});
        if (it == where.end()) {
          error("stage " + std::to_string(r) + ": " + to_string(in) + " has no counterpart on stage " +
                std::to_string(other_r));
          continue;
        }
        b.counterpart.push_back({other_r, it->second});
      }
  if (!res.errors.empty()) return res;

  // The fixed point of the model: run whatever can run until nothing can.
  std::vector<std::vector<char>> done(static_cast<size_t>(p));
  std::vector<size_t> batches_done(size_t(p), 0), computes_done(size_t(p), 0);
  for (int r = 0; r < p; ++r) done[size_t(r)].assign(batches[size_t(r)].size(), 0);
  // Device: started = at the head of the stream with its computes done; host: posted.
  auto started = [&](int r, size_t j) {
    const bool posted = computes_done[size_t(r)] >= batches[size_t(r)][j].after;
    if (!device) return posted;
    return posted && (j == 0 || done[size_t(r)][j - 1]);
  };
  auto waits = [&](int r, const Instruction& in, std::vector<size_t>& out) {
    out.clear();
    auto add = [&](PipeOp op) {
      auto it = where.find(Loc{r, int(op), in.micro_batch, in.chunk});
      if (it != where.end()) out.push_back(it->second);
    };
    if (in.op == PipeOp::forward) add(PipeOp::recv_forward);
    if (in.op == PipeOp::backward) {
      add(PipeOp::recv_backward);
      add(PipeOp::send_forward);
    }
    if (in.op == PipeOp::reduce_grads)
      for (size_t j = 0; j < batches[size_t(r)].size(); ++j) out.push_back(j);
  };
  std::vector<size_t> w;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& bl = batches[size_t(r)];
      for (size_t j = 0; j < bl.size(); ++j) {
        if (done[size_t(r)][j]) continue;
        bool can = started(r, j);
        for (const auto& [o, ob] : bl[j].counterpart) can = can && started(o, ob);
        if (can) {
          done[size_t(r)][j] = 1;
          ++batches_done[size_t(r)];
          progress = true;
        } else if (device) {
          break;  // in order
        }
      }
      while (computes_done[size_t(r)] < computes[size_t(r)].size()) {
        waits(r, computes[size_t(r)][computes_done[size_t(r)]], w);
        bool can = true;
        for (size_t j : w) can = can && done[size_t(r)][j];
        if (!can) break;
        ++computes_done[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (batches_done[size_t(r)] == batches[size_t(r)].size() && computes_done[size_t(r)] == computes[size_t(r)].size())
      continue;
    res.deadlock = true;
    std::string s = "stage " + std::to_string(r) + ":";
    const auto& bl = batches[size_t(r)];
    for (size_t j = 0; j < bl.size(); ++j)
      if (!done[size_t(r)][j]) {
        s += " batch #" + std::to_string(j) + " [";
        for (size_t i = 0; i < bl[j].ops.size(); ++i) s += (i ? ", " : "") + to_string(bl[j].ops[i]);
        s += "] waits;";
        break;
      }
    if (computes_done[size_t(r)] < computes[size_t(r)].size())
      s += " " + to_string(computes[size_t(r)][computes_done[size_t(r)]]) + " waits";
    res.stuck.push_back(s);
  }
  return res;
}

}  // namespace trellis
