#!/usr/bin/env bash
# Session call 4 (2×H200): after the launcher's safety changes (checkpoint.dir guard, metrics file
# on resume, signal handling), gpu_e2e on both GPUs (resume at one GPU and at data = 2 goes
# through the new checks); then bench_gpt against PyTorch on this commit: GPU 0 124M (micro-batch
# 32) and 350M (16), GPU 1 1.3B (16).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== gpu_e2e $(date +%T)"
(cd build && timeout 200 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -12
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== bench $(date +%T)"
(export CUDA_VISIBLE_DEVICES=0
 timeout 200 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1
 timeout 200 $B --models 350m --micro-batch 16 --out "$out/bench_350m.md" > "$out/bench_350m.log" 2>&1) &
CUDA_VISIBLE_DEVICES=1 timeout 300 $B --models 1.3b --micro-batch 16 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
wait
grep -hE "^\| [0-9]|rror" "$out/bench_124m.md" "$out/bench_350m.md" "$out/bench_1.3b.md"
echo "=== done $(date +%T)"
