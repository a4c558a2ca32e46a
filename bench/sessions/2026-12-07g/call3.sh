#!/usr/bin/env bash
# Session call 3 (one GPU): on an H200, issue 8's GPT-2 1.3B against PyTorch (one round); on any
# other card, every CUDA gtest whole (ops, generation and vocabulary-parallel parity), the first
# whole run since the twenty-fifth session.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
if [[ $gpu == *H200* ]]; then
  build_targets train_gpt
  echo "=== GPT-2 1.3B against PyTorch, 1 round $(date +%T) (${SECONDS}s)"
  timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
    --models 1.3b --micro-batch 16 --rounds 1 --out "$out/bench_1.3b_r1.md" > "$out/bench_1.3b_r1.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r1.md"
else
  build_targets ops_parity_test generate_parity_test vocab_parallel_parity_test
  for t in ops_parity_test generate_parity_test vocab_parallel_parity_test; do
    echo "=== $t $(date +%T) (${SECONDS}s)"
    timeout $((560 - SECONDS)) build/tests/$t > "$out/$t.log" 2>&1
    echo "$t exit $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/$t.log" | head -12
  done
fi
echo "=== done $(date +%T) (${SECONDS}s)"
