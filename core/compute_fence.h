// A fence in the compute stream's queued work: record() marks the work queued so far, wait()
// blocks the host until the device has done it (at once when nothing was recorded). Lets the host
// reuse a buffer an earlier asynchronous copy reads without synchronizing the whole device. On the
// CPU ops run synchronously, so both do nothing.
#pragma once

namespace trellis {

class Runtime;

class ComputeFence {
 public:
  explicit ComputeFence(Runtime& rt);
  ~ComputeFence();
  ComputeFence(const ComputeFence&) = delete;
  ComputeFence& operator=(const ComputeFence&) = delete;

  void record();
  void wait();

 private:
  Runtime& rt_;
  void* event_ = nullptr;  // CUDA event; null on the CPU
  bool recorded_ = false;
};

}  // namespace trellis
