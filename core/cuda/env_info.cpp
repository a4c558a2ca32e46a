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

// major*10000 + minor*100 + patch (cuBLASLt, NCCL >= 2.9, cuDNN 9) -> "13.1.0"
std::string dotted(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

std::string line(const char* label, const std::string& value) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "  %-22s ", label);
  return buf + value + "\n";
}

// The versions of the libraries as loaded (LD_LIBRARY_PATH may pick other copies than the ones
// built against, and speed follows them: cuDNN's attention, say); empty where a query fails.
struct Libraries {
  std::string runtime, cublas, cublas_lt, cudnn, nccl;
};
Libraries loaded_libraries() {
  Libraries l;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) l.runtime = cuda_version_text(runtime);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    l.cublas = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  l.cublas_lt = dotted(cublasLtGetVersion());
#if TRELLIS_HAVE_CUDNN
  const size_t dnn = cudnnGetVersion();  // cuDNN 8: major*1000 + minor*100 + patch
  l.cudnn = dnn >= 10000 ? dotted(dnn)
                         : std::to_string(dnn / 1000) + "." + std::to_string((dnn % 1000) / 100) + "." +
                               std::to_string(dnn % 100);
#endif
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) l.nccl = dotted(size_t(nccl));
  return l;
}

}  // namespace

std::string library_versions() {
  const Libraries l = loaded_libraries();
  std::string out;
  auto add = [&](const char* name, const std::string& v) {
    if (!v.empty()) out += (out.empty() ? "" : ", ") + std::string(name) + " " + v;
  };
  add("CUDA runtime", l.runtime);
  add("cuBLASLt", l.cublas_lt);
  add("cuDNN", l.cudnn);
  add("NCCL", l.nccl);
  return out;
}

std::string environment_report() {
  const Libraries l = loaded_libraries();
  std::string out;
  out += line("CUDA runtime (built)", cuda_version_text(CUDART_VERSION));
  if (!l.runtime.empty()) out += line("CUDA runtime (loaded)", l.runtime);
  if (!l.cublas.empty()) out += line("cuBLAS", l.cublas);
  out += line("cuBLASLt", l.cublas_lt);
  if (!l.cudnn.empty()) out += line("cuDNN (loaded)", l.cudnn);
  if (!l.nccl.empty()) out += line("NCCL", l.nccl);

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
