// Per-op timing for diagnosis. Two uses, either or both:
// - log.profile_ops: a per-op time breakdown over the run (report()). Matmuls are listed per
//   problem shape with their achieved TFLOP/s.
// - log.trace_step: a trace of one step (begin_trace / end_trace), every op with its start and end,
//   and on the GPU every collective on the communication stream too, written as a Chrome trace
//   (chrome://tracing, ui.perfetto.dev): what overlaps what, which nsys would show.
// On the GPU each op is bracketed by two events on the compute stream (no synchronization inside a
// step, so the step runs at its normal pace; an op's time includes any idle gap before it when the
// host falls behind). On the CPU ops run synchronously and the host clock times them.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace trellis {

class Runtime;

class OpProfiler {
 public:
  // aggregate: time every op for report(); without it the profiler only traces (when asked).
  OpProfiler(Runtime& rt, bool aggregate) : rt_(rt), aggregate_(aggregate) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Whether ops are timed now (aggregating, or inside a trace, and not paused).
  bool timing() const { return !paused_ && (aggregate_ || tracing_); }
  // Ops while paused (validation passes: not part of a training step) are not timed.
  void set_paused(bool paused) { paused_ = paused; }
  // A host-timed op (CPU), start and end on the host clock.
  void add_host(const std::string& name, std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end, double flops);
  // A GPU op bracketed by two events recorded on the compute stream; resolved later.
  void add_events(std::string name, void* start, void* end, double flops);
  void* take_event();
  // Forgets what was aggregated so far (the first step's one-time setup: plans, library loading).
  void reset();
  // "op  calls  ms per step  share  TFLOP/s" rows, largest first, over `steps` steps
  // (synchronizes to resolve events).
  std::string report(int64_t steps);

  // Trace: from begin_trace on, every op (and on the GPU every collective: add_comm) is recorded;
  // end_trace synchronizes and writes them to `path` as a Chrome trace, rows "compute" and
  // "communication" of process `rank`, microseconds from begin_trace.
  void begin_trace();
  bool tracing() const { return tracing_; }
  void add_comm(std::string name, void* start, void* end);  // events on the communication stream
  void end_trace(const std::string& path, int rank);

 private:
  void collect();  // synchronizes, then turns the pending event pairs into times
  void recycle(void* event);
  struct Entry { int64_t calls = 0; double seconds = 0, flops = 0; };
  struct Pending { std::string name; void* start; void* end; double flops; };
  // A traced op: events on the GPU (stream 0 compute, 1 communication), else host seconds.
  struct Traced { std::string name; int stream; void* start; void* end; double t0, t1, flops; };
  void add_entry(const std::string& name, double seconds, double flops);
  Runtime& rt_;
  bool aggregate_;
  bool tracing_ = false;
  bool paused_ = false;
  std::map<std::string, Entry> entries_;
  std::vector<Pending> pending_;
  std::vector<Traced> traced_;
  std::vector<void*> free_events_;
  void* trace_base_ = nullptr;  // GPU: the event begin_trace recorded on the compute stream
  std::chrono::steady_clock::time_point trace_start_;
};

// Times one op into rt.profiler() when it is timing; does nothing otherwise.
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
  bool active_ = false;
  std::string name_;
  double flops_ = 0;
  void* start_event_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trellis
