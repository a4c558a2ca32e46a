#!/usr/bin/env bash
# Session call 4 (one H200): does the cuBLASLt algorithm tuning pay? 350M and 1.3B (micro-batch 16,
# bf16), Trellis alone, with TRELLIS_MATMUL_TUNE=0 (the heuristic's first algorithm) and tuned
# (the default), alternating, each a bench_gpt.py run of 15 timed steps.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=0
root=$(cd .. && pwd)
deps=$root/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$root/third_party" third_party
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -20; exit 1; }
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --skip-torch --micro-batch 16"
for round in 1 2; do
  for tune in 0 1; do
    echo "=== round $round TRELLIS_MATMUL_TUNE=$tune $(date +%T)"
    TRELLIS_MATMUL_TUNE=$tune timeout 80 $B --models 350m,1.3b 2>&1 | grep -E "tok/s"
  done
done
echo "=== done $(date +%T)"
