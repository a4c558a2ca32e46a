#!/usr/bin/env bash
# Session call 1: ZeRO stages 0-3 at data = 2 (GPT-2 1.3B: tokens/s and model-state memory against
# the formula), then the largest GPT per stage (bench/zero_bench.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$(cd .. && pwd)/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
echo "=== ZeRO part 1 $(date +%T)"
OUT=/tmp/out PART=1 TIMEOUT=150 bash bench/zero_bench.sh build/train_gpt
echo "=== ZeRO part 2 $(date +%T)"
OUT=/tmp/out PART=2 TIMEOUT=150 bash bench/zero_bench.sh build/train_gpt
echo "=== done $(date +%T)"
