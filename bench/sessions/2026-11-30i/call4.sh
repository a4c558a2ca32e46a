#!/usr/bin/env bash
# Session call 4 (2×H200): the bias-gradient sums finished inside their one kernel (the last block of
# each column tile sums the partials), with the parity test's new shapes. As call 2: GPU 0: CUDA
# parity tests, the PyTorch check, ln_probe, bench_gpt 124M. GPU 1: the 1.3B per-op profile,
# bench_gpt 350M and 1.3B.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/sessions/2026-11-30i/ln_probe.cu core/dtype.cpp -o /tmp/ln_probe \
  > "$out/probe_build.log" 2>&1 || tail -5 "$out/probe_build.log"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] probe $(date +%T)"
  timeout 120 /tmp/ln_probe > "$out/probe.log" 2>&1; echo "probe exit $?"
  grep -E "op|stream|differ|inline" "$out/probe.log"
  echo "=== [gpu0] bench 124M $(date +%T)"
  timeout 200 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" 2>&1 | grep -E "^\| [0-9]|rror"
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
pid0=$!
export CUDA_VISIBLE_DEVICES=1
echo "=== [gpu1] profile 1.3B $(date +%T)"
source bench/gpt_toml.sh
gpt_toml call4 24 2048 16 16 10 > "$out/prof.toml"
timeout 90 build/train_gpt "$out/prof.toml" --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
sed -n '/per-op device time/,$p' "$out/prof.log" | grep -iE "norm|bias|^total|per-op"
echo "=== [gpu1] bench 350M, 1.3B $(date +%T)"
timeout 330 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" 2>&1 | grep -E "^\| [0-9]|rror"
wait $pid0
cat "$out/gpu0.log"
echo "=== done $(date +%T)"
