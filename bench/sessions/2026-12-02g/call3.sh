#!/usr/bin/env bash
# Session call 3 (1×H200): the final code after the audit and review mends (host-side: config,
# checkpoints, --plan, data identity): gpu_e2e, the MoE parity, and --plan on a GPU host.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*MoE*' > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) " "$out/parity.log"
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS" "$out/gpu_e2e.log" | head -4
echo "=== plan $(date +%T)"
build/train_gpt examples/configs/gpt2_124m.toml --plan --world 8 --set parallel.pipeline=2 --set train.global_batch=128
echo "=== done $(date +%T)"
