// NVTX ranges around ops and training phases (visible in Nsight Systems); no-ops without CUDA.
#pragma once

namespace trellis {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace trellis
