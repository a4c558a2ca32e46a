#!/usr/bin/env bash
# Session call 5 (one H200): the CUDA parity tests after tuning became opt-in (TRELLIS_MATMUL_TUNE=1).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
root=$(cd .. && pwd)
deps=$root/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$root/third_party" third_party
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target ops_parity_test >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head; exit 1; }
echo "=== parity $(date +%T)"
timeout 100 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
