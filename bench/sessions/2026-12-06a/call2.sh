#!/usr/bin/env bash
# Session call 2 (one H200): GPT-2 1.3B against PyTorch, one round (issue 8 tally; no change to the
# dense step this session).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== 1.3B against PyTorch $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 2>&1 | grep -E "^\||loaded"
echo "=== done $(date +%T)"
