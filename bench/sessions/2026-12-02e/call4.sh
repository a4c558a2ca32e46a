#!/usr/bin/env bash
# Session call 4 (1×H200): after a review's mends to the batched paths (a batch whose experts'
# rows leave too few chunks runs bias_backward one expert at a time; a batched bias needs 16-byte
# strides; the cached absence of a batched plan exercised). The batched and bias-gradient parity tests.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets ops_parity_test
echo "=== parity $(date +%T)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*Batched*:*BiasBackward*:*Matmul*:*MoE*' 2>&1 |
  grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure" -A1 | head -40
echo "=== done $(date +%T)"
