#!/usr/bin/env bash
# Session call 6 (1×H200): after the second reading (GPU waits through Runtime::watch_gpu_wait,
# queue_on_device): the CUDA op parity tests and gpu_e2e.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
for t in ops_parity_test; do
  timeout 200 build/tests/$t > "$out/$t.log" 2>&1; echo "$t exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/$t.log" | head -8
done
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 240 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -20
echo "=== done $(date +%T)"
