#!/usr/bin/env bash
# Session call 2 (one GPU): LongRoPE on the GPU. The rotary kernels against the CPU (a factor a pair,
# with the amplitude), and the PyTorch reference on the GPU in fp32 with the long and the short factors.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
build_targets ops_parity_test train_gpt
timeout 100 build/tests/ops_parity_test --gtest_filter='*Rotary*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -12
for o in 16 64; do
  timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda \
    --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu \
    --set model.bias=false --set model.rope_scaling=longrope --set model.rope_original_positions=$o \
    --set model.rope_scaling_factor=2 --set model.rope_long_factor=1,1.5,2,3,4,6,8,16 \
    --set model.rope_short_factor=1,1.1,1.2,1.3,1.4,1.5,1.6,1.7 > "$out/torch_parity_$o.log" 2>&1
  echo "torch_parity (original $o) exit $? | $(grep -E 'loss:' "$out/torch_parity_$o.log")"
done
echo "=== done (${SECONDS}s)"
