// Pipeline schedules without communication: every GPipe, 1F1B and interleaved schedule for
// p = 1..8 stages, m = 1..32 micro-batches and v = 1..4 chunks runs in the simulator without
// deadlock, with every dependency met and every forward/backward once; the makespan equals the
// theoretical bubble exactly and the activations held equal the warm-up bound. Also: the shape
// rules and their messages, exact lists for small cases, per-virtual-stage costs (an imbalanced
// case by hand), and that the simulator catches broken schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_sim.h"

namespace trellis {
namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved};
using Lists = std::vector<std::vector<Instruction>>;

// The rules of validate_schedule_shape, restated independently.
bool allowed(ScheduleKind k, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1) return false;
  if (k != ScheduleKind::interleaved) return v == 1;
  return p >= 2 && v >= 2 && m % p == 0;
}

std::string shape_name(ScheduleKind k, int p, int m, int v) {
  std::string s = schedule_kind_name(k);
  s += " p=" + std::to_string(p);
  s += " m=" + std::to_string(m);
  s += " v=" + std::to_string(v);
  return s;
}

// The UserError message of validate_schedule_shape; fails the test if it does not throw.
std::string shape_error(ScheduleKind k, int p, int m, int v, int layers) {
  try {
    validate_schedule_shape(k, p, m, v, layers);
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for " << shape_name(k, p, m, v) << " layers=" << layers;
  return "";
}

void expect_contains(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

TEST(PipelineSchedule, KindNames) {
  for (ScheduleKind k : kKinds) EXPECT_EQ(parse_schedule_kind(schedule_kind_name(k)), k);
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::gpipe), "gpipe");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::one_f_one_b), "1f1b");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::interleaved), "interleaved");
  try {
    parse_schedule_kind("zerobubble");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "parallel.schedule = \"zerobubble\" is not a schedule; expected gpipe, 1f1b or interleaved");
  }
}

// validate_schedule_shape and build_schedule accept exactly the shapes the rules allow.
TEST(PipelineSchedule, ShapeRules) {
  int accepted[3] = {0, 0, 0};
  for (ScheduleKind k : kKinds)
    for (int p = 0; p <= 8; ++p)
      for (int m = 0; m <= 32; ++m)
        for (int v = 0; v <= 4; ++v) {
          SCOPED_TRACE(shape_name(k, p, m, v));
          const bool ok = allowed(k, p, m, v);
          if (ok) {
            EXPECT_NO_THROW(validate_schedule_shape(k, p, m, v, p * v));
            EXPECT_EQ(build_schedule(k, p, m, v).size(), size_t(p));
            ++accepted[int(k)];
          } else {
            EXPECT_THROW(validate_schedule_shape(k, p, m, v, 1000), UserError);
            EXPECT_THROW(build_schedule(k, p, m, v), UserError);
          }
        }
  EXPECT_EQ(accepted[0], 8 * 32);  // gpipe: every p, m with v = 1
  EXPECT_EQ(accepted[1], 8 * 32);  // 1f1b
  // interleaved: p = 2..8, m a multiple of p up to 32 (16+10+8+6+5+4+4 = 53), v = 2..4
  EXPECT_EQ(accepted[2], 53 * 3);
}

