#!/usr/bin/env bash
# Session call 3 (1×H200): after the second review's mends: MoERouting parity now also runs the
# combine without a residual and the dispatch's backward without accumulating (the paths the model
# uses), and the PyTorch MoE check again.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*MoE*' > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure" "$out/parity.log" | head -12
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 \
  --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 2>&1 | tail -2
echo "=== done $(date +%T)"
