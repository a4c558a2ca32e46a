#!/usr/bin/env bash
# Session call 1 (one GPU): the one-sigmoid refactor's kernels (SwiGLU, the shared gate) against the
# CPU, then, on an H200 only, issue 8's GPT-2 1.3B against the PyTorch reference (two rounds).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets ops_parity_test train_gpt
echo "=== kernel parity (SwiGLU, sigmoid gate) $(date +%T) (${SECONDS}s)"
build/tests/ops_parity_test --gtest_filter='*Swiglu*:*SigmoidGate*' 2>&1 | tail -15
if [[ $gpu != *H200* ]]; then echo "=== not an H200 ($gpu): no issue-8 rounds"; exit 0; fi
echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
echo "=== done $(date +%T) (${SECONDS}s)"
