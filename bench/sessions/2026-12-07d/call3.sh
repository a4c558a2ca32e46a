#!/usr/bin/env bash
# Session call 3 (one GPU): partial rotary's kernel (RotaryFrequencies::dims) and varying-rows GEMM
# plans (MatmulOptions::rows_vary) against the CPU; dropless runs against the CPU again; Mixtral
# 8x125M's step, capacity factor 1.25 (CUDA graphs) against dropless with the plans made once for a
# power of two of each expert's rows (call 2 made one a call: 41.6 against 27.3 ms), and how many
# plans the dropless run made.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
build_targets ops_parity_test train_gpt
timeout 120 build/tests/ops_parity_test --gtest_filter='*Rotary*:*MatmulRowsVary*:*MoERouting*' > "$out/parity.log" 2>&1
echo "parity exit $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED|Failure" "$out/parity.log" | head -16
echo "=== dropless runs against the CPU (${SECONDS}s)"
(cd tests/e2e && timeout 200 python3 ../../bench/sessions/2026-12-07d/dropless_gpu.py ../../build/train_gpt \
  ../../examples/configs/tiny.toml) > "$out/dropless_gpu.log" 2>&1
echo "dropless_gpu exit $?"; grep -E "^ok|FAIL|PASS" "$out/dropless_gpu.log" | cut -c1-200
echo "=== Mixtral 8x125M, 30 steps each (${SECONDS}s)"
for v in "capacity:" "dropless:--set moe.dropless=true"; do
  name=${v%%:*}; sets=${v#*:}
  TRELLIS_MATMUL_LOG=1 timeout 120 build/train_gpt examples/configs/mixtral_8x125m.toml --set train.steps=30 \
    --set log.every=10 --set log.metrics_file= --set log.val_every=0 $sets > "$out/mixtral_$name.log" 2> "$out/plans_$name.log"
  echo "$name: exit $? | $(grep -E '^step +(20|30)/' "$out/mixtral_$name.log" | cut -c1-170 | tr '\n' ' ') | plans $(grep -c 'plan #' "$out/plans_$name.log")"
done
echo "=== done (${SECONDS}s)"
