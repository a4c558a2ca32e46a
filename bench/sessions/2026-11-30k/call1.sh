#!/usr/bin/env bash
# Session call 1 (2×H200). GPU 0: the CUDA parity tests and the PyTorch check (e15f486's split-master
# arithmetic from core/dtype.h had not run on a GPU), then bench/layout_3d.sh's one-GPU curves for
# GPT-2 1.3B (100 steps, global batch 64 x 1024 tokens, micro-batch 4 and 2). GPU 1 meanwhile: the
# 1.3B per-op profile (micro-batch 16) and bench_gpt 1.3B against PyTorch. Then both GPUs: the same
# 100 steps at (tensor, pipeline, data) = (1, 2, 1), 1F1B.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
source bench/gpt_toml.sh
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] layout_3d one-GPU runs $(date +%T)"
  MODEL=1.3b NP=2 TP=1 PP=2 RUNS="base base_mb" TIMEOUT=200 bash bench/layout_3d.sh build/train_gpt
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
export CUDA_VISIBLE_DEVICES=1
gpt_toml call1 24 2048 16 16 12 > "$out/m1.3b.toml"
echo "=== [gpu1] profile $(date +%T)"
timeout 90 build/train_gpt "$out/m1.3b.toml" --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
sed -n '/per-op device time/,$p' "$out/prof.log" | head -60
echo "=== [gpu1] bench $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16 \
  --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
grep -hE "^\| [0-9]|rror" "$out/bench_1.3b.md"
wait
cat "$out/gpu0.log"
unset CUDA_VISIBLE_DEVICES
echo "=== layout_3d at (1, 2, 1) $(date +%T)"
MODEL=1.3b NP=2 TP=1 PP=2 RUNS="3d" TIMEOUT=150 bash bench/layout_3d.sh build/train_gpt
tar czf /tmp/call1.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call1.tgz "$out/"
echo "=== done $(date +%T)"
