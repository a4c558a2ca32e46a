// NVTX ranges (header-only NVTX3 from the CUDA toolkit); empty without CUDA.
#include "core/nvtx.h"

#if TRELLIS_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace trellis {

#if TRELLIS_HAVE_CUDA
NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
#else
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
#endif

}  // namespace trellis
