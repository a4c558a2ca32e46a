#include "launcher/stage_timing_report.h"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/watchdog.h"

namespace trellis {

JsonObject gather_stage_timing(const StageTiming& local, const Communicator& pipeline) {
  const int p = pipeline.size(), v = int(local.forward_ms.size());
  // Per rank, per chunk: forward ms, backward ms, forwards, backwards (counts exact in a double).
  constexpr int kFields = 4;
  std::vector<double> mine;
  for (int c = 0; c < v; ++c)
    mine.insert(mine.end(), {local.forward_ms[size_t(c)], local.backward_ms[size_t(c)], double(local.forwards[size_t(c)]),
                             double(local.backwards[size_t(c)])});
  const bool root = pipeline.rank() == 0;
  std::vector<double> all(root ? size_t(p) * mine.size() : 0);
  Watchdog::Guard g(pipeline.watchdog(), "the stage timing gather", pipeline.where());
  TRELLIS_MPI_CHECK(MPI_Gather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, 0,
                               pipeline.mpi_comm()));
  JsonObject out;
  if (!root) return out;
  std::vector<double> forward_ms, backward_ms;
  const double m = all[2];  // forwards of rank 0's chunk 0
  for (int s = 0; s < p * v; ++s) {
    const double* f = &all[(size_t(s % p) * size_t(v) + size_t(s / p)) * kFields];
    // A training step runs every (micro-batch, chunk) forward and backward once.
    TRELLIS_CHECK(f[2] == m && f[3] == m, "virtual stage " + std::to_string(s) + " timed " +
                                              std::to_string(int64_t(f[2])) + " forwards and " +
                                              std::to_string(int64_t(f[3])) + " backwards, not " +
                                              std::to_string(int64_t(m)) + " each");
    forward_ms.push_back(f[0]);
    backward_ms.push_back(f[1]);
  }
  out.add("forward_ms", forward_ms).add("backward_ms", backward_ms).add("micro_batches", int64_t(m));
  return out;
}

}  // namespace trellis
