// OpProfiler and OpTimer.
#include "core/profiler.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/runtime.h"

namespace trellis {

void OpProfiler::add(const std::string& name, double seconds) {
  Entry& e = entries_[name];
  ++e.calls;
  e.seconds += seconds;
}

std::string OpProfiler::report() const {
  std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                                 calls     total ms   share\n";
  char line[160];
  for (const auto& [name, e] : rows) {
    std::snprintf(line, sizeof line, "%-32s %8lld %12.2f %6.1f%%\n", name.c_str(), (long long)e.calls, e.seconds * 1e3,
                  total > 0 ? 100.0 * e.seconds / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-32s %8s %12.2f\n", "total", "", total * 1e3);
  return out + line;
}

OpTimer::OpTimer(Runtime& rt, const char* name) : rt_(rt), name_(name) {
  if (!rt_.profiler()) return;
  rt_.synchronize();
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  if (!rt_.profiler()) return;
  rt_.synchronize();
  rt_.profiler()->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace trellis
