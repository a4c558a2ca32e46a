#include "core/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace trellis {

Watchdog::Watchdog(double timeout_s) : timeout_s_(timeout_s > 0 ? timeout_s : 0), owner_(std::this_thread::get_id()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

Watchdog::Guard::Guard(Watchdog* w, const char* op, const std::string& where, bool gpu_queue)
    : w_(w && w->timeout_s_ > 0 && std::this_thread::get_id() == w->owner_ ? w : nullptr) {
  if (w_) w_->begin(op, where, gpu_queue);
}

Watchdog::Guard::~Guard() {
  if (w_) w_->end();
}

Watchdog::Pause::Pause(Watchdog* w) : w_(w && w->timeout_s_ > 0 ? w : nullptr) {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  ++w_->paused_;
}

Watchdog::Pause::~Pause() {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  if (--w_->paused_ == 0) w_->since_ = std::chrono::steady_clock::now();
}

void Watchdog::begin(const char* op, const std::string& where, bool gpu_queue) {
  std::lock_guard<std::mutex> lock(mu_);
  if (depth_++ > 0) return;
  since_ = std::chrono::steady_clock::now();
  waiting_for_.assign(op).append(" on ").append(where);
  gpu_queue_ = gpu_queue;
}

void Watchdog::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--depth_ == 0) waiting_for_.clear();
}

void Watchdog::device_collective(const char* op, const std::string& where) {
  if (timeout_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  last_device_collective_.assign(op).append(" on ").append(where);
}

void Watchdog::run() {
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout_s_ / 10));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    if (depth_ == 0 || paused_ > 0) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (waited < timeout_s_) continue;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.0f", waited);
    std::string what = "collective timeout: waited " + std::string(seconds) + " s for " + waiting_for_;
    if (gpu_queue_ && !last_device_collective_.empty())
      what += " (the last collective queued on it: " + last_device_collective_ + ")";
    what += "; another rank is not taking part (stopped, hung or gone)";
    if (gpu_queue_) what += ", or this GPU is stuck";
    what += ", so every rank is aborted. The limit is parallel.collective_timeout_s (0 = wait forever)";
    lock.unlock();
    // MPI_Abort from this thread while the main one sits in MPI works with Open MPI, but the
    // standard does not promise it: should it hang, the process ends anyway.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      _exit(1);
    }).detach();
    abort_all(what);
  }
}

}  // namespace trellis
