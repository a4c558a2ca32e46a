// The collective watchdog (parallel.collective_timeout_s): a rank that waits longer than the
// timeout for other ranks (a collective, a pipeline transfer, or the GPU's queue, where NCCL
// collectives run) aborts the whole job with one line naming what it waited for, instead of
// hanging until the batch system's time limit. A rank that died takes mpirun's job down anyway;
// this is for the ranks left waiting on one that hangs or stopped (a stuck process, a lost node
// under a still-running launcher, ranks that disagree about the next collective).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace trellis {

class Watchdog {
 public:
  // timeout_s > 0 starts a thread that checks about once a second (a tenth of the timeout when
  // that is shorter); 0: nothing is watched and the guards cost nothing.
  explicit Watchdog(double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_s() const { return timeout_s_; }

  // While a Guard lives, its thread waits for `op` on `where` ("all_reduce", "communicator data
  // (rank 1 of 2)"). Guards nest (the outermost wait counts). A null watchdog watches nothing.
  class Guard {
   public:
    Guard(Watchdog* w, const char* op, const std::string& where);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Watchdog* w_;
  };

  // A collective queued on the GPU: named in the message if a later wait for the GPU times out
  // (NCCL runs it on the device; the host notices only when it waits for the queue).
  void device_collective(const char* op, const std::string& where);

 private:
  void run();
  void begin(const char* op, const std::string& where);
  void end();

  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int depth_ = 0;  // nested guards of the waiting thread
  std::chrono::steady_clock::time_point since_;
  std::string waiting_for_, last_device_collective_;
  std::thread thread_;
};

}  // namespace trellis