TEST(PipelineSchedule, ValidationMessages) {
  using K = ScheduleKind;
  EXPECT_EQ(shape_error(K::one_f_one_b, 0, 4, 1, 12), "parallel.pipeline = 0 must be at least 1");
  expect_contains(shape_error(K::gpipe, 2, 0, 1, 12),
                  {"at least 1 micro-batch", "got 0", "train.global_batch", "train.micro_batch"});
  EXPECT_EQ(shape_error(K::interleaved, 2, 4, 0, 12), "parallel.virtual_stages = 0 must be at least 1");
  EXPECT_EQ(shape_error(K::one_f_one_b, 2, 4, 2, 12),
            "parallel.virtual_stages = 2 needs parallel.schedule = interleaved (it is 1f1b)");
  EXPECT_EQ(shape_error(K::gpipe, 2, 4, 3, 12),
            "parallel.virtual_stages = 3 needs parallel.schedule = interleaved (it is gpipe)");
  EXPECT_EQ(shape_error(K::interleaved, 1, 4, 2, 12), "parallel.schedule = interleaved needs parallel.pipeline >= 2, got 1");
  expect_contains(shape_error(K::interleaved, 4, 8, 1, 12),
                  {"parallel.virtual_stages >= 2, got 1", "parallel.schedule = 1f1b"});
  EXPECT_EQ(shape_error(K::interleaved, 4, 6, 2, 12),
            "parallel.schedule = interleaved needs the micro-batches per step (6 = train.global_batch / "
            "(train.micro_batch x data-parallel size)) to be a multiple of parallel.pipeline = 4");
  EXPECT_EQ(shape_error(K::interleaved, 4, 8, 2, 7),
            "model.n_layers = 7 is less than parallel.pipeline (4) x parallel.virtual_stages (2) = 8: every "
            "model chunk needs at least one layer");
  EXPECT_EQ(shape_error(K::one_f_one_b, 8, 8, 1, 6),
            "model.n_layers = 6 is less than parallel.pipeline (8) x parallel.virtual_stages (1) = 8: every "
            "model chunk needs at least one layer");
  // Layers need not divide evenly: partitioning them is another concern.
  EXPECT_NO_THROW(validate_schedule_shape(K::interleaved, 4, 8, 2, 8));
  EXPECT_NO_THROW(validate_schedule_shape(K::interleaved, 4, 8, 2, 13));
  EXPECT_NO_THROW(validate_schedule_shape(K::one_f_one_b, 3, 5, 1, 7));
}

// Compact form of a list for exact comparisons: "F0" forward mb 0, "B1.2" backward mb 1 chunk 2,
// "rf"/"sf"/"rb"/"sb" for the transfers (their micro-batch and chunk are those of the next or
// previous compute), "R" reduce_grads, "S" optimizer_step.
std::string compact(const std::vector<Instruction>& list, bool with_chunk) {
  std::string s;
  for (const Instruction& in : list) {
    if (!s.empty()) s += ' ';
    const std::string id = std::to_string(in.micro_batch) + (with_chunk ? "." + std::to_string(in.chunk) : "");
    switch (in.op) {
      case PipeOp::recv_forward: s += "rf" + id; break;
      case PipeOp::forward: s += "F" + id; break;
      case PipeOp::send_forward: s += "sf" + id; break;
      case PipeOp::recv_backward: s += "rb" + id; break;
      case PipeOp::backward: s += "B" + id; break;
      case PipeOp::send_backward: s += "sb" + id; break;
      case PipeOp::reduce_grads: s += "R"; break;
      case PipeOp::optimizer_step: s += "S"; break;
    }
  }
  return s;
}

