#!/usr/bin/env bash
# Session call 2 (one GPU, H100 or H200): dropless routing (moe.dropless) on the GPU. The routing
# kernels against the CPU (and the one-sigmoid refactor's SwiGLU and gate kernels), whole runs against
# the CPU (dropless_gpu.py), then Mixtral 8x125M's step time: capacity factor 1.25 with CUDA graphs,
# the same without graphs, and dropless.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets ops_parity_test train_gpt
echo "=== kernel parity $(date +%T) (${SECONDS}s)"
timeout 200 build/tests/ops_parity_test --gtest_filter='*MoERouting*:*Swiglu*:*SigmoidGate*' > "$out/parity.log" 2>&1
echo "parity exit $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED" "$out/parity.log" | head -20
echo "=== dropless runs against the CPU $(date +%T) (${SECONDS}s)"
(cd tests/e2e && timeout 240 python3 ../../bench/sessions/2026-12-07d/dropless_gpu.py ../../build/train_gpt \
  ../../examples/configs/tiny.toml) > "$out/dropless_gpu.log" 2>&1
echo "dropless_gpu exit $?"; grep -E "^ok|FAIL|PASS" "$out/dropless_gpu.log" | cut -c1-220
echo "=== Mixtral 8x125M, 30 steps each $(date +%T) (${SECONDS}s)"
for v in "capacity:" "capacity_nographs:--set train.cuda_graphs=false" "dropless:--set moe.dropless=true"; do
  name=${v%%:*}; sets=${v#*:}
  timeout 120 build/train_gpt examples/configs/mixtral_8x125m.toml --set train.steps=30 --set log.every=10 \
    --set log.metrics_file= --set log.val_every=0 $sets > "$out/mixtral_$name.log" 2>&1
  echo "$name: exit $? | $(grep -E '^step +30' "$out/mixtral_$name.log" | cut -c1-200) | $(grep -E 'peak|cuda graphs' "$out/mixtral_$name.log" | tr '\n' ' ' | cut -c1-250)"
done
echo "=== done $(date +%T) (${SECONDS}s)"
