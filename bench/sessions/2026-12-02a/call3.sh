#!/usr/bin/env bash
# Session call 3 (1×H200): GPT-2 1.3B against PyTorch after the layer-norm backward's 32-row chunks,
# three rounds (the order alternating).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== bench $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16"
timeout 420 $B --rounds 3 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1; echo "exit $?"
grep -hE "^\| [0-9]|rror|ratio" "$out/bench_1.3b.md"
echo "=== done $(date +%T)"
