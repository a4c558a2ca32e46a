// The pipeline engine under mpirun with a toy stage model: every GPipe, 1F1B and interleaved list
// for p = world size, m <= 8, v <= 3 runs without deadlock; each forward gets exactly the
// activation its previous virtual stage produced for that micro-batch, each backward the gradient
// its next virtual stage produced; every (micro-batch, chunk) runs forward and backward once, and
// never more are in flight than the list's peak; under 1F1B the engine's buffer pool stays within
// that peak + 2 (sent gradients return to it as soon as their send completes). Also with messages
// above MPI's eager limit, and forward-only (validation) runs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"
#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/schedule.h"

namespace trellis {
namespace {

// Activation of virtual stage s's output for micro-batch mb (element i); gradients are negated.
float act(int mb, int s, int64_t i) { return float(mb * 1000 + s * 10 + int(i % 7)); }

class ToyStage final : public StageModel {
 public:
  ToyStage(Runtime& rt, int p, int rank, int v, int64_t n) : rt_(rt), p_(p), r_(rank), v_(v), n_(n) {}

  Tensor input(int mb, int chunk) override { return slot(mb, chunk).in.tensor(DType::f32, {n_}); }
  Tensor forward(int mb, int chunk, bool training) override {
    Slot& s = slot(mb, chunk);
    const int vs = chunk * p_ + r_;
    if (vs > 0) {
      const float* x = s.in.tensor(DType::f32, {n_}).ptr<float>();
      for (int64_t i = 0; i < n_; ++i)
        if (x[i] != act(mb, vs - 1, i)) {
          ADD_FAILURE() << "forward(mb " << mb << ", vs " << vs << ") got " << x[i] << " at " << i;
          break;
        }
    }
    forwards.insert({mb, chunk});
    peak = std::max(peak, int(slots_.size()));
    if (!training) ++discards_expected;
    if (vs == p_ * v_ - 1) return Tensor();
    float* y = s.out.tensor(DType::f32, {n_}).ptr<float>();
    for (int64_t i = 0; i < n_; ++i) y[i] = act(mb, vs, i);
    return s.out.tensor(DType::f32, {n_});
  }
  void backward(int mb, int chunk, const Tensor& grad, const GradsReady&) override {
    const int vs = chunk * p_ + r_;
    EXPECT_TRUE(forwards.count({mb, chunk})) << "backward before forward";
    float* g = grad.ptr<float>();
    if (vs < p_ * v_ - 1)
      for (int64_t i = 0; i < n_; ++i)
        if (g[i] != -act(mb, vs + 1, i)) {
          ADD_FAILURE() << "backward(mb " << mb << ", vs " << vs << ") got " << g[i] << " at " << i;
          break;
        }
    for (int64_t i = 0; i < n_; ++i) g[i] = -act(mb, vs, i);
    EXPECT_TRUE(backwards.insert({mb, chunk}).second) << "backward twice";
    slots_.erase({mb, chunk});
  }
  void discard(int mb, int chunk) override { slots_.erase({mb, chunk}); }

  std::set<std::pair<int, int>> forwards, backwards;
  int peak = 0, discards_expected = 0;

 private:
  struct Slot {
    Buffer in, out;
  };
  Slot& slot(int mb, int chunk) {
    auto it = slots_.find({mb, chunk});
    if (it != slots_.end()) return *it->second;
    auto s = std::make_unique<Slot>();
    s->in = Buffer(rt_.allocator(), size_t(n_) * 4, "toy input");
    s->out = Buffer(rt_.allocator(), size_t(n_) * 4, "toy output");
    return *(slots_[{mb, chunk}] = std::move(s));
  }
  Runtime& rt_;
  int p_, r_, v_;
  int64_t n_;
  std::map<std::pair<int, int>, std::unique_ptr<Slot>> slots_;
};

void run_all(int64_t n, int max_m) {
  Runtime rt(RuntimeOptions{});
  auto comm = Communicator::create(MPI_COMM_WORLD, rt, "pipeline");
  const int p = comm->size(), r = comm->rank();
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int v = 1; v <= 3; ++v)
      for (int m = 1; m <= max_m; ++m) {
        if (kind != ScheduleKind::interleaved ? v != 1 : (p < 2 || v < 2 || m % p != 0)) continue;
        SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " v=" + std::to_string(v));
        const std::vector<Instruction> list = build_schedule(kind, p, m, v)[size_t(r)];
        PipelineEngine engine(rt, *comm, v, {n}, DType::f32);
        for (int step = 0; step < 2; ++step) {  // buffers are reused across steps
          ToyStage stage(rt, p, r, v, n);
          engine.run_step(list, stage, PipelineReduction{});
          EXPECT_EQ(int(stage.forwards.size()), m * v);
          EXPECT_EQ(stage.backwards, stage.forwards);
          EXPECT_LE(stage.peak, PipelineEngine::peak_in_flight(list));
        }
        // A gradient buffer returns to the pool once its send is complete, not at reduce_grads:
        // under 1F1B the pool stays within the activations in flight + 2 (not m gradients sent).
        if (kind == ScheduleKind::one_f_one_b) {
          EXPECT_LE(engine.buffer_count(), PipelineEngine::peak_in_flight(list) + 2) << "rank " << r;
        }
        if (std::getenv("TRELLIS_PRINT_POOL"))
          std::printf("pool %s p=%d r=%d m=%d v=%d n=%lld: %d buffers, %d in flight\n", schedule_kind_name(kind), p, r,
                      m, v, (long long)n, engine.buffer_count(), PipelineEngine::peak_in_flight(list));
        ToyStage val(rt, p, r, v, n);
        engine.run_forward(m, val);
        EXPECT_EQ(int(val.forwards.size()), m * v);
      }
}

TEST(PipelineEngine, EverySchedulePassesTheRightTensors) { run_all(24, 8); }
TEST(PipelineEngine, LargeMessages) { run_all(64 * 1024, 4); }  // 256 KiB: past MPI's eager limit

}  // namespace
}  // namespace trellis
