#!/usr/bin/env bash
# Session call 7 (1×H200): after the second reading (the host's split-master AdamW loop through the
# shared update and split_master_bits, whose NaN test is now a select, on the device too): the CUDA
# op parity tests and gpu_e2e.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== ops_parity_test $(date +%T)"
build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "exit $?"; grep -E "PASSED|FAILED" "$out/parity.log" | head -5
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
echo "=== done $(date +%T)"
