#!/usr/bin/env bash
# Session call 3 (one GPU): partial rotary's kernel (RotaryFrequencies::dims) against the CPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
build_targets ops_parity_test
timeout 120 build/tests/ops_parity_test --gtest_filter='*Rotary*' > "$out/rotary.log" 2>&1
echo "rotary parity exit $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED|Failure" "$out/rotary.log" | head -12
echo "=== done (${SECONDS}s)"
