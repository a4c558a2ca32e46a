#!/usr/bin/env bash
# Session call 3 (1×H200): bench_gpt against PyTorch with Trellis on PyTorch's cuBLAS/cuDNN wheels
# (--trellis-libs torch): 124M (micro-batch 32), 350M (16), then 1.3B (16) for two more rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch"
echo "=== 124M $(date +%T)"
timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_124m.md"
echo "=== 350M $(date +%T)"
timeout 150 $B --models 350m --micro-batch 16 --out "$out/bench_350m.md" > "$out/bench_350m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_350m.md"
echo "=== 1.3B $(date +%T)"
timeout 240 $B --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
echo "=== done $(date +%T)"
