#!/usr/bin/env bash
# Session call 1 (one GPU): on an H200 only, issue 8's GPT-2 1.3B against the PyTorch reference
# (two rounds, alternating which runs first). On any other card it stops at once, so a call that
# got an H100 costs only the machine's start.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
if [[ $gpu != *H200* ]]; then echo "=== not an H200 ($gpu): nothing run"; exit 0; fi
build_targets train_gpt
echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
echo "=== done $(date +%T) (${SECONDS}s)"
