// gtest main for tests under mpirun: MPI_Init, the usual output on rank 0 only (other ranks print
// just their failures, prefixed with rank and host), and the failure flag all-reduced so that a
// failure on any rank fails every rank's exit code.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/error.h"

namespace {

// On ranks other than 0: one line per failed assertion, with where it happened.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  // gtest holds its own lock here: do not call back into UnitTest (current_test_info deadlocks).
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    const trellis::ProcessIdentity& id = trellis::process_identity();
    std::fprintf(stderr, "[rank %d/%d %s] %s %s:%d failure\n%s\n", id.rank, id.world, id.host.c_str(), test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    std::fflush(stderr);
  }

 private:
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  trellis::set_process_identity({rank, world, host});

  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "a test failed on another rank (see above)\n");
  MPI_Finalize();
  return any_failed;
}
