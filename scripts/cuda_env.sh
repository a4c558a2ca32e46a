# Sourced by the build scripts: puts a CUDA toolkit installed under /usr/local/cuda on PATH so
# CMake finds nvcc (CUDA stays optional: TRELLIS_CUDA=AUTO builds the CPU backend without it).
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
