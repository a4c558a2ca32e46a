// The collective watchdog: a wait past the timeout aborts with the one line naming it; waits
// within it, nested guards and a disabled or absent watchdog do nothing.
#include "core/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace trellis {
namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

TEST(Watchdog, WaitsWithinTheTimeoutPass) {
  Watchdog w(1.0);
  for (int i = 0; i < 3; ++i) {
    Watchdog::Guard g(&w, "all_reduce", "communicator data (rank 0 of 2)");
    Watchdog::Guard nested(&w, "its queued work", "the GPU cuda:0");
    sleep_s(0.4);
  }
  sleep_s(1.5);  // no wait in progress: nothing to time out
  Watchdog off(0.0);
  Watchdog::Guard g(&off, "all_reduce", "nowhere");
  Watchdog::Guard none(nullptr, "all_reduce", "nowhere");
  sleep_s(0.2);
}

TEST(Watchdog, AWaitPastTheTimeoutAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Watchdog w(1.0);
        w.device_collective("reduce_scatter", "communicator data (rank 0 of 2)");
        Watchdog::Guard g(&w, "all_reduce", "communicator data (rank 0 of 2)");
        sleep_s(10);
      },
      "collective timeout: waited [12] s for all_reduce on communicator data \\(rank 0 of 2\\) \\(the last "
      "collective queued on the GPU: reduce_scatter on communicator data \\(rank 0 of 2\\)\\).*"
      "parallel.collective_timeout_s");
}

}  // namespace
}  // namespace trellis
