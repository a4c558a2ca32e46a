#!/usr/bin/env bash
# Session call 1 (one GPU): issue 8's measurement. The PyTorch reference's selftest (its rope dump
# round trip, never run on a GPU machine); GPT-2 1.3B against PyTorch, two rounds; 124M and 350M,
# one round each. Trellis on PyTorch's cuBLAS/cuDNN wheels (--trellis-libs torch), as before.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
echo "=== torch selftest $(date +%T)"
timeout 120 python3 bench/torch_gpt.py --selftest 2>&1 | tail -6
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch"
echo "=== 1.3B $(date +%T)"
timeout 260 $B --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
echo "=== 124M $(date +%T)"
timeout 110 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_124m.md"
echo "=== 350M $(date +%T)"
timeout 110 $B --models 350m --micro-batch 16 --out "$out/bench_350m.md" > "$out/bench_350m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_350m.md"
echo "=== done $(date +%T)"
