#!/usr/bin/env bash
# Session call 2 (one GPU), call 1 trimmed to the device time left: the whole build, every CUDA test
# (Parity.RmsNorm new), gpu_e2e (width 90: GELU, and RMSNorm + rope + SwiGLU, new), then the
# PyTorch parity tests (torch_parity_llama new) and export_hf with transformers (n_inner 96 new).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_trellis
echo "=== ctest -L cuda $(date +%T) (${SECONDS}s)"
(cd build && timeout 200 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
grep -E "RmsNorm" "$out/ctest_cuda.log" | head -4
echo "=== gpu_e2e $(date +%T) (${SECONDS}s)"
timeout 200 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|width 90" "$out/gpu_e2e.log" | head -8
echo "=== torch parity, export_hf $(date +%T) (${SECONDS}s)"
(cd build && timeout 120 ctest -R "torch_parity|export_hf" --output-on-failure > "$out/torch_parity.log" 2>&1)
echo "exit $?"; grep -E "worst|transformers|n_inner|tests passed|Failed" "$out/torch_parity.log" | head -16
echo "=== done $(date +%T) (${SECONDS}s)"
