#!/usr/bin/env bash
# Session call 3 (1×H200): issue 8 with CUDA graphs (train.cuda_graphs, default on): bench_gpt
# 124M, 350M and 1.3B (two rounds, the order alternated) against PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== 1.3B $(date +%T)"
timeout 280 $B --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1; echo "exit $?"
echo "=== 124M 350M $(date +%T)"
timeout 120 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1; echo "exit $?"
timeout 120 $B --models 350m --micro-batch 16 --out "$out/bench_350m.md" > "$out/bench_350m.log" 2>&1; echo "exit $?"
grep -hE "^\| [0-9]|rror" "$out"/bench_*.md
echo "=== done $(date +%T)"
