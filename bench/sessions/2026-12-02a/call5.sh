#!/usr/bin/env bash
# Session call 5 (1×H200): gpu_e2e after the CUDA-graph review mends (graph cases bitwise against
# launched steps, resume, cuDNN, offload).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
timeout 240 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|rror" "$out/gpu_e2e.log" | head -30
echo "=== done $(date +%T)"