TEST(PipelineSchedule, ExactListsForSmallCases) {
  const Lists g = build_schedule(ScheduleKind::gpipe, 2, 2, 1);
  EXPECT_EQ(compact(g[0], false), "F0 sf0 F1 sf1 rb0 B0 rb1 B1 R S");
  EXPECT_EQ(compact(g[1], false), "rf0 F0 rf1 F1 B0 sb0 B1 sb1 R S");

  // 1F1B, p = 3, m = 4: stage r runs p-r-1 warm-up forwards.
  const Lists o = build_schedule(ScheduleKind::one_f_one_b, 3, 4, 1);
  EXPECT_EQ(compact(o[0], false), "F0 sf0 F1 sf1 F2 sf2 rb0 B0 F3 sf3 rb1 B1 rb2 B2 rb3 B3 R S");
  EXPECT_EQ(compact(o[1], false), "rf0 F0 sf0 rf1 F1 sf1 rb0 B0 sb0 rf2 F2 sf2 rb1 B1 sb1 rf3 F3 sf3 rb2 B2 sb2 rb3 B3 sb3 R S");
  EXPECT_EQ(compact(o[2], false), "rf0 F0 B0 sb0 rf1 F1 B1 sb1 rf2 F2 B2 sb2 rf3 F3 B3 sb3 R S");

  // Interleaved, p = 2, m = 2, v = 2: chunk c on rank r is virtual stage 2c + r. Rank 0's warm-up
  // (2 + 2 = 4) is every forward; rank 1 warms up 2, then alternates.
  const Lists i = build_schedule(ScheduleKind::interleaved, 2, 2, 2);
  EXPECT_EQ(compact(i[0], true),
            "F0.0 sf0.0 F1.0 sf1.0 rf0.1 F0.1 sf0.1 rf1.1 F1.1 sf1.1 "
            "rb0.1 B0.1 sb0.1 rb1.1 B1.1 sb1.1 rb0.0 B0.0 rb1.0 B1.0 R S");
  EXPECT_EQ(compact(i[1], true),
            "rf0.0 F0.0 sf0.0 rf1.0 F1.0 sf1.0 rf0.1 F0.1 B0.1 sb0.1 rf1.1 F1.1 B1.1 sb1.1 "
            "rb0.0 B0.0 sb0.0 rb1.0 B1.0 sb1.0 R S");

  // Micro-batches go through the chunks in groups of p: p = 2, m = 4, v = 2 on rank 1 (warm-up 2).
  const Lists i4 = build_schedule(ScheduleKind::interleaved, 2, 4, 2);
  std::string computes;
  for (const Instruction& in : i4[1])
    if (in.op == PipeOp::forward || in.op == PipeOp::backward)
      computes += std::string(in.op == PipeOp::forward ? "F" : "B") + std::to_string(in.micro_batch) + "." +
                  std::to_string(in.chunk) + " ";
  EXPECT_EQ(computes, "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ");
}

TEST(PipelineSchedule, InstructionText) {
  EXPECT_EQ(to_string(Instruction{PipeOp::recv_backward, 3, 1}), "recv_backward(mb 3, chunk 1)");
  EXPECT_EQ(to_string(Instruction{PipeOp::optimizer_step}), "optimizer_step");
}

// Expected peak of (micro-batch, chunk) activations held on stage r: the warm-up forwards plus
// the one forward of the first steady step, or every pair when there is no steady state.
int expected_peak(ScheduleKind k, int p, int m, int v, int r) {
  switch (k) {
    case ScheduleKind::gpipe: return m;
    case ScheduleKind::one_f_one_b: return std::min(p - r, m);
    case ScheduleKind::interleaved: return std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
  }
  return -1;
}

