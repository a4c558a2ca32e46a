#!/usr/bin/env bash
# Session call 5 (2×H200): gpu_e2e after the review mends of the launcher's safety changes
# (choose_resume before the model is built, the metrics file moved aside on resume).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
(cd build && cmake . > /dev/null && timeout 200 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -12
echo "=== done $(date +%T)"
