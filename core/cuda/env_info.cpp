// Environment report of the CUDA side: versions of the driver, runtime, cuBLAS, cuBLASLt, cuDNN
// (when built with it) and NCCL, and each visible GPU with its memory. Every call is checked; failures are reported, not fatal.
#include "core/cuda/env_info.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <nccl.h>
#if TRELLIS_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <cstdio>
#include <string>

namespace trellis::gpu {
namespace {

// 12040 -> "12.4"
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string line(const char* label, const std::string& value) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "  %-22s ", label);
  return buf + value + "\n";
}

}  // namespace

std::string environment_report() {
  std::string out;
  out += line("CUDA runtime (built)", cuda_version_text(CUDART_VERSION));
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    out += line("CUDA runtime (loaded)", cuda_version_text(runtime));

  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  out += line("cuBLAS", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch));
  const size_t lt = cublasLtGetVersion();  // major*10000 + minor*100 + patch
  out += line("cuBLASLt", std::to_string(lt / 10000) + "." + std::to_string((lt % 10000) / 100) + "." +
                              std::to_string(lt % 100));

#if TRELLIS_HAVE_CUDNN
  // The loaded library's version (major*10000 + minor*100 + patch since cuDNN 9): attention's speed
  // follows it, and LD_LIBRARY_PATH may pick another copy than the one built against.
  const size_t dnn = cudnnGetVersion();
  out += line("cuDNN (loaded)", std::to_string(dnn / 10000) + "." + std::to_string((dnn % 10000) / 100) + "." +
                                    std::to_string(dnn % 100));
#endif

  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    out += line("NCCL", std::to_string(nccl / 10000) + "." + std::to_string((nccl % 10000) / 100) +
                            "." + std::to_string(nccl % 100));
  }

  int driver = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  out += line("CUDA driver", driver == 0 ? "none" : cuda_version_text(driver) + " (supports up to this CUDA)");

  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    const std::string why = err != cudaSuccess ? cudaGetErrorString(err) : "0 devices";
    cudaGetLastError();  // clear the error state
    return out + line("GPUs", "no CUDA driver/GPU found (" + why + ")");
  }
  out += line("GPUs", std::to_string(count));
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      out += line(("GPU " + std::to_string(d)).c_str(), "cannot query properties");
      continue;
    }
    size_t free_b = 0, total_b = p.totalGlobalMem;
    std::string mem;
    if (cudaSetDevice(d) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%.1f GiB total, %.1f GiB free", total_b / 1073741824.0,
                    free_b / 1073741824.0);
      mem = buf;
    } else {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.1f GiB total", total_b / 1073741824.0);
      mem = buf;
    }
    char bus[32];
    std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    out += line(("GPU " + std::to_string(d)).c_str(),
                std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
                    std::to_string(p.multiProcessorCount) + " SMs, " + mem + ", PCI " + bus);
  }
  return out;
}

}  // namespace trellis::gpu