// The whole sweep, for a forward/backward cost pair (per chunk).
void check_all_shapes(const SimCosts& c) {
  int checked = 0;
  for (ScheduleKind k : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (int v = 1; v <= 4; ++v) {
          if (!allowed(k, p, m, v)) continue;
          SCOPED_TRACE(shape_name(k, p, m, v));
          const Lists lists = build_schedule(k, p, m, v);
          const SimResult r = simulate_schedule(lists, m, v, c);
          ASSERT_FALSE(r.deadlock) << r.report();
          ASSERT_TRUE(r.errors.empty()) << r.report();
          // Ideal: every stage computes m*v chunks without pause. Bubble: p-1 slots of one
          // chunk's forward+backward, i.e. (p-1)/(m v) of the ideal (Narayanan et al. 2021);
          // with v = 1 this is GPipe's and 1F1B's (m + p - 1)(f + b).
          const int64_t fb = c.forward + c.backward;
          const int64_t ideal = int64_t(m) * v * fb;
          ASSERT_EQ(r.makespan, (int64_t(m) * v + p - 1) * fb);
          ASSERT_EQ((r.makespan - ideal) * m * v, (p - 1) * ideal);  // bubble fraction (p-1)/(m v)
          ASSERT_EQ(r.busy.size(), size_t(p));
          ASSERT_EQ(r.idle.size(), size_t(p));
          ASSERT_EQ(r.peak_activations.size(), size_t(p));
          for (int s = 0; s < p; ++s) {
            SCOPED_TRACE("stage " + std::to_string(s));
            ASSERT_EQ(r.busy[size_t(s)], ideal);
            ASSERT_EQ(r.idle[size_t(s)], (p - 1) * fb);
            ASSERT_EQ(r.peak_activations[size_t(s)], expected_peak(k, p, m, v, s));
            // Every list ends with the gradient reduction and the step.
            ASSERT_GE(lists[size_t(s)].size(), 2u);
            ASSERT_EQ(lists[size_t(s)][lists[size_t(s)].size() - 2].op, PipeOp::reduce_grads);
            ASSERT_EQ(lists[size_t(s)].back().op, PipeOp::optimizer_step);
          }
          ++checked;
        }
  EXPECT_EQ(checked, 2 * 8 * 32 + 53 * 3);  // every allowed shape was simulated
}

TEST(PipelineSchedule, AllShapesForwardOneBackwardTwo) { check_all_shapes({1, 2}); }
TEST(PipelineSchedule, AllShapesEqualCosts) { check_all_shapes({1, 1}); }
TEST(PipelineSchedule, AllShapesBackwardCheaper) { check_all_shapes({3, 1}); }
TEST(PipelineSchedule, AllShapesUnevenCosts) { check_all_shapes({2, 5}); }

// 1F1B's point: the same bubble as GPipe with at most p micro-batches held instead of m.
TEST(PipelineSchedule, OneFOneBHoldsAtMostPMicroBatches) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const SimResult f = simulate_schedule(build_schedule(ScheduleKind::one_f_one_b, p, m, 1), m, 1);
      const SimResult g = simulate_schedule(build_schedule(ScheduleKind::gpipe, p, m, 1), m, 1);
      ASSERT_EQ(f.makespan, g.makespan);
      ASSERT_EQ(*std::max_element(f.peak_activations.begin(), f.peak_activations.end()), std::min(p, m));
      ASSERT_EQ(*std::min_element(g.peak_activations.begin(), g.peak_activations.end()), m);
    }
}

// A hand-timed case: p = 2, m = 1, f = 1, b = 2. Stage 0 F [0,1]; stage 1 F [1,2], B [2,4];
// stage 0 B [4,6].
TEST(PipelineSimulator, HandTimedCase) {
  const SimResult r = simulate_schedule(build_schedule(ScheduleKind::one_f_one_b, 2, 1, 1), 1, 1, {1, 2});
  ASSERT_TRUE(r.ok()) << r.report();
  EXPECT_EQ(r.makespan, 6);
  EXPECT_EQ(r.busy, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r.idle, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r.peak_activations, (std::vector<int>{1, 1}));
}

// Per-virtual-stage costs, imbalanced: 1F1B, p = 2, m = 4, stage 0 f = 1, b = 2, stage 1 (the
// bottleneck) f = 2, b = 4. Stage 1 runs F B per micro-batch back to back from t = 1 (F0 [1,3],
// B0 [3,7], F1 [7,9], ...; each input is ready in time), so its last backward ends at 1 + 4 x 6 =
// 25, and stage 0's B3 runs [25,27]: the first micro-batch's path f0 + f1 + b1 + b0 = 9 plus
// (m - 1) x the bottleneck's f1 + b1 = 18.
TEST(PipelineSimulator, PerStageCostsBottleneckSetsThePace) {
  SimCosts c;
  c.stage_forward = {1, 2};
  c.stage_backward = {2, 4};
  const SimResult r = simulate_schedule(build_schedule(ScheduleKind::one_f_one_b, 2, 4, 1), 4, 1, c);
  ASSERT_TRUE(r.ok()) << r.report();
  EXPECT_EQ(r.makespan, 27);
  EXPECT_EQ(r.busy, (std::vector<int64_t>{12, 24}));
  EXPECT_EQ(r.idle, (std::vector<int64_t>{15, 3}));
}

