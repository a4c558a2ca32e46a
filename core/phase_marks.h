// Marks on the compute stream's timeline, to split a training step into phases (forward and
// backward, the wait for gradient communication, ...) without synchronizing: mark(i) records
// where the device is in the queued work; read ms(a, b) only after a synchronize that covers
// both marks. On the CPU, ops run synchronously, so a mark is the host clock.
#pragma once
#include <chrono>
#include <vector>

namespace trellis {

class Runtime;

class PhaseMarks {
 public:
  PhaseMarks(Runtime& rt, int count);
  ~PhaseMarks();
  PhaseMarks(const PhaseMarks&) = delete;
  PhaseMarks& operator=(const PhaseMarks&) = delete;

  void mark(int i);
  double ms(int from, int to) const;

 private:
  Runtime& rt_;
  std::vector<void*> events_;  // CUDA events; empty on the CPU
  std::vector<std::chrono::steady_clock::time_point> host_;
};

}  // namespace trellis
