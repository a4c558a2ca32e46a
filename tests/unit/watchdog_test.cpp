// The collective watchdog: a wait past the timeout aborts with the one line naming it; waits
// within it, nested guards, paused stretches, other threads' guards and a disabled or absent
// watchdog do nothing.
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
    Watchdog::Guard nested(&w, "its queued work", "the GPU cuda:0", true);
    sleep_s(0.4);
  }
  sleep_s(1.5);  // no wait in progress: nothing to time out
  Watchdog off(0.0);
  Watchdog::Guard g(&off, "all_reduce", "nowhere");
  Watchdog::Guard none(nullptr, "all_reduce", "nowhere");
  sleep_s(0.2);
}

TEST(Watchdog, PausedWaitsAndOtherThreadsAreNotWatched) {
  Watchdog w(1.0);
  {
    Watchdog::Pause p(&w);  // a checkpoint write: the others may wait long for it
    Watchdog::Guard g(&w, "barrier", "communicator world (rank 0 of 2)");
    sleep_s(1.6);
  }
  {
    Watchdog::Guard g(&w, "all_reduce", "communicator data (rank 0 of 2)");
    {
      Watchdog::Pause p(&w);
      sleep_s(1.6);
    }
    sleep_s(0.5);  // counts from the end of the pause
  }
  std::thread([&] {
    Watchdog::Guard g(&w, "all_reduce", "another thread");
    sleep_s(1.6);
  }).join();
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
      "collective timeout: waited [12] s for all_reduce on communicator data \\(rank 0 of 2\\); another rank is "
      "not taking part \\(stopped, hung or gone\\), so every rank is aborted.*parallel.collective_timeout_s");
  EXPECT_DEATH(
      {
        Watchdog w(1.0);
        w.device_collective("reduce_scatter", "communicator data (rank 0 of 2)");
        Watchdog::Guard g(&w, "its queued work", "the GPU cuda:0", true);
        sleep_s(10);
      },
      "waited [12] s for its queued work on the GPU cuda:0 \\(the last collective queued on it: reduce_scatter on "
      "communicator data \\(rank 0 of 2\\)\\); another rank is not taking part \\(stopped, hung or gone\\), or this "
      "GPU is stuck");
}

}  // namespace
}  // namespace trellis
