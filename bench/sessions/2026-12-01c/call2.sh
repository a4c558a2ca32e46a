#!/usr/bin/env bash
# Session call 2 (1×H200): the step without a host wait (AdamW's scalars on the device) and steps
# replayed as CUDA graphs (train.cuda_graphs). CUDA parity (AdamWFromStepScalars among them), the
# PyTorch check, gpu_e2e (graphs against launched steps, bitwise); then GPT-2 1.3B, Trellis alone,
# graphs on / off / on (the A/B on one GPU).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP" "$out/gpu_e2e.log" | head -30
echo "=== A/B $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16 --skip-torch"
for g in true false true; do
  timeout 80 $B --trellis-set train.cuda_graphs=$g --out "$out/ab_$g.md" > "$out/ab_$g.log" 2>&1; echo "graphs=$g exit $?"
  grep -hE "^\| [0-9]|rror" "$out/ab_$g.md" | head -3
done
echo "=== done $(date +%T)"
