#!/usr/bin/env bash
# Session call 1 (one GPU, H100 or H200): QK-norm's qkv made again in backward (no longer kept) and
# Qwen2-MoE's gated shared MLP in whole runs on the GPU: Qwen3's torch parity on the GPU, then gpu_e2e
# (its QK-norm case, GPU against CPU and bf16 graphs against launched; its new Qwen2-MoE case).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets train_gpt
QWEN3="--set model.n_kv_heads=2 --set model.qk_norm=true --set model.head_dim=24 --set model.mlp=swiglu
  --set model.ffn_hidden_size=88 --set model.bias=false --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500"
for ck in none selective full; do
  timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda $QWEN3 \
    --set train.checkpointing=$ck > "$out/parity_qwen3_$ck.log" 2>&1
  echo "QWEN3 checkpointing $ck: exit $? $(grep -E 'gradient tensors' "$out/parity_qwen3_$ck.log")"
done
echo "=== gpu_e2e $(date +%T) (${SECONDS}s)"
(cd tests/e2e && timeout 400 python3 gpu_e2e.py ../../build/train_gpt "$(command -v mpiexec)" ../../examples/configs/tiny.toml) \
  > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -E "^(ok|FAIL)" "$out/gpu_e2e.log" | grep -E "FAIL|QK-norm|Qwen2-MoE" | cut -c1-220
echo "ok lines: $(grep -c '^ok' "$out/gpu_e2e.log")"
echo "=== done $(date +%T) (${SECONDS}s)"
