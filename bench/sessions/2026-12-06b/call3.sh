#!/usr/bin/env bash
# Session call 3 (one GPU): the PyTorch reference's rotary positions from a table made once (call 2's
# rotation recomputed its angles in float64 at every forward: PyTorch ran 362 ms a step, too slow to
# be a fair peer): its selftest against transformers' Llama rotation, torch_parity_rope, and the
# 1.3B bench_gpt round with both on rotary positions again.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== torch_gpt selftest $(date +%T)"
timeout 120 python3 bench/torch_gpt.py --selftest 2>&1 | tail -3
echo "=== torch_parity_rope $(date +%T)"
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --set model.position_embedding=rope \
  --set model.rope_theta=500 2>&1 | grep -E "loss:|worst|PASS|FAIL" | head -4
echo "=== bench_gpt 1.3B, both with rotary positions $(date +%T)"
timeout 220 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 --rope 10000 2>&1 | tail -4
echo "=== done $(date +%T)"
