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
  // (rank 1 of 2)"); `gpu_queue`: the wait is for the GPU's queued work, where a device collective
  // may be stuck (the message then names the last one queued). Guards nest (the outermost wait
  // counts). Only the thread that made the watchdog is watched (the one that talks to the other
  // ranks); a Guard elsewhere, or of a null watchdog, does nothing.
  class Guard {
   public:
    Guard(Watchdog* w, const char* op, const std::string& where, bool gpu_queue = false);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Watchdog* w_;
  };
  // While a Pause lives nothing times out, and a wait in progress counts from its end: for work
  // some ranks may take much longer over than the others wait for them (a checkpoint's write).
  class Pause {
   public:
    explicit Pause(Watchdog* w);
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    Watchdog* w_;
  };

  // A collective queued on the GPU: named in the message if a later wait for the GPU times out
  // (NCCL runs it on the device; the host notices only when it waits for the queue).
  void device_collective(const char* op, const std::string& where);

 private:
  void run();
  void begin(const char* op, const std::string& where, bool gpu_queue);
  void end();

  const double timeout_s_;
  const std::thread::id owner_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int depth_ = 0;   // nested guards of the waiting thread
  int paused_ = 0;  // nested pauses
  bool gpu_queue_ = false;
  std::chrono::steady_clock::time_point since_;
  std::string waiting_for_, last_device_collective_;
  std::thread thread_;
};

}  // namespace trellis
