#!/usr/bin/env bash
# Session call 1 (one GPU): grouped-query attention, the untied head, and the last session's unrun
# checks. The whole build; every CUDA test (Parity.AttentionGroupedQuery new: the unfused path, the
# flash kernels' dK/dV over a group, dropout, odd lengths; cuDNN's where it takes it; rotary and the
# KV cache with fewer key-value heads); gpu_e2e (Llama's block at width 90 with an untied head and 2
# key-value heads, new); the PyTorch parity tests (torch_parity_llama: untied, 2 key-value heads) and
# export_hf with transformers (untied new).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_trellis
echo "=== ctest -L cuda $(date +%T) (${SECONDS}s)"
(cd build && timeout 220 ctest -L cuda -j4 --output-on-failure > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
grep -E "GroupedQuery|cuDNN takes grouped" "$out/ctest_cuda.log" | head -8
grep -B2 -A8 "Failure" "$out/ctest_cuda.log" | head -60
echo "=== gpu_e2e $(date +%T) (${SECONDS}s)"
timeout 200 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|width 90" "$out/gpu_e2e.log" | head -8
echo "=== torch parity, export_hf $(date +%T) (${SECONDS}s)"
(cd build && timeout $((570 - SECONDS)) ctest -R "torch_parity|export_hf" --output-on-failure > "$out/torch_parity.log" 2>&1)
echo "exit $?"; grep -E "worst|transformers|n_inner|untied|tests passed|Failed" "$out/torch_parity.log" | head -16
echo "=== done $(date +%T) (${SECONDS}s)"
