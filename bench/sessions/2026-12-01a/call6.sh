#!/usr/bin/env bash
# Session call 6 (1×H200): gpu_e2e after the nvme review mends (nvme now held bitwise to cpu offload).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
echo "=== done $(date +%T)"
