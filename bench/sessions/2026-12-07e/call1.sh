#!/usr/bin/env bash
# Session call 1 (one GPU, H100 or H200): sliding-window attention on the GPU. The attention kernels
# against the CPU (cuDNN's band, the own flash kernels, the unfused path) and the KV-cache ops, the
# PyTorch reference on the GPU in fp32, then a Llama-shaped 124M at 4096 tokens, bf16: every position
# against windows of 1024 and 256 (what skipping the blocks outside the window saves).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets ops_parity_test generate_parity_test train_gpt
echo "=== kernel parity $(date +%T) (${SECONDS}s)"
timeout 200 build/tests/ops_parity_test --gtest_filter='*Attention*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|cuDNN takes" "$out/parity.log" | head -20
timeout 60 build/tests/generate_parity_test > "$out/generate_parity.log" 2>&1
echo "generate_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED" "$out/generate_parity.log" | head -8
echo "=== PyTorch reference on the GPU, fp32 $(date +%T) (${SECONDS}s)"
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda \
  --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu \
  --set model.bias=false --set model.n_kv_heads=2 --set model.sliding_window=8 > "$out/torch_parity.log" 2>&1
echo "torch_parity exit $?"; grep -E "loss:|PASS|FAIL" "$out/torch_parity.log" | head -5
echo "=== Llama-shaped 124M, 4096 tokens, bf16, 20 steps $(date +%T) (${SECONDS}s)"
for w in 0 1024 256; do
  timeout 100 build/train_gpt bench/profile_124m.toml --set model.position_embedding=rope --set model.norm=rmsnorm \
    --set model.mlp=swiglu --set model.bias=false --set model.seq_len=4096 --set train.micro_batch=8 \
    --set train.steps=20 --set log.every=10 --set model.sliding_window=$w > "$out/window_$w.log" 2>&1
  echo "window $w: exit $? | $(grep -E '^step +20/' "$out/window_$w.log" | cut -c1-200)"
done
echo "=== done $(date +%T) (${SECONDS}s)"
