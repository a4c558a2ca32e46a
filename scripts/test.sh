#!/usr/bin/env bash
# Configures and builds Trellis in build/ and runs every test with ctest.
# TRELLIS_CUDA=AUTO|ON|OFF (default AUTO) picks the CUDA backend; CUDA tests skip without a GPU.
# TRELLIS_BUILD_DIR (default build) is the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda_env.sh

# mpirun refuses to run as root (containers, CI) without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build=${TRELLIS_BUILD_DIR:-build}
cmake -S . -B "$build" -DTRELLIS_CUDA="${TRELLIS_CUDA:-AUTO}"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure
