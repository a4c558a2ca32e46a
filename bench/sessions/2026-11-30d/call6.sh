#!/usr/bin/env bash
# Session call 6 (2×H200), ~6 min of device time left: the CUDA parity tests and the PyTorch check
# after the layer-norm backward's partial stores moved into one helper (store_float4s).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
export CUDA_VISIBLE_DEVICES=0
echo "=== parity $(date +%T)"
timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -30
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== done $(date +%T)"
