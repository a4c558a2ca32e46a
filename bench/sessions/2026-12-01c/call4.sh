#!/usr/bin/env bash
# Session call 4 (1×H200): after the next step's batch is drawn while the GPU runs the current
# one (graphs): gpu_e2e; bench_gpt 1.3B against PyTorch (two rounds), 124M.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
timeout 200 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP" "$out/gpu_e2e.log" | head -30
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== 1.3B $(date +%T)"
timeout 230 $B --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1; echo "exit $?"
echo "=== 124M $(date +%T)"
timeout 90 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1; echo "exit $?"
grep -hE "^\| [0-9]|rror" "$out"/bench_*.md
echo "=== done $(date +%T)"