// Equal per-virtual-stage costs are the uniform costs: the same timeline for every shape.
TEST(PipelineSimulator, EqualPerStageCostsMatchUniformCosts) {
  for (ScheduleKind k : kKinds)
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m)
        for (int v = 1; v <= 3; ++v) {
          if (!allowed(k, p, m, v)) continue;
          SCOPED_TRACE(shape_name(k, p, m, v));
          const Lists lists = build_schedule(k, p, m, v);
          const SimCosts uniform{3, 5};
          SimCosts per_stage;
          per_stage.stage_forward.assign(size_t(p * v), 3);
          per_stage.stage_backward.assign(size_t(p * v), 5);
          const SimResult a = simulate_schedule(lists, m, v, uniform), b = simulate_schedule(lists, m, v, per_stage);
          ASSERT_TRUE(b.ok()) << b.report();
          ASSERT_EQ(b.makespan, a.makespan);
          ASSERT_EQ(b.busy, a.busy);
          ASSERT_EQ(b.peak_activations, a.peak_activations);
          ASSERT_EQ(b.event_time, a.event_time);
        }
}

// The simulator must reject broken schedules; each case breaks one rule.
Lists erase_first(Lists l, int stage, PipeOp op) {
  auto& v = l[size_t(stage)];
  v.erase(std::find_if(v.begin(), v.end(), [&](const Instruction& in) { return in.op == op; }));
  return l;
}
bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
}

TEST(PipelineSimulator, DetectsDeadlock) {
  // Stage 0 waits for a gradient before sending the activation stage 1 waits for.
  Lists l = build_schedule(ScheduleKind::one_f_one_b, 2, 1, 1);
  l[0] = {{PipeOp::recv_backward, 0, 0}, {PipeOp::forward, 0, 0}, {PipeOp::send_forward, 0, 0},
          {PipeOp::backward, 0, 0},      {PipeOp::reduce_grads},     {PipeOp::optimizer_step}};
  const SimResult r = simulate_schedule(l, 1, 1);
  EXPECT_TRUE(r.deadlock);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.stuck.size(), 2u);
  EXPECT_EQ(r.stuck[0], "stage 0 #0 recv_backward(mb 0, chunk 0): no send_backward from virtual stage 1 (stage 1)");
  EXPECT_EQ(r.stuck[1], "stage 1 #0 recv_forward(mb 0, chunk 0): no send_forward from virtual stage 0 (stage 0)");
}

TEST(PipelineSimulator, DetectsMissingReceive) {
  const SimResult r = simulate_schedule(erase_first(build_schedule(ScheduleKind::gpipe, 2, 2, 1), 1, PipeOp::recv_forward), 2, 1);
  EXPECT_FALSE(r.deadlock);
  EXPECT_TRUE(any_contains(r.errors, "stage 1 #0 forward(mb 0, chunk 0): its input activation was not received"))
      << r.report();
  EXPECT_TRUE(any_contains(r.errors, "activation for forward(mb 0, chunk 0) on stage 1 never received")) << r.report();
}

TEST(PipelineSimulator, DetectsMissingAndDuplicateCompute) {
  Lists l = build_schedule(ScheduleKind::gpipe, 1, 2, 1);  // F0 F1 B0 B1 R S
  l[0][1] = {PipeOp::forward, 0, 0};                        // F0 twice, F1 never
  const SimResult r = simulate_schedule(l, 2, 1);
  EXPECT_TRUE(any_contains(r.errors, "stage 0 #1 forward(mb 0, chunk 0): forward runs twice")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "forward(mb 0, chunk 0) on stage 0 ran 2 times, not once")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "forward(mb 1, chunk 0) on stage 0 ran 0 times, not once")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "backward(mb 1, chunk 0): runs before its own forward")) << r.report();
}

