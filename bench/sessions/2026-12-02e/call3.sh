#!/usr/bin/env bash
# Session call 3 (1×H200): the final code. CUDA parity (every op), gpu_e2e (GPU against CPU, CUDA
# graphs, resume, the cases with experts), and GPT-2 1.3B Trellis alone (the dense GEMMs' plans are
# keyed with the batch fields now; the step should be as before, ~228-234 ms).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 240 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -10
echo "=== gpu_e2e $(date +%T)"
timeout 300 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|experts" "$out/gpu_e2e.log" | head -8
echo "=== 1.3B $(date +%T)"
timeout 100 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch --models 1.3b \
  --micro-batch 16 --skip-torch 2>&1 | grep -E "^\| 1.3b"
echo "=== done $(date +%T)"
