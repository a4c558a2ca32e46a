#!/usr/bin/env bash
# Session call 1 (2×H200): comm_test at 2 ranks (the tenth session's last review mends never ran on
# a GPU); then issue 8 at GPT-2 1.3B micro-batch 16: Trellis against PyTorch (bench_gpt), the per-op
# profile of a Trellis step, and attn_probe.py (each SDPA backend's causal attention at 1.3B's shape).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ" "$out/comm_test.log" | head -20
echo "=== attention probe $(date +%T)"
CUDA_VISIBLE_DEVICES=1 timeout 120 python3 bench/sessions/2026-11-30h/attn_probe.py 2>&1 | grep -v Warning
echo "=== profile 1.3B $(date +%T)"
(
  bin=build/train_gpt; out=$out/prof; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 2048 16 16 10 > "$out/base.toml"
  run prof 1 log.profile_ops=true
  sed -n '/per-op device time/,$p' "$out/prof.log" | head -70
)
echo "=== bench_gpt 1.3B $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 300 python3 bench/bench_gpt.py --models 1.3b --micro-batch 16 --steps 15 --warmup 5 \
  --trellis build/train_gpt --out "$out/bench.md" > "$out/bench.log" 2>&1; echo "bench exit $?"
cat "$out/bench.md"
tar czf "$out/logs.tgz" -C "$out" prof comm_test.log bench.log && rm -rf "$out/prof"
echo "=== done $(date +%T)"