TEST(PipelineSimulator, DetectsBackwardBeforeNextStage) {
  // Stage 0 runs its backward without waiting for stage 1's gradient.
  const SimResult r =
      simulate_schedule(erase_first(build_schedule(ScheduleKind::one_f_one_b, 2, 1, 1), 0, PipeOp::recv_backward), 1, 1);
  EXPECT_TRUE(any_contains(r.errors, "stage 0 #2 backward(mb 0, chunk 0): its output gradient was not received")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "starts before the backward of the next virtual stage ended")) << r.report();
}

TEST(PipelineSimulator, DetectsChannelOrderMismatch) {
  // Stage 1 receives micro-batch 1's activation first while stage 0 sends 0 first: fine for a
  // buffered model, wrong for in-order point-to-point matching.
  Lists l = build_schedule(ScheduleKind::gpipe, 2, 2, 1);
  l[1] = {{PipeOp::recv_forward, 1, 0}, {PipeOp::recv_forward, 0, 0}, {PipeOp::forward, 0, 0},
          {PipeOp::forward, 1, 0},      {PipeOp::backward, 0, 0},     {PipeOp::send_backward, 0, 0},
          {PipeOp::backward, 1, 0},     {PipeOp::send_backward, 1, 0}, {PipeOp::reduce_grads},
          {PipeOp::optimizer_step}};
  const SimResult r = simulate_schedule(l, 2, 1);
  EXPECT_FALSE(r.deadlock);
  ASSERT_EQ(r.errors.size(), 1u) << r.report();
  EXPECT_EQ(r.errors[0],
            "stage 0 -> stage 1: message 0 is sent as activation for (mb 0, chunk 0) but received as activation "
            "for (mb 1, chunk 0)");
}

TEST(PipelineSimulator, DetectsMisplacedStepOps) {
  Lists l = build_schedule(ScheduleKind::gpipe, 1, 1, 1);  // F0 B0 R S
  std::swap(l[0][1], l[0][2]);                             // F0 R B0 S
  std::swap(l[0][2], l[0][3]);                             // F0 R S B0
  const SimResult r = simulate_schedule(l, 1, 1);
  EXPECT_TRUE(any_contains(r.errors, "stage 0 #1 reduce_grads: runs before backward(mb 0, chunk 0)")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "stage 0 #2 optimizer_step: is not the last instruction")) << r.report();
}

TEST(PipelineSimulator, DetectsSendsOfTheWrongStage) {
  Lists l = build_schedule(ScheduleKind::one_f_one_b, 2, 1, 1);
  l[1].insert(l[1].begin() + 2, Instruction{PipeOp::send_forward, 0, 0});  // the last stage sends
  l[0].insert(l[0].begin(), Instruction{PipeOp::recv_forward, 0, 0});       // the first receives
  const SimResult r = simulate_schedule(l, 1, 1);
  EXPECT_TRUE(any_contains(r.errors, "the first virtual stage reads data and receives no activation")) << r.report();
  EXPECT_TRUE(any_contains(r.errors, "the last virtual stage computes the loss and sends no activation")) << r.report();
}

}  // namespace
}  // namespace trellis

