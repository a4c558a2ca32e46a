#!/usr/bin/env bash
# Session call 2 (1×H200, the GPU of call 1): bench_gpt 1.3B against PyTorch, three rounds, Trellis
# on PyTorch's cuBLAS/cuDNN (--trellis-libs torch).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== 1.3B $(date +%T)"
timeout 420 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 3 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
echo "=== done $(date +%T)"
