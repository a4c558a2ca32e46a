#!/usr/bin/env bash
# Session call 3 (one GPU), for the ~6 minutes of device time left: the CUDA parity tests of the
# norms (Parity.RmsNorm new, LayerNorm's after the change) and of SwiGLU, then Llama's block (RMSNorm,
# rope, SwiGLU at width 90) on the GPU against the CPU in fp32, and in bf16 (losses printed).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets ops_parity_test train_gpt
echo "=== parity $(date +%T) (${SECONDS}s)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*RmsNorm*:*LayerNorm*:*Swiglu*:*BiasBackward*' 2>&1 |
  grep -E "^\[  (PASSED|FAILED)|FAILED|tests ran" | head -12
echo "=== Llama's block, width 90 $(date +%T) (${SECONDS}s)"
L="--set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu"
L="$L --set model.ffn_hidden_size=90 --set train.steps=8 --set log.every=1 --set train.deterministic=true"
for run in "cpu fp32" "cuda fp32" "cuda bf16"; do
  set -- $run
  echo "$run: $(timeout 60 build/train_gpt examples/configs/tiny.toml $L --set train.device=$1 --set train.precision=$2 2>&1 |
    grep -E '^step +[0-9]+/8 \| loss' | awk '{print $5}' | tr '\n' ' ')"
done
echo "=== done $(date +%T) (${SECONDS}s)"
