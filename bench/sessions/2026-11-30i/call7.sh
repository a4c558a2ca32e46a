#!/usr/bin/env bash
# Session call 7 (1×H200): the CUDA parity tests on the last code commit (the one-vector layer-norm
# backward back to 32-row chunks); only ops_parity_test is built.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target ops_parity_test >> "$out/build.log" 2>&1 || { tail -5 "$out/build.log"; exit 1; }
echo "=== parity $(date +%T)"
timeout 100 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -20
echo "=== done $(date +%T)"