namespace trellis {
namespace {

// The engine's communication batches (plan_communication) under NCCL semantics: every rank's
// batches run in order on one stream and a batch completes only when the peers' batches holding
// its counterparts run (check_batches). No deadlock, for every shape the schedules allow, on the
// device model and the host (MPI) model; every transfer and compute exactly once, computes in list
// order, sends and receives matched in order on every pair of ranks.
TEST(PipelineBatches, NoDeadlockUnderNcclSemantics) {
  int shapes = 0;
  for (ScheduleKind k : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (int v = 1; v <= 4; ++v) {
          if (!allowed(k, p, m, v)) continue;
          SCOPED_TRACE(shape_name(k, p, m, v));
          const Lists lists = build_schedule(k, p, m, v);
          const std::vector<StepPlan> plans = plan_communication(lists, m, v);
          for (bool device : {true, false}) {
            const BatchCheck c = check_batches(lists, plans, m, v, device);
            ASSERT_TRUE(c.ok()) << (device ? "device: " : "host: ") << c.report();
          }
          ++shapes;
        }
  EXPECT_EQ(shapes, 8 * 32 + 8 * 32 + 53 * 3);  // 671
}

// The checker finds the deadlock of the naive grouping (each run of consecutive transfers of the
// list one batch, i.e. a send paired with the receive after it): interleaved lists with m > p.
TEST(PipelineBatches, CheckerCatchesNaiveGrouping) {
  auto naive = [](const Lists& lists) {
    std::vector<StepPlan> plans;
    for (const auto& list : lists) {
      StepPlan plan;
      for (const Instruction& in : list) {
        const bool comm = in.op == PipeOp::recv_forward || in.op == PipeOp::send_forward ||
                          in.op == PipeOp::recv_backward || in.op == PipeOp::send_backward;
        const bool prev_comm = !plan.empty() && (plan.back()[0].op == PipeOp::recv_forward ||
                                                 plan.back()[0].op == PipeOp::send_forward ||
                                                 plan.back()[0].op == PipeOp::recv_backward ||
                                                 plan.back()[0].op == PipeOp::send_backward);
        if (comm && prev_comm) plan.back().push_back(in);
        else plan.push_back({in});
      }
      plans.push_back(plan);
    }
    return plans;
  };
  const Lists inter = build_schedule(ScheduleKind::interleaved, 2, 4, 2);
  const BatchCheck bad = check_batches(inter, naive(inter), 4, 2, true);
  EXPECT_TRUE(bad.deadlock) << bad.report();
  EXPECT_TRUE(bad.errors.empty()) << bad.report();
  EXPECT_FALSE(bad.stuck.empty());
  // ... while it suffices for 1F1B.
  const Lists f1b = build_schedule(ScheduleKind::one_f_one_b, 4, 8, 1);
  EXPECT_TRUE(check_batches(f1b, naive(f1b), 8, 1, true).ok());
  // Every message in one batch per rank, posted before anything is computed: sends before their
  // data exists, rejected.
  std::vector<StepPlan> all_first;
  for (const auto& list : f1b) {
    StepPlan plan{{}};
    for (const Instruction& in : list) {
      if (in.op == PipeOp::forward || in.op == PipeOp::backward || in.op == PipeOp::reduce_grads ||
          in.op == PipeOp::optimizer_step)
        plan.push_back({in});
      else
        plan[0].push_back(in);
    }
    all_first.push_back(plan);
  }
  const BatchCheck early = check_batches(f1b, all_first, 8, 1, true);
  EXPECT_NE(early.report().find("posted before its compute"), std::string::npos) << early.report();
  // A plan that drops a transfer or swaps two sends on a pair is rejected as malformed.
  std::vector<StepPlan> plans = plan_communication(f1b, 8, 1);
  auto dropped = plans;
  for (auto& step : dropped[1])
    if (step[0].op == PipeOp::send_forward) {
      step.erase(step.begin());
      break;
    }
  EXPECT_FALSE(check_batches(f1b, dropped, 8, 1, true).errors.empty());
}

// The batches keep the ideal timeline: executed with the costs they were planned for, the makespan
// is the theory's (m v + p - 1)(f + b) (checked through the simulator's event times: a batch holds
// messages of one instant, posted before the first compute that ends after it).
TEST(PipelineBatches, BatchesFollowTheTimeline) {
  const Lists lists = build_schedule(ScheduleKind::interleaved, 4, 8, 2);
  const std::vector<StepPlan> plans = plan_communication(lists, 8, 2);
  for (size_t r = 0; r < plans.size(); ++r) {
    size_t n = 0;
    for (const auto& step : plans[r]) n += step.size();
    EXPECT_EQ(n, lists[r].size());
  }
  // Steady state of the last rank (p = 4, v = 2): a backward's gradient send goes together with
  // a receive, not alone after every compute.
  bool grouped = false;
  for (const auto& step : plans[3]) grouped = grouped || step.size() >= 2;
  EXPECT_TRUE(grouped);
}

}  // namespace
}  // namespace trellis
