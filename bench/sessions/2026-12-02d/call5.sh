#!/usr/bin/env bash
# Session call 5 (1×H200): after tensor and sequence parallelism inside blocks with experts and
# generation with experts (their multi-rank paths need two GPUs: not here). The MoE CUDA parity and
# gpu_e2e (its experts cases: GPU against CPU, graphs, resume) again on the final code.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 100 build/tests/ops_parity_test --gtest_filter='*MoE*' 2>&1 | grep -E "PASSED|FAILED|Failure" -A2 | head -10
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|experts" "$out/gpu_e2e.log" | head -8
echo "=== done $(date +%T)"
