#!/usr/bin/env bash
# Session call 4 (one GPU): after the review's mends (varying-rows plans check each row count once;
# dropless checks its counts add up): the GEMM and routing parity, dropless runs against the CPU, and
# the dropless Mixtral 8x125M step with its plan count.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
build_targets ops_parity_test train_gpt
timeout 100 build/tests/ops_parity_test --gtest_filter='*MatmulRowsVary*:*MoERouting*:*Matmul:*Rotary*' > "$out/parity.log" 2>&1
echo "parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -12
(cd tests/e2e && timeout 150 python3 ../../bench/sessions/2026-12-07d/dropless_gpu.py ../../build/train_gpt \
  ../../examples/configs/tiny.toml) > "$out/dropless_gpu.log" 2>&1
echo "dropless_gpu exit $?"; grep -E "^ok|FAIL|PASS" "$out/dropless_gpu.log" | cut -c1-160
TRELLIS_MATMUL_LOG=1 timeout 90 build/train_gpt examples/configs/mixtral_8x125m.toml --set train.steps=30 --set log.every=10 \
  --set log.metrics_file= --set log.val_every=0 --set moe.dropless=true > "$out/mixtral_dropless.log" 2> "$out/plans.log"
echo "dropless mixtral: exit $? | $(grep -E '^step +30/' "$out/mixtral_dropless.log" | cut -c1-170) | plans $(grep -c 'plan #' "$out/plans.log")"
echo "=== done (${SECONDS}s)"
