// OpProfiler (aggregate per-op times, one-step traces) and OpTimer.
#include "core/profiler.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "core/runtime.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/device_runtime.h"
#endif

namespace trellis {

namespace {
constexpr size_t kMaxPending = 8192;  // resolve (one synchronization) every few steps at most
constexpr int kComputeStream = 0, kCommStream = 1;
double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

OpProfiler::~OpProfiler() {
#if TRELLIS_HAVE_CUDA
  if (!pending_.empty() || !traced_.empty()) rt_.synchronize();
  for (auto& p : pending_) {
    gpu::destroy_timing_event(p.start);
    gpu::destroy_timing_event(p.end);
  }
  for (auto& t : traced_) {
    if (t.start) gpu::destroy_timing_event(t.start);
    if (t.end) gpu::destroy_timing_event(t.end);
  }
  if (trace_base_) gpu::destroy_timing_event(trace_base_);
  for (void* e : free_events_) gpu::destroy_timing_event(e);
#endif
}

void OpProfiler::add_entry(const std::string& name, double seconds, double flops) {
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

void OpProfiler::recycle(void* event) {
  if (event) free_events_.push_back(event);
}

void OpProfiler::add_host(const std::string& name, std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end, double flops) {
  if (aggregate_) add_entry(name, seconds_between(start, end), flops);
  if (tracing_)
    traced_.push_back({name, kComputeStream, nullptr, nullptr, seconds_between(trace_start_, start),
                       seconds_between(trace_start_, end), 0.0});
}

void OpProfiler::add_events(std::string name, void* start, void* end, double flops) {
  if (tracing_) {  // resolved by end_trace, which also aggregates them
    traced_.push_back({std::move(name), kComputeStream, start, end, 0.0, 0.0, flops});
    return;
  }
  pending_.push_back({std::move(name), start, end, flops});
  if (pending_.size() >= kMaxPending) collect();
}

void OpProfiler::collect() {
#if TRELLIS_HAVE_CUDA
  if (pending_.empty()) return;
  rt_.synchronize();
  for (auto& p : pending_) {
    add_entry(p.name, 1e-3 * gpu::event_ms(p.start, p.end), p.flops);
    recycle(p.start);
    recycle(p.end);
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

void OpProfiler::begin_trace() {
  TRELLIS_CHECK(!tracing_, "OpProfiler: a trace is already running");
  tracing_ = true;
  traced_.clear();
  trace_start_ = std::chrono::steady_clock::now();
#if TRELLIS_HAVE_CUDA
  if (rt_.cuda()) {
    trace_base_ = take_event();
    gpu::record_on_compute(rt_.cuda(), trace_base_);
  }
#endif
}

void OpProfiler::add_comm(std::string name, void* start, void* end) {
  traced_.push_back({std::move(name), kCommStream, start, end, 0.0, 0.0, 0.0});
}

void OpProfiler::end_trace(const std::string& path, int rank) {
  TRELLIS_CHECK(tracing_, "OpProfiler: no trace is running");
  tracing_ = false;
  rt_.synchronize();
#if TRELLIS_HAVE_CUDA
  for (Traced& t : traced_) {
    if (!t.start) continue;
    t.t0 = 1e-3 * gpu::event_ms(trace_base_, t.start);
    t.t1 = 1e-3 * gpu::event_ms(trace_base_, t.end);
    if (aggregate_ && t.stream == kComputeStream) add_entry(t.name, t.t1 - t.t0, t.flops);
    recycle(t.start);
    recycle(t.end);
    t.start = t.end = nullptr;
  }
  recycle(trace_base_);
  trace_base_ = nullptr;
#endif
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  char buf[160];
  for (int s : {kComputeStream, kCommStream}) {
    std::snprintf(buf, sizeof buf, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ",
                  rank, s);
    out += buf + json_quote(s == kComputeStream ? "compute" : "communication") + "}},\n";
  }
  std::snprintf(buf, sizeof buf, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": ", rank);
  out += buf + json_quote("rank " + std::to_string(rank)) + "}}";
  for (const Traced& t : traced_) {
    std::snprintf(buf, sizeof buf, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"name\": ", rank,
                  t.stream, t.t0 * 1e6, std::max(0.0, t.t1 - t.t0) * 1e6);
    out += buf + json_quote(t.name) + "}";
  }
  out += "\n]}\n";
  traced_.clear();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << out;
  f.close();
  if (!f) throw UserError("log.trace_file: cannot write " + path);
}

OpTimer::OpTimer(Runtime& rt, std::string detail, const char* name, double flops) : rt_(rt), flops_(flops) {
  OpProfiler* prof = rt_.profiler();
  if (!prof || !prof->timing()) return;
  active_ = true;
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
  if (!active_) return;
  OpProfiler* prof = rt_.profiler();
#if TRELLIS_HAVE_CUDA
  if (start_event_) {
    void* end = prof->take_event();
    gpu::record_on_compute(rt_.cuda(), end);
    prof->add_events(std::move(name_), start_event_, end, flops_);
    return;
  }
#endif
  prof->add_host(name_, start_, std::chrono::steady_clock::now(), flops_);
}

}  // namespace trellis
