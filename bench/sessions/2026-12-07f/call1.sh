#!/usr/bin/env bash
# Session call 1 (one GPU): the varying-rows GEMM plans (c9583e2) and dropless routing against the CPU;
# then on an H200 issue 8's GPT-2 1.3B against PyTorch (two rounds), on any other GPU the shipped
# Phi-3-mini-4k example (4 steps on synthetic tokens: does it fit, at what speed).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets ops_parity_test train_gpt
echo "=== parity (varying rows, MoE routing) $(date +%T) (${SECONDS}s)"
timeout 60 build/tests/ops_parity_test --gtest_filter='*MatmulRowsVary*:*MoERouting*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -12
if [[ $gpu == *H200* ]]; then
  echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
  timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
    --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
else
  echo "=== not an H200 ($gpu): the Phi-3-mini-4k example instead $(date +%T) (${SECONDS}s)"
  timeout 240 build/train_gpt examples/configs/phi3_mini_4k_finetune.toml --set data.source=synthetic --set data.path= \
    --set train.steps=4 --set log.every=1 --set log.val_every=0 --set checkpoint.dir= --set log.metrics_file= > "$out/phi3.log" 2>&1
  echo "phi3 exit $? | $(grep -E '^step +4/' "$out/phi3.log" | cut -c1-220) | $(grep -E '^done|error|memory' "$out/phi3.log" | head -3 | cut -c1-220)"
fi
echo "=== done $(date +%T) (${SECONDS}s)"
