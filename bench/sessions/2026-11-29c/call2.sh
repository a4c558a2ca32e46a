#!/usr/bin/env bash
# Session call 2: ZeRO stages 0-3 at data = 2 (GPT-2 1.3B, bench/zero_bench.sh part 1), then
# pipeline = 2 for GPT-2 1.3B at m = 16 (bench/pipeline_bench.sh, with per-stage times).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$(cd .. && pwd)/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep -E "error|Error" /tmp/build.log | head; exit 1; }
echo "=== ZeRO part 1 $(date +%T)"
OUT=/tmp/out PART=1 TIMEOUT=90 WARMUP=2 STEPS=5 bash bench/zero_bench.sh build/train_gpt
for f in /tmp/out/zero/z*.log; do echo "--- $f"; grep -E "^(trellis|memory|data parallel|done)" $f | cut -c1-400; done
echo "=== pipeline m=16 $(date +%T)"
OUT=/tmp/out MS=16 WARMUP=2 STEPS=5 TIMEOUT=90 bash bench/pipeline_bench.sh build/train_gpt
echo "=== done $(date +%T)"
