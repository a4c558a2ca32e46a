// OpProfiler and OpTimer.
#include "core/profiler.h"

#include <algorithm>
#include <cstdio>

#include "core/runtime.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/device_runtime.h"
#endif

namespace trellis {

namespace {
constexpr size_t kMaxPending = 8192;  // resolve (one synchronization) every few steps at most
}

OpProfiler::~OpProfiler() {
#if TRELLIS_HAVE_CUDA
  if (!pending_.empty()) rt_.synchronize();
  for (auto& p : pending_) {
    gpu::destroy_timing_event(p.start);
    gpu::destroy_timing_event(p.end);
  }
  for (void* e : free_events_) gpu::destroy_timing_event(e);
#endif
}

void OpProfiler::add(const std::string& name, double seconds, double flops) {
  Entry& e = entries_[name];
  ++e.calls;
  e.seconds += seconds;
  e.flops += flops;
}

void* OpProfiler::take_event() {
#if TRELLIS_HAVE_CUDA
  if (!free_events_.empty()) {
    void* e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  return gpu::create_timing_event();
#else
  return nullptr;
#endif
}

void OpProfiler::add_pending(std::string name, void* start, void* end, double flops) {
  pending_.push_back({std::move(name), start, end, flops});
  if (pending_.size() >= kMaxPending) collect();
}

void OpProfiler::collect() {
#if TRELLIS_HAVE_CUDA
  if (pending_.empty()) return;
  rt_.synchronize();
  for (auto& p : pending_) {
    add(p.name, 1e-3 * gpu::event_ms(p.start, p.end), p.flops);
    free_events_.push_back(p.start);
    free_events_.push_back(p.end);
  }
  pending_.clear();
#endif
}

void OpProfiler::reset() {
  collect();
  entries_.clear();
}

std::string OpProfiler::report(int64_t steps) {
  collect();
  const double per = steps > 0 ? double(steps) : 1.0;
  std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                                                   calls/step  ms/step   share  TFLOP/s\n";
  char line[200];
  for (const auto& [name, e] : rows) {
    char tflops[16] = "";
    if (e.flops > 0 && e.seconds > 0) std::snprintf(tflops, sizeof tflops, "%8.1f", e.flops / e.seconds * 1e-12);
    std::snprintf(line, sizeof line, "%-52s %8.1f %10.3f %6.1f%% %s\n", name.c_str(), double(e.calls) / per,
                  e.seconds * 1e3 / per, total > 0 ? 100.0 * e.seconds / total : 0.0, tflops);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-52s %8s %10.3f\n", "total", "", total * 1e3 / per);
  return out + line;
}

OpTimer::OpTimer(Runtime& rt, std::string detail, const char* name, double flops) : rt_(rt), flops_(flops) {
  OpProfiler* prof = rt_.profiler();
  if (!prof) return;
  name_ = detail.empty() ? std::string(name) : std::string(name) + " " + detail;
#if TRELLIS_HAVE_CUDA
  if (rt_.cuda()) {
    start_event_ = prof->take_event();
    gpu::record_on_compute(rt_.cuda(), start_event_);
    return;
  }
#endif
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  OpProfiler* prof = rt_.profiler();
  if (!prof) return;
#if TRELLIS_HAVE_CUDA
  if (start_event_) {
    void* end = prof->take_event();
    gpu::record_on_compute(rt_.cuda(), end);
    prof->add_pending(std::move(name_), start_event_, end, flops_);
    return;
  }
#endif
  prof->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), flops_);
}

}  // namespace trellis
