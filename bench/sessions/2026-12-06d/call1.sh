#!/usr/bin/env bash
# Session call 1 (one GPU): model.ffn_hidden_size on a GPU: the whole build, every CUDA test, the
# PyTorch reference's selftest (widths 40) and parity tests (torch_parity_ffn new: SwiGLU at width
# 88), export_hf with transformers (n_inner 96 new), gpu_e2e (width 90, SwiGLU and GELU, new).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|Failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
echo "=== torch selftest $(date +%T)"
timeout 120 python3 bench/torch_gpt.py --selftest 2>&1 | grep -E "F 40|rope:|FAIL|passed|failed" | head -12
echo "=== torch parity, export_hf $(date +%T)"
(cd build && timeout 240 ctest -R "torch_parity|export_hf" --output-on-failure > "$out/torch_parity.log" 2>&1)
echo "exit $?"; grep -E "worst|transformers|n_inner|tests passed|Failed" "$out/torch_parity.log" | head -16
echo "=== gpu_e2e $(date +%T)"
timeout 300 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|width 90" "$out/gpu_e2e.log" | head -8
echo "=== done $(date +%T)"
