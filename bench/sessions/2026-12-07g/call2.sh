#!/usr/bin/env bash
# Session call 2 (one GPU): issue 8's GPT-2 1.3B against the PyTorch reference, two rounds, on the
# card that came (the issue's goal is on an H200; an H100's rounds are recorded apart).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
echo "=== done $(date +%T) (${SECONDS}s)"
