// env_report: what a user pastes into a bug report (source version, build options, compiler, MPI, OpenBLAS,
// OpenMP, CUDA driver/runtime, GPUs, NCCL, cuBLAS). Prints from rank 0 only.
#include <mpi.h>
#include <omp.h>

#include <cstdio>
#include <string>

#include "core/runtime.h"
#include "core/version.h"
#if TRELLIS_HAVE_CUDA
#include "core/cuda/env_info.h"
#endif

// OpenBLAS's own description of itself (CMake requires OpenBLAS; cblas.h is private to core).
extern "C" char* openblas_get_config();
extern "C" int openblas_get_num_threads();

namespace {

void row(const char* label, const std::string& value) {
  std::printf("  %-22s %s\n", label, value.c_str());
}

std::string build_type() {
#if defined(TRELLIS_BUILD_TYPE)
  std::string s = TRELLIS_BUILD_TYPE;
#else
  std::string s;
#endif
#if defined(NDEBUG)
  s += s.empty() ? "NDEBUG" : " (NDEBUG)";
#else
  s += s.empty() ? "assertions on" : " (assertions on)";
#endif
#if defined(__OPTIMIZE__)
  s += ", optimized";
#else
  s += ", not optimized";
#endif
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {  // no options: --help says so, anything else is an error
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: env_report   (alone, or under mpirun / srun; rank 0 prints)\n"
                  "Prints the source version, the build options and compiler, MPI, OpenBLAS, OpenMP, the CUDA driver and runtime, the "
                  "GPUs, NCCL and cuBLAS: what a bug report needs.\n");
      return 0;
    }
    std::fprintf(stderr, "error: env_report takes no arguments, got \"%s\" (see --help)\n", arg.c_str());
    return 1;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    std::printf("Trellis environment report\n\nBuild\n");
    row("source version", trellis::source_version());
    row("CUDA backend", trellis::built_with_cuda() ? "built" : "not built (TRELLIS_CUDA=OFF or no CUDA found)");
#if defined(__clang__)
    row("compiler", "Clang " __VERSION__);
#elif defined(__GNUC__)
    row("compiler", "GCC " __VERSION__);
#else
    row("compiler", __VERSION__);
#endif
    row("C++ standard", std::to_string(__cplusplus));
    row("build type", build_type());

    std::printf("\nMPI\n");
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string lib(version, len > 0 ? static_cast<size_t>(len) : 0);
    while (!lib.empty() && (lib.back() == '\n' || lib.back() == '\0')) lib.pop_back();
    for (auto& ch : lib) ch = ch == '\n' ? ' ' : ch;  // some libraries report several lines
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    row("library", lib);
    row("standard", std::to_string(major) + "." + std::to_string(minor));
    row("world size", std::to_string(world));

    std::printf("\nCPU\n");
    row("OpenBLAS", openblas_get_config());
    // Trellis's GEMMs call OpenBLAS on one thread and share their blocks over OpenMP's threads
    // (core/cpu/matmul.cpp); OpenBLAS's own pool size is what other callers would get.
    row("OpenBLAS threads", std::to_string(openblas_get_num_threads()) + " (Trellis's GEMMs: 1 a call, blocks over the OpenMP threads)");
    row("OpenMP max threads", std::to_string(omp_get_max_threads()));

    std::printf("\nCUDA\n");
    const int gpus = trellis::cuda_device_count();
    row("visible devices", std::to_string(gpus));
#if TRELLIS_HAVE_CUDA
    std::fputs(trellis::gpu::environment_report().c_str(), stdout);
#endif
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
