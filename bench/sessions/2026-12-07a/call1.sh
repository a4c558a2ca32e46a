#!/usr/bin/env bash
# Session call 1 (one GPU): issue 8's GPT-2 1.3B against the PyTorch reference, one round; then
# Llama's architecture at the 1.3B shape against the PyTorch reference with the same architecture
# (rotary positions, SwiGLU of width 5504, RMSNorm, 8 of 16 key-value heads, an untied head, no linear
# biases), one round. train_gpt and ops_parity_test built alone; the matmul and rotary parity tests
# first (rotary now also with Llama 3.2's scaled frequencies, model.rope_scaling = llama3).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt ops_parity_test
timeout 60 build/tests/ops_parity_test --gtest_filter='*Matmul*:*Rotary*' 2>&1 | grep -E "PASSED|FAILED|Failure" | head -8
echo "=== GPT-2 1.3B against PyTorch $(date +%T) (${SECONDS}s)"
timeout 300 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
echo "=== Llama 1.3B against PyTorch $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 --rope 10000 --swiglu --ffn-hidden 5504 --rmsnorm --kv-heads 8 --untied \
  --no-bias --out "$out/bench_llama_1.3b.md" > "$out/bench_llama_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- |^Both" "$out/bench_llama_1.3b.md"
echo "=== done $(date +%T) (${SECONDS}s)"
