#!/usr/bin/env bash
# Session call 4 (2×H200): the cross entropy with its exponentials on the SFU (exp2 with the scale in
# an FMA, one rescale per 4 vectors, the vocabulary's end and the target handled in their vectors
# alone). GPU 0: CUDA parity tests, the PyTorch check, bench_gpt 124M, then fp16 at 1.3B.
# GPU 1: the per-op profile of GPT-2 1.3B micro-batch 16, then bench_gpt 350M and 1.3B.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ|CrossEntropy" "$out/parity.log" | head -20
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] bench 124M $(date +%T)"
  timeout 200 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" 2>&1 | grep -E "^\| [0-9]|rror"
  echo "=== [gpu0] fp16 1.3B (Trellis only) $(date +%T)"
  timeout 150 $B --models 1.3b --micro-batch 16 --skip-torch --precision fp16 2>&1 | grep -E "^\| [0-9]|rror"
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
pid0=$!
export CUDA_VISIBLE_DEVICES=1
echo "=== [gpu1] profiles $(date +%T)"
for model in "1.3B 24 2048 16 16" "124M 12 768 12 32"; do
  set -- $model
  source bench/gpt_toml.sh
  gpt_toml call4 $2 $3 $4 $5 10 > "$out/prof_$1.toml"
  timeout 90 build/train_gpt "$out/prof_$1.toml" --set log.profile_ops=true > "$out/prof_$1.log" 2>&1 || echo "prof $1 FAILED"
  echo "--- $1"
  sed -n '/per-op device time/,$p' "$out/prof_$1.log" | grep -E "cross_entropy|^total|per-op"
done
echo "=== [gpu1] bench 350M, 1.3B $(date +%T)"
timeout 330 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" 2>&1 | grep -E "^\| [0-9]|rror"
wait $pid0
cat "$out/gpu0.log"
echo "=== done $(date +%T)"
