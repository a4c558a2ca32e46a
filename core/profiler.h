// Per-op time breakdown for diagnosis (log.profile_ops): each op is bracketed by device
// synchronizations, so the times are exact per op but the run is slower than normal.
#pragma once
#include <chrono>
#include <map>
#include <string>

namespace trellis {

class Runtime;

class OpProfiler {
 public:
  void add(const std::string& name, double seconds);
  // "op  calls  total ms  share" rows, largest first.
  std::string report() const;

 private:
  struct Entry { int64_t calls = 0; double seconds = 0; };
  std::map<std::string, Entry> entries_;
};

// Times one op into rt.profiler() when there is one; does nothing otherwise.
class OpTimer {
 public:
  OpTimer(Runtime& rt, const char* name);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Runtime& rt_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trellis
