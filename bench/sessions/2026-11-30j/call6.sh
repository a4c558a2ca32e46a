#!/usr/bin/env bash
# Session call 6 (1×H200): the CUDA parity tests and the PyTorch check after the review mends of the
# split masters (NaN kept, the -0.0 fill, set_values).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j16 --target ops_parity_test train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -20
grep -E "AdamWSplit" "$out/parity.log" | grep -E "OK|FAILED"
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== done $(date +%T)"
