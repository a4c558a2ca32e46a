#!/usr/bin/env bash
# Session call 1 (one GPU): SwiGLU MLPs (model.mlp = swiglu) and the session's checkpoint change on
# a GPU: the whole build, every CUDA test (label cuda: Parity.Swiglu new), the PyTorch reference's
# selftest and parity tests (torch_parity_swiglu new), gpu_e2e (SwiGLU cases new).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|Failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
build/tests/ops_parity_test --gtest_filter='*Swiglu*' 2>&1 | tail -3
echo "=== torch selftest $(date +%T)"
timeout 120 python3 bench/torch_gpt.py --selftest 2>&1 | grep -E "swiglu|rope|FAIL|passed|failed" | head -12
echo "=== torch parity $(date +%T)"
(cd build && timeout 240 ctest -R torch_parity --output-on-failure > "$out/torch_parity.log" 2>&1); echo "torch parity exit $?"
grep -E "worst|rel err|Passed|Failed|tests passed" "$out/torch_parity.log" | head -16
echo "=== gpu_e2e $(date +%T)"
timeout 300 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|SwiGLU" "$out/gpu_e2e.log" | head -6
echo "=== done $(date +%T)"
