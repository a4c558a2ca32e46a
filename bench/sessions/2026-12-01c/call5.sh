#!/usr/bin/env bash
# Session call 5 (1×H200): after the review's mends (the capture ended on an exception; an fp16
# case whose loss scale moves, so graphs are captured again): gpu_e2e.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
timeout 260 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP" "$out/gpu_e2e.log" | head -30
echo "=== done $(date +%T)"
