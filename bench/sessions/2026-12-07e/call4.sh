#!/usr/bin/env bash
# Session call 4 (one GPU): the varying-rows GEMM plans keep their layouts per row count (made once,
# not per call): the GEMM parity with varying rows and the dropless routing against the CPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
build_targets ops_parity_test
timeout 60 build/tests/ops_parity_test --gtest_filter='*MatmulRowsVary*:*MoERouting*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -12
echo "=== done (${SECONDS}s)"
