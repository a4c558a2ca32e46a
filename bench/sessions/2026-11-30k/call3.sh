#!/usr/bin/env bash
# Session call 3 (2×H200): every CUDA test of the suite (ctest -L cuda: the parity gtests and the new
# gpu_e2e: one GPU against the CPU, data = 2, ZeRO 1, tensor = 2, pipeline = 2 against one GPU, bf16
# resume bitwise at one GPU and at data = 2).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -E gpu_e2e -j4 --output-on-failure > "$out/ctest.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|\(Failed\)|Timeout|Not Run|Skipped" "$out/ctest.log" | head -20
echo "--- gpu_e2e"
(cd build && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|GPU\(s\)|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -30
echo "=== done $(date +%T)"
