// GradientSync under mpirun on the CPU: buckets cut at parameter boundaries in backward order (one
// parameter kept in a bucket of its own when asked), each all-reduced once its gradients are all
// reported ready, the sum exact over ranks whatever order the ranges are reported in; wait_for
// completes one bucket early and finish() the rest.
#include <gtest/gtest.h>
#include <mpi.h>

#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/runtime.h"
#include "parallel/data/gradient_sync.h"

namespace trellis {
namespace {

// Gradient element i on rank r; small integers, so every f32 sum over ranks is exact.
float grad_value(int r, int64_t i) { return float((r + 1) * 10 + int(i % 5)); }

struct Fixture {
  Runtime rt{RuntimeOptions{}};
  std::unique_ptr<Communicator> world = Communicator::create(MPI_COMM_WORLD, rt, "data");
  // Parameters of 4, 8, 16, 2 and 6 elements, in buffer order.
  std::vector<std::pair<int64_t, int64_t>> ranges{{0, 4}, {4, 12}, {12, 28}, {28, 30}, {30, 36}};
  Buffer buf{rt.allocator(), 36 * sizeof(float), "gradients"};
  Tensor grads = buf.tensor(DType::f32, {36});

  void fill_grads() {
    for (int64_t i = 0; i < 36; ++i) grads.ptr<float>()[i] = grad_value(world->rank(), i);
  }
  void expect_reduced(int64_t begin, int64_t end, const char* what) {
    for (int64_t i = begin; i < end; ++i) {
      float want = 0.0f;
      for (int r = 0; r < world->size(); ++r) want += grad_value(r, i);
      ASSERT_EQ(grads.ptr<float>()[i], want) << what << ", element " << i;
    }
  }
};

TEST(GradientSync, BucketsAtParameterBoundariesSumOverRanks) {
  Fixture f;
  // 40-byte buckets (10 floats): from the end, [30, 36) + [28, 30) = 8 < 10, + [12, 28) closes at
  // 24; then [4, 12) + [0, 4) at i == 0: two buckets.
  GradientSync sync(f.rt, *f.world, f.grads, f.ranges, 40, DType::f32);
  EXPECT_EQ(sync.bucket_count(), 2u);
  for (int step = 0; step < 2; ++step) {  // a second step reuses the buckets
    f.fill_grads();
    sync.begin();
    for (size_t i = f.ranges.size(); i-- > 0;) sync.ready(f.ranges[i].first, f.ranges[i].second);
    sync.finish();
    f.expect_reduced(0, 36, "after finish");
  }
}

TEST(GradientSync, OwnBucketReducedAloneAndWaitedForEarly) {
  Fixture f;
  // Parameter [4, 12) alone: [12, 36) closes at its boundary, then [4, 12), then [0, 4).
  GradientSync sync(f.rt, *f.world, f.grads, f.ranges, 1 << 20, DType::f32, {4, 12});
  EXPECT_EQ(sync.bucket_count(), 3u);
  f.fill_grads();
  sync.begin();
  sync.ready(4, 12);  // first, as the token embedding's is
  sync.wait_for(4, 12);
  f.expect_reduced(4, 12, "the own bucket after wait_for");
  for (size_t i = f.ranges.size(); i-- > 0;)
    if (f.ranges[i] != std::pair<int64_t, int64_t>{4, 12}) sync.ready(f.ranges[i].first, f.ranges[i].second);
  sync.finish();  // does not reduce the own bucket twice
  f.expect_reduced(0, 36, "after finish");
}

TEST(GradientSync, SixteenBitWireCastsBackOnWaitFor) {
  Fixture f;
  GradientSync sync(f.rt, *f.world, f.grads, f.ranges, 1 << 20, DType::bf16, {28, 30});
  f.fill_grads();  // small integers: exact in bf16 too
  sync.begin();
  sync.ready(28, 30);
  sync.wait_for(28, 30);
  f.expect_reduced(28, 30, "the own bucket, bf16 on the wire");
  for (const auto& r : f.ranges)
    if (r != std::pair<int64_t, int64_t>{28, 30}) sync.ready(r.first, r.second);
  sync.finish();
  f.expect_reduced(0, 36, "after finish, bf16 on the wire");
}

}  // namespace
}  // namespace trellis
