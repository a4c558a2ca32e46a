// Per-op time breakdown for diagnosis (log.profile_ops). On the GPU each op is bracketed by two
// events on the compute stream (no synchronization inside a step, so the step runs at its normal
// pace; an op's time includes any idle gap before it when the host falls behind). On the CPU ops
// run synchronously and the host clock times them. Matmuls are listed per problem shape with
// their achieved TFLOP/s.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace trellis {

class Runtime;

class OpProfiler {
 public:
  explicit OpProfiler(Runtime& rt) : rt_(rt) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void add(const std::string& name, double seconds, double flops = 0);
  // GPU: an op bracketed by two events recorded on the compute stream; resolved by collect().
  void add_pending(std::string name, void* start, void* end, double flops);
  void* take_event();
  // Forgets what was timed so far (the first step's one-time setup: plans, library loading).
  void reset();
  // "op  calls  ms per step  share  TFLOP/s" rows, largest first, over `steps` steps
  // (synchronizes to resolve events).
  std::string report(int64_t steps);

 private:
  void collect();  // synchronizes, then turns the pending event pairs into times
  struct Entry { int64_t calls = 0; double seconds = 0, flops = 0; };
  struct Pending { std::string name; void* start; void* end; double flops; };
  Runtime& rt_;
  std::map<std::string, Entry> entries_;
  std::vector<Pending> pending_;
  std::vector<void*> free_events_;
};

// Times one op into rt.profiler() when there is one; does nothing otherwise.
class OpTimer {
 public:
  OpTimer(Runtime& rt, const char* name) : OpTimer(rt, std::string(), name, 0) {}
  // A named problem with its floating-point operations (matmul shapes).
  OpTimer(Runtime& rt, std::string detail, const char* name, double flops);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Runtime& rt_;
  std::string name_;
  double flops_ = 0;
  void* start_event_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trellis
